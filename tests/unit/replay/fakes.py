"""In-memory stand-ins for the transaction log and a subscription's sink.

``FakeLog`` implements :class:`spool.server.replay.ReplaySource` over a list of records with an
appended end, a durable pointer and an ``asyncio.Condition``; ``FakeSink`` records every
call with the (virtual) time it happened. tests/unit/replay/backends.py gives a real
:class:`~spool.server.txlog.TransactionLog` the same helper API, so cursor tests run over both.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Sequence
from typing import Any

from spool.server.bookmarks import pub_hash
from spool.server.clock import VirtualClock, time_us
from spool.server.replay import FunctionLimit, ReadLimit
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind

PUB: int = pub_hash("publisher-a")
PUB_B: int = pub_hash("publisher-b")


class FakeLog:
    """A transaction log in memory.

    ``append`` adds a record (not yet durable); ``flush`` makes records durable and wakes
    ``wait_durable`` callers. Sequence numbers are contiguous from ``first_seq``. Reads
    serve every appended record (a ``DurableLimit`` keeps a cursor at the durable point),
    unless ``durable_reads_only``: then they serve durable records only, as the real log's
    ``read_view`` does.
    """

    def __init__(
        self, clock: VirtualClock | None = None, *, durable_reads_only: bool = False
    ) -> None:
        self.clock = clock
        self.records: list[Record] = []
        self.durable_reads_only = durable_reads_only
        self._first = 1
        self._durable = 0
        self._cond = asyncio.Condition()
        self._appended = asyncio.Event()
        self._by_bookmark: dict[tuple[int, int], int] = {}
        self._pub_seq: dict[int, int] = {}
        self.reads = 0
        self.read_sizes: list[int] = []

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
        rec = Record(
            seq=self.last_seq + 1,
            timestamp_us=ts_us,
            pub_hash=publisher,
            pub_seq=pub_seq,
            topic=topic,
            message_type="json",
            kind=kind,
            path=("a",),
            flags=0,
            body=body,
            sow_key=sow_key,
        )
        self.records.append(rec)
        self._by_bookmark[(publisher, pub_seq)] = rec.seq
        self._appended.set()
        self._appended = asyncio.Event()
        return rec

    async def flush(self, upto: int | None = None) -> None:
        """Make records durable up to ``upto`` exactly (default: all appended)."""
        target = self.last_seq if upto is None else min(upto, self.last_seq)
        async with self._cond:
            self._durable = max(self._durable, target)
            self._cond.notify_all()

    async def publish(self, *args: Any, **kwargs: Any) -> Record:
        rec = self.append(*args, **kwargs)
        await self.flush()
        return rec

    def drop_before(self, seq: int) -> None:
        """Retention: forget records below ``seq``."""
        keep = [r for r in self.records if r.seq >= seq]
        for r in self.records:
            if r.seq < seq:
                self._by_bookmark.pop((r.pub_hash, r.pub_seq), None)
        self.records = keep
        self._first = seq

    async def close(self) -> None:
        """Nothing to release (the real log's adapter closes its files here)."""

    # -- the views a ``live`` subscription uses --

    def live_source(self) -> FakeLog:
        """The source a ``live`` cursor reads: this log serves appended records already."""
        return self

    def live_limit(self) -> ReadLimit:
        """The engine's ``live`` limit, built the way the engine builds it."""
        return FunctionLimit(lambda: self.last_seq, self.wait_appended)

    # -- ReplaySource --

    @property
    def last_seq(self) -> int:
        return self._first + len(self.records) - 1

    @property
    def durable_seq(self) -> int:
        return self._durable

    @property
    def first_seq(self) -> int:
        return self._first

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        seq = self._by_bookmark.get((pub_hash, pub_seq))
        return seq if seq is not None and seq >= self._first else None

    def seq_for_later(self, pub_hash: int, pub_seq: int) -> int | None:
        return next(
            (
                r.seq
                for r in self.records
                if r.pub_hash == pub_hash and r.pub_seq > pub_seq and r.kind != RecordKind.DUE
            ),
            None,
        )

    def seq_for_time(self, timestamp_us: int) -> int:
        stamps = [r.timestamp_us for r in self.records]
        return self._first + bisect.bisect_left(stamps, timestamp_us)

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch:
        await asyncio.sleep(0)
        self.reads += 1
        end = self.durable_seq if self.durable_reads_only else self.last_seq
        if upto_seq is not None:
            end = min(end, upto_seq)
        out: list[Record] = []
        size = 0
        seq = max(from_seq, self._first)
        while seq <= end and len(out) < max_count:
            rec = self.records[seq - self._first]
            if out and size + len(rec.body) > max_bytes:
                break
            out.append(rec)
            size += len(rec.body)
            seq += 1
        self.read_sizes.append(len(out))
        return RecordBatch.from_records(out)

    async def wait_durable(self, seq: int) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._durable >= seq)

    async def wait_appended(self, seq: int) -> None:
        """Return once record ``seq`` was appended (the real log's ``wait_appended``)."""
        while self.last_seq < seq:
            await self._appended.wait()


def next_timestamp(clock: VirtualClock | None, records: Sequence[Record]) -> int:
    """The stamp of a record appended without one: the clock's time, or 1 ms after the
    previous record (1 s after the epoch for the first) when the log has no clock."""
    if clock is not None:
        return time_us(clock)
    return records[-1].timestamp_us + 1000 if records else 1_000_000


class FakeSink:
    """Records deliveries and acks. ``accept`` plays the subscription's filter; ``room``
    cleared makes ``deliver`` wait (a client whose outbound buffer is full)."""

    def __init__(
        self,
        sub_id: str = "s1",
        *,
        clock: VirtualClock | None = None,
        accept: Callable[[Record], bool] | None = None,
        shared: list[tuple[str, int]] | None = None,
    ) -> None:
        self.sub_id = sub_id
        self.clock = clock
        self.accept = accept
        self.shared = shared
        self.got: list[Record] = []
        self.times: list[float] = []
        self.events: list[tuple[str, object]] = []
        self.calls = 0
        #: how many deliver() calls were handed a whole columnar batch
        self.batches = 0
        self.room = asyncio.Event()
        self.room.set()

    @property
    def seqs(self) -> list[int]:
        return [r.seq for r in self.got]

    @property
    def positions(self) -> list[object]:
        return [value for kind, value in self.events if kind == "position"]

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)

    async def deliver(self, records: Sequence[Record]) -> int:
        self.calls += 1
        if isinstance(records, RecordBatch):
            self.batches += 1
        sent = 0
        for rec in records:
            if self.accept is not None and not self.accept(rec):
                continue
            self.got.append(rec)
            self.times.append(self.clock.monotonic() if self.clock is not None else 0.0)
            self.events.append(("deliver", rec.seq))
            if self.shared is not None:
                self.shared.append((self.sub_id, rec.seq))
            sent += 1
        await self.room.wait()
        return sent

    def caught_up(self) -> None:
        self.events.append(("caught_up", len(self.got)))

    def completed(self) -> None:
        self.events.append(("completed", len(self.got)))

    def position(self, bookmark: str) -> None:
        self.events.append(("position", bookmark))
