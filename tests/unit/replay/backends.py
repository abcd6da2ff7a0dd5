"""The replay tests' two log backends: :class:`FakeLog` and a real transaction log.

The cursor tests run over both (nats-server's habit of running one suite over every store):
the fake makes any state easy to set up, the real :class:`~spool.server.txlog.TransactionLog`
serves the columnar ``read_view`` batches, durable-only reads and lookups production
uses. :class:`TxlogLog` gives the real log the fake's helper API (``append``, ``flush``,
``publish``, ``records``, read counters, the ``live`` views).

Durability of the real log is the test's decision, as with the fake: journal writes wait
behind a gate that only :meth:`TxlogLog.flush` opens, so a record appended and not flushed
stays not durable however long the test looks at it. Group commit has no partial flush:
``flush(upto)`` makes everything appended durable.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeAlias

from spool.server.clock import SYSTEM_CLOCK, VirtualClock
from spool.server.config import TransactionLogConfig
from spool.server.replay import FunctionLimit, ReadLimit
from spool.server.replay.sources import AppendedSource
from spool.server.txlog import TransactionLog
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind
from tests.support.faults import GatedSeam
from tests.unit.replay.fakes import PUB, FakeLog, next_timestamp

P = ParamSpec("P")

Backend: TypeAlias = Literal["fake", "txlog"]
BACKENDS: tuple[Backend, ...] = ("fake", "txlog")


class TxlogLog:
    """A real :class:`TransactionLog` in a directory, with :class:`FakeLog`'s helper API.

    It is itself the :class:`~spool.server.replay.ReplaySource` handed to cursors (each call goes
    to the log; reads are counted like the fake's). Records are stamped with the test's
    clock, as the fake stamps them; the log's own clock only paces its flusher, which has
    no interval to wait (the gate decides when it writes).
    """

    def __init__(self, txlog: TransactionLog, seam: GatedSeam, clock: VirtualClock | None) -> None:
        self.txlog = txlog
        self.clock = clock
        self.records: list[Record] = []
        self.reads = 0
        self.read_sizes: list[int] = []
        self._seam = seam
        self._pub_seq: dict[int, int] = {}

    @classmethod
    async def open(
        cls,
        directory: Path,
        clock: VirtualClock | None = None,
        *,
        tail_cache_bytes: int | None = None,
        journal_size: int = 64 * 1024,
        track_gaps: bool = False,
    ) -> TxlogLog:
        """Open a new log under ``directory`` (``tail_cache_bytes=0``: reads of durable
        records go to the journal files; ``track_gaps``: it takes late records, as a
        replicated instance's log does)."""
        config = TransactionLogConfig(
            journal_directory=directory / "journal",
            archive_directory=directory / "archive",
            preallocated_files=0,
            journal_size=journal_size,
            flush_interval=0.0,
        )
        seam = GatedSeam()
        extra: dict[str, int] = {}
        if tail_cache_bytes is not None:
            extra["tail_cache_bytes"] = tail_cache_bytes
        txlog = TransactionLog(
            config, "replay-test", clock=SYSTEM_CLOCK, files=seam, track_gaps=track_gaps, **extra
        )
        seam.gate.set()
        await txlog.open()
        seam.gate.clear()
        return cls(txlog, seam, clock)

    # -- writing --

    def append(
        self,
        topic: str = "t",
        body: bytes = b"{}",
        *,
        ts_us: int | None = None,
        publisher: int = PUB,
        pub_seq: int | None = None,
        kind: RecordKind = RecordKind.PUBLISH,
        sow_key: str = "",
    ) -> Record:
        if ts_us is None:
            ts_us = next_timestamp(self.clock, self.records)
        if pub_seq is None:
            pub_seq = self._pub_seq.get(publisher, 0) + 1
        self._pub_seq[publisher] = pub_seq
        rec = self.txlog.append(
            topic=topic,
            message_type="json",
            pub_hash=publisher,
            pub_seq=pub_seq,
            body=body,
            kind=kind,
            path=("a",),
            sow_key=sow_key,
            timestamp_us=ts_us,
        )
        self.records.append(rec)
        return rec

    async def flush(self, upto: int | None = None) -> None:
        """Make records durable up to ``upto`` at least (default: all appended). A group
        commit takes everything pending, so asking for more than is durable makes every
        appended record durable."""
        if upto is not None and upto <= self.txlog.durable_seq:
            return
        self._seam.gate.set()
        try:
            await self.txlog.wait_durable(self.txlog.last_seq)
        finally:
            self._seam.gate.clear()

    async def publish(self, *args: Any, **kwargs: Any) -> Record:
        rec = self.append(*args, **kwargs)
        await self.flush()
        return rec

    async def close(self) -> None:
        """Let pending writes through and close the log (its final group commit)."""
        self._seam.gate.set()
        await self.txlog.close()

    # -- the views a ``live`` subscription uses --

    def live_source(self) -> LiveView:
        """What the engine gives a ``live`` cursor: the log's appended records too."""
        return LiveView(self)

    def live_limit(self) -> ReadLimit:
        """The engine's ``live`` limit over this log."""
        return FunctionLimit(lambda: self.txlog.last_seq, self.txlog.wait_appended)

    # -- ReplaySource --

    @property
    def last_seq(self) -> int:
        return self.txlog.last_seq

    @property
    def durable_seq(self) -> int:
        return self.txlog.durable_seq

    @property
    def first_seq(self) -> int:
        return self.txlog.first_seq

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        return self.txlog.seq_for_bookmark(pub_hash, pub_seq)

    def seq_for_later(self, pub_hash: int, pub_seq: int) -> int | None:
        return self.txlog.seq_for_later(pub_hash, pub_seq)

    def seq_for_time(self, timestamp_us: int) -> int:
        return self.txlog.seq_for_time(timestamp_us)

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch:
        batch = await self.txlog.read_view(
            from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
        )
        self.count_read(batch)
        return batch

    async def wait_durable(self, seq: int) -> None:
        await self.txlog.wait_durable(seq)

    async def wait_appended(self, seq: int) -> None:
        await self.txlog.wait_appended(seq)

    def count_read(self, batch: RecordBatch) -> None:
        self.reads += 1
        self.read_sizes.append(len(batch))


class LiveView:
    """The engine's :class:`AppendedSource` over a :class:`TxlogLog`, reads counted."""

    def __init__(self, log: TxlogLog) -> None:
        self._log = log
        self._source = AppendedSource(log.txlog)

    @property
    def durable_seq(self) -> int:
        return self._source.durable_seq

    @property
    def first_seq(self) -> int:
        return self._source.first_seq

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        return self._source.seq_for_bookmark(pub_hash, pub_seq)

    def seq_for_later(self, pub_hash: int, pub_seq: int) -> int | None:
        return self._source.seq_for_later(pub_hash, pub_seq)

    def seq_for_time(self, timestamp_us: int) -> int:
        return self._source.seq_for_time(timestamp_us)

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch:
        batch = await self._source.read_view(
            from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
        )
        self._log.count_read(batch)
        return batch

    async def wait_durable(self, seq: int) -> None:
        await self._source.wait_durable(seq)


ReplayLog: TypeAlias = FakeLog | TxlogLog


class LogFactory:
    """Opens logs of one backend for a test, and closes them when it ends."""

    def __init__(self, backend: Backend, directory: Path) -> None:
        self.backend = backend
        self._directory = directory
        self._opened: list[ReplayLog] = []

    @property
    def real(self) -> bool:
        return self.backend == "txlog"

    async def open(
        self, clock: VirtualClock | None = None, *, durable_reads_only: bool = False
    ) -> ReplayLog:
        """A new, empty log. ``durable_reads_only`` makes the fake serve durable records
        only; the real log always does."""
        log: ReplayLog
        if self.backend == "fake":
            log = FakeLog(clock, durable_reads_only=durable_reads_only)
        else:
            log = await TxlogLog.open(self._directory / f"log{len(self._opened)}", clock)
        self._opened.append(log)
        return log

    async def aclose(self) -> None:
        for log in self._opened:
            await log.close()
        self._opened.clear()


def run_async(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Run an async test body in a fresh event loop (no pytest plugin needed).

    A :class:`LogFactory` argument closes the logs it opened, inside that loop, whether
    the body passed or failed (a real log must close before its loop goes away).
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        async def main() -> None:
            try:
                await fn(*args, **kwargs)
            finally:
                for value in (*args, *kwargs.values()):
                    if isinstance(value, LogFactory):
                        await value.aclose()

        asyncio.run(main())

    return wrapper
