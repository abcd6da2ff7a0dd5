"""The queue's byte formats: the QUEUE_ACK record body and the delivery header (property
tests against their decoders)."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from spool.server.bookmarks import format_bookmark
from spool.server.protocol.delivery import split_deliveries, split_deliveries_py
from spool.server.queues.ownership import Grant, Request
from spool.server.queues.records import (
    decode_ack,
    decode_transfers,
    encode_ack_bookmarks,
    encode_ack_seqs,
    encode_transfers,
)
from spool.server.wire import encode_queued, topic_json


@given(st.lists(st.integers(1, 1 << 62)))
def test_ack_bodies_round_trip(seqs: list[int]) -> None:
    assert decode_ack(encode_ack_seqs(seqs)) == (seqs, [])


@given(st.binary(max_size=64))
def test_a_damaged_ack_body_never_raises(body: bytes) -> None:
    seqs, bookmarks = decode_ack(body)
    assert all(s >= 0 for s in seqs)
    assert all(b.endswith("|") for b in bookmarks)


_bookmarks = st.builds(format_bookmark, st.integers(1, (1 << 64) - 1), st.integers(1, 1 << 62))
_names = st.text(min_size=1, max_size=12)


@given(st.lists(_bookmarks))
def test_replicated_ack_bodies_round_trip(bookmarks: list[str]) -> None:
    assert decode_ack(encode_ack_bookmarks(bookmarks)) == ([], bookmarks)


@given(
    st.lists(
        st.one_of(
            st.builds(Request, _bookmarks, _names, _names, st.integers(0, 1 << 40)),
            st.builds(Grant, _bookmarks, _names, st.integers(0, 1 << 40), st.booleans()),
        )
    )
)
def test_transfer_bodies_round_trip(changes: list[Request | Grant]) -> None:
    assert decode_transfers(encode_transfers(changes)) == changes


@given(st.one_of(st.binary(max_size=64), st.builds(orjson.dumps, st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 40), 1 << 40) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=6), max_leaves=12))))  # fmt: skip
def test_a_damaged_transfer_body_never_raises(body: bytes) -> None:
    for change in decode_transfers(body):
        assert type(change) in (Request, Grant)


@given(
    topic=st.text(min_size=1, max_size=20),
    sub_id=st.text(min_size=1, max_size=10).filter(lambda s: "," not in s),  # refused in ids
    body=st.binary(max_size=200),
    pub=st.integers(0, (1 << 64) - 1),
    seq=st.integers(0, 1 << 40),
    lease_ms=st.integers(0, 10**9),
    count=st.integers(1, 10**6),
)
def test_a_queue_delivery_parses_back(
    topic: str, sub_id: str, body: bytes, pub: int, seq: int, lease_ms: int, count: int
) -> None:
    bm = f"{pub}|{seq}|"
    frame = encode_queued(topic_json(topic), orjson.dumps(sub_id), body, bm, lease_ms, count)
    for split in (split_deliveries, split_deliveries_py):
        (d,), error = split(frame + frame[:0])
        assert error is None
        assert (d.topic, d.data, d.bookmark, d.sub_ids) == (topic, body, bm, (sub_id,))
        assert (d.header["lp"], d.header["dc"]) == (lease_ms, count)
