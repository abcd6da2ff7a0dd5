"""The configuration model: frozen dataclasses the rest of the broker reads.

Everything here is already validated: the loader (:mod:`spool.server.config.build`) refuses a
file before any of these is built from it, so readers never re-check a value. Paths are
absolute, durations are float seconds, sizes int bytes. :class:`TransactionLogConfig`
also answers "is this topic recorded?" with a matcher compiled once per rule tuple.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from spool.server.config.actions import ActionConfig, WebhooksConfig
from spool.server.config.netaddr import format_inet_addr, is_loopback

__all__ = [
    "ALERT_METRICS",
    "DEFAULT_HOST",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_NAME",
    "DEFAULT_PORT",
    "DEFAULT_TRANSPORT",
    "EVENTS_CLIENTS",
    "EVENTS_LINKS",
    "EVENTS_SUBSCRIPTIONS",
    "EVENT_TOPICS",
    "EXPLICIT_ARCHIVE_DIRECTORY",
    "EXPLICIT_JOURNAL_DIRECTORY",
    "EXPLICIT_STATS_FILE",
    "MESSAGE_TYPES",
    "NON_EXCLUDABLE_CHECKS",
    "PASS_EVERY_GROUP",
    "SOW_DURABILITIES",
    "STATS_SOW",
    "VALIDATION_CHECKS",
    "AdminConfig",
    "AlertMeasure",
    "AlertMetric",
    "AlertRuleConfig",
    "Config",
    "DestinationConfig",
    "EventTopicsConfig",
    "QueueConfig",
    "ReplicationConfig",
    "ReplicationTopic",
    "ReplicationTransport",
    "SowTopicConfig",
    "TlsConfig",
    "TopicRule",
    "TransactionLogConfig",
    "TransportConfig",
    "TuningConfig",
    "UserConfig",
]

#: The shared web address when the file gives none (docs/configuration.md).
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 9007
DEFAULT_MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024
#: The one transport of the embedded default, and of a file without ``<Transports>``.
DEFAULT_TRANSPORT: Final = "websocket-json"
#: Instance and group name of the embedded default.
DEFAULT_NAME: Final = "spool"
#: The message types Spool carries (of transports and transaction log topics).
MESSAGE_TYPES: Final = ("json",)

#: Replication validation checks (docs/replication.md "Validation"), in the order they run.
VALIDATION_CHECKS: Final = (
    "txlog",
    "replicate",
    "sow",
    "keys",
    "cascade",
    "queue",
    "replicate_filter",
    "queue_passthrough",
    "queue_underlying",
)
#: The checks ``ExcludeValidation`` may not exclude.
NON_EXCLUDABLE_CHECKS: Final = frozenset({"queue", "queue_underlying"})
#: A destination's PassThrough when the configuration gives none: every group, so the
#: destination gets the whole log (what arrived by replication too), not only what was
#: published here. ``<PassThrough/>`` (empty) asks for none.
PASS_EVERY_GROUP: Final = (".*",)
#: The most destinations whose acknowledgment a persisted ack may wait for.
MAX_SYNC_DESTINATIONS: Final = 64
#: How a SOW topic keeps its records: a file that survives restarts, or memory only.
SOW_DURABILITIES: Final = ("persistent", "transient")

#: Names recorded in :attr:`Config.explicit_paths` when the file set the path itself, so a
#: ``--data-dir`` override leaves it alone (otherwise it is re-derived under the new dir).
EXPLICIT_JOURNAL_DIRECTORY: Final = "TransactionLog/JournalDirectory"
EXPLICIT_ARCHIVE_DIRECTORY: Final = "TransactionLog/JournalArchiveDirectory"
EXPLICIT_STATS_FILE: Final = "Admin/FileName"


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """One listener: ``websocket`` (clients, ``/amps/json``) or ``amps-replication``
    (other instances replicating to this one, ``/replication``)."""

    name: str
    type: str
    host: str
    port: int
    message_type: str = "json"
    per_message_deflate: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    enabled: bool = True

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 in brackets), as shown by the admin API."""
        return format_inet_addr(self.host, self.port)


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS of the one listener (``wss://`` and ``https://`` on the web port).

    Attributes:
        certificate: PEM file: the server certificate, then its intermediates.
        private_key: PEM file: its unencrypted private key.
        ca_certificate: PEM bundle that client certificates must chain to.
        client_auth: ``none`` (no client certificate asked), ``optional`` (verified when
            sent) or ``required`` (a handshake without a valid one is refused).
    """

    certificate: Path
    private_key: Path
    ca_certificate: Path | None = None
    client_auth: str = "none"


AlertMetric = Literal[
    "queue_age", "subscription_lag", "link_behind", "disk_free", "publish_rate_drop"
]
#: every metric an alert rule may watch, in the order docs/configuration.md lists them
ALERT_METRICS: Final[tuple[AlertMetric, ...]] = (
    "queue_age",
    "subscription_lag",
    "link_behind",
    "disk_free",
    "publish_rate_drop",
)
#: what a rule's value and threshold count: ``messages`` are records of the log,
#: ``per_second`` messages published per second
AlertMeasure = Literal["seconds", "messages", "bytes", "percent", "per_second"]


@dataclass(frozen=True, slots=True)
class AlertRuleConfig:
    """An ``Admin/Alerts/Rule``: a threshold the broker watches (server/alertrules.py).

    Attributes:
        name: unique among the rules; the alert's id and the metrics' ``rule`` label.
        metric: what is watched.
        measure: the unit of the value and the threshold (from how the threshold was
            written: ``30s`` is seconds, ``5000 messages`` messages, ``10%`` percent...).
        above: the rule holds while the value is above ``threshold`` (else below it).
        threshold: in ``measure`` units.
        target: the queue (``queue_age``), destination (``link_behind``), client
            (``subscription_lag``) or topic (``publish_rate_drop``) watched; None: the
            worst of them (``publish_rate_drop``: every topic together).
        sub_id: with a client, one of its subscriptions (``subscription_lag``).
        hold: seconds the condition must hold before the rule fires (``For``).
        level: the alert's level while it fires.
    """

    name: str
    metric: AlertMetric
    measure: AlertMeasure
    above: bool
    threshold: float
    target: str | None = None
    sub_id: str | None = None
    hold: float = 0.0
    level: Literal["warning", "error"] = "warning"


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """REST admin + dashboard + /metrics; served on the web port."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    stats_file: Path = Path("./data/stats.db")
    interval: float = 10.0  # seconds, >= 1
    authentication: str = "none"  # "none" | "token"
    stats_retention: float = 7 * 86400.0  # seconds of samples kept
    #: seconds a disconnected client's (an ended subscription's) series are kept
    client_stats_retention: float = 3600.0
    #: the most per-client and per-subscription series kept (server/stats/clientseries.py)
    client_stats_limit: int = 5000
    metrics_public: bool = False  # /healthz and /metrics readable without auth off-loopback
    #: browser origins besides the broker's own that may use the websocket and the REST
    #: API with ambient credentials (no users, a dashboard session): canonical
    #: ``scheme://host[:port]`` (server/config/netaddr.py ``parse_origin``)
    allowed_origins: tuple[str, ...] = ()
    #: the operator's alert rules (``Alerts/Rule``), in file order
    alert_rules: tuple[AlertRuleConfig, ...] = ()

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 in brackets)."""
        return format_inet_addr(self.host, self.port)


@dataclass(frozen=True, slots=True)
class TopicRule:
    """A TransactionLog/Topic: exact name or regex (a name with regex metacharacters)."""

    name: str
    message_type: str = "json"
    is_regex: bool = False


@dataclass(frozen=True, slots=True)
class _TopicMatcher:
    """The compiled form of a tuple of :class:`TopicRule` (see :func:`_matcher_for`)."""

    everything: bool
    exact: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]

    def matches(self, topic: str) -> bool:
        if self.everything or topic in self.exact:
            return True
        return any(pattern.search(topic) for pattern in self.patterns)


# Regexes that match every topic: the default configuration records ".*", and it would be a
# shame to run a regex search per publish for it.
_MATCH_ALL: Final[frozenset[str]] = frozenset({".*", "^.*", ".*$", "^.*$", "", "^", "(.*)"})


@functools.lru_cache(maxsize=256)
def _matcher_for(rules: tuple[TopicRule, ...]) -> _TopicMatcher:
    """Compile rules once per distinct tuple (``dataclasses.replace`` copies share it)."""
    json_rules = [rule for rule in rules if rule.message_type == "json"]
    regexes = [rule.name for rule in json_rules if rule.is_regex]
    return _TopicMatcher(
        everything=any(name in _MATCH_ALL for name in regexes),
        exact=frozenset(rule.name for rule in json_rules if not rule.is_regex),
        patterns=tuple(re.compile(name) for name in regexes),
    )


@dataclass(frozen=True, slots=True)
class TransactionLogConfig:
    """Where and how the transaction log is written, and which topics it records.

    Attributes:
        journal_directory: active and preallocated journal files.
        archive_directory: where archived journals are moved.
        preallocated_files: journals created ahead of need (the XML element is at least 1;
            0 here, for tests, creates every journal on demand).
        journal_size: bytes per journal file before rolling to the next.
        flush_interval: group-commit window in seconds (30us..100ms).
        write_retry_interval: after a failed journal write or fsync, the first retry comes
            this many seconds later, then twice as long each time, up to 16 times it.
        topics: the recorded topics; see :meth:`records`.
        max_size: bytes of journals kept locally (active + preallocated + archived) before
            publishes fail with "txlog full"; 0 = unlimited.
    """

    journal_directory: Path
    archive_directory: Path
    preallocated_files: int = 2
    journal_size: int = 64 * 1024 * 1024
    flush_interval: float = 0.001  # seconds, 30us..100ms
    write_retry_interval: float = 1.0  # seconds, 10ms..10m
    topics: tuple[TopicRule, ...] = ()
    # Maximum bytes of journals (active + preallocated + archived kept locally) before
    # publishes fail with "txlog full"; 0 = unlimited.
    max_size: int = 0
    _matcher: _TopicMatcher = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Frozen dataclass: the compiled matcher is derived state, set once here.
        object.__setattr__(self, "_matcher", _matcher_for(self.topics))

    def records(self, topic: str) -> bool:
        """Whether a json message published to ``topic`` goes into the transaction log.

        A rule with ``is_regex`` matches when ``re.search`` finds its pattern anywhere in the
        topic (anchor with ``^``/``$`` for whole names); any other rule matches the exact
        name. Regexes are compiled once per distinct rule tuple.
        """
        return self._matcher.matches(topic)


@dataclass(frozen=True, slots=True)
class ReplicationTopic:
    """A ``Replication/Destination/Topic`` block: which messages go to that destination.

    Attributes:
        name: a topic, or a regular expression of topics (``is_regex``, ``re.search``).
        is_regex: whether ``name`` is a regular expression.
        message_type: ``json``.
        filter: a content filter (docs/filters.md) the message must match, or None.
        exclude_validation: validation checks not applied to this block's topics.
    """

    name: str
    is_regex: bool = False
    message_type: str = "json"
    filter: str | None = None
    exclude_validation: frozenset[str] = frozenset()
    _pattern: re.Pattern[str] | None = field(
        init=False, repr=False, compare=False, hash=False, default=None
    )

    def __post_init__(self) -> None:
        if self.is_regex:
            object.__setattr__(self, "_pattern", re.compile(self.name))

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` falls in this block."""
        pattern = self._pattern
        if pattern is None:
            return topic == self.name
        return pattern.search(topic) is not None


