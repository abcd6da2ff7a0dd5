"""The bound on per-client series: which ones are kept, written, and deleted.

Every client and every subscription gets series of its own (``clients/C/...``,
``subscriptions/C/S/...``), and short-lived connections (a dashboard page's websocket, a
CLI run) would leave theirs behind for ever. The rule, for the sampler:

- A *group* is the series of one client (``clients/C``) or of one subscription
  (``subscriptions/C/S``). It is *live* while the tick writes it (the client is connected,
  the subscription exists) and *idle* after; its last-seen time is the last tick that
  wrote it.
- An idle group is deleted once it has been idle for ``Admin/ClientStatsRetention``.
- The groups together hold at most ``Admin/ClientStatsLimit`` series. Over the limit, the
  idle groups go first, the longest idle first; a live group is never deleted, so when the
  live groups alone fill the limit, a group not yet kept is not written (the first
  clients keep their history, the flood does not push it out) until room comes back.
- Every other series (``instance/``, ``topics/``, ``host/``, ...) is outside the rule:
  the instance totals stay whole whatever happens to the clients' series.

Pure (no I/O, no clock): :class:`ClientSeries` is the state machine, the sampler feeds it
each tick's values and deletes what it hands back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

#: the first segment of every per-client path, and how many segments name its group
GROUP_SEGMENTS: Final = {"clients": 2, "subscriptions": 3}


def group_of(path: str) -> str | None:
    """The group of a per-client series path (``clients/C``, ``subscriptions/C/S``), or
    None for a series the rule does not touch."""
    parts = path.split("/")
    size = GROUP_SEGMENTS.get(parts[0])
    if size is None or len(parts) <= size:
        return None
    return "/".join(parts[:size])


@dataclass(slots=True)
class _Group:
    last_seen: float
    paths: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Admission:
    """What one tick may write, and what it must delete.

    Attributes:
        values: the tick's values without the series refused by the limit.
        expired: paths of the groups deleted (idle too long, or pushed out by the limit).
        refused: groups not written this tick because the limit is full of live ones.
    """

    values: dict[str, float]
    expired: list[str]
    refused: list[str]


class ClientSeries:
    """The per-client groups of the stats database and their last-seen times.

    Args:
        retention: seconds an idle group is kept.
        limit: the most series all groups together may hold.
    """

    def __init__(self, retention: float, limit: int) -> None:
        self._retention = retention
        self._limit = limit
        self._groups: dict[str, _Group] = {}
        self._count = 0

    @property
    def count(self) -> int:
        """Series held by the groups kept now."""
        return self._count

    def groups(self) -> dict[str, float]:
        """Group -> last-seen time, for every group kept."""
        return {name: g.last_seen for name, g in self._groups.items()}

    def restore(self, rows: Iterable[tuple[str, float]]) -> None:
        """Take the series already in the database: ``(path, time of its newest
        sample)``; a group's last-seen time is its newest series'."""
        for path, last in rows:
            name = group_of(path)
            if name is None:
                continue
            group = self._groups.setdefault(name, _Group(last))
            group.last_seen = max(group.last_seen, last)
            if path not in group.paths:
                group.paths.add(path)
                self._count += 1

    def admit(self, now: float, values: Mapping[str, float]) -> Admission:
        """Apply the rule to one tick at ``now`` (see the module docstring)."""
        by_group: dict[str, list[str]] = {}
        out: dict[str, float] = {}
        for path, value in values.items():
            name = group_of(path)
            if name is None:
                out[path] = value
            else:
                by_group.setdefault(name, []).append(path)
        need = 0
        for name, paths in by_group.items():
            kept = self._groups.get(name)
            need += sum(1 for p in paths if kept is None or p not in kept.paths)
        expired = self._expire(now, by_group.keys(), need)
        refused: list[str] = []
        # Kept groups first (they never lose a series to a newcomer), then the new ones
        # in name order so a flood is admitted the same way every time.
        order = sorted(by_group, key=lambda n: (n not in self._groups, n))
        for name in order:
            paths = by_group[name]
            group = self._groups.get(name)
            new = [p for p in paths if group is None or p not in group.paths]
            if self._count + len(new) > self._limit:
                if group is None:
                    refused.append(name)
                    continue
                paths = [p for p in paths if p in group.paths]  # the limit is hard
                new = []
            if group is None:
                group = self._groups[name] = _Group(now)
            group.last_seen = now
            group.paths.update(new)
            self._count += len(new)
            for path in paths:
                out[path] = values[path]
        return Admission(out, expired, refused)

    def _expire(self, now: float, live: Iterable[str], need: int) -> list[str]:
        """Drop the idle groups past the retention, then the longest idle ones until
        ``need`` new series fit under the limit; returns the paths dropped."""
        live_set = set(live)
        idle = sorted(
            (g.last_seen, name) for name, g in self._groups.items() if name not in live_set
        )
        doomed: list[str] = []
        kept = self._count
        for last, name in idle:
            if now - last < self._retention and kept + need <= self._limit:
                break
            doomed.append(name)
            kept -= len(self._groups[name].paths)
        paths: list[str] = []
        for name in doomed:
            group = self._groups.pop(name)
            self._count -= len(group.paths)
            paths.extend(sorted(group.paths))
        return paths
