"""The pending delayed messages, in the order they fall due: :class:`DueIndex`.

A publish asking for delayed delivery is stored at once; at its due time the broker writes
the copy that is delivered. Until then the message is an entry of this index: its due time
(``due_us``, microseconds since the epoch), the log seq of its stored record, and its
publisher's identity (``pub_hash``, ``pub_seq``) to find and name it. The delayed-delivery
service (to come) owns the index on the event loop: its timer takes what has fallen due
(:meth:`DueIndex.pop_due`) and sleeps until the next (:meth:`DueIndex.peek`); its admin
listing pages through what is pending (:meth:`DueIndex.upcoming`); its checkpoint saves
every entry (:meth:`DueIndex.entries`) and its retention pin keeps the stored records in the
log (:meth:`DueIndex.lowest_seq_bound`). Pure: no clock, no I/O; time is an argument.

The structure: one sorted sequence cut into chunks
--------------------------------------------------
Entries are kept in ``(due_us, seq)`` order in chunks of at most ``2 * load`` entries
(1,024 by default). A chunk is four ``array`` columns (due, seq, publisher hash, publisher
sequence: 8 bytes each, 32 bytes an entry), and a list of each chunk's last key finds the
chunk an entry belongs in by bisection. So:

- ``add`` is two bisections in C (the chunk, then the place inside it) and an insert that
  moves at most one chunk's entries; a due time later than every pending one (the common
  case: one delay for a topic) appends. A chunk that grows past ``2 * load`` is split;
- ``pop_due`` cuts a prefix of the first chunks (one bisection, one slice per chunk): the
  entries come out in ``(due_us, seq)`` order, and ``limit`` bounds the work of one call;
- ``peek`` is the first entry; ``upcoming`` bisects to its cursor and reads on;
- ``entries`` copies the columns whole (a ``memcpy`` per chunk, no tuple an entry), so the
  checkpoint's copy costs milliseconds for a million entries;
- memory: 32 bytes an entry, plus an ``array``'s growth headroom (at most about 1/16) and
  a few hundred bytes a chunk (under one byte an entry): 1,000,000 pending take 34 to
  36 MB (tests/unit/delayed/test_dueindex.py measures it).

Why not a timing wheel (buckets of one second, one minute, one hour that cascade as time
passes): it places an entry in O(1), but its buckets are unordered, so every entry still
passes through a heap of tuples near its due time (O(log n) and over 100 bytes an entry
while there), and the ordered walks the admin listing and the checkpoint need would sort
buckets on each call. The sorted chunks cost O(log n) an entry once, in C, hold no tuple
per entry anywhere, need no cascade driven by the clock, and give every ordered read
directly; their bound does not depend on how far ahead due times reach.

The retention pin needs the smallest pending seq, which the ``(due_us, seq)`` order does
not give; the index counts entries per block of 65,536 seqs and answers with the start of
the lowest block that holds one (exact to the block, O(blocks) a call, a call per checkpoint).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

__all__ = ["SEQ_BLOCK", "DueEntries", "DueEntry", "DueIndex"]

#: ``(due_us, seq, pub_hash, pub_seq)``: one pending delayed message
DueEntry = tuple[int, int, int, int]

#: the seqs one block of :meth:`DueIndex.lowest_seq_bound` spans
SEQ_BLOCK: Final = 1 << 16
_BLOCK_SHIFT: Final = 16
_LOAD: Final = 512


def _columns() -> tuple[array[int], array[int], array[int], array[int]]:
    """Empty columns: due_us and seq signed, the publisher's hash and sequence unsigned
    (64-bit values, as the checkpoint file stores them)."""
    return array("q"), array("q"), array("Q"), array("Q")


@dataclass(frozen=True, slots=True)
class DueEntries:
    """A copy of pending entries in ``(due_us, seq)`` order, as four columns.

    What :meth:`DueIndex.entries` gives and the checkpoint stores: compact (32 bytes an
    entry) and independent of the index once taken. Iterating gives :data:`DueEntry`
    tuples. Build one from rows with :meth:`of`, which sorts them.
    """

    due_us: array[int]
    seq: array[int]
    pub_hash: array[int]
    pub_seq: array[int]

    @classmethod
    def of(cls, rows: Iterable[DueEntry]) -> DueEntries:
        """The entries ``rows``, put in ``(due_us, seq)`` order."""
        cols = _columns()
        for row in sorted(rows, key=lambda r: (r[0], r[1])):
            for col, value in zip(cols, row, strict=True):
                col.append(value)
        return cls(*cols)

    def __len__(self) -> int:
        return len(self.seq)

    def __iter__(self) -> Iterator[DueEntry]:
        return zip(self.due_us, self.seq, self.pub_hash, self.pub_seq, strict=True)


class _Chunk:
    """A run of consecutive entries of the index, as four columns."""

    __slots__ = ("due", "pub_hash", "pub_seq", "seq")

    def __init__(
        self, due: array[int], seq: array[int], pub_hash: array[int], pub_seq: array[int]
    ) -> None:
        self.due = due
        self.seq = seq
        self.pub_hash = pub_hash
        self.pub_seq = pub_seq

    def take(self, start: int, stop: int) -> list[DueEntry]:
        """Entries ``[start, stop)`` as tuples."""
        return list(
            zip(
                self.due[start:stop],
                self.seq[start:stop],
                self.pub_hash[start:stop],
                self.pub_seq[start:stop],
                strict=True,
            )
        )

    def after(self, due: int, seq: int) -> int:
        """The position of the first entry after ``(due, seq)``: entries of one due
        time are in seq order, so bisect the seqs of that due time."""
        lo = bisect_left(self.due, due)
        hi = bisect_right(self.due, due, lo)
        return bisect_right(self.seq, seq, lo, hi)

    def split(self) -> _Chunk:
        """Keep the first half; return the second half as a new chunk."""
        half = len(self.seq) // 2
        new = _Chunk(self.due[half:], self.seq[half:], self.pub_hash[half:], self.pub_seq[half:])
        del self.due[half:], self.seq[half:], self.pub_hash[half:], self.pub_seq[half:]
        return new


class DueIndex:
    """Pending delayed messages, by due time then seq.

    Each entry's ``seq`` is the log position of its stored record: the caller adds each
    once (the index does not look for duplicates). Not thread-safe: the event loop owns it.

    Args:
        load: chunk size (entries); a chunk is split past twice this. Tests pass a small
            one to exercise the splits.
    """

    __slots__ = ("_blocks", "_chunks", "_lasts", "_len", "_load")

    def __init__(self, load: int = _LOAD) -> None:
        if load < 1:
            raise ValueError(f"load must be at least 1, not {load}")
        self._load = load
        self._chunks: list[_Chunk] = []
        #: each chunk's last ``(due_us, seq)``, for bisection
        self._lasts: list[tuple[int, int]] = []
        #: pending entries per block of :data:`SEQ_BLOCK` seqs (blocks with none absent)
        self._blocks: dict[int, int] = {}
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def add(self, due_us: int, seq: int, pub_hash: int, pub_seq: int) -> None:
        """Add a pending message (any due time: one already past falls due at once)."""
        key = (due_us, seq)
        chunks, lasts = self._chunks, self._lasts
        i = bisect_left(lasts, key)
        if i == len(lasts):
            if not chunks:
                chunks.append(_Chunk(*_columns()))
                lasts.append(key)
            i = len(lasts) - 1
            chunk = chunks[i]
            chunk.due.append(due_us)
            chunk.seq.append(seq)
            chunk.pub_hash.append(pub_hash)
            chunk.pub_seq.append(pub_seq)
            lasts[i] = key
        else:
            chunk = chunks[i]
            at = chunk.after(due_us, seq)
            chunk.due.insert(at, due_us)
            chunk.seq.insert(at, seq)
            chunk.pub_hash.insert(at, pub_hash)
            chunk.pub_seq.insert(at, pub_seq)
        if len(chunk.seq) > 2 * self._load:
            new = chunk.split()
            chunks.insert(i + 1, new)
            lasts.insert(i + 1, lasts[i])
            lasts[i] = (chunk.due[-1], chunk.seq[-1])
        block = seq >> _BLOCK_SHIFT
        self._blocks[block] = self._blocks.get(block, 0) + 1
        self._len += 1

    def pop_due(self, now_us: int, limit: int) -> list[DueEntry]:
        """Remove and return the entries due by ``now_us`` (``due_us <= now_us``), at
        most ``limit`` of them, in ``(due_us, seq)`` order. Fewer than ``limit``: none
        due is left."""
        out: list[DueEntry] = []
        chunks = self._chunks
        while chunks and len(out) < limit:
            chunk = chunks[0]
            n = min(bisect_right(chunk.due, now_us), limit - len(out))
            if n == 0:
                break
            out.extend(chunk.take(0, n))
            if n == len(chunk.seq):
                del chunks[0], self._lasts[0]
                continue
            del chunk.due[:n], chunk.seq[:n], chunk.pub_hash[:n], chunk.pub_seq[:n]
            break
        blocks = self._blocks
        for entry in out:
            block = entry[1] >> _BLOCK_SHIFT
            left = blocks[block] - 1
            if left:
                blocks[block] = left
            else:
                del blocks[block]
        self._len -= len(out)
        return out

    def peek(self) -> int | None:
        """The earliest due time pending (None: nothing is)."""
        return self._chunks[0].due[0] if self._chunks else None

    def upcoming(self, after: tuple[int, int] | None, limit: int) -> list[DueEntry]:
        """At most ``limit`` entries after the position ``after`` (a ``(due_us, seq)``;
        None: from the first), in order, without removing them: a page of a listing,
        whose last entry's ``(due_us, seq)`` is the next page's ``after``."""
        out: list[DueEntry] = []
        if limit <= 0:
            return out
        chunks = self._chunks
        if after is None:
            i, at = 0, 0
        else:
            i = bisect_right(self._lasts, after)
            at = chunks[i].after(*after) if i < len(chunks) else 0
        while i < len(chunks) and len(out) < limit:
            chunk = chunks[i]
            out.extend(chunk.take(at, at + limit - len(out)))
            i, at = i + 1, 0
        return out

    def entries(self) -> DueEntries:
        """A copy of every entry, in order (for the checkpoint)."""
        cols = _columns()
        for chunk in self._chunks:
            cols[0].extend(chunk.due)
            cols[1].extend(chunk.seq)
            cols[2].extend(chunk.pub_hash)
            cols[3].extend(chunk.pub_seq)
        return DueEntries(*cols)

    def lowest_seq_bound(self) -> int | None:
        """A seq not above the smallest seq pending: the first seq of the lowest block
        of :data:`SEQ_BLOCK` that holds an entry (None: nothing is pending)."""
        return min(self._blocks) << _BLOCK_SHIFT if self._blocks else None
