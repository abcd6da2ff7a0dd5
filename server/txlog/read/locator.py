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

A bookmark has one or two records. Looked up *as published* (replication, repair), it is
the record its publisher's message was recorded as. Looked up *as delivered* (a replay
resuming after it, a SOW state as of it), a delayed message is where its due record is:
the scheduled record (server/txlog/format/record.py ``RecordKind.SCHEDULED``) gives its
due time, and the due record is searched from the first record stamped at or after it,
in the blocks that hold due records (``DUE_KEY``). Written when due, it is in the first
block read. When it is not within :data:`MAX_DUE_BLOCKS` blocks (written long after its
due time), or not in the log (not due yet here), the answer is the scheduled record's
seq: a replay resuming after it starts earlier than the message was delivered (it may
deliver again what the subscriber had), never later (it never skips one).

Each lookup is written once, as a generator of the blocks it needs read
(:meth:`Locator._lookup`); the memory-only, the blocking and the threaded lookups drive it.

Event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Final, Protocol

from spool.server.txlog.append.tail import TailCache
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.codec import HEADER
from spool.server.txlog.format.record import DUE_KEY, Record, RecordKind, late_key
from spool.server.txlog.storage.journal import JournalList
from spool.server.txlog.storage.search import (
    SpanQuery,
    due_time,
    plan_bookmark,
    plan_due,
    plan_late,
    plan_later,
    plan_time,
    search_span,
)

__all__ = ["MAX_DUE_BLOCKS", "Located", "Locator", "LogReads", "LookupView"]

#: most blocks of due records searched for where a delayed message was delivered, from
#: the first record stamped at its due time (module docstring)
MAX_DUE_BLOCKS: Final = 64

_SCHEDULED: Final = int(RecordKind.SCHEDULED)

#: a record a lookup found: its seq, its kind, and a scheduled record's due time
_Hit = tuple[int, int, int | None]
#: a lookup: yields each block it needs read from its file, is sent what that block
#: (and the tail after it) holds of what it looks for, returns the answer
_Steps = Generator[SpanQuery, _Hit | None, int | None]


