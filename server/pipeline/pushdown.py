"""Spark's pushed filters -> a :class:`~spool.server.pipeline.predicate.ScanPredicate`.

Spark offers the source the conjuncts of a query's WHERE clause (``pushFilters``). The
ones on ``seq``, ``timestamp``, ``topic``, ``publisher_id`` and ``kind`` that a predicate
can express exactly are taken: the planner prunes index blocks with them and the scanner
applies them to each record's header, so Spark does not evaluate them again. Anything else
(other columns, ``NOT``, ``LIKE '%x'``, NULL tests) is handed back to Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from spool.server.pipeline.predicate import KIND_CODES, ScanPredicate

__all__ = ["push_filters"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


def _integer(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    return None


def _micros(value: object) -> int | None:
    if not isinstance(value, datetime):
        return None
    moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _range(p: ScanPredicate, f: Filter, value: int, column: str) -> ScanPredicate | None:
    lo: int | None
    hi: int | None
    if isinstance(f, EqualTo):
        lo = hi = value
    elif isinstance(f, GreaterThan):
        lo, hi = value + 1, None
    elif isinstance(f, GreaterThanOrEqual):
        lo, hi = value, None
    elif isinstance(f, LessThan):
        lo, hi = None, value - 1
    elif isinstance(f, LessThanOrEqual):
        lo, hi = None, value
    else:
        return None
    if column == "timestamp":
        return p.times(lo, hi)
    return p.seqs(lo if lo is not None else 0, hi if hi is not None else p.seq_hi)


def _one(p: ScanPredicate, f: Filter) -> ScanPredicate | None:
    """``p`` narrowed by ``f``, or None when ``f`` is not something a predicate holds."""
    attr: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attr) != 1:
        return None
    column = attr[0]
    value = getattr(f, "value", None)
    if column == "seq" and isinstance(f, _COMPARISONS):
        n = _integer(value)
        return None if n is None else _range(p, f, n, "seq")
    if column == "seq" and isinstance(f, In):
        ns = [_integer(v) for v in f.value]
        if not ns or any(n is None for n in ns):
            return None
        known = [n for n in ns if n is not None]
        return p.seqs(min(known), max(known)) if len(set(known)) == 1 else None
    if column == "timestamp" and isinstance(f, _COMPARISONS):
        us = _micros(value)
        return None if us is None else _range(p, f, us, "timestamp")
    if column == "topic":
        if isinstance(f, EqualTo) and isinstance(value, str):
            return p.only_topics(frozenset([value]))
        if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
            return p.only_topics(frozenset(f.value))
        if isinstance(f, StringStartsWith) and isinstance(value, str):
            return p.prefix(value)
        return None
    if column == "publisher_id":
        if isinstance(f, EqualTo):
            n = _integer(value)
            return None if n is None else p.only_publishers(frozenset([n]))
        if isinstance(f, In):
            ids = [_integer(v) for v in f.value]
            if any(i is None for i in ids):
                return None
            return p.only_publishers(frozenset(i for i in ids if i is not None))
        return None
    if column == "kind":
        if isinstance(f, EqualTo) and isinstance(value, str):
            return p.only_kinds(
                frozenset([KIND_CODES[value]]) if value in KIND_CODES else frozenset()
            )
        if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
            return p.only_kinds(frozenset(KIND_CODES[v] for v in f.value if v in KIND_CODES))
        return None
    return None


def push_filters(
    predicate: ScanPredicate, filters: Iterable[Filter]
) -> tuple[ScanPredicate, list[Filter]]:
    """Take what a predicate can express exactly.

    Returns:
        ``(narrowed predicate, the filters Spark must still evaluate)``; the latter are
        the input objects themselves (Spark matches them by identity).
    """
    rest: list[Filter] = []
    for f in filters:
        narrowed = _one(predicate, f)
        if narrowed is None:
            rest.append(f)
        else:
            predicate = narrowed
    return predicate, rest
