"""Replay pacing: the ``rate`` and ``rate_max_gap`` options (pure).

:class:`RatePacer` only decides how many records may go now or how long to wait; the
cursor does the waiting on its injected clock, so pacing is tested without sleeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from spool.server.clock import TIME_EPSILON
from spool.server.protocol.options import Rate
from spool.server.txlog.format.record import Record

#: Token buckets hold this many seconds of rate, so fast rates need not sleep per message.
BURST_WINDOW: Final = 0.01
#: A time-scaled replay that fell behind by more than this re-anchors instead of bursting.
MAX_LAG: Final = 0.1


class RatePacer:
    """Decides how many of the next records may go now, or how long to wait (pure).

    - ``msgs``: a token bucket of messages (capacity ``max(1, N * BURST_WINDOW)``), charged
      for the messages the sink actually delivered, so a filter does not slow the pace.
    - ``bytes``: a token bucket of body bytes that may go into debt, so a message larger
      than the bucket still goes, and the next waits until the debt is paid. When only part
      of a chunk matched, the largest bodies are charged: the rate is never exceeded.
    - ``multiplier``: each record is due ``gap / N`` after the previous one, where ``gap``
      is the difference of their original timestamps; ``rate_max_gap`` caps one wait. A
      replay more than :data:`MAX_LAG` behind schedule (slow consumer) re-anchors to now
      instead of bursting to catch up.

    Use: ``count, wait = take(records, start, now)``; if ``count`` deliver
    ``records[start:start+k]`` for some ``k <= count`` then ``charge(records, start, k,
    delivered)``; else sleep ``wait`` and ask again.
    """

    def __init__(self, rate: Rate, max_gap: float | None = None) -> None:
        if rate.value <= 0:
            raise ValueError("a rate must be positive")
        self.rate = rate
        self._value = rate.value
        self._max_gap = max_gap
        burst = rate.value * BURST_WINDOW
        self._capacity = max(1.0, burst) if rate.kind == "msgs" else burst
        # A message bucket starts full; a byte bucket starts at a zero balance (the first
        # message goes at once, the next when its debt is paid).
        self._tokens = self._capacity if rate.kind == "msgs" else 0.0
        self._updated: float | None = None
        self._prev_ts: int | None = None
        self._prev_due = 0.0
        self._head: tuple[int, float] | None = None
        self._planned: list[float] = []

    def take(self, records: Sequence[Record], start: int, now: float) -> tuple[int, float]:
        """(how many of ``records[start:]`` may go now, seconds to wait when none may)."""
        if start >= len(records):
            return 0, 0.0
        if self.rate.kind == "multiplier":
            return self._take_timeline(records, start, now)
        self._refill(now)
        if self.rate.kind == "msgs":
            if self._tokens + TIME_EPSILON >= 1.0:
                return min(len(records) - start, int(self._tokens + TIME_EPSILON)), 0.0
            return 0, (1.0 - self._tokens) / self._value
        if self._tokens + TIME_EPSILON < 0:
            return 0, -self._tokens / self._value
        count, total = 0, 0
        for index in range(start, len(records)):
            total += len(records[index].body)
            if count and total > self._tokens:
                break
            count += 1
        return count, 0.0

    def charge(self, records: Sequence[Record], start: int, count: int, delivered: int) -> None:
        """Account for ``records[start:start+count]`` handed to the sink, of which
        ``delivered`` were sent."""
        if count <= 0:
            return
        kind = self.rate.kind
        if kind == "msgs":
            self._tokens -= delivered
        elif kind == "bytes":
            sizes = [len(records[i].body) for i in range(start, start + count)]
            if delivered >= count:
                self._tokens -= sum(sizes)
            elif delivered > 0:
                self._tokens -= sum(sorted(sizes, reverse=True)[:delivered])
        else:
            self._prev_ts = records[start + count - 1].timestamp_us
            self._prev_due = self._planned[count - 1]
            self._head = None

    def _refill(self, now: float) -> None:
        if self._updated is not None and now > self._updated:
            self._tokens = min(self._capacity, self._tokens + (now - self._updated) * self._value)
        if self._updated is None or now > self._updated:
            self._updated = now

    def _take_timeline(
        self, records: Sequence[Record], start: int, now: float
    ) -> tuple[int, float]:
        planned: list[float] = []
        prev_ts, prev_due = self._prev_ts, self._prev_due
        for index in range(start, len(records)):
            rec = records[index]
            if index == start and self._head is not None and self._head[0] == rec.seq:
                due = self._head[1]
            elif prev_ts is None:
                due = now
            else:
                gap = max(0, rec.timestamp_us - prev_ts) / 1e6 / self._value
                if self._max_gap is not None:
                    gap = min(gap, self._max_gap)
                due = max(prev_due, now - MAX_LAG) + gap
            if due > now + TIME_EPSILON:
                if not planned:
                    self._head = (rec.seq, due)
                    return 0, due - now
                break
            planned.append(due)
            prev_ts, prev_due = rec.timestamp_us, due
        self._planned = planned
        return len(planned), 0.0
