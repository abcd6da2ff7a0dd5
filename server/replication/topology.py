"""Where messages go in a fabric: what a destination drops, a topic's route (pure).

What does a destination not get? (:func:`drops_of`) The topics its source records that
none of its topic blocks takes, the topics a block takes only when its ``Filter`` matches,
and - when its ``PassThrough`` does not pass every group - the messages that arrived at the
source by replication from a group it does not pass on. An instance says so at start-up
(``replication/destination_drops``), ``GET /api/replication`` shows it per destination and
the dashboard marks the link, so an operator learns it before a failover does.

Where does a message of topic T published here go? (:func:`route_trace`) Every instance
it reaches, by which links (each with its sync type), found by applying the routing rules
(server/replication/routing.py: the topic is recorded, a block takes it, passthrough by the
group of the last hop, loop protection by name) hop after hop over the configuration
summaries of the fabric's instances (server/replication/fabricview.py gathers them). A
block with a ``Filter`` takes only some messages: the hop says so. ``GET
/api/fabric/route`` answers with it, and the fabric page draws it.

Both work on configuration summaries (server/replication/validation.py), this instance's
and those learned from the fabric, so the same rules explain any instance's links.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, TypedDict

from spool.server.replication.hops import format_hop, on_path, parse_hop
from spool.server.replication.validation import Destination, Rule, Summary

__all__ = [
    "MAX_ROUTES",
    "Drops",
    "DropsInfo",
    "Reached",
    "RouteTrace",
    "TraceHop",
    "TraceRoute",
    "drops_of",
    "passes_every_group",
    "route_trace",
]

#: routes listed at most (a dense fabric has many simple paths; the shortest are listed
#: first, and the trace says when it stopped)
MAX_ROUTES: Final = 256

#: patterns that match every group name
_EVERY_GROUP: Final = frozenset({".*", "^.*", ".*$", "^.*$", "", "^", "(.*)", ".+", "^.+$"})


def passes_every_group(patterns: tuple[str, ...]) -> bool:
    """Whether PassThrough ``patterns`` let every group's messages go on."""
    return any(p in _EVERY_GROUP for p in patterns)


class DropsInfo(TypedDict):
    """What a destination does not get, as ``GET /api/replication`` shows it.

    ``topics``: the recorded topics (names or patterns) no block takes; ``filtered``: the
    topics a block takes only where its filter matches; ``groups``: None when every group
    passes through, else the PassThrough patterns (empty: none, only what is published
    here goes); ``summary``: the same in sentences, empty when it gets everything.
    """

    topics: list[str]
    filtered: list[dict[str, str]]
    groups: list[str] | None
    summary: list[str]


@dataclass(frozen=True, slots=True)
class Drops:
    """What one destination of an instance will not be sent (see :func:`drops_of`)."""

    topics: tuple[Rule, ...]
    filtered: tuple[tuple[Rule, str], ...]
    groups: tuple[str, ...] | None

    @property
    def anything(self) -> bool:
        return bool(self.topics or self.filtered or self.groups is not None)

    def sentences(self) -> list[str]:
        out = []
        if self.topics:
            names = ", ".join(repr(r.name) for r in self.topics)
            out.append(f"recorded topics no topic block takes: {names}")
        for rule, flt in self.filtered:
            out.append(f"{rule.name!r} only where {flt}")
        if self.groups is not None:
            if self.groups:
                pats = ", ".join(repr(p) for p in self.groups)
                out.append("messages that arrived by replication only from groups matching " + pats)
            else:
                out.append(
                    "no message that arrived by replication (empty PassThrough): only those "
                    "published to this instance"
                )
        return out

    def info(self) -> DropsInfo:
        return {
            "topics": [r.name for r in self.topics],
            "filtered": [{"topic": r.name, "filter": f} for r, f in self.filtered],
            "groups": list(self.groups) if self.groups is not None else None,
            "summary": self.sentences(),
        }


def drops_of(summary: Summary, dest: Destination) -> Drops:
    """What ``dest``, a destination of the instance ``summary`` describes, does not get."""
    uncovered = tuple(
        rule for rule in summary.txlog if not any(b.rule.covers(rule) for b in dest.blocks)
    )
    filtered = tuple((b.rule, b.filter) for b in dest.blocks if b.filter)
    groups = None if passes_every_group(dest.passthrough) else dest.passthrough
    return Drops(uncovered, filtered, groups)


# -- the route trace ----------------------------------------------------------------------


class TraceHop(TypedDict):
    """One link a message crosses: from ``source`` to ``target`` (instance names), its sync
    type (effective where the trace's instance knows it: its own links; else configured),
    the filter that decides which messages cross it (None: all of them) and, for this
    instance's own links, whether it is connected now (None elsewhere)."""

    source: str
    target: str
    sync_type: str | None
    filtered: str | None
    connected: bool | None


class TraceRoute(TypedDict):
    """One way a message reaches ``reaches``: the hops, in order."""

    reaches: str
    hops: list[TraceHop]


class Unreached(TypedDict):
    """A destination a message does not go to, and why."""

    source: str
    target: str
    reason: str


class Reached(TypedDict):
    """An instance a message reaches: over how few hops at best, whether only filtered
    (every route to it crosses a filter), and whether some route to it is sync all the way
    (its persisted acks then wait for it there)."""

    instance: str
    hops: int
    filtered: bool
    sync_path: bool


