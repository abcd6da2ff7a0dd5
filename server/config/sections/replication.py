"""The ``<Replication>`` section: the destinations this instance pushes messages to.

Shaped like AMPS's (docs/configuration.md; docs/replication.md has the whole model)::

    <Replication>
      <AckInterval>1ms</AckInterval>          <!-- optional: a destination's ack conflation -->
      <LinkTimeout>6s</LinkTimeout>           <!-- optional: a link that hears nothing this
                                                   long is dropped, on both ends -->
      <Destination>
        <Name>spool-b</Name>                  <!-- unique; the admin API's {dest} -->
        <Group>nyc-1</Group>                  <!-- the remote's own Group; default: Name -->
        <SyncType>sync</SyncType>             <!-- sync | async -->
        <PassThrough>.*</PassThrough>         <!-- regex over group names; repeatable;
                                                 default .*; <PassThrough/>: none -->
        <Topic><Name>orders</Name><MessageType>json</MessageType>
          <Filter>/qty > 0</Filter><ExcludeValidation>replicate,cascade</ExcludeValidation>
        </Topic>                              <!-- one or more -->
        <Transport><Type>amps-replication</Type>
          <InetAddr>10.0.0.2:9007</InetAddr><InetAddr>10.0.0.3:9007</InetAddr>
                                              <!-- none: passive, the peer dials in -->
          <Compression>zstd</Compression>     <!-- zstd | none -->
          <User>repl</User><Password>${REPL_PASSWORD}</Password>  <!-- or <Token> -->
          <TLS>true</TLS>                     <!-- wss://; then optionally: -->
          <CACertificate>ca.pem</CACertificate>   <!-- default: the system's CAs -->
          <Certificate>a.pem</Certificate><PrivateKey>a.key</PrivateKey>  <!-- mutual TLS -->
        </Transport>
      </Destination>
    </Replication>

Refused here, at the element that says it: a duplicate destination name, a destination
named like this instance, a Filter that does not compile, an unknown check in
ExcludeValidation or one that cannot be excluded (``queue``, ``queue_underlying``), a
Password and a Token together, a User without either; TLS files without ``<TLS>true``, a
client Certificate without its PrivateKey, a TLS file that cannot be used (read and
checked here, as the listener's are). Cross-checks with other sections
(the transaction log records the topic, MinimumSyncDestinations, at most 64 sync
destinations) are in :mod:`spool.server.config.build`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from spool.server.config.model import (
    MESSAGE_TYPES,
    NON_EXCLUDABLE_CHECKS,
    PASS_EVERY_GROUP,
    VALIDATION_CHECKS,
    DestinationConfig,
    ReplicationConfig,
    ReplicationTopic,
    ReplicationTransport,
)
from spool.server.config.values import (
    Context,
    read_bind,
    read_bool,
    read_choice,
    read_duration,
    read_expression,
    read_name,
    read_path,
    read_regex,
    read_value,
)
from spool.server.config.xmltree import Children, Spec, XmlNode, fail
from spool.server.protocol.topic import is_regex_topic
from spool.server.tls.context import load_dial_context
from spool.server.tls.errors import TlsError

__all__ = [
    "DestinationPart",
    "ReplicationPart",
    "read_replication",
    "read_replication_transport",
    "read_topic_name",
]

_REPLICATION_SPEC: Final[Spec] = {"AckInterval": False, "LinkTimeout": False, "Destination": True}
_DESTINATION_SPEC: Final[Spec] = {
    "Name": False,
    "Group": False,
    "SyncType": False,
    "PassThrough": True,
    "Topic": True,
    "Transport": False,
}
_TOPIC_SPEC: Final[Spec] = {
    "Name": False,
    "MessageType": False,
    "Filter": False,
    "ExcludeValidation": False,
}
_TRANSPORT_SPEC: Final[Spec] = {
    "Name": False,
    "Type": False,
    "InetAddr": True,
    "Compression": False,
    "User": False,
    "Password": False,
    "Token": False,
    "TLS": False,
    "CACertificate": False,
    "Certificate": False,
    "PrivateKey": False,
}
_TOPIC_NAME_MAX: Final = 1024


class DestinationPart:
    """A destination and the elements the cross-checks report at.

    Attributes:
        config: the destination.
        node: its ``<Destination>`` element.
        topic_nodes: its ``<Topic>`` elements, in the order of ``config.topics``.
        sync_node: its ``<SyncType>`` element.
    """

    __slots__ = ("config", "node", "sync_node", "topic_nodes")

    def __init__(
        self,
        config: DestinationConfig,
        node: XmlNode,
        topic_nodes: list[XmlNode],
        sync_node: XmlNode,
    ) -> None:
        self.config = config
        self.node = node
        self.topic_nodes = topic_nodes
        self.sync_node = sync_node


class ReplicationPart:
    """The section and its destinations' elements."""

    __slots__ = ("config", "destinations", "node")

    def __init__(
        self, config: ReplicationConfig, node: XmlNode, destinations: list[DestinationPart]
    ) -> None:
        self.config = config
        self.node = node
        self.destinations = destinations


