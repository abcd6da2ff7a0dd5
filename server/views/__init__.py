"""Views (sans-I/O): topics whose records are computed from an underlying SOW topic by a
projection with grouping, kept up to date change by change (docs/views.md).

    definition = parse_definition(
        ["/desk", "SUM(/qty) AS /position", "COUNT(*) AS /fills"],   # the projection
        ["/desk"],                                                    # the grouping
        "/status = 'filled'",                                        # optional filter
    )                                             # raises ViewDefinitionError
    engine = ViewEngine(definition, "orders")
    engine.load(store.records())                  # at start-up
    for vc in engine.apply(change):               # per change of the underlying topic
        ...                                       # vc.key, vc.body (None: group gone)

Modules, lowest first (the ``layers`` contract in pyproject.toml keeps it so)::

    errors.py       ViewDefinitionError
    numbers.py      aggregate inputs, exact sums, numbers JSON can hold
    heap.py         an indexed heap (MIN and MAX under deletes)
    aggregates.py   the per-group state of COUNT, SUM, AVG, MIN, MAX
    definition.py   parse_definition: projection, grouping, filter -> ViewDefinition
    engine.py       ViewEngine: underlying changes in, view changes out
"""

from __future__ import annotations

from spool.server.views.definition import (
    AGGREGATE_FUNCTIONS,
    Aggregate,
    OutputItem,
    ViewDefinition,
    parse_definition,
)
from spool.server.views.engine import MAX_GROUP_KEY_CHARS, ViewChange, ViewEngine, group_key
from spool.server.views.errors import ViewDefinitionError

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "MAX_GROUP_KEY_CHARS",
    "Aggregate",
    "OutputItem",
    "ViewChange",
    "ViewDefinition",
    "ViewDefinitionError",
    "ViewEngine",
    "group_key",
    "parse_definition",
]
