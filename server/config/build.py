"""From the element tree to a :class:`~spool.server.config.model.Config`: the root and the
contradictions between sections.

Sections are read in a fixed order (``Name``, ``Group``, ``DataDirectory``, ``Admin``,
``Transports``, ``TransactionLog``, ``Replication``, ``SOW``, ``Tuning``, ``Users``,
``EventTopics``) and
then checked against each other, each contradiction reported at the element that makes it;
``Actions`` is read last, against the transports, the transaction log and the replication
destinations its modules name:

- every ``InetAddr`` given must be the same address (one HTTP server serves everything);
- a non-loopback address needs ``<Users>``, and TLS or an explicit ``AllowPlaintext``;
- the TLS elements given in Admin and the transports must agree (one listener), and
  client certificates (``ClientAuth``) need users to map them to;
- ``Admin/Authentication`` must agree with ``<Users>`` (and follows it when omitted);
- no transport's ``MaxMessageSize`` may exceed ``Tuning/SlowClientBufferLimit``;
- ``<Replication>`` and an ``amps-replication`` transport need a ``<TransactionLog>``
  (replication pushes from it and records into it); a destination's topic block naming
  one topic needs the log to record that topic; at most 64 destinations are sync;
  ``Tuning/MinimumSyncDestinations`` cannot exceed the sync destinations;
- ``<Bootstrap>`` needs a ``<TransactionLog>`` (recording each ``txlog`` topic), an
  ``amps-replication`` transport (live replication takes over after the copy) and a local
  ``SOW/Topic`` for each topic of a ``sow``-only bootstrap (with ``txlog,sow`` a topic may
  be a plain one; a SOW record the source sends for a topic without a local SOW/Topic
  stops the bootstrap with that fix, server/replication/bootstrap.py);
- ``<EventTopics>``: ``/spool/events/links`` needs replication, ``/spool/stats/sow`` a
  SOW topic, and no queue nor dead-letter topic may take an event topic's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Final

from spool.server.config.actions import ActionConfig, WebhooksConfig
from spool.server.config.errors import (
    BIND_REQUIRES_USERS,
    PLAINTEXT_NEEDS_PERMISSION,
    SHARED_ADDRESS,
    SHARED_TLS,
)
from spool.server.config.model import (
    DEFAULT_HOST,
    DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_PORT,
    DEFAULT_TRANSPORT,
    EVENTS_LINKS,
    EXPLICIT_STATS_FILE,
    MAX_SYNC_DESTINATIONS,
    STATS_SOW,
    Config,
    EventTopicsConfig,
    QueueConfig,
    SowTopicConfig,
    TlsConfig,
    TransactionLogConfig,
    TransportConfig,
    TuningConfig,
    UserConfig,
)
from spool.server.config.netaddr import format_inet_addr, is_loopback
from spool.server.config.sections.actions import read_actions
from spool.server.config.sections.admin import AdminPart, read_admin
from spool.server.config.sections.alerts import check_alert_rules
from spool.server.config.sections.bootstrap import BootstrapPart, read_bootstrap
from spool.server.config.sections.eventtopics import EventTopicsPart, read_event_topics
from spool.server.config.sections.queues import QUEUE_KINDS
from spool.server.config.sections.replication import ReplicationPart, read_replication
from spool.server.config.sections.sow import read_sow
from spool.server.config.sections.tls import ListenerPart
from spool.server.config.sections.transactionlog import read_transaction_log
from spool.server.config.sections.transports import TransportPart, read_transports
from spool.server.config.sections.tuning import read_tuning
from spool.server.config.sections.users import read_users
from spool.server.config.values import Bind, Context, read_name, read_path
from spool.server.config.xmltree import Children, Spec, XmlNode, fail, reject_attributes
from spool.server.units import format_size

__all__ = ["build"]

_ROOT_TAGS: Final = ("SpoolConfig", "AMPSConfig")
_ROOT_SPEC: Final[Spec] = {
    "Name": False,
    "Group": False,
    "DataDirectory": False,
    "Admin": False,
    "Transports": False,
    "TransactionLog": False,
    "Replication": False,
    "SOW": False,
    "Tuning": False,
    "Users": False,
    "Actions": False,
    "Bootstrap": False,
    "EventTopics": False,
}
#: Sections of the AMPS-shaped file that this version refuses, with the feature each belongs
#: to (docs/configuration.md "Not supported yet").
_UNSUPPORTED: Final[Mapping[str, str]] = {}


def _settle_address(binds: Sequence[Bind]) -> tuple[str, int]:
    """The one web address: every InetAddr given must agree; none given = 127.0.0.1:9007."""
    if not binds:
        return DEFAULT_HOST, DEFAULT_PORT
    first = binds[0]
    for bind in binds[1:]:
        if (bind.host, bind.port) != (first.host, first.port):
            raise fail(
                bind.node,
                f"{SHARED_ADDRESS}: {format_inet_addr(bind.host, bind.port)} differs from "
                f"{format_inet_addr(first.host, first.port)} at {first.node.path} "
                f"(line {first.node.line})",
            )
    return first.host, first.port


def _settle_listener(parts: Sequence[ListenerPart]) -> tuple[TlsConfig | None, bool]:
    """The listener's TLS and AllowPlaintext: every section that gives them must agree."""
    tls_first = next((p for p in parts if p.tls is not None), None)
    plain_first = next((p for p in parts if p.allow_plaintext is not None), None)
    for part in parts:
        if tls_first is not None and part.tls is not None and part.tls != tls_first.tls:
            assert part.tls_node is not None and tls_first.tls_node is not None
            raise fail(
                part.tls_node,
                f"{SHARED_TLS}: these TLS settings differ from those at "
                f"{tls_first.tls_node.path} (line {tls_first.tls_node.line})",
            )
        if (
            plain_first is not None
            and part.allow_plaintext is not None
            and part.allow_plaintext != plain_first.allow_plaintext
        ):
            assert part.plaintext_node is not None and plain_first.plaintext_node is not None
            raise fail(
                part.plaintext_node,
                f"{SHARED_TLS}: AllowPlaintext differs from "
                f"{plain_first.plaintext_node.path} (line {plain_first.plaintext_node.line})",
            )
    tls = tls_first.tls if tls_first is not None else None
    allow = bool(plain_first.allow_plaintext) if plain_first is not None else False
    if tls is not None and allow:
        assert plain_first is not None and plain_first.plaintext_node is not None
        raise fail(
            plain_first.plaintext_node,
            "AllowPlaintext true contradicts the <Certificate> of this listener: it serves "
            "TLS; remove AllowPlaintext",
        )
    return tls, allow


