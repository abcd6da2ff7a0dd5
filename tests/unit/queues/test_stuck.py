"""Stuck queues (server/queues/stuck.py): a queue whose oldest waiting message is older
than its StuckMessageAge while consumers have room raises an alert and an event, and the
alert clears when that no longer holds."""

from __future__ import annotations

from spool.server.clock import VirtualClock
from spool.server.config.model import QueueConfig
from spool.server.eventlog import EventLog
from spool.server.queues.machine import Consumer
from spool.server.queues.stage import QueueRuntime
from spool.server.queues.stuck import StuckWatch

S = 1_000_000


def _setup(stuck_age: float = 10.0) -> tuple[QueueRuntime, StuckWatch, EventLog]:
    clock = VirtualClock()
    q = QueueRuntime.build(
        QueueConfig(name="work", underlying="work-in", stuck_age=stuck_age), clock, "a"
    )
    events = EventLog(None, "test", console=False, clock=clock)
    return q, StuckWatch(events), events


def _names(events: EventLog) -> list[str]:
    return [e["event"] for e in events.recent() if e["category"] == "queue"]


def test_stuck_needs_age_and_room_and_clears() -> None:
    q, watch, events = _setup()
    q.admit("work-in", [b'{"k":1}'], 1, [0], [1], [1])
    watch.check([q], 60 * S)
    assert watch.alerts() == []  # old, but nobody could take it: not stuck
    picky = Consumer("c/1", backlog=1, accepts=lambda m: False)
    q.machine.subscribe(picky)
    watch.check([q], 9 * S)
    assert watch.alerts() == []  # room, but younger than 10 s
    watch.check([q], 11 * S)
    (alert,) = watch.alerts()
    assert alert["id"] == "queue-stuck:work" and alert["level"] == "error"
    assert "no consumer's filter matches it" in alert["message"]
    assert _names(events) == ["queue_stuck"]
    watch.check([q], 12 * S)
    assert _names(events) == ["queue_stuck"]  # reported once while it lasts
    assert watch.stuck()[0].since_us == 11 * S
    # a consumer that takes it: delivered, nothing waits, the alert clears
    q.machine.subscribe(Consumer("c/2", backlog=1))
    q.machine.dispatch(13 * S)
    watch.check([q], 14 * S)
    assert watch.alerts() == [] and _names(events) == ["queue_stuck", "queue_unstuck"]
    unstuck = events.recent()[-1]
    assert unstuck["stuck_for"] == 3.0


def test_full_consumers_are_not_stuck_and_zero_turns_it_off() -> None:
    q, watch, _ = _setup()
    q.admit("work-in", [b"{}", b"{}"], 1, [0, 0], [1, 1], [1, 2])
    c = Consumer("c/1", backlog=1)
    q.machine.subscribe(c)
    q.machine.dispatch(0)
    watch.check([q], 60 * S)
    assert watch.alerts() == []  # the second waits for the consumer's only lease
    off, watch_off, _ = _setup(stuck_age=0.0)
    off.admit("work-in", [b"{}"], 1, [0], [1], [1])
    off.machine.subscribe(Consumer("c/1", backlog=1, accepts=lambda m: False))
    watch_off.check([off], 3600 * S)
    assert watch_off.alerts() == []
