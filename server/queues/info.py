"""A queue as ``/api/queues`` shows it (docs/admin-api.md) and the metrics count it."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spool.server.queues.machine import Consumer, QueuedMessage
from spool.server.queues.stage import QueueRuntime

__all__ = ["QueueInfo", "describe"]


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """One queue as ``/api/queues`` shows it (docs/admin-api.md)."""

    name: str
    kind: str
    underlying_topic: str
    target_queue_depth: int
    inactive: int
    deferred_acks: int
    semantics: str
    depth: int
    backlog: int
    held: int
    hold: list[str]
    leased: int
    owned: int
    transferred_in: int
    transferred_out: int
    proxied_transfer: bool
    requests_open: int
    requests_waiting: int
    oldest_request_age: float
    oldest_lease_age: float
    oldest_message_age: float
    oldest_undelivered_age: float
    stuck: bool
    consumers: int
    enqueued: int
    removed: dict[str, int]
    leases: list[dict[str, object]]
    dead_letter_topic: str | None = None
    dead_lettered: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "kind": self.kind, "underlying_topic": self.underlying_topic,
            "target_queue_depth": self.target_queue_depth, "inactive": self.inactive,
            "deferred_acks": self.deferred_acks,
            "semantics": self.semantics, "depth": self.depth, "backlog": self.backlog,
            "held": self.held, "hold": list(self.hold), "leased": self.leased, "owned": self.owned,
            "transferred_in": self.transferred_in, "transferred_out": self.transferred_out,
            "proxied_transfer": self.proxied_transfer,
            "requests_open": self.requests_open, "requests_waiting": self.requests_waiting,
            "oldest_request_age": self.oldest_request_age,
            "oldest_lease_age": self.oldest_lease_age,
            "oldest_message_age": self.oldest_message_age,
            "oldest_undelivered_age": self.oldest_undelivered_age, "stuck": self.stuck,
            "consumers": self.consumers,
            "enqueued": self.enqueued, "removed": dict(self.removed), "leases": self.leases,
            "dead_letter_topic": self.dead_letter_topic, "dead_lettered": self.dead_lettered,
        }  # fmt: skip


def describe(
    q: QueueRuntime, now: int, stuck: bool = False, leases: bool = True,
    hold: Sequence[str] = (),
) -> QueueInfo:  # fmt: skip
    """``q`` at ``now`` (microseconds); its first 50 leases listed (``leases``; the
    metrics need none). ``stuck``: as the stuck-queue watch last found it
    (server/queues/stuck.py). ``hold``: why it holds messages back now
    (server/queues/hold.py; empty: it does not)."""
    m = q.machine
    held = m.held()
    lease_start = m.oldest_lease_us()
    oldest = m.oldest_enqueued_us()
    waiting = m.oldest_waiting()
    listed: list[dict[str, object]] = [
        {"bookmark": msg.bookmark, "consumer": msg.holder.name if msg.holder else None,
         "deliveries": msg.deliveries, "expires_in": round((msg.lease_until_us - now) / 1e6, 3)}
        for msg in (_first_leased(m.consumers, 50) if leases else ())
    ]  # fmt: skip
    cfg = q.config
    window = q.window
    own = q.ownership
    asked = own.oldest_request_us() if own is not None else 0
    return QueueInfo(
        name=cfg.name, kind=cfg.kind, underlying_topic=cfg.underlying,
        target_queue_depth=cfg.target_queue_depth,
        inactive=window.inactive if window is not None else 0,
        deferred_acks=(
            len(window.deferred) + (q.ownership.early_acks() if q.ownership is not None else 0)
            if window is not None
            else 0
        ),
        semantics=cfg.semantics, depth=m.depth, backlog=m.ready - held, held=held,
        hold=list(hold), leased=m.leased,
        owned=q.owned(), transferred_in=q.transferred_in,
        transferred_out=q.transferred_out,
        proxied_transfer=own.proxied if own is not None else False,
        requests_open=own.requests_open() if own is not None else 0,
        requests_waiting=own.requests_waiting() if own is not None else 0,
        oldest_request_age=round(max(0, now - asked) / 1e6, 3) if asked else 0.0,
        oldest_lease_age=round((now - lease_start) / 1e6, 3) if lease_start else 0.0,
        oldest_message_age=round((now - oldest) / 1e6, 3) if oldest else 0.0,
        oldest_undelivered_age=(
            round(max(0, now - waiting.enqueued_us) / 1e6, 3) if waiting is not None else 0.0
        ),
        stuck=stuck,
        consumers=len(m.consumers), enqueued=m.enqueued, removed=dict(m.removed),
        leases=listed,
        dead_letter_topic=cfg.dead_letter.topic if cfg.dead_letter is not None else None,
        dead_lettered=q.dead_lettered_count,
    )  # fmt: skip


def _first_leased(consumers: Iterable[Consumer], n: int) -> list[QueuedMessage]:
    """The ``n`` leased messages first in log order, from what the consumers hold (not a
    walk of the whole queue: a deep queue with few leases would cost its depth)."""
    return heapq.nsmallest(
        n, (m for c in consumers for m in c.leased.values()), key=lambda m: m.seq
    )
