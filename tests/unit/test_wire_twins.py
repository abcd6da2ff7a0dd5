"""The delivery encoder's compiled loops against its Python loops (the oracle): the same
bytes for live runs and replay batches, whatever the bodies, numbers and index lists."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server import wire
from spool.server.txlog.format.batch import decode_batch_py
from spool.server.txlog.format.codec import encode_run_py
from tests.support.twins import compiled, outcome

_kernel = compiled("spool.server._wire_c")

U64 = 1 << 64
numbers = st.one_of(
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=U64 - 3, max_value=U64 + 3),
    st.integers(min_value=-3, max_value=-1),
)


@pytest.fixture
def python_loops() -> Iterator[None]:
    """Run wire.py with the Python loops (restored afterwards)."""
    saved = wire._kernel
    wire._kernel = None
    yield
    wire._kernel = saved


def _both(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    saved = wire._kernel
    try:
        wire._kernel = _kernel
        got = outcome(fn, *args, **kwargs)
        wire._kernel = None
        want = outcome(fn, *args, **kwargs)
    finally:
        wire._kernel = saved
    return got, want


@st.composite
def parts(draw: st.DrawFn, n: int) -> Any:
    kind = draw(st.sampled_from(["all", "list", "range"])) if n else "all"
    if kind == "all":
        return range(n)
    if kind == "range":  # steps, negative starts (Python wraps them), huge starts
        start = draw(st.one_of(st.integers(-n, n - 1), st.just(2**63 + 1)))
        return range(start, draw(st.integers(-n, n)), draw(st.sampled_from([1, 2, -1])))
    return draw(st.lists(st.integers(min_value=-n, max_value=n - 1), max_size=8))


@settings(max_examples=300)
@given(st.data())
def test_encode_run_twins_agree(data: st.DataObject) -> None:
    bodies = data.draw(st.lists(st.binary(max_size=40), max_size=6))
    n = len(bodies)
    part = data.draw(parts(n))
    seqs = data.draw(st.one_of(st.none(), st.lists(numbers, min_size=n, max_size=n)))
    got, want = _both(
        wire.encode_run,
        wire.topic_json(data.draw(st.text(max_size=5))),
        wire.sids_json(["s1", "s2"][: data.draw(st.integers(1, 2))]),
        bodies,
        part,
        pub_hash=data.draw(numbers),
        pub_seqs=seqs,
        ts=data.draw(st.sampled_from([None, "2026-11-22T10:00:00.000001Z"])),
    )
    assert got == want


@settings(max_examples=200)
@given(st.data())
def test_encode_batch_twins_agree(data: st.DataObject) -> None:
    bodies = data.draw(st.lists(st.binary(max_size=40), min_size=1, max_size=6))
    n = len(bodies)
    seqs = data.draw(st.lists(st.integers(0, U64 - 1), min_size=n, max_size=n))
    buf = b"".join(encode_run_py(1, 5, data.draw(st.integers(0, U64 - 1)), seqs, "t", "json",
                                 bodies))  # fmt: skip
    batch, _ = decode_batch_py(buf, 0, len(buf), 1)
    got, want = _both(
        wire.encode_batch,
        batch,
        data.draw(parts(n)),
        wire.sids_json(["a"]),
        topic_literal=wire.topic_json("t"),
    )
    assert got == want


def test_bytearray_bodies_take_the_python_loop(python_loops: None) -> None:
    bodies: list[Any] = [bytearray(b"ab"), b"c"]
    want = wire.encode_run(b'"t"', b'"s"', bodies, range(2), pub_hash=1, pub_seqs=[1, 2])
    assert _kernel.bookmarked(b"h", None, 1, [1, 2], b"t", bodies, range(2)) is None
    wire._kernel = _kernel
    assert wire.encode_run(b'"t"', b'"s"', bodies, range(2), pub_hash=1, pub_seqs=[1, 2]) == want
