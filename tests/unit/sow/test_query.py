"""SOW queries: filter, orderby across types, top_n, slices, against a sorted() oracle."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.expr import compile_filter
from spool.server.protocol.errors import InvalidMessage
from spool.server.sow import query as query_mod
from spool.server.sow.memory import MemoryStore
from spool.server.sow.query import QueryRun, Source, parse_key_list, parse_orderby


def source(docs: list[Any], topic: str = "t") -> Source:
    store = MemoryStore(topic)
    for i, doc in enumerate(docs):
        store.put(f"k{i}", orjson.dumps(doc), seq=i + 1, pub_hash=1, pub_seq=i + 1)
    return Source(topic, orjson.dumps(topic), store.records())


def keys(q: QueryRun) -> list[str]:
    q.run_all()
    return [rec.key for _, rec in q.results()]


def test_filter_top_n_and_counts() -> None:
    src = source([{"x": i} for i in range(10)])
    q = QueryRun([src], compile_filter("/x >= 4"), top_n=3)
    assert keys(q) == ["k4", "k5", "k6"]
    assert (q.matches, q.returned) == (6, 3)


def test_orderby_desc_then_asc_and_store_order_for_ties() -> None:
    docs = [{"d": 1, "n": "b"}, {"d": 2, "n": "a"}, {"d": 1, "n": "a"}, {"d": 2, "n": "a"}]
    q = QueryRun([source(docs)], None, parse_orderby("/d DESC, /n"))
    assert keys(q) == ["k1", "k3", "k2", "k0"]


def test_mixed_types_sort_numbers_strings_booleans_objects_then_missing() -> None:
    docs = [{"v": "s"}, {}, {"v": True}, {"v": 2.5}, {"v": [1]}, {"v": None}, {"v": 1}]
    q = QueryRun([source(docs)], None, parse_orderby("/v"))
    assert keys(q) == ["k6", "k3", "k0", "k2", "k4", "k1", "k5"]
    q = QueryRun([source(docs)], None, parse_orderby("/v desc"))
    # DESC reverses ASC except that ties (missing and null) keep the store's order
    assert keys(q) == ["k1", "k5", "k4", "k2", "k0", "k3", "k6"]


def test_several_sources_and_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query_mod, "CHUNK", 3)
    a = source([{"x": i} for i in range(7)], "a")
    b = source([{"x": i} for i in range(5)], "b")
    q = QueryRun([a, Source("empty", b'"empty"', []), b], compile_filter("/x % 2 = 0"),
                 parse_orderby("/x DESC"))  # fmt: skip
    steps = 0
    while not q.step():
        steps += 1
    assert steps >= 3
    got = [(s.topic, orjson.loads(r.body)["x"]) for s, r in q.results()]
    assert got == [("a", 6), ("a", 4), ("b", 4), ("a", 2), ("b", 2), ("a", 0), ("b", 0)]


def test_an_empty_snapshot_is_done_at_once() -> None:
    q = QueryRun([Source("t", b'"t"', [])], None)
    assert q.step() and list(q.results()) == [] and q.matches == 0


@pytest.mark.parametrize("bad", ["x", "/a ASCENDING", "/a,", "/a DESC DESC", ""])
def test_bad_orderby(bad: str) -> None:
    with pytest.raises(InvalidMessage):
        parse_orderby(bad)


def test_key_lists() -> None:
    assert parse_key_list("a, b,,a ,c") == ["a", "b", "c"]
    with pytest.raises(InvalidMessage):
        parse_key_list(" , ")


values = st.one_of(st.none(), st.integers(-3, 3), st.text("ab", max_size=2), st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({}, optional={"a": values, "b": values}), max_size=40),
       st.booleans(), st.booleans(), st.none() | st.integers(1, 10))  # fmt: skip
def test_orderby_agrees_with_sorted(
    docs: list[dict[str, Any]], desc_a: bool, desc_b: bool, top_n: int | None
) -> None:
    rank = {int: 0, float: 0, str: 1, bool: 2}

    def ref(value: Any) -> tuple[int, Any]:
        if value is None:
            return (4, 0)
        return (rank[type(value)], value)

    order = sorted(
        range(len(docs)),
        key=lambda i: (
            _maybe_rev(ref(docs[i].get("a")), desc_a),
            _maybe_rev(ref(docs[i].get("b")), desc_b),
            i,
        ),
    )
    expected = [f"k{i}" for i in order][:top_n]
    spec = f"/a {'DESC' if desc_a else 'ASC'}, /b {'DESC' if desc_b else 'ASC'}"
    q = QueryRun([source(docs)], None, parse_orderby(spec), top_n=top_n)
    assert keys(q) == expected


class _R:
    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, o: _R) -> bool:
        return bool(o.v < self.v)

    def __eq__(self, o: object) -> bool:
        return isinstance(o, _R) and self.v == o.v


def _maybe_rev(v: Any, desc: bool) -> Any:
    return _R(v) if desc else v


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=60), st.integers(1, 7), st.none() | st.integers(1, 30),
       st.booleans(), st.integers(1, 5))  # fmt: skip
def test_batches_are_the_results_in_slices(
    xs: list[int], size: int, top_n: int | None, ordered: bool, chunk: int
) -> None:
    query_mod_chunk = query_mod.CHUNK
    query_mod.CHUNK = chunk
    try:
        a = source([{"x": x} for x in xs], "a")
        b = source([{"x": x} for x in reversed(xs)], "b")
        q = QueryRun(
            [a, b], compile_filter("/x > 2"), parse_orderby("/x") if ordered else (), top_n
        )
        q.run_all()
        flat = [(s.topic, r.key) for s, r in q.results()]
        batches = list(q.batches(size))
        assert [(s.topic, r.key) for s, rs in batches for r in rs] == flat
        assert all(0 < len(rs) <= size for _, rs in batches)
        assert len(flat) == q.returned
    finally:
        query_mod.CHUNK = query_mod_chunk
