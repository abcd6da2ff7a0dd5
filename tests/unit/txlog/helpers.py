"""Shared pieces of the transaction-log tests: configs, reading everything (the faulty seam
lives in tests/support/faults.py, shared with the engine and process tests).

Tests that set the wall time of appends use :class:`spool.server.clock.VirtualClock` (or pass
``timestamp_us`` when the times must step back, which a clock does not). A log on a
virtual clock is configured with ``flush_interval=0``: the flusher then never sleeps on the
clock, so group commits happen without the test moving time - only the test that checks
the interval itself drives it with ``advance``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from spool.server.config import TransactionLogConfig
from spool.server.txlog import RecordBatch, TransactionLog
from tests.support.faults import FaultyHandle, FaultySeam

__all__ = [
    "INSTANCE",
    "FaultyHandle",
    "FaultySeam",
    "config",
    "fill",
    "journal_files",
    "read_all",
    "run",
]

T = TypeVar("T")

INSTANCE = "spool-a"


def config(
    tmp: Path,
    *,
    journal_size: int = 64 * 1024,
    preallocated: int = 1,
    flush_interval: float = 0.0005,
    max_size: int = 0,
    write_retry_interval: float = 1.0,
) -> TransactionLogConfig:
    """A small-journal config under ``tmp`` (journals roll every few hundred records)."""
    return TransactionLogConfig(
        journal_directory=tmp / "journal",
        archive_directory=tmp / "archive",
        preallocated_files=preallocated,
        journal_size=journal_size,
        flush_interval=flush_interval,
        max_size=max_size,
        write_retry_interval=write_retry_interval,
    )


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run one async test body in a fresh event loop."""

    async def body() -> T:
        return await fn()

    return asyncio.run(body())


async def fill(
    log: TransactionLog,
    n: int,
    *,
    pub_hash: int = 7,
    topic: str = "orders",
    start: int | None = None,
) -> list[int]:
    """Append ``n`` publishes of one publisher and wait until durable; their seqs."""
    first = log.publisher_last(pub_hash) + 1 if start is None else start
    seqs = [
        log.append(topic=topic, message_type="json", pub_hash=pub_hash, pub_seq=first + i,
                   body=b'{"n":%d}' % (first + i)).seq
        for i in range(n)
    ]  # fmt: skip
    await log.wait_durable(log.last_seq)
    return seqs


def journal_files(tmp: Path) -> list[Path]:
    """The journal files of the test instance, in base order."""
    return sorted(
        p
        for p in (tmp / "journal").iterdir()
        if ".journal" in p.name and p.name.startswith(INSTANCE + ".")
    )


async def read_all(
    log: TransactionLog, from_seq: int = 0, upto_seq: int | None = None
) -> list[RecordBatch]:
    """Every durable record from ``from_seq`` (to ``upto_seq``), batch by batch, the way
    replay reads: ``read_view`` again from the next seq until a read comes back empty."""
    batches: list[RecordBatch] = []
    seq = max(from_seq, log.first_seq)
    while batch := await log.read_view(seq, max_count=500, upto_seq=upto_seq):
        batches.append(batch)
        seq = batch.last_seq + 1
    return batches
