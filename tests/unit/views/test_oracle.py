"""The engine against a view recomputed from scratch, after every change.

A state machine inserts, updates (moving records between groups, changing values,
removing the current MIN or MAX), deletes and expires records of a real memory SOW store,
feeds each store change to the engine, and checks after every step that:

* the engine's view equals :func:`naive_view` over the store's current records;
* the view changes the engine emitted, applied to a copy, give the same view;
* a view built from scratch from the store's records (the start-up path) is the same.

Definitions are random too: one or two grouping fields, random SUM / COUNT / AVG / MIN /
MAX items over ints, floats, numeric strings, missing fields and huge values, computed
fields, and an optional filter.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from spool.server.sow.memory import MemoryStore
from spool.server.views import ViewDefinition, ViewEngine, parse_definition
from tests.unit.views.naive import naive_view

KEYS = [f"k{i}" for i in range(8)]
GROUP_VALUES = st.sampled_from(["a", "b", "c", 1, 1.0, True, None, [1], {"o": 1}, "MISSING"])
NUMBERS = st.one_of(
    st.integers(-5, 5),
    st.sampled_from([2**63 - 1, 2**64 - 1, -(2**63), 1e30]),
    st.floats(-4, 4).map(lambda f: round(f, 1)),
    st.sampled_from([0.1, 0.2, 0.3, -0.0, 1e300, 1.7e308, 5e-324, 1e16, 3.0]),
    st.sampled_from(["3", "1.5", "abc", "", None, True, [2, 3], "MISSING"]),
)
ARGS = ["/x", "/y", "/x + /y", "/x * 2", "/s"]
FUNCTIONS = ["SUM", "COUNT", "AVG", "MIN", "MAX"]
FILTERS = [None, None, "/f = 1", "/x > 0 OR /x IS NULL"]


def _doc(draw: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for name, strategy in (("g", GROUP_VALUES), ("h", GROUP_VALUES), ("x", NUMBERS),
                           ("y", NUMBERS), ("s", st.sampled_from(["p", "q", ""]))):  # fmt: skip
        value = draw(strategy)
        if value != "MISSING":
            doc[name] = value
    doc["f"] = draw(st.sampled_from([0, 1]))
    return doc


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    return _doc(draw)


@st.composite
def definitions(draw: st.DrawFn) -> ViewDefinition:
    grouping = draw(st.sampled_from([["/g"], ["/g", "/h"], ["/h"]]))
    items: list[str] = []
    if draw(st.booleans()):
        items.append(grouping[0])
    n = draw(st.integers(1, 5))
    for i in range(n):
        fn = draw(st.sampled_from(FUNCTIONS))
        arg = "*" if fn == "COUNT" and draw(st.booleans()) else draw(st.sampled_from(ARGS))
        items.append(f"{fn}({arg}) AS /a{i}")
    if draw(st.booleans()):
        items.append("SUM(/x) - MIN(/y) AS /calc/diff")
    if draw(st.booleans()):
        items.append(f"CONCAT({grouping[-1]}, ':', COUNT(*)) AS /label")
    return parse_definition(items, grouping, draw(st.sampled_from(FILTERS)))


class ViewMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = MemoryStore("orders")
        self.engine: ViewEngine | None = None
        self.copy: dict[str, bytes] = {}
        self.now = 0

    @initialize(definition=definitions())
    def start(self, definition: ViewDefinition) -> None:
        self.definition = definition
        self.engine = ViewEngine(definition, "orders")

    def _apply(self, change: Any) -> None:
        assert self.engine is not None
        self._record(self.engine.apply(change))

    def _record(self, out: list[Any]) -> None:
        keys = [vc.key for vc in out]
        assert len(keys) == len(set(keys)), out
        for vc in out:
            if vc.body is None:
                assert vc.key in self.copy, "a group that never was is reported gone"
                del self.copy[vc.key]
            else:
                assert self.copy.get(vc.key) != vc.body, "an unchanged record is reported"
                self.copy[vc.key] = vc.body

    @rule(key=st.sampled_from(KEYS), doc=documents(), lifetime=st.sampled_from([0, 0, 1, 3]))
    def put(self, key: str, doc: dict[str, Any], lifetime: int) -> None:
        expires = self.now + lifetime if lifetime else 0
        self._apply(self.store.put(key, orjson.dumps(doc), expires_us=expires))

    @rule(
        run=st.lists(st.tuples(st.sampled_from(KEYS), documents()), min_size=1, max_size=6),
        parsed=st.booleans(),
    )
    def put_run(self, run: list[tuple[str, dict[str, Any]]], parsed: bool) -> None:
        """A run of publishes (repeated keys included), applied as one run."""
        assert self.engine is not None
        bodies = [orjson.dumps(doc) for _, doc in run]
        changes = self.store.put_run(
            [k for k, _ in run], bodies, seqs=[0] * len(run), timestamp_us=0, pub_hash=0,
            pub_seqs=[0] * len(run), expires=None, changes=True,
        )  # fmt: skip
        documents = [doc for _, doc in run] if parsed else None
        self._record(self.engine.apply_many(changes, documents))

    @precondition(lambda self: len(self.store) > 0)
    @rule(data=st.data())
    def update_value(self, data: st.DataObject) -> None:
        """Change a value, keeping the record in its group."""
        rec = data.draw(st.sampled_from(self.store.records()))
        doc = orjson.loads(rec.body)
        doc[data.draw(st.sampled_from(["x", "y"]))] = data.draw(
            NUMBERS.filter(lambda v: v != "MISSING")
        )
        self._apply(self.store.put(rec.key, orjson.dumps(doc)))

    @precondition(lambda self: len(self.store) > 0)
    @rule(data=st.data(), field=st.sampled_from(["x", "y", "g"]))
    def retype(self, data: st.DataObject, field: str) -> None:
        """Write the same number as another type: 2 -> 2.0 -> 2, true -> 1."""
        rec = data.draw(st.sampled_from(self.store.records()))
        doc = orjson.loads(rec.body)
        value = doc.get(field)
        if type(value) is int or type(value) is bool:
            doc[field] = float(value)
        elif type(value) is float and value.is_integer() and abs(value) < 2**63:
            doc[field] = int(value)
        else:
            doc[field] = data.draw(st.sampled_from([True, 1, 1.0]))
        self._apply(self.store.put(rec.key, orjson.dumps(doc)))

    @precondition(lambda self: len(self.store) > 0)
    @rule(data=st.data(), to=GROUP_VALUES)
    def move(self, data: st.DataObject, to: Any) -> None:
        """Move a record to another group (or out of every group)."""
        rec = data.draw(st.sampled_from(self.store.records()))
        doc = orjson.loads(rec.body)
        if to == "MISSING":
            doc.pop("g", None)
        else:
            doc["g"] = to
        self._apply(self.store.put(rec.key, orjson.dumps(doc)))

    @precondition(lambda self: len(self.store) > 0)
    @rule(data=st.data(), field=st.sampled_from(["x", "y"]), smallest=st.booleans())
    def delete_extreme(self, data: st.DataObject, field: str, smallest: bool) -> None:
        """Delete the record holding the smallest or largest number in ``field``."""
        numeric = [
            r for r in self.store.records()
            if type(orjson.loads(r.body).get(field)) in (int, float)
        ]  # fmt: skip
        if not numeric:
            return
        pick = min if smallest else max
        rec = pick(numeric, key=lambda r: orjson.loads(r.body)[field])
        change = self.store.delete(rec.key)
        assert change is not None
        self._apply(change)

    @precondition(lambda self: len(self.store) > 0)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(self.store.keys()))
        change = self.store.delete(key)
        assert change is not None
        self._apply(change)

    @rule(step=st.integers(1, 3))
    def expire(self, step: int) -> None:
        """Time passes; records past their deadline are removed as the expirer does."""
        self.now += step
        for rec in self.store.records():
            if rec.expires_us and rec.expires_us <= self.now:
                change = self.store.delete(rec.key)
                assert change is not None
                self._apply(change)

    @rule(key=st.sampled_from(KEYS))
    def delete_absent_or_present(self, key: str) -> None:
        change = self.store.delete(key)
        if change is not None:
            self._apply(change)

    @invariant()
    def matches_recomputation(self) -> None:
        if self.engine is None:
            return
        records = {r.key: r.body for r in self.store.records()}
        expected = naive_view(self.definition, records)
        assert self.engine.records() == expected
        assert self.copy == expected
        rebuilt = ViewEngine(self.definition, "orders")
        rebuilt.load(self.store.records())
        assert rebuilt.records() == expected
        assert rebuilt.members == self.engine.members


ViewMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestViewMachine = ViewMachine.TestCase
