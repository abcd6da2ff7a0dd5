"""A storage that loses what was not fsynced at a crash (the file seam's ``volatile`` mode,
tests/support/faults.py), and a log on it that loses nothing it acknowledged as durable.

The seam first: a write or truncation reaches its file only at that file's fsync (through
any handle), a crash loses what is held, a clean end writes it. Then the log: whatever a
crash of the machine takes, reopening keeps every record acknowledged durable.
"""

from __future__ import annotations

import asyncio
import errno
import threading
from pathlib import Path

from spool.server.txlog import TransactionLog
from tests.support.faults import ControlledSeam, FaultySeam
from tests.support.wait import wait_until
from tests.unit.txlog.helpers import INSTANCE, config, fill, read_all, run


def _log(tmp: Path, seam: FaultySeam) -> TransactionLog:
    return TransactionLog(config(tmp, journal_size=16 * 1024), INSTANCE, files=seam)


def _reopened(tmp: Path, seam: FaultySeam) -> list[int]:
    """Every seq of the log opened again on ``seam``."""

    async def body() -> list[int]:
        log = _log(tmp, seam)
        await log.open()
        seqs = [s for batch in await read_all(log) for s in batch.seqs]
        await log.close()
        return seqs

    return run(body)


def test_writes_reach_the_file_only_at_its_fsync(tmp_path: Path) -> None:
    seam = FaultySeam(volatile=True)
    path = tmp_path / "f"
    first = seam.open(path, create=True)
    first.allocate(64)
    first.write(0, b"durable")
    first.fsync()
    first.write(7, b"-held")
    assert path.read_bytes() == b"durable".ljust(64, b"\0")  # allocated at once
    other = seam.open(path, create=False)
    other.write(12, b"-too")
    other.truncate(16)  # held in order after the writes
    assert path.read_bytes()[:16] == b"durable".ljust(16, b"\0")
    first.fsync()  # fsync is per file: the other handle's writes go too
    assert path.read_bytes() == b"durable-held-too"
    first.write(0, b"LOST")
    seam.crash()
    assert path.read_bytes() == b"durable-held-too"
    assert seam.lost_bytes == 4
    for handle in (first, other):
        handle.close()


def test_what_a_file_holds_follows_a_rename_and_a_clean_end_writes_it(tmp_path: Path) -> None:
    seam = FaultySeam(volatile=True)
    src, dst = tmp_path / "prealloc", tmp_path / "journal"
    handle = seam.open(src, create=True)
    handle.write(0, b"abc")
    handle.close()
    seam.rename(src, dst)
    assert dst.read_bytes() == b"" and dst in seam.held
    seam.settle()
    assert dst.read_bytes() == b"abc" and not seam.held


def test_a_lossy_failed_fsync_drops_what_the_file_held(tmp_path: Path) -> None:
    seam = FaultySeam(volatile=True, lossy=True)
    path = tmp_path / "f"
    handle = seam.open(path, create=True)
    handle.write(0, b"gone")
    seam.fail("fsync", errno.EIO)
    try:
        handle.fsync()
    except OSError:
        pass
    else:  # pragma: no cover
        raise AssertionError("the fsync should fail")
    seam.heal()
    handle.fsync()
    assert path.read_bytes() == b"" and seam.lost_bytes == 4
    handle.close()


def test_the_control_file_turns_volatile_on_and_off(tmp_path: Path) -> None:
    control = tmp_path / "control"
    seam = ControlledSeam(control)
    path = tmp_path / "f"
    control.write_text("volatile\n")
    handle = seam.open(path, create=True)
    handle.write(0, b"held")
    assert path.read_bytes() == b""
    control.write_text("")  # off: what is held stays held until the fsync
    handle.write(4, b"+kept-in-order")
    assert path.read_bytes() == b""
    handle.fsync()
    assert path.read_bytes() == b"held+kept-in-order"
    handle.write(0, b"HELD")  # off, nothing held: straight to the file
    assert path.read_bytes().startswith(b"HELD")
    handle.close()


def test_a_hold_line_stops_the_operation_until_it_is_removed(tmp_path: Path) -> None:
    """``hold write .journal.new`` stops a write to such a file (in the thread that does
    it: the log's worker) and says so in ``CONTROL.held``; other files are not held, and
    the write goes on once the line is gone."""
    control = tmp_path / "control"
    seam = ControlledSeam(control)
    held_path, free_path = tmp_path / "a.1.journal.new", tmp_path / "a.1.journal"
    control.write_text("hold write .journal.new\n")
    handle = seam.open(held_path, create=True)
    writer = threading.Thread(target=handle.write, args=(0, b"late"))
    writer.start()
    wait_until(seam.held_marker.exists, 10, message="the write is held")
    assert seam.held_marker.read_text() == f"write {held_path}\n"
    free = seam.open(free_path, create=True)
    free.write(0, b"free")  # another file: not held
    assert writer.is_alive() and held_path.read_bytes() == b""
    control.write_text("")
    writer.join(10)
    assert not writer.is_alive() and held_path.read_bytes() == b"late"
    for h in (handle, free):
        h.close()


def test_a_power_cut_keeps_every_record_acknowledged_durable(tmp_path: Path) -> None:
    """Records made durable survive a power cut; those whose fsync had failed (an
    outage: the log never acknowledged them) are lost with it, and recovery ends the log
    before them."""
    seam = FaultySeam(volatile=True)

    async def write() -> int:
        log = _log(tmp_path, seam)
        await log.open()
        await fill(log, 600)  # several journals, all durable
        durable = log.durable_seq
        seam.fail("fsync", errno.EIO)  # the next commit is written but never fsynced
        for i in range(50):
            log.append(topic="orders", message_type="json", pub_hash=7, pub_seq=601 + i,
                       body=b'{"n":%d}' % (601 + i))  # fmt: skip
        while log.write_outage is None:  # the flusher wrote them and failed to fsync
            await asyncio.sleep(0.001)
        assert log.durable_seq == durable
        await log.abort()
        return durable

    durable = run(write)
    assert seam.held  # the outage's writes never reached the files
    seam.crash()
    seam.heal()

    assert _reopened(tmp_path, seam) == list(range(1, durable + 1))


def test_a_journal_archived_to_another_file_system_survives_a_power_cut(tmp_path: Path) -> None:
    """The archive directory on another file system (a journal's rename fails with
    ``EXDEV``, so it is copied): a power cut right after the archive keeps its records."""
    seam = FaultySeam(volatile=True)
    seam.fail("rename", errno.EXDEV, only=lambda p: p.name.endswith(".journal"))

    async def write_and_archive() -> int:
        log = _log(tmp_path, seam)
        await log.open()
        await fill(log, 600)
        oldest = log.journals()[0]
        archived = await log.archive(oldest.id)
        assert [j.state for j in archived] == ["archived"]
        name = Path(oldest.path).name
        assert not Path(oldest.path).exists() and (tmp_path / "archive" / name).exists()
        await log.abort()
        return log.durable_seq

    durable = run(write_and_archive)
    seam.crash()
    seam.heal()

    assert _reopened(tmp_path, seam) == list(range(1, durable + 1))
