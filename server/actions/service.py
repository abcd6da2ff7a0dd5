"""The configured actions of an instance: their triggers, their runs, what they show.

:class:`Actions` is built by the engine (the composition root) with the instance's admin
surface, and started and stopped as numbered steps of the engine's own:

1. :meth:`Actions.start`, after recovery and the statistics database, before clients are
   served: the last stored run of each action is read back, the ``on-startup`` actions
   run (in file order, each to its end), then the schedules and disk watchers start;
2. :meth:`Actions.shutdown`, when shutdown begins (new work is refused, clients are still
   connected): the ``on-shutdown`` actions run, bounded by :data:`SHUTDOWN_BUDGET`;
3. :meth:`Actions.stop`, before the statistics database and the log close: the triggers
   stop and the runs in progress get :data:`STOP_BUDGET` to finish (then are cancelled).

Runs started by triggers and by ``POST /api/actions/NAME`` are tasks of their own, so a
client that goes away does not cancel a run halfway through a journal. The admin API
reads :meth:`Actions.info`, :meth:`Actions.history` and :meth:`Actions.journal_plan`.

An event-driven action (run once per message or happening: an on-publish, client or link
trigger) has an
:class:`~spool.server.actions.eventrunner.EventRunner` instead: its lane exists from the
start (the publish stage :class:`~spool.server.actions.onpublish.PublishTriggers` offers
to it, first what the start-up catch-up read back), its worker task starts with the
schedules (one per action, so an action's firings follow their messages' order while
actions run side by side), its history windows are closed on a timer and the checkpoints
written every second. At stop its lane refuses new messages, the worker runs what is
queued (within :data:`STOP_BUDGET`), and the last window and checkpoints are written.

An instance with a ``spool-action-do-webhook`` step has one webhook sender
(:class:`~spool.server.actions.webhooks.Webhooks`, ``<Actions><Webhooks>``: its queue
depth and posting threads), shared by its actions, each with its own FIFO and counters.
It stops after the runs: the posts still queued get :data:`WEBHOOK_STOP_BUDGET` to be
delivered, what is left is cut off, counted as dropped and reported
(``actions/webhooks_dropped``), then its threads close.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final, TypedDict, cast

import orjson

from spool.server.actions.describe import describe_step, describe_trigger
from spool.server.actions.errors import ActionBusy, ActionNotFound, BadParameters, NotOnAdmin
from spool.server.actions.eventrunner import EventRunner
from spool.server.actions.hooks import ActionHappenings
from spool.server.actions.metricsdoc import MetricsDocument
from spool.server.actions.onpublish import PublishTriggers
from spool.server.actions.plan import PlannedAction, ScheduledAction, journal_plan
from spool.server.actions.results import RunDict, RunRecord, WebhookTally, iso
from spool.server.actions.runner import ActionRunner
from spool.server.actions.steps import WebhookOutlet
from spool.server.actions.triggers import DiskUsageTrigger, Fire, ScheduleTrigger
from spool.server.actions.webhooks import ThreadedWebhooks, WebhookPort, Webhooks
from spool.server.clock import Clock
from spool.server.config import (
    ActionConfig,
    ActionParameter,
    AllowList,
    Config,
    IfCondition,
    IfDiskUsage,
    OnAdmin,
    OnClient,
    OnDeadLetter,
    OnDiskUsage,
    OnExecute,
    OnLinkState,
    OnOof,
    OnPublishMessage,
    OnSchedule,
    OnShutdown,
    OnSowRemoval,
    OnStartup,
    Step,
    Webhook,
)
from spool.server.operations import Operations
from spool.server.txlog.retention.pins import PinInfo
from spool.server.txlog.storage.journal import JournalInfo

__all__ = ["SHUTDOWN_BUDGET", "STOP_BUDGET", "WEBHOOK_STOP_BUDGET", "ActionInfo", "Actions"]

#: Seconds the on-shutdown actions may take together before shutdown goes on without them.
SHUTDOWN_BUDGET: Final = 10.0
#: Seconds runs in progress get to finish when the instance stops.
STOP_BUDGET: Final = 30.0
#: Seconds the webhook posts still queued at stop get to be delivered (after the runs).
WEBHOOK_STOP_BUDGET: Final = 10.0
#: Longest value of an on-admin parameter.
MAX_PARAMETER: Final = 4096


class TriggerInfo(TypedDict):
    module: str
    description: str
    next_run: str | None


class ParameterInfo(TypedDict):
    name: str
    default: str | None
    required: bool
    pattern: str | None
    description: str


class StepInfo(TypedDict):
    index: int
    kind: str
    module: str
    description: str


class ActionInfo(TypedDict):
    """One configured action, as ``GET /api/actions`` lists it."""

    name: str
    triggers: list[TriggerInfo]
    next_run: str | None
    on_admin: bool
    parameters: list[ParameterInfo]
    steps: list[StepInfo]
    running: RunDict | None
    last_run: RunDict | None
    runs: int
    skipped: int
    #: run once per message (``runs`` counts firings, ``skipped`` messages dropped, and
    #: ``last_run`` is the last history window)
    event_driven: bool
    #: an event-driven action's tally since the instance started (None for the others)
    events: dict[str, int] | None
    #: what its webhook steps posted since the instance started (None: it has none)
    webhooks: dict[str, int] | None


class Actions:
    """The actions of one instance (see the module docstring).

    Args:
        config: the instance configuration (its ``actions``).
        ops: the admin surface every module acts through.
        clock: the time source of schedules and records.
        publish_triggers: the publish stage that feeds the on-publish actions (None: a
            stage of its own, not on any publish path).
        webhooks: what posts the webhooks (tests pass a fake); None: threads of this
            service's own (``<Actions><Webhooks><Threads>``), made only when an action
            has a webhook step.
    """

    def __init__(
        self,
        config: Config,
        ops: Operations,
        clock: Clock,
        *,
        publish_triggers: PublishTriggers | None = None,
        webhooks: WebhookPort | None = None,
    ) -> None:
        self._config = config
        self._ops = ops
        self._clock = clock
        metrics = MetricsDocument(ops, config, clock)
        #: the instance's webhook sender (None: no action has a webhook step)
        self.webhooks: Webhooks | None = None
        self._threads: ThreadedWebhooks | None = None
        hooked = {a.name: _webhook_steps(a) for a in config.actions if _webhook_steps(a)}
        outlets: dict[str, WebhookOutlet] = {}
        if hooked:
            port = webhooks
            if port is None:
                port = self._threads = ThreadedWebhooks(config.webhooks.threads, clock)
            self.webhooks = Webhooks(
                port, clock, ops.events, depth=config.webhooks.queue_depth,
                concurrency={name: max(s.concurrency for s in steps)
                             for name, steps in hooked.items()},
            )  # fmt: skip
            allow = AllowList(config.webhooks.allow)
            outlets = {name: WebhookOutlet(self.webhooks, allow, WebhookTally()) for name in hooked}
        triggers = publish_triggers if publish_triggers is not None else PublishTriggers(config)
        self.runners: dict[str, ActionRunner] = {
            action.name: ActionRunner(
                action,
                config,
                ops,
                clock,
                metrics,
                self._raise_event,
                webhooks=outlets.get(action.name),
            )
            for action in config.actions
            if not action.event_driven
        }
        #: the event-driven actions, each with its lane
        self.event_runners: dict[str, EventRunner] = {}
        sink = ActionHappenings()
        for action in config.actions:
            if not action.event_driven:
                continue
            runner_ = EventRunner(
                action, config, ops, clock, metrics, on_derived=triggers.derived,
                webhooks=outlets.get(action.name),
            )  # fmt: skip
            self.event_runners[action.name] = runner_
            for index, trigger in enumerate(action.triggers):
                if isinstance(trigger, OnPublishMessage):
                    triggers.bind(runner_, trigger, index)
                elif isinstance(
                    trigger, OnClient | OnLinkState | OnSowRemoval | OnOof | OnDeadLetter
                ):
                    sink.bind(runner_.lane, trigger, index)
        self._publish_triggers = triggers
        #: the sink of the happenings bus the client, link, SOW and dead-letter triggers
        #: need (None: no such trigger, the engine adds no sink)
        self.happenings_sink: ActionHappenings | None = sink if sink.families else None
        self._workers: set[asyncio.Task[None]] = set()
        self._windows: set[asyncio.Task[None]] = set()
        self._schedules: dict[str, list[ScheduleTrigger]] = {}
        self._disks: dict[str, list[DiskUsageTrigger]] = {}
        for runner in self.runners.values():
            action = runner.config
            for trigger in action.triggers:
                if isinstance(trigger, OnSchedule):
                    self._schedules.setdefault(action.name, []).append(
                        ScheduleTrigger(trigger, self._firing(runner), clock, self._missing(runner))
                    )
                elif isinstance(trigger, OnDiskUsage):
                    path = trigger.path or config.directory(trigger.label)
                    self._disks.setdefault(action.name, []).append(
                        DiskUsageTrigger(trigger, path, self._firing(runner), ops, clock)
                    )
        self._tasks: set[asyncio.Task[RunRecord]] = set()
        self._stopping = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Read back the last stored runs, run the on-startup actions, start the triggers."""
        everyone: list[ActionRunner | EventRunner] = [
            *self.runners.values(),
            *self.event_runners.values(),
        ]
        for runner in everyone:
            with contextlib.suppress(Exception):  # no database: nothing to show yet
                stored = await self._ops.action_runs(runner.name, 1)
                if stored:
                    runner.stored_last = _run_dict(stored[0].id, stored[0].record)
        for runner in self._with(OnStartup):
            await self._guarded(runner, "amps-action-on-startup", "start-up", {})
        for triggers in self._schedules.values():
            for schedule in triggers:
                schedule.start()
        for disks in self._disks.values():
            for disk in disks:
                disk.start()
        loop = asyncio.get_running_loop()
        for name, (offered, dropped) in self._publish_triggers.caught_up.items():
            self._ops.events.emit(
                "warning" if dropped else "info", "actions", "catch_up", action=name,
                messages=offered, dropped=dropped,
                detail="messages of the log past the action's checkpoint run again",
            )  # fmt: skip
        if self.event_runners:
            # where each action starts is on disk before it runs anything: an action new
            # to the file, or a file lost, must not make a crash replay history or skip
            await self._publish_triggers.save()
            self._windows.add(loop.create_task(self._publish_triggers.keep_checkpoint()))
        for event_runner in self.event_runners.values():
            self._workers.add(loop.create_task(event_runner.work()))
            self._windows.add(loop.create_task(event_runner.windows()))

    async def shutdown(self) -> None:
        """Run the on-shutdown actions (bounded by :data:`SHUTDOWN_BUDGET`)."""
        runners = list(self._with(OnShutdown))
        if not runners:
            return

        async def run_all() -> None:
            for runner in runners:
                await self._guarded(runner, "amps-action-on-shutdown", "shutdown", {})

        try:
            await asyncio.wait_for(run_all(), SHUTDOWN_BUDGET)
        except TimeoutError:
            self._ops.events.emit(
                "error", "actions", "shutdown_actions_timeout", budget_s=SHUTDOWN_BUDGET,
                detail="shutdown goes on without the on-shutdown actions still running",
            )  # fmt: skip

    async def stop(self) -> None:
        """Stop the triggers; let runs in progress finish (bounded), then cancel them."""
        self._stopping = True
        for schedules in self._schedules.values():
            for schedule in schedules:
                await schedule.stop()
        for disks in self._disks.values():
            for disk in disks:
                await disk.stop()
        for event_runner in self.event_runners.values():
            event_runner.lane.stop()  # what is queued still runs
        for window in self._windows:
            window.cancel()
        busy = {*self._tasks, *self._workers, *self._windows}
        if busy:
            _done, pending = await asyncio.wait(busy, timeout=STOP_BUDGET)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        await self._stop_webhooks()
        for event_runner in self.event_runners.values():
            await event_runner.flush()
            await event_runner.close_window()
        await self._publish_triggers.save()

    async def _stop_webhooks(self) -> None:
        """Give the queued posts :data:`WEBHOOK_STOP_BUDGET`, cut off the rest (counted
        as dropped, and reported), close the threads."""
        sender = self.webhooks
        if sender is None:
            return
        pending = sender.pending
        await sender.stop(WEBHOOK_STOP_BUDGET)
        if sender.cancelled:
            self._ops.events.emit(
                "warning", "actions", "webhooks_dropped", queued=pending,
                cut_off=sender.cancelled, budget_s=WEBHOOK_STOP_BUDGET,
                detail="webhook posts not delivered before the instance stopped",
            )  # fmt: skip
        if self._threads is not None:
            await self._threads.aclose()

    # -- running ----------------------------------------------------------------------------

    def _with(self, kind: type) -> list[ActionRunner]:
        return [
            r for r in self.runners.values() if any(isinstance(t, kind) for t in r.config.triggers)
        ]

    async def _spawn(self, run: Coroutine[Any, Any, RunRecord]) -> RunRecord:
        """Run in a task of its own: cancelling the caller does not cancel the run."""
        task = asyncio.get_running_loop().create_task(run)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(task)

    async def _guarded(
        self, runner: ActionRunner, trigger: str, detail: str, variables: Mapping[str, str]
    ) -> RunRecord | None:
        """A run a trigger asked for: skipped (and counted) while the action runs."""
        if self._stopping and trigger != "amps-action-on-shutdown":
            return None
        try:
            return await self._spawn(runner.run(trigger, detail, variables=variables))
        except ActionBusy as exc:
            runner.skipped += 1
            self._ops.events.emit(
                "warning", "actions", "skipped", action=runner.name, trigger=trigger,
                detail=detail, reason=str(exc),
            )  # fmt: skip
            return None

    def _missing(self, runner: ActionRunner) -> Callable[[int], None]:
        def missed(count: int) -> None:
            runner.skipped += count
            self._ops.events.emit(
                "warning", "actions", "skipped", action=runner.name,
                trigger="amps-action-on-schedule", firings=count,
                reason="the schedule came due while a run was in progress",
            )  # fmt: skip

        return missed

    def _firing(self, runner: ActionRunner) -> Fire:
        async def fire(trigger: str, detail: str, variables: Mapping[str, str]) -> None:
            await self._guarded(runner, trigger, detail, variables)

        return fire

    async def _raise_event(self, event: str, variables: Mapping[str, str], depth: int) -> list[str]:
        """Run the actions that run on ``event``, in file order; one line per action."""
        lines: list[str] = []
        for runner in self.runners.values():
            if not any(
                isinstance(t, OnExecute) and t.event == event for t in runner.config.triggers
            ):
                continue
            try:
                record = await runner.run(
                    "amps-action-on-execute", f"event {event}",
                    variables={**variables, "AMPS_EVENT": event}, depth=depth,
                )  # fmt: skip
            except ActionBusy:
                runner.skipped += 1
                lines.append(f"{runner.name} skipped (running)")
                continue
            lines.append(f"{runner.name} {record.outcome}")
        return lines

    async def run_admin(self, name: str, parameters: Mapping[str, object], user: str) -> RunRecord:
        """Run an on-admin action now (``POST /api/actions/NAME``, the dashboard).

        Raises:
            ActionNotFound, NotOnAdmin, BadParameters, ActionBusy.
        """
        runner = self.runners.get(name)
        if runner is None:
            event_runner = self.event_runners.get(name)
            if event_runner is None:
                raise ActionNotFound(name)
            raise NotOnAdmin(name, [t.module for t in event_runner.config.triggers])
        on_admin = runner.config.trigger_of(OnAdmin)
        if not isinstance(on_admin, OnAdmin):
            raise NotOnAdmin(name, [t.module for t in runner.config.triggers])
        params = _parameters(name, on_admin.parameters, parameters)
        if runner.running is not None:
            started = runner.running.started
            raise ActionBusy(name, started, iso(started))
        return await self._spawn(
            runner.run("amps-action-on-admin", f"on demand by {user}", user=user, parameters=params)
        )

    # -- reads ------------------------------------------------------------------------------

    def info(self) -> list[ActionInfo]:
        """Every configured action: triggers, next run, steps, the run in progress, the last."""
        return [self.action_info(action.name) for action in self._config.actions]

    def action_info(self, name: str) -> ActionInfo:
        """One action (raises ActionNotFound)."""
        runner = self.runners.get(name)
        if runner is not None:
            return self._info(runner)
        event_runner = self.event_runners.get(name)
        if event_runner is None:
            raise ActionNotFound(name)
        return self._event_info(event_runner)

    def _event_info(self, runner: EventRunner) -> ActionInfo:
        action = runner.config
        counts = runner.counts()
        return {
            "name": action.name,
            "triggers": [
                {"module": t.module, "description": describe_trigger(t), "next_run": None}
                for t in action.triggers
            ],
            "next_run": None,
            "on_admin": False,
            "parameters": [],
            "steps": [_step_info(i, s) for i, s in enumerate(action.steps, start=1)],
            "running": None,
            "last_run": runner.last_run,
            "runs": counts["runs"],
            "skipped": counts["dropped"],
            "event_driven": True,
            "events": counts,
            "webhooks": runner.webhooks.tally.counts() if runner.webhooks is not None else None,
        }

    def _next_runs(self, name: str) -> dict[int, float | None]:
        schedules = iter(self._schedules.get(name, []))
        disks = iter(self._disks.get(name, []))
        out: dict[int, float | None] = {}
        for i, trigger in enumerate(self.runners[name].config.triggers):
            if isinstance(trigger, OnSchedule):
                out[i] = next(schedules).next_run
            elif isinstance(trigger, OnDiskUsage):
                next(disks)
                out[i] = None
        return out

    def _info(self, runner: ActionRunner) -> ActionInfo:
        action = runner.config
        next_runs = self._next_runs(runner.name)
        triggers: list[TriggerInfo] = []
        for i, trigger in enumerate(action.triggers):
            at = next_runs.get(i)
            triggers.append({
                "module": trigger.module,
                "description": describe_trigger(trigger),
                "next_run": iso(at) if at is not None else None,
            })  # fmt: skip
        timed = [t for t in next_runs.values() if t is not None]
        on_admin = action.trigger_of(OnAdmin)
        parameters: list[ParameterInfo] = []
        if isinstance(on_admin, OnAdmin):
            parameters = [
                {"name": p.name, "default": p.default, "required": p.default is None,
                 "pattern": p.pattern, "description": p.description}
                for p in on_admin.parameters
            ]  # fmt: skip
        return {
            "name": action.name,
            "triggers": triggers,
            "next_run": iso(min(timed)) if timed else None,
            "on_admin": on_admin is not None,
            "parameters": parameters,
            "steps": [_step_info(i, s) for i, s in enumerate(action.steps, start=1)],
            "running": runner.running.to_dict() if runner.running is not None else None,
            "last_run": runner.last_run,
            "runs": runner.runs,
            "skipped": runner.skipped,
            "event_driven": False,
            "events": None,
            "webhooks": runner.webhooks.tally.counts() if runner.webhooks is not None else None,
        }

    async def history(
        self, action: str | None = None, limit: int = 100, before_id: int | None = None
    ) -> list[RunDict]:
        """Finished runs, newest first, from the stats database (this process's recent
        runs when the database cannot be read).

        Raises:
            ActionNotFound: ``action`` is not configured.
        """
        if action is not None and action not in self.runners and action not in self.event_runners:
            raise ActionNotFound(action)
        try:
            stored = await self._ops.action_runs(action, limit, before_id)
        except Exception:  # no database (or unreadable): what this process remembers
            runners: list[ActionRunner | EventRunner] = [
                *self.runners.values(),
                *self.event_runners.values(),
            ]
            runs = [r for runner in runners for r in runner.recent
                    if action is None or runner.name == action]  # fmt: skip
            runs.sort(key=lambda r: r.started, reverse=True)
            return [r.to_dict() for r in runs[:limit]]
        return [_run_dict(s.id, s.record) for s in stored]

    def journal_plan(
        self, journals: list[JournalInfo], pins: list[PinInfo]
    ) -> dict[int, list[PlannedAction]]:
        """Which action will touch which journal next (the transaction-log page)."""
        actions = []
        for name, runner in self.runners.items():
            schedules = self._schedules.get(name, [])

            def first(when: float, schedules: list[ScheduleTrigger] = schedules) -> float | None:
                times = [t for s in schedules if (t := s.first_run_from(when)) is not None]
                return min(times, default=None)

            actions.append(ScheduledAction(runner.config, first))
        return journal_plan(journals, pins, actions, self._clock.time())


