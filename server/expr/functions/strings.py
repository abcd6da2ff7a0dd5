"""String functions: comparison (``INSTR``, ``STARTS_WITH``, ``REGEXP_MATCH``...) and
manipulation (``CONCAT``, ``SUBSTR``, ``TRIM``...).

Arguments go through :func:`~spool.server.expr.values.to_text`, so a number is searched or cut
as its shortest decimal text, and a NULL argument gives NULL (``CONCAT`` alone skips
NULLs). Positions are 1-based, as in SQL and AMPS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from spool.server.expr.ast import Call
from spool.server.expr.ast import Literal as LiteralNode
from spool.server.expr.budget import built
from spool.server.expr.functions.function import Function
from spool.server.expr.functions.regex import cached_regex, compile_regex
from spool.server.expr.values import Value, to_integer, to_text

# --- string comparison -------------------------------------------------------------------


def _instr(s: Value, sub: Value) -> int | None:
    a, b = to_text(s), to_text(sub)
    if a is None or b is None:
        return None
    return a.find(b) + 1


def _instr_i(s: Value, sub: Value) -> int | None:
    a, b = to_text(s), to_text(sub)
    if a is None or b is None:
        return None
    return a.lower().find(b.lower()) + 1


def _strequal_i(x: Value, y: Value) -> bool | None:
    a, b = to_text(x), to_text(y)
    if a is None or b is None:
        return None
    return a.lower() == b.lower()


def _starts_with(s: Value, prefix: Value) -> bool | None:
    a, b = to_text(s), to_text(prefix)
    if a is None or b is None:
        return None
    return a.startswith(b)


def _ends_with(s: Value, suffix: Value) -> bool | None:
    a, b = to_text(s), to_text(suffix)
    if a is None or b is None:
        return None
    return a.endswith(b)


def _contains(s: Value, sub: Value) -> bool | None:
    a, b = to_text(s), to_text(sub)
    if a is None or b is None:
        return None
    return b in a


def _regexp_match(s: Value, pattern: Value) -> bool | None:
    a, p = to_text(s), to_text(pattern)
    if a is None or p is None:
        return None
    rx = cached_regex(p)
    if rx is None:
        return None
    return rx.test(a)


def _check_regexp_match(call: Call, text: str) -> int:
    """A literal pattern is compiled with the filter: the instructions of its program."""
    pattern = call.args[1]
    if isinstance(pattern, LiteralNode) and isinstance(pattern.value, str):
        return compile_regex(pattern.value, pattern.pos, text, "REGEXP_MATCH").program_size
    return 0


# --- string manipulation -----------------------------------------------------------------


def _concat(*args: Value) -> str:
    parts = [to_text(a) for a in args]
    return "".join(p for p in parts if p is not None)


def _upper(s: Value) -> str | None:
    a = to_text(s)
    return None if a is None else a.upper()


def _lower(s: Value) -> str | None:
    a = to_text(s)
    return None if a is None else a.lower()


def _replace(s: Value, old: Value, new: Value) -> str | None:
    a, b, c = to_text(s), to_text(old), to_text(new)
    if a is None or b is None or c is None:
        return None
    if not b:
        return a
    if len(c) > len(b):
        # the length is known before the string is built (server/expr/budget.py)
        size = len(a) + a.count(b) * (len(c) - len(b))
        if not built(size, max(len(a), len(c))):
            return None
    return a.replace(b, c)


def _substr(s: Value, pos: Value, *length: Value) -> str | None:
    a = to_text(s)
    p = to_integer(pos)
    if a is None or p is None:
        return None
    n = len(a)
    start = p - 1 if p > 0 else max(n + p, 0) if p < 0 else 0
    if not length:
        return a[start:]
    k = to_integer(length[0])
    if k is None:
        return None
    if k <= 0:
        return ""
    return a[start : start + k]


def _length(s: Value) -> int | None:
    a = to_text(s)
    return None if a is None else len(a)


def _trimmer(method: str) -> Callable[..., str | None]:
    def trim(s: Value, *chars: Value) -> str | None:
        a = to_text(s)
        if a is None:
            return None
        if not chars:
            return getattr(a, method)()  # type: ignore[no-any-return]
        c = to_text(chars[0])
        if c is None:
            return None
        return getattr(a, method)(c)  # type: ignore[no-any-return]

    return trim


def _reverse(s: Value) -> str | None:
    a = to_text(s)
    return None if a is None else a[::-1]


STRING_FUNCTIONS: Final[tuple[Function, ...]] = (
    # comparison
    Function("INSTR", 2, 2, _instr, summary="1-based position of a substring, 0 if absent"),
    Function("INSTR_I", 2, 2, _instr_i, summary="INSTR ignoring case"),
    Function("STREQUAL_I", 2, 2, _strequal_i, summary="string equality ignoring case"),
    Function("STARTS_WITH", 2, 2, _starts_with, summary="whether a string starts with a prefix"),
    Function("ENDS_WITH", 2, 2, _ends_with, summary="whether a string ends with a suffix"),
    Function("CONTAINS", 2, 2, _contains, summary="whether a string contains a substring"),
    Function(
        "REGEXP_MATCH",
        2,
        2,
        _regexp_match,
        summary="whether a regular expression matches anywhere in a string",
        check=_check_regexp_match,
    ),
    # manipulation
    Function("CONCAT", 1, None, _concat, summary="concatenation; NULL arguments are skipped"),
    Function("UPPER", 1, 1, _upper, summary="upper case"),
    Function("LOWER", 1, 1, _lower, summary="lower case"),
    Function("REPLACE", 3, 3, _replace, summary="replace every occurrence of a substring"),
    Function("SUBSTR", 2, 3, _substr, summary="substring from a 1-based position"),
    Function("LENGTH", 1, 1, _length, summary="number of characters"),
    Function(
        "LTRIM", 1, 2, _trimmer("lstrip"), summary="strip leading blanks (or given characters)"
    ),
    Function(
        "RTRIM", 1, 2, _trimmer("rstrip"), summary="strip trailing blanks (or given characters)"
    ),
    Function("TRIM", 1, 2, _trimmer("strip"), summary="strip both ends"),
    Function("REVERSE", 1, 1, _reverse, summary="characters in reverse order"),
)
"""The string functions, in the order docs/filters.md lists them."""
