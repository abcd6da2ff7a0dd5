"""The ``<Options>`` of the event triggers: an action run once per message or happening.

One reader per trigger module, as :mod:`spool.server.config.sections.actionmodules` has for
the others, each checking its options against the other sections (:class:`ActionFacts`): a
SOW trigger names a topic a ``<SOW><Topic>`` rule keeps, a dead-letter trigger a queue
with a ``<DeadLetter>`` and reasons it dead-letters for, a link trigger links the instance
has, ``MessageSource`` other than ``local`` an instance that receives replicated messages.
Filters compile as subscriptions' do. A trigger that could never fire is refused here,
at the option that makes it so.

The AMPS replication triggers are fixed selections of ``spool-action-on-link-state``
(``amps-action-on-connect-replication`` is its ``out`` links' ``connected`` state...), so
the runtime has one class of link trigger.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Final, Literal

from spool.server.config.actions import (
    LINK_STATES,
    MessageSource,
    OnClient,
    OnDeadLetter,
    OnLinkState,
    OnOof,
    OnPublishMessage,
    OnSowRemoval,
    TopicMatch,
    Trigger,
)
from spool.server.config.model import EVENT_TOPICS, MESSAGE_TYPES
from spool.server.config.sections.actionmodules import (
    ActionFacts,
    Options,
    TriggerReader,
    sow_rule,
)
from spool.server.config.values import (
    Context,
    read_choice,
    read_expression,
    read_name,
    read_value,
)
from spool.server.config.xmltree import Spec, XmlNode, fail
from spool.server.protocol.topic import is_regex_topic

__all__ = ["EVENT_TRIGGER_READERS", "read_topic_match"]

_TOPIC_MAX: Final = 1024
_SOURCES: Final = ("local", "replicated", "all")
_OOF_REASONS: Final = ("match", "deleted", "expired")
_DIRECTIONS: Final = ("out", "in", "both")


# -- shared options -------------------------------------------------------------------------


def read_topic_match(node: XmlNode, ctx: Context) -> TopicMatch:
    """A ``Topic`` option: one topic name, or a regular expression that compiles."""
    text = read_value(node, ctx)
    if len(text) > _TOPIC_MAX or any(ord(ch) < 32 for ch in text):
        raise fail(node, f"a Topic has at most {_TOPIC_MAX} characters and no control "
                   "characters")  # fmt: skip
    if not is_regex_topic(text):
        return TopicMatch(text)
    try:
        re.compile(text)
    except re.error as exc:
        raise fail(node, f"{text!r} is not a valid regular expression: {exc}") from None
    return TopicMatch(text, is_regex=True)


def _filter(opts: Options, ctx: Context) -> str | None:
    node = opts.one("Filter")
    return read_expression(node, ctx) if node is not None else None


def _message_type(opts: Options, ctx: Context) -> None:
    if (node := opts.one("MessageType")) is not None:
        read_choice(node, ctx, MESSAGE_TYPES, "MessageType")


def _source(opts: Options, ctx: Context, facts: ActionFacts) -> MessageSource:
    node = opts.one("MessageSource")
    if node is None:
        return "local"
    value = read_choice(node, ctx, _SOURCES, "MessageSource")
    if value == "local":
        return "local"
    if not facts.replicates:
        raise fail(node, f"MessageSource {value} takes messages received over replication "
                   "links, and this instance receives no replicated messages (no "
                   "<Replication> nor amps-replication transport)")  # fmt: skip
    if value == "replicated":
        return "replicated"
    return "all"


def _sow_topic(node: XmlNode, topic: TopicMatch, facts: ActionFacts) -> None:
    """Refuse a topic no ``<SOW><Topic>`` rule can keep (its trigger would never fire)."""
    if topic.is_regex and any(
        r.is_regex or re.search(topic.text, r.name) for r in facts.sow_topics
    ):
        return  # a rule's name it matches, or two regular expressions (overlap unknown)
    sow_rule(node, topic.text, facts)


def _names(
    nodes: list[XmlNode],
    ctx: Context,
    what: str,
    check: Collection[str] | None = None,
    *,
    read: Callable[[XmlNode, Context], str] = read_value,
    refuse: Callable[[str], str] | None = None,
) -> tuple[str, ...]:
    """Repeated name options (each value read with ``read``), each once; ``check`` holds
    the names allowed, and a name not in it is refused with ``refuse(name)``
    (default: a message listing them)."""
    chosen: list[str] = []
    for node in nodes:
        value = read(node, ctx)
        if check is not None and value not in check:
            if refuse is not None:
                raise fail(node, refuse(value))
            raise fail(node, f"{what} {value!r} is not one of {', '.join(check) or 'none'}")
        if value in chosen:
            raise fail(node, f"{what} {value!r} is named twice")
        chosen.append(value)
    return tuple(chosen)


# -- message triggers -----------------------------------------------------------------------


def _on_publish(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    name = "amps-action-on-publish-message"
    spec: Spec = {
        "Topic": False, "MessageType": False, "Filter": False, "MessageSource": False,
        "Options": False,
    }  # fmt: skip
    opts = Options(element, options, spec, name)
    if (subscribe := opts.one("Options")) is not None:
        raise fail(subscribe, "on-publish here is a publish stage, not a subscription: "
                   "subscribe options do not apply; remove <Options>")  # fmt: skip
    topic_node = opts.require("Topic", name, " (the topic, or a regular expression of topics)")
    topic = read_topic_match(topic_node, ctx)
    if not topic.is_regex and topic.text in EVENT_TOPICS and topic.text not in facts.event_topics:
        raise fail(topic_node, f"{topic.text!r} is an event topic that is not turned on, so "
                   "nothing is published to it: add it to <EventTopics>, or remove this "
                   "trigger")  # fmt: skip
    _message_type(opts, ctx)
    return OnPublishMessage(
        topic, _filter(opts, ctx), _source(opts, ctx, facts), where=element.path
    )


def _on_sow_removal(reason: Literal["deleted", "expired"]) -> TriggerReader:
    verb = "delete" if reason == "deleted" else "expire"
    name = f"amps-action-on-sow-{verb}-message"

    def reader(
        element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
    ) -> Trigger:
        extra = "MessageSource" if reason == "deleted" else "Reason"
        spec: Spec = {"Topic": False, "MessageType": False, "Filter": False, extra: False}
        opts = Options(element, options, spec, name)
        topic_node = opts.require("Topic", name, " (a SOW topic, or a regular expression)")
        topic = read_topic_match(topic_node, ctx)
        _sow_topic(topic_node, topic, facts)
        _message_type(opts, ctx)
        if (reason_node := opts.one("Reason")) is not None:
            value = read_value(reason_node, ctx)
            if value != "time_limit":
                raise fail(reason_node, f"Spool expires SOW records by time only: the Reason "
                           f"is time_limit (or leave it out), not {value!r}")  # fmt: skip
        source: MessageSource = _source(opts, ctx, facts) if reason == "deleted" else "local"
        return OnSowRemoval(
            reason, topic, _filter(opts, ctx), source, where=element.path, module=name
        )

    return reader


def _on_oof(element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts) -> Trigger:
    name = "amps-action-on-oof-message"
    spec: Spec = {"Topic": False, "MessageType": False, "Filter": False, "Reason": True}
    opts = Options(element, options, spec, name)
    topic_node = opts.require("Topic", name, " (a SOW topic, or a regular expression)")
    topic = read_topic_match(topic_node, ctx)
    _sow_topic(topic_node, topic, facts)
    _message_type(opts, ctx)
    flt = _filter(opts, ctx)
    reason_nodes = opts.many("Reason")
    reasons = _names(reason_nodes, ctx, "Reason", _OOF_REASONS)
    if flt is None and "match" in reasons:
        node = reason_nodes[reasons.index("match")]
        raise fail(node, "Reason match is a record that stops matching the Filter, and this "
                   "trigger has no <Filter>")  # fmt: skip
    if not reasons:
        reasons = _OOF_REASONS if flt is not None else ("deleted", "expired")
    return OnOof(topic, flt, reasons, where=element.path)


def _on_dead_letter(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    name = "spool-action-on-queue-dead-letter"
    if not facts.dead_letter_queues:
        listed = ", ".join(facts.queues) or "none"
        raise fail(element, f"{name} fires on a queue's dead letters, and no queue has a "
                   f"<DeadLetter> (queues: {listed}); remove this trigger")  # fmt: skip
    spec: Spec = {"Queue": True, "Reason": True, "Filter": False}
    opts = Options(element, options, spec, name)

    def no_dead_letters(queue: str) -> str:
        what = "has no <DeadLetter>" if queue in facts.queues else "is not a configured queue"
        return (f"queue {queue!r} {what}; queues with dead letters: "
                f"{', '.join(facts.dead_letter_queues)}")  # fmt: skip

    queues = _names(opts.many("Queue"), ctx, "queue", facts.dead_letter_reasons,
                    refuse=no_dead_letters) or facts.dead_letter_queues  # fmt: skip
    possible: set[str] = set()
    for queue in queues:
        possible.update(facts.dead_letter_reasons.get(queue, ()))
    known = tuple(sorted(possible))
    reasons = _names(opts.many("Reason"), ctx, "Reason")
    for node, reason in zip(opts.many("Reason"), reasons, strict=True):
        if reason not in possible:
            raise fail(node, f"no queue named here dead-letters for {reason!r} (their "
                       f"reasons: {', '.join(known)})")  # fmt: skip
    return OnDeadLetter(queues, reasons or known, _filter(opts, ctx), where=element.path)


# -- happening triggers ---------------------------------------------------------------------


def _on_client(
    event: Literal["connected", "disconnected", "logged_on"], name: str
) -> TriggerReader:
    def reader(
        element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
    ) -> Trigger:
        opts = Options(element, options, {"Filter": False, "Transport": True}, name)
        transports = _names(opts.many("Transport"), ctx, "client transport",
                            facts.client_transports)  # fmt: skip
        return OnClient(event, _filter(opts, ctx), transports, where=element.path, module=name)

    return reader


def _link_names(opts: Options, ctx: Context, facts: ActionFacts, direction: str) -> tuple[str, ...]:
    """The ``Link`` options: a destination's name (``out``), or a source's, which is the
    name of the instance that dials in and cannot be listed in advance (``in``, ``both``)."""
    return _names(
        opts.many("Link"), ctx, "link", facts.destinations if direction == "out" else None,
        read=lambda node, c: read_name(node, c, "link name"),
        refuse=lambda link: (f"no replication destination named {link!r} (configured: "
                             f"{', '.join(facts.destinations) or 'none'})"),
    )  # fmt: skip


def _needs_links(element: XmlNode, name: str, facts: ActionFacts, direction: str) -> None:
    if not facts.replicates:
        raise fail(element, f"{name} fires on replication links, and this instance has none "
                   "(no <Replication> nor amps-replication transport); remove this trigger")  # fmt: skip
    if direction == "out" and not facts.destinations:
        raise fail(element, f"{name} fires on the links to this instance's destinations, and "
                   "no <Replication> <Destination> is configured; remove this trigger")  # fmt: skip


def _on_link_state(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    name = "spool-action-on-link-state"
    spec: Spec = {"Direction": False, "State": True, "Link": True, "Filter": False}
    opts = Options(element, options, spec, name)
    direction: Literal["out", "in", "both"] = "both"
    if (direction_node := opts.one("Direction")) is not None:
        value = read_choice(direction_node, ctx, _DIRECTIONS, "Direction")
        if value == "out":
            direction = "out"
        elif value == "in":
            direction = "in"
    _needs_links(element, name, facts, direction)
    if direction == "both":
        allowed = tuple(dict.fromkeys(LINK_STATES["out"] + LINK_STATES["in"]))
    else:
        allowed = LINK_STATES[direction]
    states = _names(opts.many("State"), ctx, "State", allowed)
    links = _link_names(opts, ctx, facts, direction)
    return OnLinkState(direction, states or allowed, links, _filter(opts, ctx), where=element.path)


def _on_replication(direction: Literal["out", "in"], state: str, name: str) -> TriggerReader:
    """An AMPS replication trigger: ``spool-action-on-link-state`` with one direction and
    one state."""

    def reader(
        element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
    ) -> Trigger:
        _needs_links(element, name, facts, direction)
        opts = Options(element, options, {"Link": True, "Filter": False}, name)
        links = _link_names(opts, ctx, facts, direction)
        return OnLinkState(
            direction, (state,), links, _filter(opts, ctx), where=element.path, module=name
        )

    return reader


EVENT_TRIGGER_READERS: Final[Mapping[str, TriggerReader]] = {
    "amps-action-on-publish-message": _on_publish,
    "amps-action-on-sow-delete-message": _on_sow_removal("deleted"),
    "amps-action-on-sow-expire-message": _on_sow_removal("expired"),
    "amps-action-on-oof-message": _on_oof,
    "spool-action-on-queue-dead-letter": _on_dead_letter,
    "amps-action-on-connect-client": _on_client("connected", "amps-action-on-connect-client"),
    "amps-action-on-disconnect-client": _on_client(
        "disconnected", "amps-action-on-disconnect-client"
    ),
    "spool-action-on-logon-client": _on_client("logged_on", "spool-action-on-logon-client"),
    "amps-action-on-connect-replication": _on_replication(
        "out", "connected", "amps-action-on-connect-replication"
    ),
    "amps-action-on-disconnect-replication": _on_replication(
        "out", "disconnected", "amps-action-on-disconnect-replication"
    ),
    "amps-action-on-downgrade-replication": _on_replication(
        "out", "downgraded", "amps-action-on-downgrade-replication"
    ),
    "amps-action-on-upgrade-replication": _on_replication(
        "out", "upgraded", "amps-action-on-upgrade-replication"
    ),
    "amps-action-on-connect-incoming-replication": _on_replication(
        "in", "connected", "amps-action-on-connect-incoming-replication"
    ),
    "amps-action-on-disconnect-incoming-replication": _on_replication(
        "in", "disconnected", "amps-action-on-disconnect-incoming-replication"
    ),
    "spool-action-on-link-state": _on_link_state,
}
