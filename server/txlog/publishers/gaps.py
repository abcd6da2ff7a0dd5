"""Which sequences of each publisher the log is missing below the highest it holds.

Replication makes a publisher's messages arrive from several instances, and not always in
the publisher's order: a publisher that fails over from A to B (A had acknowledged 100,
then died before replicating it) publishes 101 at B; C then receives B's 101 before A's
100, which arrives once A is back. "A sequence at or below the highest seen is a
duplicate" would drop 100 for ever. The rule here is exact membership: a bookmark is a
duplicate when the log already holds it, and the log holds every sequence of a publisher
up to its highest except the *gaps* this table keeps. So 101 opens the gap ``[100, 100]``
and A's 100 closes it (it is appended as a *late* record, server/txlog/format/record.py
``FLAG_LATE``).

A gap opens whenever a publisher's next sequence jumps (its first message here can be any
sequence: everything below it is a gap). A gap closes, or splits, when a late record
fills one of its sequences. The table is bounded per publisher (:data:`MAX_GAPS`
intervals): past the bound the oldest (lowest) gap is forgotten, which makes those
sequences count as held; a filtered replication stream opens a gap per message it skips,
and those are never filled, so forgetting the oldest costs nothing in the usual case.
What is forgotten is reported (:attr:`PublisherGaps.forgotten`).

Pure data, owned by the event loop; the log rebuilds it at start-up from the journals
(:meth:`PublisherGaps.rebuild_from`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

__all__ = ["MAX_GAPS", "Interval", "PublisherGaps"]

#: most gap intervals kept per publisher (the oldest go first)
MAX_GAPS: Final = 256

#: an inclusive interval of publisher sequences ``(lo, hi)``
Interval = tuple[int, int]


class PublisherGaps:
    """Missing sequences below each publisher's highest, as sorted disjoint intervals.

    Args:
        max_gaps: most intervals kept per publisher.

    Attributes:
        forgotten: intervals dropped because a publisher had too many.
    """

    __slots__ = ("_his", "_los", "forgotten", "max_gaps")

    def __init__(self, max_gaps: int = MAX_GAPS) -> None:
        self.max_gaps = max_gaps
        # per publisher: interval starts and ends, sorted, disjoint, not adjacent
        self._los: dict[int, list[int]] = {}
        self._his: dict[int, list[int]] = {}
        self.forgotten = 0

    def __len__(self) -> int:
        """Publishers with at least one gap."""
        return len(self._los)

    def publishers(self) -> Iterator[int]:
        """The publishers with gaps."""
        return iter(list(self._los))

    def gaps(self, pub_hash: int) -> list[Interval]:
        """The gap intervals of a publisher, lowest first."""
        los = self._los.get(pub_hash)
        if not los:
            return []
        return list(zip(los, self._his[pub_hash], strict=True))

    def missing(self, pub_hash: int, pub_seq: int) -> bool:
        """Whether ``pub_seq`` falls in a gap of the publisher."""
        los = self._los.get(pub_hash)
        if not los:
            return False
        i = bisect.bisect_right(los, pub_seq) - 1
        return i >= 0 and pub_seq <= self._his[pub_hash][i]

    def advanced(self, pub_hash: int, last: int, seqs: Sequence[int]) -> None:
        """Sequences ``seqs`` (increasing, all above ``last``) were appended in order.

        Args:
            pub_hash: the publisher.
            last: its highest sequence before them (0: none yet).
            seqs: the appended sequences.
        """
        prev = last
        for s in seqs:
            if s > prev + 1:
                self._open(pub_hash, prev + 1, s - 1)
            prev = s

    def open_gap(self, pub_hash: int, lo: int, hi: int) -> None:
        """Record ``[lo, hi]`` as missing (above every gap already kept)."""
        if lo <= hi:
            self._open(pub_hash, lo, hi)

    def add(self, pub_hash: int, lo: int, hi: int) -> None:
        """Record ``[lo, hi]`` as missing, anywhere below the highest: records the log
        held there were lost (fenced, server/txlog/damage/fences.py); merged with the gaps it
        touches."""
        if lo > hi:
            return
        los = self._los.get(pub_hash)
        if not los:
            self._open(pub_hash, lo, hi)
            return
        his = self._his[pub_hash]
        pairs = [*zip(los, his, strict=True), (lo, hi)]
        pairs.sort()
        merged: list[list[int]] = []
        for a, b in pairs:
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        while len(merged) > self.max_gaps:
            merged.pop(0)
            self.forgotten += 1
        self._los[pub_hash] = [a for a, _ in merged]
        self._his[pub_hash] = [b for _, b in merged]

    def _open(self, pub_hash: int, lo: int, hi: int) -> None:
        los = self._los.get(pub_hash)
        if los is None:
            self._los[pub_hash] = [lo]
            self._his[pub_hash] = [hi]
            return
        his = self._his[pub_hash]
        if lo <= his[-1] + 1:
            # adjacent to or overlapping the newest gap (a rebuild may report it twice)
            his[-1] = max(his[-1], hi)
            return
        los.append(lo)
        his.append(hi)
        if len(los) > self.max_gaps:
            del los[0]
            del his[0]
            self.forgotten += 1

    def fill(self, pub_hash: int, pub_seq: int) -> bool:
        """``pub_seq`` arrived late: remove it from its gap (splitting the gap).

        Returns:
            Whether it was missing.
        """
        los = self._los.get(pub_hash)
        if not los:
            return False
        his = self._his[pub_hash]
        i = bisect.bisect_right(los, pub_seq) - 1
        if i < 0 or pub_seq > his[i]:
            return False
        lo, hi = los[i], his[i]
        if lo == hi:
            del los[i]
            del his[i]
            if not los:
                del self._los[pub_hash]
                del self._his[pub_hash]
        elif pub_seq == lo:
            los[i] = lo + 1
        elif pub_seq == hi:
            his[i] = hi - 1
        else:
            his[i] = pub_seq - 1
            los.insert(i + 1, pub_seq + 1)
            his.insert(i + 1, hi)
            if len(los) > self.max_gaps:
                del los[0]
                del his[0]
                self.forgotten += 1
        return True

    def forget(self, pub_hash: int) -> None:
        """Drop every gap of a publisher."""
        self._los.pop(pub_hash, None)
        self._his.pop(pub_hash, None)

    def clear(self) -> None:
        self._los.clear()
        self._his.clear()

    @classmethod
    def rebuild_from(
        cls, held: Iterable[tuple[int, Iterable[Interval]]], max_gaps: int = MAX_GAPS
    ) -> PublisherGaps:
        """The gaps of publishers from the sequences the log holds, as intervals.

        Args:
            held: per publisher, inclusive intervals of sequences the log holds (any
                order; overlaps and repeats allowed). Everything from 1 to the highest
                held that no interval covers is a gap.
        """
        table = cls(max_gaps)
        for pub_hash, intervals in held:
            prev = 0
            for lo, hi in sorted(intervals):
                if lo > prev + 1:
                    table._open(pub_hash, prev + 1, lo - 1)
                if hi > prev:
                    prev = hi
        return table
