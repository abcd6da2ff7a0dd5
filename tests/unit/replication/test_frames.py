"""The replication wire format: round trips, any framing of a stream, malformed input."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.replication import frames
from spool.server.replication.errors import ReplicationProtocolError
from spool.server.replication.frames import (
    MAX_MESSAGE,
    AckFrame,
    Claim,
    Claimed,
    Data,
    FabricEntry,
    FabricView,
    FrameParser,
    Hello,
    Message,
    RecordsWriter,
    Refuse,
    Run,
    Stream,
    Welcome,
    decode_runs,
    decode_runs_py,
    encode,
)
from spool.server.txlog.format.record import (
    RecordKind,
    schedule_field,
    sow_key_field,
    split_schedule_field,
)

try:
    from spool.server.replication import _frames_c
except ImportError:  # not built
    _frames_c = None  # type: ignore[assignment]

names = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}", fullmatch=True)
u64 = st.integers(0, 2**64 - 1)
small = st.integers(0, 2**40)

hellos = st.builds(
    Hello,
    version=st.just(1),
    name=names,
    group=names,
    destination=names,
    expect_group=names,
    user=st.none() | names,
    secret=st.none() | st.text(max_size=20),
    compression=st.sampled_from([None, "zstd"]),
    validation=st.dictionaries(
        names, st.integers(-(2**53), 2**53) | st.text(max_size=5), max_size=3
    ),
    instance_id=st.text(max_size=32),
)
welcomes = st.builds(
    Welcome,
    version=st.just(1),
    name=names,
    group=names,
    log_id=st.text(max_size=12),
    holdings=st.dictionaries(
        u64,
        st.tuples(small, st.lists(st.tuples(small, small), max_size=3)),
        max_size=4,
    ),
    validation=st.dictionaries(names, st.booleans(), max_size=3),
    instance_id=st.text(max_size=32),
)
refuses = st.builds(Refuse, reason=st.text(max_size=20), detail=st.text(max_size=40))
streams = st.builds(Stream, start=small, source_last=small)
datas = st.builds(
    Data, upto=u64, count=st.integers(0, 2**32 - 1), payload=st.binary(max_size=64),
    compressed=st.booleans(),
)  # fmt: skip
acks = st.builds(AckFrame, position=u64)
fabric_views = st.builds(
    FabricView,
    st.lists(
        st.builds(
            FabricEntry, name=names, group=names, instance_id=st.text(max_size=8),
            version=u64, summary=st.dictionaries(names, st.integers(0, 9), max_size=2),
        ),
        max_size=3,
    ).map(tuple),
)  # fmt: skip
claims = st.builds(Claim, id=u64, name=names, since=u64, instance=names)
claimeds = st.builds(Claimed, id=u64, held_by=st.none() | names, detail=st.text(max_size=20))
messages = st.one_of(hellos, welcomes, refuses, streams, datas, acks, fabric_views, claims,
                     claimeds)  # fmt: skip


@given(st.lists(messages, max_size=8), st.data())
def test_any_framing_of_a_stream_gives_the_same_messages(
    sent: list[Message], data: st.DataObject
) -> None:
    stream = b"".join(encode(m) for m in sent)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    parser = FrameParser()
    got: list[Message] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got.extend(parser.feed(stream[prev:cut]))
        prev = cut
    assert got == sent
    assert parser.buffered == 0


#: the record kinds a data run carries: not the ones local to the log that wrote them
#: (placeholders, due records)
CARRIED = {
    int(RecordKind.PUBLISH),
    int(RecordKind.DELTA_PUBLISH),
    int(RecordKind.SOW_DELETE),
    int(RecordKind.QUEUE_ACK),
    int(RecordKind.QUEUE_TRANSFER),
    int(RecordKind.SCHEDULED),
}
SCHEDULED = int(RecordKind.SCHEDULED)

#: a run's records: (source seq, ts, pub seq, body, corr, key) each
records_strategy = st.lists(
    st.tuples(small, st.integers(-(2**62), 2**62), u64, st.binary(max_size=40),
              st.text(max_size=6), st.text(max_size=6)),
    min_size=1, max_size=6,
)  # fmt: skip


@st.composite
def run_strategy(draw: st.DrawFn) -> tuple:  # type: ignore[type-arg]
    """(topic, pub_hash, kind, path, records, with correlation ids / SOW keys); a run of
    scheduled records has SOW key fields, each starting with its due time."""
    topic = draw(st.text(min_size=1, max_size=12))
    pub_hash = draw(u64)
    kind = draw(st.sampled_from(sorted(CARRIED)))
    path = draw(st.lists(names, max_size=3).map(tuple))
    records = draw(records_strategy)
    extras = draw(st.booleans())
    if kind == SCHEDULED:
        dues = draw(st.lists(small, min_size=len(records), max_size=len(records)))
        records = [(*r[:5], schedule_field(d, r[5])) for r, d in zip(records, dues, strict=True)]
        extras = True
    return topic, pub_hash, kind, path, records, extras


runs_strategy = st.lists(run_strategy(), max_size=6)


@given(runs_strategy)
def test_runs_round_trip(runs: list[tuple]) -> None:  # type: ignore[type-arg]
    writer = RecordsWriter()
    total = 0
    for topic, ph, kind, path, records, extras in runs:
        seqs, times, pseqs, bodies, corrs, keys = (list(c) for c in zip(*records, strict=True))
        writer.add_run(
            topic.encode(), ph, kind, path, seqs, times, pseqs, bodies,
            [c.encode() for c in corrs] if extras else None,
            [k.encode() for k in keys] if extras else None,
        )  # fmt: skip
        total += len(records)
    payload = writer.payload()
    assert writer.count == total and writer.nbytes == len(payload)
    got = decode_runs(payload, total)
    assert len(got) == len(runs)
    for run, (topic, ph, kind, path, records, extras) in zip(got, runs, strict=True):
        assert (run.topic, run.pub_hash, run.kind, run.path) == (topic, ph, kind, path)
        assert list(
            zip(run.source_seqs, run.timestamps_us, run.pub_seqs, run.bodies, strict=True)
        ) == [r[:4] for r in records]
        assert run.corr_ids == ([r[4] for r in records] if extras else None)
        assert run.sow_keys == ([r[5] for r in records] if extras else None)


def _one_run(kind: int = 1, keys: list[bytes] | None = None) -> bytes:
    writer = RecordsWriter()
    writer.add_run(b"t", 3, kind, ("a@g",), [1], [2], [4], [b"body"], None, keys)
    return writer.payload()


def test_truncated_and_padded_runs_are_refused() -> None:
    payload = _one_run()
    with pytest.raises(ReplicationProtocolError, match="ends inside a record body"):
        decode_runs(payload[:-2], 1)
    with pytest.raises(ReplicationProtocolError, match="bytes follow the last record"):
        decode_runs(payload + b"x", 1)
    with pytest.raises(ReplicationProtocolError, match="ends inside a run header"):
        decode_runs(payload, 2)
    two = RecordsWriter()
    two.add_run(b"t", 3, 1, (), [1, 2], [2, 2], [4, 5], [b"x", b"y"])
    with pytest.raises(ReplicationProtocolError, match="a run of 2 records in a batch of 1"):
        decode_runs(two.payload(), 1)
    bad_kind = bytearray(payload)
    bad_kind[12] = 99
    with pytest.raises(ReplicationProtocolError, match="unknown record kind 99"):
        decode_runs(bytes(bad_kind), 1)
    # a placeholder of fenced records and a due record are local to their log: never
    # accepted from a peer (a due record would be delivered twice, at two due times)
    for kind in (RecordKind.LOST, RecordKind.DUE):
        for run in (payload, _one_run(keys=[schedule_field(5, "k").encode()])):
            bad_kind = bytearray(run)
            bad_kind[12] = int(kind)
            with pytest.raises(ReplicationProtocolError, match=f"unknown record kind {int(kind)}$"):
                decode_runs(bytes(bad_kind), 1)


def _decoders() -> list[Callable[[bytes, int], list[Run]]]:
    """The Python twin, and the compiled one when it is built."""
    return [decode_runs_py] + ([frames._decode_runs_c] if _frames_c is not None else [])


def test_a_run_of_scheduled_records_round_trips_in_both_twins() -> None:
    """Kind 7 goes as a message: bookmark, path, body as published, correlation id, and
    the SOW key field with the due time in front, byte for byte."""
    fields = [
        schedule_field(1764547230000000, sow_key_field("k1", 60)),
        schedule_field(1764547231000000, ""),
    ]
    writer = RecordsWriter()
    writer.add_run(
        b"orders", 0xFEED, SCHEDULED, ("a@ga",), [10, 11], [20, 21], [5, 6],
        [b'{"qty":1}', b'{"qty":2}'], [b"c1", b""], [f.encode() for f in fields],
    )  # fmt: skip
    expected = [
        Run("orders", 0xFEED, SCHEDULED, ("a@ga",), [10, 11], [20, 21], [5, 6],
            [b'{"qty":1}', b'{"qty":2}'], ["c1", ""], fields)
    ]  # fmt: skip
    for decode in _decoders():
        assert decode(writer.payload(), 2) == expected
    assert [split_schedule_field(f) for f in fields] == [
        (1764547230000000, "k1\x1e60"),
        (1764547231000000, ""),
    ]


@pytest.mark.parametrize(
    ("keys", "fragment"),
    [
        (None, "a run of scheduled records carries no SOW key fields"),
        ([b"k1"], "a scheduled record without a due time: not the field of a scheduled"),
        ([b"-5\x1dk1"], "a scheduled record without a due time"),
        ([b"\x1dk1"], "a scheduled record without a due time"),
    ],
)
def test_a_scheduled_record_without_its_due_time_is_refused_by_both_twins(
    keys: list[bytes] | None, fragment: str
) -> None:
    """Taken as an ordinary message it would be delivered at once: the run is malformed."""
    payload = _one_run(SCHEDULED, keys)
    for decode in _decoders():
        with pytest.raises(ReplicationProtocolError, match=fragment):
            decode(payload, 1)
    if _frames_c is not None:
        assert _frames_c.decode_run_fields(payload, 1, frames._strings) is None


@pytest.mark.skipif(_frames_c is None, reason="the compiled twin is not built")
@pytest.mark.parametrize("kind", range(12))
def test_both_run_decoders_take_the_same_kinds(kind: int) -> None:
    """Each decoder has its own list of the kinds a run carries: a run of any kind byte is
    taken by both or refused by both, with the same message."""
    payload = bytearray(_one_run(keys=[schedule_field(5, "k").encode()]))
    payload[12] = kind
    raw = bytes(payload)
    python = _outcome(decode_runs_py, raw, 1)
    assert _outcome(frames._decode_runs_c, raw, 1) == python
    assert (python != ("refused", f"unknown record kind {kind}")) == (kind in CARRIED)
    assert (_frames_c.decode_run_fields(raw, 1, frames._strings) is not None) == (kind in CARRIED)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (struct.pack("<IB", 0, 1), "length 0 is out of range"),
        (struct.pack("<IB", MAX_MESSAGE + 1, 1), "out of range"),
        (struct.pack("<IB", 2, 99) + b"x", "unknown message type 99"),
        (struct.pack("<IB", 3, 1) + b"{]", "hello is not JSON"),
        (struct.pack("<IB", 3, 1) + b"[]", "hello is not a JSON object"),
        (struct.pack("<IB", 3, 6) + b"xx", "an ack is a u64 position"),
        (struct.pack("<IB", 3, 5) + b"xx", "shorter than its header"),
        (struct.pack("<IB", 3, 0x81) + b"{}", "cannot be compressed"),
        (struct.pack("<IB", 3, 4) + b"{}", "stream needs a non-negative integer 'start'"),
        (struct.pack("<IB", 3, 12) + b"{}", "fabric message: it needs a list 'instances'"),
        (struct.pack("<IB", 18, 12) + b'{"instances":[7]}', "an instance is an object"),
        (struct.pack("<IB", 3, 13) + b"{}", "claim message: it needs a name and an instance"),
        (struct.pack("<IB", 15, 14) + b'{"detail":"x"}', "'id' is a non-negative integer"),
    ],
)
def test_malformed_messages_are_refused(raw: bytes, fragment: str) -> None:
    with pytest.raises(ReplicationProtocolError, match=fragment):
        FrameParser().feed(raw)


def test_a_hello_keeps_its_secret_out_of_repr() -> None:
    hello = Hello(1, "a", "g", "b", "g", "repl", "s3cret", None, {})
    assert "s3cret" not in repr(hello)
    assert FrameParser().feed(encode(hello)) == [hello]


def _payload(runs: list[tuple]) -> tuple[bytes, int]:  # type: ignore[type-arg]
    writer = RecordsWriter()
    for topic, ph, kind, path, records, extras in runs:
        seqs, times, pseqs, bodies, corrs, keys = (list(c) for c in zip(*records, strict=True))
        writer.add_run(
            topic.encode(), ph, kind, path, seqs, times, pseqs, bodies,
            [c.encode() for c in corrs] if extras else None,
            [k.encode() for k in keys] if extras else None,
        )  # fmt: skip
    return writer.payload(), writer.count


def _outcome(decode: Callable[[bytes, int], list[Run]], payload: bytes, count: int) -> object:
    try:
        return decode(payload, count)
    except ReplicationProtocolError as exc:
        return ("refused", str(exc))


@pytest.mark.skipif(_frames_c is None, reason="the compiled twin is not built")
@given(runs_strategy, st.data())
def test_the_compiled_run_decoder_agrees_with_the_python_one(
    runs: list[tuple],  # type: ignore[type-arg]
    data: st.DataObject,
) -> None:
    """Same runs for well-formed payloads; for damaged ones (cut, padded, a byte changed,
    a wrong count) the same refusal with the same message."""
    payload, count = _payload(runs)
    assert _outcome(frames._decode_runs_c, payload, count) == _outcome(
        decode_runs_py, payload, count
    )
    damaged = bytearray(payload)
    how = data.draw(st.sampled_from(["cut", "pad", "flip", "count"]))
    if how == "cut" and damaged:
        del damaged[data.draw(st.integers(0, len(damaged) - 1)) :]
    elif how == "pad":
        damaged += data.draw(st.binary(min_size=1, max_size=4))
    elif how == "flip" and damaged:
        damaged[data.draw(st.integers(0, len(damaged) - 1))] ^= data.draw(st.integers(1, 255))
    else:
        count += data.draw(st.sampled_from([-1, 1]))
    raw = bytes(damaged)
    assert _outcome(frames._decode_runs_c, raw, count) == _outcome(decode_runs_py, raw, count)


@pytest.mark.skipif(_frames_c is None, reason="the compiled twin is not built")
@given(
    st.lists(
        st.tuples(
            st.integers(-5, 2**64 + 5), st.integers(-(2**63) - 5, 2**63 + 5),
            st.integers(-5, 2**64 + 5), st.binary(max_size=20),
        ),
        max_size=8,
    ),
    st.booleans(),
)  # fmt: skip
def test_the_compiled_fixed_packer_agrees_with_the_python_one(
    records: list[tuple[int, int, int, bytes]], as_range: bool
) -> None:
    """Same bytes for values that fit (a range of seqs as the packer gets them for
    consecutive records); the same error for one that does not."""
    seqs: list[int] | range = [r[0] for r in records]
    if as_range:
        seqs = range(7, 7 + len(records))
    cols = (seqs, [r[1] for r in records], [r[2] for r in records], [r[3] for r in records])

    def outcome(pack: Callable[..., bytes]) -> object:
        try:
            return pack(*cols)
        except struct.error as exc:
            return ("error", str(exc))

    assert outcome(frames._pack_fixed_c) == outcome(frames.pack_fixed_py)
