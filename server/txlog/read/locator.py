"""Finding a seq by bookmark or time in a live log, and answers prefetched off the loop.

A lookup is first *planned* from memory - the publisher table, the journals' indexes, the
in-memory tail - which either answers it or narrows it to one index block of one journal
(:class:`~spool.server.txlog.storage.search.SpanQuery`). A block whose records are all in the tail is
searched there; otherwise its bytes (a few KB; a chunk decompression when compressed) are
read from the file. :class:`Locator` does that read synchronously (``seq_for_*``) or in a
worker thread (``locate_*``).

Replay planning is synchronous and must not read files on the event loop. The broker
therefore resolves a subscription's lookups first with :meth:`Locator.locate_all` (file
reads in a thread) and plans against :class:`LookupView`, which answers from memory when
memory can and from those prefetched answers when it would otherwise need the file.
Memory goes first because its answers are current: a prefetched answer only stands in for
a block read, and a block below the tail holds history that does not change (unless its
journal is removed: a time answer from a removed journal is not used). So a view may
outlive the planning - a replay that settles a time end later asks it again - without
answering from stale prefetches.

Event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from spool.server.txlog.append.tail import TailCache
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, late_key
from spool.server.txlog.storage.journal import JournalList
from spool.server.txlog.storage.search import (
    SpanQuery,
    plan_bookmark,
    plan_late,
    plan_time,
    search_span,
)

__all__ = ["Located", "Locator", "LogReads", "LookupView"]


@dataclass(slots=True)
class Located:
    """Answers of lookups made ahead of a synchronous planning (:meth:`Locator.locate_all`).

    Attributes:
        bookmarks: ``(pub_hash, pub_seq) -> seq`` (None: not in the log).
        times: ``timestamp_us -> seq`` of the first record at or after it.
    """

    bookmarks: dict[tuple[int, int], int | None] = field(default_factory=dict)
    times: dict[int, int] = field(default_factory=dict)


class Locator:
    """Lookups by bookmark and time over one log's journals and tail.

    Args:
        journals: the log's journals.
        tail: the log's in-memory tail.
        publishers: the log's publisher table ``pub_hash -> (last pub_seq, its seq)``.
        last_seq: the log's last appended seq (a time after every record answers one past
            it).
    """

    def __init__(
        self,
        journals: JournalList,
        tail: TailCache,
        publishers: dict[int, tuple[int, int]],
        last_seq: Callable[[], int],
    ) -> None:
        self._journals = journals
        self._tail = tail
        self._pubs = publishers
        self._last_seq = last_seq

    # -- from memory ----------------------------------------------------------------------

    def _plans(self, pub_hash: int, pub_seq: int) -> list[SpanQuery]:
        """The blocks that may hold a bookmark: under the publisher's own index key, and
        under its late key (a record that arrived late, server/txlog/format/record.py)."""
        items = self._journals.items
        plans = []
        own = plan_bookmark(items, pub_hash, pub_seq)
        if own is not None:
            plans.append(own)
        plans.extend(plan_late(items, late_key(pub_hash), pub_hash, pub_seq))
        return plans

    def bookmark_in_memory(self, pub_hash: int, pub_seq: int) -> int | SpanQuery | None:
        """The seq of that bookmark if memory answers it (None: not in the log), else the
        block to read from its journal file."""
        last = self._pubs.get(pub_hash)
        if not pub_hash or last is None or pub_seq > last[0]:
            return None
        if pub_seq == last[0]:
            return last[1] if last[1] >= self._journals.items[0].base else None
        needs_read: SpanQuery | None = None
        for plan in self._plans(pub_hash, pub_seq):
            if plan.span.seq < self._tail.first:
                needs_read = needs_read or plan
                continue
            found = self._resolve(plan, b"")
            if found is not None:
                return found
        return needs_read

    def time_in_memory(self, timestamp_us: int) -> int | SpanQuery:
        """The first seq at or after that time if memory answers it, else the block to
        read from its journal file."""
        plan = plan_time(self._journals.items, timestamp_us)
        if plan is None:
            return self._last_seq() + 1
        if plan.span.seq < self._tail.first:
            return plan
        found = self._resolve(plan, b"")
        return found if found is not None else self._last_seq() + 1

    def needs_io(self, bookmarks: list[tuple[int, int]], times: list[int]) -> bool:
        """Whether any of these lookups would read a file (else memory answers them all)."""
        return any(
            isinstance(self.bookmark_in_memory(h, s), SpanQuery) for h, s in bookmarks
        ) or any(isinstance(self.time_in_memory(t), SpanQuery) for t in times)

    # -- with a file read -----------------------------------------------------------------

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        """Seq of the record with that bookmark; None if unknown or removed (a block read
        on this thread when memory cannot answer)."""
        answer = self.bookmark_in_memory(pub_hash, pub_seq)
        if not isinstance(answer, SpanQuery):
            return answer
        for plan in self._plans(pub_hash, pub_seq):
            if plan.span.seq >= self._tail.first:
                continue  # answered from memory already
            found = self._resolve(plan, self._read_block(plan))
            if found is not None:
                return found
        return None

    async def locate_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        """:meth:`seq_for_bookmark` with the block read in a worker thread."""
        answer = self.bookmark_in_memory(pub_hash, pub_seq)
        if not isinstance(answer, SpanQuery):
            return answer
        for plan in self._plans(pub_hash, pub_seq):
            if plan.span.seq >= self._tail.first:
                continue  # answered from memory already
            found = await self._locate(plan)
            if found is not None:
                return found
        return None

    def seq_for_time(self, timestamp_us: int) -> int:
        """First seq recorded at or after ``timestamp_us``; ``last_seq + 1`` if none (a
        block read on this thread when memory cannot answer)."""
        answer = self.time_in_memory(timestamp_us)
        if not isinstance(answer, SpanQuery):
            return answer
        found = self._resolve(answer, self._read_block(answer))
        return found if found is not None else self._last_seq() + 1

    async def locate_time(self, timestamp_us: int) -> int:
        """:meth:`seq_for_time` with the block read in a worker thread."""
        answer = self.time_in_memory(timestamp_us)
        if not isinstance(answer, SpanQuery):
            return answer
        found = await self._locate(answer)
        return found if found is not None else self._last_seq() + 1

    async def locate_all(self, bookmarks: list[tuple[int, int]], times: list[int]) -> Located:
        """Resolve every lookup, file reads in a worker thread (for :class:`LookupView`)."""
        found = Located()
        for h, s in bookmarks:
            found.bookmarks[(h, s)] = await self.locate_bookmark(h, s)
        for t in times:
            found.times[t] = await self.locate_time(t)
        return found

    def _read_block(self, q: SpanQuery) -> bytes:
        source = q.journal.source
        assert source is not None
        return source.read(q.span.offset, min(q.span.length, q.journal.durable_len - q.span.offset))

    async def _read_block_async(self, q: SpanQuery) -> bytes:
        source = q.journal.source
        assert source is not None
        length = min(q.span.length, q.journal.durable_len - q.span.offset)
        source.acquire()
        try:
            return await asyncio.to_thread(source.read, q.span.offset, length)
        finally:
            source.release()

    async def _locate(self, q: SpanQuery) -> int | None:
        """:meth:`_resolve` over a block read in a worker thread.

        The read covers the block's bytes durable when it started; the rest of the block
        is in the tail. A group commit that lands during the read can make more of the
        block durable and the tail evict it, so records between the end of the bytes
        read and the tail's new start are then in neither: the block is read again (it
        is durable further now), until the walk meets the tail or the block's end.
        """
        while True:
            buf = await self._read_block_async(q)
            match, seq = search_span(q, buf, self._tail.first)
            if match is not None:
                return match.seq
            if seq >= self._tail.first or seq >= q.span.seq + q.span.count:
                return self._tail.find(q, seq)

    def _resolve(self, q: SpanQuery, buf: bytes) -> int | None:
        """The matching seq within the block: its file bytes first, then the tail."""
        match, seq = search_span(q, buf, self._tail.first)
        if match is not None:
            return match.seq
        return self._tail.find(q, seq)


class LogReads(Protocol):
    """What :class:`LookupView` passes through to the log: the rest of a replay source."""

    @property
    def durable_seq(self) -> int: ...

    @property
    def first_seq(self) -> int: ...

    async def read_batch(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> list[Record]: ...

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch: ...

    async def wait_durable(self, seq: int) -> None: ...


class LookupView:
    """The log as a replay planner sees it once the planning's lookups were prefetched.

    A read-only replay source (``spool.server.replay.ReplaySource``): ``seq_for_bookmark`` and
    ``seq_for_time`` answer from memory when memory can, else from the :class:`Located`
    given (no file is read); every other member is the log's. A lookup that neither answers
    is read from the file as the log itself would - a caller that prefetched too little is
    slow, not wrong.

    Args:
        log: the log (reads, positions, durability).
        locator: the log's lookups.
        located: the answers prefetched with :meth:`Locator.locate_all`.
    """

    __slots__ = ("_located", "_locator", "_log")

    def __init__(self, log: LogReads, locator: Locator, located: Located) -> None:
        self._log = log
        self._locator = locator
        self._located = located

    @property
    def located(self) -> Located:
        """The prefetched answers."""
        return self._located

    @property
    def durable_seq(self) -> int:
        return self._log.durable_seq

    @property
    def first_seq(self) -> int:
        return self._log.first_seq

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        """The log's :meth:`~Locator.seq_for_bookmark`, with no file read when prefetched."""
        answer = self._locator.bookmark_in_memory(pub_hash, pub_seq)
        if not isinstance(answer, SpanQuery):
            return answer
        known = self._located.bookmarks
        if (pub_hash, pub_seq) in known:
            return known[(pub_hash, pub_seq)]
        return self._locator.seq_for_bookmark(pub_hash, pub_seq)

    def seq_for_time(self, timestamp_us: int) -> int:
        """The log's :meth:`~Locator.seq_for_time`, with no file read when prefetched."""
        answer = self._locator.time_in_memory(timestamp_us)
        if not isinstance(answer, SpanQuery):
            return answer
        seq = self._located.times.get(timestamp_us)
        if seq is not None and seq >= self._log.first_seq:  # not removed since
            return seq
        return self._locator.seq_for_time(timestamp_us)

    async def read_batch(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> list[Record]:
        return await self._log.read_batch(
            from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
        )

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch:
        return await self._log.read_view(
            from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
        )

    async def wait_durable(self, seq: int) -> None:
        await self._log.wait_durable(seq)
