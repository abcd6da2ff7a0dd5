"""The transaction-log page's plan (``journal_plan``), against a literal oracle.

The oracle builds, for every journal module of every action and every journal it will act
on, the entry the rules describe, calling the action's schedule for every entry and
formatting every instant anew; then sorts them soonest first. The code under test shares
each instant's text and each schedule lookup within a call (the page asks every 3 s), which
must not change a single entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.actions.journals import JournalOp, due_times
from spool.server.actions.plan import PlannedAction, ScheduledAction, journal_plan
from spool.server.actions.results import iso
from spool.server.config import (
    ActionConfig,
    ArchiveJournals,
    CompressJournals,
    IfCondition,
    JournalLimits,
    OnAdmin,
    OnSchedule,
    RemoveJournals,
    Schedule,
    Step,
    Template,
    Trigger,
)
from spool.server.txlog.retention.pins import PinInfo
from spool.server.txlog.storage.journal import JournalInfo
from tests.unit.actions.test_journals import NOW, limits_strategy, logs

HOUR = 3600.0


def next_hour(t: float) -> float:
    """A schedule firing at every whole hour."""
    return math.ceil(t / HOUR) * HOUR


def module(op: str, limits: JournalLimits) -> Step:
    if op == "archive":
        return ArchiveJournals(limits)
    if op == "compress":
        return CompressJournals(limits)
    return RemoveJournals(limits)


@st.composite
def actions_strategy(draw: st.DrawFn) -> list[ActionConfig]:
    out = []
    for k in range(draw(st.integers(1, 3))):
        triggers: list[Trigger] = []
        if draw(st.booleans()):
            triggers.append(OnSchedule(Schedule("every", interval=HOUR, text="1h")))
        if not triggers or draw(st.booleans()):
            triggers.append(OnAdmin(()))
        steps: list[Step] = []
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.integers(0, 4)) == 0:
                steps.append(IfCondition(Template.parse("/a = 1")))
            steps.append(
                module(draw(st.sampled_from(["archive", "compress", "remove"])),
                       draw(limits_strategy))
            )  # fmt: skip
        out.append(ActionConfig(f"a{k}", tuple(triggers), tuple(steps)))
    return out


def oracle(
    journals: list[JournalInfo], pins: list[PinInfo], actions: list[ActionConfig], now: float
) -> dict[int, list[PlannedAction]]:
    lowest = min(pins, key=lambda p: p.seq, default=None)
    plan: dict[int, list[PlannedAction]] = {}
    for action in actions:
        scheduled = any(isinstance(t, OnSchedule) for t in action.triggers)
        conditional = False
        for index, step in enumerate(action.steps, start=1):
            if isinstance(step, IfCondition):
                conditional = True
                continue
            assert isinstance(step, ArchiveJournals | CompressJournals | RemoveJournals)
            op: JournalOp = (
                "archive" if isinstance(step, ArchiveJournals)
                else "compress" if isinstance(step, CompressJournals) else "remove"
            )  # fmt: skip
            for journal_id, due in due_times(op, journals, step.limits, now).items():
                at = next_hour(max(due, now)) if scheduled else None
                journal = next(j for j in journals if j.id == journal_id)
                plan.setdefault(journal_id, []).append({
                    "action": action.name, "step": index, "module": step.module,
                    "operation": op, "at": iso(at) if at is not None else None,
                    "when": f"{action.name} runs at {iso(at)}" if at is not None
                    else "when run on demand",
                    "due": iso(due) if due != -math.inf else None,
                    "pinned_by": lowest.owner
                    if lowest is not None and journal.last_seq >= lowest.seq else None,
                    "conditional": conditional,
                })  # fmt: skip
    for entries in plan.values():
        entries.sort(key=lambda e: (e["at"] is None, e["at"] or "", e["action"], e["step"]))
    return plan


@settings(max_examples=150, deadline=None)
@given(journals=logs(), actions=actions_strategy(), pin=st.none() | st.integers(1, 45))
def test_the_plan_is_the_oracles_and_each_schedule_is_asked_once_per_instant(
    journals: list[JournalInfo], actions: list[ActionConfig], pin: int | None
) -> None:
    pins = [] if pin is None else [PinInfo("replay:r:s", pin)]
    asked: list[tuple[str, float]] = []

    def schedule_of(name: str) -> Callable[[float], float]:
        def first_run_from(t: float) -> float:
            asked.append((name, t))
            return next_hour(t)

        return first_run_from

    scheduled = [ScheduledAction(a, schedule_of(a.name)) for a in actions]
    assert journal_plan(journals, pins, scheduled, NOW) == oracle(journals, pins, actions, NOW)
    # each action's schedule is asked once per instant, however many journals are due then
    assert len(asked) == len(set(asked))