@dataclass(frozen=True, slots=True)
class ReplicationTransport:
    """How a source reaches a destination.

    Attributes:
        addresses: ``(host, port)`` to try in order on each reconnect (failover list);
            none for a passive destination (it dials nothing: the peer dials in, and the
            link runs back over that connection).
        compression: ``zstd`` to compress the message stream, or None.
        user: the user the source logs on as (the destination has ``<Users>``), or None.
        secret: that user's password or token (never shown, never logged).
        tls: dial ``wss://`` (the destination's listener serves TLS); never falls back.
        ca_certificate: the CA bundle the destination's certificate must chain to (None:
            the system's CAs); its host name is checked against the address dialed.
        certificate: a client certificate presented to the destination (mutual TLS: the
            destination maps its subject to a user), with ``private_key``.
        private_key: the certificate's unencrypted key.
    """

    addresses: tuple[tuple[str, int], ...]
    compression: str | None = None
    user: str | None = None
    secret: str | None = field(default=None, repr=False)
    tls: bool = False
    ca_certificate: Path | None = None
    certificate: Path | None = None
    private_key: Path | None = None


@dataclass(frozen=True, slots=True)
class DestinationConfig:
    """A ``Replication/Destination``: an instance this one pushes messages to.

    Attributes:
        name: the destination's name (unique; the admin API's ``{dest}``).
        group: the Group the remote instance must have (the link is refused otherwise).
        sync: whether persisted acks wait for it (``SyncType`` sync) or not (async).
        topics: the topic blocks; a message goes when one of them takes it.
        passthrough: regexes over group names: a message that arrived by replication goes
            on only when the group of the instance it arrived from matches one (empty:
            only messages published directly here). The configuration's default, with no
            ``<PassThrough>``, is :data:`PASS_EVERY_GROUP`.
        transport: addresses, compression, credentials.
    """

    name: str
    group: str
    sync: bool
    topics: tuple[ReplicationTopic, ...]
    passthrough: tuple[str, ...]
    transport: ReplicationTransport

    @property
    def sync_type(self) -> str:
        return "sync" if self.sync else "async"

    @property
    def passive(self) -> bool:
        """No address: it waits for the peer to dial in (docs/replication.md)."""
        return not self.transport.addresses


