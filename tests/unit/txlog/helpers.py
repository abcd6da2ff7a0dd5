"""Shared pieces of the transaction-log tests: configs, a faulty seam, reading everything.

Tests that set the wall time of appends use :class:`server.clock.VirtualClock` (or pass
``timestamp_us`` when the times must step back, which a clock does not). A log on a
virtual clock is configured with ``flush_interval=0``: the flusher then never sleeps on the
clock, so group commits happen without the test moving time - only the test that checks
the interval itself drives it with ``advance``.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from server.config import TransactionLogConfig
from server.txlog import RecordBatch, TransactionLog
from server.txlog.files import JournalHandle, OsFileSeam

T = TypeVar("T")

INSTANCE = "spool-a"


def config(
    tmp: Path,
    *,
    journal_size: int = 64 * 1024,
    preallocated: int = 1,
    flush_interval: float = 0.0005,
    max_size: int = 0,
) -> TransactionLogConfig:
    """A small-journal config under ``tmp`` (journals roll every few hundred records)."""
    return TransactionLogConfig(
        journal_directory=tmp / "journal",
        archive_directory=tmp / "archive",
        preallocated_files=preallocated,
        journal_size=journal_size,
        flush_interval=flush_interval,
        max_size=max_size,
    )


class FaultyHandle:
    """A journal handle whose operations fail once the seam says so."""

    def __init__(self, inner: JournalHandle, seam: FaultySeam, path: Path) -> None:
        self._inner = inner
        self._seam = seam
        self.path = path

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self._seam.check("write", self.path)
        self._inner.write(offset, data)

    def fsync(self) -> None:
        self._seam.check("fsync", self.path)
        self._inner.fsync()

    def truncate(self, size: int) -> None:
        self._seam.check("truncate", self.path)
        self._inner.truncate(size)

    def allocate(self, size: int) -> None:
        self._seam.check("allocate", self.path)
        self._inner.allocate(size)

    def close(self) -> None:
        self._inner.close()


class FaultySeam:
    """The real seam, failing the ``fail_at``-th call of ``operation`` (and later ones)."""

    def __init__(
        self, operation: str = "write", fail_at: int = 1 << 62, err: int = errno.EIO
    ) -> None:
        self.inner = OsFileSeam()
        self.operation = operation
        self.fail_at = fail_at
        self.err = err
        self.calls: dict[str, int] = {}

    def check(self, operation: str, path: Path) -> None:
        n = self.calls[operation] = self.calls.get(operation, 0) + 1
        if operation == self.operation and n >= self.fail_at:
            raise OSError(self.err, f"injected {operation} failure", str(path))

    def open(self, path: Path, *, create: bool) -> JournalHandle:
        return FaultyHandle(self.inner.open(path, create=create), self, path)

    def rename(self, src: Path, dst: Path) -> None:
        self.check("rename", src)
        self.inner.rename(src, dst)


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
