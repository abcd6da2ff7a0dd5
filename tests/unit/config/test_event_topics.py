"""The <EventTopics> section and what it needs of the others (docs/configuration.md)."""

from __future__ import annotations

import pytest

from spool.server.config import EventTopicsConfig
from tests.unit.config.helpers import assert_refused, doc, parse

CLIENTS = "/spool/events/clients"
LINKS = "/spool/events/links"
SOW_STATS = "/spool/stats/sow"
SOW = "<SOW><Topic><Name>orders</Name><Key>/id</Key></Topic></SOW>"


def topics(*inner: str) -> str:
    """SOW on line 3, <EventTopics> on line 4."""
    return "\n".join([SOW, "<EventTopics>" + "".join(inner) + "</EventTopics>"])


def test_absent_means_every_event_topic_is_off() -> None:
    cfg = parse(doc(SOW))
    assert cfg.event_topics == EventTopicsConfig() and not cfg.event_topics.enabled


def test_topics_an_interval_and_a_budget() -> None:
    cfg = parse(doc(topics(
        f"<Topic><Name>{CLIENTS}</Name></Topic>",
        f"<Topic><Name>{SOW_STATS}</Name><Interval>30s</Interval></Topic>",
        "<MaxEventsPerSecond>50</MaxEventsPerSecond>",
    )))  # fmt: skip
    assert cfg.event_topics == EventTopicsConfig(
        topics=frozenset({CLIENTS, SOW_STATS}), sow_stats_interval=30.0, max_events_per_second=50
    )
    assert cfg.event_topics.enabled


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [
        (topics(), "/SpoolConfig/EventTopics", 4, "holds no <Topic>"),
        (
            topics("<Topic><Name>/spool/events/client</Name></Topic>"),
            "/SpoolConfig/EventTopics/Topic/Name", 4, "is not a valid event topic",
        ),
        (
            topics(f"<Topic><Name>{CLIENTS}</Name></Topic><Topic><Name>{CLIENTS}</Name></Topic>"),
            "/SpoolConfig/EventTopics/Topic[2]/Name", 4, "is listed twice (first at line 4)",
        ),
        (
            topics(f"<Topic><Name>{CLIENTS}</Name><Interval>5s</Interval></Topic>"),
            "/SpoolConfig/EventTopics/Topic/Interval", 4, f"Interval is for {SOW_STATS} only",
        ),
        (
            topics(f"<Topic><Name>{SOW_STATS}</Name><Interval>0.5s</Interval></Topic>"),
            "/SpoolConfig/EventTopics/Topic/Interval", 4, "",
        ),
        (
            topics(f"<Topic><Name>{CLIENTS}</Name></Topic>",
                   "<MaxEventsPerSecond>0</MaxEventsPerSecond>"),
            "/SpoolConfig/EventTopics/MaxEventsPerSecond", 4, "between 1 and 1000000",
        ),
        (
            topics(f"<Topic><Name>{LINKS}</Name></Topic>"),
            "/SpoolConfig/EventTopics/Topic/Name", 4, "needs <Replication>",
        ),
        (
            f"<EventTopics><Topic><Name>{SOW_STATS}</Name></Topic></EventTopics>",
            "/SpoolConfig/EventTopics/Topic/Name", 3, "needs at least one <SOW><Topic>",
        ),
        (
            "\n".join([
                "<TransactionLog><Topic><Name>.*</Name></Topic></TransactionLog>",
                "<SOW><Queue><Name>work</Name><UnderlyingTopic>w</UnderlyingTopic>"
                f"<DeadLetter><Topic>{CLIENTS}</Topic></DeadLetter></Queue></SOW>",
                f"<EventTopics><Topic><Name>{CLIENTS}</Name></Topic></EventTopics>",
            ]),
            "/SpoolConfig/EventTopics/Topic/Name", 5, "the dead-letter topic of queue 'work'",
        ),
    ],
)  # fmt: skip
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)
