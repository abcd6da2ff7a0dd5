"""The operator's alert rules (``Admin/Alerts/Rule``) and their evaluation.

A rule watches one value the broker already computes (a queue's oldest message age, a
subscription's lag, a replication destination's delay, the transaction log's free disk
space, the publish rate) against a threshold. Like a Prometheus alert rule with ``for:``,
it is *inactive* while the condition does not hold, *pending* from the first evaluation
where it holds, and *firing* once it has held for ``For`` without a break; the first
evaluation where it no longer holds makes it inactive again (a pending rule never fired,
so it clears silently). A value that cannot be read (the queue has not been seen yet,
the first rate of a start) does not hold.

:class:`RuleMachine` is that state machine, pure: it is fed values and monotonic times.
:class:`AlertRules` evaluates every rule once per :data:`EVALUATION_PERIOD` on a timer
of its own, from one metrics snapshot (cheap, on the loop) and, for ``disk_free`` rules,
a file-system reading taken in a worker thread, so the loop never blocks. Each firing and
clearing is an event (category ``alert``); while a rule fires it is an
:class:`~spool.server.alerts.Alert` in the list every page, ``/api/instance`` and
``/healthz`` read (server/operations.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from typing import Final, Literal, TypedDict

from spool.server.alerts import Alert, iso_time
from spool.server.clock import Clock
from spool.server.config import AlertRuleConfig
from spool.server.eventlog import EventLog
from spool.server.stats.host import FilesystemUsage
from spool.server.stats.snapshot import MetricsSnapshot
from spool.server.units import format_duration, format_size

__all__ = [
    "EVALUATION_PERIOD",
    "AlertRules",
    "RuleInfo",
    "RuleMachine",
    "RuleState",
    "describe",
]

#: seconds between two evaluations of the rules
EVALUATION_PERIOD: Final = 1.0

RuleState = Literal["inactive", "pending", "firing"]
Transition = Literal["fired", "cleared"]


class RuleInfo(TypedDict):
    """One rule as ``GET /api/alerts/rules`` shows it."""

    name: str
    metric: str
    target: str | None
    sub_id: str | None
    comparison: Literal["above", "below"]
    threshold: float
    measure: str
    threshold_text: str
    for_seconds: float
    level: Literal["warning", "error"]
    state: RuleState
    #: pending: since when the condition holds; firing: since when the rule fires
    since: str | None
    value: float | None
    value_text: str | None


class RuleMachine:
    """One rule's state: inactive -> pending -> firing -> inactive.

    Args:
        rule: what it compares.

    Attributes:
        state: now.
        held_at: the monotonic time the condition began to hold (None: it does not).
        fired_at: the monotonic time the rule fired (None: it does not fire).
        value: the last value observed (None: none could be read).
    """

    def __init__(self, rule: AlertRuleConfig) -> None:
        self.rule = rule
        self.state: RuleState = "inactive"
        self.held_at: float | None = None
        self.fired_at: float | None = None
        self.value: float | None = None

    def holds(self, value: float | None) -> bool:
        """Whether ``value`` meets the rule's condition."""
        if value is None or math.isnan(value):
            return False
        rule = self.rule
        return value > rule.threshold if rule.above else value < rule.threshold

    def observe(self, value: float | None, now: float) -> Transition | None:
        """Take one evaluation's value at monotonic time ``now``; the transition it made
        the rule take, if it fired or cleared."""
        self.value = value
        if not self.holds(value):
            was_firing = self.state == "firing"
            self.state, self.held_at, self.fired_at = "inactive", None, None
            return "cleared" if was_firing else None
        if self.held_at is None:
            self.state, self.held_at = "pending", now
        if self.state == "pending" and now - self.held_at >= self.rule.hold:
            self.state, self.fired_at = "firing", now
            return "fired"
        return None