#: The event topics (docs/protocol.md "Event topics"): what the broker publishes about its
#: own life, each turned on by ``<EventTopics><Topic>``.
EVENTS_CLIENTS: Final = "/spool/events/clients"
EVENTS_SUBSCRIPTIONS: Final = "/spool/events/subscriptions"
EVENTS_LINKS: Final = "/spool/events/links"
STATS_SOW: Final = "/spool/stats/sow"
EVENT_TOPICS: Final = (EVENTS_CLIENTS, EVENTS_SUBSCRIPTIONS, EVENTS_LINKS, STATS_SOW)


@dataclass(frozen=True, slots=True)
class EventTopicsConfig:
    """The ``<EventTopics>`` section: which event topics the broker publishes.

    Attributes:
        topics: the event topics turned on (none: the section is absent).
        sow_stats_interval: seconds between two samples of ``/spool/stats/sow``.
        max_events_per_second: each topic's budget (a burst of as many); what is over it
            is dropped and counted.
    """

    topics: frozenset[str] = frozenset()
    sow_stats_interval: float = 10.0
    max_events_per_second: int = 1000

    @property
    def enabled(self) -> bool:
        """Whether any event topic is on."""
        return bool(self.topics)


@dataclass(frozen=True, slots=True)
class BootstrapConfig:
    """The ``<Bootstrap>`` section: where an empty instance copies its first state from.

    Attributes:
        topics: the topics (names or regexes, as :class:`ReplicationTopic` without filters)
            whose transaction log records and/or SOW records are copied.
        data_types: ``txlog``, ``sow`` or both: what is copied.
        transport: the sources' addresses (tried in order, the first reachable one is
            used), credentials, compression and TLS, as a destination's transport.
    """

    topics: tuple[ReplicationTopic, ...]
    data_types: frozenset[str]
    transport: ReplicationTransport

    def takes(self, topic: str) -> bool:
        """Whether a record of ``topic`` is copied."""
        return any(t.matches(topic) for t in self.topics)


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """The ``<Replication>`` section.

    Attributes:
        destinations: the instances this one replicates to, in file order.
        ack_interval: how often a destination acknowledges what it made durable (acks
            in between are conflated into the next); 0 = after every group commit.
        link_timeout: seconds a link may hear nothing from its peer before this end
            drops it (both ends of every link, dialed or accepted); each end pings every
            third of it.
    """

    destinations: tuple[DestinationConfig, ...] = ()
    ack_interval: float = 0.001
    link_timeout: float = 6.0

    def destination(self, name: str) -> DestinationConfig | None:
        return next((d for d in self.destinations if d.name == name), None)


