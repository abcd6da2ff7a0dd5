"""Option values with ``{{VARIABLE}}`` references: parsed once at load, expanded per run.

An action's options may use the variables of its context (AMPS "Actions": the instance
name, the time, what the trigger and earlier modules added). ``{{NAME}}`` (spaces inside
the braces allowed) is replaced by the variable's value; ``{{AMPS_BYTE_XX}}`` by the byte
``XX`` (two hex digits), for characters XML cannot hold. A ``{{`` that does not start a
reference is an error at load time, so a typo is never sent out as text.

Expansion can escape what it inserts (a JSON body gets JSON-escaped values, so a value
with a quote cannot break the document it is put in). Sans-I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["BYTE_PREFIX", "Template", "TemplateError", "is_byte_variable"]

#: ``{{AMPS_BYTE_XX}}`` inserts the byte XX.
BYTE_PREFIX: Final = "AMPS_BYTE_"
_REFERENCE: Final = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_BYTE: Final = re.compile(r"AMPS_BYTE_([0-9A-F]{2})")


class TemplateError(ValueError):
    """A ``{{`` that does not start a ``{{NAME}}`` reference."""


@dataclass(frozen=True, slots=True)
class Template:
    """A value split into literal text and variable references.

    Attributes:
        text: the value as written.
        parts: alternating literal text (even indexes) and variable names (odd indexes).
    """

    text: str
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Template:
        """Split ``text``.

        Raises:
            TemplateError: a malformed reference (the message quotes it).
        """
        parts: list[str] = []
        pos = 0
        for match in _REFERENCE.finditer(text):
            literal = text[pos : match.start()]
            _check_literal(literal)
            parts.extend((literal, match.group(1)))
            pos = match.end()
        tail = text[pos:]
        _check_literal(tail)
        parts.append(tail)
        return cls(text, tuple(parts))

    @property
    def variables(self) -> tuple[str, ...]:
        """The names referenced, in order (``AMPS_BYTE_XX`` included)."""
        return self.parts[1::2]

    @property
    def constant(self) -> bool:
        """No reference: the value is the text itself."""
        return len(self.parts) == 1

    def expand(
        self, variables: Mapping[str, str], escape: Callable[[str], str] | None = None
    ) -> str:
        """The value with every reference replaced.

        An unknown variable expands to the empty string (AMPS); the loader refuses names
        no trigger or module defines, so that happens only for variables inherited from
        a raised event. ``escape`` is applied to every inserted value.
        """
        out: list[str] = []
        for i, part in enumerate(self.parts):
            if i % 2 == 0:
                out.append(part)
                continue
            byte = _BYTE.fullmatch(part)
            value = chr(int(byte.group(1), 16)) if byte else variables.get(part, "")
            out.append(escape(value) if escape is not None else value)
        return "".join(out)


def _check_literal(literal: str) -> None:
    start = literal.find("{{")
    if start >= 0:
        shown = literal[start : start + 24]
        raise TemplateError(
            f"{shown!r} is not a variable reference: write {{{{NAME}}}} with a name of letters, "
            "digits and _ (not starting with a digit)"
        )


def is_byte_variable(name: str) -> bool:
    """Whether ``name`` is an ``AMPS_BYTE_XX`` reference (always defined)."""
    return _BYTE.fullmatch(name) is not None