@dataclass(slots=True)
class Located:
    """Answers of lookups made ahead of a synchronous planning (:meth:`Locator.locate_all`).

    Attributes:
        bookmarks: ``(pub_hash, pub_seq) -> seq`` (None: not in the log), as delivered
            when the lookups were made so (:meth:`Locator.locate_all`).
        times: ``timestamp_us -> seq`` of the first record at or after it.
        later: ``(pub_hash, pub_seq) -> seq`` of the first record of a later message of
            that publisher (None: none in the log), :meth:`Locator.seq_for_later`.
    """

    bookmarks: dict[tuple[int, int], int | None] = field(default_factory=dict)
    times: dict[int, int] = field(default_factory=dict)
    later: dict[tuple[int, int], int | None] = field(default_factory=dict)


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

    def _lookup(self, pub_hash: int, pub_seq: int, delivered: bool) -> _Steps:
        """A lookup of a bookmark, as published or as delivered (module docstring)."""
        hit = yield from self._published(pub_hash, pub_seq, delivered)
        if hit is None:
            return None
        seq, kind, due_us = hit
        if not delivered or kind != _SCHEDULED or due_us is None:
            return seq
        start = self.time_in_memory(due_us)
        if isinstance(start, SpanQuery):
            at = yield start
            start = at[0] if at is not None else self._last_seq() + 1
        items = self._journals.items
        for plan in plan_due(items, max(seq + 1, start), pub_hash, pub_seq, MAX_DUE_BLOCKS):
            found = (yield plan) if plan.span.seq < self._tail.first else self._resolve(plan, b"")
            if found is not None:
                return found[0]
        return seq

    def _published(
        self, pub_hash: int, pub_seq: int, delivered: bool
    ) -> Generator[SpanQuery, _Hit | None, _Hit | None]:
        """The record a bookmark was published as: from the publisher table when it is
        the publisher's last one, else from the blocks that may hold it, those in memory
        first. As delivered, the table's answer stands when the tail says the record's
        kind, or when no due record follows it (whatever its kind, the answer is then the
        record itself): a resume from a publisher's last message reads no file."""
        last = self._pubs.get(pub_hash)
        if not pub_hash or last is None or pub_seq > last[0]:
            return None
        if pub_seq == last[0]:
            seq = last[1]
            if seq < self._journals.items[0].base:
                return None
            if delivered and seq >= self._tail.first:
                return self._tail_hit(seq)
            if not delivered or not self._due_after(seq):
                return seq, 0, None
        plans = self._plans(pub_hash, pub_seq)
        for plan in plans:
            if plan.span.seq >= self._tail.first:
                found = self._resolve(plan, b"")
                if found is not None:
                    return found
        for plan in plans:
            if plan.span.seq < self._tail.first:
                found = yield plan
                if found is not None:
                    return found
        return None

    def _due_after(self, seq: int) -> bool:
        """Whether the log holds a due record after ``seq`` (the indexes' summaries)."""
        for j in reversed(self._journals.items):
            summary = j.index.publisher(DUE_KEY)
            if summary is not None and summary.max_pub_seq > seq:
                return True
            if j.base <= seq:
                return False
        return False

    def _later(self, pub_hash: int, pub_seq: int) -> _Steps:
        """The first record, in log order, of a message of ``pub_hash`` with a sequence
        above ``pub_seq``: the publisher table says whether there is one, the indexes
        where (server/txlog/storage/search.py ``plan_later``)."""
        last = self._pubs.get(pub_hash)
        if not pub_hash or last is None or pub_seq >= last[0]:
            return None
        plan = plan_later(self._journals.items, pub_hash, pub_seq)
        if plan is None:
            return None
        found = self._resolve(plan, b"") if plan.span.seq >= self._tail.first else (yield plan)
        return None if found is None else found[0]

    def bookmark_in_memory(
        self, pub_hash: int, pub_seq: int, delivered: bool = False
    ) -> int | SpanQuery | None:
        """The seq of that bookmark if memory answers it (None: not in the log), else a
        block to read from its journal file."""
        steps = self._lookup(pub_hash, pub_seq, delivered)
        try:
            return next(steps)
        except StopIteration as done:
            answer: int | None = done.value
            return answer

    def later_in_memory(self, pub_hash: int, pub_seq: int) -> int | SpanQuery | None:
        """:meth:`seq_for_later` if memory answers it, else a block to read."""
        steps = self._later(pub_hash, pub_seq)
        try:
            return next(steps)
        except StopIteration as done:
            answer: int | None = done.value
            return answer

    def time_in_memory(self, timestamp_us: int) -> int | SpanQuery:
        """The first seq at or after that time if memory answers it, else the block to
        read from its journal file."""
        plan = plan_time(self._journals.items, timestamp_us)
        if plan is None:
            return self._last_seq() + 1
        if plan.span.seq < self._tail.first:
            return plan
        found = self._resolve(plan, b"")
        return found[0] if found is not None else self._last_seq() + 1

    def needs_io(
        self, bookmarks: list[tuple[int, int]], times: list[int], delivered: bool = False
    ) -> bool:
        """Whether any of these lookups would read a file (else memory answers them all)."""
        return (
            any(isinstance(self.bookmark_in_memory(h, s, delivered), SpanQuery) for h, s in bookmarks)
            or (delivered and any(isinstance(self.later_in_memory(h, s), SpanQuery) for h, s in bookmarks))
            or any(isinstance(self.time_in_memory(t), SpanQuery) for t in times)
        )  # fmt: skip

    # -- with a file read -----------------------------------------------------------------

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int, delivered: bool = False) -> int | None:
        """Seq of the record with that bookmark, as published or as delivered; None if
        unknown or removed (blocks read on this thread when memory cannot answer)."""
        steps = self._lookup(pub_hash, pub_seq, delivered)
        try:
            plan = next(steps)
            while True:
                plan = steps.send(self._resolve(plan, self._read_block(plan)))
        except StopIteration as done:
            answer: int | None = done.value
            return answer

    async def locate_bookmark(
        self, pub_hash: int, pub_seq: int, delivered: bool = False
    ) -> int | None:
        """:meth:`seq_for_bookmark` with the blocks read in a worker thread."""
        return await self._drive(self._lookup(pub_hash, pub_seq, delivered))

    def seq_for_later(self, pub_hash: int, pub_seq: int) -> int | None:
        """Seq of the first record, in log order, of a message of ``pub_hash`` with a
        sequence above ``pub_seq``; None if the log holds none (a block read on this
        thread when memory cannot answer).

        A resume after a bookmark starts there at the latest: a later message of the
        bookmark's publisher comes before the bookmark's own delivery when the bookmark's
        record arrived late (replicated after that later message: its publisher failed
        over to this instance before its earlier messages reached it) or is a delayed
        message's (a later message fell due first).
        """
        steps = self._later(pub_hash, pub_seq)
        try:
            plan = next(steps)
            while True:
                plan = steps.send(self._resolve(plan, self._read_block(plan)))
        except StopIteration as done:
            answer: int | None = done.value
            return answer

    async def locate_later(self, pub_hash: int, pub_seq: int) -> int | None:
        """:meth:`seq_for_later` with the block read in a worker thread."""
        return await self._drive(self._later(pub_hash, pub_seq))

    async def _drive(self, steps: _Steps) -> int | None:
        """Run a lookup, each block it needs read in a worker thread."""
        try:
            plan = next(steps)
            while True:
                plan = steps.send(await self._locate(plan))
        except StopIteration as done:
            answer: int | None = done.value
            return answer

    def seq_for_time(self, timestamp_us: int) -> int:
        """First seq recorded at or after ``timestamp_us``; ``last_seq + 1`` if none (a
        block read on this thread when memory cannot answer)."""
        answer = self.time_in_memory(timestamp_us)
        if not isinstance(answer, SpanQuery):
            return answer
        found = self._resolve(answer, self._read_block(answer))
        return found[0] if found is not None else self._last_seq() + 1

    async def locate_time(self, timestamp_us: int) -> int:
        """:meth:`seq_for_time` with the block read in a worker thread."""
        answer = self.time_in_memory(timestamp_us)
        if not isinstance(answer, SpanQuery):
            return answer
        found = await self._locate(answer)
        return found[0] if found is not None else self._last_seq() + 1

    async def locate_all(
        self, bookmarks: list[tuple[int, int]], times: list[int], delivered: bool = False
    ) -> Located:
        """Resolve every lookup, file reads in a worker thread (for :class:`LookupView`);
        with ``delivered``, where a resume after each bookmark starts at the latest too
        (:meth:`seq_for_later`)."""
        found = Located()
        for h, s in bookmarks:
            found.bookmarks[(h, s)] = await self.locate_bookmark(h, s, delivered)
            if delivered:
                found.later[(h, s)] = await self.locate_later(h, s)
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

    async def _locate(self, q: SpanQuery) -> _Hit | None:
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
                return match.seq, match.kind, match.due_us
            if seq >= self._tail.first or seq >= q.span.seq + q.span.count:
                return self._in_tail(q, seq)

    def _resolve(self, q: SpanQuery, buf: bytes) -> _Hit | None:
        """The matching record within the block: its file bytes first, then the tail."""
        match, seq = search_span(q, buf, self._tail.first)
        if match is not None:
            return match.seq, match.kind, match.due_us
        return self._in_tail(q, seq)

    def _in_tail(self, q: SpanQuery, from_seq: int) -> _Hit | None:
        found = self._tail.find(q, from_seq)
        return None if found is None else self._tail_hit(found)

    def _tail_hit(self, seq: int) -> _Hit:
        """Record ``seq`` of the tail as a lookup found it."""
        data = self._tail.encoded(seq)
        h = HEADER.unpack_from(data)
        return seq, h[2], due_time(data, 0, h) if h[2] == _SCHEDULED else None


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
        """The log's :meth:`~Locator.seq_for_bookmark` as delivered (where a replay
        resumes after it), with no file read when prefetched."""
        answer = self._locator.bookmark_in_memory(pub_hash, pub_seq, delivered=True)
        if not isinstance(answer, SpanQuery):
            return answer
        known = self._located.bookmarks
        if (pub_hash, pub_seq) in known:
            return known[(pub_hash, pub_seq)]
        return self._locator.seq_for_bookmark(pub_hash, pub_seq, delivered=True)

    def seq_for_later(self, pub_hash: int, pub_seq: int) -> int | None:
        """The log's :meth:`~Locator.seq_for_later`, with no file read when prefetched."""
        answer = self._locator.later_in_memory(pub_hash, pub_seq)
        if not isinstance(answer, SpanQuery):
            return answer
        known = self._located.later
        if (pub_hash, pub_seq) in known:
            return known[(pub_hash, pub_seq)]
        return self._locator.seq_for_later(pub_hash, pub_seq)

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
