"""``RunHeap`` (server/queues/runheap.py) against ``heapq``: the same keys come out in the
same order, whatever mix of in-order and out-of-order pushes, pops and peeks."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.queues.runheap import RunHeap

# pushes of mostly increasing keys (the queue's case) and of any key, pops and peeks
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("next"), st.integers(0, 3)),  # last pushed + a small step
        st.tuples(st.just("push"), st.integers(-50, 50)),  # anywhere
        st.tuples(st.just("pop"), st.just(0)),
        st.tuples(st.just("peek"), st.just(0)),
    ),
    max_size=200,
)


@given(_OPS)
def test_pops_and_peeks_match_heapq(ops: list[tuple[str, int]]) -> None:
    run: RunHeap[tuple[int, int]] = RunHeap()
    oracle: list[tuple[int, int]] = []
    last = 0
    for n, (op, value) in enumerate(ops):
        if op in ("next", "push"):
            last = last + value if op == "next" else value
            key = (last, n)  # unique keys: the order out is then fully determined
            run.push(key)
            heapq.heappush(oracle, key)
        elif not oracle:
            with pytest.raises(IndexError):
                run.pop() if op == "pop" else run.peek()
        elif op == "pop":
            assert run.pop() == heapq.heappop(oracle)
        else:
            assert run.peek() == oracle[0]
        assert len(run) == len(oracle) and bool(run) == bool(oracle)
    assert [run.pop() for _ in range(len(run))] == sorted(oracle)


@given(st.lists(st.integers(-5, 5), max_size=100))
def test_duplicate_keys_are_all_kept(keys: list[int]) -> None:
    run: RunHeap[int] = RunHeap()
    for k in keys:
        run.push(k)
    assert [run.pop() for _ in range(len(run))] == sorted(keys)


def test_in_order_keys_never_reach_the_heap() -> None:
    """The point of it: keys arriving in order cost a deque append and popleft."""
    run: RunHeap[int] = RunHeap()
    for k in (1, 2, 2, 5):
        run.push(k)
    run.push(3)  # late: the heap
    assert (len(run._run), len(run._heap)) == (4, 1)
    assert [run.pop() for _ in range(5)] == [1, 2, 2, 3, 5]


@given(st.lists(st.lists(st.integers(-20, 20), max_size=12), max_size=12), st.integers(0, 5))
def test_extend_and_retain_match_heapq(batches: list[list[int]], modulus: int) -> None:
    """``extend`` is ``push`` of each key; ``retain`` keeps exactly the keys it is told to,
    in order, and pushes after it behave as before."""
    run: RunHeap[tuple[int, int]] = RunHeap()
    oracle: list[tuple[int, int]] = []
    n = 0
    for i, batch in enumerate(batches):
        keys = []
        for k in batch:
            n += 1
            keys.append((k, n))
        run.extend(keys)
        for key in keys:
            heapq.heappush(oracle, key)
        if i % 3 == 2 and oracle:
            assert run.pop() == heapq.heappop(oracle)
    assert len(run) == len(oracle)
    if modulus:
        run.retain(lambda key: key[1] % modulus != 0)
        oracle = [key for key in oracle if key[1] % modulus != 0]
        heapq.heapify(oracle)
        run.push((0, n + 1))
        heapq.heappush(oracle, (0, n + 1))
    assert [run.pop() for _ in range(len(run))] == sorted(oracle)
