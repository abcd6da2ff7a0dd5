"""The instance's own identity after a lost tail: its skip survives a restart.

Recovery that cuts a torn tail moves the own identity's highest past the records the tail
could have held (its peers may hold them), the sequences passed over becoming a gap a late
copy fills. No record backs that highest; these tests restart the log and check that the
skipped sequences stay missing (not held) until a late copy fills them.
"""

from __future__ import annotations

from pathlib import Path

from server.txlog import TransactionLog
from tests.support.damage import journals, zero_end_of_last_record
from tests.unit.txlog.helpers import INSTANCE, config, run

OTHER = 0x5EED


def _log(tmp: Path, journal_size: int = 64 * 1024) -> TransactionLog:
    return TransactionLog(
        config(tmp, journal_size=journal_size, preallocated=0), INSTANCE, track_gaps=True,
        block_bytes=512,
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
        assert log.publisher_last(own) == skipped
        for s in range(5, skipped + 1):
            assert not log.holds(own, s), s  # a repair or a late copy brings it back
        assert log.holds(own, 4)
        _append(log, own, 5, late=True)
        assert log.holds(own, 5)
        await log.close()

    run(body)