#: why a message may leave a queue for its dead-letter topic (docs/queues.md "Dead letters")
DEAD_LETTER_REASONS: Final = ("max_deliveries", "max_cancels", "expired", "rejected")
#: the most dead letters one redrive sends back (docs/queues.md "Redrive")
REDRIVE_MAX: Final = 10_000


@dataclass(frozen=True, slots=True)
class DeadLetterConfig:
    """A queue's ``<DeadLetter>``: where the messages it gives up on go.

    Attributes:
        topic: the topic the broker publishes each dead letter to (recorded by the
            transaction log; a SOW topic or another queue's underlying topic when the
            dead letters should be keyed or worked off).
        reasons: the removals that make a dead letter (:data:`DEAD_LETTER_REASONS`); any
            other removal just leaves the queue, as without a ``<DeadLetter>``.
    """

    topic: str
    reasons: frozenset[str] = frozenset(DEAD_LETTER_REASONS)


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A ``SOW/Queue``, ``SOW/LocalQueue`` or ``SOW/GroupLocalQueue`` (docs/queues.md).

    Attributes:
        name: the queue's topic (what consumers subscribe to and ack on).
        kind: ``Queue`` (distributed), ``LocalQueue`` or ``GroupLocalQueue``.
        underlying: the topic whose messages enter the queue, or a regular expression of
            topics (``underlying_regex``); the queue's name when not given.
        underlying_regex: whether ``underlying`` is a regular expression.
        filter: only messages that match enter the queue (None: all).
        semantics: ``at-least-once`` (leases and acks) or ``at-most-once``.
        lease_period: seconds a consumer holds a delivered message.
        max_backlog: ``MaxPerSubscriptionBacklog``.
        max_deliveries: deliveries after which an unacked message leaves (0: no limit).
        max_cancels: cancels after which a message leaves (0: no limit).
        fairness: ``proportional``, ``round-robin`` or ``fast``.
        leasing: ``sublet`` or ``strict``.
        barrier: the ``BarrierExpression`` (None: no barriers).
        priority: the ``Priority`` expression (None: all equal).
        expiration: seconds a message stays in the queue (0: for ever).
        initial_owner: ``GroupLocalQueue``: the instance that owns new messages.
        target_queue_depth: ``TargetQueueDepth``: at most this many messages active (in
            memory, delivered), the rest inactive in the log (0: no bound).
        stuck_age: ``StuckMessageAge``: seconds the oldest waiting message may wait while
            consumers here have room before the queue counts as stuck (an alert,
            ``/healthz`` degraded; 0: never).
        dead_letter: where messages the queue gives up on go (None: they just leave).
    """

    name: str
    kind: str = "Queue"
    underlying: str = ""
    underlying_regex: bool = False
    filter: str | None = None
    semantics: str = "at-least-once"
    lease_period: float = 300.0
    max_backlog: int = 1
    max_deliveries: int = 0
    max_cancels: int = 0
    fairness: str = "proportional"
    leasing: str = "sublet"
    barrier: str | None = None
    priority: str | None = None
    expiration: float = 0.0
    initial_owner: str | None = None
    target_queue_depth: int = 0
    stuck_age: float = 300.0
    dead_letter: DeadLetterConfig | None = None
    _pattern: re.Pattern[str] | None = field(
        init=False, repr=False, compare=False, hash=False, default=None
    )

    def __post_init__(self) -> None:
        if self.underlying_regex:
            object.__setattr__(self, "_pattern", re.compile(self.underlying))

    def takes(self, topic: str) -> bool:
        """Whether messages published to ``topic`` enter this queue (before its filter)."""
        if self._pattern is not None:
            return self._pattern.search(topic) is not None
        return topic == self.underlying


@dataclass(frozen=True, slots=True)
class SowTopicConfig:
    """A ``SOW/Topic``: a topic (or a regex of topics) whose latest message per key is kept.

    Attributes:
        name: the topic, or a regular expression of topics (``is_regex``).
        is_regex: whether ``name`` is a regular expression (matched with ``re.search``).
        message_type: ``json``.
        keys: JSON paths (``/a/b``) whose values make a record's key, in order. Empty: the
            publisher's ``k`` header is the key, or, without one, a digest of the body
            (docs/sow.md "Keys").
        durability: ``persistent`` (a file per topic under ``DataDirectory/sow``, rebuilt
            from the transaction log when it is lost) or ``transient`` (memory only;
            rebuilt from the transaction log at start when the topic is recorded there).
        expiration: seconds a record lives after its last update; 0 = for ever. A
            message's own ``e`` header overrides it.
    """

    name: str
    is_regex: bool = False
    message_type: str = "json"
    keys: tuple[str, ...] = ()
    durability: str = "persistent"
    expiration: float = 0.0
    _pattern: re.Pattern[str] | None = field(
        init=False, repr=False, compare=False, hash=False, default=None
    )

    def __post_init__(self) -> None:
        if self.is_regex:
            object.__setattr__(self, "_pattern", re.compile(self.name))

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is kept by this rule (exact name, or ``re.search`` of a regex)."""
        pattern = self._pattern
        if pattern is None:
            return topic == self.name
        return pattern.search(topic) is not None

    @property
    def persistent(self) -> bool:
        return self.durability == "persistent"


