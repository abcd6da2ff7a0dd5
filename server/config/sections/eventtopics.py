"""The ``<EventTopics>`` section: which event topics the broker publishes (docs/protocol.md
"Event topics")::

    <EventTopics>
      <Topic><Name>/spool/events/clients</Name></Topic>
      <Topic><Name>/spool/stats/sow</Name><Interval>10s</Interval></Topic>
      <MaxEventsPerSecond>1000</MaxEventsPerSecond>   <!-- per topic -->
    </EventTopics>

Refused here, at the element that says it: a section without ``<Topic>``, a name that is
not an event topic, a topic listed twice, an ``Interval`` on a topic that is not sampled,
an interval or a budget out of range. What needs other sections (links without
replication, SOW samples without SOW topics, a queue or a dead-letter topic of an event
topic's name) is checked by :mod:`spool.server.config.build`.
"""

from __future__ import annotations

from typing import Final

from spool.server.config.model import EVENT_TOPICS, STATS_SOW, EventTopicsConfig
from spool.server.config.values import DAY, Context, read_choice, read_duration, read_int
from spool.server.config.xmltree import Children, Spec, XmlNode, fail

__all__ = ["EventTopicsPart", "read_event_topics"]

_SPEC: Final[Spec] = {"Topic": True, "MaxEventsPerSecond": False}
_TOPIC_SPEC: Final[Spec] = {"Name": False, "Interval": False}
#: the most messages a second one event topic may be given
MAX_EVENTS_PER_SECOND: Final = 1_000_000


class EventTopicsPart:
    """The section and the elements the cross-checks report at.

    Attributes:
        config: the section.
        name_nodes: each topic's ``<Name>`` element, by topic.
    """

    __slots__ = ("config", "name_nodes")

    def __init__(self, config: EventTopicsConfig, name_nodes: dict[str, XmlNode]) -> None:
        self.config = config
        self.name_nodes = name_nodes


def read_event_topics(node: XmlNode, ctx: Context) -> EventTopicsPart:
    """Read ``<EventTopics>``."""
    kids = Children(node, _SPEC)
    topic_nodes = kids.many("Topic")
    if not topic_nodes:
        raise fail(node, "<EventTopics> holds no <Topic>: add one, or remove the element")
    names: dict[str, XmlNode] = {}
    defaults = EventTopicsConfig()
    interval = defaults.sow_stats_interval
    for topic_node in topic_nodes:
        topic_kids = Children(topic_node, _TOPIC_SPEC)
        name_node = topic_kids.require("Name")
        name = read_choice(name_node, ctx, EVENT_TOPICS, "event topic")
        if name in names:
            raise fail(
                name_node,
                f"event topic {name!r} is listed twice (first at line {names[name].line})",
            )
        names[name] = name_node
        if (interval_node := topic_kids.one("Interval")) is not None:
            if name != STATS_SOW:
                raise fail(interval_node, f"Interval is for {STATS_SOW} only (it is sampled)")
            interval = read_duration(interval_node, ctx, minimum=1.0, maximum=DAY)
    per_second = defaults.max_events_per_second
    if (budget_node := kids.one("MaxEventsPerSecond")) is not None:
        per_second = read_int(budget_node, ctx, minimum=1, maximum=MAX_EVENTS_PER_SECOND)
    config = EventTopicsConfig(
        topics=frozenset(names), sow_stats_interval=interval, max_events_per_second=per_second
    )
    return EventTopicsPart(config, names)
