"""The ``<SOW>`` section: topics whose latest message per key is kept (State of the World).

Each ``<Topic>`` names a topic (exact, or a regular expression by the rule of
:mod:`spool.server.protocol.topic`), its message type (``json``), zero or more ``<Key>`` JSON
paths, its ``<Durability>`` (``persistent`` by default, as in AMPS, or ``transient``) and an
optional ``<Expiration>``. Queues (``<Queue>``, ``<GroupLocalQueue>``, ``<LocalQueue>``)
belong to the same section in docs/configuration.md; :mod:`spool.server.config.sections.queues` reads them.

A topic may be kept by one rule only as far as the file can tell: the same ``Name`` twice
is refused. Two rules that overlap (an exact name and a regex that also matches it) are
allowed; the first in file order wins (docs/configuration.md).
"""

from __future__ import annotations

import re
from typing import Final

from spool.server.config.model import MESSAGE_TYPES, SOW_DURABILITIES, QueueConfig, SowTopicConfig
from spool.server.config.sections.queues import QUEUE_KINDS, read_queue
from spool.server.config.values import (
    Context,
    read_choice,
    read_duration,
    read_regex,
    read_value,
)
from spool.server.config.xmltree import Children, Spec, XmlNode, fail
from spool.server.protocol.topic import is_regex_topic

__all__ = ["read_sow"]

_SOW_SPEC: Final[Spec] = {"Topic": True, "Queue": True, "LocalQueue": True, "GroupLocalQueue": True}
_TOPIC_SPEC: Final[Spec] = {
    "Name": False,
    "MessageType": False,
    "Key": True,
    "Durability": False,
    "Expiration": False,
}
_TOPIC_NAME_MAX: Final = 1024
#: a key path: ``/a`` or ``/a/b/c`` (no array indexes, no spaces, no commas)
_KEY_PATH: Final = re.compile(r"(?:/[^/,\[\]\s]+)+")
#: the longest record lifetime accepted (ten years)
_MAX_EXPIRATION: Final = 10 * 365 * 86400.0


def _name(node: XmlNode, ctx: Context) -> tuple[str, bool]:
    name = read_value(node, ctx)
    if len(name) > _TOPIC_NAME_MAX or any(ord(ch) < 32 for ch in name):
        raise fail(
            node,
            f"a topic name is at most {_TOPIC_NAME_MAX} characters without control characters",
        )
    regex = is_regex_topic(name)
    if regex:
        name = read_regex(node, ctx)
    return name, regex


def _keys(nodes: list[XmlNode], ctx: Context) -> tuple[str, ...]:
    keys: list[str] = []
    first_line: dict[str, int] = {}
    for node in nodes:
        path = read_value(node, ctx)
        if _KEY_PATH.fullmatch(path) is None:
            raise fail(
                node,
                f"{path!r} is not a key path: use a JSON path such as /id or /order/id "
                "(no array indexes, spaces or commas)",
            )
        if path in first_line:
            raise fail(node, f"duplicate Key {path!r} (first at line {first_line[path]})")
        first_line[path] = node.line
        keys.append(path)
    return tuple(keys)


def _topic(node: XmlNode, ctx: Context) -> SowTopicConfig:
    kids = Children(node, _TOPIC_SPEC)
    name, regex = _name(kids.require("Name", " (the topic, or a regular expression)"), ctx)
    message_type = "json"
    if (type_node := kids.one("MessageType")) is not None:
        message_type = read_choice(type_node, ctx, MESSAGE_TYPES, "MessageType")
    durability = "persistent"
    if (durability_node := kids.one("Durability")) is not None:
        durability = read_choice(durability_node, ctx, SOW_DURABILITIES, "Durability")
    expiration = 0.0
    if (expiration_node := kids.one("Expiration")) is not None:
        expiration = read_duration(
            expiration_node, ctx, minimum=0.001, maximum=_MAX_EXPIRATION, zero_ok=True
        )
    return SowTopicConfig(
        name=name,
        is_regex=regex,
        message_type=message_type,
        keys=_keys(kids.many("Key"), ctx),
        durability=durability,
        expiration=expiration,
    )


def read_sow(
    node: XmlNode, ctx: Context
) -> tuple[tuple[SowTopicConfig, ...], tuple[QueueConfig, ...]]:
    """Read ``<SOW>``: at least one ``<Topic>`` or queue, names unique.

    Raises:
        ConfigError: at the element that is wrong.
    """
    kids = Children(node, _SOW_SPEC)
    topic_nodes = kids.many("Topic")
    queue_nodes = sorted((n for kind in QUEUE_KINDS for n in kids.many(kind)), key=lambda n: n.line)
    if not topic_nodes and not queue_nodes:
        raise fail(node, "<SOW> needs at least one <Topic> or queue; remove <SOW> to keep no topic")
    topics: list[SowTopicConfig] = []
    first_line: dict[str, int] = {}
    for topic_node in topic_nodes:
        rule = _topic(topic_node, ctx)
        if rule.name in first_line:
            raise fail(
                topic_node,
                f"duplicate SOW Topic {rule.name!r} (first at line {first_line[rule.name]})",
            )
        first_line[rule.name] = topic_node.line
        topics.append(rule)
    queues: list[QueueConfig] = []
    for queue_node in queue_nodes:
        queue = read_queue(queue_node, ctx)
        if queue.name in first_line:
            raise fail(
                queue_node,
                f"duplicate SOW name {queue.name!r} (first at line {first_line[queue.name]}): "
                "a queue's Name is a topic of its own",
            )
        first_line[queue.name] = queue_node.line
        queues.append(queue)
    return tuple(topics), tuple(queues)
