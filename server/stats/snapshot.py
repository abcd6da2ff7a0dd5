"""The shape of a metrics snapshot: what the broker counts, read once per tick or scrape.

The engine builds one with :meth:`spool.server.metrics.Metrics.snapshot` (cheap, on the loop, no
I/O); the stats sampler, the Prometheus collector and the dashboard's live feed read it.
Counters are cumulative since the start of the instance (a client's counters since its
connection); rates are computed by the readers over two snapshots.
"""

from __future__ import annotations

from typing import TypedDict

from spool.server.stats.histogram import LatencyHistogram


class ClientCounters(TypedDict):
    """One logged-on client."""

    msgs_in: int
    msgs_out: int
    bytes_in: int
    bytes_out: int
    queue_depth: int


class TopicCounters(TypedDict):
    """One topic of the topic table."""

    msgs_in: int
    bytes_in: int


class SubscriptionLag(TypedDict):
    """Where one subscription stands."""

    client: str | None
    sub_id: str
    topic: str
    state: str
    position_seq: int
    seconds_behind: float


class TxlogCounters(TypedDict):
    """The transaction log."""

    last_seq: int
    durable_seq: int
    bytes: float
    journals: float
    appended: float
    flushes: float
    fsync_p50_ms: float
    fsync_p99_ms: float
    #: a write outage: the log refuses publishes and retries (docs/transaction-log.md)
    refusing_writes: bool
    write_outages: float
    write_retries: float
    #: fewer preallocated journal files than configured (a disk short of room)
    preallocation_shortfall: bool
    #: damaged ranges of journals found and not fenced yet (docs/transaction-log.md)
    damaged_ranges: float
    #: fenced ranges, and the local seqs they hold (damaged records waiting for a repair)
    fenced_ranges: float
    fenced_records: float
    #: journal bytes the scrub read back and checked, and its completed passes
    scrub_bytes: float
    scrub_passes: float


class SpillCounters(TypedDict):
    """Live subscriptions that spilled after a burst and caught up from the log
    (server/spills.py); zero without a transaction log."""

    catching_up: int  # reading the log now
    spills: int  # times a subscription spilled
    rejoins: int  # catch-ups that ended back on the live path
    seconds: float  # time spent catching up, every subscription together


class QueueCounters(TypedDict):
    """One message queue (server/queues/): its state now and its counters."""

    depth: int  # messages in the queue
    backlog: int  # waiting for a consumer
    held: int  # held back after a loss (server/queues/hold.py), not in backlog
    leased: int  # delivered, not acked yet
    consumers: int
    oldest_lease_age: float  # seconds
    oldest_message_age: float  # seconds
    oldest_undelivered_age: float  # seconds: the oldest message not leased
    stuck: int  # 1 while the queue is stuck (server/queues/stuck.py)
    enqueued: int  # messages that entered it since the start
    removed: dict[str, int]  # messages that left it, by reason (acked, expired, ...)
    dead_lettered: int  # messages it published to its dead-letter topic since the start
    inactive: int  # TargetQueueDepth: messages waiting in the log, not active
    deferred_acks: int  # TargetQueueDepth: acks of inactive messages, applied at activation


class TransportCounters(TypedDict):
    """One configured transport."""

    connections: int
    enabled: bool


class LinkCounters(TypedDict):
    """One replication link: a destination of this instance (``out``) or a source
    replicating to it (``in``)."""

    direction: str
    connected: bool
    sync: bool  # out: persisted acks wait for it now (effective sync type sync)
    msgs: int  # out: records sent; in: records received
    bytes: int
    acked: int  # out: how far it acknowledged this log; in: how far this instance acked
    messages_behind: int
    seconds_behind: float
    disconnects: int


class SecurityCounters(TypedDict):
    """Logons, password checks and the listener's TLS.

    ``logon_*`` are per path (``websocket``, ``dashboard``): ``failures`` were checked and
    wrong, ``refused`` turned away unchecked (throttle, full password pool).
    """

    logon_succeeded: dict[str, int]
    logon_failures: dict[str, int]
    logon_refused: dict[str, int]
    blocked_addresses: int
    blocked_users: int
    password_checks: int
    password_check_seconds: float
    password_checks_pending: int
    tls_enabled: bool
    tls_not_after: float | None
    tls_reloads: int
    plaintext_exposed: bool


class EventTopicCounters(TypedDict):
    """One event topic that is on (server/eventtopics)."""

    published: int  # messages published since the start
    dropped: int  # happenings over MaxEventsPerSecond, not published
    refused: int  # messages the publish path refused


class DelayedCounters(TypedDict):
    """Delayed delivery (server/delayed): publishes stored to be delivered later."""

    pending: int  # messages not delivered yet
    delivered: int  # messages delivered at their due time since the start


class MetricsSnapshot(TypedDict):
    """Everything counted, at one moment (``time``, epoch seconds)."""

    time: float
    msgs_in: int
    msgs_out: int
    bytes_in: int
    bytes_out: int
    connections: int
    subscriptions: int
    clients: dict[str, ClientCounters]
    topics: dict[str, TopicCounters]
    subscriptions_detail: list[SubscriptionLag]
    txlog: TxlogCounters | None
    persisted_ack_latency: LatencyHistogram
    transports: dict[str, TransportCounters]
    replication: dict[str, LinkCounters]  # "out/NAME" or "in/NAME"
    security: SecurityCounters
    spills: SpillCounters
    queues: dict[str, QueueCounters]
    #: connections ended since the start, by cause (every cause, zeros included)
    disconnects: dict[str, int]
    #: the event topics that are on, by topic
    event_topics: dict[str, EventTopicCounters]
    #: delayed delivery (None: no transaction log, so none)
    delayed: DelayedCounters | None
