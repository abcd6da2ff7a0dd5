"""The ``<Bootstrap>`` section: where an empty instance copies its first state from.

Shaped as docs/configuration.md shows it::

    <Bootstrap>
      <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>   <!-- one or more -->
      <DataType>txlog</DataType>     <!-- txlog, sow, or txlog,sow -->
      <Transport><Type>amps-replication</Type>
        <InetAddr>127.0.0.1:9107</InetAddr><InetAddr>127.0.0.1:9207</InetAddr>
        <User>repl</User><Password>${REPL_PASSWORD}</Password>   <!-- as a Destination's -->
      </Transport>
    </Bootstrap>

Refused here, at the element that says it: no Topic, a Topic with a Filter (a bootstrap
copies whole topics), an unknown or repeated DataType, a Transport without InetAddr (the
destination's transport rules apply). The prerequisites that involve other sections (a
transaction log, an ``amps-replication`` transport, local SOW definitions for the topics
of a ``sow`` bootstrap) are checked by :mod:`spool.server.config.build`.
"""

from __future__ import annotations

from typing import Final

from spool.server.config.model import MESSAGE_TYPES, BootstrapConfig, ReplicationTopic
from spool.server.config.sections.replication import read_replication_transport, read_topic_name
from spool.server.config.values import Context, read_choice, read_value
from spool.server.config.xmltree import Children, Spec, XmlNode, fail

__all__ = ["BootstrapPart", "read_bootstrap"]

_SPEC: Final[Spec] = {"Topic": True, "DataType": False, "Transport": False}
_TOPIC_SPEC: Final[Spec] = {"Name": False, "MessageType": False}
#: what a bootstrap can copy
DATA_TYPES: Final = ("txlog", "sow")


class BootstrapPart:
    """The section and the elements the cross-checks report at.

    Attributes:
        config: the section.
        node: the ``<Bootstrap>`` element.
        topic_nodes: its ``<Topic>`` elements, in the order of ``config.topics``.
        data_node: its ``<DataType>`` element (None: the default, ``txlog``).
    """

    __slots__ = ("config", "data_node", "node", "topic_nodes")

    def __init__(
        self,
        config: BootstrapConfig,
        node: XmlNode,
        topic_nodes: list[XmlNode],
        data_node: XmlNode | None,
    ) -> None:
        self.config = config
        self.node = node
        self.topic_nodes = topic_nodes
        self.data_node = data_node


def _topic(node: XmlNode, ctx: Context) -> ReplicationTopic:
    kids = Children(node, _TOPIC_SPEC)
    name, regex = read_topic_name(kids.require("Name"), ctx)
    message_type = "json"
    if (type_node := kids.one("MessageType")) is not None:
        message_type = read_choice(type_node, ctx, MESSAGE_TYPES, "MessageType")
    return ReplicationTopic(name=name, is_regex=regex, message_type=message_type)


def _data_types(node: XmlNode, ctx: Context) -> frozenset[str]:
    parts = [p.strip() for p in read_value(node, ctx).split(",")]
    seen: list[str] = []
    for part in parts:
        if part not in DATA_TYPES:
            raise fail(
                node,
                f"{part!r} is not a bootstrap DataType (allowed: txlog, sow, or txlog,sow)",
            )
        if part in seen:
            raise fail(node, f"DataType {part!r} is given twice")
        seen.append(part)
    return frozenset(seen)


def read_bootstrap(node: XmlNode, ctx: Context) -> BootstrapPart:
    """Read ``<Bootstrap>``."""
    kids = Children(node, _SPEC)
    topic_nodes = kids.many("Topic")
    if not topic_nodes:
        raise fail(node, "<Bootstrap> needs at least one <Topic> (it would copy nothing)")
    topics = tuple(_topic(n, ctx) for n in topic_nodes)
    data_node = kids.one("DataType")
    data_types = _data_types(data_node, ctx) if data_node is not None else frozenset({"txlog"})
    transport = read_replication_transport(
        kids.require("Transport", " (the sources' amps-replication addresses)"), ctx
    )
    config = BootstrapConfig(topics=topics, data_types=data_types, transport=transport)
    return BootstrapPart(config, node, topic_nodes, data_node)
