"""The messages the two ends of a link send each other about the fabric, beside the
link's own in frames.py.

Once a link is welcomed, either end may send them, in the link's framing
(server/replication/frames.py: u32 length, u8 type, JSON payload)::

    fabric   the configuration summaries of the instances the sender knows (its own and
             those it learned), each with its identity and a version; sent when the link
             is welcomed and whenever the sender's view changes, so every instance of a
             connected fabric learns every instance's routing configuration
             (server/replication/fabricview.py; the route trace reads it)
    claim    "may a client log on with this name here?": asked of every linked instance
             before a logon is granted (server/replication/clientnames.py)
    claimed  the answer to a claim: free, or held (where, and why)

This module holds only the JSON messages (dataclasses, their fields, and their parsing
from a decoded JSON object), so that frames.py stays one codec of one size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from spool.server.replication.errors import ReplicationProtocolError

__all__ = [
    "CLAIM",
    "CLAIMED",
    "FABRIC",
    "PEER_TYPES",
    "Claim",
    "Claimed",
    "FabricEntry",
    "FabricView",
    "PeerMessage",
    "parse_peer",
    "peer_fields",
]

FABRIC: Final = 12
CLAIM: Final = 13
CLAIMED: Final = 14

#: message type -> name (for errors)
PEER_TYPES: Final[dict[int, str]] = {FABRIC: "fabric", CLAIM: "claim", CLAIMED: "claimed"}


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


@dataclass(frozen=True, slots=True)
class Claim:
    """Either end: may a client log on with ``name`` at the sender?

    Attributes:
        id: the sender's number for it (the answer repeats it).
        name: the client name.
        since: when the sender's logon began (µs, its clock): of two logons of one name
            waiting for answers at once, the earlier one (then the lower instance name)
            gets it.
        instance: the sender's Name.
    """

    id: int
    name: str
    since: int
    instance: str


@dataclass(frozen=True, slots=True)
class Claimed:
    """Either end: the answer to a :class:`Claim` (``held_by`` None: free here)."""

    id: int
    held_by: str | None
    detail: str


PeerMessage = FabricView | Claim | Claimed


def peer_fields(message: PeerMessage) -> tuple[int, dict[str, object]]:
    """The message's type and JSON object."""
    if isinstance(message, Claim):
        return CLAIM, {"id": message.id, "name": message.name, "since": message.since,
                       "instance": message.instance}  # fmt: skip
    if isinstance(message, Claimed):
        return CLAIMED, {"id": message.id, "held_by": message.held_by, "detail": message.detail}
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


def _count(obj: dict[str, object], key: str, what: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ReplicationProtocolError(
            f"malformed {what} message: {key!r} is a non-negative integer"
        )
    return value


def parse_peer(kind: int, obj: dict[str, object]) -> PeerMessage:
    """A peer message from its type and JSON object.

    Raises:
        ReplicationProtocolError: it is malformed.
    """
    if kind == CLAIM:
        name, instance = obj.get("name"), obj.get("instance")
        if not isinstance(name, str) or not name or not isinstance(instance, str):
            raise ReplicationProtocolError(
                "malformed claim message: it needs a name and an instance"
            )
        return Claim(_count(obj, "id", "claim"), name, _count(obj, "since", "claim"), instance)
    if kind == CLAIMED:
        held_by, detail = obj.get("held_by"), obj.get("detail")
        if (held_by is not None and not isinstance(held_by, str)) or not isinstance(detail, str):
            raise ReplicationProtocolError(
                "malformed claimed message: held_by is a string or null, detail a string"
            )
        return Claimed(_count(obj, "id", "claimed"), held_by, detail)
    instances = obj.get("instances")
    if not isinstance(instances, list):
        raise _malformed("it needs a list 'instances'")
    return FabricView(tuple(_entry(v) for v in instances))
