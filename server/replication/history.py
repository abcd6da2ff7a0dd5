"""What happened to the links: connects, refusals, validation failures, sync changes.

Each :class:`LinkEvent` goes to the event log (as it happens), to a bounded in-memory list
per link (the admin API and the dashboard show the newest), and to the stats database's
``replication_event`` table at the next sampling tick (server/stats/writer.py), where it
stays as long as the samples do.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

__all__ = ["RECENT_PER_LINK", "LinkEvent", "LinkHistory"]

#: events kept in memory per link
RECENT_PER_LINK: Final = 50


@dataclass(frozen=True, slots=True)
class LinkEvent:
    """Something that happened to a link.

    Attributes:
        time: wall-clock seconds.
        link: the destination's name (out) or the source's name (in).
        direction: ``out`` (a destination of this instance) or ``in`` (a source).
        event: ``connected``, ``streaming``, ``disconnected``, ``refused``, ``downgraded``,
            ``upgrading``, ``upgraded``, ``reconnect``.
        detail: the why, for an operator.
    """

    time: float
    link: str
    direction: str
    event: str
    detail: str


class LinkHistory:
    """The newest events per link, and those not yet written to the stats database."""

    def __init__(self) -> None:
        self._recent: dict[tuple[str, str], deque[LinkEvent]] = {}
        self._unsaved: list[LinkEvent] = []

    def record(self, event: LinkEvent) -> None:
        key = (event.direction, event.link)
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = deque(maxlen=RECENT_PER_LINK)
        recent.append(event)
        if len(self._unsaved) < 10_000:
            self._unsaved.append(event)

    def recent(self, direction: str, link: str) -> list[LinkEvent]:
        """The newest events of one link, oldest first."""
        return list(self._recent.get((direction, link), ()))

    def drain(self) -> list[LinkEvent]:
        """The events not yet saved (the sampler writes them)."""
        out, self._unsaved = self._unsaved, []
        return out
