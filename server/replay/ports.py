"""The interfaces a replay cursor is driven through, and the limits built on them.

A cursor reads a :class:`ReplaySource`, delivers to one :class:`ReplaySink` per
subscription and reads no further than a :class:`ReadLimit`. These are the seams the rest of
the broker plugs into (the transaction log, the engine's per-subscription sink, durability
levels such as ``live`` and, later, ``fully_durable``), so they live apart from the cursor
and import nothing of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record


class ReplaySource(Protocol):
    """What a cursor reads; the transaction log implements it.

    ``first_seq`` is the oldest record still held (``durable_seq + 1`` when none is);
    ``seq_for_time(t)`` is the first record stamped at or after ``t`` (one past the newest
    *appended* record when there is none yet); ``read_view`` returns contiguous records
    from ``from_seq`` (from ``first_seq`` if that is later; never past ``upto_seq``; it may
    serve durable records only, then a ``live`` cursor waits for them) as a
    :class:`RecordBatch`, the columnar form a sink encodes without building a
    :class:`Record` per message; ``wait_durable(seq)`` returns once ``durable_seq >= seq``.

    Known limit: the two lookups are synchronous. Planning calls them before a cursor runs
    (the engine resolves lookups that would read a journal file in a worker thread first),
    but :meth:`StopRule.on_clock <spool.server.replay.plan.StopRule.on_clock>` calls
    ``seq_for_time`` *while the cursor runs*, when the clock passes a future range end; an
    implementation may then read a file on the event loop (the transaction log answers from
    its in-memory tail when the moment has just passed, the usual case). See "Known limits"
    in docs/architecture.md.
    """

    @property
    def durable_seq(self) -> int: ...

    @property
    def first_seq(self) -> int: ...

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        """Where a replay resumes after that bookmark: the seq of its message as delivered
        (a delayed message's due record); None when the log does not hold it."""
        ...

    def seq_for_later(self, pub_hash: int, pub_seq: int) -> int | None:
        """The first record, in log order, of a message of that publisher with a higher
        sequence (None: none here). A resume after the bookmark starts there at the
        latest, so it never skips a later message of the bookmark's publisher that this
        log holds before the bookmark's own delivery (docs/bookmarks.md "Where a replay
        starts")."""
        ...

    def seq_for_time(self, timestamp_us: int) -> int: ...

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch: ...

    async def wait_durable(self, seq: int) -> None: ...


class ReplaySink(Protocol):
    """Where a cursor delivers; the engine implements one per subscription."""

    sub_id: str

    async def deliver(self, records: Sequence[Record]) -> int:
        """Filter and send ``records``; return how many were sent (``top_n`` counts these).
        Awaits while the client's outbound buffer is above its watermark."""
        ...

    def caught_up(self) -> None:
        """An open-ended subscription first reached the live point (``completed`` ack)."""
        ...

    def completed(self) -> None:
        """Range end or ``top_n`` reached: ``completed`` ack; nothing more is delivered."""
        ...

    def position(self, bookmark: str) -> None:
        """Periodic persisted ack carrying ``bm`` = the latest durable position."""
        ...


class ReadLimit(Protocol):
    """How far a cursor may read: the durability level its subscription asked for.

    The default is :class:`DurableLimit` (locally persisted). The engine supplies one that
    follows appends for ``live`` and one that follows every sync replication destination
    for ``fully_durable`` (with none configured, that is the durable limit).
    """

    @property
    def seq(self) -> int: ...

    async def wait(self, seq: int) -> None:
        """Return once :attr:`seq` is at least ``seq``."""
        ...


class DurableLimit:
    """Records the log has fsynced: the default delivery point."""

    def __init__(self, source: ReplaySource) -> None:
        self._source = source

    @property
    def seq(self) -> int:
        return self._source.durable_seq

    async def wait(self, seq: int) -> None:
        await self._source.wait_durable(seq)


class FunctionLimit:
    """A limit from two callables, for the engine's ``live`` (appended) and
    ``fully_durable`` (replicated) delivery points, e.g.
    ``FunctionLimit(lambda: txlog.last_seq, txlog.wait_appended)``."""

    def __init__(self, seq: Callable[[], int], wait: Callable[[int], Awaitable[None]]) -> None:
        self._seq = seq
        self._wait = wait

    @property
    def seq(self) -> int:
        return self._seq()

    async def wait(self, seq: int) -> None:
        await self._wait(seq)


class LowestLimit:
    """The strictest of several limits: how far a group of members may read.

    Subscriptions resumed together share one cursor, and a record may only reach them once
    *every* member's durability level allows it; otherwise a default subscription grouped
    with a ``live`` one would receive records before they are on disk.
    """

    def __init__(self, limits: Sequence[ReadLimit]) -> None:
        if not limits:
            raise ValueError("LowestLimit needs at least one limit")
        self._limits = tuple(limits)

    @property
    def seq(self) -> int:
        return min(h.seq for h in self._limits)

    async def wait(self, seq: int) -> None:
        for limit in self._limits:
            await limit.wait(seq)
