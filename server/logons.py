"""What every logon path shares: the throttle, the counters, the throttle's events.

The websocket logon (server/clients.py), the dashboard login (web/auth.py) and an
incoming replication link's hello (server/replication/inbound.py) all ask one
:class:`LogonGuard` before checking a password and tell it the outcome. The websocket and
the dashboard count in the same :class:`~spool.server.throttle.LogonThrottle`, so a guesser
gains nothing by switching between them. Replication links have a throttle of their own
(same policy): a replication source that keeps presenting wrong or no credentials (a
peer configured before its users were) uses up its own budget, never that of the
clients on its address, and clients cannot lock a replication link out either. The guard counts per path what happened
(``failures``: checked and wrong; ``refused``: turned away unchecked) for ``/metrics``
and the dashboard, and writes ``auth/logon_throttled`` to the event log once per
address-and-user while it stays refused (a flood of refused attempts is one line, not a
thousand). Each path writes its own failure events (``session/auth_failure``,
``admin/login_failed``, ``replication/inbound_refused``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, Literal, TypedDict

from spool.server.clock import Clock
from spool.server.stats.source import EventSink
from spool.server.throttle import LogonThrottle, address_key

__all__ = ["LogonCounters", "LogonGuard", "LogonPath"]

LogonPath = Literal["websocket", "dashboard", "replication"]
PATHS: Final[tuple[LogonPath, ...]] = ("websocket", "dashboard", "replication")
_ANNOUNCED_MAX: Final = 10_000


class LogonCounters(TypedDict):
    """Logon outcomes since start, per path."""

    succeeded: dict[str, int]
    failures: dict[str, int]
    refused: dict[str, int]
    blocked_addresses: int
    blocked_users: int


class LogonGuard:
    """The throttle and the logon counters of one instance.

    Args:
        throttle: the policy (shared by every path).
        events: the event log.
        clock: when an announced refusal may be announced again.
    """

    def __init__(
        self,
        throttle: LogonThrottle,
        events: EventSink,
        clock: Clock,
        replication: LogonThrottle | None = None,
    ) -> None:
        self.throttle = throttle
        #: the replication links' own throttle
        self.replication = (
            replication if replication is not None else LogonThrottle(throttle.policy, clock)
        )
        self._events = events
        self._clock = clock
        self.succeeded_count: dict[str, int] = dict.fromkeys(PATHS, 0)
        self.failure_count: dict[str, int] = dict.fromkeys(PATHS, 0)
        self.refused_count: dict[str, int] = dict.fromkeys(PATHS, 0)
        self._announced: OrderedDict[tuple[str, str], float] = OrderedDict()

    def admit(self, path: LogonPath, host: str, user: str | None) -> float:
        """0.0 when a logon from ``host`` as ``user`` may be checked; otherwise the seconds
        to wait (the attempt is counted as refused and must not be checked)."""
        wait = self._throttle(path).retry_after(host, user)
        if wait <= 0:
            return 0.0
        self.refused_count[path] += 1
        key = (address_key(host), user or "")
        now = self._clock.monotonic()
        until = self._announced.get(key)
        if until is None or now >= until:
            if len(self._announced) >= _ANNOUNCED_MAX:
                self._announced.popitem(last=False)
            self._announced[key] = now + wait
            self._events.emit(
                "warning", "auth", "logon_throttled", path=path, remote=host, user=user,
                retry_after=round(wait, 1),
            )  # fmt: skip
        return wait

    def refused(self, path: LogonPath) -> None:
        """A logon turned away unchecked for another reason (the password pool is full)."""
        self.refused_count[path] += 1

    def failed(self, path: LogonPath, host: str, user: str | None) -> None:
        """A checked logon failed."""
        self.failure_count[path] += 1
        self._throttle(path).failed(host, user)

    def succeeded(self, path: LogonPath, host: str, user: str) -> None:
        """A logon succeeded."""
        self.succeeded_count[path] += 1
        self._throttle(path).succeeded(host, user)
        self._announced.pop((address_key(host), user), None)

    def _throttle(self, path: LogonPath) -> LogonThrottle:
        return self.replication if path == "replication" else self.throttle

    def counters(self) -> LogonCounters:
        addresses, users = self.throttle.blocked()
        link_addresses, link_users = self.replication.blocked()
        addresses += link_addresses
        users += link_users
        return {
            "succeeded": dict(self.succeeded_count),
            "failures": dict(self.failure_count),
            "refused": dict(self.refused_count),
            "blocked_addresses": addresses,
            "blocked_users": users,
        }
