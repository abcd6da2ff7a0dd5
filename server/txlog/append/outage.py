"""A write outage of the log: why it refuses writes, since when, and when it tries again.

When a journal write or fsync fails (a full disk, ``EIO``), the log does not stop for good:
it refuses appends, keeps every record it had accepted in memory, and retries the write on
its own. :class:`RetryPolicy` decides when (pure, so tested without time passing);
:class:`WriteOutage` is what the log reports meanwhile (to the durability horizon, the
admin API and the dashboard banner). Both are values: the group commit replaces the outage
at each failed attempt and drops it at the first success.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final, TypedDict

from spool.server.txlog.errors import TxlogWriteFailed

__all__ = ["MAX_BACKOFF_FACTOR", "RetryPolicy", "WriteOutage", "WriteOutageDict"]

#: how many times the retry interval doubles: up to 16 times ``WriteRetryInterval``
_MAX_DOUBLINGS: Final = 4
#: the retry interval grows up to this many times ``WriteRetryInterval``
MAX_BACKOFF_FACTOR: Final = 1 << _MAX_DOUBLINGS


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When to retry a failed write: ``interval``, then twice as long each time, capped.

    Doubling keeps a disk that stays full from being hammered (each attempt rewrites every
    record waiting, possibly megabytes); the cap at :data:`MAX_BACKOFF_FACTOR` times the
    interval bounds how long a disk that was freed waits to be noticed (16 s by default).
    Freeing space through the log itself (removing journals) retries at once instead.

    Attributes:
        interval: ``TransactionLog/WriteRetryInterval``, seconds.
    """

    interval: float

    def delay(self, failed_attempts: int) -> float:
        """Seconds to wait before the next attempt, after ``failed_attempts`` retries
        failed since the outage began (0 right after the first failure)."""
        return self.interval * (1 << min(max(failed_attempts, 0), _MAX_DOUBLINGS))


class WriteOutageDict(TypedDict):
    """A :class:`WriteOutage` as JSON (the admin API and the dashboard)."""

    since: str
    error: str
    operation: str
    path: str
    attempts: int
    next_attempt: str | None
    pending_records: int


@dataclass(frozen=True, slots=True)
class WriteOutage:
    """The log refuses writes (see the module docstring).

    Attributes:
        error: the latest failure (the first one when no retry has failed yet).
        since: wall-clock time of the first failure (epoch seconds).
        attempts: retries made since, all failed.
        next_attempt: wall-clock time of the next retry, once it is scheduled.
        pending_records: records accepted before the failure, waiting to be written.
    """

    error: TxlogWriteFailed
    since: float
    attempts: int = 0
    next_attempt: float | None = None
    pending_records: int = 0

    def failed_again(self, error: TxlogWriteFailed, pending_records: int) -> WriteOutage:
        """The outage after one more failed retry."""
        return replace(
            self, error=error, attempts=self.attempts + 1, next_attempt=None,
            pending_records=pending_records,
        )  # fmt: skip

    def scheduled(self, at: float) -> WriteOutage:
        """The outage with its next retry due at ``at`` (wall clock)."""
        return replace(self, next_attempt=at)

    def describe(self) -> str:
        """One line for a failure ack's ``detail``, the event log and the banner."""
        return f"{self.error} (refusing writes since {_iso(self.since)}; retrying)"

    def to_dict(self) -> WriteOutageDict:
        """JSON for the admin API (times as ISO-8601 UTC)."""
        return {
            "since": _iso(self.since),
            "error": str(self.error.cause),
            "operation": self.error.operation,
            "path": self.error.path,
            "attempts": self.attempts,
            "next_attempt": _iso(self.next_attempt) if self.next_attempt is not None else None,
            "pending_records": self.pending_records,
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
