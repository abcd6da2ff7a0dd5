"""``<Admin><Alerts>``: the operator's alert rules (server/alertrules.py evaluates them).

Each ``<Rule>`` names a metric, at most one target of the kind that metric watches, one
threshold (``<Above>`` for ages, lags and delays, ``<Below>`` for free disk space and the
publish rate), how long it must hold (``<For>``) and the alert's level. The unit of the
threshold says what is compared: ``30s`` seconds, ``5000 messages`` records of the log,
``10GB`` bytes, ``5%`` percent, ``100/s`` messages per second. Whatever does not fit the
metric is refused at its element; nothing is accepted and ignored.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, Literal, cast

from spool.server.config.model import (
    ALERT_METRICS,
    AlertMeasure,
    AlertMetric,
    AlertRuleConfig,
)
from spool.server.config.values import (
    DAY,
    Context,
    read_choice,
    read_duration,
    read_name,
    read_value,
)
from spool.server.config.xmltree import Children, Spec, XmlNode, fail
from spool.server.units import UnitError, parse_duration, parse_size

__all__ = ["AlertRulePart", "check_alert_rules", "read_alerts"]

_ALERTS_SPEC: Final[Spec] = {"Rule": True}
_RULE_SPEC: Final[Spec] = {
    "Name": False,
    "Metric": False,
    "Queue": False,
    "Destination": False,
    "Client": False,
    "SubId": False,
    "Topic": False,
    "Above": False,
    "Below": False,
    "For": False,
    "Level": False,
}
#: the target elements each metric takes
_TARGETS: Final[dict[AlertMetric, tuple[str, ...]]] = {
    "queue_age": ("Queue",),
    "subscription_lag": ("Client", "SubId"),
    "link_behind": ("Destination",),
    "disk_free": (),
    "publish_rate_drop": ("Topic",),
}
#: the one threshold element each metric takes
_THRESHOLD: Final[dict[AlertMetric, Literal["Above", "Below"]]] = {
    "queue_age": "Above",
    "subscription_lag": "Above",
    "link_behind": "Above",
    "disk_free": "Below",
    "publish_rate_drop": "Below",
}
_LEVELS: Final = ("warning", "error")
_NUMBER: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_MESSAGES: Final = re.compile(r"([0-9]+)\s*messages?")
_PERCENT: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*%")
_RATE: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(?:/s)?")
#: the longest a rule may wait before it fires (For)
MAX_HOLD: Final = DAY


@dataclass(frozen=True, slots=True)
class AlertRulePart:
    """A rule and the elements the cross-checks report at.

    Attributes:
        config: the rule.
        node: its ``<Rule>``.
        target: its ``<Queue>`` / ``<Destination>``, if any.
    """

    config: AlertRuleConfig
    node: XmlNode
    target: XmlNode | None


def read_alerts(node: XmlNode, ctx: Context) -> tuple[AlertRulePart, ...]:
    """Read ``<Alerts>``: each ``<Rule>`` in file order, names unique."""
    kids = Children(node, _ALERTS_SPEC)
    rules = kids.many("Rule")
    if not rules:
        raise fail(node, "<Alerts> holds no <Rule> (add one, or remove the element)")
    parts: list[AlertRulePart] = []
    seen: dict[str, int] = {}
    for rule_node in rules:
        part = _read_rule(rule_node, ctx)
        name = part.config.name
        if name in seen:
            raise fail(
                rule_node, f"two alert rules are named {name!r} (first at line {seen[name]})"
            )
        seen[name] = rule_node.line
        parts.append(part)
    return tuple(parts)


def _read_rule(node: XmlNode, ctx: Context) -> AlertRulePart:
    kids = Children(node, _RULE_SPEC)
    name = read_name(kids.require("Name", " (the rule's name)"), ctx, "rule name")
    metric = cast(
        AlertMetric,
        read_choice(
            kids.require("Metric", f" (one of: {', '.join(ALERT_METRICS)})"),
            ctx,
            ALERT_METRICS,
            "alert metric",
        ),
    )
    takes = _TARGETS[metric]
    for tag in ("Queue", "Destination", "Client", "SubId", "Topic"):
        if tag not in takes and (extra := kids.one(tag)) is not None:
            what = f"it takes <{'> or <'.join(takes)}>" if takes else "it takes no target"
            raise fail(extra, f"<{tag}> does not apply to the metric {metric} ({what})")
    target_node = next((n for tag in takes if tag != "SubId" and (n := kids.one(tag))), None)
    target = read_value(target_node, ctx) if target_node is not None else None
    sub_id = None
    if (sub_node := kids.one("SubId")) is not None:
        if target is None:
            raise fail(sub_node, "<SubId> needs the <Client> whose subscription it is")
        sub_id = read_value(sub_node, ctx)
    wanted = _THRESHOLD[metric]
    other = "Below" if wanted == "Above" else "Above"
    if (wrong := kids.one(other)) is not None:
        raise fail(wrong, f"the metric {metric} takes <{wanted}>, not <{other}>")
    measure, threshold = _read_threshold(
        kids.require(wanted, f" (the threshold of the metric {metric})"), ctx, metric
    )
    hold = 0.0
    if (for_node := kids.one("For")) is not None:
        hold = read_duration(for_node, ctx, minimum=0.0, maximum=MAX_HOLD)
    level: Literal["warning", "error"] = "warning"
    if (level_node := kids.one("Level")) is not None:
        level = "error" if read_choice(level_node, ctx, _LEVELS, "level") == "error" else "warning"
    config = AlertRuleConfig(
        name=name,
        metric=metric,
        measure=measure,
        above=wanted == "Above",
        threshold=threshold,
        target=target,
        sub_id=sub_id,
        hold=hold,
        level=level,
    )
    return AlertRulePart(config, node, target_node)


def _read_threshold(node: XmlNode, ctx: Context, metric: AlertMetric) -> tuple[AlertMeasure, float]:
    """The threshold and what it counts, from the way it is written."""
    text = read_value(node, ctx)
    try:
        if metric == "queue_age":
            return "seconds", parse_duration(text)
        if metric in ("subscription_lag", "link_behind"):
            if m := _MESSAGES.fullmatch(text):
                return "messages", float(int(m.group(1)))
            if _NUMBER.fullmatch(text):
                raise fail(
                    node,
                    f"{text!r} has no unit: write a time behind (30s) or a count of "
                    "messages (5000 messages)",
                )
            return "seconds", parse_duration(text)
        if metric == "disk_free":
            if m := _PERCENT.fullmatch(text):
                percent = float(m.group(1))
                if not 0 < percent < 100:
                    raise fail(node, f"{text!r}: a percentage of free space is between 0 and 100")
                return "percent", percent
            return "bytes", float(parse_size(text))
        if m := _RATE.fullmatch(text):
            return "per_second", float(m.group(1))
        raise fail(node, f"{text!r} is not a rate (messages per second, e.g. 100/s)")
    except UnitError as exc:
        raise fail(node, str(exc)) from None


def check_alert_rules(
    parts: Sequence[AlertRulePart],
    *,
    queues: Collection[str],
    destinations: Collection[str],
    has_txlog: bool,
) -> None:
    """Refuse rules that name what the instance does not have (a queue, a destination,
    a transaction log whose disk to watch)."""
    for part in parts:
        rule = part.config
        where = part.target if part.target is not None else part.node
        if rule.metric == "queue_age":
            if not queues:
                raise fail(part.node, "queue_age watches message queues, and none is configured")
            if rule.target is not None and rule.target not in queues:
                raise fail(
                    where,
                    f"{rule.target!r} is not a configured queue "
                    f"(the queues: {', '.join(sorted(queues))})",
                )
        elif rule.metric == "link_behind":
            if not destinations:
                raise fail(
                    part.node,
                    "link_behind watches replication destinations, and none is configured",
                )
            if rule.target is not None and rule.target not in destinations:
                raise fail(
                    where,
                    f"{rule.target!r} is not a replication destination "
                    f"(the destinations: {', '.join(sorted(destinations))})",
                )
        elif rule.metric == "disk_free" and not has_txlog:
            raise fail(
                part.node,
                "disk_free watches the transaction log's file system, and no "
                "<TransactionLog> is configured",
            )
