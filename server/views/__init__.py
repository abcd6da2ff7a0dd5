"""Views (sans-I/O): topics whose records are computed from an underlying SOW topic by a
projection with grouping, kept up to date change by change (docs/views.md).

    definition = parse_definition(
        ["/desk", "SUM(/qty) AS /position", "COUNT(*) AS /fills"],   # the projection
        ["/desk"],                                                    # the grouping
        "/status = 'filled'",                                        # optional filter
    )                                             # raises ViewDefinitionError

Modules, lowest first (the ``layers`` contract in pyproject.toml keeps it so)::

    errors.py       ViewDefinitionError
    definition.py   parse_definition: projection, grouping, filter -> ViewDefinition
"""

from __future__ import annotations

from spool.server.views.definition import (
    AGGREGATE_FUNCTIONS,
    Aggregate,
    OutputItem,
    ViewDefinition,
    parse_definition,
)
from spool.server.views.errors import ViewDefinitionError

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "Aggregate",
    "OutputItem",
    "ViewDefinition",
    "ViewDefinitionError",
    "parse_definition",
]
