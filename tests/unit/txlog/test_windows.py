"""Readers that walk journals in bounded windows see every record, wherever the windows end.

The reference is ``spool journal verify`` (recovery's scan): for any record sizes, read
windows and file tail (preallocated zeros, none, a torn record, stray bytes), every other
reader of whole journals - the shared window reader, ``spool journal dump``, ``spool sow
rebuild``, the pipeline's scanner and the soak's oracle - must give exactly the records
verify counts, with their content, and report damage exactly where verify does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.pipeline.catalog import TAIL_SCAN_LIMIT, Catalog
from spool.server.pipeline.planner import plan_scan
from spool.server.pipeline.predicate import ScanPredicate
from spool.server.pipeline.scanner import READ_BYTES, Columns, Damage, SliceScanner
from spool.server.sow.cli import cmd_rebuild
from spool.server.txlog.cli import cmd_dump, cmd_verify, iter_file_records
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.codec import decode, encode, encode_record
from spool.server.txlog.format.record import Record, RecordKind
from spool.server.txlog.storage.compression import compress_journal
from spool.server.txlog.storage.files import journal_name
from spool.server.txlog.storage.source import READ_SLACK, WINDOW, PlainSource, read_span
from tests.soak.oracle import read_log
from tests.support.server import config_xml, sow_topic

T0 = 1_700_000_000_000_000


def _record(seq: int, body: bytes) -> bytes:
    return encode(seq, T0 + seq, 7, seq, "t", "json", 1, (), 0, body)


@pytest.mark.parametrize("gap", [1, 2, 3, 51])
def test_read_span_reads_a_record_that_starts_just_before_its_read_ends(
    tmp_path: Path, gap: int
) -> None:
    """A record starts ``gap`` bytes before the end of what one read takes: the read
    goes on at that record instead of calling its length field bad."""
    max_bytes = 1000
    first = _record(1, b"")
    first = _record(1, b"x" * (max_bytes + READ_SLACK - gap - len(first)))
    rest = [_record(seq, b'{"n":%d}' % seq) for seq in range(2, 40)]
    path = tmp_path / "j"
    path.write_bytes(first + b"".join(rest) + bytes(4096))
    source = PlainSource(path)
    try:
        records, _offset, seq = read_span(
            source, 0, 1, len(first) + sum(map(len, rest)), 2,
            max_count=100, max_bytes=max_bytes, upto_seq=39, as_batch=False,
        )  # fmt: skip
    finally:
        source.retire()
    assert isinstance(records, list) and records
    assert [r.seq for r in records] == list(range(2, seq))
    assert [r.body for r in records] == [b'{"n":%d}' % s for s in range(2, seq)]


# -- the property: every reader of whole journals against verify ------------------------

INSTANCE = "spool-test"  # the name config_xml gives, so `spool sow rebuild` finds the log


@dataclass(frozen=True)
class Shape:
    """One record to write: its body padding and its rare fields."""

    pad: int
    extra: str  # "", "path", "corr" or "sow"


@dataclass(frozen=True)
class Tail:
    """What follows the records in the file.

    ``zeros``: ``n`` zero bytes (preallocated space). ``torn``: the last record loses
    ``n`` bytes, then ``zeros`` zero bytes follow. ``stray``: bytes that are no record
    (their first one non-zero), then ``zeros`` zero bytes.
    """

    kind: str
    n: int
    zeros: int
    stray: bytes = b""


def _encode(seq: int, shape: Shape, *, length: int = 0) -> bytes:
    """The record ``seq``; ``length`` pads its body to make the record that long."""

    def make(pad: int) -> bytes:
        body = b'{"id":%d,"p":"%s"}' % (seq, b"x" * pad)
        return encode(
            seq, T0 + seq, 7, seq, "orders", "json", RecordKind.PUBLISH,
            ("east", "west") if shape.extra == "path" else (), 0, body,
            f"c{seq}" if shape.extra == "corr" else "", f"k{seq}" if shape.extra == "sow" else "",
        )  # fmt: skip

    if length:
        return make(length - len(make(0)))
    return make(shape.pad)


@dataclass
class Written:
    """A journal file and the truth about it."""

    path: Path
    records: list[Record]  # the intact records, in order
    offsets: list[int]
    damage_at: int | None  # where the bytes stop being records (None: clean)


def _write(directory: Path, shapes: list[Shape], tail: Tail, lead: int = 0) -> Written:
    """A plain journal of ``shapes`` (the first one ``lead`` bytes long when given)."""
    datas = [
        _encode(seq, shape, length=lead if seq == 1 else 0) for seq, shape in enumerate(shapes, 1)
    ]
    good = datas
    extra = bytes(tail.zeros)
    if tail.kind == "torn":
        last = datas[-1]
        cut = 1 + tail.n % (len(last) - 1)
        while not any(last[len(last) - cut :]):  # zeros after must not restore it
            cut += 1
        good = datas[:-1]
        extra = last[: len(last) - cut] + extra
    elif tail.kind == "stray":
        extra = tail.stray + extra
    elif tail.kind == "zeros":
        extra = bytes(tail.n)
    offsets = list(accumulate(map(len, good), initial=0))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / journal_name(INSTANCE, 1)
    path.write_bytes(b"".join(good) + extra)
    records = [decode(d)[0] for d in good]
    damage_at = None if tail.kind == "zeros" else offsets[-1]
    return Written(path, records, offsets[:-1], damage_at)


def _verify(directory: Path) -> tuple[int, tuple[int, str] | None]:
    """``spool journal verify``: records it keeps, and where and why it would cut."""
    out = io.StringIO()
    args = argparse.Namespace(dir=directory, name=INSTANCE, archive=None, json=True)
    with contextlib.redirect_stderr(io.StringIO()):
        code = cmd_verify(args, out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    count = sum(int(r["records"]) for r in rows if "records" in r)
    cuts = rows[-1]["report"]["truncations"]
    assert code == (1 if cuts else 0)
    return count, ((cuts[0]["offset"], cuts[0]["reason"]) if cuts else None)


def _fields(r: Record) -> tuple[object, ...]:
    return (r.seq, r.timestamp_us, r.pub_hash, r.pub_seq, r.topic, r.path, r.corr_id,
            r.sow_key, r.body)  # fmt: skip


def _file_records(
    path: Path, window: int
) -> tuple[list[tuple[int, Record]], tuple[int, str] | None]:
    got: list[tuple[int, Record]] = []
    try:
        for item in iter_file_records(path, window=window):
            got.append(item)
    except CorruptRecord as exc:
        return got, (exc.offset, exc.reason)
    return got, None


def _pipeline(
    directory: Path, read_bytes: int, scan_limit: int
) -> tuple[list[tuple[object, ...]], list[Damage]]:
    rows: list[tuple[object, ...]] = []
    damage: list[Damage] = []
    with Catalog.open(directory, scan_limit=scan_limit) as catalog:
        plan = plan_scan(catalog, ScanPredicate())
    for s in plan.slices:
        for item in SliceScanner(s, ScanPredicate(), read_bytes=read_bytes).scan():
            if isinstance(item, Columns):
                rows.extend(zip(item.offsets, item.seqs, item.times, item.hashes, item.pseqs,
                                item.topics, item.paths, item.corr_ids, item.sow_keys,
                                item.bodies, strict=True))  # fmt: skip
            else:
                damage.append(item)
    return rows, damage


def _columns(offsets: list[int], records: list[Record]) -> list[tuple[object, ...]]:
    return [
        (o, r.seq, r.timestamp_us, r.pub_hash, r.pub_seq, r.topic, list(r.path),
         r.corr_id or None, r.sow_key or None, r.body)
        for o, r in zip(offsets, records, strict=True)
    ]  # fmt: skip


shapes = st.lists(
    st.builds(Shape, st.integers(0, 300), st.sampled_from(["", "", "", "path", "corr", "sow"])),
    min_size=1,
    max_size=40,
)
tails = st.one_of(
    st.builds(Tail, st.just("zeros"), st.integers(0, 120), st.just(0)),
    st.builds(Tail, st.just("torn"), st.integers(0, 1 << 16), st.integers(0, 120)),
    st.builds(
        Tail, st.just("stray"), st.just(0), st.integers(0, 120),
        st.binary(min_size=1, max_size=60).map(lambda b: bytes([b[0] | 1]) + b[1:]),
    ),
)  # fmt: skip


def _check_against_verify(w: Written, count: int, cut: tuple[int, str] | None) -> None:
    """verify itself against the truth the file was written with."""
    assert count == len(w.records)
    assert (cut is None) == (w.damage_at is None)
    if cut is not None:
        assert cut[0] == w.damage_at


def _compress(w: Written) -> None:
    """Replace a clean journal by its zstd form."""
    end = w.offsets[-1] + len(encode_record(w.records[-1]))
    dest = w.path.with_name(journal_name(INSTANCE, 1, "zstd"))
    compress_journal(w.path, dest, "zstd", data_len=end)
    w.path.unlink()
    w.path = dest


@settings(max_examples=300, deadline=None)
@given(
    shapes=shapes,
    tail=tails,
    window=st.integers(1, 3000),
    scan_limit=st.integers(1, 4000),
    compressed=st.booleans(),
)
def test_windowed_readers_read_what_verify_counts(
    shapes: list[Shape], tail: Tail, window: int, scan_limit: int, compressed: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "journal"
        w = _write(directory, shapes, tail)
        if compressed and w.damage_at is None:
            _compress(w)
        count, cut = _verify(directory)
        _check_against_verify(w, count, cut)

        got, damage = _file_records(w.path, window)
        assert [o for o, _ in got] == w.offsets
        assert [_fields(r) for _, r in got] == [_fields(r) for r in w.records]
        assert damage == cut

        rows, found = _pipeline(directory, window, scan_limit)
        assert rows == _columns(w.offsets, w.records)
        assert [(d.offset, d.reason) for d in found] == ([cut] if cut else [])


def _dump(path: Path) -> tuple[list[dict[str, object]], int, str]:
    """``spool journal dump FILE --json``: rows, exit code, error output."""
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(file=path, start=None, topic=None, limit=0, json=True)
    with contextlib.redirect_stderr(err):
        code = cmd_dump(args, out)
    return [json.loads(line) for line in out.getvalue().splitlines()], code, err.getvalue()


def _sow_rebuild(config: Path) -> dict[str, object]:
    """``spool sow rebuild --config FILE --json``: its one report (topic ``orders``)."""
    out = io.StringIO()
    args = argparse.Namespace(config=config, topic=None, json=True)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cmd_rebuild(args, out)
    assert code == 0, err.getvalue()
    (report,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert isinstance(report, dict)
    return report


@settings(max_examples=40, deadline=None)
@given(shapes=shapes, tail=tails, gap=st.integers(0, 8) | st.integers(0, 400))
def test_the_tools_read_across_their_default_window(
    shapes: list[Shape], tail: Tail, gap: int
) -> None:
    """The first record ends ``gap`` bytes before the tools' 1 MiB read window, so the
    window ends at every position in and between the records after it."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        w = _write(data / "journal", [Shape(0, ""), *shapes], tail, lead=WINDOW - gap)
        count, cut = _verify(w.path.parent)
        _check_against_verify(w, count, cut)

        rows, code, err = _dump(w.path)
        assert [(r["offset"], r["seq"], r["body"]) for r in rows] == [
            (o, r.seq, r.body.decode()) for o, r in zip(w.offsets, w.records, strict=True)
        ]
        assert code == (1 if cut else 0)
        if cut:
            assert f"at offset {cut[0]}: {cut[1]}" in err

        config = Path(tmp) / "spool.xml"
        config.write_text(config_xml(data, sow=sow_topic("orders", "/id")))
        report = _sow_rebuild(config)
        assert (report["records"], report["file_seq"]) == (count, count)

        log = read_log(data / "journal", None, INSTANCE)
        assert [(r.seq, r.pub_seq) for r in log.records] == [(r.seq, r.pub_seq) for r in w.records]

        scanned, found = _pipeline(data / "journal", READ_BYTES, TAIL_SCAN_LIMIT)
        assert scanned == _columns(w.offsets, w.records)
        assert [(d.offset, d.reason) for d in found] == ([cut] if cut else [])