class RouteTrace(TypedDict):
    """``GET /api/fabric/route``: where a message of ``topic`` published on ``origin`` goes.

    ``reached``: every instance it reaches, each with the shortest route first and
    whether every route to it passes a filter (``filtered``: it gets only the messages
    that match); ``routes``: the routes (at most :data:`MAX_ROUTES`); ``not_reached``:
    links of the fabric the message does not cross, with the rule that stops it;
    ``unknown``: instances reached whose configuration is not known here, so the trace
    cannot go on from them; ``recorded``: whether the origin records the topic (when it
    does not, nothing is replicated).
    """

    topic: str
    origin: str
    recorded: bool
    reached: list[Reached]
    routes: list[TraceRoute]
    not_reached: list[Unreached]
    unknown: list[str]
    truncated: bool


@dataclass(slots=True)
class _State:
    instance: str
    path: tuple[str, ...]  # the hops it came through, origin first (NAME@GROUP)
    hops: list[TraceHop] = field(default_factory=list)


def _recorded(summary: Summary, topic: str) -> bool:
    return any(_takes(rule, topic) for rule in summary.txlog)


def _takes(rule: Rule, topic: str) -> bool:
    if rule.is_regex:
        return re.search(rule.name, topic) is not None
    return rule.name == topic


def route_trace(
    summaries: Mapping[str, Summary],
    origin: str,
    topic: str,
    *,
    sync_types: Mapping[tuple[str, str], str] | None = None,
    remote_names: Mapping[tuple[str, str], str] | None = None,
    connected: Mapping[tuple[str, str], bool] | None = None,
) -> RouteTrace:
    """Where a message of ``topic`` published on ``origin`` goes.

    Args:
        summaries: the configuration summary of every instance known, by name.
        origin: the instance it is published to.
        topic: its topic.
        sync_types: ``(source, destination name) -> effective sync type`` where known
            (this instance's own links); otherwise each hop shows the configured one.
        remote_names: ``(source, destination name) -> the instance that answered`` where
            it differs from the destination's name (a destination that reaches an
            instance of another name).
        connected: ``(source, destination name) -> connected now`` where known.
    """
    sync_types = sync_types or {}
    remote_names = remote_names or {}
    connected = connected or {}
    start = summaries.get(origin)
    recorded = start is not None and _recorded(start, topic)
    routes: list[TraceRoute] = []
    not_reached: dict[tuple[str, str], Unreached] = {}
    unknown: list[str] = []
    truncated = False
    queue: deque[_State] = deque([_State(origin, ())]) if recorded else deque()
    while queue:
        state = queue.popleft()
        here = summaries.get(state.instance)
        if here is None:
            if state.instance not in unknown:
                unknown.append(state.instance)
            continue
        if state.path and not _recorded(here, topic):
            continue  # not in its log: it delivers the message but replicates nothing
        arrived_from = parse_hop(state.path[-1]).group if state.path else None
        for dest in here.destinations:
            target = remote_names.get((here.name, dest.name), dest.name)
            if target == origin or on_path(state.path, target):
                continue  # loop protection: it has the message already
            why = _stopped(dest, topic, arrived_from, here.name)
            if why is not None:
                not_reached.setdefault((here.name, target), {
                    "source": here.name, "target": target, "reason": why,
                })  # fmt: skip
                continue
            not_reached.pop((here.name, target), None)
            flt = next((b.filter for b in dest.blocks if _takes(b.rule, topic)), None)
            hop: TraceHop = {
                "source": here.name,
                "target": target,
                "sync_type": sync_types.get((here.name, dest.name), dest.sync_type),
                "filtered": flt if flt and _all_filtered(dest, topic) else None,
                "connected": connected.get((here.name, dest.name)),
            }
            hops = [*state.hops, hop]
            if len(routes) >= MAX_ROUTES:
                truncated = True
                break
            routes.append({"reaches": target, "hops": hops})
            queue.append(_State(target, (*state.path, format_hop(here.name, here.group)), hops))
    return {
        "topic": topic,
        "origin": origin,
        "recorded": recorded,
        "reached": _reached(routes),
        "routes": routes,
        "not_reached": [
            u for k, u in not_reached.items() if not any(r["reaches"] == k[1] for r in routes)
        ],
        "unknown": unknown,
        "truncated": truncated,
    }


def _all_filtered(dest: Destination, topic: str) -> bool:
    """Whether every block of ``dest`` that takes ``topic`` has a filter."""
    return all(b.filter for b in dest.blocks if _takes(b.rule, topic))


def _stopped(dest: Destination, topic: str, arrived_from: str | None, here: str) -> str | None:
    """Why a message on instance ``here`` that arrived from group ``arrived_from`` (None:
    published there) does not go to ``dest`` (None: it goes)."""
    if not any(_takes(b.rule, topic) for b in dest.blocks):
        return f"no topic block of {here}'s destination {dest.name!r} takes {topic!r}"
    if arrived_from is not None and not any(re.search(p, arrived_from) for p in dest.passthrough):
        if not dest.passthrough:
            return (
                f"{here}'s destination {dest.name!r} has an empty PassThrough: it passes on "
                "only messages published to it"
            )
        pats = ", ".join(repr(p) for p in dest.passthrough)
        return (
            f"{here}'s destination {dest.name!r} does not pass group {arrived_from!r} through "
            f"(PassThrough {pats})"
        )
    return None


def _reached(routes: list[TraceRoute]) -> list[Reached]:
    out: dict[str, Reached] = {}
    for route in routes:
        name = route["reaches"]
        filtered = any(h["filtered"] for h in route["hops"])
        sync = all(h["sync_type"] == "sync" for h in route["hops"])
        entry = out.get(name)
        if entry is None:
            out[name] = {"instance": name, "hops": len(route["hops"]), "filtered": filtered,
                         "sync_path": sync}  # fmt: skip
        else:
            entry["filtered"] = entry["filtered"] and filtered
            entry["sync_path"] = entry["sync_path"] or sync
    return list(out.values())
