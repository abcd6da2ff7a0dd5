"""The built-in functions of the expression language.

Function names are case-insensitive. Unless a function is marked ``arrays``, an array
argument is replaced by its first element before the call (the AMPS rule). Every
implementation is total: a NULL argument gives NULL unless the function says otherwise,
and any data problem gives NULL instead of raising (:func:`invoke` enforces that for both
evaluators). Functions are ``pure``, ``message`` or ``clock`` by what they read. The names
the parser, the evaluators and callers use are importable from
``spool.server.expr.functions`` itself. See docs/filters.md "Functions" for the kinds and
the map of this package's modules.
"""

from __future__ import annotations

from spool.server.expr.functions.function import RUNTIME_ERRORS, Function, Kind, invoke
from spool.server.expr.functions.regex import compile_regex
from spool.server.expr.functions.registry import FUNCTIONS, lookup
from spool.server.expr.functions.timestamps import UNITS, format_time, parse_time, to_epoch

__all__ = [
    "FUNCTIONS",
    "RUNTIME_ERRORS",
    "UNITS",
    "Function",
    "Kind",
    "compile_regex",
    "format_time",
    "invoke",
    "lookup",
    "parse_time",
    "to_epoch",
]
