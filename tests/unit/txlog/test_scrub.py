"""Damage in finished journals is found - at open (edge blocks), by the scrub (every byte,
paced), by a read that meets it - and fenced: the damaged records' seqs are held, the
records after them stay readable. A damaged index file is written again from its journal.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from pathlib import Path

import pytest

from spool.server.clock import VirtualClock
from spool.server.txlog import TransactionLog
from spool.server.txlog.errors import CorruptRecord, FencedRecords
from spool.server.txlog.format.codec import HEADER, scan
from spool.server.txlog.storage.files import index_name
from tests.unit.txlog.helpers import INSTANCE, config, fill, journal_files, read_all, run

Events = list[tuple[str, dict[str, object]]]


def make_log(
    tmp: Path, events: Events | None = None, *, clock: VirtualClock | None = None, **kw: object
) -> TransactionLog:
    def on_event(name: str, fields: dict[str, object]) -> None:
        if events is not None:
            events.append((name, fields))

    extra = {"clock": clock} if clock is not None else {}
    return TransactionLog(
        config(tmp, flush_interval=0.0 if clock else 0.0005), INSTANCE, on_event=on_event,
        block_bytes=512, **extra, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def write_log(tmp: Path, n: int) -> None:
    async def body() -> None:
        log = make_log(tmp)
        await log.open()
        await fill(log, n)
        await log.close()

    run(body)


def records(path: Path) -> list[tuple[int, int, int]]:
    """``(offset, length, seq)`` of each record of a journal file."""
    data = path.read_bytes()
    base = HEADER.unpack_from(data, 0)[4]
    res = scan(data, 0, len(data), base, final=True)
    return [(off, length, base + i) for i, (off, length, *_r) in enumerate(res.rows)]


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def middle_record(path: Path) -> tuple[int, int, int]:
    """A record in the middle of a journal: neither in its first nor its last block."""
    rows = records(path)
    return rows[len(rows) // 2]


async def until(cond: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.01)


async def read_around_fences(log: TransactionLog) -> tuple[list[int], list[tuple[int, int]]]:
    """Every durable seq served, and the fenced ranges met on the way (a reader that asked
    to skip damage: it goes on after each)."""
    seqs: list[int] = []
    met: list[tuple[int, int]] = []
    seq = log.first_seq
    while True:
        try:
            batch = await log.read_view(seq, max_count=500)
        except FencedRecords as exc:
            met.append((exc.first_seq, exc.last_seq))
            seq = exc.last_seq + 1
            continue
        if not batch:
            return seqs, met
        seqs.extend(batch.seqs)
        seq = batch.last_seq + 1


def test_open_checks_only_the_edges_of_finished_journals_and_the_scrub_finds_the_rest(
    tmp_path: Path,
) -> None:
    write_log(tmp_path, 2000)
    journals = journal_files(tmp_path)
    assert len(journals) >= 3
    off, length, seq = middle_record(journals[1])
    flip(journals[1], off + length // 2)
    events: Events = []

    async def body() -> None:
        log = make_log(tmp_path, events)
        report = await log.open()
        assert report.damage == () and report.fenced == () and log.fences == []
        log.start_scrub()
        assert log.scrub()
        await until(lambda: log.scrub_status.passes == 1)
        # found, and fenced: the one damaged record's seq is held, the rest is served
        assert [(f.first_seq, f.last_seq, f.found_by, f.reason) for f in log.fences] == [
            (seq, seq, "scrub", "crc mismatch")
        ]
        assert log.damage == []
        seqs, met = await read_around_fences(log)
        assert met == [(seq, seq)]
        assert seqs == [s for s in range(1, 2001) if s != seq]
        status = log.scrub_status
        assert status.journals_checked == status.journals_total == len(journal_files(tmp_path))
        assert status.bytes_checked == status.bytes_total > 0
        assert log.stats()["fenced_ranges"] == 1.0 and log.stats()["fenced_records"] == 1.0
        assert log.stats()["scrub_bytes"] == status.bytes_checked
        # a second pass finds nothing more: the journal was written anew around its damage
        assert log.scrub()
        await until(lambda: log.scrub_status.passes == 2)
        assert len(log.fences) == 1 and log.scrub_status.damage_found == 1
        await log.close()

    run(body)
    names = [name for name, _ in events]
    assert names.count("journal_damaged") == 1 and names.count("journal_fenced") == 1
    assert next(f for n, f in events if n == "journal_fenced")["first_seq"] == seq


def test_damage_in_the_last_block_of_a_finished_journal_is_fenced_at_open(tmp_path: Path) -> None:
    write_log(tmp_path, 2000)
    journal = journal_files(tmp_path)[0]
    off, length, seq = records(journal)[-1]
    flip(journal, off + length - 2)
    events: Events = []

    async def body() -> None:
        log = make_log(tmp_path, events)
        report = await log.open()
        assert [(f["first_seq"], f["last_seq"], f["found_by"]) for f in report.fenced] == [
            (seq, seq, "startup")
        ]
        assert [(f.first_seq, f.last_seq) for f in log.fences] == [(seq, seq)]
        seqs, met = await read_around_fences(log)
        assert met == [(seq, seq)] and len(seqs) == 1999
        await log.close()

    run(body)
    assert [f["first_seq"] for name, f in events if name == "journal_fenced"] == [seq]


def test_a_read_that_meets_damage_has_its_journal_checked_at_once(tmp_path: Path) -> None:
    write_log(tmp_path, 2000)
    journal = journal_files(tmp_path)[1]
    off, _length, seq = middle_record(journal)
    flip(journal, off + 8)  # its seq field

    async def body() -> None:
        log = make_log(tmp_path)
        await log.open()
        log.start_scrub()  # interval 0: it only runs when asked, or when a read fails
        try:
            await read_all(log)
        except CorruptRecord:
            pass
        else:
            raise AssertionError("the read should have failed")
        await until(lambda: bool(log.fences))
        assert [(f.first_seq, f.last_seq, f.found_by) for f in log.fences] == [(seq, seq, "read")]
        assert log.scrub_status.passes == 0
        # the same read now names the range, and the records after it are served
        with pytest.raises(FencedRecords) as info:
            await read_all(log)
        assert (info.value.first_seq, info.value.last_seq) == (seq, seq)
        assert f"records {seq}..{seq}" in str(info.value)
        seqs, _met = await read_around_fences(log)
        assert seqs[-1] == 2000 and len(seqs) == 1999
        await log.close()

    run(body)


def test_a_damaged_index_file_is_written_again_from_its_journal(tmp_path: Path) -> None:
    write_log(tmp_path, 2000)
    journal = journal_files(tmp_path)[1]
    base = int(journal.name.split(".")[1])
    index = journal.parent / index_name(INSTANCE, base)
    events: Events = []

    async def body() -> None:
        log = make_log(tmp_path, events)
        await log.open()
        log.start_scrub()
        flip(index, 100)  # after the open mapped it: bit rot on disk
        assert log.scrub()
        await until(lambda: log.scrub_status.passes == 1)
        assert log.damage == []
        assert log.seq_for_bookmark(7, base + 3) == base + 3
        seqs = [s for batch in await read_all(log) for s in batch.seqs]
        assert seqs == list(range(1, 2001))
        await log.close()

    run(body)
    names = [name for name, _ in events]
    assert "index_damaged" in names and "index_rebuilt" in names
    # the file on disk is whole again: the next open trusts it
    events.clear()

    async def again() -> None:
        log = make_log(tmp_path, events)
        report = await log.open()
        assert report.indexes_rebuilt == () and report.index_problems == ()
        await log.close()

    run(again)


def test_the_scrub_reads_no_faster_than_its_rate(tmp_path: Path) -> None:
    """On a virtual clock: a pass over the journals takes at least their size divided by
    the rate (less one read), and ends once that time has passed."""
    write_log(tmp_path, 2000)
    rate = 16 * 1024

    async def body() -> None:
        clock = VirtualClock()
        log = make_log(tmp_path, clock=clock, scrub_rate=rate)
        await log.open()
        log.start_scrub()
        assert log.scrub()
        total = log.scrub_status.bytes_total or sum(
            j.data_bytes for j in log.journals() if j.state != "preallocated"
        )
        largest = max(j.data_bytes for j in log.journals())
        started = clock.monotonic()
        while log.scrub_status.passes == 0:
            await clock.advance(0.25)
            await asyncio.sleep(0.005)
            assert clock.monotonic() - started < total / rate + 30, "the pass never ended"
        took = clock.monotonic() - started
        assert took >= (total - largest) / rate
        await log.close()

    run(body)


def test_a_journal_removed_while_the_scrub_reads_its_index_is_passed_over(
    tmp_path: Path,
) -> None:
    """The scrub reads a sealed index file in a thread; a journal removed meanwhile has
    its mapped index closed, and the scrub goes on with the next one (and the next pass)
    instead of failing on it."""
    write_log(tmp_path, 2000)

    async def body() -> None:
        log = make_log(tmp_path)
        await log.open()
        oldest = log.journals()[0]
        index_path = Path(oldest.path).parent / index_name(INSTANCE, oldest.id)
        assert index_path.exists()
        # the index file becomes a pipe: the scrub's read of it waits for this test
        sealed = index_path.read_bytes()
        pipe = index_path.with_suffix(".pipe")
        os.mkfifo(pipe)
        os.replace(pipe, index_path)
        log.start_scrub()
        assert log.scrub()
        deadline = time.monotonic() + 20
        while True:  # the scrub's thread has the pipe open for reading
            try:
                writer = os.open(index_path, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                assert exc.errno == errno.ENXIO and time.monotonic() < deadline
                await asyncio.sleep(0.01)
        await log.remove(oldest.id)
        os.set_blocking(writer, True)
        os.write(writer, sealed)
        os.close(writer)
        await until(lambda: log.scrub_status.passes == 1)
        assert log.scrub()  # the scrub lives on
        await until(lambda: log.scrub_status.passes == 2)
        assert log.scrub_status.damage_found == 0
        await log.close()

    run(body)
