"""Fences: local sequences whose records are damaged or missing, held in place.

When a check finds records of a journal damaged (a flipped bit, a torn or truncated
finished journal, a journal missing from the middle of the log), the records after them
are intact and stay readable: the damaged ones are *fenced*. Each of their local
sequences keeps its place in the log as a **placeholder record** (kind
:attr:`~spool.server.txlog.format.record.RecordKind.LOST`, 56 bytes, no publisher, no topic), so seqs
stay contiguous, no seq is ever given to another record, and the journal, its index and
every reader keep their rules. The damaged bytes are kept in ``damaged/``. A repair from a
replication peer writes the records back in place of their placeholders, with the same
local seqs (server/txlog/recovery/rewrite.py).

The first placeholder of a fence carries the fence's description in its body (JSON,
:meth:`Fence.meta`): why, where the damage was, where its bytes were kept, and what is
known of the records it stands for: the *bookmark intervals* ``(pub_hash, first, last)``
they lie in and the time window between the intact records around them, which is what a
repair asks its peers for. Placeholders are indexed under
:data:`~spool.server.txlog.format.record.LOST_KEY` with their own seq, so a journal's index says
whether and where it holds fences without a record being read.

A placeholder with :data:`~spool.server.txlog.format.record.FLAG_RELEASED` no longer stands for
records anyone waits for: an operator released its fence (the loss is accepted); readers
pass over it.

The :class:`FenceTable` is the log's list of fences (event loop only); readers ask it
before reading (server/txlog/read/recordreader.py) and get
:class:`~spool.server.txlog.errors.FencedRecords` for a fenced seq.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import orjson

from spool.server.txlog.errors import FencedRecords
from spool.server.txlog.format.codec import encode
from spool.server.txlog.format.record import FLAG_RELEASED, RecordKind

__all__ = [
    "META_VERSION",
    "Fence",
    "FenceTable",
    "Part",
    "placeholder_size",
    "placeholders",
]

#: version of a fence's description in its first placeholder
META_VERSION: Final = 1
#: what a fence's records are known to be: ``(pub_hash, first pub_seq, last pub_seq)``
Interval = tuple[int, int, int]
#: a piece of a journal being written anew: encoded records, or ``(start, end)`` bytes of
#: the old journal (server/txlog/recovery/rewrite.py)
Part = bytes | tuple[int, int]


@dataclass(slots=True)
class Fence:
    """Fenced local sequences ``first_seq..last_seq`` of one journal.

    Attributes:
        first_seq, last_seq: the fenced range.
        journal: base seq of the journal that holds their placeholders.
        reason: what the check found (``crc mismatch``, ``torn record``, ``journal
            missing``, ``lost after the end of the data``...).
        found_by: ``startup``, ``scrub``, ``read``.
        found_us: when (microseconds since the Unix epoch, UTC).
        path: the journal file the damage was in (its name when found).
        offset: where the damage started in it (-1: no bytes, a journal missing).
        saved: where the damaged bytes were kept, if any.
        identities: bookmark intervals ``(pub_hash, first, last)`` the records lie in.
        exact: the intervals are exactly the fenced records, one per seq.
        window: ``(t_lo, t_hi)``: times (µs) of the intact records just before and just
            after the range (``t_hi`` None: none after it).
        repair: what the last repair attempt found (in memory only).
    """

    first_seq: int
    last_seq: int
    journal: int
    reason: str
    found_by: str
    found_us: int
    path: str
    offset: int = -1
    saved: str | None = None
    identities: list[Interval] = field(default_factory=list)
    exact: bool = False
    window: tuple[int, int | None] = (0, None)
    repair: str = "waiting for a peer"

    @property
    def records(self) -> int:
        return self.last_seq - self.first_seq + 1

    def error(self) -> FencedRecords:
        """What a reader that reached this fence gets."""
        return FencedRecords(
            self.first_seq, self.last_seq, self.path, self.reason, tuple(self.identities)
        )

    def meta(self) -> dict[str, object]:
        """The description kept in the first placeholder's body."""
        return {
            "v": META_VERSION,
            "first": self.first_seq,
            "last": self.last_seq,
            "reason": self.reason,
            "found_by": self.found_by,
            "found_us": self.found_us,
            "path": self.path,
            "offset": self.offset,
            "saved": self.saved,
            "identities": [list(i) for i in self.identities],
            "exact": self.exact,
            "window": list(self.window),
        }

    @classmethod
    def from_meta(cls, body: bytes, first_seq: int, last_seq: int, journal: int) -> Fence:
        """The fence a run of placeholders ``first_seq..last_seq`` stands for; its
        description from the first one's ``body`` (a description that cannot be read
        leaves the fence with what the placeholders themselves say)."""
        fence = cls(first_seq, last_seq, journal, "damaged", "startup", 0, "")
        try:
            meta = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            meta = {}
        if not isinstance(meta, dict) or meta.get("first") != first_seq:
            return fence
        fence.reason = str(meta.get("reason") or fence.reason)
        fence.found_by = str(meta.get("found_by") or fence.found_by)
        fence.found_us = _int(meta.get("found_us"))
        fence.path = str(meta.get("path") or "")
        fence.offset = _int(meta.get("offset"), -1)
        saved = meta.get("saved")
        fence.saved = saved if isinstance(saved, str) else None
        ids = meta.get("identities")
        if isinstance(ids, list):
            fence.identities = [
                (int(i[0]), int(i[1]), int(i[2]))
                for i in ids
                if isinstance(i, list) and len(i) == 3 and all(isinstance(x, int) for x in i)
            ]
        fence.exact = bool(meta.get("exact")) and meta.get("last") == last_seq
        window = meta.get("window")
        if isinstance(window, list) and len(window) == 2:
            hi = window[1]
            fence.window = (_int(window[0]), hi if isinstance(hi, int) else None)
        return fence

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (the admin API, events)."""
        return {
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "records": self.records,
            "journal": self.journal,
            "reason": self.reason,
            "found_by": self.found_by,
            "found_us": self.found_us,
            "path": self.path,
            "offset": self.offset,
            "saved": self.saved,
            "publishers": [
                {"pub_hash": h, "first_pub_seq": lo, "last_pub_seq": hi}
                for h, lo, hi in self.identities
            ],
            "exact": self.exact,
            "window_us": list(self.window),
            "repair": self.repair,
        }


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def placeholders(fence: Fence, timestamp_us: int, *, released: bool = False) -> list[bytes]:
    """The placeholder records of a fence, one per seq; the first carries its description.

    Args:
        fence: the fence.
        timestamp_us: the time they carry (the intact record before them: a journal's time
            index stays as it was).
        released: mark them released (readers pass over them).
    """
    flags = FLAG_RELEASED if released else 0
    lost = RecordKind.LOST
    body = orjson.dumps(fence.meta())
    out = [encode(fence.first_seq, timestamp_us, 0, 0, "", "", lost, (), flags, body)]
    out.extend(
        encode(seq, timestamp_us, 0, 0, "", "", lost, (), flags, b"")
        for seq in range(fence.first_seq + 1, fence.last_seq + 1)
    )
    return out


def placeholder_size() -> int:
    """Bytes of a placeholder after the first (what a fence of n records costs, roughly)."""
    return len(encode(1, 0, 0, 0, "", "", RecordKind.LOST, (), 0, b""))


class FenceTable:
    """The log's fences, by first seq (event loop only)."""

    __slots__ = ("_firsts", "_items")

    def __init__(self) -> None:
        self._items: list[Fence] = []
        self._firsts: list[int] = []

    def __bool__(self) -> bool:
        return bool(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Fence]:
        return iter(list(self._items))

    def add(self, fence: Fence) -> None:
        """Add a fence (one starting at the same seq is replaced)."""
        self.remove(fence.first_seq)
        i = bisect.bisect_left(self._firsts, fence.first_seq)
        self._items.insert(i, fence)
        self._firsts.insert(i, fence.first_seq)

    def remove(self, first_seq: int) -> Fence | None:
        """Remove the fence starting at ``first_seq`` (repaired or released)."""
        i = bisect.bisect_left(self._firsts, first_seq)
        if i < len(self._firsts) and self._firsts[i] == first_seq:
            del self._firsts[i]
            return self._items.pop(i)
        return None

    def covering(self, seq: int) -> Fence | None:
        """The fence that holds ``seq``, if any."""
        i = bisect.bisect_right(self._firsts, seq) - 1
        if i >= 0 and self._items[i].last_seq >= seq:
            return self._items[i]
        return None

    def next_from(self, seq: int) -> Fence | None:
        """The first fence that holds ``seq`` or starts after it."""
        fence = self.covering(seq)
        if fence is not None:
            return fence
        i = bisect.bisect_right(self._firsts, seq)
        return self._items[i] if i < len(self._items) else None
