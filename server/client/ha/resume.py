"""Where one bookmark subscription resumes, and which redelivered messages to drop (pure).

:class:`ResumeState` follows one subscription's messages by bookmark (``PUBHASH|PUBSEQ|``,
docs/protocol.md "Bookmarks"): each is *received* (handed to the application) and later
*discarded* (the application is done with it). From that it keeps the recovery point, per
publisher the highest sequence discarded with everything below it, and which sequences it
received (the highest and the gaps below it, at most ``max_gaps``, :data:`MAX_GAPS` by
default).
:meth:`resume_bookmark` is MOST_RECENT: the recovery point plus one bookmark per
publisher; :meth:`receive` drops what the replay brings again, by exact membership as the
broker's log does; :meth:`reloaded` accepts once the redelivery of what a dead process
received but did not discard. See docs/ha-client.md "Bookmark subscriptions".
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import Any, Final

#: docs/protocol.md: replay from the start of the log.
EPOCH: Final = "0"
#: docs/protocol.md: live messages only.
NOW: Final = "0|1|"
#: resume from the bookmark store (EPOCH when it has nothing for the subscription): a
#: client-side name, resolved by the HA client from its store; brokers refuse it
MOST_RECENT: Final = "recent"

_LOADED: Final = 0  # received before a restart, not discarded: its redelivery is accepted
_DELIVERED: Final = 1
_DISCARDED: Final = 2
#: gap intervals kept per publisher by default. A gap stays open for each message of a
#: publisher still to come below its highest received: a late record after a failover, or
#: a delayed message (docs/protocol.md "Delayed delivery") while later ones of its
#: publisher are delivered before it; a publisher with thousands pending holds thousands.
#: Each costs about 150 bytes (some 10 MB for a publisher at the bound). The bound only
#: guards against unbounded growth: past it the oldest gaps are forgotten and their
#: sequences count as received, so a message still to come in one is dropped as a
#: duplicate.
MAX_GAPS: Final = 65_536


def _low(gap: list[int]) -> int:
    return gap[0]


def parse_bookmark(bookmark: str) -> tuple[str, int] | None:
    """``(publisher hash, sequence)`` of ``PUBHASH|PUBSEQ|``; None for anything else."""
    parts = bookmark.split("|")
    if len(parts) != 3 or parts[2] or not parts[0] or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


class _Entry:
    __slots__ = ("bookmark", "pub", "seq", "state")

    def __init__(self, bookmark: str, pub: str, seq: int, state: int) -> None:
        self.bookmark = bookmark
        self.pub = pub
        self.seq = seq
        self.state = state


class ResumeState:
    """One subscription's received and discarded messages (see the module docstring).

    Args:
        start: the bookmark the subscription started from (where it resumes until a
            message is discarded).
        max_gaps: gap intervals kept per publisher (:data:`MAX_GAPS`); past it the
            oldest are forgotten.
    """

    def __init__(self, start: str = EPOCH, *, max_gaps: int = MAX_GAPS) -> None:
        if max_gaps < 1:
            raise ValueError(f"max_gaps must be at least 1, not {max_gaps}")
        self.start = start
        self.max_gaps = max_gaps
        self.recovery: str | None = None
        self._contig: dict[str, int] = {}
        self._above: dict[str, set[int]] = {}
        self._order: deque[_Entry] = deque()
        self._index: dict[str, _Entry] = {}
        self._by_pub: dict[str, deque[_Entry]] = {}
        #: per publisher: the highest sequence received, and the sorted disjoint
        #: ``[low, high]`` intervals below it never received
        self._high: dict[str, int] = {}
        self._gaps: dict[str, list[list[int]]] = {}

    # -- the stream ----------------------------------------------------------------------

    def is_duplicate(self, bookmark: str) -> bool:
        """Whether a message with ``bookmark`` was already received (or discarded)."""
        e = self._index.get(bookmark)
        if e is not None:
            return e.state != _LOADED
        parsed = parse_bookmark(bookmark)
        if parsed is None:
            return False
        return self._seen(*parsed)

    def is_discarded(self, bookmark: str) -> bool:
        """Whether the application is done with the message with ``bookmark``."""
        e = self._index.get(bookmark)
        if e is not None:
            return e.state == _DISCARDED
        parsed = parse_bookmark(bookmark)
        if parsed is None:
            return False
        return self._seen(*parsed)  # received and out of the index: discarded

    def receive(self, bookmark: str) -> bool:
        """Note that the message with ``bookmark`` reached the application; False when it
        is a duplicate to drop."""
        e = self._index.get(bookmark)
        if e is not None:
            if e.state != _LOADED:
                return False
            e.state = _DELIVERED
            return True
        parsed = parse_bookmark(bookmark)
        if parsed is None:
            return True  # not a log bookmark: nothing to track
        pub, seq = parsed
        if self._seen(pub, seq):
            return False
        self._note(pub, seq)
        e = _Entry(bookmark, pub, seq, _DELIVERED)
        self._order.append(e)
        self._index[bookmark] = e
        self._by_pub.setdefault(pub, deque()).append(e)
        return True

    def _seen(self, pub: str, seq: int) -> bool:
        """Whether ``pub``'s ``seq`` was received before (not in the index any more)."""
        high = self._high.get(pub)
        if high is None or seq > high:
            return False
        gaps = self._gaps.get(pub)
        if not gaps:
            return True
        i = bisect_right(gaps, seq, key=_low) - 1
        return i < 0 or gaps[i][1] < seq

    def _note(self, pub: str, seq: int) -> None:
        """``pub``'s ``seq`` (not received before) is received now."""
        high = self._high.get(pub)
        if high is None or seq > high:
            below = 0 if high is None else high  # a first message: everything below is a gap
            if seq > below + 1:
                gaps = self._gaps.setdefault(pub, [])
                gaps.append([below + 1, seq - 1])
                if len(gaps) > self.max_gaps:
                    del gaps[0]
            self._high[pub] = seq
            return
        gaps = self._gaps[pub]  # _seen said seq lies in a gap
        i = bisect_right(gaps, seq, key=_low) - 1
        low, up = gaps[i]
        if low == up:
            del gaps[i]
        elif seq == low:
            gaps[i][0] = seq + 1
        elif seq == up:
            gaps[i][1] = seq - 1
        else:
            gaps[i][1] = seq - 1
            gaps.insert(i + 1, [seq + 1, up])
            if len(gaps) > self.max_gaps:
                del gaps[0]

    def discard(self, bookmark: str) -> bool:
        """The application is done with ``bookmark``; False if unknown or already done."""
        e = self._index.get(bookmark)
        if e is None or e.state == _DISCARDED:
            return False
        e.state = _DISCARDED
        pub = e.pub
        queue = self._by_pub[pub]
        if queue[0] is e:  # in order for its publisher (the usual case): no set to keep
            above = self._above.get(pub)
            contig = self._contig.get(pub, -1)
            while queue and queue[0].state == _DISCARDED:
                done = queue.popleft()
                if done.seq > contig:
                    contig = done.seq
                if above:
                    above.discard(done.seq)
            self._contig[pub] = contig
            if not queue:
                del self._by_pub[pub]
        else:
            self._above.setdefault(pub, set()).add(e.seq)
        order = self._order
        index = self._index
        while order and order[0].state == _DISCARDED:
            done = order.popleft()
            self.recovery = done.bookmark
            del index[done.bookmark]
        return True

    def persisted(self, bookmark: str) -> bool:
        """The broker's durable position for the subscription (it follows every message
        delivered before it): the recovery point when nothing is outstanding."""
        if self._order or not bookmark or bookmark == self.recovery:
            return False
        self.recovery = bookmark
        return True

    # -- answers -------------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Messages received (or expected again) and not discarded yet."""
        return sum(1 for e in self._order if e.state != _DISCARDED)

    def resume_bookmark(self) -> str:
        """MOST_RECENT: where a (re)subscription starts (see the module docstring)."""
        if self.recovery is None:
            return self.start
        points = [self.recovery]
        for pub, seq in self._contig.items():
            bm = f"{pub}|{seq}|"
            if bm != self.recovery:
                points.append(bm)
        return ",".join(points)

    def reloaded(self) -> None:
        """After a restart: what was received but not discarded is expected again."""
        for e in self._order:
            if e.state == _DELIVERED:
                e.state = _LOADED

    # -- snapshot (the file store's compaction) -----------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able copy of the state (received entries become expected again)."""
        return {
            "start": self.start,
            "recovery": self.recovery,
            "contig": self._contig,
            "above": {p: sorted(s) for p, s in self._above.items() if s},
            "order": [[e.bookmark, e.state == _DISCARDED] for e in self._order],
            "high": self._high,
            "gaps": {p: g for p, g in self._gaps.items() if g},
        }

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any], *, max_gaps: int = MAX_GAPS) -> ResumeState:
        """The state :meth:`snapshot` wrote; a publisher with more gaps than ``max_gaps``
        keeps the newest ``max_gaps`` (the oldest forgotten, as when they open)."""
        state = cls(str(snap.get("start", EPOCH)), max_gaps=max_gaps)
        state.recovery = snap.get("recovery")
        state._contig = {str(p): int(s) for p, s in snap.get("contig", {}).items()}
        state._above = {str(p): set(s) for p, s in snap.get("above", {}).items()}
        state._high = {str(p): int(s) for p, s in snap.get("high", {}).items()}
        state._gaps = {
            str(p): [[int(lo), int(up)] for lo, up in g[-max_gaps:]]
            for p, g in snap.get("gaps", {}).items()
        }
        for bookmark, discarded in snap.get("order", []):
            parsed = parse_bookmark(bookmark)
            if parsed is None:
                continue
            e = _Entry(bookmark, parsed[0], parsed[1], _DISCARDED if discarded else _LOADED)
            state._order.append(e)
            state._index[bookmark] = e
            state._by_pub.setdefault(e.pub, deque()).append(e)
        if "high" not in snap:  # written before gaps were kept
            state._gaps_from_discards()
        # a publisher's discarded head was folded into its contiguous point when written:
        # left in its queue it would hold every later discard of that publisher
        for pub, queue in list(state._by_pub.items()):
            while queue and queue[0].state == _DISCARDED:
                done = queue.popleft()
                if done.seq > state._contig.get(pub, -1):
                    state._contig[pub] = done.seq
                state._above.get(pub, set()).discard(done.seq)
            if not queue:
                del state._by_pub[pub]
        return state

    def _gaps_from_discards(self) -> None:
        """The received sequences as best known from a snapshot without them: every
        sequence up to the contiguous point, the out-of-order discards, the outstanding
        entries; the rest above the contiguous point are gaps."""
        for pub in {*self._contig, *self._above, *self._by_pub}:
            held = set(self._above.get(pub, ())) | {e.seq for e in self._by_pub.get(pub, ())}
            contig = self._contig.get(pub, -1)
            high = max([contig, *held])
            if high < 0:
                continue
            self._high[pub] = high
            gaps: list[list[int]] = []
            prev = max(contig, 0)
            for seq in sorted(x for x in held if x > contig):
                if seq > prev + 1:
                    gaps.append([prev + 1, seq - 1])
                prev = seq
            if gaps:
                self._gaps[pub] = gaps[-self.max_gaps :]


__all__ = ["EPOCH", "MAX_GAPS", "MOST_RECENT", "NOW", "ResumeState", "parse_bookmark"]
