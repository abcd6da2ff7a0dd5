"""The order a repair writes records in when several peers sent them: a property test
against what a replay needs (every record once, each publisher's sequences in order) and
what the merge promises (records of different publishers in time order)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spool.server.replication.repair import merge_in_time_order
from spool.server.txlog import Record, RecordKind


def _record(i: int, pub: int, pub_seq: int, ts: int) -> Record:
    return Record(i, ts, pub, pub_seq, "orders", "json", RecordKind.PUBLISH, (), 0, b"{}")


@st.composite
def _answers(draw: st.DrawFn) -> tuple[list[Record], dict[tuple[int, int], int]]:
    """Records of up to 4 publishers (distinct bookmarks, times in any order: late
    records and clock differences), each sent by one of 3 peers."""
    bookmarks = draw(
        st.lists(st.tuples(st.integers(1, 4), st.integers(1, 30)), unique=True, max_size=40)
    )
    records = [
        _record(i, pub, seq, draw(st.integers(0, 50))) for i, (pub, seq) in enumerate(bookmarks)
    ]
    sent_by = {(r.pub_hash, r.pub_seq): draw(st.integers(0, 2)) for r in records}
    return records, sent_by


@given(_answers())
def test_each_record_once_and_each_publisher_in_sequence_order(
    answers: tuple[list[Record], dict[tuple[int, int], int]],
) -> None:
    records, sent_by = answers
    out = merge_in_time_order(list(records), sent_by)
    key = lambda r: (r.pub_hash, r.pub_seq)  # noqa: E731
    assert sorted(map(key, out)) == sorted(map(key, records))
    for pub in {r.pub_hash for r in records}:
        seqs = [r.pub_seq for r in out if r.pub_hash == pub]
        assert seqs == sorted(seqs)
    # the places of each publisher's records are where its records come in time order
    places = sorted(records, key=lambda r: (r.timestamp_us, sent_by[key(r)], r.seq))
    assert [r.pub_hash for r in out] == [r.pub_hash for r in places]