@dataclass(frozen=True, slots=True)
class TuningConfig:
    """Limits and timings of client connections.

    Attributes:
        logon_failures_per_address_user / logon_failures_per_address /
            logon_failures_per_user / logon_failure_window: the logon throttle
            (server/throttle.py).
        logon_timeout: seconds a connection may stay without a successful logon.
        max_connections_before_logon / max_connections_before_logon_per_address:
            connections without a logon yet, on the instance and from one address.
        max_subscriptions_per_connection / max_subscriptions_per_user,
        max_replays_per_connection / max_replays_per_user,
        max_pending_queries_per_connection / max_pending_queries_per_user: what one
            connection and one user may hold at once (server/quotas.py).
        password_check_threads: size of the password-check pool (server/scryptpool.py).
        slow_client_buffer_limit: bytes buffered for one client. Live messages of recorded
            topics stop being buffered at half of it (the subscription catches up from the
            log instead); what cannot be read back again (messages of topics not recorded,
            acks) disconnects the client with ``slow client`` when it would pass it.
        slow_client_timeout: seconds a client may take no data at all while some waits for
            it before it is disconnected with ``slow client``.
        heartbeat_default: heartbeat interval in seconds for clients that ask for none;
            0 = the client chooses.
        persisted_ack_interval: seconds between periodic bookmark-position acks after a
            replay.
        minimum_sync_destinations: a downgrade that would leave fewer destinations of
            effective type sync than this is refused (it never causes an upgrade).
        journal_scrub_interval: seconds between the end of one scrub of the transaction
            log (every journal byte read back and checked) and the start of the next; 0:
            only on demand (server/txlog/damage/scrub.py).
        journal_scrub_rate: bytes per second the scrub reads at most.
        journal_repair_wait: seconds the start-up waits for a repair of fenced records
            from replication peers before it serves anyway (0: it does not wait; the repair
            goes on in the background: server/replication/repair.py).
        action_event_queue_depth: candidate messages an event-driven action holds
            waiting for its worker; what does not fit is dropped and counted (the
            publisher is never slowed).
        action_catch_up_records: at start-up, how many records of the log an on-publish
            action may go back past its checkpoint to run what it had not (0: none).
        action_history_interval: seconds of one history record of an event-driven action
            (its runs are counted, not stored one by one).
    """

    slow_client_buffer_limit: int = 64 * 1024 * 1024
    heartbeat_default: float = 0.0  # seconds; 0 = client chooses
    persisted_ack_interval: float = 1.0  # periodic bookmark-position ack after replay
    minimum_sync_destinations: int = 0
    #: failed logons (websocket and dashboard together) from one address as one user
    #: name, in ``logon_failure_window``, after which that pair's logons are refused
    #: without a check
    logon_failures_per_address_user: int = 10
    #: failed logons from one address whatever the user names: the ceiling a guesser
    #: trying many names meets, high enough that one misconfigured peer does not lock
    #: out the other users behind a shared address
    logon_failures_per_address: int = 100
    #: failed logons for one user name, from any address, in the window
    logon_failures_per_user: int = 30
    logon_failure_window: float = 300.0  # seconds, sliding
    #: threads that run password checks (scrypt); a flood of logons waits for them
    #: instead of taking the threads fsync and file reads use
    password_check_threads: int = 1
    slow_client_timeout: float = 30.0  # seconds without progress before "slow client"
    logon_timeout: float = 10.0
    max_connections_before_logon: int = 10_000
    max_connections_before_logon_per_address: int = 1000
    max_subscriptions_per_connection: int = 100
    max_subscriptions_per_user: int = 1000
    max_replays_per_connection: int = 32
    max_replays_per_user: int = 128
    max_pending_queries_per_connection: int = 16
    max_pending_queries_per_user: int = 64
    journal_scrub_interval: float = 86400.0
    journal_scrub_rate: int = 64 * 1024 * 1024
    journal_repair_wait: float = 30.0
    action_event_queue_depth: int = 10_000
    action_catch_up_records: int = 100_000
    action_history_interval: float = 60.0


