"""The <SOW> section: SOW topics, keys, durability, expiration; queues refused."""

from __future__ import annotations

import pytest

from spool.server.config import ConfigError, SowTopicConfig
from tests.unit.config.helpers import assert_refused, doc, parse


def sow(*lines: str) -> str:
    """A <SOW> whose first inner line is file line 4."""
    return "\n".join(["<SOW>", *lines, "</SOW>"])


def topic(*inner: str) -> str:
    return "<Topic>" + "".join(inner) + "</Topic>"


def test_a_topic_with_keys_durability_and_expiration() -> None:
    cfg = parse(
        doc(
            sow(
                topic(
                    "<Name>orders</Name><MessageType>json</MessageType>",
                    "<Key>/region</Key><Key>/order/id</Key>",
                    "<Durability>transient</Durability><Expiration>90s</Expiration>",
                ),
                topic("<Name>^md\\.</Name>"),
            )
        )
    )
    orders, md = cfg.sow
    assert orders == SowTopicConfig(
        name="orders",
        keys=("/region", "/order/id"),
        durability="transient",
        expiration=90.0,
    )
    assert not orders.persistent and not orders.is_regex
    # the defaults: persistent (as in AMPS), no keys, no expiration
    assert md.is_regex and md.persistent and md.keys == () and md.expiration == 0.0
    assert cfg.sow_topic("orders") is orders
    assert cfg.sow_topic("md.ibm") is md
    assert cfg.sow_topic("xmd.ibm") is None
    assert cfg.sow_topic("orders2") is None


def test_the_first_matching_rule_wins() -> None:
    cfg = parse(doc(sow(topic("<Name>^ord</Name>"), topic("<Name>orders</Name><Key>/id</Key>"))))
    first = cfg.sow_topic("orders")
    assert first is not None and first.name == "^ord"


def test_no_sow_section_keeps_nothing() -> None:
    cfg = parse(doc(""))
    assert cfg.sow == () and cfg.sow_topic("orders") is None


def test_expiration_zero_means_for_ever() -> None:
    cfg = parse(doc(sow(topic("<Name>a</Name><Expiration>0</Expiration>"))))
    assert cfg.sow[0].expiration == 0.0


