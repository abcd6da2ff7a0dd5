"""The table of built-in functions by name, and the compile-time lookup into it.

Each family module declares its own functions next to their implementations; this module
only joins the families into one table, refusing two built-ins of the same name (a later
family would otherwise silently shadow an earlier one).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Final

from spool.server.expr.errors import FilterSyntaxError
from spool.server.expr.functions.arrays import ARRAY_FUNCTIONS
from spool.server.expr.functions.function import Function
from spool.server.expr.functions.message import MESSAGE_FUNCTIONS
from spool.server.expr.functions.numeric import NUMERIC_FUNCTIONS
from spool.server.expr.functions.scalars import SCALAR_FUNCTIONS
from spool.server.expr.functions.strings import STRING_FUNCTIONS
from spool.server.expr.functions.timestamps import TIME_FUNCTIONS


def _by_name(families: Iterable[tuple[Function, ...]]) -> dict[str, Function]:
    table: dict[str, Function] = {}
    for family in families:
        for fn in family:
            if fn.name in table:
                raise ValueError(f"two built-in functions are called {fn.name}")
            table[fn.name] = fn
    return table


FUNCTIONS: Final[dict[str, Function]] = _by_name(
    (
        STRING_FUNCTIONS,
        NUMERIC_FUNCTIONS,
        TIME_FUNCTIONS,
        ARRAY_FUNCTIONS,
        SCALAR_FUNCTIONS,
        MESSAGE_FUNCTIONS,
    )
)
"""Every built-in function by upper-case name (``IF`` is syntax: see the parser)."""


def lookup(name: str, pos: int, text: str) -> Function:
    """The function called ``name`` (any case), or a ``bad filter`` naming close matches."""
    fn = FUNCTIONS.get(name.upper())
    if fn is None:
        close = difflib.get_close_matches(name.upper(), [*FUNCTIONS, "IF"], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise FilterSyntaxError(f"unknown function {name!r}{hint}", pos, text)
    return fn
