"""The instance's own identity after a lost tail: no restart numbers a record again.

An instance that replicates numbers its own records ahead against a floor written before
they are handed out (server/txlog/publishers/ownfloor.py), and recovery that cuts a torn tail moves
the highest past what the tail could have held: the sequences passed over become a gap a
late copy fills. No record backs that highest; these tests restart the log in every way
that could forget it (a crash before any own record, a clean close that saves the
publisher table, old journals removed, whole records lost at a clean end) and check that
the next own record never takes a bookmark given out before, and that the lost sequences
stay missing (not held) until a late copy fills them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from spool.server.bookmarks import broker_pub_hash
from spool.server.txlog import PublisherSequenceRegression, TransactionLog
from spool.server.txlog import log as txlog_module
from spool.server.txlog.errors import OwnFloorUnwritten
from spool.server.txlog.events import EventCallback
from spool.server.txlog.publishers.incarnation import read_incarnation
from spool.server.txlog.publishers.ownfloor import RESERVE, floor_name, read_floor, write_floor
from spool.server.txlog.storage.files import OsFileSeam, clients_ack_name
from tests.support.damage import cut_last_records, journals, zero_end_of_last_record
from tests.unit.txlog.helpers import INSTANCE, config, fill, journal_files, run

OTHER = 0x5EED


def _log(
    tmp: Path, journal_size: int = 64 * 1024, on_event: EventCallback | None = None
) -> TransactionLog:
    return TransactionLog(
        config(tmp, journal_size=journal_size, preallocated=0), INSTANCE, track_gaps=True,
        block_bytes=512, on_event=on_event,
    )  # fmt: skip


def _append(log: TransactionLog, pub: int, s: int, *, late: bool = False) -> None:
    log.append(
        topic="t", message_type="json", pub_hash=pub, pub_seq=s, body=b'{"s":%d}' % s, late=late
    )


async def _torn_own_tail(tmp: Path, own_records: int) -> int:
    """A log whose last record, the own identity's ``own_records``-th, is torn after a
    crash; the own identity."""
    log = _log(tmp)
    await log.open()
    own = log.own_pub_hash
    for s in range(1, 4):
        _append(log, OTHER, s)
    for s in range(1, own_records + 1):
        _append(log, own, s)
    await log.wait_durable(log.last_seq)
    await log.abort()
    zero_end_of_last_record(journals(tmp / "journal", INSTANCE)[-1])
    return own


def test_a_skip_survives_a_crash_before_the_next_own_record(tmp_path: Path) -> None:
    async def body() -> None:
        own = await _torn_own_tail(tmp_path, 3)
        log = _log(tmp_path)
        await log.open()
        assert log.recovery_report is not None and log.recovery_report.truncations
        skipped = log.publisher_last(own)
        assert skipped >= 3 and not log.holds(own, 3) and log.publishers.missing(own, 3)
        await log.abort()  # a crash: nothing of its own written, no publisher table saved
        for _ in range(2):
            log = _log(tmp_path)
            await log.open()
            # never below: each open starts at the floor the one before wrote
            assert log.publisher_last(own) >= skipped
            skipped = log.publisher_last(own)
            assert log.publishers.missing(own, 3)
            await log.abort()
        log = _log(tmp_path)
        await log.open()
        skipped = log.publisher_last(own)
        _append(log, own, 3, late=True)  # the peer's copy of the torn record
        _append(log, own, skipped + 1)  # the next own record: a new bookmark
        with pytest.raises(PublisherSequenceRegression):
            _append(log, own, skipped)
        await log.close()

    run(body)


def test_a_clean_close_after_a_skip_keeps_the_skipped_sequences_missing(tmp_path: Path) -> None:
    """The table saved at close has the skipped highest; what it skipped is not held."""

    async def body() -> None:
        own = await _torn_own_tail(tmp_path, 5)
        log = _log(tmp_path)
        await log.open()
        skipped = log.publisher_last(own)
        assert skipped >= 5
        await log.close()
        log = _log(tmp_path)
        await log.open()
        assert log.publisher_last(own) >= skipped
        for s in (5, 6, skipped // 2, skipped):
            assert not log.holds(own, s), s  # a repair or a late copy brings it back
        assert log.holds(own, 4)
        _append(log, own, 5, late=True)
        assert log.holds(own, 5)
        await log.close()

    run(body)


def test_an_own_identity_with_only_a_late_record_keeps_it_as_its_highest(
    tmp_path: Path,
) -> None:
    """Its only record torn, sent back late by a peer, then a crash: the late record is
    all the journals hold of it, under its late key; it is held, and the highest."""

    async def body() -> None:
        own = await _torn_own_tail(tmp_path, 1)
        log = _log(tmp_path)
        await log.open()
        skipped = log.publisher_last(own)
        _append(log, own, 1, late=True)
        await log.wait_durable(log.last_seq)
        await log.abort()
        log = _log(tmp_path)
        await log.open()
        assert log.holds(own, 1)
        assert log.publisher_last(own) >= skipped
        with pytest.raises(PublisherSequenceRegression):
            _append(log, own, 1)
        await log.close()

    run(body)


def test_the_floor_outlives_the_journals_that_held_the_identity(tmp_path: Path) -> None:
    async def body() -> None:
        own = await _torn_own_tail(tmp_path, 2)
        log = _log(tmp_path, journal_size=4096)
        await log.open()
        skipped = log.publisher_last(own)
        for s in range(4, 400):  # rolls: the journals with the own records are finished
            _append(log, OTHER, s)
        await log.wait_durable(log.last_seq)
        await log.remove(log.journals()[1].id)  # and the one before it
        assert log.first_seq > 5
        await log.abort()
        # a cache anyone may delete: only the journals and the floor say anything now
        (tmp_path / "journal" / clients_ack_name(INSTANCE)).unlink()
        log = _log(tmp_path, journal_size=4096)
        await log.open()
        assert log.publisher_last(own) >= skipped
        with pytest.raises(PublisherSequenceRegression):
            _append(log, own, skipped)
        await log.close()

    run(body)


def test_a_floor_of_another_incarnation_is_ignored_and_an_unreadable_one_starts_anew(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        directory = tmp_path / "journal"
        own = await _torn_own_tail(tmp_path, 1)
        log = _log(tmp_path)
        await log.open()
        token = read_incarnation(directory, INSTANCE)
        assert token is not None and own == broker_pub_hash(INSTANCE, token)
        assert read_floor(directory, INSTANCE, token) == log.publisher_last(own) + RESERVE
        assert read_floor(directory, INSTANCE, "0" * 32) == 0
        await log.close()
        (directory / floor_name(INSTANCE)).write_bytes(b"\x00garbage")
        log = _log(tmp_path)
        await log.open()
        fresh = log.own_pub_hash
        assert fresh != own  # any floor could have been there: a new identity
        assert log.publisher_last(fresh) == 0
        await log.close()
        log = _log(tmp_path)
        await log.open()
        assert log.own_pub_hash == fresh  # and it keeps that one
        await log.close()

    run(body)


def test_a_missing_journal_asks_for_the_own_records_numbered_past_a_skip(
    tmp_path: Path,
) -> None:
    """The own identity's highest was moved far past its last record (a lost tail, or an
    earlier fence's interval: its floor), and its next records went into a journal that
    is now missing, with none after it. The fence's interval for the identity reaches
    them: they are numbered past the floor, not after the last record before the fence."""

    async def first() -> None:
        log = _log(tmp_path)
        await log.open()
        for s in (1, 2):
            _append(log, log.own_pub_hash, s)
        await log.close()

    run(first)
    token = read_incarnation(tmp_path / "journal", INSTANCE)
    assert token is not None
    floor = 5000  # a skip far past its records, as the floor file keeps it
    write_floor(OsFileSeam(), tmp_path / "journal", INSTANCE, token, floor)
    mine: list[int] = []

    async def second() -> None:
        log = _log(tmp_path)
        await log.open()
        own = log.own_pub_hash
        assert log.publisher_last(own) == floor
        await fill(log, 1500, pub_hash=OTHER)
        for s in range(floor + 1, floor + 4):
            mine.append(log.append(topic="t", message_type="json", pub_hash=own,
                                   pub_seq=s, body=b"{}").seq)  # fmt: skip
        for _ in range(3):
            await fill(log, 1500, pub_hash=OTHER)
        await log.close()

    run(second)
    files = journal_files(tmp_path)
    bases = [int(p.name.split(".")[1]) for p in files]
    at = max(i for i, b in enumerate(bases) if b <= mine[0])
    assert bases[at + 1] > mine[-1] and at + 2 < len(files)  # a middle journal
    files[at].unlink()
    files[at].with_suffix(".index").unlink()

    async def third() -> None:
        log = _log(tmp_path)
        await log.open()
        own = log.own_pub_hash
        (fence,) = log.fences
        assert not fence.exact
        (named,) = [(lo, hi) for key, lo, hi in fence.identities if key == own]
        assert named[0] <= floor + 1 and named[1] >= floor + 3, (named, fence.records)
        nxt = log.append(topic="t", message_type="json", pub_hash=own,
                         pub_seq=log.publisher_last(own) + 1, body=b"{}")  # fmt: skip
        assert nxt.pub_seq > named[1]
        await log.close()

    run(third)


def test_whole_records_lost_at_a_clean_end_never_give_their_bookmarks_again(
    tmp_path: Path,
) -> None:
    """Storage that lost the last own records whole, at a record boundary: recovery
    sees a clean end and nothing to cut, yet the next own record is numbered above
    every one handed out before, and the lost ones are a gap a late copy fills."""

    async def body() -> None:
        log = _log(tmp_path)
        await log.open()
        own = log.own_pub_hash
        for s in range(1, 4):
            _append(log, OTHER, s)
        for s in range(1, 4):
            _append(log, own, s)
        await log.wait_durable(log.last_seq)
        await log.abort()
        lost = cut_last_records(journals(tmp_path / "journal", INSTANCE)[-1], 2)
        assert [r.pub_seq for r in lost] == [2, 3] and all(r.pub_hash == own for r in lost)
        log = _log(tmp_path)
        await log.open()
        assert log.recovery_report is not None and not log.recovery_report.truncations
        assert log.holds(own, 1)
        assert not log.holds(own, 2) and log.publishers.missing(own, 3)
        nxt = log.publisher_last(own) + 1
        assert nxt > 3
        _append(log, own, 3, late=True)  # the peer's copy of a lost one
        _append(log, own, nxt)
        assert log.holds(own, 3) and log.holds(own, nxt)
        await log.close()

    run(body)


def test_numbering_ahead_writes_the_next_floor_before_the_highest_gets_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(txlog_module, "RESERVE", 8)

    async def body() -> None:
        directory = tmp_path / "journal"
        log = _log(tmp_path)
        await log.open()
        own = log.own_pub_hash
        token = read_incarnation(directory, INSTANCE)
        assert token is not None
        assert read_floor(directory, INSTANCE, token) == 8  # written before any append
        for s in range(1, 30):
            _append(log, own, s)
            await asyncio.sleep(0)  # the loop turns, as it does between client commands
            await _floor_written(log)
            floor = read_floor(directory, INSTANCE, token)
            assert floor >= s + 8 // 2, (s, floor)  # never fewer than half left ahead
        await log.close()

    run(body)


def test_a_floor_that_cannot_be_written_refuses_own_records_past_it_until_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk where the floor lives: own records up to the floor go on, the one
    past it is refused with a clear error (nothing numbered that a restart could give
    again), other publishers are not affected, and once a write succeeds it goes on."""
    monkeypatch.setattr(txlog_module, "RESERVE", 8)
    monkeypatch.setattr(txlog_module, "FLOOR_RETRY", 0.0)
    failing = [True]
    real = write_floor

    def write_floor_or_fail(*args: object, **kw: object) -> None:
        if failing[0]:
            raise OSError(28, "No space left on device")
        real(*args, **kw)  # type: ignore[arg-type]

    async def body() -> None:
        events: list[str] = []
        log = _log(tmp_path, on_event=lambda kind, _data: events.append(kind))
        await log.open()
        own = log.own_pub_hash
        monkeypatch.setattr(txlog_module, "write_floor", write_floor_or_fail)
        for s in range(1, 9):  # up to the floor written at open
            _append(log, own, s)
        await _floor_written(log)
        assert "own_floor_failed" in events
        with pytest.raises(OwnFloorUnwritten, match="past the floor written so far"):
            _append(log, own, 9)
        _append(log, OTHER, 1)  # any other publisher goes on
        failing[0] = False
        with pytest.raises(OwnFloorUnwritten):
            _append(log, own, 9)  # refused, and the floor written again meanwhile
        await _floor_written(log)
        _append(log, own, 9)
        await log.close()

    run(body)


async def _floor_written(log: TransactionLog) -> None:
    """Wait for the floor write under way, if any."""
    task = log._floor_task  # the write the test waits for
    if task is not None:
        await task
