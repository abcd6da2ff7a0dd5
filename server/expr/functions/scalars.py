"""NULL handling, checksums and typed values: ``COALESCE``, ``CRC32``, ``TRUE_VALUE``,
``FALSE_VALUE``, ``NAN_VALUE``, ``CHAR_VALUE``.

The typed-value functions exist because the language has no literal for a boolean, NaN or
an arbitrary character; ``CRC32`` is there for sharding (``CRC32(/id) % 4 = 0``) and must
give the same number as zlib everywhere.
"""

from __future__ import annotations

import math
import zlib
from typing import Final

from spool.server.expr.functions.function import Function
from spool.server.expr.values import Value, is_null, to_integer, to_text


def _coalesce(*args: Value) -> Value:
    for a in args:
        if not is_null(a):
            return a
    return None


def _crc32(x: Value) -> int | None:
    s = to_text(x)
    return None if s is None else zlib.crc32(s.encode("utf-8")) & 0xFFFFFFFF


def _char_value(x: Value) -> str | None:
    n = to_integer(x)
    if n is None or not 0 <= n <= 255:
        return None
    return chr(n)


SCALAR_FUNCTIONS: Final[tuple[Function, ...]] = (
    Function("COALESCE", 1, None, _coalesce, summary="first argument that is not NULL"),
    Function("CRC32", 1, 1, _crc32, summary="CRC-32 (IEEE) of the UTF-8 text, unsigned"),
    Function("TRUE_VALUE", 0, 0, lambda: True, summary="boolean true"),
    Function("FALSE_VALUE", 0, 0, lambda: False, summary="boolean false"),
    Function("NAN_VALUE", 0, 0, lambda: math.nan, summary="not-a-number"),
    Function("CHAR_VALUE", 1, 1, _char_value, summary="the character with a code 0-255"),
)
"""The NULL-handling, checksum and typed-value functions, in the order of docs/filters.md."""
