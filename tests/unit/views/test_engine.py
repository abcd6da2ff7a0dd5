"""The view engine's parts and its documented behaviour, case by case (the random
comparison with a recomputation is test_oracle.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.sow.memory import MemoryStore
from spool.server.views import ViewChange, ViewEngine, group_key, parse_definition
from spool.server.views.heap import IndexedHeap
from spool.server.views.numbers import ExactSum, json_number, number_input

FINITE = st.floats(allow_nan=False, allow_infinity=False)


@given(st.lists(st.tuples(st.booleans(), st.integers(-50, 50))))
def test_the_heap_keeps_the_smallest_of_what_is_in_it(ops: list[tuple[bool, int]]) -> None:
    heap = IndexedHeap()
    present: set[int] = set()
    for add, x in ops:
        if add and x not in present:
            heap.push(x)
            present.add(x)
        elif not add and x in present:
            heap.remove(x)
            present.discard(x)
        assert len(heap) == len(present)
        if present:
            assert heap.top() == min(present)


@given(st.lists(st.one_of(st.integers(-(2**70), 2**70), FINITE), max_size=30), st.randoms())
def test_sums_are_exact_whatever_the_order(values: list[int | float], rnd: object) -> None:
    s = ExactSum()
    for v in values:
        s.add(v)
    extra = [1e308, -1e308, 0.1, 3]
    for v in extra:
        s.add(v)
    for v in reversed(extra):
        s.remove(v)
    if not values:
        assert s.total() is None and s.mean() is None
        return
    exact = sum((Fraction(v) for v in values), Fraction(0))
    if all(type(v) is int for v in values):
        assert s.total() == json_number(int(exact))
    else:
        try:
            expected: float | None = float(exact)
        except OverflowError:
            expected = None
        assert s.total() == expected
    assert s.mean() == float(exact / len(values))


def test_catastrophic_cancellation_does_not_lose_the_small_part() -> None:
    s = ExactSum()
    for v in (1e20, 1.0, -1e20):
        s.add(v)
    assert s.total() == 1.0  # a float running sum gives 0.0
    s.remove(1.0)
    assert s.total() == 0.0


def test_inputs_are_finite_numbers() -> None:
    assert number_input("12") == 12
    assert number_input(True) == 1
    assert number_input("abc") is None
    assert number_input(None) is None
    assert number_input(math.inf) is None
    assert number_input(math.nan) is None
    assert math.copysign(1, number_input(-0.0)) == 1.0  # type: ignore[arg-type]
    assert json_number(2**64) == float(2**64)
    assert json_number(2**64 - 1) == 2**64 - 1
    assert json_number(10**400) is None


Put = Callable[..., list[ViewChange]]
Delete = Callable[[str], list[ViewChange]]


def _engine(
    projection: list[str], grouping: list[str], flt: str | None = None
) -> tuple[ViewEngine, Put, Delete]:
    store = MemoryStore("orders")
    engine = ViewEngine(parse_definition(projection, grouping, flt), "orders")

    def put(key: str, **doc: object) -> list[ViewChange]:
        return engine.apply(store.put(key, orjson.dumps(doc)))

    def delete(key: str) -> list[ViewChange]:
        change = store.delete(key)
        assert change is not None
        return engine.apply(change)

    return engine, put, delete


def test_groups_appear_change_move_and_disappear() -> None:
    engine, put, delete = _engine(["/desk", "SUM(/qty) AS /pos", "COUNT(*) AS /n"], ["/desk"])
    assert put("1", desk="eq", qty=10) == [ViewChange('"eq"', b'{"desk":"eq","pos":10,"n":1}')]
    assert put("2", desk="eq", qty=5) == [ViewChange('"eq"', b'{"desk":"eq","pos":15,"n":2}')]
    assert put("2", desk="fx", qty=5) == [
        ViewChange('"eq"', b'{"desk":"eq","pos":10,"n":1}'),
        ViewChange('"fx"', b'{"desk":"fx","pos":5,"n":1}'),
    ]
    assert put("2", desk="fx", qty=5, note="x") == []  # nothing the view reads changed
    assert delete("1") == [ViewChange('"eq"', None)]
    assert engine.records() == {'"fx"': b'{"desk":"fx","pos":5,"n":1}'}
    assert engine.group_of("2") == '"fx"' and engine.group_of("1") is None
    assert len(engine) == 1 and engine.members == 1


def test_min_and_max_survive_the_deletion_of_the_extreme() -> None:
    engine, put, delete = _engine(["MIN(/px) AS /lo", "MAX(/px) AS /hi"], ["/s"])
    put("a", s=1, px=3)
    put("b", s=1, px=1.5)
    put("c", s=1, px=7)
    assert engine.get("1") == b'{"lo":1.5,"hi":7}'
    delete("b")
    delete("c")
    assert engine.get("1") == b'{"lo":3,"hi":3}'


def test_records_without_a_group_or_filtered_out_are_left_out() -> None:
    engine, put, _ = _engine(["COUNT(*) AS /n"], ["/g"], "/live = 1")
    assert put("1", g="a", live=1) == [ViewChange('"a"', b'{"n":1}')]
    assert put("2", live=1) == []  # no /g
    assert put("3", g=None, live=1) == []  # null
    assert put("4", g=[1], live=1) == []  # an array
    assert put("5", g="a", live=0) == []  # the filter
    assert put("1", g="a", live=0) == [ViewChange('"a"', None)]  # filtered out now
    assert engine.members == 0


def test_group_keys_are_the_json_texts_of_the_grouping_values() -> None:
    assert group_key(["EQ", 1, 1.5, True]) == '"EQ",1,1.5,true'
    assert group_key(['a,"b']) == '"a,\\"b"'
    engine, put, _ = _engine(["/a", "/b", "COUNT(*) AS /n"], ["/a", "/b"])
    put("1", a=1, b="x")
    put("2", a=1.0, b="x")  # 1.0 is another group than 1
    put("3", a="1", b="x")
    assert sorted(engine.records()) == ['"1","x"', '1,"x"', '1.0,"x"']


def test_a_parsed_document_is_used_instead_of_the_body() -> None:
    store = MemoryStore("t")
    engine = ViewEngine(parse_definition(["SUM(/q) AS /q"], ["/g"]), "t")
    change = store.put("k", b"not parsed")
    assert engine.apply(change, {"g": "a", "q": 2}) == [ViewChange('"a"', b'{"q":2}')]
    # a document that is not an object has no fields: the record leaves its group
    assert engine.apply(change, [1, 2]) == [ViewChange('"a"', None)]  # type: ignore[arg-type]


def test_load_builds_from_records_and_clear_forgets() -> None:
    store = MemoryStore("t")
    for i in range(10):
        store.put(str(i), orjson.dumps({"g": i % 3, "q": i}))
    engine = ViewEngine(parse_definition(["/g", "SUM(/q) AS /q"], ["/g"]), "t")
    engine.load(store.records())
    assert engine.records() == {
        "0": b'{"g":0,"q":18}',
        "1": b'{"g":1,"q":12}',
        "2": b'{"g":2,"q":15}',
    }
    with pytest.raises(ValueError, match="from nothing"):
        engine.load(store.records())
    assert sorted(engine.clear()) == [ViewChange(k, None) for k in ("0", "1", "2")]
    assert engine.records() == {} and engine.members == 0


def test_nested_outputs_and_computed_fields() -> None:
    engine, put, _ = _engine(
        ["/d AS /id/desk", "SUM(/q * /p) / SUM(/q) AS /px/vwap", "SUM(/q) AS /px/qty",
         "UPPER(/d) AS /name"],
        ["/d"],
    )  # fmt: skip
    put("1", d="eq", q=1, p=10)
    put("2", d="eq", q=3, p=20)
    assert engine.get('"eq"') == b'{"id":{"desk":"eq"},"px":{"vwap":17.5,"qty":4},"name":"EQ"}'


def test_huge_sums_become_floats_and_bad_json_is_a_document_without_fields() -> None:
    store = MemoryStore("t")
    engine = ViewEngine(parse_definition(["SUM(/q) AS /q", "COUNT(*) AS /n"], ["/g"]), "t")
    engine.apply(store.put("1", orjson.dumps({"g": 1, "q": 2**64 - 1})))
    engine.apply(store.put("2", orjson.dumps({"g": 1, "q": 2**64 - 1})))
    assert orjson.loads(engine.get("1") or b"") == {"q": float(2**65 - 2), "n": 2}
    assert engine.apply(store.put("3", b"{not json")) == []
