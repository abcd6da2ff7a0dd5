"""The in-memory tail: the newest records, kept encoded, for reads and lookups without I/O.

Layout: ``records[head:]`` holds the records ``first, first + 1, ...`` up to the last one
appended, one ``bytes`` object per record, byte for byte what is (or will be) written to the
journal. Encoded bytes rather than :class:`~spool.server.txlog.format.record.Record` objects because
``bytes`` are not tracked by the garbage collector, so a large tail does not lengthen
collector passes. Records enter on append (the log extends :attr:`TailCache.records`
directly, once per run) and leave in whole group-commit batches, oldest first, once they
are durable and the tail is over its byte budget. Records not yet durable are never evicted,
so ``live`` readers always find them here.

Event loop only.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from itertools import accumulate

from spool.server.txlog.format.batch import RecordBatch, decode_batch
from spool.server.txlog.format.codec import HEADER, decode_records
from spool.server.txlog.format.record import Record
from spool.server.txlog.storage.search import SpanQuery

__all__ = ["TailCache"]

#: evicted entries at the head are deleted from the list in one go past this many
_COMPACT_AT = 4096


class TailCache:
    """The newest records of the log in memory (see the module docstring).

    Args:
        budget: bytes of durable records kept; 0 keeps only what is not durable yet.
    """

    __slots__ = ("_batches", "_budget", "_bytes", "_first", "_head", "records")

    def __init__(self, budget: int) -> None:
        self.records: list[bytes] = []  # the log's append path extends this list
        self._head = 0  # records[_head] is seq _first
        self._first = 1
        self._batches: deque[tuple[int, int]] = deque()  # (last seq, bytes) per group commit
        self._bytes = 0
        self._budget = budget

    def start(self, first_seq: int) -> None:
        """The next record appended will be ``first_seq`` (at open, while empty)."""
        self._first = first_seq

    @property
    def first(self) -> int:
        """The oldest seq held here; every later appended seq is held too."""
        return self._first

    @property
    def nbytes(self) -> int:
        """Bytes of committed records held (the dashboard's ``tail_cache_bytes``)."""
        return self._bytes

    def committed(self, last_seq: int, nbytes: int, durable_seq: int) -> None:
        """A group commit made records up to ``last_seq`` (``nbytes`` of them) durable:
        account them, then evict the oldest batches beyond the budget."""
        if nbytes:
            self._batches.append((last_seq, nbytes))
            self._bytes += nbytes
        budget = self._budget
        batches = self._batches
        head = self._head
        first = self._first
        while self._bytes > budget and batches and batches[0][0] <= durable_seq:
            last, size = batches.popleft()
            self._bytes -= size
            head += last - first + 1
            first = last + 1
        if head > _COMPACT_AT and head * 2 > len(self.records):
            del self.records[:head]
            head = 0
        self._head = head
        self._first = first

    def read(
        self, from_seq: int, upto: int, max_count: int, max_bytes: int, as_batch: bool
    ) -> list[Record] | RecordBatch:
        """Decode records ``from_seq..upto`` (all held here) up to the limits (no I/O)."""
        i = self._head + from_seq - self._first
        j = min(i + max_count, self._head + upto - self._first + 1)
        parts = self.records[i:j]
        # no more records than ``max_bytes`` takes (at least one): the batch keeps the
        # joined buffer, so joining ``max_count`` large records would hold all of them
        # (a thousand 60 KB records: 60 MB per reader) for a read that decodes a few
        if sum(map(len, parts)) > max_bytes:
            parts = parts[: bisect_left(list(accumulate(map(len, parts))), max_bytes) + 1]
        buf = b"".join(parts)
        if as_batch:
            # encoded here and never written back: the bytes need no CRC check
            batch, _ = decode_batch(
                buf, 0, len(buf), from_seq, max_count=len(parts), max_bytes=max_bytes,
                trusted=(0, len(buf)),
            )  # fmt: skip
            return batch
        records, _ = decode_records(
            buf, 0, len(buf), from_seq, max_count=len(parts), max_bytes=max_bytes
        )
        return records

    def find(self, q: SpanQuery, from_seq: int) -> int | None:
        """The first seq from ``from_seq`` (at least :attr:`first`) to the end of ``q``'s
        block whose record matches ``q``; None if none does."""
        seq = max(from_seq, self._first)
        stop = q.span.seq + q.span.count
        records = self.records
        offset = self._head - self._first
        while seq < stop:
            h = HEADER.unpack_from(records[offset + seq])
            if q.matches(h[5], h[6], h[7], h[2]):
                return seq
            seq += 1
        return None

    def encoded(self, seq: int) -> bytes:
        """The bytes of record ``seq`` (held here: at least :attr:`first`)."""
        return self.records[self._head + seq - self._first]
