"""A message's replication path: the instances it travelled through, and what it allows.

Each record keeps its path (``Record.path``, origin first): the instances it was received
from, each written ``NAME@GROUP`` (or ``NAME`` when the group is the name, the default).
Names and groups are ``[A-Za-z0-9_.-]`` (server/config/values.py ``read_name``), so ``@``
cannot be part of either. The receiving instance appends the sender: the sender does not
rewrite what it sends. A message published directly to an instance has an empty path
there.

Two routing rules read it (docs/replication.md "Routing", after AMPS's):

- **loop protection**: a message never goes to an instance already on its path. Names are
  unique in a fabric and each hop carries its group too, so a message passes through an
  instance (and group) at most once;
- **passthrough**: a message that arrived by replication goes on to a destination only
  when the *group of the instance it arrived from* (the last hop) matches one of the
  destination's PassThrough patterns; a message published here always may.

Pure functions; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Hop", "PassThrough", "format_hop", "on_path", "parse_hop"]


@dataclass(frozen=True, slots=True)
class Hop:
    """One instance on a path."""

    name: str
    group: str


def format_hop(name: str, group: str) -> str:
    """The path entry of an instance (``NAME`` when its group is its name)."""
    return name if group == name else f"{name}@{group}"


def parse_hop(entry: str) -> Hop:
    """A path entry back as name and group."""
    name, sep, group = entry.partition("@")
    return Hop(name, group if sep else name)


def on_path(path: Sequence[str], name: str) -> bool:
    """Whether the instance called ``name`` is already on ``path``."""
    return any(entry == name or entry.partition("@")[0] == name for entry in path)


class PassThrough:
    """A destination's PassThrough patterns, compiled once.

    Args:
        patterns: regexes over group names, matched with ``re.search`` like every other
            pattern of the configuration (anchor with ``^...$`` for whole names); none =
            only messages published here.
    """

    __slots__ = ("_cache", "_patterns")

    def __init__(self, patterns: Sequence[str]) -> None:
        self._patterns = tuple(re.compile(p) for p in patterns)
        self._cache: dict[str, bool] = {}

    def allows(self, path: Sequence[str]) -> bool:
        """Whether a message with this path may go on (published here: always)."""
        if not path:
            return True
        last = path[-1]
        allowed = self._cache.get(last)
        if allowed is None:
            group = parse_hop(last).group
            allowed = any(p.search(group) for p in self._patterns)
            if len(self._cache) < 4096:
                self._cache[last] = allowed
        return allowed
