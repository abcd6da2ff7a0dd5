"""The records a destination was sent and has not acknowledged yet, kept a run at a time.

A source needs two facts about them: the first one's seq (its settled seq is just below it)
and its time (how many seconds the destination is behind). Acks come every millisecond
or so and cover whole batches; keeping one ``(seq, timestamp)`` pair per record meant a
Python-level append and pop for every replicated message on the source's hot path. Here
a run costs one append, an ack pops whole runs and bisects into the one it ends in.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Sequence

__all__ = ["InFlight"]


class InFlight:
    """Sent, unacknowledged records in seq order, as runs of ``(seqs, timestamps_us)``.

    Runs are added in increasing seq order (a run's seqs ascend; they need not be
    contiguous: records a route skipped are absent).
    """

    __slots__ = ("_head", "_runs", "count")

    def __init__(self) -> None:
        self._runs: deque[tuple[Sequence[int], Sequence[int]]] = deque()
        #: index of the first unacknowledged record in the first run
        self._head = 0
        #: records held
        self.count = 0

    def __bool__(self) -> bool:
        return self.count > 0

    def __len__(self) -> int:
        return self.count

    def add(self, seqs: Sequence[int], timestamps_us: Sequence[int]) -> None:
        """Records sent (seqs ascending, after every record held)."""
        if seqs:
            self._runs.append((seqs, timestamps_us))
            self.count += len(seqs)

    def first(self) -> tuple[int, int] | None:
        """``(seq, timestamp_us)`` of the oldest record held, None when none is."""
        if not self.count:
            return None
        seqs, stamps = self._runs[0]
        return seqs[self._head], stamps[self._head]

    def ack(self, position: int) -> None:
        """Forget every record up to seq ``position``."""
        runs = self._runs
        while runs:
            seqs, _ = runs[0]
            if seqs[-1] <= position:
                runs.popleft()
                self.count -= len(seqs) - self._head
                self._head = 0
                continue
            if seqs[self._head] <= position:
                head = bisect.bisect_right(seqs, position, self._head)
                self.count -= head - self._head
                self._head = head
            return

    def drop_newest(self, count: int) -> None:
        """Forget the ``count`` records added last (a batch packed for a link that ended
        before it was sent)."""
        runs = self._runs
        while count > 0 and runs:
            seqs, stamps = runs[-1]
            held = len(seqs) - (self._head if len(runs) == 1 else 0)
            if held <= count:
                runs.pop()
                self.count -= held
                count -= held
                if not runs:
                    self._head = 0
                continue
            keep = len(seqs) - count
            runs[-1] = (seqs[:keep], stamps[:keep])
            self.count -= count
            count = 0

    def clear(self) -> None:
        """Forget everything (the link ended: all of it is sent again)."""
        self._runs.clear()
        self._head = 0
        self.count = 0

    def pairs(self) -> list[tuple[int, int]]:
        """Every ``(seq, timestamp_us)`` held, in order (tests and diagnostics)."""
        out: list[tuple[int, int]] = []
        head = self._head
        for seqs, stamps in self._runs:
            out.extend(zip(seqs[head:], stamps[head:], strict=True))
            head = 0
        return out
