"""The records a destination has not acknowledged, kept per run (against a list oracle)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.replication.inflight import InFlight


def test_first_and_acks_within_and_across_runs() -> None:
    sent = InFlight()
    assert sent.first() is None and not sent
    sent.add(range(1, 4), [10, 11, 12])
    sent.add([5, 7], [14, 16])  # a route skipped 4 and 6
    assert sent.first() == (1, 10) and len(sent) == 5
    sent.ack(2)
    assert sent.first() == (3, 12) and len(sent) == 3
    sent.ack(4)  # not sent, between runs
    assert sent.first() == (5, 14) and len(sent) == 2
    sent.ack(6)
    assert sent.first() == (7, 16) and sent.pairs() == [(7, 16)]
    sent.ack(7)
    assert sent.first() is None and len(sent) == 0
    sent.add([9], [20])
    sent.clear()
    assert sent.first() is None and sent.pairs() == []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(1, 5), st.integers(1, 3)),
            st.tuples(st.just("ack"), st.integers(0, 12), st.just(0)),
            st.tuples(st.just("drop"), st.integers(0, 8), st.just(0)),
        ),
        max_size=40,
    )
)
def test_matches_a_list_of_pairs(ops: list[tuple[str, int, int]]) -> None:
    sent = InFlight()
    oracle: list[tuple[int, int]] = []
    seq = 0
    acked = 0
    for op, a, b in ops:
        if op == "add":
            seqs = []
            for _ in range(a):
                seq += b  # ascending, with holes when b > 1
                seqs.append(seq)
            sent.add(seqs, [s * 10 for s in seqs])
            oracle.extend((s, s * 10) for s in seqs)
        elif op == "drop":
            sent.drop_newest(a)
            oracle = oracle[: max(0, len(oracle) - a)]
            if oracle:
                seq = oracle[-1][0]  # later runs continue after what is still held
        else:
            acked = max(acked, acked + a)
            sent.ack(acked)
            oracle = [p for p in oracle if p[0] > acked]
        assert sent.pairs() == oracle
        assert len(sent) == len(oracle)
        assert sent.first() == (oracle[0] if oracle else None)
