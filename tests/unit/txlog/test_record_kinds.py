"""Scheduled and due records: their kinds, the schedule field, the index keys a scan gives
them, and what stays as it was: a journal written before these kinds existed reads
exactly as it did, and a kind no version defines is refused as damage."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.batch import decode_batch, decode_batch_py
from spool.server.txlog.format.codec import (
    decode,
    decode_records,
    encode,
    encode_record,
    iter_records,
    scan,
)
from spool.server.txlog.format.record import (
    DUE_KEY,
    FLAG_LATE,
    FLAG_RELEASED,
    LOST_KEY,
    SCHEDULE_SEPARATOR,
    Record,
    RecordKind,
    late_key,
    schedule_field,
    sow_key_field,
    split_schedule_field,
)

#: a journal written by ``encode`` before kinds 7 and 8 existed, with one record or more of
#: each kind 1-6 and of each shape (plain runs, a path, a correlation id, SOW key fields,
#: a late record, fence placeholders, a binary body, a clock step back), and what that
#: version's decoders and scan read from it
GOLDEN = Path(__file__).parent / "golden"

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
dues = st.integers(min_value=0, max_value=(1 << 63) - 1)


def test_the_kinds_and_the_due_key_are_fixed() -> None:
    """Stored on disk: these values never change."""
    assert (int(RecordKind.SCHEDULED), int(RecordKind.DUE)) == (7, 8)
    assert DUE_KEY.to_bytes(8, "big") == b"DUERECRD"
    assert DUE_KEY != LOST_KEY and SCHEDULE_SEPARATOR == "\x1d"


sow_fields = st.builds(
    sow_key_field,
    st.text(st.characters(exclude_categories=["Cc", "Cs"]), max_size=12),
    st.none() | st.integers(min_value=0, max_value=10**9),
)


@given(dues, sow_fields | st.text(max_size=16))
def test_a_schedule_field_splits_into_what_made_it(due_us: int, field: str) -> None:
    text = schedule_field(due_us, field)
    assert split_schedule_field(text) == (due_us, field)
    assert text == f"{due_us}\x1d{field}"


#: what :func:`schedule_field` writes: a decimal number as Python writes it, the separator
_WRITTEN: re.Pattern[str] = re.compile(r"(0|[1-9][0-9]*)\x1d.*", re.DOTALL | re.ASCII)


@given(
    st.text(st.sampled_from("0123456789\x1d\x1e -+k\u0663\u00b2") | st.characters(), max_size=24)
)
@example("")
@example("\x1d")
@example("0\x1d")
@example("5")
@example("05\x1dk")
@example("-5\x1dk")
@example("+5\x1dk")
@example(" 5\x1dk")
@example("5 \x1dk")
@example("\u0663\x1dk")  # an Arabic-Indic digit: a digit, but not one a due time is written in
@example("\u00b2\x1dk")
@example("12\x1dk\x1d9")
def test_only_a_field_schedule_field_writes_is_split(text: str) -> None:
    """Anything else is refused: a scheduled record's field is never misread."""
    if _WRITTEN.fullmatch(text) is None:
        with pytest.raises(ValueError, match="not the field of a scheduled record"):
            split_schedule_field(text)
        return
    due_us, field = split_schedule_field(text)
    assert schedule_field(due_us, field) == text


def test_a_negative_due_time_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        schedule_field(-1, "k")


@st.composite
def journals(draw: st.DrawFn) -> list[Record]:
    """Consecutive records of every kind, any flags."""
    first = draw(st.integers(min_value=1, max_value=1 << 40))
    n = draw(st.integers(min_value=1, max_value=12))
    return [
        Record(
            seq=first + i,
            timestamp_us=draw(st.integers(min_value=0, max_value=1 << 60)),
            pub_hash=draw(U64),
            pub_seq=draw(U64),
            topic=draw(st.sampled_from(["orders", "prices", ""])),
            message_type="json",
            kind=draw(st.sampled_from(list(RecordKind))),
            path=draw(st.sampled_from([(), ("spool-b",)])),
            flags=draw(st.sampled_from([0, FLAG_LATE, FLAG_RELEASED, FLAG_LATE | FLAG_RELEASED])),
            body=draw(st.binary(max_size=20)),
            sow_key=draw(st.sampled_from(["", "k", schedule_field(5, "k")])),
        )
        for i in range(n)
    ]