def _authentication(admin: AdminPart, users: tuple[UserConfig, ...]) -> str:
    """``Admin/Authentication``: follows ``<Users>`` when omitted, must agree when given."""
    if admin.authentication is None:
        return "token" if users else "none"
    authentication = admin.config.authentication
    if authentication == "token" and not users:
        raise fail(
            admin.authentication,
            "Authentication token requires <Users> (tokens belong to users); add <Users> or "
            "use none",
        )
    if authentication == "none" and users:
        raise fail(
            admin.authentication,
            "Authentication none contradicts <Users>: with users configured every /api call "
            "needs a token (docs/admin-api.md); use token or remove the element",
        )
    return authentication


def _check_message_sizes(
    transports: Sequence[TransportPart] | None, tuning: TuningConfig, limit_node: XmlNode | None
) -> None:
    """No transport may accept a message larger than a client's buffer."""
    if transports is None and limit_node is not None:
        implicit = DEFAULT_MAX_MESSAGE_SIZE
        if implicit > tuning.slow_client_buffer_limit:
            raise fail(
                limit_node,
                f"SlowClientBufferLimit ({format_size(tuning.slow_client_buffer_limit)}) is "
                f"smaller than the MaxMessageSize ({format_size(implicit)}) of the implicit "
                f"{DEFAULT_TRANSPORT!r} transport; raise it or declare <Transports>",
            )
    for part in transports or ():
        if part.config.max_message_size > tuning.slow_client_buffer_limit:
            at = part.max_message_size or limit_node or part.node
            raise fail(
                at,
                f"MaxMessageSize of transport {part.config.name!r} "
                f"({format_size(part.config.max_message_size)}) exceeds "
                f"Tuning/SlowClientBufferLimit ({format_size(tuning.slow_client_buffer_limit)}): "
                "one message would overflow a client's buffer",
            )


