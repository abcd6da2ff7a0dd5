"""The one failure of a view definition: text that does not define a view.

A :class:`ViewDefinitionError` says which part of the definition is wrong (a projection
item, a grouping field, the filter) and what to write instead, so a configuration
loader can report it next to the element it came from. Problems of the *data* (a field
missing from a record, a string where a number is summed) never raise: they have a
defined meaning (docs/views.md).
"""

from __future__ import annotations


class ViewDefinitionError(ValueError):
    """A view definition that cannot be compiled.

    Attributes:
        part: which part is wrong: ``projection``, ``grouping`` or ``filter``.
        text: the text of the item at fault (empty when the part as a whole is wrong).
        message: what is wrong, for a person, without ``part`` and ``text``.
    """

    def __init__(self, part: str, text: str, message: str) -> None:
        where = f"{part} {text!r}" if text else part
        super().__init__(f"bad view {where}: {message}")
        self.part = part
        self.text = text
        self.message = message
