"""Server choosers: which URI the reconnect handler tries next, and with what credentials.

:class:`ServerChooser` is the interface (replaceable); :class:`DefaultServerChooser` rotates
through a list of URIs: it stays on a URI while connections to it succeed, and moves to the
next one after a failure. Each URI may have its own :class:`Authenticator` (servers of a
failover pair need not share passwords). With ``max_rounds`` it gives up after that many
full rotations in which every URI failed, and :meth:`~DefaultServerChooser.get_error`
says why; without it it never gives up (the delay strategy's ``max_total`` decides).

Failover safety: the HA client tells the chooser what each server said of failing over
from it (:meth:`~DefaultServerChooser.report_safety`: the logon ack's ``failover`` and the
later notices, docs/protocol.md). When it moves on after a failure, the default chooser
prefers the servers last known *safe* (every destination holds persisted acks), then those
it knows nothing of, then those last known unsafe, in list order within each kind; every
URI still gets one turn in each rotation (a rotation ends when each has failed once). It
never leaves a server it is connected to because of a notice. Without safety reports
this is the plain rotation in list order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a logon sends for a URI (``None``: the field is left out)."""

    user_id: str | None = None
    password: str | None = None


class Authenticator(Protocol):
    """Credentials for a logon to one URI (called before every logon, so a token can be
    refreshed)."""

    def authenticate(self, uri: str) -> Credentials: ...


@dataclass(frozen=True, slots=True)
class StaticAuthenticator:
    """The same user and password on every logon."""

    user_id: str | None = None
    password: str | None = None

    def authenticate(self, uri: str) -> Credentials:
        return Credentials(self.user_id, self.password)


NO_CREDENTIALS = StaticAuthenticator()


class ServerChooser(Protocol):
    """The reconnect handler's source of URIs."""

    def current_uri(self) -> str | None:
        """The URI to try now; ``None`` when the chooser gives up."""
        ...

    def current_authenticator(self) -> Authenticator:
        """The authenticator for :meth:`current_uri`."""
        ...

    def report_failure(self, error: BaseException, uri: str) -> None:
        """The attempt on ``uri`` failed with ``error``."""
        ...

    def report_success(self, uri: str) -> None:
        """The logon on ``uri`` succeeded."""
        ...

    def get_error(self) -> str:
        """Why :meth:`current_uri` returned ``None``."""
        ...


class SafetyAware(Protocol):
    """A chooser that wants to know which servers fail over safely (optional: the HA
    client calls :meth:`report_safety` only on choosers that have it)."""

    def report_safety(self, uri: str, safe: bool | None) -> None:
        """``uri`` said failing over from it is safe (True), unsafe (False), or it does
        not replicate (None)."""
        ...


#: preference of a server by what it last said of failover (lower first)
_RANK = {True: 0, None: 1, False: 2}


class DefaultServerChooser:
    """Rotates through URIs: a failure moves to the next one, a success stays.

    Args:
        uris: the servers, in order of preference.
        authenticator: for URIs added without their own.
        max_rounds: give up after this many full rotations without a success (None: never).
    """

    def __init__(
        self,
        uris: list[str] | None = None,
        *,
        authenticator: Authenticator = NO_CREDENTIALS,
        max_rounds: int | None = None,
    ) -> None:
        if max_rounds is not None and max_rounds < 1:
            raise ValueError("max_rounds must be at least 1")
        self._entries: list[tuple[str, Authenticator]] = []
        self._default = authenticator
        self._index = 0
        self._failures_in_row = 0
        self._max_rounds = max_rounds
        self._last_error: tuple[str, BaseException] | None = None
        #: what each URI last said of failing over from it (absent: nothing yet)
        self._safety: dict[str, bool | None] = {}
        #: indexes of the URIs that failed in the current rotation
        self._tried: set[int] = set()
        for uri in uris or []:
            self.add(uri)

    def add(self, uri: str, authenticator: Authenticator | None = None) -> None:
        """Append a URI (with its own authenticator, or the chooser's)."""
        self._entries.append((uri, authenticator or self._default))

    @property
    def uris(self) -> list[str]:
        return [u for u, _ in self._entries]

    def _exhausted(self) -> bool:
        if not self._entries:
            return True
        limit = self._max_rounds
        return limit is not None and self._failures_in_row >= limit * len(self._entries)

    def current_uri(self) -> str | None:
        if self._exhausted():
            return None
        return self._entries[self._index][0]

    def current_authenticator(self) -> Authenticator:
        if not self._entries:
            return self._default
        return self._entries[self._index][1]

    def report_failure(self, error: BaseException, uri: str) -> None:
        self._last_error = (uri, error)
        self._failures_in_row += 1
        if self._entries:
            self._index = self._next_index()

    def _next_index(self) -> int:
        """Where to go after a failure: the URI not yet tried in this rotation that last
        said the best of failover (safe, unknown, unsafe; list order among equals); a new
        rotation once every URI was tried."""
        n = len(self._entries)
        tried = self._tried
        tried.add(self._index)
        if len(tried) >= n:
            tried.clear()
        order = sorted((i for i in range(n) if i not in tried), key=lambda i: (self._rank(i), i))
        return order[0]

    def _rank(self, index: int) -> int:
        uri = self._entries[index][0]
        return _RANK[self._safety[uri]] if uri in self._safety else _RANK[None]

    def report_safety(self, uri: str, safe: bool | None) -> None:
        self._safety[uri] = safe

    def safety(self, uri: str) -> bool | None:
        """What ``uri`` last said of failing over from it (None: nothing, or it does not
        replicate)."""
        return self._safety.get(uri)

    def report_success(self, uri: str) -> None:
        self._failures_in_row = 0
        self._tried.clear()
        for i, (u, _) in enumerate(self._entries):
            if u == uri:
                self._index = i
                break

    def get_error(self) -> str:
        if not self._entries:
            return "the server chooser has no URI"
        rounds = self._failures_in_row // len(self._entries)
        text = f"no server of {self.uris} accepted a connection in {rounds} rounds"
        if self._last_error is not None:
            uri, exc = self._last_error
            text += f"; last failure on {uri}: {exc!r}"
        return text


__all__ = [
    "NO_CREDENTIALS",
    "Authenticator",
    "Credentials",
    "DefaultServerChooser",
    "SafetyAware",
    "ServerChooser",
    "StaticAuthenticator",
]
