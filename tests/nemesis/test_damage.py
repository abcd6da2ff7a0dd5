"""The storage faults the nemesis injects do what their names say, on real journals."""

from __future__ import annotations

import asyncio
from pathlib import Path

from spool.server.bookmarks import pub_hash
from spool.server.txlog import TransactionLog
from spool.server.txlog.recovery.recover import recover
from tests.nemesis import damage
from tests.unit.txlog.helpers import config


def _write_small_records(data: Path, count: int) -> None:
    async def body() -> None:
        log = TransactionLog(config(data), "a")
        await log.open()
        for s in range(1, count + 1):
            log.append(topic="q", message_type="json", pub_hash=pub_hash("p"), pub_seq=s, body=b"1")
        await log.wait_durable(log.last_seq)
        await log.close()

    asyncio.run(body())


def test_a_torn_tail_keeps_the_header_of_a_record_shorter_than_the_tear(tmp_path: Path) -> None:
    """A record no longer than the bytes torn off is not zeroed whole (that would look like
    space never written: a write the storage dropped, not a torn one); recovery sees the
    damaged record and cuts it."""
    data = tmp_path / "data"
    _write_small_records(data, 3)
    done = damage.torn_tail(data / "journal", "a", 200)
    assert done is not None and done["seq"] == 3
    recovery = recover(data / "journal", None, "a", apply=False, trust_indexes=False)
    try:
        report = recovery.report
        assert [t.first_seq_cut for t in report.truncations] == [3], report
        assert not report.clean
    finally:
        recovery.close()
