"""The queues' hold: messages this instance keeps back because records that may have
acked them are missing here (docs/queues.md "Held after a loss").

A queue's ``QUEUE_ACK`` and ``QUEUE_TRANSFER`` records are what keep a message that was
acked from being delivered again. An instance that lacks a range of its log rebuilds its
queues without the records of that range, so a message acked there is back in the queue
until the range comes back. Two kinds of range, each keyed on the log's sequence so a
hold costs nothing per message while none is on:

- **a fence** (server/txlog/damage/fences.py) the start-up rebuild went past: the messages
  recorded up to the fence's last seq are held, in every queue, until a repair writes
  the range back and the queues take it in (``QueueRefold``), or an operator releases
  the fence (then they go again: at least once).
- **a resync**: the log lost records it cannot name (a torn tail cut at open:
  ``lost_since``), or started empty (wiped, or new): the messages of replicated queues
  recorded here before the start-up, and those that come back by replication with a
  time before it, are held until every source has resent what it holds (its inbound
  link recorded everything the source held when its stream began:
  ``InboundLink.resynced``, server/replication/inbound.py). A source that does not come
  keeps the hold; an operator may end it (``POST /api/queues/release_hold``).

Messages recorded after the range (new work) are not held.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from spool.server.alerts import Alert, iso_time

__all__ = ["QueueHold", "ResyncHold"]


@dataclass(slots=True)
class ResyncHold:
    """A resync the replicated queues wait for.

    Attributes:
        through: the log's last seq at open (messages up to it are held).
        before_us: the time of the open: messages that come back by replication with an
            earlier time are held too.
        why: ``lost tail`` or ``empty log``.
        waiting: the sources that have not resent what they hold yet.
        since_us: when the hold began.
    """

    through: int
    before_us: int
    why: str
    waiting: set[str]
    since_us: int


@dataclass(slots=True)
class QueueHold:
    """Every hold on now: the fenced ranges the queues were rebuilt without, and a
    resync (None: none)."""

    fences: list[tuple[int, int]] = field(default_factory=list)
    fences_since_us: int = 0
    resync: ResyncHold | None = None

    def through(self, start_seq: int, replicated: bool) -> int:
        """The last seq a queue holds (0: none): that of the last fence at or after its
        checkpoint ``start_seq``, and a resync's for a replicated queue."""
        fenced = max((last for _first, last in self.fences if last >= start_seq), default=0)
        resync = self.resync
        if resync is None or not replicated:
            return fenced
        return max(fenced, resync.through)

    def before_us(self, replicated: bool) -> int:
        """Messages of a replicated queue that come back by replication with a time
        before this are held (0: none)."""
        resync = self.resync
        return resync.before_us if resync is not None and replicated else 0

    def reasons(self, replicated: bool) -> list[str]:
        """Why a queue holds messages, for ``/api/queues`` and the alert."""
        out = [f"fenced seqs {first}-{last} not repaired" for first, last in self.fences]
        resync = self.resync
        if resync is not None and replicated:
            out.append(f"{resync.why}: waiting for {_names(resync.waiting)} to resend")
        return out

    def alerts(self, held: Iterable[tuple[str, int]]) -> list[Alert]:
        """One alert while any queue holds messages (``/healthz`` degraded)."""
        held = [(name, n) for name, n in held if n]
        if not held and not self.fences and self.resync is None:
            return []
        since = min(
            (us for us in (self.fences_since_us, self.resync.since_us if self.resync else 0)
             if us),
            default=0,
        )  # fmt: skip
        counts = ", ".join(f"{name}: {n}" for name, n in held) or "none yet"
        why = self.reasons(replicated=True)
        return [
            {
                "id": "queue-held",
                "level": "warning",
                "title": "Queue messages held after a loss",
                "message": (
                    f"messages recorded before records this instance lacks are not "
                    f"delivered until those come back ({'; '.join(why)}), so none acked "
                    f"in them is delivered again. Held: {counts}."
                ),
                "since": iso_time(since / 1e6),
            }
        ]


def _names(names: Sequence[str] | set[str]) -> str:
    return ", ".join(sorted(names)) or "no source"
