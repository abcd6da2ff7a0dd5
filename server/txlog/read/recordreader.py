"""Reading a live log's records back by seq (replay, replication, the admin API).

Durable records come from the in-memory tail when it holds them, else from the journal
file holding them, decoded in a worker thread (:func:`~spool.server.txlog.storage.source.read_span`,
which checks the bytes against the index's block CRCs). A read never crosses a journal's
end: the caller asks again from the next seq. Records appended but not durable yet are
always in the tail (it evicts durable records only), so ``live`` readers never touch a
file for them.

A journal may be archived or compressed while a read is in flight: the read keeps its
reader acquired, and one that finds the file gone looks the journal up again.

Event loop only (file reads in worker threads).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from spool.server.txlog.append.groupcommit import GroupCommit, Pending
from spool.server.txlog.append.tail import TailCache
from spool.server.txlog.damage.fences import FenceTable
from spool.server.txlog.errors import CorruptRecord, TxlogError
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record
from spool.server.txlog.storage.journal import JournalList
from spool.server.txlog.storage.source import read_span

__all__ = ["RecordReader"]

#: lookups of a journal that moved (archived, compressed) during a read before giving up
_ATTEMPTS = 3


class RecordReader:
    """Records of one log by seq (see the module docstring).

    Args:
        journals: the log's journals.
        tail: the log's in-memory tail.
        pending: the append side (the last appended seq).
        commit: the group commit (the durable seq).
        on_corrupt: told the base of a journal a read found damaged (the scrub then
            checks that journal at once).
        fences: the log's fences: a read never returns their placeholders as records.
    """

    def __init__(
        self,
        journals: JournalList,
        tail: TailCache,
        pending: Pending,
        commit: GroupCommit,
        *,
        on_corrupt: Callable[[int], None] | None = None,
        fences: FenceTable | None = None,
    ) -> None:
        self._journals = journals
        self._tail = tail
        self._pending = pending
        self._commit = commit
        self._on_corrupt = on_corrupt
        self._fences = fences if fences is not None else FenceTable()

    @property
    def first_seq(self) -> int:
        """Oldest seq still held (``last_seq + 1`` when there is none)."""
        journals = self._journals.items
        return journals[0].base if journals else self._pending.last_seq + 1

    async def durable(
        self, from_seq: int, max_count: int, max_bytes: int, upto_seq: int | None, as_batch: bool
    ) -> list[Record] | RecordBatch:
        """Durable records from ``max(from_seq, first_seq)``, up to the limits, ``upto_seq``
        and the end of the journal holding the first one.

        A read stops before a fence; a read that starts in one raises its
        :class:`FencedRecords` (a reader that may skip damage goes on after it).

        Raises:
            FencedRecords: ``from_seq`` is fenced (damaged, waiting for a repair).
            CorruptRecord: a journal's bytes are damaged at the position read.
        """
        durable = self._commit.durable_seq
        limit = durable if upto_seq is None else min(upto_seq, durable)
        from_seq = max(from_seq, self.first_seq)
        if from_seq > limit or max_count <= 0:
            return RecordBatch.empty() if as_batch else []
        if self._fences:
            fence = self._fences.next_from(from_seq)
            if fence is not None and fence.first_seq <= limit:
                if fence.first_seq <= from_seq:
                    raise fence.error()
                limit = fence.first_seq - 1
        if from_seq >= self._tail.first:
            return self._tail.read(from_seq, limit, max_count, max_bytes, as_batch)
        for _ in range(_ATTEMPTS):
            j = self._journals.holding(from_seq)
            span = j.index.span_for_seq(from_seq)
            assert span is not None
            source = j.source
            assert source is not None
            upto = min(limit, j.last_seq, self._tail.first - 1)
            source.acquire()
            try:
                result, _, _ = await asyncio.to_thread(
                    read_span, source, span.offset, span.seq, j.durable_len, from_seq,
                    max_count=max_count, max_bytes=max_bytes, upto_seq=upto, as_batch=as_batch,
                    index=j.index,
                )  # fmt: skip
            except FileNotFoundError:
                continue  # archived or compressed meanwhile: look it up again
            except CorruptRecord:
                if self._on_corrupt is not None:
                    self._on_corrupt(j.base)
                raise
            finally:
                source.release()
            return result
        raise TxlogError(f"journal holding seq {from_seq} keeps moving")

    def appended(
        self, from_seq: int, max_count: int, max_bytes: int, upto_seq: int | None
    ) -> list[Record]:
        """Records after the durable point, from the tail (``from_seq > durable_seq``)."""
        last = self._pending.last_seq
        limit = last if upto_seq is None else min(upto_seq, last)
        if from_seq > limit or max_count <= 0:
            return []
        records = self._tail.read(from_seq, limit, max_count, max_bytes, False)
        assert isinstance(records, list)
        return records
