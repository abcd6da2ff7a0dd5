"""The queues of the ``<SOW>`` section: ``<Queue>``, ``<LocalQueue>``, ``<GroupLocalQueue>``.

::

    <Queue>
      <Name>work</Name>                          <!-- what consumers subscribe to -->
      <MessageType>json</MessageType>
      <UnderlyingTopic>work-in</UnderlyingTopic> <!-- a name or a regex; default: Name -->
      <Filter>/kind = 'job'</Filter>             <!-- only matching messages enter -->
      <Semantics>at-least-once</Semantics>       <!-- or at-most-once -->
      <LeasePeriod>30s</LeasePeriod>             <!-- default 5m -->
      <MaxPerSubscriptionBacklog>10</MaxPerSubscriptionBacklog>  <!-- default 1 -->
      <MaxDeliveries>5</MaxDeliveries>           <!-- default 0: no limit -->
      <MaxCancels>3</MaxCancels>                 <!-- default 0: no limit -->
      <DeliveryFairness>proportional</DeliveryFairness>  <!-- round-robin | fast -->
      <Leasing>sublet</Leasing>                  <!-- or strict -->
      <BarrierExpression>/barrier = 1</BarrierExpression>
      <Priority>/prio</Priority>                 <!-- an expression; higher goes first -->
      <Expiration>1h</Expiration>                <!-- default: for ever -->
      <StuckMessageAge>5m</StuckMessageAge>      <!-- alert past this; 0: never -->
      <DeadLetter>                               <!-- where given-up messages go -->
        <Topic>work-dead</Topic>
        <Reasons>max_deliveries,rejected</Reasons>  <!-- default: all four -->
      </DeadLetter>
    </Queue>
    <GroupLocalQueue>... <InitialOwner>spool-a</InitialOwner></GroupLocalQueue>

``<TargetQueueDepth>1000</TargetQueueDepth>`` bounds the messages a queue keeps *active*
(in memory, delivered); the rest wait *inactive* in the transaction log (docs/queues.md
"TargetQueueDepth"). Refused here, at the element that says it: expressions that do not
compile, values out of range. Cross-checks with other sections (the transaction log
records the underlying topic, replicated queues, the initial owner) are in
:mod:`spool.server.config.build`. docs/queues.md explains the defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from spool.server.config.model import (
    DEAD_LETTER_REASONS,
    MESSAGE_TYPES,
    DeadLetterConfig,
    QueueConfig,
)
from spool.server.config.values import (
    Context,
    read_choice,
    read_duration,
    read_expression,
    read_int,
    read_name,
    read_regex,
    read_value,
)
from spool.server.config.xmltree import Children, Spec, XmlNode, fail
from spool.server.protocol.topic import is_regex_topic

__all__ = ["QUEUE_KINDS", "read_queue"]

#: the elements that declare a queue (docs/configuration.md), by replication type
QUEUE_KINDS: Final = ("Queue", "LocalQueue", "GroupLocalQueue")

_SPEC: Final[Spec] = {
    "Name": False,
    "MessageType": False,
    "UnderlyingTopic": False,
    "Filter": False,
    "Semantics": False,
    "LeasePeriod": False,
    "MaxPerSubscriptionBacklog": False,
    "MaxDeliveries": False,
    "MaxCancels": False,
    "DeliveryFairness": False,
    "Leasing": False,
    "BarrierExpression": False,
    "Priority": False,
    "Expiration": False,
    "InitialOwner": False,
    "TargetQueueDepth": False,
    "StuckMessageAge": False,
    "DeadLetter": False,
}
_DEAD_LETTER_SPEC: Final[Spec] = {"Topic": False, "Reasons": False}
_UNSUPPORTED: Final[Mapping[str, str]] = {}
_MAX_COUNT: Final = 1_000_000
_MAX_SECONDS: Final = 10 * 365 * 86400.0


def _dead_letter(node: XmlNode, ctx: Context, queue: str) -> DeadLetterConfig:
    kids = Children(node, _DEAD_LETTER_SPEC)
    topic_node = kids.require("Topic", " (where the dead letters are published)")
    topic = read_value(topic_node, ctx)
    if is_regex_topic(topic):
        raise fail(topic_node, "a dead-letter Topic is one topic, not a regular expression")
    if topic == queue:
        raise fail(topic_node, f"a queue cannot be its own dead-letter topic ({queue!r})")
    reasons = frozenset(DEAD_LETTER_REASONS)
    if (reasons_node := kids.one("Reasons")) is not None:
        items = [r.strip() for r in read_value(reasons_node, ctx).split(",")]
        unknown = [r for r in items if r not in DEAD_LETTER_REASONS]
        if unknown or not all(items):
            raise fail(
                reasons_node,
                f"{(unknown or [''])[0]!r} is not a dead-letter reason "
                f"(allowed: {', '.join(DEAD_LETTER_REASONS)})",
            )
        reasons = frozenset(items)
    return DeadLetterConfig(topic=topic, reasons=reasons)


def read_queue(node: XmlNode, ctx: Context) -> QueueConfig:
    """Read one queue element (its tag is its replication type).

    Raises:
        ConfigError: at the element that is wrong.
    """
    kids = Children(node, _SPEC, _UNSUPPORTED)
    name = read_name(kids.require("Name", " (the queue's topic)"), ctx, "queue")
    if is_regex_topic(name):
        raise fail(
            kids.require("Name", ""), "a queue's Name is one topic, not a regular expression"
        )
    if (type_node := kids.one("MessageType")) is not None:
        read_choice(type_node, ctx, MESSAGE_TYPES, "MessageType")
    underlying, regex = name, False
    if (under_node := kids.one("UnderlyingTopic")) is not None:
        underlying = read_value(under_node, ctx)
        regex = is_regex_topic(underlying)
        if regex:
            underlying = read_regex(under_node, ctx)
    filt = barrier = priority = None
    if (n := kids.one("Filter")) is not None:
        filt = read_expression(n, ctx)
    if (n := kids.one("BarrierExpression")) is not None:
        barrier = read_expression(n, ctx)
    if (n := kids.one("Priority")) is not None:
        priority = read_expression(n, ctx, value=True)
    semantics = "at-least-once"
    if (n := kids.one("Semantics")) is not None:
        semantics = read_choice(n, ctx, ("at-least-once", "at-most-once"), "Semantics")
    lease = 300.0
    if (n := kids.one("LeasePeriod")) is not None:
        lease = read_duration(n, ctx, minimum=0.001, maximum=_MAX_SECONDS)
    backlog = 1
    if (n := kids.one("MaxPerSubscriptionBacklog")) is not None:
        backlog = read_int(n, ctx, minimum=1, maximum=_MAX_COUNT)
    deliveries = cancels = 0
    if (n := kids.one("MaxDeliveries")) is not None:
        deliveries = read_int(n, ctx, minimum=0, maximum=_MAX_COUNT)
    if (n := kids.one("MaxCancels")) is not None:
        cancels = read_int(n, ctx, minimum=0, maximum=_MAX_COUNT)
    fairness = "proportional"
    if (n := kids.one("DeliveryFairness")) is not None:
        fairness = read_choice(n, ctx, ("proportional", "round-robin", "fast"), "DeliveryFairness")
    leasing = "sublet"
    if (n := kids.one("Leasing")) is not None:
        leasing = read_choice(n, ctx, ("sublet", "strict"), "Leasing")
    expiration = 0.0
    if (n := kids.one("Expiration")) is not None:
        expiration = read_duration(n, ctx, minimum=0.001, maximum=_MAX_SECONDS, zero_ok=True)
    target = 0
    if (n := kids.one("TargetQueueDepth")) is not None:
        target = read_int(n, ctx, minimum=1, maximum=_MAX_COUNT)
    stuck = 300.0
    if (n := kids.one("StuckMessageAge")) is not None:
        stuck = read_duration(n, ctx, minimum=1.0, maximum=_MAX_SECONDS, zero_ok=True)
    owner: str | None = None
    owner_node = kids.one("InitialOwner")
    if node.tag == "GroupLocalQueue":
        owner = read_name(
            kids.require("InitialOwner", " (the instance that owns new messages)"), ctx,
            "instance",
        )  # fmt: skip
    elif owner_node is not None:
        raise fail(owner_node, f"InitialOwner is for <GroupLocalQueue>, not <{node.tag}>")
    dead_letter = None
    if (n := kids.one("DeadLetter")) is not None:
        dead_letter = _dead_letter(n, ctx, name)
        if (regex and re.search(underlying, dead_letter.topic)) or (
            not regex and underlying == dead_letter.topic
        ):
            raise fail(
                n,
                f"dead letters of {name!r} would enter the queue again: its UnderlyingTopic "
                f"takes {dead_letter.topic!r}",
            )
    return QueueConfig(
        name=name, kind=node.tag, underlying=underlying, underlying_regex=regex,
        filter=filt, semantics=semantics, lease_period=lease, max_backlog=backlog,
        max_deliveries=deliveries, max_cancels=cancels, fairness=fairness, leasing=leasing,
        barrier=barrier, priority=priority, expiration=expiration, initial_owner=owner,
        target_queue_depth=target, stuck_age=stuck, dead_letter=dead_letter,
    )  # fmt: skip
