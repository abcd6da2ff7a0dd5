"""Write outages: a failed write or fsync is survived, not latched.

The log refuses appends with the failure, keeps every record it had accepted in memory,
serves reads, and retries on the injected clock (``WriteRetryInterval``, doubling up to 16
times it). A retry rewrites every byte not known durable through freshly opened files, so
a failed fsync that lost the page cache's dirty pages ("fsyncgate", simulated by
``FaultySeam(lossy=True)``) loses nothing. Failures are injected through the file seam.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from spool.server.clock import VirtualClock
from spool.server.txlog import (
    JournalUnfinished,
    TransactionLog,
    TxlogClosed,
    TxlogWriteFailed,
    WriteOutage,
)
from spool.server.txlog.recovery.recover import recover
from tests.support.wait import async_wait_until
from tests.unit.txlog.helpers import INSTANCE, FaultySeam, config, read_all, run

Events = list[tuple[str, dict[str, object]]]


def outage_log(
    tmp: Path,
    seam: FaultySeam | None,
    clock: VirtualClock,
    events: Events | None = None,
    *,
    preallocated: int = 1,
    journal_size: int = 64 * 1024,
) -> TransactionLog:
    """A log on the virtual clock: flushes at once, retries after 1 s, 2 s, 4 s..."""
    cfg = config(
        tmp, journal_size=journal_size, preallocated=preallocated, flush_interval=0,
        write_retry_interval=1.0,
    )  # fmt: skip

    def on_event(name: str, fields: dict[str, object]) -> None:
        if events is not None:
            events.append((name, fields))

    return TransactionLog(
        cfg, INSTANCE, clock=clock, files=seam, on_event=on_event, block_bytes=512
    )


def body_of(n: int) -> bytes:
    return b'{"n":%d,"pad":"%s"}' % (n, b"p" * (n % 50))


def append(log: TransactionLog, n: int, pub: int = 1) -> list[int]:
    """Append ``n`` records of publisher ``pub`` (bodies numbered by pub_seq)."""
    out = []
    for _ in range(n):
        ps = log.publisher_last(pub) + 1
        out.append(
            log.append(
                topic="t", message_type="json", pub_hash=pub, pub_seq=ps, body=body_of(ps)
            ).seq
        )
    return out


async def in_outage(log: TransactionLog, attempts: int = 0) -> WriteOutage:
    """Wait (the write runs in a thread) until the outage has seen ``attempts`` retries."""

    def reached() -> WriteOutage | None:
        outage = log.write_outage
        return outage if outage is not None and outage.attempts >= attempts else None

    return await async_wait_until(reached, message=f"a write outage after {attempts} retries")


async def healthy_reopen(tmp: Path, expect_last: int) -> None:
    """Reopen on a healthy disk: every record up to ``expect_last`` is there, intact, and
    a read-only check of every record finds no damage."""
    log = outage_log(tmp, None, VirtualClock())
    report = await log.open()
    assert report.truncations == ()
    assert log.last_seq == expect_last
    bodies = [r.body for b in await read_all(log) for r in b]
    assert bodies == [body_of(ps) for ps in range(1, expect_last + 1)]
    await log.close()
    check = recover(tmp / "journal", tmp / "archive", INSTANCE, apply=False, trust_indexes=False)
    assert check.report.truncations == () and check.report.last_seq == expect_last


@pytest.mark.parametrize(
    ("operation", "err"),
    [("write", errno.ENOSPC), ("fsync", errno.EIO), ("write", errno.EIO)],
    ids=["write-ENOSPC", "fsync-EIO", "write-EIO"],
)
def test_a_failed_write_refuses_appends_and_retries_with_back_off_until_it_works(
    tmp_path: Path, operation: str, err: int
) -> None:
    async def body() -> None:
        clock = VirtualClock()
        events: Events = []
        seam = FaultySeam()
        log = outage_log(tmp_path, seam, clock, events)
        await log.open()
        append(log, 5)
        await log.wait_durable(5)
        durable_calls: list[int] = []
        log.add_durable_listener(durable_calls.append)
        changes: list[WriteOutage | None] = []
        log.add_outage_listener(changes.append)

        seam.fail(operation, err)
        append(log, 3)  # accepted; their commit fails
        waiter = asyncio.ensure_future(log.wait_durable(8))
        outage = await in_outage(log)
        t0 = clock.monotonic()
        assert (outage.error.operation, outage.error.cause.errno) == (operation, err)  # type: ignore[attr-defined]
        assert outage.since == clock.time() and outage.pending_records == 3
        assert log.durable_seq == 5 and durable_calls == []  # nothing acked for them
        assert len(changes) == 1 and changes[0] is not None and changes[0].error is outage.error
        assert [name for name, _ in events].count("flush_failed") == 1
        assert log.stats()["write_failed"] == 1.0 and log.stats()["write_outages"] == 1.0
        # appends are refused with the cause; reads of durable records go on
        with pytest.raises(TxlogWriteFailed) as refused:
            append(log, 1)
        assert refused.value is log.write_error
        assert (
            log.append_many(
                topic="t", message_type="json", pub_hash=2, pub_seqs=[1], bodies=[b"{}"]
            )
            == 0
        )
        assert [r.seq for r in await log.read_batch(1)] == [1, 2, 3, 4, 5]

        # retries 1, 2, 4 and 8 s after each failed attempt, on the injected clock
        elapsed = 0.0
        for k, gap in enumerate((1.0, 2.0, 4.0, 8.0), start=1):
            assert log.write_outage is not None
            await clock.advance(gap - 0.001)
            assert log.write_outage.attempts == k - 1, "retried early"
            await clock.advance(0.001)
            elapsed += gap
            outage = await in_outage(log, k)
            assert clock.monotonic() - t0 == pytest.approx(elapsed)
        await clock.wait_all_blocked()  # the flusher schedules its next retry
        scheduled = log.write_outage
        assert scheduled is not None and scheduled.next_attempt == pytest.approx(clock.time() + 16)
        assert not waiter.done() and durable_calls == []

        # the disk takes writes again: the next retry (16 s, the cap) writes everything
        seam.heal()
        await clock.advance(15.999)
        assert log.write_outage is not None
        await clock.advance(0.001)
        await async_wait_until(lambda: log.write_outage is None, message="writes resumed")
        assert clock.monotonic() - t0 == pytest.approx(31.0)
        assert log.durable_seq == 8 and durable_calls == [8]
        await waiter  # the wait went through the outage without failing
        assert changes == [changes[0], None]
        resumed = [f for name, f in events if name == "writes_resumed"]
        assert len(resumed) == 1 and resumed[0]["retries"] == 5 and resumed[0]["records"] == 3
        assert log.stats()["write_failed"] == 0.0
        append(log, 2)  # taken again
        await log.wait_durable(10)
        await log.close()
        await healthy_reopen(tmp_path, 10)

    run(body)


def test_a_retry_rewrites_what_a_failed_fsync_may_have_dropped(tmp_path: Path) -> None:
    """fsyncgate: after a failed fsync the kernel may drop the dirty pages and report the
    error once, so fsyncing again would "succeed" over missing data. The seam here does
    exactly that; the log rewrites from memory through new descriptors, and every record
    survives a reopen."""

    async def body() -> None:
        clock = VirtualClock()
        seam = FaultySeam(lossy=True)
        log = outage_log(tmp_path, seam, clock)
        await log.open()
        append(log, 5)
        await log.wait_durable(5)
        seam.fail("fsync", errno.EIO)
        append(log, 40)
        await in_outage(log)
        opens = seam.calls["open"]
        seam.heal()
        await clock.advance(1.0)
        await async_wait_until(lambda: log.durable_seq == 45, message="the rewrite")
        assert seam.calls["open"] > opens  # the journal was opened again, not fsynced again
        await log.close()
        await healthy_reopen(tmp_path, 45)

    run(body)


def test_a_roll_that_cannot_create_its_journal_resumes_where_it_stopped(tmp_path: Path) -> None:
    """A disk full at a roll: the new journal cannot be allocated (a shortfall, not an
    error) and then cannot be written; once room is back the roll completes, the finished
    journal is sealed and the records are contiguous across both journals."""

    async def body() -> None:
        clock = VirtualClock()
        events: Events = []
        seam = FaultySeam()
        log = outage_log(tmp_path, seam, clock, events, preallocated=0, journal_size=16 * 1024)
        await log.open()
        append(log, 10)
        await log.wait_durable(10)
        active = Path(log.journals()[0].path)
        seam.fail("allocate", errno.ENOSPC)
        seam.fail("write", errno.ENOSPC, only=lambda path: path != active)
        while log.stats()["rolls"] == 0:
            append(log, 1)
        last = log.last_seq
        await in_outage(log)
        finished = log.journals()[0]
        assert finished.state == "closed" and finished.last_seq < last
        # its commit did not happen: removing it now would not find it finished on disk
        with pytest.raises(JournalUnfinished):
            await log.remove(finished.id)
        seam.heal()
        await clock.advance(1.0)
        await async_wait_until(lambda: log.durable_seq == last, message="the roll's commit")
        names = [name for name, _ in events]
        assert names.count("preallocation_failed") == 1 and names.count("writes_resumed") == 1
        # the shortfall ends with the roll that took the room (no file is wanted here)
        await async_wait_until(
            lambda: log.preallocation_shortfall is None, message="the shortfall's end"
        )
        assert [name for name, _ in events].count("preallocation_restored") == 1
        await log.close()
        await healthy_reopen(tmp_path, last)

    run(body)


def test_close_during_an_outage_makes_one_last_attempt_then_gives_up(tmp_path: Path) -> None:
    async def body() -> None:
        clock = VirtualClock()
        events: Events = []
        seam = FaultySeam()
        log = outage_log(tmp_path, seam, clock, events)
        await log.open()
        append(log, 5)
        await log.wait_durable(5)
        seam.fail("write", errno.ENOSPC)
        append(log, 3)
        await in_outage(log)
        waiter = asyncio.ensure_future(log.wait_durable(8))
        writes = seam.calls["write"]
        await log.close()  # no virtual time passes: the retry is not waited for
        assert seam.calls["write"] == writes + 1
        with pytest.raises(TxlogWriteFailed):
            await waiter
        with pytest.raises(TxlogClosed):
            append(log, 1)
        lost = [f for name, f in events if name == "unwritten_at_close"]
        assert lost == [
            {"records": 3, "first_seq": 6, "last_seq": 8, "error": str(log.write_error)}
        ]
        await healthy_reopen(tmp_path, 5)

    run(body)


def test_removing_journals_during_an_outage_retries_at_once(tmp_path: Path) -> None:
    """Making room through the log itself (the usual fix for a full disk) does not wait
    for the back-off: the write is retried as soon as the journals are gone."""

    async def body() -> None:
        clock = VirtualClock()
        seam = FaultySeam()
        log = outage_log(tmp_path, seam, clock, journal_size=16 * 1024)
        await log.open()
        while log.stats()["rolls"] < 3:
            append(log, 20)
        await log.wait_durable(log.last_seq)
        await clock.wait_all_blocked()  # the caches (seals) of those commits
        seam.fail("write", errno.ENOSPC)
        first = log.journals()[0]
        append(log, 2)
        last = log.last_seq
        await in_outage(log)
        seam.heal()
        before = clock.monotonic()
        await log.remove(first.id)
        await async_wait_until(lambda: log.durable_seq == last, message="the retry")
        assert clock.monotonic() == before
        assert log.write_outage is None
        await log.close()

    run(body)


def test_open_on_a_disk_without_room_for_preallocation_starts_and_writes(tmp_path: Path) -> None:
    """A broker starts on a nearly full disk: the active journal and the preallocated
    files cannot be allocated, which is reported once, and appends are taken (the journal
    grows as it is written). Once room is back, a roll makes the files again."""

    async def body() -> None:
        clock = VirtualClock()
        events: Events = []
        seam = FaultySeam("allocate", fail_at=1, err=errno.ENOSPC)
        log = outage_log(tmp_path, seam, clock, events, preallocated=2, journal_size=16 * 1024)
        await log.open()
        shortfall = log.preallocation_shortfall
        assert shortfall is not None and (shortfall.wanted, shortfall.ready) == (2, 0)
        assert [name for name, _ in events] == ["preallocation_failed"]
        assert log.stats()["preallocation_shortfall"] == 1.0
        append(log, 10)
        await log.wait_durable(10)
        active = Path(log.journals()[0].path)
        assert active.stat().st_size < 16 * 1024  # not allocated: it grows with its data
        seam.heal()
        while log.stats()["rolls"] == 0:
            append(log, 10)
        await log.wait_durable(log.last_seq)
        await async_wait_until(
            lambda: log.preallocation_shortfall is None, message="preallocation restored"
        )
        assert log.stats()["preallocated"] == 2.0
        assert [name for name, _ in events].count("preallocation_restored") == 1
        last = log.last_seq
        await log.close()
        await healthy_reopen(tmp_path, last)

    run(body)
