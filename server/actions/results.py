"""What a run of an action did: one :class:`StepResult` per condition and module, and the
:class:`RunRecord` of the whole run, with the JSON shapes the admin API lists them in.

Outcomes of a step:

=============  =======================================================================
``ok``         the condition held, or the module did what it was asked
``partial``    a journal module left due journals that a pin still needs (retried next run)
``stopped``    the condition did not hold: the steps after it are not run
``failed``     the module failed (the steps after it are not run, as in AMPS)
``not_run``    an earlier step stopped or failed
=============  =======================================================================

Outcome of a run: ``failed`` if a step failed, else ``stopped`` if a condition stopped it,
else ``partial`` if a step was partial, else ``succeeded``.

An event-driven action (run once per message) is not recorded run by run: its
:class:`EventTally` counts what its lane and its firings did, and its history holds one
*window* record per ``Tuning/ActionHistoryInterval`` (the tally's change over the window in
``events``) plus the first few failed firings of each window in full.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Literal, TypedDict

__all__ = [
    "EventTally",
    "PinnedDict",
    "RunDict",
    "RunOutcome",
    "RunRecord",
    "StepDict",
    "StepResult",
    "StepStatus",
    "WebhookTally",
    "iso",
]

StepStatus = Literal["ok", "partial", "stopped", "failed", "not_run"]
RunOutcome = Literal["succeeded", "partial", "stopped", "failed"]


class PinnedDict(TypedDict):
    """A journal left for a later run: who holds it from which sequence."""

    journal: int
    owner: str
    seq: int


class StepDict(TypedDict):
    """One step of a run, as the admin API shows it."""

    index: int
    kind: str
    module: str
    status: str
    message: str
    duration_s: float
    journals: list[int]
    files: list[str]
    pinned: list[PinnedDict]
    variables: dict[str, str]


class RunDict(TypedDict):
    """One run, as the admin API and the history table show it."""

    id: int | None
    action: str
    trigger: str
    detail: str
    user: str | None
    parameters: dict[str, str]
    started: str
    finished: str | None
    duration_s: float | None
    outcome: str | None
    message: str
    steps: list[StepDict]
    files: list[str]
    #: an event-driven action's window: what its tally counted over it (None otherwise)
    events: dict[str, int] | None


def iso(ts: float) -> str:
    """An instant as ISO-8601 UTC, to the millisecond."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


@dataclass(slots=True)
class StepResult:
    """The result of one condition or module.

    Attributes:
        index: its position in the action (1-based, as the operator counts).
        kind: ``if`` or ``do``.
        module: the module name.
        status: see the module docstring.
        message: what happened, for a person.
        duration_s: how long it took.
        journals: journal ids it acted on.
        files: files it created, moved or deleted.
        pinned: due journals it left because of a pin.
        variables: the variables it added to the run's context.
    """

    index: int
    kind: str
    module: str
    status: StepStatus
    message: str = ""
    duration_s: float = 0.0
    journals: list[int] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    pinned: list[PinnedDict] = field(default_factory=list)
    variables: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> StepDict:
        return {
            "index": self.index,
            "kind": self.kind,
            "module": self.module,
            "status": self.status,
            "message": self.message,
            "duration_s": round(self.duration_s, 6),
            "journals": list(self.journals),
            "files": list(self.files),
            "pinned": list(self.pinned),
            "variables": dict(self.variables),
        }