def _check_queues(
    sow_node: XmlNode,
    queues: tuple[QueueConfig, ...],
    txlog: TransactionLogConfig | None,
    instance: str,
    replicates: bool,
) -> None:
    """Queues live in the transaction log: it must record each queue's underlying topic
    (a regex is checked on start-up, topic by topic) and its dead-letter topic, which is
    a topic, not a queue's name. On an instance that does not replicate, a
    ``<GroupLocalQueue>``'s InitialOwner must be this instance (it would own no message
    otherwise)."""
    by_name = _queue_nodes(sow_node)
    names = {q.name for q in queues}
    for queue in queues:
        node = by_name.get(queue.name, sow_node)
        if txlog is None:
            raise fail(node, "a queue keeps its messages in the transaction log: add "
                             "<TransactionLog> recording its UnderlyingTopic")  # fmt: skip
        if not queue.underlying_regex and not txlog.records(queue.underlying):
            raise fail(
                node,
                f"the transaction log does not record {queue.underlying!r}, the underlying "
                f"topic of queue {queue.name!r}: add a TransactionLog <Topic> for it",
            )
        dead = queue.dead_letter
        if dead is not None and not txlog.records(dead.topic):
            raise fail(
                node,
                f"the transaction log does not record {dead.topic!r}, the dead-letter topic "
                f"of queue {queue.name!r}: a dead letter is kept in the log, add a "
                "TransactionLog <Topic> for it",
            )
        if dead is not None and dead.topic in names:
            raise fail(
                node,
                f"the dead-letter topic of queue {queue.name!r} is {dead.topic!r}, a queue's "
                "name: publish dead letters to a topic (a queue may take it as its "
                "UnderlyingTopic)",
            )
        if queue.initial_owner is not None and not replicates and queue.initial_owner != instance:
            raise fail(
                node,
                f"InitialOwner {queue.initial_owner!r} is not this instance ({instance!r}) and "
                "this instance does not replicate: no other instance can own the queue's "
                "messages, so it would deliver none of them",
            )


def _queue_nodes(sow_node: XmlNode) -> dict[str, XmlNode]:
    """The queue elements of ``<SOW>`` by their name (where a refusal points)."""
    return {child_text(node): node for node in sow_node.children if node.tag in QUEUE_KINDS}


def _check_dead_letter_cycles(sow_node: XmlNode, queues: tuple[QueueConfig, ...]) -> None:
    """Dead letters never come back to the queue that gave them up through other queues
    (a queue taking another's dead-letter topic, whose own dead letters go to a topic the
    first takes, and so on): each round would wrap a message in one more envelope, for
    ever. A queue is followed to the queues that take its dead-letter topic."""
    by_name = {q.name: q for q in queues}
    nodes = _queue_nodes(sow_node)

    def next_of(q: QueueConfig) -> list[QueueConfig]:
        dead = q.dead_letter
        return [] if dead is None else [o for o in queues if o.takes(dead.topic)]

    for start in queues:
        todo = [(o, [start.name, o.name]) for o in next_of(start)]
        seen: set[str] = set()
        while todo:
            q, path = todo.pop()
            if q.name == start.name:
                raise fail(
                    nodes.get(start.name, sow_node),
                    "dead letters would come back to queue "
                    f"{start.name!r}: {' -> '.join(path)} (each queue takes the dead-letter "
                    "topic of the one before it); end the loop",
                )
            if q.name in seen:
                continue
            seen.add(q.name)
            todo.extend((o, [*path, o.name]) for o in next_of(by_name[q.name]))


