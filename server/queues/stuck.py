"""Stuck queues: work that waits while consumers could take it.

A queue is **stuck** when its oldest waiting message (the first in log order that is not
leased) has waited longer than the queue's ``StuckMessageAge`` while at least one consumer
on this instance has room. A queue without consumers, or whose consumers all hold their
whole backlog, is not stuck: it is slow or unattended, which its depth and age show. A
stuck queue is one whose work cannot move: no consumer matches the message, its owner
never grants it, a barrier waits for a message that does not leave...

:class:`StuckWatch` is told the queues once a second (the service's watch): it keeps
which are stuck since when, reports the changes (events ``queue_stuck`` and
``queue_unstuck``) and answers the alerts every dashboard page shows
(server/alerts.py's :class:`~spool.server.alerts.Alert`) and ``/healthz``'s reasons. Pure: time
is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from spool.server.alerts import Alert
from spool.server.queues.browse import Waiting, why_waiting
from spool.server.queues.stage import QueueRuntime
from spool.server.stats.source import EventSink

__all__ = ["Stuck", "StuckWatch", "has_room"]


@dataclass(slots=True)
class Stuck:
    """One stuck queue: since when, and its oldest waiting message as last seen."""

    queue: str
    since_us: int
    bookmark: str
    age_s: float
    why: Waiting
    limit_s: float


def has_room(q: QueueRuntime) -> bool:
    """Whether a consumer of ``q`` on this instance could take a message now."""
    at_most_once = q.config.semantics == "at-most-once"
    return any((c.backlog > 0 if at_most_once else c.room > 0) for c in q.machine.consumers)


class StuckWatch:
    """Which queues are stuck, since when (docs/queues.md "Stuck work").

    Args:
        events: where ``queue_stuck`` / ``queue_unstuck`` go.
    """

    def __init__(self, events: EventSink) -> None:
        self._events = events
        self._stuck: dict[str, Stuck] = {}

    def check(self, queues: Iterable[QueueRuntime], now_us: int) -> None:
        """Look at every queue now; report the ones that became stuck or came unstuck."""
        for q in queues:
            name = q.config.name
            found = self._stuck_now(q, now_us)
            was = self._stuck.get(name)
            if found is not None and was is None:
                self._stuck[name] = found
                self._events.emit(
                    "warning", "queue", "queue_stuck", queue=name, bookmark=found.bookmark,
                    age=found.age_s, limit=found.limit_s, reason=found.why.reason,
                    detail=found.why.detail,
                )  # fmt: skip
            elif found is not None and was is not None:
                found.since_us = was.since_us
                self._stuck[name] = found
            elif found is None and was is not None:
                del self._stuck[name]
                self._events.emit(
                    "info", "queue", "queue_unstuck", queue=name,
                    stuck_for=round((now_us - was.since_us) / 1e6, 3),
                )  # fmt: skip

    @staticmethod
    def _stuck_now(q: QueueRuntime, now_us: int) -> Stuck | None:
        limit = q.config.stuck_age
        if not limit:
            return None
        m = q.machine.oldest_waiting()
        if m is None or q.machine.is_held(m.seq):
            return None  # held: it waits for its ack, not for a consumer (its own alert)
        waited_us = now_us - m.enqueued_us
        if waited_us < limit * 1_000_000 or not has_room(q):
            return None
        return Stuck(q.config.name, now_us, m.bookmark, round(waited_us / 1e6, 3),
                     why_waiting(q, m), limit)  # fmt: skip

    def is_stuck(self, queue: str) -> bool:
        return queue in self._stuck

    def stuck(self) -> list[Stuck]:
        """The queues stuck now, by name."""
        return [self._stuck[name] for name in sorted(self._stuck)]

    def alerts(self) -> list[Alert]:
        """One alert per stuck queue (every dashboard page shows it until it clears)."""
        return [
            {
                "id": f"queue-stuck:{s.queue}",
                "level": "error",
                "title": f"Queue {s.queue} is stuck",
                "message": (
                    f"its oldest waiting message {s.bookmark} has waited {s.age_s:.0f} s "
                    f"(StuckMessageAge {s.limit_s:g} s) while consumers have room: "
                    f"{s.why.detail}. The queue's messages page lists why each waits."
                ),
                "since": _iso(s.since_us),
            }
            for s in self.stuck()
        ]


def _iso(us: int) -> str:
    return (
        datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    )
