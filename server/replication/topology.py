"""Where messages go in a fabric: what a destination drops (pure).

What does a destination not get? (:func:`drops_of`) The topics its source records that
none of its topic blocks takes, the topics a block takes only when its ``Filter`` matches,
and - when its ``PassThrough`` does not pass every group - the messages that arrived at the
source by replication from a group it does not pass on. An instance says so at start-up
(``replication/destination_drops``), ``GET /api/replication`` shows it per destination and
the dashboard marks the link, so an operator learns it before a failover does.

It works on configuration summaries (server/replication/validation.py), so the same rule
explains any instance's links.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypedDict

from server.replication.validation import Destination, Rule, Summary

__all__ = ["Drops", "DropsInfo", "drops_of", "passes_every_group"]

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
