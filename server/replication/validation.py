"""Replication validation: both sides' configurations compared when a link connects.

Two instances that replicate to each other must agree on what their topics are, or a
failover loses messages or changes what subscribers see. When a link connects, each side
sends a summary of its configuration (:func:`summarize`: recorded topics, SOW topics and
their keys, queues, its own destinations with their topic blocks, filters, passthrough
and excluded checks); the source runs the checks (``txlog``, ``replicate``, ``sow``,
``keys``, ``cascade``, ``queue``, ``replicate_filter``, ``queue_passthrough``,
``queue_underlying``) for each topic block toward that destination, except those the block
excludes. The first failures are logged with the exact fix, sent to the destination, shown
on the dashboard, and the link closes. Pure: the summary is plain JSON; :func:`validate`
reads the peer's defensively (it came from the network) and raises
ReplicationProtocolError for a malformed one. See docs/replication.md "Validation".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from spool.server.config import (
    NON_EXCLUDABLE_CHECKS,
    VALIDATION_CHECKS,
    Config,
    DestinationConfig,
    ReplicationTopic,
)
from spool.server.replication.errors import ReplicationProtocolError, ValidationFailed

__all__ = ["Summary", "TopicBlock", "parse_summary", "summarize", "validate"]

#: patterns that take every topic
_EVERYTHING: Final = frozenset({".*", "^.*", ".*$", "^.*$", "", "^", "(.*)"})


@dataclass(frozen=True, slots=True)
class Rule:
    """A topic or a pattern of topics."""

    name: str
    is_regex: bool

    def covers(self, block: Rule) -> bool:
        """Whether every topic ``block`` names is also named by this rule."""
        if self.is_regex and self.name in _EVERYTHING:
            return True
        if (self.name, self.is_regex) == (block.name, block.is_regex):
            return True
        if self.is_regex and not block.is_regex:
            return re.search(self.name, block.name) is not None
        return False


@dataclass(frozen=True, slots=True)
class TopicBlock:
    """A destination's topic block, as a summary lists it."""

    rule: Rule
    filter: str | None
    exclude: frozenset[str]


@dataclass(frozen=True, slots=True)
class Destination:
    """One of the peer's destinations."""

    name: str
    group: str
    passthrough: tuple[str, ...]
    blocks: tuple[TopicBlock, ...]
    #: its configured sync type (``sync`` / ``async``; None from a summary without it)
    sync_type: str | None = None


@dataclass(frozen=True, slots=True)
class SowTopic:
    rule: Rule
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Queue:
    rule: Rule  # the queue's name
    underlying: str
    underlying_regex: bool = False
    kind: str = "Queue"
    filter: str | None = None
    initial_owner: str | None = None
    #: the topic its dead letters go to (None: it has none)
    dead_letter: str | None = None

    @property
    def under(self) -> Rule:
        return Rule(self.underlying, self.underlying_regex)

    def concerns(self, block: Rule) -> bool:
        """Whether a block with this rule carries the queue's messages or events."""
        return any(r.covers(block) or block.covers(r) for r in (self.rule, self.under))

    def named_by(self, block: Rule) -> bool:
        """Whether a block with this rule takes the queue's name (its events)."""
        return self.rule.covers(block) or block.covers(self.rule)


@dataclass(frozen=True, slots=True)
class Summary:
    """What an instance says of its configuration."""

    name: str
    group: str
    txlog: tuple[Rule, ...]
    sow: tuple[SowTopic, ...]
    queues: tuple[Queue, ...]
    destinations: tuple[Destination, ...]


def _block_json(topic: ReplicationTopic) -> dict[str, object]:
    return {
        "name": topic.name,
        "is_regex": topic.is_regex,
        "filter": topic.filter,
        "exclude": sorted(topic.exclude_validation),
    }


