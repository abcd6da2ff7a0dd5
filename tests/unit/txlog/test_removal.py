"""Removing journals never forgets their publishers (de-duplication outlives the journals).

Each publisher's last sequence lives in the journals and, once they are removed, only in
``clients.ack``. That file is written when a journal rolls and at a clean close, so a
journal finished another way (by recovery after a close during a write outage) or one
whose roll could not write the file was not covered: removing it and restarting forgot
its publishers (found by the log's state machine: ``publisher_last`` 0 instead of 10).
Removal now makes the file cover the journals first, and refuses when it cannot.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from spool.server.clock import VirtualClock
from spool.server.txlog import PublishersUnsaved, TransactionLog
from spool.server.txlog.publishers.clientsack import parse_clients_ack
from spool.server.txlog.storage.files import clients_ack_name
from tests.unit.txlog.helpers import INSTANCE, FaultySeam, config, run

PUB = 11


def small_log(tmp: Path, seam: FaultySeam | None = None) -> TransactionLog:
    cfg = config(
        tmp, journal_size=4 * 1024, preallocated=1, flush_interval=0, write_retry_interval=0.01
    )
    return TransactionLog(cfg, INSTANCE, clock=VirtualClock(), files=seam, block_bytes=256)


def fill(log: TransactionLog, n: int) -> None:
    first = log.publisher_last(PUB) + 1
    log.append_many(
        topic="run", message_type="json", pub_hash=PUB,
        pub_seqs=list(range(first, first + n)), bodies=[b"x" * 600] * n,
    )  # fmt: skip


def test_a_journal_finished_by_recovery_keeps_its_publishers_after_removal(tmp_path: Path) -> None:
    async def body() -> None:
        # a roll whose new journal cannot be created: the first journal is written whole, the
        # log closes during the outage, and recovery finds it finished (no clients.ack yet)
        seam = FaultySeam()
        log = small_log(tmp_path, seam)
        await log.open()
        seam.fail("open", errno.ENOSPC)
        fill(log, 11)
        await log.close()
        seam.heal()

        log = small_log(tmp_path, seam)
        await log.open()
        kept = log.publisher_last(PUB)
        assert kept >= 1
        oldest = log.journals()[0]
        assert oldest.state == "closed"
        await log.remove(oldest.id)
        ack = parse_clients_ack((tmp_path / "journal" / clients_ack_name(INSTANCE)).read_bytes())
        assert ack is not None and ack[0] >= oldest.last_seq
        await log.abort()  # a crash: no clients.ack written at close

        log = small_log(tmp_path, seam)
        await log.open()
        assert log.first_seq == oldest.last_seq + 1  # the records are gone ...
        assert log.publisher_last(PUB) == kept  # ... their publisher is not
        await log.close()

    run(body)


def test_removal_is_refused_when_the_publishers_cannot_be_saved(tmp_path: Path) -> None:
    async def body() -> None:
        log = small_log(tmp_path)
        await log.open()
        fill(log, 20)
        await log.wait_durable(log.last_seq)
        oldest = log.journals()[0]
        assert oldest.state in ("closed", "active") and len(log.journals()) > 2
        await log.abort()
        ack_path = tmp_path / "journal" / clients_ack_name(INSTANCE)
        ack_path.unlink(missing_ok=True)

        log = small_log(tmp_path)  # reopened after a crash: nothing covers the journals
        await log.open()
        ack_path.unlink(missing_ok=True)
        ack_path.mkdir()  # the file cannot be written in its place
        oldest = log.journals()[0]
        before = [j.id for j in log.journals()]
        with pytest.raises(PublishersUnsaved, match=r"could not be saved to clients\.ack"):
            await log.remove(oldest.id)
        assert [j.id for j in log.journals()] == before  # nothing removed
        assert log.first_seq == 1
        ack_path.rmdir()
        await log.remove(oldest.id)  # the disk is fine again: removal works
        assert log.first_seq == oldest.last_seq + 1
        await log.close()

    run(body)
