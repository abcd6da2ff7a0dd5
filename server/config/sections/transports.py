"""The ``<Transports>`` section: the listeners on the shared web address.

``websocket`` serves clients at ``/amps/MESSAGETYPE``; ``amps-replication`` serves other
instances replicating to this one at ``/replication`` (at most one). The replication
endpoint shares the web server's websocket settings, so ``MessageType``,
``PerMessageDeflate`` and ``MaxMessageSize`` are refused on it rather than accepted and
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from spool.server.config.model import (
    DEFAULT_HOST,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_PORT,
    MESSAGE_TYPES,
    TransportConfig,
)
from spool.server.config.sections.tls import TLS_ELEMENTS, ListenerPart, read_listener
from spool.server.config.values import (
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
from spool.server.config.xmltree import Children, Spec, XmlNode, fail

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
    **TLS_ELEMENTS,
}
_TRANSPORT_TYPES: Final = ("websocket", "amps-replication")
#: What an ``amps-replication`` transport cannot set (the web server's websocket has it).
_NOT_FOR_REPLICATION: Final = ("MessageType", "PerMessageDeflate", "MaxMessageSize")


@dataclass(frozen=True, slots=True)
class TransportPart:
    """One transport, and the elements the cross-checks report at.

    Attributes:
        bind: the InetAddr the file gave, if any.
        config: host/port still the defaults (filled once the shared address is settled).
        node: the ``<Transport>`` element.
        max_message_size: the MaxMessageSize element, if given.
        listener: the TLS elements it gave (sections/tls.py).
    """

    bind: Bind | None
    config: TransportConfig
    node: XmlNode
    max_message_size: XmlNode | None
    listener: ListenerPart


def _transport(node: XmlNode, ctx: Context) -> TransportPart:
    kids = Children(node, _TRANSPORT_SPEC)
    name = read_name(kids.require("Name"), ctx, "transport name")
    kind = read_choice(kids.require("Type"), ctx, _TRANSPORT_TYPES, "transport Type")
    if kind == "amps-replication":
        for tag in _NOT_FOR_REPLICATION:
            if (extra := kids.one(tag)) is not None:
                raise fail(
                    extra,
                    f"<{tag}> does not apply to an amps-replication transport (the "
                    "/replication endpoint uses the websocket transport's settings); remove it",
                )
    bind = None
    if (addr := kids.one("InetAddr")) is not None:
        bind = read_bind(addr, ctx)
    message_type = "json"
    if (type_node := kids.one("MessageType")) is not None:
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
    return TransportPart(bind, config, node, size_node, read_listener(kids, ctx))


def read_transports(node: XmlNode, ctx: Context) -> list[TransportPart]:
    """Read ``<Transports>``: unique names, one websocket transport per message type, one
    amps-replication transport.

    One HTTP server serves every transport, with one endpoint per message type, so a second
    websocket transport for the same message type would have nowhere to listen.
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
                "one amps-replication transport (the HTTP server has one /replication endpoint)"
                if config.type == "amps-replication"
                else f"one {config.type} transport for MessageType {config.message_type} in "
                "this version, the HTTP server has one endpoint for it"
            )
            raise fail(
                transport_node,
                f"only {what} (first is {first.config.name!r} at line {first.node.line})",
            )
        kinds[kind] = part
        parts.append(part)
    return parts