def summarize(config: Config) -> dict[str, object]:
    """The summary an instance sends (JSON-ready)."""
    txlog = config.transaction_log
    destinations = config.replication.destinations if config.replication is not None else ()
    return {
        "name": config.name,
        "group": config.group,
        "txlog": [[t.name, t.is_regex] for t in txlog.topics] if txlog is not None else [],
        "sow": [{"topic": [t.name, t.is_regex], "keys": list(t.keys)} for t in config.sow],
        "queues": [
            {
                "topic": [q.name, False],
                "underlying": q.underlying,
                "underlying_regex": q.underlying_regex,
                "kind": q.kind,
                "filter": q.filter,
                "initial_owner": q.initial_owner,
                "dead_letter": q.dead_letter.topic if q.dead_letter is not None else None,
            }
            for q in config.queues
        ],
        "destinations": [
            {
                "name": d.name,
                "group": d.group,
                "sync": d.sync_type,
                "passthrough": list(d.passthrough),
                "topics": [_block_json(t) for t in d.topics],
            }
            for d in destinations
        ],
    }


# -- reading a peer's summary -----------------------------------------------------------


def _malformed(what: str) -> ReplicationProtocolError:
    return ReplicationProtocolError(f"malformed configuration summary: {what}")


def _rule(value: object) -> Rule:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], bool)
    ):
        raise _malformed("a topic is [name, is_regex]")
    return Rule(value[0], value[1])


