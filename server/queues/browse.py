"""A queue's messages as an operator browses them, and why each one is not delivered.

The message browser (``GET /api/queues/{name}/messages``, the dashboard's queue page)
and the stuck-queue alert (server/queues/stuck.py) read a queue through here. Read-only:
nothing here changes a queue, its leases or its ownership.

**Why a message waits** (:func:`why_waiting`), the first that applies:

- ``leased``: a consumer holds it (until its lease ends);
- ``held``: this instance lacks records that may have acked it (a fence not repaired, a
  lost tail its sources have not resent): it waits for them (docs/queues.md "Held after a
  loss"; server/queues/hold.py);
- ``owner_offline``: a replicated queue's message whose owner has no live link into this
  instance: it waits for the owner (or a proxied transfer);
- ``granted_away``: this instance granted it to another that asked for it;
- ``owned_elsewhere``: another instance owns it; since when this instance asked for it
  at the current epoch and how many times, with no answer yet (or not asked yet: it waits
  the typical publish-to-ack time first, and only while consumers here have room);
- ``barrier``: a barrier message with older messages still in the queue;
- ``no_consumer``: nobody subscribes to the queue on this instance;
- ``consumers_full``: every consumer holds as many leases as its backlog allows (or, at
  most once, its connection is full);
- ``no_consumer_matches``: consumers have room, but none's filter takes it;
- ``ready``: deliverable: the next dispatch (at the end of this loop turn) sends it.

Pages are in log order with a cursor (the seq to continue after), so a browser never
loads a whole queue and a page of a deep queue costs a bisection and a skip in C
(:meth:`~spool.server.queues.machine.QueueMachine.page_after`), never a walk of the queue in
Python on the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from spool.server.queues.machine import QueuedMessage
from spool.server.queues.stage import QueueRuntime

__all__ = ["BROWSE_MAX", "BrowsePage", "Waiting", "browse", "why_waiting"]

#: the largest page of messages one call returns
BROWSE_MAX: Final = 500
#: places of the queue's order one page looks at, at most (acked messages still in the
#: order are skipped; past this the page ends early, with a cursor to go on)
_SCAN: Final = 100_000
#: bytes of a message's body a page shows
_PREVIEW: Final = 256

Reason = Literal[
    "leased", "held", "owner_offline", "granted_away", "owned_elsewhere", "barrier", "no_consumer",
    "consumers_full", "no_consumer_matches", "ready",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why one message is not being delivered now.

    Attributes:
        reason: a code (module docstring).
        detail: the same for a person, with names and numbers.
        since_us: when the condition began, where known (a request's time; 0: unknown).
    """

    reason: Reason
    detail: str
    since_us: int = 0


def why_waiting(q: QueueRuntime, m: QueuedMessage) -> Waiting:
    """Why ``m`` (a message of ``q``) is not being delivered now."""
    machine = q.machine
    own = q.ownership
    request = own.request_state(m.bookmark) if own is not None else None
    if m.holder is not None:
        held = (
            f"; {request.requester} asked for it (granted when the lease ends unacked)"
            if request is not None and not request.asked
            else ""
        )
        return Waiting("leased", f"leased to {m.holder.name}{held}")
    if machine.is_held(m.seq):
        return Waiting(
            "held",
            "this instance lacks records that may have acked it (the queue's hold says "
            "which); it goes once they come back or an operator gives them up",
        )
    if own is not None:
        view = own.view(m.bookmark)
        if view is not None and view.owner != q.instance:
            if view.owner_offline:
                return Waiting(
                    "owner_offline",
                    f"owned by {view.owner} (epoch {view.epoch}), which has no live link "
                    "into this instance",
                )
            if request is not None and request.asked:
                times = f"{request.times} time{'' if request.times == 1 else 's'}"
                return Waiting(
                    "owned_elsewhere",
                    f"owned by {view.owner} (epoch {view.epoch}); requested by this "
                    f"instance ({times}), no answer yet",
                    request.since_us,
                )
            return Waiting(
                "owned_elsewhere",
                f"owned by {view.owner} (epoch {view.epoch}); not requested (it waits the "
                "typical publish-to-ack time first, and only while consumers here have room)",
            )
        if view is not None and view.granted_to is not None:
            return Waiting("granted_away", f"granted to {view.granted_to}")
    if m.barrier and machine.oldest_seq() != m.seq:
        return Waiting("barrier", "a barrier message: older messages are still in the queue")
    consumers = machine.consumers
    if not consumers:
        return Waiting("no_consumer", "no consumer subscribes to the queue on this instance")
    at_most_once = q.config.semantics == "at-most-once"
    with_room = [c for c in consumers if (c.backlog > 0 if at_most_once else c.room > 0)]
    if not with_room:
        return Waiting(
            "consumers_full",
            f"all {len(consumers)} consumer{'' if len(consumers) == 1 else 's'} hold their "
            "whole backlog" + ("" if not at_most_once else " (their connections are full)"),
        )
    if not any(c.accepts is None or c.accepts(m) for c in with_room):
        return Waiting(
            "no_consumer_matches",
            f"no consumer's filter matches it ({len(with_room)} with room)",
        )
    return Waiting("ready", "deliverable: the next dispatch sends it")


@dataclass(frozen=True, slots=True)
class BrowsePage:
    """One page of a queue's messages (``GET /api/queues/{name}/messages``)."""

    queue: str
    messages: list[dict[str, object]]
    next_after: int  # the cursor of the next page (0: this was the last)
    depth: int
    inactive: int  # a bounded queue's messages waiting in the log (not listed)

    def to_dict(self) -> dict[str, object]:
        return {
            "queue": self.queue, "messages": self.messages,
            "next_after": self.next_after or None, "depth": self.depth,
            "inactive": self.inactive,
        }  # fmt: skip


def browse(q: QueueRuntime, after: int, limit: int, now_us: int) -> BrowsePage:
    """The messages of ``q`` after seq ``after`` in log order, at most ``limit``."""
    found, next_after = q.machine.page_after(after, limit, _SCAN)
    window = q.window
    return BrowsePage(
        queue=q.config.name,
        messages=[_row(q, m, now_us) for m in found],
        next_after=next_after,
        depth=q.machine.depth,
        inactive=window.inactive if window is not None else 0,
    )


def _row(q: QueueRuntime, m: QueuedMessage, now_us: int) -> dict[str, object]:
    own = q.ownership
    view = own.view(m.bookmark) if own is not None else None
    why = why_waiting(q, m)
    leased = m.holder is not None
    return {
        "seq": m.seq,
        "bookmark": m.bookmark,
        "topic": m.topic,
        "age": round(max(0, now_us - m.enqueued_us) / 1e6, 3),
        "owner": view.owner if view is not None else q.instance,
        "epoch": view.epoch if view is not None else 0,
        "deliveries": m.deliveries,
        "cancels": m.cancels,
        "priority": m.priority,
        "barrier": m.barrier,
        "lease_holder": m.holder.name if m.holder is not None else None,
        "lease_expires_in": round((m.lease_until_us - now_us) / 1e6, 3) if leased else None,
        "expires_in": round((m.expires_us - now_us) / 1e6, 3) if m.expires_us else None,
        "reason": why.reason,
        "detail": why.detail,
        "since_age": round(max(0, now_us - why.since_us) / 1e6, 3) if why.since_us else None,
        "data": m.body[:_PREVIEW].decode("utf-8", "replace"),
        "truncated": len(m.body) > _PREVIEW,
    }