def _check_local_queues_stay(
    replication: ReplicationPart | None, queues: tuple[QueueConfig, ...]
) -> None:
    """A ``<LocalQueue>`` is this instance's alone: a destination's topic block that names
    it (the queue's name itself; a pattern that happens to match it sends nothing of it)
    is refused. Its underlying topic may be replicated (an archive copy)."""
    local = {q.name: q for q in queues if q.kind == "LocalQueue"}
    if replication is None or not local:
        return
    for part in replication.destinations:
        for topic, node in zip(part.config.topics, part.topic_nodes, strict=True):
            q = local.get(topic.name)
            if q is not None and not topic.is_regex:
                raise fail(
                    node,
                    f"destination {part.config.name!r} replicates {q.name!r}, a LocalQueue: a "
                    "local queue is this instance's alone and is not replicated; replicate "
                    f"its underlying topic {q.underlying!r} for a copy of its messages, or "
                    "make it a <Queue>",
                )


def child_text(node: XmlNode) -> str:
    """The text of ``node``'s ``<Name>`` child ("" when it has none)."""
    for child in node.children:
        if child.tag == "Name":
            return "".join(child.text).strip()
    return ""


def _check_replication(
    replication: ReplicationPart | None,
    transports: Sequence[TransportPart] | None,
    txlog: TransactionLogConfig | None,
    tuning: TuningConfig,
    min_sync_node: XmlNode | None,
) -> None:
    """Replication against the transaction log, the transports and Tuning."""
    inbound = next((t for t in transports or () if t.config.type == "amps-replication"), None)
    if txlog is None:
        if replication is not None:
            raise fail(
                replication.node,
                "<Replication> needs a <TransactionLog>: messages are replicated from it "
                "once they are durable there",
            )
        if inbound is not None:
            raise fail(
                inbound.node,
                "an amps-replication transport needs a <TransactionLog>: replicated "
                "messages are recorded in it",
            )
    parts = replication.destinations if replication is not None else []
    if txlog is not None:
        for part in parts:
            for topic, node in zip(part.config.topics, part.topic_nodes, strict=True):
                if not topic.is_regex and not txlog.records(topic.name):
                    raise fail(
                        node,
                        f"destination {part.config.name!r} replicates {topic.name!r}, which "
                        "the transaction log does not record (only recorded messages are "
                        "replicated); add a TransactionLog/Topic for it",
                    )
    sync_parts = [p for p in parts if p.config.sync]
    if len(sync_parts) > MAX_SYNC_DESTINATIONS:
        raise fail(
            sync_parts[MAX_SYNC_DESTINATIONS].sync_node,
            f"at most {MAX_SYNC_DESTINATIONS} destinations can be sync (persisted acks wait "
            "for each of them); make the others async",
        )
    minimum = tuning.minimum_sync_destinations
    if min_sync_node is not None and minimum > len(sync_parts):
        raise fail(
            min_sync_node,
            f"MinimumSyncDestinations is {minimum} but only {len(sync_parts)} destinations "
            "are configured sync: no downgrade could ever be allowed; lower it or configure "
            "more sync destinations",
        )


