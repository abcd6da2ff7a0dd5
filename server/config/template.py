"""Option values with ``{{VARIABLE}}`` references: parsed once at load, expanded per run.

An action's options may use the variables of its context (AMPS "Actions": the instance
name, the time, what the trigger and earlier modules added). ``{{NAME}}`` (spaces inside
the braces allowed) is replaced by the variable's value; ``{{AMPS_BYTE_XX}}`` by the byte
``XX`` (two hex digits), for characters XML cannot hold. A ``{{`` that does not start a
reference is an error at load time, so a typo is never sent out as text.

Expansion can escape what it inserts. A JSON body is expanded with
:meth:`Template.expand_json`, which knows from the literal text where each reference sits:
inside a JSON string the value is JSON-escaped (a value with a quote cannot break the
document it is put in); in a value position it is inserted as is, so a number, a boolean
or a whole JSON document can be put there. Sans-I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import orjson

__all__ = ["BYTE_PREFIX", "Template", "TemplateError", "is_byte_variable", "json_escape"]

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
        in_string: per reference (in the order of :attr:`variables`), whether it sits inside
            a JSON string of the literal text; :meth:`expand_json` escapes exactly those.
    """

    text: str
    parts: tuple[str, ...]
    in_string: tuple[bool, ...]

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
        return cls(text, tuple(parts), _string_positions(parts))

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
            value = _value(part, variables)
            out.append(escape(value) if escape is not None else value)
        return "".join(out)

    def expand_json(self, variables: Mapping[str, str]) -> str:
        """The value as a JSON body: references inside strings escaped, others raw.

        A reference inside a JSON string of the literal text gets its value JSON-escaped,
        so any text fits there. A reference elsewhere (a value position, as in
        ``{"qty":{{QTY}}}``) gets its value as is: it must be JSON there (a number, ``true``,
        a whole document), and whether the result is JSON is for the caller to check.

        A body that is JSON with every value escaped (``expand`` with :func:`json_escape`)
        expands to the same text: a value that escaping changes gains a backslash, and a
        backslash outside a string is never JSON, so outside the strings of such a body
        every value is one escaping leaves alone (a number, ``true``, ``false``, ``null``).
        """
        out: list[str] = []
        for i, part in enumerate(self.parts):
            if i % 2 == 0:
                out.append(part)
                continue
            value = _value(part, variables)
            out.append(json_escape(value) if self.in_string[i // 2] else value)
        return "".join(out)


def json_escape(value: str) -> str:
    """``value`` as the inside of a JSON string (quotes, backslashes, controls escaped)."""
    return orjson.dumps(value).decode()[1:-1]


def _value(name: str, variables: Mapping[str, str]) -> str:
    byte = _BYTE.fullmatch(name)
    return chr(int(byte.group(1), 16)) if byte else variables.get(name, "")


def _string_positions(parts: list[str]) -> tuple[bool, ...]:
    """Per reference, whether it sits inside a JSON string of the literal text.

    One scan over the literal parts, tracking whether a ``"`` has opened a string and
    whether a backslash escapes the next character; a reference counts as one opaque
    piece of what surrounds it (an escaped value inside a string, a whole JSON value
    outside), so it changes neither. A reference right after a backslash inside a string
    makes the escape depend on the value; from there on the scan cannot tell, so that
    reference and every later one count as inside a string (escaped, the safe choice).
    """
    inside = escaped = lost = False
    positions: list[bool] = []
    for i, part in enumerate(parts):
        if i % 2 == 1:
            lost = lost or escaped
            escaped = False
            positions.append(inside or lost)
            continue
        for ch in part:
            if escaped:
                escaped = False
            elif inside and ch == "\\":
                escaped = True
            elif ch == '"':
                inside = not inside
    return tuple(positions)


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
