"""Benchmark of a replicated queue's 50 ms ownership tick.

One replicated queue on instance ``a`` holding ``N`` messages published on ``b`` (so owned
by ``b``), one consumer here with room: the situation of an instance whose consumers wait
for work owned elsewhere. What one timer tick costs is measured: the ownership pass of
:class:`~spool.server.queues.transfers.Transfers` (offline owners, transfer requests) plus the
dispatch the tick's kick runs (``QueueMachine.dispatch``), after a first tick that asked
for what was due. No request is answered (the owner is busy), which is the steady state
that would cost O(depth) per tick if the tick scanned the queue.

Metrics: ``tick_cpu_us_<n>`` (``time.process_time`` per tick, microseconds) for a queue
of 1,000 and 100,000 messages (quick: 1,000 and 20,000), and ``tick_cost_ratio`` (the
large over the small: ~1 when a tick costs what its due work costs, ~100 when it scans
the queue). Indicative on a loaded machine.
"""

from __future__ import annotations

import time

from spool.server.clock import VirtualClock
from spool.server.config.model import QueueConfig
from spool.server.queues.machine import Consumer
from spool.server.queues.stage import QueueRuntime
from spool.server.queues.transfers import Transfers

RUN = 1000
TICK_US = 50_000


class _Events:
    def emit(self, level: str, category: str, event: str, **fields: object) -> None:
        return None


def _queue(n: int) -> tuple[QueueRuntime, Transfers]:
    cfg = QueueConfig(name="work", underlying="work-in", max_backlog=10)
    q = QueueRuntime.build(cfg, VirtualClock(), "a", replicated=True)
    body = b'{"n":1}'
    for first in range(1, n + 1, RUN):
        k = min(RUN, n + 1 - first)
        seqs = list(range(first, first + k))
        q.admit("work-in", [body] * k, first, [0] * k, [7] * k, seqs, "b")
    q.machine.subscribe(Consumer("c/q", 10))
    transfers = Transfers([q], lambda *_: None, lambda _q: None, _Events(), VirtualClock())
    transfers.peers = lambda: ["b"]
    return q, transfers


def _tick_cpu_us(n: int, ticks: int) -> float:
    q, transfers = _queue(n)
    now = 10_000_000
    transfers.tick(now)  # asks for the first due messages
    q.machine.dispatch(now)
    q.outgoing.clear()
    start = time.process_time()
    for i in range(1, ticks + 1):
        t = now + i * TICK_US
        transfers.tick(t)
        q.machine.dispatch(t)
        q.outgoing.clear()
    return (time.process_time() - start) / ticks * 1e6


def run(quick: bool = False) -> dict[str, float]:
    small, large = (1_000, 20_000) if quick else (1_000, 100_000)
    ticks = 20 if quick else 50
    a = _tick_cpu_us(small, ticks)
    b = _tick_cpu_us(large, ticks)
    return {f"tick_cpu_us_{small}": a, f"tick_cpu_us_{large}": b, "tick_cost_ratio": b / a}


if __name__ == "__main__":
    print(run())