def describe(rule: AlertRuleConfig, value: float) -> str:
    """A value (or threshold) of ``rule`` as an operator writes it (``12.5s``, ``10GB``)."""
    measure = rule.measure
    if measure == "seconds":
        return f"{value:.3g}s" if value < 60 else format_duration(round(value))
    if measure == "bytes":
        return format_size(int(value))
    if measure == "percent":
        return f"{value:.4g}%"
    if measure == "messages":
        return f"{int(value)} messages"
    return f"{value:.4g}/s"


def _where(rule: AlertRuleConfig) -> str:
    """What the rule watches, in words."""
    target = rule.target
    if rule.metric == "queue_age":
        return f"the oldest message of queue {target}" if target else "the oldest queued message"
    if rule.metric == "subscription_lag":
        if target is None:
            return "the most lagging subscription"
        return f"subscription {rule.sub_id} of {target}" if rule.sub_id else f"client {target}"
    if rule.metric == "link_behind":
        return f"destination {target}" if target else "the furthest-behind destination"
    if rule.metric == "disk_free":
        return "free space on the transaction log's file system"
    return f"publishes to {target}" if target else "the publish rate"


class AlertRules:
    """Evaluates the configured rules on a timer and keeps their states.

    Args:
        rules: ``Admin/Alerts/Rule``, in file order.
        snapshot: the metrics snapshot (server/metrics.py), read on the loop.
        disk: the transaction log's file system now (blocking: called in a thread), None
            without a log (the configuration refuses ``disk_free`` rules then).
        clock: evaluation times.
        events: where firings and clearings are written.
    """

    def __init__(
        self,
        rules: tuple[AlertRuleConfig, ...],
        snapshot: Callable[[], MetricsSnapshot],
        disk: Callable[[], FilesystemUsage] | None,
        clock: Clock,
        events: EventLog,
    ) -> None:
        self.machines = [RuleMachine(rule) for rule in rules]
        self._snapshot = snapshot
        self._disk = disk
        self._clock = clock
        self._events = events
        self._wall: dict[str, float] = {}  # rule name -> wall time of held_at / fired_at
        self._previous: tuple[float, MetricsSnapshot] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Evaluate every :data:`EVALUATION_PERIOD` (nothing runs without rules)."""
        if self.machines and self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="spool-alert-rules"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        failed = False
        while True:
            await self._clock.sleep(EVALUATION_PERIOD)
            try:
                await self.evaluate()
            except Exception as exc:  # a bug: say so once, keep evaluating
                if not failed:
                    self._events.emit(
                        "error", "alert", "alert_rules_failed",
                        error=f"{type(exc).__name__}: {exc}",
                    )  # fmt: skip
                failed = True
            else:
                failed = False

    async def evaluate(self) -> None:
        """One evaluation of every rule (the file-system reading in a thread)."""
        disk: FilesystemUsage | None = None
        if self._disk is not None and any(m.rule.metric == "disk_free" for m in self.machines):
            try:
                disk = await asyncio.to_thread(self._disk)
            except OSError:
                disk = None  # unreadable now: a disk_free rule's value is unknown
        self.apply(self._snapshot(), disk)

    def apply(self, snap: MetricsSnapshot, disk: FilesystemUsage | None) -> None:
        """Feed every rule its value from ``snap`` and ``disk``; write the transitions."""
        now = self._clock.monotonic()
        wall = self._clock.time()
        previous, self._previous = self._previous, (now, snap)
        for machine in self.machines:
            rule = machine.rule
            value = self._value(rule, snap, disk, previous, now)
            before = machine.state
            transition = machine.observe(value, now)
            if machine.state != before:
                self._wall[rule.name] = wall
            if transition is not None and value is not None:
                self._events.emit(
                    rule.level if transition == "fired" else "info",
                    "alert",
                    f"alert_{transition}",
                    rule=rule.name,
                    metric=rule.metric,
                    target=rule.target,
                    metric_value=round(value, 3),
                    threshold=rule.threshold,
                    detail=f"{_where(rule)}: {describe(rule, value)}, "
                    f"{'above' if rule.above else 'below'} {describe(rule, rule.threshold)}",
                )

    @staticmethod
    def _value(
        rule: AlertRuleConfig,
        snap: MetricsSnapshot,
        disk: FilesystemUsage | None,
        previous: tuple[float, MetricsSnapshot] | None,
        now: float,
    ) -> float | None:
        """The rule's value now (None: it cannot be read)."""
        metric, target = rule.metric, rule.target
        if metric == "queue_age":
            queues = snap["queues"]
            if target is not None:
                queue = queues.get(target)
                return queue["oldest_message_age"] if queue is not None else None
            return max((q["oldest_message_age"] for q in queues.values()), default=None)
        if metric == "subscription_lag":
            txlog = snap["txlog"]
            durable = txlog["durable_seq"] if txlog is not None else 0
            lags = [
                s["seconds_behind"]
                if rule.measure == "seconds"
                else float(max(0, durable - s["position_seq"]) if s["seconds_behind"] else 0)
                for s in snap["subscriptions_detail"]
                if (target is None or s["client"] == target)
                and (rule.sub_id is None or s["sub_id"] == rule.sub_id)
            ]
            return max(lags, default=None if target is not None else 0.0)
        if metric == "link_behind":
            behind = [
                link["seconds_behind"]
                if rule.measure == "seconds"
                else float(link["messages_behind"])
                for key, link in snap["replication"].items()
                if link["direction"] == "out" and (target is None or key == f"out/{target}")
            ]
            return max(behind, default=None)
        if metric == "disk_free":
            if disk is None:
                return None
            if rule.measure == "percent":
                return 100.0 * disk.free / disk.total if disk.total else None
            return float(disk.free)
        # publish_rate_drop: messages in per second since the last evaluation
        if previous is None or now <= previous[0]:
            return None
        then, before = previous
        if target is None:
            count, earlier = snap["msgs_in"], before["msgs_in"]
        else:
            topic, old = snap["topics"].get(target), before["topics"].get(target)
            count = topic["msgs_in"] if topic is not None else 0
            earlier = old["msgs_in"] if old is not None else 0
        return max(0, count - earlier) / (now - then)

    # -- what the admin surface shows ------------------------------------------------------

    def alerts(self) -> list[Alert]:
        """The firing rules, as banners."""
        alerts: list[Alert] = []
        for machine in self.machines:
            if machine.state != "firing" or machine.value is None:
                continue
            rule = machine.rule
            word = "above" if rule.above else "below"
            held = f" for {format_duration(rule.hold)}" if rule.hold else ""
            alerts.append(
                {
                    "id": f"rule-{rule.name}",
                    "level": rule.level,
                    "title": f"Alert rule {rule.name}",
                    "message": (
                        f"{_where(rule)} is {describe(rule, machine.value)}, {word} "
                        f"{describe(rule, rule.threshold)}{held} ({rule.metric})."
                    ),
                    "since": iso_time(self._wall.get(rule.name, self._clock.time())),
                }
            )
        return alerts

    def info(self) -> list[RuleInfo]:
        """Every rule, its state, since when and its last value (``/api/alerts/rules``)."""
        rules: list[RuleInfo] = []
        for machine in self.machines:
            rule = machine.rule
            since = self._wall.get(rule.name) if machine.state != "inactive" else None
            value = machine.value
            rules.append(
                {
                    "name": rule.name,
                    "metric": rule.metric,
                    "target": rule.target,
                    "sub_id": rule.sub_id,
                    "comparison": "above" if rule.above else "below",
                    "threshold": rule.threshold,
                    "measure": rule.measure,
                    "threshold_text": describe(rule, rule.threshold),
                    "for_seconds": rule.hold,
                    "level": rule.level,
                    "state": machine.state,
                    "since": iso_time(since) if since is not None else None,
                    "value": round(value, 3) if value is not None else None,
                    "value_text": describe(rule, value) if value is not None else None,
                }
            )
        return rules

    def gauges(self) -> list[tuple[str, bool, float | None]]:
        """Per rule: its name, whether it fires, its last value (the Prometheus gauges)."""
        return [(m.rule.name, m.state == "firing", m.value) for m in self.machines]