@dataclass(frozen=True, slots=True)
class UserConfig:
    """A user: password hash (scrypt$...), token and/or client certificate subject; topic
    entitlements as regexes."""

    name: str
    # Both are kept out of repr(): a hash in a log invites offline cracking.
    password_hash: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    admin: bool = False
    read: tuple[str, ...] = ()  # regexes; empty = nothing
    write: tuple[str, ...] = ()
    #: RFC 4514 subject (canonical form) of the client certificate that logs on as this
    #: user over mutual TLS
    certificate_subject: str | None = None


@dataclass(frozen=True, slots=True)
class Config:
    """One instance's configuration (docs/configuration.md), as loaded from a file or the default.

    Attributes:
        name: the instance name; prefixes its files.
        group: the replication group (defaults to ``name``).
        data_directory: root of everything the instance writes.
        admin: the REST admin, dashboard and /metrics.
        transports: the listeners; they share the admin's address.
        transaction_log: the journal, or ``None`` to run without one.
        tuning: limits and timings.
        users: empty = no authentication (and loopback only).
        replication: the destinations this instance replicates to, or None.
        sow: the SOW topics, in file order (the first rule that matches a topic wins).
        bootstrap: where an empty instance copies its first state from, or None.
        queues: the message queues (``SOW/*Queue``), in file order.
        tls: the listener's TLS, or ``None`` (plain ``ws://`` and ``http://``).
        allow_plaintext: a non-loopback listener with users may run without TLS (a
            TLS-terminating proxy is in front).
        source_path: the file it was loaded from; ``None`` for text or the default.
        explicit_paths: which data-directory-derived paths the file gave itself
            (``EXPLICIT_*`` names), so ``--data-dir`` leaves those alone.
        actions: the scheduled and on-demand actions (``<Actions>``), in file order.
        event_topics: the event topics turned on (``<EventTopics>``).
        webhooks: where webhook modules may post (``<Actions><Webhooks>``).
    """

    name: str
    group: str
    data_directory: Path
    admin: AdminConfig
    transports: tuple[TransportConfig, ...]
    transaction_log: TransactionLogConfig | None
    tuning: TuningConfig = TuningConfig()
    users: tuple[UserConfig, ...] = ()
    replication: ReplicationConfig | None = None
    sow: tuple[SowTopicConfig, ...] = ()
    bootstrap: BootstrapConfig | None = None
    queues: tuple[QueueConfig, ...] = ()
    tls: TlsConfig | None = None
    allow_plaintext: bool = False
    source_path: Path | None = None
    explicit_paths: frozenset[str] = frozenset()
    actions: tuple[ActionConfig, ...] = ()
    event_topics: EventTopicsConfig = EventTopicsConfig()
    webhooks: WebhooksConfig = field(default_factory=WebhooksConfig)

    def sow_topic(self, topic: str) -> SowTopicConfig | None:
        """The ``SOW/Topic`` rule that keeps ``topic`` (the first that matches), or None."""
        for rule in self.sow:
            if rule.matches(topic):
                return rule
        return None

    @property
    def replication_transport(self) -> TransportConfig | None:
        """The ``amps-replication`` transport (the inbound ``/replication`` endpoint)."""
        return next((t for t in self.transports if t.type == "amps-replication"), None)

    @property
    def link_timeout(self) -> float:
        """``Replication/LinkTimeout``: how long a replication link (or a bootstrap's
        connection) may hear nothing before this instance drops it."""
        return (self.replication or ReplicationConfig()).link_timeout

    @property
    def replicates(self) -> bool:
        """Whether the instance takes part in replication (destinations or an inbound
        endpoint): its log then tracks publisher gaps (server/txlog/publishers/gaps.py)."""
        return self.replication is not None or self.replication_transport is not None

    @property
    def plaintext_exposed(self) -> bool:
        """Whether the listener is reachable from other machines without TLS (allowed only
        with ``AllowPlaintext``; the event log and the dashboard say so)."""
        return self.tls is None and not is_loopback(self.admin.host)

    def directory(self, label: str) -> Path:
        """One of the instance's directories by name: ``data``, ``stats`` (the statistics
        database's), ``journal`` and ``archive`` (the transaction log's).

        Raises:
            KeyError: an unknown name, or ``journal``/``archive`` without a transaction log.
        """
        if label == "data":
            return self.data_directory
        if label == "stats":
            return self.admin.stats_file.parent
        txlog = self.transaction_log
        if txlog is not None and label == "journal":
            return txlog.journal_directory
        if txlog is not None and label == "archive":
            return txlog.archive_directory
        raise KeyError(label)

    @property
    def auth_enabled(self) -> bool:
        """Whether users are configured (every logon and /api call then authenticates)."""
        return bool(self.users)
