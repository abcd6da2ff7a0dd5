"""The expression language of content filters (sans-I/O), modelled on AMPS expressions.

Subscriptions, SOW queries, replication topic filters, queue barrier expressions and the
Spark journal search all use it. The engine's view of it is small::

    flt = compile_filter("/qty > 100 AND /sym = 'IBM'")   # raises FilterSyntaxError
    view = MessageView(topic, body, bookmark=bm, client_name=publisher)   # one per message
    if flt.matches(view): ...                             # body parsed at most once

Modules, lowest first (each imports only those above it; the ``layers`` contract in
pyproject.toml keeps it so)::

    values.py       the coercion and comparison rules (NULL, numbers, strings, arrays)
    errors.py       FilterSyntaxError (a BadFilter)
    budget.py       what one expression may cost: text, tokens, regular expressions
    ast.py          the tree the parser builds
    view.py         MessageView: the message, its body parsed on first field access
    lexer.py        text -> tokens
    functions/      the built-ins (one module per family; see its docstring)
    parser.py       tokens -> tree, checking names, arities and literal patterns
    reference.py    the tree-walking evaluator, the oracle of the differential tests
    closures.py     the closures compiled expressions are made of (fields, AND/OR chains)
    comparisons.py  ``field OP constant`` from generated source; other comparisons
    folding.py      constant sub-expressions, folded by the reference evaluator
    compiler.py     Compiler: tree -> closures, in value / "is TRUE" / "is FALSE" modes
    compiled.py     Filter, ValueExpr: what callers hold (matches, select, evaluate)
    cache.py        compile_filter, compile_value and their LRU caches

The language itself is documented in docs/filters.md.
"""

from __future__ import annotations

from spool.server.expr.cache import (
    CACHE_SIZE,
    cache_sizes,
    clear_caches,
    compile_filter,
    compile_value,
    is_known,
)
from spool.server.expr.compiled import Filter, ValueExpr
from spool.server.expr.errors import FilterSyntaxError
from spool.server.expr.functions import FUNCTIONS
from spool.server.expr.parser import parse
from spool.server.expr.reference import evaluate_reference
from spool.server.expr.view import MessageView

__all__ = [
    "CACHE_SIZE",
    "FUNCTIONS",
    "Filter",
    "FilterSyntaxError",
    "MessageView",
    "ValueExpr",
    "cache_sizes",
    "clear_caches",
    "compile_filter",
    "compile_value",
    "evaluate_reference",
    "is_known",
    "parse",
]