REFUSED: list[tuple[str, str, str, int, str]] = [
    ("empty SOW", "<SOW>\n</SOW>", "/SpoolConfig/SOW", 3, "<SOW> needs at least one <Topic>"),
    (
        "topic without a name",
        sow("<Topic><Key>/id</Key></Topic>"),
        "/SpoolConfig/SOW/Topic",
        4,
        "<Topic> needs a <Name>",
    ),
    (
        "bad key path",
        sow("<Topic><Name>a</Name>", "<Key>id</Key></Topic>"),
        "/SpoolConfig/SOW/Topic/Key",
        5,
        "'id' is not a key path",
    ),
    (
        "key path with an index",
        sow("<Topic><Name>a</Name>", "<Key>/legs[0]</Key></Topic>"),
        "/SpoolConfig/SOW/Topic/Key",
        5,
        "is not a key path",
    ),
    (
        "duplicate key",
        sow("<Topic><Name>a</Name><Key>/id</Key>", "<Key>/id</Key></Topic>"),
        "/SpoolConfig/SOW/Topic/Key[2]",
        5,
        "duplicate Key '/id' (first at line 4)",
    ),
    (
        "bad durability",
        sow("<Topic><Name>a</Name>", "<Durability>disk</Durability></Topic>"),
        "/SpoolConfig/SOW/Topic/Durability",
        5,
        "'disk' is not a valid Durability (allowed: persistent, transient)",
    ),
    (
        "bad expiration",
        sow("<Topic><Name>a</Name>", "<Expiration>soon</Expiration></Topic>"),
        "/SpoolConfig/SOW/Topic/Expiration",
        5,
        "'soon' is not a valid duration",
    ),
    (
        "bad message type",
        sow("<Topic><Name>a</Name>", "<MessageType>xml</MessageType></Topic>"),
        "/SpoolConfig/SOW/Topic/MessageType",
        5,
        "'xml' is not a valid MessageType",
    ),
    (
        "bad regex",
        sow("<Topic>", "<Name>^(a</Name></Topic>"),
        "/SpoolConfig/SOW/Topic/Name",
        5,
        "is not a valid regular expression",
    ),
    (
        "duplicate topic",
        sow("<Topic><Name>a</Name></Topic>", "<Topic><Name>a</Name></Topic>"),
        "/SpoolConfig/SOW/Topic[2]",
        5,
        "duplicate SOW Topic 'a' (first at line 4)",
    ),
    (
        "unknown element",
        sow("<Topic><Name>a</Name>", "<History>1h</History></Topic>"),
        "/SpoolConfig/SOW/Topic/History",
        5,
        "unknown element <History> in <Topic>",
    ),
    (
        "queue without a name",
        sow("<Topic><Name>a</Name></Topic>", "<LocalQueue/>"),
        "/SpoolConfig/SOW/LocalQueue",
        5,
        "needs a <Name>",
    ),
    (
        "queue named like a topic",
        sow("<Topic><Name>a</Name></Topic>", "<Queue><Name>a</Name></Queue>"),
        "/SpoolConfig/SOW/Queue",
        5,
        "duplicate SOW name 'a' (first at line 4)",
    ),
    (
        "queue TargetQueueDepth 0",
        sow(
            "<Topic><Name>a</Name></Topic>",
            "<Queue><Name>q</Name><TargetQueueDepth>0</TargetQueueDepth></Queue>",
        ),
        "/SpoolConfig/SOW/Queue/TargetQueueDepth",
        5,
        "TargetQueueDepth",
    ),
    (
        "queue StuckMessageAge below a second",
        sow(
            "<Topic><Name>a</Name></Topic>",
            "<Queue><Name>q</Name><StuckMessageAge>500ms</StuckMessageAge></Queue>",
        ),
        "/SpoolConfig/SOW/Queue/StuckMessageAge",
        5,
        "StuckMessageAge must be between 1s and",
    ),
    (
        "queue StuckMessageAge not a duration",
        sow(
            "<Topic><Name>a</Name></Topic>",
            "<Queue><Name>q</Name><StuckMessageAge>soon</StuckMessageAge></Queue>",
        ),
        "/SpoolConfig/SOW/Queue/StuckMessageAge",
        5,
        "soon",
    ),
    (
        "queue bad barrier",
        sow(
            "<Topic><Name>a</Name></Topic>",
            "<Queue><Name>q</Name><BarrierExpression>/a ==</BarrierExpression></Queue>",
        ),
        "/SpoolConfig/SOW/Queue/BarrierExpression",
        5,
        "the BarrierExpression does not compile",
    ),
    (
        "queue bad fairness",
        sow(
            "<Topic><Name>a</Name></Topic>",
            "<Queue><Name>q</Name><DeliveryFairness>fair</DeliveryFairness></Queue>",
        ),
        "/SpoolConfig/SOW/Queue/DeliveryFairness",
        5,
        "'fair' is not a valid DeliveryFairness",
    ),
    (
        "queue backlog zero",
        sow(
            "<Topic><Name>a</Name></Topic>",
            "<Queue><Name>q</Name><MaxPerSubscriptionBacklog>0</MaxPerSubscriptionBacklog></Queue>",
        ),
        "/SpoolConfig/SOW/Queue/MaxPerSubscriptionBacklog",
        5,
        "must be between 1 and",
    ),
    (
        "InitialOwner outside GroupLocalQueue",
        sow(
            "<Topic><Name>a</Name></Topic>",
            "<LocalQueue><Name>q</Name><InitialOwner>t</InitialOwner></LocalQueue>",
        ),
        "/SpoolConfig/SOW/LocalQueue/InitialOwner",
        5,
        "InitialOwner is for <GroupLocalQueue>",
    ),
    (
        "dead-letter topic that is a regex",
        sow("<Queue><Name>q</Name><DeadLetter><Topic>^dead</Topic></DeadLetter></Queue>"),
        "/SpoolConfig/SOW/Queue/DeadLetter/Topic",
        4,
        "one topic, not a regular expression",
    ),
    (
        "dead-letter topic that is the queue",
        sow("<Queue><Name>q</Name><DeadLetter><Topic>q</Topic></DeadLetter></Queue>"),
        "/SpoolConfig/SOW/Queue/DeadLetter/Topic",
        4,
        "a queue cannot be its own dead-letter topic",
    ),
    (
        "dead letters that would enter the queue again",
        sow(
            "<Queue><Name>q</Name><UnderlyingTopic>^jobs</UnderlyingTopic>",
            "<DeadLetter><Topic>jobs-dead</Topic></DeadLetter></Queue>",
        ),
        "/SpoolConfig/SOW/Queue/DeadLetter",
        5,
        "would enter the queue again",
    ),
    (
        "dead-letter reason unknown",
        sow(
            "<Queue><Name>q</Name><DeadLetter><Topic>d</Topic>",
            "<Reasons>rejected,acked</Reasons></DeadLetter></Queue>",
        ),
        "/SpoolConfig/SOW/Queue/DeadLetter/Reasons",
        5,
        "'acked' is not a dead-letter reason (allowed: max_deliveries, max_cancels, expired,",
    ),
    (
        "dead letter without a topic",
        sow("<Queue><Name>q</Name><DeadLetter></DeadLetter></Queue>"),
        "/SpoolConfig/SOW/Queue/DeadLetter",
        4,
        "needs a <Topic>",
    ),
    (
        "GroupLocalQueue without InitialOwner",
        sow("<Topic><Name>a</Name></Topic>", "<GroupLocalQueue><Name>q</Name></GroupLocalQueue>"),
        "/SpoolConfig/SOW/GroupLocalQueue",
        5,
        "needs a <InitialOwner>",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [r[1:] for r in REFUSED],
    ids=[r[0] for r in REFUSED],
)
def test_refused_with_path_and_line(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


def test_queues_are_read_with_their_defaults() -> None:
    log = "<TransactionLog><Topic><Name>work-in</Name></Topic><Topic><Name>^jobs/</Name></Topic></TransactionLog>"
    cfg = parse(
        doc(
            log
            + sow(
                "<Queue><Name>work</Name><UnderlyingTopic>work-in</UnderlyingTopic>"
                "<LeasePeriod>30s</LeasePeriod><MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>"
                "<DeliveryFairness>round-robin</DeliveryFairness><Leasing>strict</Leasing>"
                "<BarrierExpression>/barrier = 1</BarrierExpression><Priority>/p</Priority>"
                "<Filter>/kind = 'job'</Filter><MaxDeliveries>3</MaxDeliveries></Queue>",
                "<LocalQueue><Name>jobs</Name><UnderlyingTopic>^jobs/</UnderlyingTopic></LocalQueue>",
                "<GroupLocalQueue><Name>work-in</Name><InitialOwner>t</InitialOwner></GroupLocalQueue>",
            )
        )
    )
    work, jobs, group = cfg.queues
    assert (work.kind, work.underlying, work.lease_period, work.max_backlog) == (
        "Queue",
        "work-in",
        30.0,
        10,
    )
    assert (work.fairness, work.leasing, work.max_deliveries, work.filter) == (
        "round-robin",
        "strict",
        3,
        "/kind = 'job'",
    )
    assert (jobs.underlying_regex, jobs.takes("jobs/a"), jobs.takes("x/jobs/a")) == (
        True,
        True,
        False,
    )
    # the documented defaults (docs/queues.md): at-least-once, 5 minute leases, backlog 1
    assert (jobs.semantics, jobs.lease_period, jobs.max_backlog, jobs.fairness, jobs.leasing) == (
        "at-least-once",
        300.0,
        1,
        "proportional",
        "sublet",
    )
    assert (group.kind, group.initial_owner, group.underlying) == (
        "GroupLocalQueue",
        "t",
        "work-in",
    )


def test_target_queue_depth_is_read_for_a_local_queue() -> None:
    log = "<TransactionLog><Topic><Name>work-in</Name></Topic></TransactionLog>"
    cfg = parse(
        doc(
            log
            + sow(
                "<LocalQueue><Name>work</Name><UnderlyingTopic>work-in</UnderlyingTopic>"
                "<TargetQueueDepth>10</TargetQueueDepth></LocalQueue>",
                "<Queue><Name>all</Name><UnderlyingTopic>work-in</UnderlyingTopic></Queue>",
            )
        )
    )
    assert [q.target_queue_depth for q in cfg.queues] == [10, 0]


def test_target_queue_depth_is_read_on_replicated_queues() -> None:
    log = "<TransactionLog><Topic><Name>work-in</Name></Topic></TransactionLog>"
    transports = (
        "<Transports><Transport><Name>w</Name><Type>websocket</Type></Transport>"
        "<Transport><Name>r</Name><Type>amps-replication</Type></Transport></Transports>"
    )
    body = (
        log
        + transports
        + sow(
            "<Queue><Name>work</Name><UnderlyingTopic>work-in</UnderlyingTopic>"
            "<TargetQueueDepth>10</TargetQueueDepth></Queue>"
        )
    )
    cfg = parse(doc(body))
    assert cfg.replicates and (cfg.queues[0].kind, cfg.queues[0].target_queue_depth) == (
        "Queue", 10,
    )  # fmt: skip
    group = parse(
        doc(
            body.replace("Queue>", "GroupLocalQueue>").replace(
                "<TargetQueueDepth>", "<InitialOwner>test</InitialOwner><TargetQueueDepth>"
            )
        )
    )
    assert group.queues[0].kind == "GroupLocalQueue"
    assert group.queues[0].target_queue_depth == 10
    local = parse(doc(body.replace("<Queue>", "<LocalQueue>").replace("</Queue>", "</LocalQueue>")))
    assert local.replicates and local.queues[0].target_queue_depth == 10


def test_stuck_message_age_defaults_to_five_minutes_and_zero_turns_it_off() -> None:
    log = "<TransactionLog><Topic><Name>work-in</Name></Topic></TransactionLog>"
    cfg = parse(
        doc(
            log
            + sow(
                "<Queue><Name>a</Name><UnderlyingTopic>work-in</UnderlyingTopic></Queue>",
                "<Queue><Name>b</Name><UnderlyingTopic>work-in</UnderlyingTopic>"
                "<StuckMessageAge>0</StuckMessageAge></Queue>",
                "<Queue><Name>c</Name><UnderlyingTopic>work-in</UnderlyingTopic>"
                "<StuckMessageAge>90s</StuckMessageAge></Queue>",
            )
        )
    )
    assert [q.stuck_age for q in cfg.queues] == [300.0, 0.0, 90.0]


def test_a_dead_letter_topic_is_read_and_checked_against_the_log() -> None:
    log = "<TransactionLog><Topic><Name>work-in</Name></Topic>{}</TransactionLog>"
    queue = (
        "<Queue><Name>work</Name><UnderlyingTopic>work-in</UnderlyingTopic><DeadLetter>"
        "<Topic>work-dead</Topic>{}</DeadLetter></Queue>"
    )
    recorded = log.format("<Topic><Name>work-dead</Name></Topic>")
    cfg = parse(doc(recorded + sow(queue.format("<Reasons>rejected, expired</Reasons>"))))
    (work,) = cfg.queues
    assert work.dead_letter is not None and work.dead_letter.topic == "work-dead"
    assert work.dead_letter.reasons == {"rejected", "expired"}
    (every,) = parse(doc(recorded + sow(queue.format("")))).queues
    assert every.dead_letter is not None
    assert every.dead_letter.reasons == {"max_deliveries", "max_cancels", "expired", "rejected"}
    with pytest.raises(ConfigError, match="does not record 'work-dead', the dead-letter topic"):
        parse(doc(log.format("") + sow(queue.format(""))))
    two = sow(
        queue.format(""),
        "<Queue><Name>work-dead</Name><UnderlyingTopic>work-in</UnderlyingTopic></Queue>",
    )
    with pytest.raises(ConfigError, match="'work-dead', a queue's name"):
        parse(doc(recorded + two))


def test_dead_letters_that_would_come_back_through_other_queues_are_refused() -> None:
    log = "<TransactionLog><Topic><Name>.*</Name></Topic></TransactionLog>"

    def queue(name: str, under: str, dead: str) -> str:
        return (
            f"<Queue><Name>{name}</Name><UnderlyingTopic>{under}</UnderlyingTopic>"
            f"<DeadLetter><Topic>{dead}</Topic></DeadLetter></Queue>"
        )

    with pytest.raises(ConfigError, match="dead letters would come back to queue 'a': a -> b -> a"):
        parse(doc(log + sow(queue("a", "in-a", "dead-a"), queue("b", "dead-a", "in-a"))))
    three = sow(queue("a", "in-a", "dead-a"), queue("b", "dead-a", "dead-b"),
                queue("c", "^dead-b", "in-a"))  # fmt: skip
    with pytest.raises(ConfigError, match="a -> b -> c -> a"):
        parse(doc(log + three))
    # a chain that ends is fine: a's dead letters are worked off by b, whose go to a topic
    chain = sow(queue("a", "in-a", "dead-a"), queue("b", "dead-a", "dead-b"))
    assert [q.name for q in parse(doc(log + chain)).queues] == ["a", "b"]
