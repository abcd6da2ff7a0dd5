"""The fabric as one instance knows it: every instance's routing configuration.

A route trace (server/replication/topology.py) needs the configuration of every instance
a message may cross, not only this instance's and its peers'. Each instance therefore
keeps a *view*: for every instance it has heard of, its name, group, identity, a version
(when that instance started, in µs) and its configuration summary
(server/replication/validation.py). Its own entry comes from its configuration; the
others arrive in ``fabric`` messages (server/replication/peerframes.py), which either end
of a link sends when the link is welcomed and again whenever its view changed. An entry
replaces the one of the same name when its version is later (the instance restarted, maybe
with another configuration); a view never replaces this instance's own entry. Each
message only ever makes versions grow, so a connected fabric converges on one view, and
stops sending once it has.

What it is not: a liveness list. An instance that stopped keeps its last entry (its
configuration did not change); the links of this instance say what is up.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from spool.server.replication.errors import ReplicationProtocolError
from spool.server.replication.peerframes import FabricEntry, FabricView, PeerMessage
from spool.server.replication.validation import Summary, parse_summary

__all__ = ["FabricKnowledge", "PeerExchange", "PeerLink", "share_view"]


class PeerExchange(Protocol):
    """What a link hands its peer messages to, and takes the view to send from (the
    replication service)."""

    def view_message(self) -> tuple[int, PeerMessage]:
        """How many times the view changed, and the view as a message."""
        ...

    def peer_received(self, message: PeerMessage, link: PeerLink) -> None:
        """A link's peer sent ``message``."""
        ...


class PeerLink(Protocol):
    """A live link to another instance that can carry peer messages."""

    @property
    def peer_name(self) -> str:
        """The instance at the other end."""
        ...

    def send_peer(self, message: PeerMessage) -> bool:
        """Send ``message``; False when the link cannot carry it now."""
        ...


def share_view(peers: PeerExchange, link: PeerLink, sent: int) -> int:
    """Send ``link`` the fabric view unless it had the latest: ``sent`` is the change
    count of the last view it was sent; returns the count it has now."""
    changes, message = peers.view_message()
    if changes > sent and link.send_peer(message):
        return changes
    return sent


class FabricKnowledge:
    """One instance's view of the fabric. Owned by the event loop.

    Args:
        own: this instance's entry.

    Attributes:
        changes: how many times the view changed (a link sends the view again when it
            has sent an older one).
    """

    def __init__(self, own: FabricEntry) -> None:
        self._own = own
        self._entries: dict[str, FabricEntry] = {own.name: own}
        self._parsed: dict[str, Summary] = {own.name: parse_summary(own.summary)}
        self.changes = 1

    def message(self) -> FabricView:
        """The view, as a ``fabric`` message."""
        return FabricView(tuple(self._entries.values()))

    def merge(self, entries: Iterable[FabricEntry]) -> list[str]:
        """Take what a peer knows; returns the names whose entry changed here.

        An entry with a summary that cannot be read is left out (its sender's problem;
        the link goes on: a route trace then stops at that instance).
        """
        changed = []
        for entry in entries:
            if entry.name == self._own.name:
                continue
            known = self._entries.get(entry.name)
            if known is not None and known.version >= entry.version:
                continue
            try:
                parsed = parse_summary(entry.summary)
            except ReplicationProtocolError:
                continue
            self._entries[entry.name] = entry
            self._parsed[entry.name] = parsed
            changed.append(entry.name)
        if changed:
            self.changes += 1
        return changed

    def summaries(self) -> dict[str, Summary]:
        """Every known instance's configuration summary, by name."""
        return dict(self._parsed)

    def entries(self) -> list[FabricEntry]:
        return list(self._entries.values())