def _webhook_steps(action: ActionConfig) -> list[Webhook]:
    return [step for step in action.steps if isinstance(step, Webhook)]


def _step_info(index: int, step: Step) -> StepInfo:
    kind = "if" if isinstance(step, IfCondition | IfDiskUsage) else "do"
    return {"index": index, "kind": kind, "module": step.module, "description": describe_step(step)}


def _run_dict(run_id: int, record: str) -> RunDict:
    """A stored run as the API shows it. A run stored before runs had event counts has
    no ``events``: None, as for any run that is not an event-driven action's window."""
    data = cast(RunDict, orjson.loads(record))
    data["id"] = run_id
    data.setdefault("events", None)
    return data


def _parameters(
    action: str, declared: tuple[ActionParameter, ...], given: Mapping[str, object]
) -> dict[str, str]:
    """The on-admin parameters of a run: declared ones only, each a string, required ones
    present, each matching its pattern; defaults filled in.

    Raises:
        BadParameters: the first problem.
    """
    names = {p.name for p in declared}
    unknown = sorted(set(given) - names)
    if unknown:
        allowed = ", ".join(sorted(names)) or "none"
        raise BadParameters(
            action, f"unknown parameter {unknown[0]!r} (this action takes: {allowed})"
        )
    out: dict[str, str] = {}
    for p in declared:
        value = given.get(p.name)
        if value is None:
            if p.default is None:
                raise BadParameters(action, f"parameter {p.name!r} is required")
            out[p.name] = p.default
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise BadParameters(action, f"parameter {p.name!r} must be a string")
        text = str(value)
        if len(text) > MAX_PARAMETER:
            raise BadParameters(
                action, f"parameter {p.name!r} is longer than {MAX_PARAMETER} characters"
            )
        if p.pattern is not None and re.fullmatch(p.pattern, text) is None:
            raise BadParameters(action, f"parameter {p.name!r} must match {p.pattern!r}")
        out[p.name] = text
    return out
