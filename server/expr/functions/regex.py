"""Regular expressions of ``LIKE`` and ``REGEXP_MATCH``, matched in linear time (RE2).

A pattern written in the filter is compiled with the filter (:func:`compile_regex`), so a
bad one, or one using a construct RE2 cannot match in linear time (a backreference, a
lookaround: server/regex.py names it), is a ``bad filter`` that says what is wrong and
where. A pattern that comes from the data (``REGEXP_MATCH(/s, /pattern)``) is compiled
when the message is evaluated (:func:`cached_regex`): a bad one is NULL, and a small cache
keeps a pattern repeated across messages from being recompiled for each.
"""

from __future__ import annotations

import functools

from spool.server.expr.errors import FilterSyntaxError
from spool.server.regex import Regex, RegexRefused
from spool.server.regex import compile_regex as compile_linear


@functools.lru_cache(maxsize=512)
def cached_regex(pattern: str) -> Regex | None:
    """The compiled pattern, or None when it is refused (invalid, unsupported, too large)."""
    try:
        return compile_linear(pattern)
    except RegexRefused:
        return None


def compile_regex(pattern: str, node_pos: int, text: str, what: str) -> Regex:
    """Compile a literal pattern at compile time, or raise a ``bad filter`` that says why."""
    try:
        return compile_linear(pattern)
    except RegexRefused as exc:
        raise FilterSyntaxError(
            f"bad regular expression in {what}: {exc.reason}", node_pos, text
        ) from None
