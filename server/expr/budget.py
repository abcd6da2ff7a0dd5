"""The size budget of one expression: what compiling and evaluating it may cost.

A filter comes from a client, and it is compiled and evaluated on the event loop, so
what one filter may cost is bounded before any of that work is done:

- its text is at most :data:`TEXT_MAX` characters (refused before it is read);
- it has at most :data:`TOKENS_MAX` tokens (refused after the lexer, before the parser:
  the tree has at most one node per token, so this bounds the nodes, the ``IN`` lists
  and the closures compiled from them);
- its nesting is at most :data:`~spool.server.expr.ast.MAX_DEPTH` levels (the parser);
- its regular expressions (``LIKE``, ``REGEXP_MATCH`` with a literal pattern) compile to
  at most :data:`REGEX_PROGRAM_MAX` instructions in all (each one at most
  :data:`spool.server.regex.PROGRAM_MAX`): a search costs about that many steps per character
  of the text searched, and the patterns are compiled as the parser meets them, so the
  total is checked after each one;
- the string functions that can make a string longer than their inputs (``REPLACE``,
  ``ARRAY_TO_STRING``) give NULL rather than a string longer than both
  :data:`BUILD_MAX` characters and their longest input, so no chain of them can build a
  string exponentially long (at compile time, when constants are folded, or per message).

Each value an evaluation computes is read once, by its parent node, so with those
bounds an evaluation costs at most in the order of ``tokens x depth x (the body, the
filter text, BUILD_MAX)``, and a compilation in the order of ``tokens`` plus the
regular expressions' compilation, whatever the input. The property tests measure both
in work units (function calls and bytes allocated), never in seconds.
"""

from __future__ import annotations

from typing import Final

from spool.server.expr.errors import FilterSyntaxError

__all__ = [
    "BUILD_MAX",
    "REGEX_PROGRAM_MAX",
    "TEXT_MAX",
    "TOKENS_MAX",
    "built",
    "check_regex_total",
    "check_text",
    "check_tokens",
]

#: the longest expression text, in characters
TEXT_MAX: Final = 128 * 1024
#: the most tokens of an expression (``/x IN (1, 2, 3)`` has 9; an IN list of 25,000 values
#: fits)
TOKENS_MAX: Final = 50_000
#: instructions of all the regular expressions of one expression together
REGEX_PROGRAM_MAX: Final = 16_000
#: the longest string ``REPLACE`` or ``ARRAY_TO_STRING`` builds beyond their longest input
BUILD_MAX: Final = 64 * 1024


def check_text(text: str) -> None:
    """Refuse a text longer than :data:`TEXT_MAX` (before it is read at all)."""
    if len(text) > TEXT_MAX:
        raise FilterSyntaxError(
            f"the filter is {len(text)} characters long, more than {TEXT_MAX}", 1, text[:200]
        )


def check_tokens(count: int, text: str) -> None:
    """Refuse an expression of more than :data:`TOKENS_MAX` tokens (before parsing)."""
    if count > TOKENS_MAX:
        raise FilterSyntaxError(
            f"the filter has {count} tokens (values, names, operators), more than "
            f"{TOKENS_MAX}: use fewer terms or shorter IN lists",
            1,
            text,
        )


def check_regex_total(total: int, pos: int, text: str) -> None:
    """Refuse an expression whose regular expressions compile to more than
    :data:`REGEX_PROGRAM_MAX` instructions together."""
    if total > REGEX_PROGRAM_MAX:
        raise FilterSyntaxError(
            f"the regular expressions of the filter compile to {total} instructions in "
            f"all, more than {REGEX_PROGRAM_MAX}",
            pos,
            text,
        )


def built(size: int, inputs: int) -> bool:
    """Whether a string function may return a string of ``size`` characters made from
    inputs of which the longest has ``inputs`` characters (see :data:`BUILD_MAX`)."""
    return size <= BUILD_MAX or size <= inputs