def _strs(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _malformed(f"{what} is a list of strings")
    return tuple(value)


def _block(value: object) -> TopicBlock:
    if not isinstance(value, dict):
        raise _malformed("a topic block is an object")
    name, is_regex, flt = value.get("name"), value.get("is_regex"), value.get("filter")
    if not isinstance(name, str) or not isinstance(is_regex, bool):
        raise _malformed("a topic block has a name and is_regex")
    if flt is not None and not isinstance(flt, str):
        raise _malformed("a topic block's filter is a string")
    return TopicBlock(
        Rule(name, is_regex), flt, frozenset(_strs(value.get("exclude", []), "exclude"))
    )


def _destination(value: object) -> Destination:
    if not isinstance(value, dict):
        raise _malformed("a destination is an object")
    name, group, topics = value.get("name"), value.get("group"), value.get("topics")
    if not isinstance(name, str) or not isinstance(group, str) or not isinstance(topics, list):
        raise _malformed("a destination has a name, a group and topics")
    sync = value.get("sync")
    if sync not in (None, "sync", "async"):
        raise _malformed("a destination's sync is sync or async")
    return Destination(
        name, group, _strs(value.get("passthrough", []), "passthrough"),
        tuple(_block(t) for t in topics), sync,
    )  # fmt: skip


def _sow(value: object) -> SowTopic:
    if not isinstance(value, dict):
        raise _malformed("a SOW topic is an object")
    return SowTopic(_rule(value.get("topic")), _strs(value.get("keys", []), "keys"))


def _queue(value: object) -> Queue:
    if not isinstance(value, dict) or not isinstance(value.get("underlying"), str):
        raise _malformed("a queue is an object with its underlying topic")
    underlying = value["underlying"]
    assert isinstance(underlying, str)
    regex, kind = value.get("underlying_regex", False), value.get("kind", "Queue")
    if not isinstance(regex, bool) or not isinstance(kind, str):
        raise _malformed("a queue's underlying_regex is a boolean and its kind a string")
    flt, owner, dead = value.get("filter"), value.get("initial_owner"), value.get("dead_letter")
    if (
        not isinstance(flt, (str, type(None)))
        or not isinstance(owner, (str, type(None)))
        or not isinstance(dead, (str, type(None)))
    ):
        raise _malformed("a queue's filter, initial_owner and dead_letter are strings or null")
    return Queue(_rule(value.get("topic")), underlying, regex, kind, flt, owner, dead)


def _list(obj: dict[str, object], key: str) -> list[object]:
    value = obj.get(key, [])
    if not isinstance(value, list):
        raise _malformed(f"{key!r} is a list")
    return value


def parse_summary(obj: dict[str, object]) -> Summary:
    """A summary from its JSON form.

    Raises:
        ReplicationProtocolError: it is not a summary.
    """
    name, group = obj.get("name"), obj.get("group")
    if not isinstance(name, str) or not isinstance(group, str):
        raise _malformed("it needs the instance's name and group")
    return Summary(
        name=name,
        group=group,
        txlog=tuple(_rule(r) for r in _list(obj, "txlog")),
        sow=tuple(_sow(s) for s in _list(obj, "sow")),
        queues=tuple(_queue(q) for q in _list(obj, "queues")),
        destinations=tuple(_destination(d) for d in _list(obj, "destinations")),
    )


# -- the checks -------------------------------------------------------------------------


def _topic_xml(rule: Rule) -> str:
    return f"<Topic><Name>{rule.name}</Name><MessageType>json</MessageType></Topic>"


def _back_to(remote: Summary, local: Summary, rule: Rule) -> list[tuple[Destination, TopicBlock]]:
    """The remote's blocks that replicate ``rule``'s topics back to the local instance."""
    return [
        (d, b)
        for d in remote.destinations
        if d.name == local.name
        for b in d.blocks
        if b.rule.covers(rule)
    ]


def _sow_in(summary: Summary, rule: Rule) -> list[tuple[Rule, SowTopic]]:
    """The SOW rules of ``summary`` that keep some of the topics a block of ``rule``
    replicates, each with what the two have in common: the block's topic when the SOW rule
    covers it, else the SOW rule's own (a topic or pattern inside the block's)."""
    return [
        (rule if s.rule.covers(rule) else s.rule, s)
        for s in summary.sow
        if rule.covers(s.rule) or s.rule.covers(rule)
    ]


def _sow_covering(summary: Summary, rule: Rule) -> SowTopic | None:
    """The first SOW rule of ``summary`` that keeps every topic ``rule`` names."""
    return next((s for s in summary.sow if s.rule.covers(rule)), None)


def _sow_xml(subject: Rule, sow: SowTopic) -> str:
    keys = "".join(f"<Key>{k}</Key>" for k in sow.keys)
    return (
        f"<SOW><Topic><Name>{subject.name}</Name><MessageType>json</MessageType>{keys}"
        "</Topic></SOW>"
    )


def _sow_check(local: Summary, remote: Summary, block: TopicBlock) -> ValidationFailed | None:
    """``sow``: what the block replicates of either side's SOW is in the other's SOW."""
    for side, other in ((local, remote), (remote, local)):
        for subject, sow in _sow_in(side, block.rule):
            if _sow_covering(other, subject) is None:
                return ValidationFailed(
                    "sow", subject.name,
                    f"it is a SOW topic on {side.name!r} but not on {other.name!r}",
                    f"add {_sow_xml(subject, sow)} to {other.name!r}, or remove it from the "
                    f"<SOW> of {side.name!r}",
                )  # fmt: skip
    return None


def _keys_check(local: Summary, remote: Summary, block: TopicBlock) -> ValidationFailed | None:
    """``keys``: a SOW topic within the block has the same keys, in order, on both sides."""
    peer = remote.name
    for subject, here in _sow_in(local, block.rule):
        there = _sow_covering(remote, subject)
        if there is not None and here.keys != there.keys:
            keys = "".join(f"<Key>{k}</Key>" for k in here.keys) or "no <Key> (remove them)"
            return ValidationFailed(
                "keys", subject.name,
                f"its SOW keys differ ({list(here.keys)} on {local.name!r}, "
                f"{list(there.keys)} on {peer!r})",
                f"give the <SOW><Topic> {there.rule.name!r} of {peer!r} the keys {keys}, in "
                "this order",
            )  # fmt: skip
    return None


def _queue_of(summary: Summary, rule: Rule) -> Queue | None:
    return next((q for q in summary.queues if q.concerns(rule)), None)


def _queues_of(summary: Summary, rule: Rule) -> dict[str, Queue]:
    """The queues a block concerns, by name."""
    return {q.rule.name: q for q in summary.queues if q.concerns(rule)}


def _queue_xml(q: Queue) -> str:
    return (f"<{q.kind}><Name>{q.rule.name}</Name><UnderlyingTopic>{q.underlying}"
            f"</UnderlyingTopic></{q.kind}>")  # fmt: skip


def _queue_check(local: Summary, remote: Summary, rule: Rule) -> ValidationFailed | None:
    """``queue`` (module docstring): what the block replicates of a queue, the other side
    holds as the same queue."""
    peer = remote.name
    theirs = {q.rule.name: q for q in remote.queues}
    carried = next((d.blocks for d in local.destinations if d.name == peer), ())
    for name, q in sorted(_queues_of(local, rule).items()):
        match = theirs.get(name)
        if q.kind == "LocalQueue":
            if not rule.is_regex and rule.name == name:
                return ValidationFailed(
                    "queue", rule.name,
                    f"queue {name!r} is a LocalQueue on {local.name!r}: a local queue is this "
                    "instance's alone and is not replicated",
                    f"take {name!r} out of this destination's topics (to keep an archive copy "
                    f"of its messages, replicate its underlying topic {q.underlying!r}), or "
                    "make it a <Queue> on both instances",
                )  # fmt: skip
            continue
        if not q.named_by(rule):
            sends_events = any(q.named_by(b.rule) for b in carried)
            if match is not None and match.kind != "LocalQueue" and not sends_events:
                return ValidationFailed(
                    "queue", rule.name,
                    f"{peer!r} defines queue {name!r} over it, but this instance does not "
                    f"replicate the queue's acks and transfers ({name!r}) to {peer!r}",
                    f"add <Topic><Name>{name}</Name></Topic> to this destination, or remove "
                    f"the queue from {peer!r} (a copy that only archives its messages)",
                )  # fmt: skip
            continue  # an archive copy of the messages: the queue is not needed there
        if match is None:
            return _missing_queue(rule, q, local, remote)
        failure = _same_queue(local, remote, rule, q, match)
        if failure is not None:
            return failure
        if not any(b.rule.covers(q.under) for b in carried):
            return ValidationFailed(
                "queue", rule.name,
                f"queue {name!r} is replicated to {peer!r} but its underlying topic "
                f"{q.underlying!r} is not: the copy there would get acks and transfers of "
                "messages it never receives",
                f"add {_topic_xml(q.under)} to this destination",
            )  # fmt: skip
        dead = Rule(q.dead_letter, False) if q.dead_letter is not None else None
        if dead is not None and not any(b.rule.covers(dead) for b in carried):
            return ValidationFailed(
                "queue", rule.name,
                f"queue {name!r} is replicated to {peer!r} but its dead-letter topic "
                f"{q.dead_letter!r} is not: a message given up on here would stay in the "
                f"queue on {peer!r} until its ack came, and its dead letter would be here only",
                f"add {_topic_xml(dead)} to this destination",
            )  # fmt: skip
    mine = {q.rule.name: q for q in local.queues}
    for name, q in sorted(_queues_of(remote, rule).items()):
        if q.kind != "LocalQueue" and name not in mine:
            return _missing_queue(rule, q, remote, local)
    return None


def _missing_queue(rule: Rule, q: Queue, has: Summary, lacks: Summary) -> ValidationFailed:
    """Queue ``q`` of ``has``, which the block concerns, is not defined on ``lacks``."""
    return ValidationFailed(
        "queue", rule.name,
        f"it is a queue on {has.name!r} but not on {lacks.name!r}"
        if q.rule.name == rule.name else
        f"queue {q.rule.name!r} takes it on {has.name!r} but not on {lacks.name!r}",
        f"define the same queue on {lacks.name!r} ({_queue_xml(q)} in its <SOW>), or stop "
        "replicating it",
    )  # fmt: skip


def _same_queue(
    local: Summary, remote: Summary, rule: Rule, here: Queue, there: Queue
) -> ValidationFailed | None:
    """The definitions that must agree between two copies of a queue: kind, ``Filter``,
    a group-local queue's ``InitialOwner`` and the ``DeadLetter`` topic."""
    name, peer = here.rule.name, remote.name
    if there.kind != here.kind:
        return ValidationFailed(
            "queue", rule.name,
            f"queue {name!r} is a {here.kind} on {local.name!r} and a {there.kind} on {peer!r}",
            f"make queue {name!r} a <{here.kind}> on {peer!r} (or both <{there.kind}>)",
        )  # fmt: skip
    for what, element, mine, theirs, why in (
        ("Filter", "<Filter>", here.filter or None, there.filter or None,
         "the copies would disagree on which messages are in the queue"),
        ("InitialOwner", "<InitialOwner>", here.initial_owner, there.initial_owner,
         "the copies would disagree on who owns new messages"),
        ("dead-letter topic", "<DeadLetter><Topic>", here.dead_letter, there.dead_letter,
         "a message given up on would go to a different place depending on where"),
    ):  # fmt: skip
        if mine != theirs:
            return ValidationFailed(
                "queue", rule.name,
                f"queue {name!r} has {what} {mine!r} on {local.name!r} and {theirs!r} on "
                f"{peer!r}: {why}",
                f"give queue {name!r} the same {element} on both instances"
                + (f" ({mine})" if mine else " (none)"),
            )  # fmt: skip
    return None


def _check(
    check: str, local: Summary, remote: Summary, block: TopicBlock
) -> ValidationFailed | None:
    """One check of one block; None when it passes."""
    rule = block.rule
    topic = rule.name
    peer = remote.name
    if check == "txlog":
        if not any(r.covers(rule) for r in remote.txlog):
            return ValidationFailed(
                check, topic, f"{peer!r} does not record it in its transaction log",
                f"add {_topic_xml(rule)} to <TransactionLog> of {peer!r}",
            )  # fmt: skip
    elif check == "replicate":
        if not _back_to(remote, local, rule):
            return ValidationFailed(
                check, topic, f"{peer!r} does not replicate it back to {local.name!r}",
                f"add to {peer!r} a <Replication><Destination> named {local.name!r} "
                f"(Group {local.group!r}) with {_topic_xml(rule)}",
            )  # fmt: skip
    elif check == "sow":
        return _sow_check(local, remote, block)
    elif check == "keys":
        return _keys_check(local, remote, block)
    elif check == "cascade":
        for d in remote.destinations:
            for b in d.blocks:
                if not b.rule.covers(rule) and not rule.covers(b.rule):
                    continue
                missing = sorted((b.exclude - block.exclude) - NON_EXCLUDABLE_CHECKS)
                if missing:
                    return ValidationFailed(
                        check, topic, f"{peer!r} replicates it to {d.name!r} without the "
                        f"check(s) {', '.join(missing)} that {local.name!r} enforces",
                        f"remove {','.join(missing)} from the ExcludeValidation of "
                        f"{peer!r}'s Destination {d.name!r} Topic {b.rule.name!r}, or add "
                        "cascade to this block's ExcludeValidation",
                    )  # fmt: skip
    elif check == "queue":
        return _queue_check(local, remote, rule)
    elif check == "replicate_filter":
        for d, b in _back_to(remote, local, rule):
            if (b.filter or None) != (block.filter or None):
                return ValidationFailed(
                    check, topic, f"{peer!r} replicates it back with Filter {b.filter!r}, "
                    f"this instance sends it with {block.filter!r}",
                    f"set the Filter of {peer!r}'s Destination {d.name!r} Topic "
                    f"{b.rule.name!r} to {block.filter!r}"
                    + ("" if block.filter else " (remove it)"),
                )  # fmt: skip
    elif check == "queue_passthrough":
        if _queue_of(local, rule) is not None:
            back = [d for d in remote.destinations if any(b.rule.covers(rule) for b in d.blocks)]
            for d in back:
                if not any(re.search(p, local.group) for p in d.passthrough):
                    return ValidationFailed(
                        check, topic, f"{peer!r} replicates the queue to {d.name!r} without "
                        f"passing {local.group!r} through",
                        f"add <PassThrough>{local.group}</PassThrough> to {peer!r}'s "
                        f"Destination {d.name!r}",
                    )  # fmt: skip
    elif check == "queue_underlying":
        there = {q.rule.name: q for q in remote.queues}
        for name, here_q in sorted(_queues_of(local, rule).items()):
            there_q = there.get(name)
            if there_q is not None and (here_q.underlying, here_q.underlying_regex) != (
                there_q.underlying,
                there_q.underlying_regex,
            ):
                return ValidationFailed(
                    check, topic, f"its underlying topic is {here_q.underlying!r} here and "
                    f"{there_q.underlying!r} on {peer!r}",
                    f"set {peer!r}'s queue UnderlyingTopic to {here_q.underlying!r}",
                )  # fmt: skip
    return None


def validate(
    local: dict[str, object], remote: dict[str, object], destination: DestinationConfig
) -> list[ValidationFailed]:
    """Every failed check of ``destination``'s topic blocks against the remote's summary.

    Raises:
        ReplicationProtocolError: the remote's summary is malformed.
    """
    here = parse_summary(local)
    there = parse_summary(remote)
    failures: list[ValidationFailed] = []
    for topic in destination.topics:
        block = TopicBlock(Rule(topic.name, topic.is_regex), topic.filter, topic.exclude_validation)
        for check in VALIDATION_CHECKS:
            if check in block.exclude and check not in NON_EXCLUDABLE_CHECKS:
                continue
            failure = _check(check, here, there, block)
            if failure is not None:
                failures.append(failure)
    return failures
