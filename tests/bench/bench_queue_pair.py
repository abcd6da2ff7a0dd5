"""Benchmark of a replicated queue's own work per message on two instances.

``spool.queue.replicated.4consumers.100B`` is bound by the CPU of its two brokers on this
two-core machine, and about a third of each broker's thread is the queue itself: every
message enters both copies (its owner's and the other's), is delivered and acked on its
owner, and the ack is applied on the other copy. This measures that part alone, in one
process and without I/O, so a change to the queue's code shows in a number that does not
move with the machine's load as the end-to-end scenario's does.

Two :class:`~spool.server.queues.stage.QueueRuntime` copies ``a`` and ``b`` of one replicated
queue, two consumers of backlog 500 on each. Runs of 100 messages are published on ``a``
and ``b`` in turn; each run enters both copies (``admit``, as the publish pipeline and
the replication link hand them over); each copy then delivers what it may
(``dispatch``), its consumers ack what they got the round before
(``QueueMachine.ack``, ``Ownership.acked_many``, as server/queues/service.py does), and the acks reach the other copy as the
``QUEUE_ACK`` record the log would carry (``QueueRuntime.receive``). A backlog of
``BACKLOG`` messages is published first, as in the end-to-end run where publishers run
ahead of consumers.

Metric: ``cpu_us_per_msg`` (``time.process_time`` over the steady part, both copies,
per message published).
"""

from __future__ import annotations

import time

from spool.server.clock import VirtualClock
from spool.server.config.model import QueueConfig
from spool.server.queues.machine import Consumer, QueueDelivery
from spool.server.queues.records import encode_ack_bookmarks
from spool.server.queues.stage import QueueRuntime
from spool.server.txlog.format.record import RecordKind

RUN = 100
BACKLOG = 50_000
BODY = b'{"n":1,"pad":"' + b"x" * 80 + b'"}'


def _pair() -> tuple[list[QueueRuntime], list[list[Consumer]]]:
    cfg = QueueConfig(name="work", underlying="work-in", max_backlog=500)
    copies = [QueueRuntime.build(cfg, VirtualClock(), name, replicated=True) for name in "ab"]
    consumers = []
    for q in copies:
        cs = [Consumer(f"{q.instance}/c{i}", 500) for i in range(2)]
        for c in cs:
            q.machine.subscribe(c)
        consumers.append(cs)
    return copies, consumers


def _publish(copies: list[QueueRuntime], origin: int, pub_seq: int, seq: int, now: int) -> None:
    """One run published on ``copies[origin]`` enters both copies."""
    seqs = list(range(pub_seq, pub_seq + RUN))
    for q in copies:
        q.admit("work-in", [BODY] * RUN, seq, [now] * RUN, [1000 + origin] * RUN, seqs,
                copies[origin].instance)  # fmt: skip


def _ack(copies: list[QueueRuntime], i: int, delivered: list[QueueDelivery]) -> None:
    """Copy ``i``'s consumers ack ``delivered``; the acks reach the other copy."""
    q = copies[i]
    by_consumer: dict[Consumer, list[str]] = {}
    for d in delivered:
        by_consumer.setdefault(d.consumer, []).append(d.message.bookmark)
    gone: list[str] = []
    for consumer, bms in by_consumer.items():
        gone.extend(r.message.bookmark for r in q.machine.ack(consumer, bms).removed)
    assert q.ownership is not None
    q.ownership.acked_many(gone)
    if gone:
        copies[1 - i].receive(int(RecordKind.QUEUE_ACK), encode_ack_bookmarks(gone))


def _cpu_us_per_msg(total: int) -> float:
    copies, _ = _pair()
    seq = [1, 1]  # each copy's log sequence
    pub = [1, 1]  # each publisher's sequence
    now = 1_000_000
    for k in range(BACKLOG // RUN):
        origin = k % 2
        _publish(copies, origin, pub[origin], seq[0], now)
        pub[origin] += RUN
        seq[0] += RUN
    pending: list[list[QueueDelivery]] = [[], []]
    start = time.process_time()
    for k in range(total // RUN):
        now += 200
        origin = k % 2
        _publish(copies, origin, pub[origin], seq[0], now)
        pub[origin] += RUN
        seq[0] += RUN
        for i, q in enumerate(copies):
            _ack(copies, i, pending[i])
            pending[i] = q.machine.dispatch(now, limit=RUN)
    elapsed = time.process_time() - start
    return elapsed / total * 1e6


def run(quick: bool = False) -> dict[str, float]:
    total = 20_000 if quick else 200_000
    return {"cpu_us_per_msg": min(_cpu_us_per_msg(total) for _ in range(3))}


if __name__ == "__main__":
    print(run())
