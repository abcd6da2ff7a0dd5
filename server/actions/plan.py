"""Which policy will touch which journal next, for the transaction-log page.

For every journal module of every action (archive, compress, remove) and every journal it
could still act on, :func:`journal_plan` says from when the journal is due
(:func:`spool.server.actions.journals.due_times`: now by ``Count``/``Size``, or once its last
record is older than ``Age``, never before an older journal) and so which run will act on
it: the first firing of one of the action's schedules at or after that time, or, for an
action that only runs on demand, at start-up, at shutdown, on disk usage or on an event,
the occasion in words. A pin that still holds the journal is shown (the run will skip it
unless the pin has moved by then), and so is a condition before the step (the run may
stop before it).

Sans-I/O: the caller hands the journals, the pins and, per action, a function giving the
first scheduled run at or after an instant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict

from spool.server.actions.journals import JournalOp, due_times
from spool.server.actions.results import iso
from spool.server.config import (
    ActionConfig,
    ArchiveJournals,
    CompressJournals,
    IfCondition,
    IfDiskUsage,
    OnAdmin,
    OnDiskUsage,
    OnExecute,
    OnSchedule,
    OnShutdown,
    OnStartup,
    RemoveJournals,
    Trigger,
)
from spool.server.txlog.retention.pins import PinInfo
from spool.server.txlog.storage.journal import JournalInfo

__all__ = ["PlannedAction", "ScheduledAction", "journal_plan"]


class PlannedAction(TypedDict):
    """One journal module that will act on one journal.

    Attributes:
        action: the action's name.
        step: the step's index in the action (1-based).
        module: the module.
        operation: ``archive``, ``compress`` or ``remove``.
        at: ISO-8601 UTC time of the scheduled run that will act, None when the action
            has no schedule (``when`` says what runs it).
        when: the same in words.
        due: from when the journal is due (ISO-8601 UTC), None when it is due now.
        pinned_by: who holds the journal now (the run skips it while they do), or None.
        conditional: a condition comes before the step (the run may stop before it).
    """

    action: str
    step: int
    module: str
    operation: str
    at: str | None
    when: str
    due: str | None
    pinned_by: str | None
    conditional: bool


@dataclass(frozen=True, slots=True)
class ScheduledAction:
    """An action and when its schedules fire.

    Attributes:
        config: the action.
        first_run_from: the first scheduled firing at or after a wall time, None when it
            has no schedule.
    """

    config: ActionConfig
    first_run_from: Callable[[float], float | None]


def _occasion(trigger: Trigger) -> str | None:
    """An unscheduled trigger in words (None for a schedule)."""
    match trigger:
        case OnAdmin():
            return "when run on demand"
        case OnStartup():
            return "at the next start-up"
        case OnShutdown():
            return "at shutdown"
        case OnDiskUsage():
            return f"when {trigger.label} is above {trigger.above:g}% used"
        case OnExecute():
            return f"when event {trigger.event} is raised"
        case OnSchedule():
            return None
        case _:  # an event trigger: the loader keeps journal modules out of its actions
            return f"on each {trigger.module} event"


def _op(step: object) -> JournalOp | None:
    if isinstance(step, ArchiveJournals):
        return "archive"
    if isinstance(step, CompressJournals):
        return "compress"
    if isinstance(step, RemoveJournals):
        return "remove"
    return None


def journal_plan(
    journals: Sequence[JournalInfo],
    pins: Sequence[PinInfo],
    actions: Sequence[ScheduledAction],
    now: float,
) -> dict[int, list[PlannedAction]]:
    """Journal id -> the journal modules that will act on it, soonest first.

    Entries with a time come first (by time), then the unscheduled ones.
    """
    lowest = min(pins, key=lambda p: p.seq, default=None)
    by_id = {j.id: j for j in journals}
    plan: dict[int, list[PlannedAction]] = {}
    # many journals share a due time (due now) and a run: format and look up each once
    # (the page asks every 3 s; formatting was half the time over 1,000 journals)
    stamps: dict[float, str] = {}

    def stamp(t: float) -> str:
        text = stamps.get(t)
        if text is None:
            text = stamps[t] = iso(t)
        return text

    for scheduled in actions:
        action = scheduled.config
        runs: dict[float, float | None] = {}
        occasions = [o for t in action.triggers if (o := _occasion(t)) is not None]
        has_schedule = any(isinstance(t, OnSchedule) for t in action.triggers)
        conditional = False
        for index, step in enumerate(action.steps, start=1):
            if isinstance(step, IfCondition | IfDiskUsage):
                conditional = True
                continue
            op = _op(step)
            if op is None or not isinstance(
                step, ArchiveJournals | CompressJournals | RemoveJournals
            ):
                continue
            for journal_id, due in due_times(op, journals, step.limits, now).items():
                at = None
                if has_schedule:
                    start = max(due, now)
                    if start not in runs:
                        runs[start] = scheduled.first_run_from(start)
                    at = runs[start]
                if at is not None:
                    when = f"{action.name} runs at {stamp(at)}"
                elif occasions:
                    when = " or ".join(occasions)
                else:
                    continue
                journal = by_id[journal_id]
                pinned = (
                    lowest.owner if lowest is not None and journal.last_seq >= lowest.seq else None
                )
                plan.setdefault(journal_id, []).append(
                    {
                        "action": action.name,
                        "step": index,
                        "module": step.module,
                        "operation": op,
                        "at": stamp(at) if at is not None else None,
                        "when": when,
                        "due": stamp(due) if due != -math.inf else None,
                        "pinned_by": pinned,
                        "conditional": conditional,
                    }
                )
    for entries in plan.values():
        entries.sort(key=lambda e: (e["at"] is None, e["at"] or "", e["action"], e["step"]))
    return plan
