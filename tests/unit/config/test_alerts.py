"""<Admin><Alerts>: the operator's alert rules, accepted and refused."""

from __future__ import annotations

import pytest

from spool.server.config import AlertRuleConfig
from tests.unit.config.helpers import assert_refused, doc, parse

QUEUE = (
    "<TransactionLog><Topic><Name>work-in</Name></Topic></TransactionLog><SOW><Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic></Queue></SOW>"
)


def alerts(*rules: str) -> str:
    """An Admin section whose first rule starts on the body's line 2 (file line 4)."""
    return "<Admin><Alerts>\n" + "\n".join(f"<Rule>{r}</Rule>" for r in rules) + "</Alerts></Admin>"


def test_rules_are_read_with_their_units_targets_and_defaults() -> None:
    body = alerts(
        "<Name>work-old</Name><Metric>queue_age</Metric><Queue>work</Queue>"
        "<Above>2m</Above><For>30s</For><Level>error</Level>",
        "<Name>lag</Name><Metric>subscription_lag</Metric><Client>c1</Client>"
        "<SubId>s</SubId><Above>5000 messages</Above>",
        "<Name>lag-s</Name><Metric>subscription_lag</Metric><Above>45s</Above>",
        "<Name>disk</Name><Metric>disk_free</Metric><Below>10GB</Below>",
        "<Name>disk-pct</Name><Metric>disk_free</Metric><Below>7.5%</Below>",
        "<Name>quiet</Name><Metric>publish_rate_drop</Metric><Topic>orders</Topic>"
        "<Below>100/s</Below><For>5m</For>",
    )
    rules = parse(doc(body + QUEUE)).admin.alert_rules
    assert rules == (
        AlertRuleConfig("work-old", "queue_age", "seconds", True, 120.0, "work", None, 30.0,
                        "error"),
        AlertRuleConfig("lag", "subscription_lag", "messages", True, 5000.0, "c1", "s"),
        AlertRuleConfig("lag-s", "subscription_lag", "seconds", True, 45.0),
        AlertRuleConfig("disk", "disk_free", "bytes", False, 10.0 * 1024**3),
        AlertRuleConfig("disk-pct", "disk_free", "percent", False, 7.5),
        AlertRuleConfig("quiet", "publish_rate_drop", "per_second", False, 100.0, "orders",
                        None, 300.0),
    )  # fmt: skip
    assert parse(doc("<Admin/>")).admin.alert_rules == ()


RULE = "<Name>r</Name><Metric>queue_age</Metric><Above>1m</Above>"
R = "/SpoolConfig/Admin/Alerts/Rule"

# (id, body, path, line, fragment)
REFUSED: list[tuple[str, str, str, int, str]] = [
    ("empty Alerts", "<Admin><Alerts/></Admin>", "/SpoolConfig/Admin/Alerts", 3, "holds no <Rule>"),
    ("no Name", alerts("<Metric>queue_age</Metric><Above>1m</Above>") + QUEUE, R, 4,
     "<Rule> needs a <Name>"),
    ("unknown metric", alerts("<Name>r</Name><Metric>cpu</Metric><Above>1</Above>"),
     f"{R}/Metric", 4, "'cpu' is not a valid alert metric (allowed: queue_age, "),
    ("no threshold", alerts("<Name>r</Name><Metric>queue_age</Metric>") + QUEUE, R, 4,
     "<Rule> needs a <Above> (the threshold of the metric queue_age)"),
    ("wrong direction", alerts("<Name>r</Name><Metric>disk_free</Metric><Above>1GB</Above>"),
     f"{R}/Above", 4, "the metric disk_free takes <Below>, not <Above>"),
    ("target of another metric", alerts(RULE + "<Destination>b</Destination>") + QUEUE,
     f"{R}/Destination", 4, "<Destination> does not apply to the metric queue_age"),
    ("disk takes no target", alerts(
        "<Name>r</Name><Metric>disk_free</Metric><Queue>q</Queue><Below>1GB</Below>"),
     f"{R}/Queue", 4, "it takes no target"),
    ("SubId without Client", alerts(
        "<Name>r</Name><Metric>subscription_lag</Metric><SubId>s</SubId><Above>1s</Above>"),
     f"{R}/SubId", 4, "<SubId> needs the <Client>"),
    ("lag without a unit", alerts(
        "<Name>r</Name><Metric>subscription_lag</Metric><Above>500</Above>"),
     f"{R}/Above", 4, "'500' has no unit: write a time behind (30s) or a count of messages"),
    ("age not a duration", alerts("<Name>r</Name><Metric>queue_age</Metric><Above>5%</Above>"),
     f"{R}/Above", 4, "'5%' is not a valid duration"),
    ("percent out of range", alerts(
        "<Name>r</Name><Metric>disk_free</Metric><Below>100%</Below>"),
     f"{R}/Below", 4, "between 0 and 100"),
    ("not a rate", alerts(
        "<Name>r</Name><Metric>publish_rate_drop</Metric><Below>fast</Below>"),
     f"{R}/Below", 4, "'fast' is not a rate"),
    ("bad level", alerts(RULE + "<Level>critical</Level>") + QUEUE, f"{R}/Level", 4,
     "'critical' is not a valid level (allowed: warning, error)"),
    ("For too long", alerts(RULE + "<For>2d</For>") + QUEUE, f"{R}/For", 4,
     "For must be between 0s and 1d, got 2d"),
    ("repeated name", alerts(RULE, RULE) + QUEUE, f"{R}[2]", 5,
     "two alert rules are named 'r' (first at line 4)"),
    ("unknown child", alerts(RULE + "<Severity>x</Severity>") + QUEUE, f"{R}/Severity", 4,
     "unknown element <Severity> in <Rule>"),
    ("no queue configured", alerts(RULE), R, 4,
     "queue_age watches message queues, and none is configured"),
    ("unknown queue", alerts(RULE + "<Queue>other</Queue>") + QUEUE, f"{R}/Queue", 4,
     "'other' is not a configured queue (the queues: work)"),
    ("no destination", alerts(
        "<Name>r</Name><Metric>link_behind</Metric><Above>10s</Above>"), R, 4,
     "link_behind watches replication destinations, and none is configured"),
    ("disk without a log", alerts(
        "<Name>r</Name><Metric>disk_free</Metric><Below>1GB</Below>"), R, 4,
     "no <TransactionLog> is configured"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "path", "line", "fragment"),
                         [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])  # fmt: skip
def test_malformed_rules_are_refused_at_their_element(
    body: str, path: str, line: int, fragment: str
) -> None:
    assert_refused(body, path, line, fragment)
