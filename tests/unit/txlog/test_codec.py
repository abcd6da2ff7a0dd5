"""The record codec: round trips, bulk decoding, damage detection, field limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.txlog.errors import CorruptRecord, FieldOutOfRange, RecordTooLarge
from spool.server.txlog.format.batch import RecordBatch, decode_batch
from spool.server.txlog.format.codec import (
    CRC_RESIDUE,
    HEADER_SIZE,
    MIN_RECORD,
    decode,
    decode_records,
    encode,
    encode_record,
    encode_run,
    iter_records,
    make_record,
    scan,
    skip_to,
)
from spool.server.txlog.format.record import Record, RecordKind

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
names = st.text(min_size=0, max_size=20)


@st.composite
def records(draw: st.DrawFn, seq: int | None = None) -> Record:
    return Record(
        seq=draw(U64) if seq is None else seq,
        timestamp_us=draw(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)),
        pub_hash=draw(U64),
        pub_seq=draw(U64),
        topic=draw(names),
        message_type=draw(st.sampled_from(["json", "fix", "nvfix", "binary", ""])),
        kind=draw(st.sampled_from(list(RecordKind))),
        path=tuple(draw(st.lists(st.text(max_size=12), max_size=4))),
        flags=draw(st.integers(min_value=0, max_value=0xFFFF)),
        body=draw(st.binary(max_size=300)),
        corr_id=draw(st.text(max_size=10)),
        sow_key=draw(st.text(max_size=10)),
    )


@st.composite
def runs(draw: st.DrawFn) -> list[Record]:
    first = draw(st.integers(min_value=1, max_value=1 << 40))
    n = draw(st.integers(min_value=1, max_value=12))
    return [draw(records(seq=first + i)) for i in range(n)]


@given(records())
def test_round_trip(rec: Record) -> None:
    data = encode_record(rec)
    back, end = decode(data)
    assert back == rec
    assert end == len(data)
    assert data[4] == 0xA1


@given(runs())
def test_bulk_decoders_agree_with_single_decode(recs: list[Record]) -> None:
    buf = b"".join(encode_record(r) for r in recs)
    got, end = decode_records(buf, 0, len(buf), recs[0].seq, max_count=1 << 20)
    assert got == recs
    assert end == len(buf)
    batch, end2 = decode_batch(buf, 0, len(buf), recs[0].seq, max_count=1 << 20)
    assert end2 == len(buf)
    assert list(batch) == recs
    assert list(batch.seqs) == [r.seq for r in recs]
    assert batch.timestamps_us == [r.timestamp_us for r in recs]
    assert (batch.pub_hashes, batch.pub_seqs) == (
        [r.pub_hash for r in recs],
        [r.pub_seq for r in recs],
    )
    assert batch[-1] == recs[-1] and batch.timestamp_us(0) == recs[0].timestamp_us
    assert batch.topics == [r.topic for r in recs]
    assert batch.bodies == [r.body for r in recs]
    assert [batch.bookmark(i) for i in range(len(batch))] == [r.bookmark for r in recs]
    assert list(iter_records(buf)) == recs


@given(runs(), st.integers(min_value=1, max_value=5))
def test_limits_stop_bulk_decoding(recs: list[Record], count: int) -> None:
    buf = b"".join(encode_record(r) for r in recs)
    got, end = decode_records(buf, 0, len(buf), recs[0].seq, max_count=count)
    assert got == recs[:count]
    upto = recs[0].seq + count - 1
    got2, _ = decode_records(buf, 0, len(buf), recs[0].seq, upto_seq=upto)
    assert got2 == recs[:count]
    one, _ = decode_records(buf, 0, len(buf), recs[0].seq, max_bytes=1)
    assert one == recs[:1]
    # a buffer cut inside a record returns the whole records before it
    cut = end - 1 if count < len(recs) else len(buf) - 1
    part, stop = decode_records(buf, 0, cut, recs[0].seq, max_count=1 << 20)
    assert part == recs[: len(part)]
    assert stop <= cut


@given(runs(), st.data())
def test_any_flipped_byte_is_detected(recs: list[Record], data: st.DataObject) -> None:
    buf = bytearray(b"".join(encode_record(r) for r in recs))
    i = data.draw(st.integers(min_value=0, max_value=len(buf) - 1))
    bit = data.draw(st.integers(min_value=0, max_value=7))
    buf[i] ^= 1 << bit
    damaged = bytes(buf)
    res = scan(damaged, 0, len(damaged), recs[0].seq, final=True)
    # the scan keeps exactly the records wholly before the damaged byte
    ends = [0]
    for r in recs:
        ends.append(ends[-1] + len(encode_record(r)))
    intact = max(k for k, e in enumerate(ends) if e <= i)
    assert len(res.offsets) == intact
    assert res.damaged
    # the read path never returns a damaged record: it raises, or (a length grown past the
    # end of what was read) stops before it, leaving the reader to find the torn end
    try:
        got, _ = decode_records(damaged, 0, len(damaged), recs[0].seq, max_count=1 << 20)
    except CorruptRecord:
        return
    assert len(got) < len(recs)
    assert got == recs[: len(got)]


@given(runs())
def test_scan_reports_clean_end_torn_tail_and_zero_padding(recs: list[Record]) -> None:
    buf = b"".join(encode_record(r) for r in recs)
    clean = scan(buf, 0, len(buf), recs[0].seq, final=True)
    assert clean.reason is None and not clean.damaged
    assert len(clean.offsets) == len(recs) and clean.end == len(buf)
    padded = buf + bytes(100)
    res = scan(padded, 0, len(padded), recs[0].seq, final=True)
    assert res.reason == "end of data" and not res.damaged and res.end == len(buf)
    torn = buf[:-1]
    res = scan(torn, 0, len(torn), recs[0].seq, final=True)
    assert res.reason == "torn record" and len(res.offsets) == len(recs) - 1
    res = scan(torn, 0, len(torn), recs[0].seq, final=False)
    assert res.reason is None and res.need_more
    res = scan(buf, 0, len(buf), recs[0].seq + 1, final=True)
    assert res.reason == "sequence gap" and not res.offsets


def test_crc_residue_makes_record_checks_one_crc() -> None:
    import google_crc32c

    data = encode(1, 2, 3, 4, "t", "json", RecordKind.PUBLISH, (), 0, b"x")
    assert google_crc32c.value(data) == CRC_RESIDUE
    assert len(data) == MIN_RECORD + 1 + 4 + 1


def test_fast_constructor_builds_ordinary_records() -> None:
    a = make_record(1, 2, 3, 4, "t", "json", RecordKind.SOW_DELETE, ("a",), 5, b"b", "c", "k")
    b = Record(1, 2, 3, 4, "t", "json", RecordKind.SOW_DELETE, ("a",), 5, b"b", "c", "k")
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    with pytest.raises(AttributeError):
        a.seq = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "kwargs", "error"),
    [
        ("topic", {"topic": "t" * 70000}, RecordTooLarge),
        ("message_type", {"message_type": "m" * 300}, RecordTooLarge),
        ("corr_id", {"corr_id": "c" * 70000}, RecordTooLarge),
        ("path", {"path": ("p",) * 300}, RecordTooLarge),
        ("path name", {"path": ("p" * 300,)}, RecordTooLarge),
        ("pub_seq", {"pub_seq": -1}, FieldOutOfRange),
        ("pub_hash", {"pub_hash": 1 << 64}, FieldOutOfRange),
        ("flags", {"flags": 1 << 16}, FieldOutOfRange),
    ],
)
def test_fields_that_do_not_fit_are_named(
    field: str, kwargs: dict[str, object], error: type[Exception]
) -> None:
    args: dict[str, object] = {
        "seq": 1, "timestamp_us": 0, "pub_hash": 1, "pub_seq": 1, "topic": "t",
        "message_type": "json", "kind": RecordKind.PUBLISH, "path": (), "flags": 0, "body": b"",
    }  # fmt: skip
    args.update(kwargs)
    with pytest.raises(error) as info:
        encode(**args)  # type: ignore[arg-type]
    assert info.value.field == field  # type: ignore[attr-defined]


def test_reasons_for_bad_bytes() -> None:
    good = encode(5, 0, 1, 1, "t", "json", RecordKind.PUBLISH, (), 0, b"body")
    with pytest.raises(CorruptRecord, match="bad length"):
        decode(bytes(64))
    bad_format = good[:4] + b"\x00" + good[5:]
    with pytest.raises(CorruptRecord, match="bad format"):
        decode(bad_format)
    with pytest.raises(CorruptRecord, match="torn record"):
        decode(good[:-3])
    with pytest.raises(CorruptRecord, match="torn record"):
        decode(good[: HEADER_SIZE - 1])
    with pytest.raises(CorruptRecord, match="sequence gap"):
        decode_records(good, 0, len(good), 6)


def test_skip_walks_lengths_only() -> None:
    recs = [
        encode(10 + i, 0, 1, i + 1, "t", "json", RecordKind.PUBLISH, (), 0, b"x" * i)
        for i in range(5)
    ]
    buf = b"".join(recs)
    pos, seq = skip_to(buf, 0, len(buf), 10, 13)
    assert seq == 13 and pos == sum(len(r) for r in recs[:3])
    pos, seq = skip_to(buf, 0, len(buf) - 1, 10, 99)
    assert seq == 14  # the last record is cut: the walk stops before it


@settings(max_examples=30)
@given(runs())
def test_batch_from_records_matches_decoded(recs: list[Record]) -> None:
    batch = RecordBatch.from_records(recs)
    assert list(batch) == recs and batch[1:] == recs[1:]
    assert batch.first_seq == recs[0].seq and batch.last_seq == recs[-1].seq
    assert len(RecordBatch.empty()) == 0 and RecordBatch.empty().last_seq == 0


@pytest.mark.parametrize("extras", [False, True])
def test_encode_run_is_encode_per_record_and_stops_before_one_that_does_not_fit(
    extras: bool,
) -> None:
    bodies = [b"a", b"bb", b"", b"dddd"]
    corr_ids = ["x1", "", "x3", "x4"] if extras else None
    sow_keys = ["k1", "k2", "", "k4"] if extras else None
    ts, h = 1_700_000_000_000_000, 77

    def one(i: int, ps: int) -> bytes:
        corr = corr_ids[i] if corr_ids else ""
        key = sow_keys[i] if sow_keys else ""
        return encode(10 + i, ts, h, ps, "t", "json", RecordKind.PUBLISH, (), 0, bodies[i],
                      corr, key)  # fmt: skip

    run = encode_run(10, ts, h, [5, 6, 7, 8], "t", "json", bodies, corr_ids, sow_keys)
    assert run == [one(i, ps) for i, ps in enumerate([5, 6, 7, 8])]
    # a pub_seq out of the u64 range: the run ends before it, encode() names the reason
    short = encode_run(10, ts, h, [5, 6, 1 << 64, 8], "t", "json", bodies, corr_ids, sow_keys)
    assert short == run[:2]
    with pytest.raises(FieldOutOfRange):
        one(2, 1 << 64)