def _check_bootstrap(
    bootstrap: BootstrapPart,
    transports: Sequence[TransportPart] | None,
    txlog: TransactionLogConfig | None,
    sow: Sequence[SowTopicConfig],
) -> None:
    """A bootstrap's prerequisites: the log it copies into, the endpoint live replication
    continues on, and local SOW definitions for the SOW topics it copies."""
    if txlog is None:
        raise fail(
            bootstrap.node,
            "<Bootstrap> needs a <TransactionLog>: the copied records are recorded in it, "
            "and an interrupted bootstrap resumes from it",
        )
    if not any(t.config.type == "amps-replication" for t in transports or ()):
        raise fail(
            bootstrap.node,
            "<Bootstrap> needs an amps-replication transport in <Transports>: after the copy "
            "the source replicates to this instance live, without a gap, on /replication",
        )
    config = bootstrap.config
    for topic, node in zip(config.topics, bootstrap.topic_nodes, strict=True):
        if topic.is_regex:
            continue
        if "txlog" in config.data_types and not txlog.records(topic.name):
            raise fail(
                node,
                f"bootstrap topic {topic.name!r} is not recorded by this instance's "
                "transaction log; add a TransactionLog/Topic for it",
            )
        if config.data_types == {"sow"} and not any(rule.matches(topic.name) for rule in sow):
            raise fail(
                node,
                f"bootstrap topic {topic.name!r} has no local SOW definition (DataType sow "
                "copies SOW records into it); add a SOW/Topic for it",
            )


def _check_event_topics(
    part: EventTopicsPart,
    sow: Sequence[SowTopicConfig],
    queues: Sequence[QueueConfig],
    replicates: bool,
) -> None:
    """What the event topics need of the other sections: links to tell of, SOW topics to
    sample, and names no queue takes (only the broker publishes an event topic)."""
    nodes = part.name_nodes
    if EVENTS_LINKS in nodes and not replicates:
        raise fail(
            nodes[EVENTS_LINKS],
            f"{EVENTS_LINKS} needs <Replication> or an amps-replication transport: this "
            "instance has no links",
        )
    if STATS_SOW in nodes and not sow:
        raise fail(nodes[STATS_SOW], f"{STATS_SOW} needs at least one <SOW><Topic> to sample")
    for q in queues:
        for name, what in ((q.name, "a queue's name"), (
            q.dead_letter.topic if q.dead_letter is not None else None,
            f"the dead-letter topic of queue {q.name!r}",
        )):  # fmt: skip
            if name in nodes:
                raise fail(
                    nodes[name],
                    f"{name!r} is {what}: an event topic is published by the broker only",
                )


