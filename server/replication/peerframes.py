"""The messages the two ends of a link send each other about the fabric, beside the
link's own in frames.py.

Once a link is welcomed, either end may send them, in the link's framing
(server/replication/frames.py: u32 length, u8 type, JSON payload)::

    fabric   the configuration summaries of the instances the sender knows (its own and
             those it learned), each with its identity and a version; sent when the link
             is welcomed and whenever the sender's view changes, so every instance of a
             connected fabric learns every instance's routing configuration
             (server/replication/fabricview.py; the route trace reads it)

This module holds only the JSON messages (dataclasses, their fields, and their parsing
from a decoded JSON object), so that frames.py stays one codec of one size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from server.replication.errors import ReplicationProtocolError

__all__ = [
    "FABRIC",
    "PEER_TYPES",
    "FabricEntry",
    "FabricView",
    "PeerMessage",
    "parse_peer",
    "peer_fields",
]

FABRIC: Final = 12

#: message type -> name (for errors)
PEER_TYPES: Final[dict[int, str]] = {FABRIC: "fabric"}


@dataclass(frozen=True, slots=True)
class FabricEntry:
    """One instance as a fabric view knows it.

    Attributes:
        name, group: the instance's.
        instance_id: its identity (server/replication/state.py).
        version: when that instance started (µs): a later version of the same instance
            replaces an earlier one.
        summary: its configuration summary (server/replication/validation.py).
    """

    name: str
    group: str
    instance_id: str
    version: int
    summary: dict[str, object]


@dataclass(frozen=True, slots=True)
class FabricView:
    """Either end: the instances the sender knows."""

    entries: tuple[FabricEntry, ...]


PeerMessage = FabricView


def peer_fields(message: PeerMessage) -> tuple[int, dict[str, object]]:
    """The message's type and JSON object."""
    return FABRIC, {
        "instances": [
            {"name": e.name, "group": e.group, "instance_id": e.instance_id,
             "version": e.version, "summary": e.summary}
            for e in message.entries
        ]
    }  # fmt: skip


def _malformed(what: str) -> ReplicationProtocolError:
    return ReplicationProtocolError(f"malformed fabric message: {what}")


def _entry(value: object) -> FabricEntry:
    if not isinstance(value, dict):
        raise _malformed("an instance is an object")
    name, group, ident = value.get("name"), value.get("group"), value.get("instance_id")
    version, summary = value.get("version"), value.get("summary")
    if not (isinstance(name, str) and isinstance(group, str) and isinstance(ident, str)):
        raise _malformed("an instance has a name, a group and an instance_id")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise _malformed("an instance's version is a non-negative integer")
    if not isinstance(summary, dict):
        raise _malformed("an instance's summary is an object")
    return FabricEntry(name, group, ident, version, summary)


def parse_peer(kind: int, obj: dict[str, object]) -> PeerMessage:
    """A peer message from its type and JSON object.

    Raises:
        ReplicationProtocolError: it is malformed.
    """
    instances = obj.get("instances")
    if not isinstance(instances, list):
        raise _malformed("it needs a list 'instances'")
    return FabricView(tuple(_entry(v) for v in instances))
