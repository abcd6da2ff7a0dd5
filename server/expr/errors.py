"""The one failure of the expression language: a filter that cannot be compiled.

Hierarchy::

    spool.server.protocol.errors.BadFilter     wire reason "bad filter"
    └── FilterSyntaxError                 carries .position (1-based column) and .message

Everything wrong with the *text* of an expression (a lexical error, a grammar error, an
unknown function, a wrong number of arguments, a bad regular expression in ``LIKE``, an
expression nested too deeply) is a :class:`FilterSyntaxError` raised by the compiler, so the
session can answer the subscribe with a ``bad filter`` failure ack that tells the person
where and what. Problems that depend on the *data* (division by zero, a string where a
number is needed) never raise: they evaluate to NULL (see docs/filters.md).
"""

from __future__ import annotations

from spool.server.protocol.errors import BadFilter


class FilterSyntaxError(BadFilter):
    """An expression that cannot be compiled.

    Attributes:
        position: 1-based column (character offset + 1) in the expression text where the
            problem was found; ``len(text) + 1`` when the text ended too early.
        message: what is wrong, phrased so a person can fix it, without the position
            (``str(error)`` adds it: ``bad filter: expected a value after '=' at column 12``).
        text: the expression text (may be empty when unknown).
    """

    def __init__(self, message: str, position: int, text: str = "") -> None:
        super().__init__(f"{message} at column {position}")
        self.message = message
        self.position = position
        self.text = text

    def pointer(self) -> str:
        """The expression with a caret line under the offending column, for logs and CLIs."""
        if not self.text:
            return ""
        line = self.text.replace("\n", " ").replace("\r", " ").replace("\t", " ")
        return f"{line}\n{' ' * (self.position - 1)}^"