def build(root: XmlNode, ctx: Context) -> Config:
    """Read and cross-check a whole configuration (``source_path`` is left None).

    Raises:
        ConfigError: the first problem, in the order of the module docstring.
    """
    if root.tag not in _ROOT_TAGS:
        raise fail(
            root, f"the root element must be <SpoolConfig> (or <AMPSConfig>), not <{root.tag}>"
        )
    reject_attributes(root)
    kids = Children(root, _ROOT_SPEC, _UNSUPPORTED)
    name = read_name(
        kids.require("Name", " (the instance name; it prefixes the instance's files)"),
        ctx,
        "instance name",
    )
    group = name
    if (group_node := kids.one("Group")) is not None:
        group = read_name(group_node, ctx, "group name")
    data_dir = ctx.base_dir / "data"
    if (data_node := kids.one("DataDirectory")) is not None:
        data_dir = read_path(data_node, ctx)

    admin = read_admin(kids.one("Admin"), ctx, data_dir)
    transports_node = kids.one("Transports")
    transports = read_transports(transports_node, ctx) if transports_node is not None else None
    explicit: frozenset[str] = frozenset()
    txlog: TransactionLogConfig | None = None
    if (txlog_node := kids.one("TransactionLog")) is not None:
        txlog, explicit = read_transaction_log(txlog_node, ctx, data_dir)
    replication_node = kids.one("Replication")
    replication = (
        read_replication(replication_node, ctx, name) if replication_node is not None else None
    )
    sow_node = kids.one("SOW")
    sow, queues = read_sow(sow_node, ctx) if sow_node is not None else ((), ())
    tuning, limit_node, min_sync_node = read_tuning(kids.one("Tuning"), ctx)
    users = read_users(kids.one("Users"), ctx)
    event_topics: EventTopicsPart | None = None
    if (event_topics_node := kids.one("EventTopics")) is not None:
        event_topics = read_event_topics(event_topics_node, ctx)
    if admin.stats_explicit:
        explicit = explicit | {EXPLICIT_STATS_FILE}

    # Cross-checks, each reported at the element that makes the contradiction.
    binds = [bind for bind in [admin.bind] + [t.bind for t in transports or ()] if bind]
    host, port = _settle_address(binds)
    listeners = [admin.listener] + [t.listener for t in transports or ()]
    tls, allow_plaintext = _settle_listener(listeners)
    if not users and not is_loopback(host):
        raise fail(
            binds[0].node,
            f"{BIND_REQUIRES_USERS}; {format_inet_addr(host, port)} is reachable from other machines",
        )
    if users and tls is None and not allow_plaintext and not is_loopback(host):
        raise fail(
            binds[0].node,
            f"{PLAINTEXT_NEEDS_PERMISSION}; {format_inet_addr(host, port)} is reachable from "
            "other machines",
        )
    if tls is not None and tls.client_auth != "none" and not users:
        tls_node = next(p.tls_node for p in listeners if p.tls_node is not None)
        raise fail(
            tls_node,
            f"ClientAuth {tls.client_auth} maps client certificates to users: add <Users> "
            "with <CertificateSubject>, or use ClientAuth none",
        )
    authentication = _authentication(admin, users)
    _check_message_sizes(transports, tuning, limit_node)
    _check_replication(replication, transports, txlog, tuning, min_sync_node)
    replicates = replication is not None or any(
        t.config.type == "amps-replication" for t in transports or ()
    )
    bootstrap: BootstrapPart | None = None
    if (bootstrap_node := kids.one("Bootstrap")) is not None:
        bootstrap = read_bootstrap(bootstrap_node, ctx)
        _check_bootstrap(bootstrap, transports, txlog, sow)
    if sow_node is not None and queues:
        _check_queues(sow_node, queues, txlog, name, replicates)
        _check_dead_letter_cycles(sow_node, queues)
        _check_local_queues_stay(replication, queues)
    if event_topics is not None:
        _check_event_topics(event_topics, sow, queues, replicates)
    check_alert_rules(
        admin.alerts,
        queues=[q.name for q in queues],
        destinations=[d.name for d in (replication.config.destinations if replication else ())],
        has_txlog=txlog is not None,
    )

    if transports is None:
        transport_configs: tuple[TransportConfig, ...] = (
            TransportConfig(DEFAULT_TRANSPORT, "websocket", host, port),
        )
    else:
        transport_configs = tuple(replace(t.config, host=host, port=port) for t in transports)
    actions: tuple[ActionConfig, ...] = ()
    webhooks = WebhooksConfig()
    if (actions_node := kids.one("Actions")) is not None:
        actions, webhooks = read_actions(
            actions_node,
            ctx,
            transports=tuple(t.name for t in transport_configs),
            has_txlog=txlog is not None,
            destinations={
                d.name: d.sync for d in (replication.config.destinations if replication else ())
            },
            replicated_queues=tuple(q.name for q in queues if q.kind != "LocalQueue")
            if replicates
            else (),
            queues=tuple(q.name for q in queues),
            dead_letter_reasons={
                q.name: q.dead_letter.reasons for q in queues if q.dead_letter is not None
            },
            client_transports=tuple(t.name for t in transport_configs if t.type == "websocket"),
            sow_topics=tuple(sow),
            replicates=replicates,
            event_topics=event_topics.config.topics if event_topics is not None else frozenset(),
        )
    return Config(
        name=name,
        group=group,
        data_directory=data_dir,
        admin=replace(admin.config, host=host, port=port, authentication=authentication),
        transports=transport_configs,
        transaction_log=txlog,
        tuning=tuning,
        users=users,
        replication=replication.config if replication is not None else None,
        sow=sow,
        bootstrap=bootstrap.config if bootstrap is not None else None,
        queues=queues,
        tls=tls,
        allow_plaintext=allow_plaintext,
        explicit_paths=explicit,
        actions=actions,
        event_topics=event_topics.config if event_topics is not None else EventTopicsConfig(),
        webhooks=webhooks,
    )