@dataclass(slots=True)
class RunRecord:
    """One run of an action, filled in as it goes.

    Attributes:
        action: the action's name.
        trigger: the module that started it (``amps-action-on-schedule`` ...).
        detail: what about the trigger (``daily at 02:00 UTC``, ``event cleanup``).
        user: who asked (on-admin runs).
        parameters: the on-admin parameters it ran with.
        started: epoch seconds.
        finished: epoch seconds, None while it runs.
        steps: the results so far.
        outcome: None while it runs.
        id: its row in the stats database, once written.
    """

    action: str
    trigger: str
    detail: str
    started: float
    user: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    finished: float | None = None
    steps: list[StepResult] = field(default_factory=list)
    outcome: RunOutcome | None = None
    id: int | None = None
    events: dict[str, int] | None = None

    @property
    def files(self) -> list[str]:
        """Every file the run's steps touched, in order."""
        return [f for step in self.steps for f in step.files]

    @property
    def message(self) -> str:
        """One line: the first failed or stopping step's message, else a summary."""
        for step in self.steps:
            if step.status in ("failed", "stopped"):
                return f"step {step.index} ({step.module}): {step.message}"
        partial = [s for s in self.steps if s.status == "partial"]
        if partial:
            return "; ".join(f"step {s.index}: {s.message}" for s in partial)
        done = [s.message for s in self.steps if s.kind == "do" and s.message]
        return "; ".join(done)

    def finish(self, at: float) -> None:
        """Close the run at ``at`` and settle its outcome from the steps."""
        self.finished = at
        statuses = {s.status for s in self.steps}
        if "failed" in statuses:
            self.outcome = "failed"
        elif "stopped" in statuses:
            self.outcome = "stopped"
        elif "partial" in statuses:
            self.outcome = "partial"
        else:
            self.outcome = "succeeded"

    def to_dict(self) -> RunDict:
        return {
            "id": self.id,
            "action": self.action,
            "trigger": self.trigger,
            "detail": self.detail,
            "user": self.user,
            "parameters": dict(self.parameters),
            "started": iso(self.started),
            "finished": iso(self.finished) if self.finished is not None else None,
            "duration_s": (
                round(self.finished - self.started, 6) if self.finished is not None else None
            ),
            "outcome": self.outcome,
            "message": self.message,
            "steps": [s.to_dict() for s in self.steps],
            "files": self.files,
            "events": dict(self.events) if self.events is not None else None,
        }


@dataclass(slots=True)
class EventTally:
    """What an event-driven action did since the instance started (``GET /api/actions``).

    ``offered`` is every candidate message its triggers saw: ``loop_cut`` were kept out
    of its lane (derived too many times over: a loop), ``dropped`` did not fit in it (or
    came while it stopped), the rest were taken by its worker, of which ``matched``
    passed the trigger's filter and each ran once (``runs`` = ``succeeded`` + ``stopped``
    + ``failed``).

    Attributes:
        offered: candidate messages its triggers saw.
        dropped: candidates its lane had no room for.
        loop_cut: candidates not offered because they derive from a chain of derived
            messages as long as the limit.
        matched: candidates that passed the trigger's filter.
        runs: firings run (a firing: the steps, once, for one message).
        succeeded, stopped, failed: firings by outcome.
        derived: messages its publish steps stored (or delivered, on a topic the log does
            not record).
        derived_duplicates: derived messages the log already held (a re-run): not stored
            again.
        echo_suppressed: echo lines over a step's ``MaxPerSecond``.
        webhooks_queued, webhooks_sent, webhooks_failed, webhooks_dropped,
            webhooks_retried: its webhook posts (see :class:`WebhookTally`).
    """

    offered: int = 0
    dropped: int = 0
    loop_cut: int = 0
    matched: int = 0
    runs: int = 0
    succeeded: int = 0
    stopped: int = 0
    failed: int = 0
    derived: int = 0
    derived_duplicates: int = 0
    echo_suppressed: int = 0
    webhooks_queued: int = 0
    webhooks_sent: int = 0
    webhooks_failed: int = 0
    webhooks_dropped: int = 0
    webhooks_retried: int = 0

    def counts(self) -> dict[str, int]:
        """The counters by name."""
        return asdict(self)

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """How much each counter moved since ``before`` (an earlier :meth:`counts`)."""
        return {k: v - before.get(k, 0) for k, v in self.counts().items()}


@dataclass(slots=True)
class WebhookTally:
    """What the webhook steps of one action posted since the instance started.

    Attributes:
        queued: posts the sender took (each ends ``sent``, ``failed`` or, cut off by
            the stop's budget, ``dropped``).
        sent: posts the destination answered with a 2xx.
        failed: posts answered with a final error, or with no answer after the last retry.
        dropped: posts refused (the instance's queue full, or stopping) or cut off by
            the stop's budget before they were delivered.
        retried: attempts beyond each post's first.
    """

    queued: int = 0
    sent: int = 0
    failed: int = 0
    dropped: int = 0
    retried: int = 0

    def counts(self) -> dict[str, int]:
        """The counters by name."""
        return asdict(self)
