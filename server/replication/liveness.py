"""When a replication link that hears nothing is dead, and when each end pings (pure).

A link is alive while its peer is heard: any bytes at all, whether data, acks, pings or
pongs. Each end pings its peer every :attr:`Liveness.interval` (a third of the timeout),
so a live peer is heard at least that often even when no message flows, and each end
ends the link once it has heard nothing for :attr:`Liveness.timeout`.

Why not the websocket libraries' keepalives: the client's ping waits until the socket's
write buffer drains before its pong timer starts, and a partition is exactly when that
buffer never drains (TCP keeps retransmitting what it holds, quietly, for up to
``tcp_retries2``: many minutes), so a source that is sending when the network goes away
would wait with it; the web server pings every 20 s, for every websocket, and both close
a connection politely on a timeout, through a write buffer that cannot drain. Here a ping
is written without waiting for anything, only silence counts, and a dead link's
connection is aborted.

Silence counts only while this end listens: an end that stops reading (its backlog is full)
does not blame the peer for what it did not read; the count starts again when it reads.

The adapters (server/replication/transport.py for the dialing end, web/wsdirect.py for
the accepting end) stamp :meth:`Liveness.heard` on every read of the socket and call
:meth:`Liveness.tick` at the time the previous tick asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["PINGS_PER_TIMEOUT", "Liveness", "Tick"]

#: pings each end sends in one timeout (a live peer is heard this many times in one)
PINGS_PER_TIMEOUT: Final = 3


@dataclass(frozen=True, slots=True)
class Tick:
    """What to do now.

    Attributes:
        dead: nothing was heard for the timeout: end the link (abort its connection).
        ping: send a ping now.
        next_at: when to tick again.
    """

    dead: bool
    ping: bool
    next_at: float


class Liveness:
    """The silence of one link's peer.

    Args:
        timeout: seconds of silence that end the link.
        now: the time the link started (it counts as heard).
    """

    __slots__ = ("_listening", "_next_ping", "interval", "last_heard", "timeout")

    def __init__(self, timeout: float, now: float) -> None:
        if timeout <= 0:
            raise ValueError(f"a link timeout must be positive, not {timeout}")
        self.timeout = timeout
        self.interval = timeout / PINGS_PER_TIMEOUT
        self.last_heard = now
        self._next_ping = now + self.interval
        self._listening = True

    def heard(self, now: float) -> None:
        """Bytes came from the peer."""
        self.last_heard = now

    def listening(self, on: bool, now: float) -> None:
        """This end reads the connection (``on``) or stopped reading it; silence counts
        again from the moment it reads."""
        if on and not self._listening:
            self.last_heard = max(self.last_heard, now)
        self._listening = on

    def silence(self, now: float) -> float:
        """Seconds the peer has not been heard while this end listened."""
        return max(0.0, now - self.last_heard) if self._listening else 0.0

    def tick(self, now: float) -> Tick:
        """Decide at ``now`` (at the latest, when the previous tick asked for)."""
        if not self._listening:
            self.last_heard = max(self.last_heard, now)
        deadline = self.last_heard + self.timeout
        if now >= deadline:
            return Tick(True, False, now)
        ping = now >= self._next_ping
        if ping:
            self._next_ping = now + self.interval
        return Tick(False, ping, min(self._next_ping, deadline))
