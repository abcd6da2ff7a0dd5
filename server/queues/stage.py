"""Queues on the publish path: a stage of server/publishing.py, and each queue's runtime.

- ``appended`` (after the append): messages of a queue's underlying topic that pass its
  ``Filter`` enter the queue's state machine (server/queues/machine.py) with their
  priority and barrier flag; the service is told, and delivers at the end of the loop
  turn (one dispatch for every run of the turn, not one per run).
- ``recover`` (start-up): the log in order rebuilds each queue: publishes of its
  underlying topics enter it, its ``QUEUE_ACK`` records take out what left it.
- ``reaches``: never: deliveries leave after the run, so a publisher's acks always come
  first.

Only recorded messages (with a bookmark: the consumer's handle for its ack) enter a
queue; the configuration requires the log to record the underlying topics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from server.bookmarks import format_bookmark
from server.clock import Clock
from server.config.model import QueueConfig
from server.expr import Filter, MessageView, ValueExpr, compile_filter, compile_value
from server.ports import AppendedRun, Outbound
from server.queues.machine import Message, QueueMachine, QueuePolicy
from server.txlog.batch import RecordBatch
from server.txlog.pins import Pin
from server.txlog.record import RecordKind
from server.wire import topic_json

__all__ = ["QueueRuntime", "QueueStage", "decode_ack_body", "encode_ack_body"]

#: record kinds whose messages enter a queue
_MESSAGE_KINDS: Final = frozenset({RecordKind.PUBLISH, RecordKind.DELTA_PUBLISH})
_QUEUE_ACK: Final = int(RecordKind.QUEUE_ACK)


def encode_ack_body(seqs: Sequence[int]) -> bytes:
    """The body of a ``QUEUE_ACK`` record: the local seqs that left the queue."""
    return b",".join(b"%d" % s for s in seqs)


def decode_ack_body(body: bytes) -> list[int]:
    """The seqs of a ``QUEUE_ACK`` record (a damaged field is skipped)."""
    out: list[int] = []
    for part in body.split(b","):
        if part.isdigit():
            out.append(int(part))
    return out


def policy_of(cfg: QueueConfig) -> QueuePolicy:
    """The state machine's policy of a configured queue."""
    return QueuePolicy(
        semantics="at-most-once" if cfg.semantics == "at-most-once" else "at-least-once",
        lease_period_us=int(cfg.lease_period * 1_000_000),
        max_backlog=cfg.max_backlog,
        max_deliveries=cfg.max_deliveries,
        max_cancels=cfg.max_cancels,
        fairness="fast" if cfg.fairness == "fast" else (
            "round-robin" if cfg.fairness == "round-robin" else "proportional"),
        leasing="strict" if cfg.leasing == "strict" else "sublet",
        expiration_us=int(cfg.expiration * 1_000_000),
    )  # fmt: skip


