"""Identity conflicts found in a fabric: names that two instances, or two clients, use.

A fabric relies on two kinds of names being unique, and loses data silently when they are
not:

- **instance names** (``<Name>``): loop protection skips an instance whose name is on a
  message's path, so a second instance with that name never gets messages that passed
  through the first; an instance refuses a link from (or to) a second instance with the
  Name of one it is already linked with (their identities differ);
- **client names**: a publisher's identity is a hash of its client name, and replication
  de-duplicates by it, so two clients with one name on two instances make each other's
  messages look like duplicates.

:class:`Conflicts` keeps what was found, one entry per kind and name (how often, first
and last time, the latest detail), for ``GET /api/replication`` (``conflicts``) and the
alert every dashboard page shows (server/alerts.py) while one was seen within
:data:`ALERT_HOLD` seconds. The finder logs the event; this only remembers.
"""

from __future__ import annotations

from typing import Final, Literal, TypedDict

from spool.server.alerts import Alert, iso_time

__all__ = ["ALERT_HOLD", "ConflictInfo", "ConflictKind", "Conflicts"]

#: how long after it was last seen a conflict stays an alert (seconds)
ALERT_HOLD: Final = 3600.0
#: conflicts remembered at most (the oldest forgotten first)
MAX_KEPT: Final = 256

ConflictKind = Literal["instance_name", "client_name", "publisher"]

_TITLES: Final[dict[str, str]] = {
    "instance_name": "Two instances share a Name",
    "publisher": "Two publishers share an identity",
}


class ConflictInfo(TypedDict):
    """One conflict as the admin API shows it.

    Attributes:
        kind: ``instance_name`` (a link refused), ``client_name`` (a logon refused),
            ``publisher`` (messages with one bookmark and different bodies).
        name: the instance name, client name, or publisher (its name when known, else its
            hash).
        detail: what was found last, and where.
        count: how many times.
        first_seen, last_seen: wall times (seconds).
    """

    kind: str
    name: str
    detail: str
    count: int
    first_seen: float
    last_seen: float


class Conflicts:
    """The conflicts an instance found. Owned by the event loop."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], ConflictInfo] = {}

    def report(
        self, kind: ConflictKind, name: str, detail: str, now: float, count: int = 1
    ) -> bool:
        """Remember a conflict (``count`` occurrences); True when it is new."""
        key = (kind, name)
        entry = self._found.get(key)
        if entry is None:
            if len(self._found) >= MAX_KEPT:
                oldest = min(self._found, key=lambda k: self._found[k]["last_seen"])
                del self._found[oldest]
            self._found[key] = {"kind": kind, "name": name, "detail": detail, "count": count,
                                "first_seen": now, "last_seen": now}  # fmt: skip
            return True
        entry["count"] += count
        entry["last_seen"] = now
        entry["detail"] = detail
        return False

    def all(self) -> list[ConflictInfo]:
        """Every conflict remembered, newest first."""
        return sorted(self._found.values(), key=lambda c: c["last_seen"], reverse=True)

    def alerts(self, now: float) -> list[Alert]:
        """One alert per kind with a conflict seen within :data:`ALERT_HOLD` (a refused
        logon is not one: the refusal kept the names apart, nothing was lost)."""
        recent: dict[str, list[ConflictInfo]] = {}
        for c in self.all():
            if c["kind"] != "client_name" and now - c["last_seen"] <= ALERT_HOLD:
                recent.setdefault(c["kind"], []).append(c)
        alerts: list[Alert] = []
        for kind, found in recent.items():
            names = ", ".join(repr(c["name"]) for c in found[:5])
            more = f" and {len(found) - 5} more" if len(found) > 5 else ""
            alerts.append(
                {
                    "id": f"replication-conflict-{kind.replace('_', '-')}",
                    "level": "error",
                    "title": _TITLES[kind],
                    "message": (
                        f"{names}{more}: {found[0]['detail']} (seen {found[0]['count']} "
                        f"time{'' if found[0]['count'] == 1 else 's'}; GET /api/replication "
                        "lists every one; shown for an hour after the last)."
                    ),
                    "since": iso_time(min(c["first_seen"] for c in found)),
                }
            )
        return alerts
