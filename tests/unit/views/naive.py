"""A view computed from scratch, as plainly as possible: the oracle of the engine.

It reads every record, groups them in lists and computes each aggregate over its list
with exact rationals (``fractions.Fraction``); expressions go through the tree-walking
reference evaluator, not the compiled closures the engine uses. Nothing is incremental.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import orjson

from spool.server.expr import MessageView
from spool.server.expr.parser import parse
from spool.server.expr.reference import evaluate_node
from spool.server.expr.values import is_null, resolve, to_number, truth
from spool.server.views import ViewDefinition

JSON_INT_RANGE = range(-(2**63), 2**64)


def _doc(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _number(value: Any) -> int | float | None:
    n = to_number(value)
    if isinstance(n, float) and not math.isfinite(n):
        return None
    return n


def _json_int(n: int) -> int | float | None:
    if n in JSON_INT_RANGE:
        return n
    try:
        return float(n)
    except OverflowError:
        return None


def _aggregate(function: str, values: list[Any], members: int) -> Any:
    if function == "COUNT":
        return sum(1 for v in values if not is_null(v))
    numbers = [n for n in (_number(v) for v in values) if n is not None]
    if not numbers:
        return None
    if function in ("MIN", "MAX"):
        m = min(numbers) if function == "MIN" else max(numbers)
        if any(type(n) is int and n == m for n in numbers):
            return _json_int(int(m))
        return float(m) + 0.0  # negative zero is zero
    total = sum((Fraction(n) for n in numbers), Fraction(0))
    try:
        if function == "AVG":
            return float(total / len(numbers))
        if all(type(n) is int for n in numbers):
            return _json_int(int(total))
        return float(total)
    except OverflowError:
        return None


def _put(doc: dict[str, Any], steps: tuple[str, ...], value: Any) -> None:
    for step in steps[:-1]:
        doc = doc.setdefault(step, {})
    doc[steps[-1]] = value


def _json_safe(value: Any) -> Any:
    if type(value) is int:
        return _json_int(value)
    if isinstance(value, list | dict):
        try:
            orjson.dumps(value)
        except TypeError:
            return None
    return value


def naive_view(definition: ViewDefinition, records: dict[str, bytes]) -> dict[str, bytes]:
    """The view's records (group key -> body) over ``records`` (key -> body)."""
    flt = None if definition.filter is None else parse(definition.filter)
    groups: dict[str, list[MessageView]] = {}
    group_values: dict[str, list[Any]] = {}
    for body in records.values():
        view = MessageView.of_document("", _doc(body))
        if flt is not None and truth(evaluate_node(flt, view)) is not True:
            continue
        values = [resolve(view.document, steps) for steps in definition.grouping]
        if any(type(v) not in (str, int, float, bool) for v in values):
            continue
        key = ",".join(orjson.dumps(v).decode() for v in values)
        if len(key) > 4096:
            continue
        groups.setdefault(key, []).append(view)
        group_values[key] = values
    out: dict[str, bytes] = {}
    for key, views in groups.items():
        values = group_values[key]
        results = []
        for agg in definition.aggregates:
            if agg.argument is None:
                results.append(len(views))
            else:
                args = [evaluate_node(agg.argument, v) for v in views]
                results.append(_aggregate(agg.function, args, len(views)))
        record: dict[str, Any] = {}
        for item in definition.projection:
            if item.kind == "group":
                value = values[item.index]
            elif item.kind == "aggregate":
                value = results[item.index]
            else:
                assert item.tree is not None
                doc: dict[str, Any] = {}
                for steps, v in zip(definition.grouping, values, strict=True):
                    _put(doc, steps, v)
                for name, i in definition.slots(item).items():
                    doc[name] = results[i]
                value = _json_safe(evaluate_node(item.tree, MessageView.of_document("", doc)))
            _put(record, item.out, value)
        out[key] = orjson.dumps(record)
    return out
