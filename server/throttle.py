"""The logon throttle: one policy for every way to log on (websocket and dashboard).

Checking a password costs an scrypt derivation (tens of milliseconds of CPU) on purpose,
which makes an unthrottled logon both a password oracle and a CPU sink. The throttle
counts *failed* logons in a sliding window (:attr:`ThrottlePolicy.window`), per remote
address and user name, per address, and per user name, and refuses further attempts
**before any check runs** while any of the three counts of an attempt is at its limit,
with the seconds until one of the counted failures leaves the window (``retry_after``):

- per address and user name (``LogonFailuresPerAddressUser``, default 10): one client
  guessing one account, or one peer with wrong credentials. Only that pair is refused:
  a misconfigured program on a shared address (a NAT, a proxy, the replication links of
  a host) no longer locks out every other user behind that address;
- per address (``LogonFailuresPerAddress``, default 100): the ceiling for one client
  guessing many names. IPv6 addresses count by their /64 network (one host usually owns
  a whole /64), IPv4-mapped IPv6 addresses as the IPv4 address (for the pair too);
- per user name (``LogonFailuresPerUser``, default 30): many addresses guessing one
  account. It is larger than the pair's limit so that one noisy address does not lock the
  user out of everywhere else; a distributed guesser can still lock a user out for one
  window, the price of limiting guesses per account (docs/security.md).

Refused attempts are not failures (nothing was checked), so a client that keeps hammering
does not extend its own window. A successful logon forgives only its own pair's failures
(the user's typos from that address); failures from other addresses, or for other names
from that address, stay counted, so a guesser cannot reset its count by also logging on
successfully as itself. Memory is bounded: at most ``max_keys`` pairs, addresses and
names are tracked, the least recently failed going first.

Time is the injected clock's monotonic time. Owned by the event loop.
"""

from __future__ import annotations

import ipaddress
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Final

from spool.server.clock import Clock

__all__ = ["LogonThrottle", "ThrottlePolicy", "address_key"]

_MAX_KEYS: Final = 10_000


@dataclass(frozen=True, slots=True)
class ThrottlePolicy:
    """Limits of the throttle (from ``<Tuning>``)."""

    per_address: int = 100
    per_user: int = 30
    window: float = 300.0
    per_pair: int = 10


def address_key(host: str) -> str:
    """The address a failure is counted against (see the module docstring)."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class _Window:
    """Failure times of one key, oldest first, each with the other half of its (address,
    user) pair. Failures are recorded only for admitted attempts, so a window holds at
    most the limit plus the attempts that were being checked at once (bounded by the
    password-check pool)."""

    __slots__ = ("failures",)

    def __init__(self) -> None:
        self.failures: deque[tuple[float, str]] = deque()


class LogonThrottle:
    """Counts failed logons and says when to refuse (see the module docstring).

    Args:
        policy: the limits.
        clock: time source (monotonic).
        max_keys: addresses (and names) tracked at most.
    """

    def __init__(self, policy: ThrottlePolicy, clock: Clock, *, max_keys: int = _MAX_KEYS) -> None:
        self.policy = policy
        self._clock = clock
        self._max_keys = max_keys
        self._pairs: OrderedDict[str, _Window] = OrderedDict()
        self._addresses: OrderedDict[str, _Window] = OrderedDict()
        self._users: OrderedDict[str, _Window] = OrderedDict()

    # -- asking ----------------------------------------------------------------------------

    def retry_after(self, host: str, user: str | None) -> float:
        """Seconds until a logon from ``host`` as ``user`` may be checked (0.0: now)."""
        address = address_key(host)
        policy = self.policy
        wait = max(
            self._wait(self._pairs, _pair(address, user), policy.per_pair),
            self._wait(self._addresses, address, policy.per_address),
        )
        if user:
            wait = max(wait, self._wait(self._users, user, self.policy.per_user))
        return wait

    def _wait(self, table: OrderedDict[str, _Window], key: str, limit: int) -> float:
        window = table.get(key)
        if window is None:
            return 0.0
        now = self._clock.monotonic()
        failures = window.failures
        while failures and now - failures[0][0] >= self.policy.window:
            failures.popleft()
        if not failures:
            del table[key]
            return 0.0
        n = len(failures)
        if n < limit:
            return 0.0
        # refused until enough failures leave the window to bring the count below limit
        return self.policy.window - (now - failures[n - limit][0])

    def blocked(self) -> tuple[int, int]:
        """How many addresses (for every user name, or for some) and user names are
        refused right now."""
        refused = {
            k
            for k in list(self._addresses)
            if self._wait(self._addresses, k, self.policy.per_address)
        }
        refused.update(
            k.partition("\x00")[0]
            for k in list(self._pairs)
            if self._wait(self._pairs, k, self.policy.per_pair)
        )
        addresses = len(refused)
        users = sum(
            1 for k in list(self._users) if self._wait(self._users, k, self.policy.per_user)
        )
        return addresses, users

    # -- telling ---------------------------------------------------------------------------

    def failed(self, host: str, user: str | None) -> None:
        """A logon from ``host`` as ``user`` was checked and failed."""
        now = self._clock.monotonic()
        address = address_key(host)
        self._record(self._pairs, _pair(address, user), now, "")
        self._record(self._addresses, address, now, user or "")
        if user:
            self._record(self._users, user, now, address)

    def _record(self, table: OrderedDict[str, _Window], key: str, now: float, other: str) -> None:
        window = table.get(key)
        if window is None:
            if len(table) >= self._max_keys:
                table.popitem(last=False)
            window = table[key] = _Window()
        else:
            table.move_to_end(key)
            failures = window.failures
            while failures and now - failures[0][0] >= self.policy.window:
                failures.popleft()
        window.failures.append((now, other))

    def succeeded(self, host: str, user: str) -> None:
        """A logon from ``host`` as ``user`` succeeded: forget that pair's failures."""
        address = address_key(host)
        self._pairs.pop(_pair(address, user), None)
        self._forget(self._addresses, address, user)
        self._forget(self._users, user, address)

    @staticmethod
    def _forget(table: OrderedDict[str, _Window], key: str, other: str) -> None:
        window = table.get(key)
        if window is None:
            return
        kept = [f for f in window.failures if f[1] != other]
        window.failures.clear()
        window.failures.extend(kept)
        if not kept:
            del table[key]


def _pair(address: str, user: str | None) -> str:
    """The key of an (address, user name) pair (no user name: the empty one)."""
    return f"{address}\x00{user or ''}"
