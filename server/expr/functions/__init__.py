"""The built-in functions of the expression language.

Function names are case-insensitive. Unless a function is marked ``arrays``, it is not
array aware: an array argument is replaced by its first element before the call (the AMPS
rule). Every implementation is total: a NULL argument gives NULL unless the function says
otherwise (``COALESCE``, ``CONCAT``, ``ARRAY_COUNT``), and any data problem (a string where
a number is needed, a number out of range) gives NULL instead of raising -- :func:`invoke`
enforces that for both evaluators.

Three kinds of functions exist: ``pure`` ones depend only on their arguments (the compiler
folds them when the arguments are constants), ``message`` ones read the message being
filtered (``TOPIC()``, ``BOOKMARK()``, ``TIMESTAMP()``, ``CLIENT_NAME()``), and ``clock``
ones read the injected :class:`~spool.server.clock.Clock` (``NOW()``, ``UNIX_TIMESTAMP()``).

Modules, lowest first (each imports only those above it)::

    function.py    Function, Kind, invoke, RUNTIME_ERRORS
                                      one built-in and the one way to call it
    regex.py       compile_regex, cached_regex
                                      patterns of LIKE and REGEXP_MATCH
    strings.py     STRING_FUNCTIONS   INSTR ... REGEXP_MATCH, CONCAT ... REVERSE
    numeric.py     NUMERIC_FUNCTIONS  ABS ... EXP
    timestamps.py  TIME_FUNCTIONS     NOW ... DATEDIFF; parse_time, format_time,
                                      to_epoch, UNITS
    arrays.py      ARRAY_FUNCTIONS    ARRAY_COUNT ... ARRAY_TO_STRING
    scalars.py     SCALAR_FUNCTIONS   COALESCE, CRC32, TRUE_VALUE ... CHAR_VALUE
    message.py     MESSAGE_FUNCTIONS  TOPIC, BOOKMARK, TIMESTAMP, CLIENT_NAME
    registry.py    FUNCTIONS, lookup  the families joined into one table by name

The names the parser, the evaluators and callers use are importable from
``spool.server.expr.functions`` itself.
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
