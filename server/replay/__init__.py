"""Bookmark-subscription cursors: replay, then live, from the transaction log.

A bookmark subscription is fed by a cursor over the transaction log for its **whole
life**: it replays from its start point and, having read everything the log holds, waits
for the next durable record and keeps reading. The cut-over to live is the cursor catching
up, so it cannot gap or duplicate; memory stays bounded (one batch per cursor) and a slow
reader is paced by its sink's ``deliver()``. Paused subscriptions resumed together share
one cursor (a *group*) so their messages reach the client in log order. The same cursors
serve live subscriptions that spilled after a burst (server/spills.py). Time comes from an
injected :class:`~spool.server.clock.Clock`. See docs/bookmarks.md "How a bookmark
subscription runs" and "Modules of ``server/replay/``". The decisions
taken where the AMPS model leaves room are in docs/bookmarks.md. Every name
below is importable from ``spool.server.replay`` itself.
"""

from __future__ import annotations

from spool.server.replay.conflation import Conflator
from spool.server.replay.cursor import ReplayCursor, resume_together
from spool.server.replay.errors import ReplayGapError
from spool.server.replay.member import ReplayMember, build_member
from spool.server.replay.pacing import BURST_WINDOW, MAX_LAG, RatePacer
from spool.server.replay.plan import ReplayPlan, StopRule, Verdict, plan_replay, resolve_start
from spool.server.replay.ports import (
    DurableLimit,
    FunctionLimit,
    LowestLimit,
    ReadLimit,
    ReplaySink,
    ReplaySource,
)

__all__ = [
    "BURST_WINDOW",
    "MAX_LAG",
    "Conflator",
    "DurableLimit",
    "FunctionLimit",
    "LowestLimit",
    "RatePacer",
    "ReadLimit",
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