def _exclusions(node: XmlNode, ctx: Context) -> frozenset[str]:
    names = [part.strip() for part in read_value(node, ctx).split(",") if part.strip()]
    for name in names:
        if name not in VALIDATION_CHECKS:
            raise fail(
                node,
                f"unknown validation check {name!r} (checks: {', '.join(VALIDATION_CHECKS)})",
            )
        if name in NON_EXCLUDABLE_CHECKS:
            raise fail(
                node,
                f"the {name!r} check cannot be excluded: a queue that differs between two "
                "instances would deliver a message twice or never; make the queue "
                "definitions agree instead",
            )
    return frozenset(names)


def read_topic_name(name_node: XmlNode, ctx: Context) -> tuple[str, bool]:
    """A topic block's ``<Name>``: the name or regex, and whether it is a regex."""
    name = read_value(name_node, ctx)
    if len(name) > _TOPIC_NAME_MAX or any(ord(ch) < 32 for ch in name):
        raise fail(
            name_node,
            f"a topic name is at most {_TOPIC_NAME_MAX} characters without control characters",
        )
    regex = is_regex_topic(name)
    if regex:
        name = read_regex(name_node, ctx)
    return name, regex


def _topic(node: XmlNode, ctx: Context) -> ReplicationTopic:
    kids = Children(node, _TOPIC_SPEC)
    name, regex = read_topic_name(kids.require("Name"), ctx)
    message_type = "json"
    if (type_node := kids.one("MessageType")) is not None:
        message_type = read_choice(type_node, ctx, MESSAGE_TYPES, "MessageType")
    text: str | None = None
    if (filter_node := kids.one("Filter")) is not None:
        text = read_expression(filter_node, ctx)
    excluded: frozenset[str] = frozenset()
    if (exclude_node := kids.one("ExcludeValidation")) is not None:
        excluded = _exclusions(exclude_node, ctx)
    return ReplicationTopic(
        name=name,
        is_regex=regex,
        message_type=message_type,
        filter=text,
        exclude_validation=excluded,
    )


def read_replication_transport(
    node: XmlNode, ctx: Context, *, passive_ok: bool = False
) -> ReplicationTransport:
    """A ``<Transport>`` of replication (a Destination's, or Bootstrap's sources).

    ``passive_ok``: a destination's may have no ``<InetAddr>``: it is *passive*, it waits
    for its peer to dial in and runs back over that connection (so the TLS elements, the
    dialing side's, are refused there)."""
    kids = Children(node, _TRANSPORT_SPEC)
    type_node = kids.require("Type", " (amps-replication)")
    read_choice(type_node, ctx, ("amps-replication",), "replication transport Type")
    addr_nodes = kids.many("InetAddr")
    if not addr_nodes and not passive_ok:
        raise fail(node, "<Transport> needs at least one <InetAddr> (the destination's address)")
    if not addr_nodes:
        for tag in ("TLS", "CACertificate", "Certificate", "PrivateKey"):
            if (tls_node := kids.one(tag)) is not None:
                raise fail(
                    tls_node,
                    f"a passive destination (no <InetAddr>) rides the connection its peer "
                    f"dials, whose TLS is the peer's: remove <{tag}>, and set TLS on the "
                    "peer's <Destination> for this instance",
                )
    addresses: list[tuple[str, int]] = []
    for addr_node in addr_nodes:
        bind = read_bind(addr_node, ctx)
        if bind.port == 0:
            raise fail(addr_node, "a destination's InetAddr needs a port (not 0)")
        if (bind.host, bind.port) in addresses:
            raise fail(addr_node, f"InetAddr {read_value(addr_node, ctx)} is listed twice")
        addresses.append((bind.host, bind.port))
    compression: str | None = None
    if (comp_node := kids.one("Compression")) is not None:
        choice = read_choice(comp_node, ctx, ("zstd", "none"), "Compression")
        compression = None if choice == "none" else choice
    user: str | None = None
    secret: str | None = None
    password_node = kids.one("Password")
    token_node = kids.one("Token")
    if password_node is not None and token_node is not None:
        raise fail(token_node, "give the destination's user a <Password> or a <Token>, not both")
    if (user_node := kids.one("User")) is not None:
        user = read_value(user_node, ctx)
        secret_node = password_node or token_node
        if secret_node is None:
            raise fail(node, f"<User> {user!r} needs a <Password> or a <Token>")
        secret = read_value(secret_node, ctx)
    elif token_node is not None:
        secret = read_value(token_node, ctx)  # a token names its user
    elif password_node is not None:
        raise fail(password_node, "a <Password> needs the <User> it belongs to")
    tls, ca, certificate, private_key = _tls(node, kids, ctx)
    return ReplicationTransport(
        addresses=tuple(addresses), compression=compression, user=user, secret=secret,
        tls=tls, ca_certificate=ca, certificate=certificate, private_key=private_key,
    )  # fmt: skip


