"""The expression language of content filters (sans-I/O), modelled on AMPS expressions.

Subscriptions, SOW queries, replication topic filters, queue barrier expressions and the
Spark journal search all use it. The engine's view of it is small::

    flt = compile_filter("/qty > 100 AND /sym = 'IBM'")   # raises FilterSyntaxError
    view = MessageView(topic, body, bookmark=bm, client_name=publisher)   # one per message
    if flt.matches(view): ...                             # body parsed at most once

Modules: ``lexer`` (text -> tokens), ``parser`` (tokens -> ``ast``), ``values`` (the
coercion and comparison rules), ``functions`` (built-ins), ``reference`` (tree-walking
evaluator, the oracle), ``compiler`` (closures, caches), ``view`` (the lazily parsed
message), ``errors``. The language itself is documented in docs/filters.md.
"""

from __future__ import annotations

from server.expr.compiler import (
    CACHE_SIZE,
    Filter,
    ValueExpr,
    cache_sizes,
    clear_caches,
    compile_filter,
    compile_value,
)
from server.expr.errors import FilterSyntaxError
from server.expr.functions import FUNCTIONS
from server.expr.parser import parse
from server.expr.reference import evaluate_reference
from server.expr.view import MessageView

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
    "parse",
]
