"""Bookmark-subscription cursors: replay, then live, from the transaction log.

A bookmark subscription is fed by a cursor over the transaction log for its **whole
life**: it replays from its start point, and once it has read everything the log holds it
waits for the next durable record (``ReplaySource.wait_durable``) and keeps reading. The
"cut-over to live" is therefore just the cursor catching up: it cannot gap or duplicate,
however fast publishers publish, because there is one ordered source and one position.
Memory stays bounded (one batch per cursor) and a slow reader is paced by its sink's
``deliver()``, which waits while the client's outbound buffer is full, so a replay never
trips the slow-client byte limit (a client that takes nothing at all for
``SlowClientTimeout`` is cut by server/stalls.py, which frees its cursor). The same
cursors serve live subscriptions that spilled after a burst (server/spills.py, with
``CatchUpSink``).

Modules, lowest first (each imports only those above it; the pure ones are tested
alone)::

    errors.py      ReplayGapError            a source that broke its contract
    ports.py       ReplaySource, ReplaySink, Horizon (protocols); DurableHorizon,
                   FunctionHorizon, LowestHorizon (the strictest of several)
    plan.py        plan_replay, resolve_start, ReplayPlan, StopRule
                                             bm spec + log indexes -> start seq, time gate,
                                             where a range ends
    pacing.py      RatePacer                 msgs/s, bytes/s, or NX the original pace
    conflation.py  Conflator                 conflation windows on the replay timeline
    member.py      ReplayMember, build_member
                                             one subscription: position, range, pace,
                                             conflation, top_n
    cursor.py      ReplayCursor, resume_together
                                             one loop (and task) reading the log and
                                             feeding one or more members

A cursor with several members is a *group*: paused subscriptions resumed together share one
cursor (:func:`resume_together`, or moving members between cursors) so their messages
reach the client in log order.

Time comes from an injected :class:`~spool.server.clock.Clock`: pacing, conflation windows, future
range ends and the periodic position acks all use it, so tests drive a ``VirtualClock``.
Two adapters live beside the cursor: ``sink.py`` (``BookmarkSink``: what a client's
bookmark subscription takes from each batch, encoded by server/wire.py) and ``sources.py``
(``AppendedSource``: the log as a ``live`` subscription sees it). The decisions
taken where the AMPS model leaves room are in docs/bookmarks.md. Every name
below is importable from ``spool.server.replay`` itself.
"""

from __future__ import annotations

from spool.server.replay.conflation import Conflator
from spool.server.replay.cursor import ReplayCursor, resume_together
from spool.server.replay.errors import ReplayGapError
from spool.server.replay.member import MESSAGE_KINDS, ReplayMember, build_member
from spool.server.replay.pacing import BURST_WINDOW, MAX_LAG, RatePacer
from spool.server.replay.plan import ReplayPlan, StopRule, Verdict, plan_replay, resolve_start
from spool.server.replay.ports import (
    DurableHorizon,
    FunctionHorizon,
    Horizon,
    LowestHorizon,
    ReplaySink,
    ReplaySource,
)

__all__ = [
    "BURST_WINDOW",
    "MAX_LAG",
    "MESSAGE_KINDS",
    "Conflator",
    "DurableHorizon",
    "FunctionHorizon",
    "Horizon",
    "LowestHorizon",
    "RatePacer",
    "ReplayCursor",
    "ReplayGapError",
    "ReplayMember",
    "ReplayPlan",
    "ReplaySink",
    "ReplaySource",
    "StopRule",
    "Verdict",
    "build_member",
    "plan_replay",
    "resolve_start",
    "resume_together",
]
