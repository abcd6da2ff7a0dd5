"""The publisher table of a log: each publisher's highest sequence, and what it lacks.

Per ``pub_hash`` the log keeps the highest ``pub_seq`` appended and the seq of that record
(``publisher_last``, the logon ack, duplicate detection, ``clients.ack``); the dict is
shared with the pending appends and the locator, which read it. With gap tracking (an
instance that replicates), it also keeps the sequences each publisher lacks below its
highest (server/txlog/publishers/gaps.py), so a message arriving late by another replication route
fills its gap instead of being taken for a duplicate: such a *late* record is appended
below the highest (flag ``FLAG_LATE``) and leaves the highest alone.

Owned by the event loop; :meth:`Publishers.rebuild_gaps` reads index blocks in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from spool.server.bookmarks import format_bookmark
from spool.server.txlog.errors import PublisherSequenceRegression
from spool.server.txlog.format.record import is_publisher_key, late_key
from spool.server.txlog.publishers.gaps import Interval, PublisherGaps
from spool.server.txlog.publishers.holdings import build_gaps, plan_held, read_held, resync_start
from spool.server.txlog.storage.journal import Journal

__all__ = ["Holdings", "Publishers"]

#: what a log holds per publisher: ``pub_hash -> (highest, gaps)``
Holdings = dict[int, tuple[int, list[Interval]]]


class Publishers:
    """The publisher table (and gap table) of one log.

    Args:
        track_gaps: keep each publisher's gaps.

    Attributes:
        table: ``pub_hash -> (highest pub_seq, its seq)``, shared with the log's parts.
    """

    __slots__ = ("_gaps", "table")

    def __init__(self, track_gaps: bool) -> None:
        self.table: dict[int, tuple[int, int]] = {}
        self._gaps: PublisherGaps | None = PublisherGaps() if track_gaps else None

    @property
    def tracks_gaps(self) -> bool:
        return self._gaps is not None

    def last(self, pub_hash: int) -> int:
        """Highest ``pub_seq`` appended by that publisher (0 if none)."""
        last = self.table.get(pub_hash)
        return last[0] if last is not None else 0

    def last_bookmark(self, pub_hash: int) -> str | None:
        """Bookmark of that publisher's last message, if any."""
        last = self.table.get(pub_hash)
        return format_bookmark(pub_hash, last[0]) if last is not None else None

    def missing(self, pub_hash: int, pub_seq: int) -> bool:
        """Whether ``pub_seq`` is a gap of the publisher (False without gap tracking)."""
        gaps = self._gaps
        return gaps is not None and gaps.missing(pub_hash, pub_seq)

    def check(self, pub_hash: int, pub_seq: int, *, late: bool) -> None:
        """Refuse a sequence the log cannot take.

        Raises:
            PublisherSequenceRegression: not above the publisher's highest (or, ``late``,
                not one of its gaps).
        """
        if late:
            if not pub_hash or not self.missing(pub_hash, pub_seq):
                raise PublisherSequenceRegression(pub_hash, pub_seq, self.last(pub_hash))
        elif pub_hash:
            prev = self.table.get(pub_hash)
            if prev is not None and pub_seq <= prev[0]:
                raise PublisherSequenceRegression(pub_hash, pub_seq, prev[0])

    def placed(self, pub_hash: int, pub_seqs: Sequence[int], seq: int, *, late: bool) -> None:
        """``pub_seqs`` were placed, the last one at ``seq`` (one, when ``late``)."""
        if not pub_hash or not pub_seqs:
            return
        gaps = self._gaps
        if late:
            if gaps is not None:
                gaps.fill(pub_hash, pub_seqs[0])
            return
        if gaps is not None:
            before = self.table.get(pub_hash)
            last = before[0] if before is not None else 0
            if pub_seqs[0] != last + 1 or pub_seqs[-1] != last + len(pub_seqs):
                gaps.advanced(pub_hash, last, pub_seqs)
        self.table[pub_hash] = (pub_seqs[-1], seq)

    def restored(self, pub_hash: int, pub_seq: int, seq: int) -> None:
        """A record a repair wrote back (in place of a fence): the log holds it again.
        Its gap, if one was open, is filled; above the highest, it is the highest."""
        if not pub_hash:
            return
        if self._gaps is not None:
            self._gaps.fill(pub_hash, pub_seq)
        prev = self.table.get(pub_hash)
        if prev is None or pub_seq > prev[0]:
            if self._gaps is not None and prev is not None and pub_seq > prev[0] + 1:
                self._gaps.advanced(pub_hash, prev[0], [pub_seq])
            self.table[pub_hash] = (pub_seq, seq)

    def lost(self, pub_hash: int, lo: int, hi: int) -> None:
        """Sequences ``lo..hi`` of a publisher are fenced: the log does not hold them any
        more (they become gaps below its highest; above it, nothing is held anyway)."""
        prev = self.table.get(pub_hash)
        if self._gaps is not None and prev is not None:
            self._gaps.add(pub_hash, lo, min(hi, prev[0]))

    def skip(self, pub_hash: int, count: int) -> None:
        """Move a publisher's highest sequence ``count`` past what the log holds, the
        sequences passed over becoming a gap: records of it that this log lost (a cut
        tail) may exist elsewhere under those sequences and come back late, and its next
        record must not take one of their bookmarks. Only with gap tracking (an instance
        that replicates: without it, nothing of it exists elsewhere)."""
        gaps = self._gaps
        if gaps is None or count <= 0 or not pub_hash:
            return
        last, seq = self.table.get(pub_hash, (0, 0))
        gaps.open_gap(pub_hash, last + 1, last + count)
        self.table[pub_hash] = (last + count, seq)

    def holds(self, pub_hash: int, pub_seq: int) -> bool:
        """Whether the log holds this bookmark, as the table knows it (up to the highest,
        not in a gap; without gap tracking: up to the highest)."""
        prev = self.table.get(pub_hash)
        if prev is None or pub_seq > prev[0]:
            return False
        return not self.missing(pub_hash, pub_seq)

    def holdings(self) -> Holdings:
        """What the log holds per publisher: every sequence from 1 to the highest but the
        gaps (as far as the gap table knows: server/txlog/publishers/gaps.py says what it forgets)."""
        gaps = self._gaps
        return {
            h: (last, gaps.gaps(h) if gaps is not None else [])
            for h, (last, _seq) in self.table.items()
        }

    async def rebuild_gaps(self, journals: Sequence[Journal], *, own: int = 0) -> None:
        """At open: the gap table from the journals' indexes (server/txlog/publishers/holdings.py),
        and each publisher's highest over both its index keys: a late record can be its
        highest held sequence (its highest had moved past what the log held, as the
        instance's own identity's does after a lost tail, and the late record filled
        that gap); the table read from the indexes has it under the late key only. The
        instance's own identity (``own``) may have nothing but late records here (its
        records lost with a tail, one sent back): it is looked up by its late key too.

        A highest above everything the journals hold of a publisher (``clients.ack``
        saved the own identity's highest after a :meth:`skip`, or named a record that a
        cut tail took) is kept, the sequences above what is held being a gap: they are
        not here. Only while the record the entry names is still in the log (or it names
        none): past a removed journal, what lay above is not known and counts as held.
        """
        if self._gaps is None:
            return
        table = self.table
        for pub in {*table, own} if own else list(table):
            late = table.get(late_key(pub))
            if late is not None and late[0] > table.get(pub, (0, 0))[0]:
                table[pub] = late
        plan = plan_held(journals)
        held = await asyncio.to_thread(read_held, plan) if plan.reads else plan.held
        removed = bool(journals) and journals[0].base > 1
        gaps = self._gaps = build_gaps(held, list(table), removed_before=removed)
        first = journals[0].base if journals else 1
        top = _highest_held(journals)
        for pub, (last, seq) in table.items():
            if seq and seq < first:
                continue
            held_top = max(top.get(pub, 0), top.get(late_key(pub), 0))
            if held_top < last:
                gaps.open_gap(pub, held_top + 1, last)

    def resync_start(self, journals: Iterable[Journal], holdings: Holdings) -> int | None:
        """The first seq of the oldest journal holding something ``holdings`` lack."""
        return resync_start(journals, self.table, holdings)


def _highest_held(journals: Iterable[Journal]) -> dict[int, int]:
    """Per publisher key (its own or its late key), the highest sequence the journals
    hold (their index summaries)."""
    top: dict[int, int] = {}
    for journal in journals:
        for p in journal.index.publishers():
            if is_publisher_key(p.pub_hash) and p.max_pub_seq > top.get(p.pub_hash, 0):
                top[p.pub_hash] = p.max_pub_seq
    return top