@dataclass(eq=False)
class QueueRuntime:
    """One configured queue: its configuration, compiled expressions, state machine and
    the log pin that keeps its oldest message's journal.

    Attributes:
        config: as configured.
        machine: its messages and leases.
        literal: its name as a JSON literal (the ``t`` of its deliveries).
        pin: holds the log from its oldest message on (None without a log).
        transferred_in, transferred_out: ownership transfers (always 0: replicated
            queues are not in this version).
    """

    config: QueueConfig
    machine: QueueMachine
    literal: bytes
    filter: Filter | None = None
    barrier: Filter | None = None
    priority: ValueExpr | None = None
    pin: Pin | None = None
    transferred_in: int = 0
    transferred_out: int = 0
    consumers: dict[object, object] = field(default_factory=dict)

    @classmethod
    def build(cls, cfg: QueueConfig, clock: Clock) -> QueueRuntime:
        return cls(
            config=cfg,
            machine=QueueMachine(cfg.name, policy_of(cfg)),
            literal=topic_json(cfg.name),
            filter=compile_filter(cfg.filter, clock=clock) if cfg.filter else None,
            barrier=compile_filter(cfg.barrier, clock=clock) if cfg.barrier else None,
            priority=compile_value(cfg.priority, clock=clock) if cfg.priority else None,
        )

    def admit(
        self,
        topic: str,
        bodies: Sequence[bytes],
        first_seq: int,
        timestamps_us: Sequence[int],
        pub_hash: Sequence[int],
        pub_seqs: Sequence[int],
    ) -> int:
        """Messages of ``topic`` (consecutive seqs from ``first_seq``) enter the queue if
        its filter takes them; returns how many did."""
        flt, barrier, priority = self.filter, self.barrier, self.priority
        add = self.machine.add
        n = 0
        for i, body in enumerate(bodies):
            bm = format_bookmark(pub_hash[i], pub_seqs[i])
            view: MessageView | None = None
            if flt is not None or barrier is not None or priority is not None:
                view = MessageView(topic, body, bookmark=bm)
                if flt is not None and not flt.matches(view):
                    continue
            prio = 0
            if priority is not None and view is not None:
                value = priority.evaluate(view)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    prio = int(value)
            add(
                Message(
                    first_seq + i, bm, topic, body, timestamps_us[i], priority=prio,
                    barrier=barrier is not None and view is not None and barrier.matches(view),
                )
            )  # fmt: skip
            n += 1
        return n


class QueueStage:
    """The queues' publish stage (appended, recovering).

    Args:
        queues: the runtimes, in configuration order.
        on_enqueued: told of each queue that took messages (the service delivers).
    """

    def __init__(
        self, queues: Sequence[QueueRuntime], on_enqueued: Callable[[QueueRuntime], None]
    ) -> None:
        self._queues = list(queues)
        self._by_name = {q.config.name: q for q in queues}
        self._on_enqueued = on_enqueued
        self._taken: dict[str, list[QueueRuntime]] = {}
        self.recovered_messages = 0
        self.recovered_acks = 0

    def takers(self, topic: str) -> list[QueueRuntime]:
        """The queues whose underlying topics include ``topic`` (memoised per topic)."""
        found = self._taken.get(topic)
        if found is None:
            found = [q for q in self._queues if q.config.takes(topic)]
            if len(self._taken) < 100_000:
                self._taken[topic] = found
        return found

    def applies_to(self, topic: str) -> bool:
        return bool(self.takers(topic))

    def reaches(self, topic: str, peer: Outbound) -> bool:
        return False  # deliveries leave after the run (QueueService.kick)

    def appended(self, run: AppendedRun) -> None:
        if not run.recorded or run.kind not in _MESSAGE_KINDS:
            return
        ts = run.timestamp_us or 0
        n = len(run.bodies)
        for queue in self.takers(run.topic):
            if queue.admit(
                run.topic, run.bodies, run.first_seq, [ts] * n, [run.pub_hash] * n, run.pub_seqs
            ):
                self._on_enqueued(queue)

    def recover(self, batch: RecordBatch) -> None:
        by_name = self._by_name
        kinds = batch.kinds()
        plain = kinds <= {int(RecordKind.PUBLISH)}
        first = batch.first_seq
        topics = batch.topics
        for i in range(len(batch)):
            topic = topics[i]
            kind = int(RecordKind.PUBLISH) if plain else batch.kind(i)
            if kind == _QUEUE_ACK:
                queue = by_name.get(topic)
                if queue is not None:
                    queue.machine.forget(decode_ack_body(batch.bodies[i]))
                    self.recovered_acks += 1
                continue
            if kind not in _MESSAGE_KINDS:
                continue
            takers = self.takers(topic)
            if not takers:
                continue
            for queue in takers:
                self.recovered_messages += queue.admit(
                    topic, [batch.bodies[i]], first + i, [batch.timestamps_us[i]],
                    [batch.pub_hashes[i]], [batch.pub_seqs[i]],
                )  # fmt: skip

    def recover_from(self) -> int:
        """The whole log: a queue's state is its messages minus its acks, and nothing
        else keeps it (docs/queues.md "Recovery")."""
        return 1 if self._queues else 1 << 62
