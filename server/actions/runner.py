"""One configured action: runs its conditions and modules in order, one run at a time.

A run starts from the variables every run has (the instance, the action, the trigger, the
time) plus what its trigger gives (the on-admin parameters and user, the disk reading, the
raising run's context), then runs each step in file order (:mod:`spool.server.actions.steps`).
A condition that does not hold stops the run there; a module that fails stops it too (as
in AMPS: a failed step must not let the steps that depend on it run). Every step gets its
own result, the ones never reached say ``not_run``.

An action never runs twice at once: a trigger that fires during a run is skipped (counted,
and written to the event log), and ``POST /api/actions/NAME`` answers 409. Each finished
run is kept in memory (the last one, a short history) and stored in the stats database
(``action_run``); a failure to store it goes to the event log and the run stands.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Final

from spool.server.actions.errors import ActionBusy
from spool.server.actions.history import HistoryWriter
from spool.server.actions.metricsdoc import MetricsDocument
from spool.server.actions.results import RunDict, RunRecord, iso
from spool.server.actions.steps import RaiseEvent, StepContext, WebhookOutlet, run_steps
from spool.server.clock import Clock
from spool.server.config import ActionConfig, Config
from spool.server.operations import Operations

__all__ = ["RECENT_RUNS", "ActionRunner"]

#: Runs of one action kept in memory (the stats database keeps more).
RECENT_RUNS: Final = 50


class ActionRunner:
    """Runs one action (see the module docstring).

    Args:
        config: the action.
        instance: the instance configuration.
        ops: the instance's admin surface.
        clock: the time source.
        metrics: the metrics document of conditions (shared by the instance's actions).
        raise_event: runs the actions an event triggers.
        webhooks: where its webhook steps post (None: the instance has no webhook step).
    """

    def __init__(
        self,
        config: ActionConfig,
        instance: Config,
        ops: Operations,
        clock: Clock,
        metrics: MetricsDocument,
        raise_event: RaiseEvent,
        *,
        webhooks: WebhookOutlet | None = None,
    ) -> None:
        self.config = config
        self.webhooks = webhooks
        self._instance = instance
        self._ops = ops
        self._clock = clock
        self._metrics = metrics
        self._raise_event = raise_event
        #: the run in progress, if any
        self.running: RunRecord | None = None
        #: the newest finished runs of this process, oldest first
        self.recent: deque[RunRecord] = deque(maxlen=RECENT_RUNS)
        #: the last run stored by an earlier process (read at start), until one runs here
        self.stored_last: RunDict | None = None
        #: runs finished (and recorded), and trigger firings skipped because a run was in
        #: progress
        self.runs = 0
        self.skipped = 0
        self._history = HistoryWriter(config.name, ops)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def last_run(self) -> RunDict | None:
        """The last finished run (of this process, else the one stored before it)."""
        if self.recent:
            return self.recent[-1].to_dict()
        return self.stored_last

    def _variables(self, trigger: str, extra: Mapping[str, str]) -> dict[str, str]:
        now = self._clock.time()
        return {
            **extra,
            "AMPS_INSTANCE_NAME": self._instance.name,
            "AMPS_ACTION_NAME": self.name,
            "AMPS_TRIGGER": trigger,
            "AMPS_DATETIME": iso(now),
            "AMPS_UNIX_TIMESTAMP": f"{now:.6f}",
        }

    async def run(
        self,
        trigger: str,
        detail: str,
        *,
        variables: Mapping[str, str] | None = None,
        user: str | None = None,
        parameters: Mapping[str, str] | None = None,
        depth: int = 0,
    ) -> RunRecord:
        """Run the action once.

        Args:
            trigger: the trigger module that started it.
            detail: what about the trigger (shown with the run).
            variables: what the trigger adds to the context (a raised event: the whole
                context of the raising run).
            user: who asked (on-admin).
            parameters: the on-admin parameters (also variables).
            depth: how many raised events led here.

        Raises:
            ActionBusy: a run of this action is in progress.
        """
        if self.running is not None:
            started = self.running.started
            raise ActionBusy(self.name, started, iso(started))
        params = dict(parameters or {})
        record = RunRecord(self.name, trigger, detail, self._clock.time(), user, params)
        self.running = record
        try:
            context = dict(variables or {})
            context.update(params)
            if user is not None:
                context["AMPS_USER"] = user
            ctx = StepContext(
                self._ops, self._instance, self._clock, self._metrics, self._raise_event,
                self._variables(trigger, context), depth, webhooks=self.webhooks,
            )  # fmt: skip
            await run_steps(self.config.steps, record, ctx)
            record.finish(self._clock.time())
        finally:
            self.running = None
        outcome = record.outcome or "failed"
        self._ops.events.emit(
            "error" if outcome == "failed" else "warning" if outcome == "partial" else "info",
            "actions", "run", action=self.name, trigger=trigger, detail=detail, outcome=outcome,
            message=record.message, duration_s=round((record.finished or 0) - record.started, 6),
            files=len(record.files), **({"user": user} if user is not None else {}),
        )  # fmt: skip
        await self._history.store(record)
        # counted once recorded: whoever waits for a run to be counted finds it stored
        self.runs += 1
        self.recent.append(record)
        return record
