"""Regular expressions of ``LIKE`` and ``REGEXP_MATCH``.

A pattern written in the filter is compiled with the filter (:func:`compile_regex`), so a
bad one is a ``bad filter`` that says what is wrong and where. A pattern that comes from
the data (``REGEXP_MATCH(/s, /pattern)``) is compiled when the message is evaluated
(:func:`cached_regex`): a bad one is NULL, and a small cache keeps a pattern repeated
across messages from being recompiled for each.
"""

from __future__ import annotations

import functools
import re

from server.expr.errors import FilterSyntaxError


@functools.lru_cache(maxsize=512)
def cached_regex(pattern: str) -> re.Pattern[str] | None:
    """The compiled pattern, or None when it is invalid or too complex to compile."""
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


def compile_regex(pattern: str, node_pos: int, text: str, what: str) -> re.Pattern[str]:
    """Compile a literal pattern at compile time, or raise a ``bad filter`` that says why."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        where = f" (at offset {exc.pos} of the pattern)" if exc.pos is not None else ""
        raise FilterSyntaxError(
            f"bad regular expression in {what}: {exc.msg}{where}", node_pos, text
        ) from exc
    except (RecursionError, OverflowError) as exc:
        raise FilterSyntaxError(
            f"bad regular expression in {what}: too complex", node_pos, text
        ) from exc
