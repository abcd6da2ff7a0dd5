"""What an operator must see on every page right now: conditions, not events.

An event (the event log) says something happened; an alert says something *is* the case
and stays until it is not: the transaction log refuses writes (a write outage: its cause,
since when, the next retry), runs without its preallocated journal files, or holds
damaged journal ranges. The admin
API (``/api/instance``), the dashboard's banner on every page and its live stream read
them from here, so the three always agree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal, TypedDict

from spool.server.txlog import TransactionLog

__all__ = ["Alert", "iso_time", "txlog_alerts"]


class Alert(TypedDict):
    """One condition to show until it ends.

    Attributes:
        id: stable name of the condition (``txlog-refusing-writes``...), for pages that
            update their banners in place.
        level: ``error`` (the instance cannot do part of its job) or ``warning``.
        title: a few words.
        message: what is going on and what it means, with the cause.
        since: when it began (ISO-8601 UTC).
    """

    id: str
    level: Literal["error", "warning"]
    title: str
    message: str
    since: str


def txlog_alerts(txlog: TransactionLog | None) -> list[Alert]:
    """The transaction log's alerts: a write outage, a preallocation shortfall, damage."""
    if txlog is None:
        return []
    alerts: list[Alert] = []
    outage = txlog.write_outage
    if outage is not None:
        retry = (
            f"; next retry {iso_time(outage.next_attempt)}"
            if outage.next_attempt is not None
            else ""
        )
        n = outage.pending_records
        kept = f"{n} accepted record{'' if n == 1 else 's'} {'is' if n == 1 else 'are'}"
        alerts.append(
            {
                "id": "txlog-refusing-writes",
                "level": "error",
                "title": "Transaction log refusing writes",
                "message": (
                    f"{outage.error}. Publishes to recorded topics fail with 'txlog full' "
                    f"and persisted acks wait; {kept} kept and written once the disk takes "
                    f"writes again "
                    f"({outage.attempts} retries so far{retry})."
                ),
                "since": iso_time(outage.since),
            }
        )
    damage = txlog.damage
    fences = txlog.fences
    if damage or fences:
        parts = [
            f"seqs {f.first_seq}..{f.last_seq} ({f.reason}; {f.repair})" for f in fences[:5]
        ] + [
            f"{d.path.rsplit('/', 1)[-1]} seqs {d.first_seq}.."
            f"{d.last_seq if d.last_seq is not None else '?'} ({d.reason}; not fenced yet)"
            for d in damage[: max(0, 5 - len(fences))]
        ]
        n = len(fences) + len(damage)
        more = f" and {n - len(parts)} more" if n > len(parts) else ""
        since = min([f.found_us for f in fences] + [d.found_us for d in damage])
        alerts.append(
            {
                "id": "txlog-damaged",
                "level": "error",
                "title": "Damaged journal records",
                "message": (
                    f"{n} damaged range{'' if n == 1 else 's'} in the transaction log: "
                    f"{'; '.join(parts)}{more}. These records are not served; the records "
                    "around them are. A repair from a replication peer writes them back."
                ),
                "since": iso_time(since / 1e6),
            }
        )
    shortfall = txlog.preallocation_shortfall
    if shortfall is not None:
        alerts.append(
            {
                "id": "txlog-preallocation",
                "level": "warning",
                "title": "Journal files not preallocated",
                "message": (
                    f"{shortfall.ready} of {shortfall.wanted} preallocated journal files "
                    f"ready ({shortfall.error}). The log writes without them; the disk "
                    "may be close to full."
                ),
                "since": iso_time(shortfall.since),
            }
        )
    return alerts


def iso_time(ts: float) -> str:
    """A wall time as an alert shows it (ISO-8601 UTC, whole seconds)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
