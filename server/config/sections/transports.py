"""The ``<Transports>`` section: the listeners on the shared web address.

``websocket`` transports serve clients (at ``/amps/<message type>``); ``amps-replication``
is the incoming replication listener and carries every message type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from server.config.model import (
    DEFAULT_HOST,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_PORT,
    MESSAGE_TYPES,
    TransportConfig,
)
from server.config.values import (
    GB,
    KB,
    Bind,
    Context,
    read_bind,
    read_bool,
    read_choice,
    read_name,
    read_size,
)
from server.config.xmltree import Children, Node, Spec, fail

__all__ = ["TransportPart", "read_transports"]

_TRANSPORTS_SPEC: Final[Spec] = {"Transport": True}
_TRANSPORT_SPEC: Final[Spec] = {
    "Name": False,
    "Type": False,
    "InetAddr": False,
    "MessageType": False,
    "PerMessageDeflate": False,
    "MaxMessageSize": False,
    "Enabled": False,
}
_TRANSPORT_TYPES: Final = ("websocket", "amps-replication")


@dataclass(frozen=True, slots=True)
class TransportPart:
    """One transport, and the elements the cross-checks report at.

    Attributes:
        bind: the InetAddr the file gave, if any.
        config: host/port still the defaults (filled once the shared address is settled).
        node: the ``<Transport>`` element.
        max_message_size: the MaxMessageSize element, if given.
    """

    bind: Bind | None
    config: TransportConfig
    node: Node
    max_message_size: Node | None


def _transport(node: Node, ctx: Context) -> TransportPart:
    kids = Children(node, _TRANSPORT_SPEC)
    name = read_name(kids.require("Name"), ctx, "transport name")
    kind = read_choice(kids.require("Type"), ctx, _TRANSPORT_TYPES, "transport Type")
    bind = None
    if (addr := kids.one("InetAddr")) is not None:
        bind = read_bind(addr, ctx)
    message_type = "json"
    if (type_node := kids.one("MessageType")) is not None:
        if kind == "amps-replication":
            raise fail(
                type_node,
                "MessageType does not apply to an amps-replication transport (it carries "
                "every message type); remove it",
            )
        message_type = read_choice(type_node, ctx, MESSAGE_TYPES, "MessageType")
    deflate = False
    if (deflate_node := kids.one("PerMessageDeflate")) is not None:
        deflate = read_bool(deflate_node, ctx)
    size_node = kids.one("MaxMessageSize")
    max_size = DEFAULT_MAX_MESSAGE_SIZE
    if size_node is not None:
        max_size = read_size(size_node, ctx, minimum=KB, maximum=GB)
    enabled = True
    if (enabled_node := kids.one("Enabled")) is not None:
        enabled = read_bool(enabled_node, ctx)
    config = TransportConfig(
        name=name,
        type=kind,
        host=DEFAULT_HOST,
        port=DEFAULT_PORT,
        message_type=message_type,
        per_message_deflate=deflate,
        max_message_size=max_size,
        enabled=enabled,
    )
    return TransportPart(bind, config, node, size_node)


def read_transports(node: Node, ctx: Context) -> list[TransportPart]:
    """Read ``<Transports>``: unique names, one transport per type and message type.

    One HTTP server serves every transport, with one endpoint per type and message type, so
    a second such transport would have nowhere to listen.
    """
    parts: list[TransportPart] = []
    names: dict[str, TransportPart] = {}
    kinds: dict[tuple[str, str], TransportPart] = {}
    for transport_node in Children(node, _TRANSPORTS_SPEC).many("Transport"):
        part = _transport(transport_node, ctx)
        config = part.config
        if (first := names.get(config.name)) is not None:
            raise fail(
                transport_node,
                f"duplicate transport name {config.name!r} (first at line {first.node.line})",
            )
        names[config.name] = part
        kind = (config.type, config.message_type)
        if (first := kinds.get(kind)) is not None:
            what = (
                f"websocket transport for MessageType {config.message_type}"
                if config.type == "websocket"
                else "amps-replication transport"
            )
            raise fail(
                transport_node,
                f"only one {what} in this version, the HTTP server has one endpoint for it "
                f"(first is {first.config.name!r} at line {first.node.line})",
            )
        kinds[kind] = part
        parts.append(part)
    return parts