def _index_key(r: Record) -> tuple[int, int]:
    """Where the index files a record: what scan must say."""
    if r.kind is RecordKind.LOST:
        return LOST_KEY, r.seq
    if r.kind is RecordKind.DUE:
        return DUE_KEY, r.seq
    return (late_key(r.pub_hash) if r.flags & FLAG_LATE else r.pub_hash), r.pub_seq


@given(journals())
def test_a_scan_files_each_kind_under_its_index_key(records: list[Record]) -> None:
    """A due record under ``DUE_KEY`` with its own seq whatever its flags say, as a
    placeholder under ``LOST_KEY``; a scheduled record under its publisher's key (or late
    key), as any message. Every record decodes back as it was."""
    buf = b"".join(encode_record(r) for r in records)
    res = scan(buf, 0, len(buf), records[0].seq, final=True)
    assert res.reason is None and res.end == len(buf)
    assert [(row[3], row[4]) for row in res.rows] == [_index_key(r) for r in records]
    assert list(iter_records(buf)) == records
    for decoder in (decode_batch, decode_batch_py):
        batch, end = decoder(buf, 0, len(buf), records[0].seq, max_count=100)
        assert list(batch) == records and end == len(buf)
        assert [batch.kind(i) for i in range(len(batch))] == [int(r.kind) for r in records]


def _golden() -> tuple[bytes, dict[str, object], list[Record]]:
    buf = (GOLDEN / "kinds-1-6.journal").read_bytes()
    want = json.loads((GOLDEN / "kinds-1-6.json").read_text())
    records = [
        Record(*head, RecordKind(kind), tuple(path), flags, bytes.fromhex(body), corr, sow)
        for *head, kind, path, flags, body, corr, sow in want["records"]
    ]
    return buf, want, records


def test_a_journal_written_before_these_kinds_reads_as_it_did() -> None:
    buf, want, records = _golden()
    assert {int(r.kind) for r in records} == {1, 2, 3, 4, 5, 6}
    first = records[0].seq
    assert list(iter_records(buf)) == records
    got, end = decode_records(buf, 0, len(buf), first, max_count=100)
    assert got == records and end == len(buf)
    for decoder in (decode_batch, decode_batch_py):
        batch, end = decoder(buf, 0, len(buf), first, max_count=100)
        assert list(batch) == records and end == len(buf)
    res = scan(buf, 0, len(buf), first, final=True)
    assert {"rows": [list(r) for r in res.rows], "end": res.end, "next_seq": res.next_seq,
            "reason": res.reason} == want["scan"]  # fmt: skip


@pytest.mark.parametrize("kind", [0, 9, 200, 255])
def test_a_kind_no_version_defines_is_refused(kind: int) -> None:
    """A journal from a later version with a kind this one does not know: every reader
    stops at it with ``unknown kind``, after the records before it (the batch decoders,
    which read a plain record's kind only when it is asked for, when it is built)."""
    good = encode(1, 5, 7, 1, "t", "json", RecordKind.PUBLISH, (), 0, b"{}")
    strange = encode(2, 6, 7, 2, "t", "json", kind, (), 0, b"{}")
    buf = good + strange
    with pytest.raises(CorruptRecord, match="unknown kind"):
        decode(strange)
    with pytest.raises(CorruptRecord, match="unknown kind"):
        decode_records(buf, 0, len(buf), 1)
    with pytest.raises(CorruptRecord, match="unknown kind"):
        list(iter_records(buf))
    res = scan(buf, 0, len(buf), 1, final=True)
    assert (res.reason, len(res.rows), res.end) == ("unknown kind", 1, len(good))
    for decoder in (decode_batch, decode_batch_py):
        batch, _ = decoder(buf, 0, len(buf), 1, max_count=100)
        assert batch[0].seq == 1
        with pytest.raises(CorruptRecord, match="unknown kind"):
            batch.record(1)
