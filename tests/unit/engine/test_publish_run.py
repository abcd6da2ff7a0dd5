"""A part of a publish run (``PublishRun.select``, ``slice``, ``as_appended``) keeps every
column aligned with the bodies and its acks on the same messages, whichever optional
columns the run carries (server/ports.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.ports import AckRequest, Origin, PublishRun
from spool.server.txlog.format.record import RecordKind

#: the per-message columns; every other field is shared by the run's messages
COLUMNS = ("pub_seqs", "bodies", "corr_ids", "sow_keys", "expirations", "keys", "dues")
SHARED = ("topic", "pub_hash", "kind", "path", "publisher_name")

_ACK_KINDS = st.frozensets(st.sampled_from(["received", "processed", "persisted"]), min_size=1)


@st.composite
def runs(draw: st.DrawFn) -> PublishRun:
    """A run of 0 to 12 messages with random acks and each optional column either None
    or a list of one entry per message."""
    n = draw(st.integers(0, 12))
    # distinct bodies: a message is known by its body wherever it lands
    bodies = [b"m%d" % i for i in range(n)]

    def column(values: st.SearchStrategy[Any], optional: bool = True) -> Any:
        if optional and draw(st.booleans()):
            return None
        return draw(st.lists(values, min_size=n, max_size=n))

    acked = draw(st.lists(st.integers(0, max(n - 1, 0)), unique=True, max_size=n)) if n else []
    acks: list[AckRequest] = [
        (i, draw(_ACK_KINDS), draw(st.none() | st.text(max_size=3))) for i in sorted(acked)
    ]
    return PublishRun(
        topic=draw(st.sampled_from(["t", "orders"])),
        pub_hash=draw(st.integers(1, 2**64 - 1)),
        pub_seqs=column(st.none() | st.integers(1, 10**6), optional=False),
        bodies=bodies,
        acks=acks,
        corr_ids=column(st.text(max_size=3)),
        sow_keys=column(st.text(max_size=3)),
        kind=draw(st.sampled_from([RecordKind.PUBLISH, RecordKind.DELTA_PUBLISH])),
        path=draw(st.sampled_from([(), ("a",), ("a", "b")])),
        publisher_name=draw(st.sampled_from(["", "pub"])),
        expirations=column(st.none() | st.integers(1, 100)),
        keys=column(st.text(max_size=3)),
        dues=column(st.integers(0, 1 << 60)),
    )


def assert_part(run: PublishRun, part: PublishRun, keep: list[int]) -> None:
    """``part`` holds the messages ``keep`` of ``run``, in that order, column by column,
    and exactly their acks, renumbered."""
    for name in COLUMNS:
        whole, taken = getattr(run, name), getattr(part, name)
        if whole is None:
            assert taken is None, name
        else:
            assert taken == [whole[i] for i in keep], name
    for name in SHARED:
        assert getattr(part, name) == getattr(run, name), name
    expected = [(keep.index(i), kinds, cid) for i, kinds, cid in run.acks if i in keep]
    assert part.acks == expected
    for j, _kinds, _cid in part.acks:  # an ack names the same message as before
        assert part.bodies[j] == run.bodies[keep[j]]


def test_every_field_is_a_column_or_shared() -> None:
    """A new field must be declared here as a column or as shared, so that the property
    tests below cover it (and ``PublishRun._rows`` carries it)."""
    names = {f.name for f in dataclasses.fields(PublishRun)}
    assert names == {*COLUMNS, *SHARED, "acks"}


@settings(max_examples=200, deadline=None)
@given(run=runs(), data=st.data())
def test_select_keeps_columns_and_acks_aligned(run: PublishRun, data: st.DataObject) -> None:
    n = len(run.bodies)
    keep = sorted(data.draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=n))) if n else []
    part = run.select(keep)
    assert_part(run, part, keep)
    if len(keep) == n:
        assert part is run  # all of it: no copy
    else:
        assert part.bodies is not run.bodies  # a part is a run of its own


@settings(max_examples=200, deadline=None)
@given(run=runs(), data=st.data())
def test_slice_keeps_columns_and_acks_aligned(run: PublishRun, data: st.DataObject) -> None:
    n = len(run.bodies)
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    keep = list(range(start, stop))
    part = run.slice(start, stop)
    assert_part(run, part, keep)
    assert part is run if keep == list(range(n)) else part is not run
    # a stretch given to select is the same part
    assert_part(run, run.select(range(start, stop)), keep)


@settings(max_examples=200, deadline=None)
@given(run=runs(), data=st.data())
def test_as_appended_keeps_columns_aligned(run: PublishRun, data: st.DataObject) -> None:
    n = len(run.bodies)
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(lo, n))
    seqs = list(range(100 + lo, 100 + hi))
    origin = Origin(kind="client", name="pub", user=None, replies=None)
    appended = run.as_appended(
        lo, hi, topic_literal=b'"t"', origin=origin, pub_seqs=seqs, first_seq=7,
        timestamp_us=None,
    )  # fmt: skip
    assert list(appended.bodies) == run.bodies[lo:hi]
    assert appended.pub_seqs == seqs
    for name in ("corr_ids", "sow_keys", "keys"):
        whole, taken = getattr(run, name), getattr(appended, name)
        assert (taken is None) if whole is None else list(taken) == whole[lo:hi], name
    assert (appended.topic, appended.pub_hash, appended.kind, appended.path) == (
        run.topic, run.pub_hash, run.kind, run.path,
    )  # fmt: skip
    assert appended.publisher_name == run.publisher_name
    assert appended.origin is origin and appended.first_seq == 7


def test_a_single_publish_carries_only_the_columns_it_gave() -> None:
    plain = PublishRun.one("t", 5, None, b"x")
    assert (plain.pub_seqs, plain.bodies, plain.acks) == ([None], [b"x"], [])
    assert (plain.corr_ids, plain.sow_keys, plain.expirations, plain.keys) == (None,) * 4
    full = PublishRun.one(
        "t", 5, 3, b"x", acks=frozenset({"processed"}), cid="c", corr_id="x1", sow_key="k",
        expiration=60, kind=RecordKind.DELTA_PUBLISH, publisher_name="pub",
    )  # fmt: skip
    assert full.acks == [(0, frozenset({"processed"}), "c")]
    assert (full.corr_ids, full.sow_keys, full.expirations) == (["x1"], ["k"], [60])
    assert (full.kind, full.publisher_name) == (RecordKind.DELTA_PUBLISH, "pub")