def _tls(
    node: XmlNode, kids: Children, ctx: Context
) -> tuple[bool, Path | None, Path | None, Path | None]:
    """``TLS`` and its files: checked now, as the listener's are (a link must not find a
    bad file on its first dial)."""
    tls_node = kids.one("TLS")
    tls = read_bool(tls_node, ctx) if tls_node is not None else False
    ca_node = kids.one("CACertificate")
    cert_node = kids.one("Certificate")
    key_node = kids.one("PrivateKey")
    if not tls:
        for file_node in (ca_node, cert_node, key_node):
            if file_node is not None:
                raise fail(
                    file_node,
                    f"{file_node.tag} is for a TLS link: add <TLS>true</TLS> (the destination's "
                    "listener serves TLS), or remove it",
                )
        return False, None, None, None
    if (cert_node is None) != (key_node is None):
        raise fail(
            cert_node or key_node or node,
            "a client <Certificate> and its <PrivateKey> go together",
        )
    ca = read_path(ca_node, ctx) if ca_node is not None else None
    certificate = read_path(cert_node, ctx) if cert_node is not None else None
    private_key = read_path(key_node, ctx) if key_node is not None else None
    try:
        load_dial_context(ca, certificate, private_key)
    except TlsError as exc:
        at = {"Certificate": cert_node, "PrivateKey": key_node, "CACertificate": ca_node}
        raise fail(at[exc.element] or tls_node or node, str(exc)) from None
    return True, ca, certificate, private_key


def _passthrough(node: XmlNode, nodes: list[XmlNode], ctx: Context) -> tuple[str, ...]:
    """A destination's PassThrough patterns: none given is :data:`PASS_EVERY_GROUP` (the
    whole log goes on); one empty ``<PassThrough/>`` is none at all (only messages
    published to this instance go to it)."""
    if not nodes:
        return PASS_EVERY_GROUP
    empty = [n for n in nodes if not n.children and not "".join(n.text).strip()]
    if empty:
        if len(nodes) > 1:
            raise fail(
                empty[0],
                "an empty <PassThrough/> means no group passes through: it cannot be "
                "combined with other <PassThrough> patterns",
            )
        return ()
    return tuple(read_regex(n, ctx) for n in nodes)


def _destination(node: XmlNode, ctx: Context, instance: str) -> DestinationPart:
    kids = Children(node, _DESTINATION_SPEC)
    name_node = kids.require("Name", " (the destination instance's name)")
    name = read_name(name_node, ctx, "destination name")
    if name == instance:
        raise fail(
            name_node,
            f"a destination cannot be this instance itself ({name!r}): names are unique in "
            "a replication fabric",
        )
    group = name
    if (group_node := kids.one("Group")) is not None:
        group = read_name(group_node, ctx, "group name")
    sync_node = kids.require("SyncType", " (sync or async)")
    sync = read_choice(sync_node, ctx, ("sync", "async"), "SyncType") == "sync"
    passthrough = _passthrough(node, kids.many("PassThrough"), ctx)
    topic_nodes = kids.many("Topic")
    if not topic_nodes:
        raise fail(node, "<Destination> needs at least one <Topic> (it would replicate nothing)")
    topics = tuple(_topic(n, ctx) for n in topic_nodes)
    transport = read_replication_transport(
        kids.require("Transport", " (the destination's amps-replication address)"), ctx,
        passive_ok=True,
    )  # fmt: skip
    config = DestinationConfig(
        name=name,
        group=group,
        sync=sync,
        topics=topics,
        passthrough=passthrough,
        transport=transport,
    )
    return DestinationPart(config, node, topic_nodes, sync_node)


def read_replication(node: XmlNode, ctx: Context, instance: str) -> ReplicationPart:
    """Read ``<Replication>`` for the instance called ``instance``."""
    kids = Children(node, _REPLICATION_SPEC)
    ack_interval = ReplicationConfig().ack_interval
    if (ack_node := kids.one("AckInterval")) is not None:
        ack_interval = read_duration(ack_node, ctx, minimum=30e-6, maximum=1.0, zero_ok=True)
    link_timeout = ReplicationConfig().link_timeout
    if (timeout_node := kids.one("LinkTimeout")) is not None:
        link_timeout = read_duration(timeout_node, ctx, minimum=0.3, maximum=600.0)
    parts: list[DestinationPart] = []
    seen: dict[str, XmlNode] = {}
    for dest_node in kids.many("Destination"):
        part = _destination(dest_node, ctx, instance)
        first = seen.get(part.config.name)
        if first is not None:
            raise fail(
                dest_node,
                f"duplicate destination name {part.config.name!r} (first at line {first.line})",
            )
        seen[part.config.name] = dest_node
        parts.append(part)
    config = ReplicationConfig(
        destinations=tuple(p.config for p in parts),
        ack_interval=ack_interval,
        link_timeout=link_timeout,
    )
    return ReplicationPart(config, node, parts)
