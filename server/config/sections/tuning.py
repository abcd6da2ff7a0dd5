"""The ``<Tuning>`` section: limits and timings of client connections, and the floor of
synchronous replication destinations (``MinimumSyncDestinations``: a downgrade that would
go below it is refused; it never upgrades anything).

The logon throttle (``LogonFailuresPerAddressUser``, ``LogonFailuresPerAddress``,
``LogonFailuresPerUser``, ``LogonFailureWindow``), the password-check pool
(``PasswordCheckThreads``) and the logon deadline and cap (``LogonTimeout``,
``MaxConnectionsBeforeLogon[PerAddress]``) are here too: they bound what a flood of
logons can cost (docs/security.md). So are the quotas of one connection and one user
(``Max{Subscriptions,Replays,PendingQueries}Per{Connection,User}``, server/quotas.py), the
scrub of the transaction log (``JournalScrubInterval``, ``JournalScrubRate``:
docs/transaction-log.md) and the time start-up waits for the repair of damaged records
(``JournalRepairWait``: docs/replication.md "Repair").

The bounds of the message-driven actions are here too: the queue of an event-driven
action (``ActionEventQueueDepth``), how far back an on-publish action catches up at
start-up (``ActionCatchUpRecords``) and the span of one record of its history
(``ActionHistoryInterval``): docs/actions.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from spool.server.config.model import MAX_SYNC_DESTINATIONS, TuningConfig
from spool.server.config.values import DAY, GB, KB, Context, read_duration, read_int, read_size
from spool.server.config.xmltree import Children, Spec, XmlNode

__all__ = ["read_tuning"]

_TUNING_SPEC: Final[Spec] = {
    "SlowClientBufferLimit": False,
    "SlowClientTimeout": False,
    "HeartbeatDefault": False,
    "PersistedAckInterval": False,
    "MinimumSyncDestinations": False,
    "LogonFailuresPerAddress": False,
    "LogonFailuresPerUser": False,
    "LogonFailureWindow": False,
    "PasswordCheckThreads": False,
    "LogonFailuresPerAddressUser": False,
    "LogonTimeout": False,
    "MaxConnectionsBeforeLogon": False,
    "MaxConnectionsBeforeLogonPerAddress": False,
    "MaxSubscriptionsPerConnection": False,
    "MaxSubscriptionsPerUser": False,
    "MaxReplaysPerConnection": False,
    "MaxReplaysPerUser": False,
    "MaxPendingQueriesPerConnection": False,
    "MaxPendingQueriesPerUser": False,
    "JournalScrubInterval": False,
    "JournalScrubRate": False,
    "JournalRepairWait": False,
    "ActionEventQueueDepth": False,
    "ActionCatchUpRecords": False,
    "ActionHistoryInterval": False,
}

#: the counts of ``<Tuning>``: element -> (TuningConfig field, largest value)
_COUNTS: Final[dict[str, tuple[str, int]]] = {
    "LogonFailuresPerAddressUser": ("logon_failures_per_address_user", 10_000),
    "MaxConnectionsBeforeLogon": ("max_connections_before_logon", 1_000_000),
    "MaxConnectionsBeforeLogonPerAddress": ("max_connections_before_logon_per_address", 1_000_000),
    "MaxSubscriptionsPerConnection": ("max_subscriptions_per_connection", 1_000_000),
    "MaxSubscriptionsPerUser": ("max_subscriptions_per_user", 10_000_000),
    "MaxReplaysPerConnection": ("max_replays_per_connection", 100_000),
    "MaxReplaysPerUser": ("max_replays_per_user", 1_000_000),
    "MaxPendingQueriesPerConnection": ("max_pending_queries_per_connection", 100_000),
    "MaxPendingQueriesPerUser": ("max_pending_queries_per_user", 1_000_000),
    "ActionEventQueueDepth": ("action_event_queue_depth", 1_000_000),
}


def read_tuning(
    node: XmlNode | None, ctx: Context
) -> tuple[TuningConfig, XmlNode | None, XmlNode | None]:
    """Read ``<Tuning>`` (absent: the defaults).

    Returns:
        The configuration, the SlowClientBufferLimit element if given (the message-size
        cross-check reports at it) and the MinimumSyncDestinations element if given (the
        replication cross-check does).
    """
    tuning = TuningConfig()
    if node is None:
        return tuning, None, None
    kids = Children(node, _TUNING_SPEC)
    limit_node = kids.one("SlowClientBufferLimit")
    if limit_node is not None:
        limit = read_size(limit_node, ctx, minimum=64 * KB, maximum=1024 * GB)
        tuning = replace(tuning, slow_client_buffer_limit=limit)
    if (timeout_node := kids.one("SlowClientTimeout")) is not None:
        timeout = read_duration(timeout_node, ctx, minimum=1.0, maximum=DAY)
        tuning = replace(tuning, slow_client_timeout=timeout)
    if (heartbeat_node := kids.one("HeartbeatDefault")) is not None:
        heartbeat = read_duration(heartbeat_node, ctx, minimum=1.0, maximum=3600.0, zero_ok=True)
        tuning = replace(tuning, heartbeat_default=heartbeat)
    if (ack_node := kids.one("PersistedAckInterval")) is not None:
        interval = read_duration(ack_node, ctx, minimum=0.001, maximum=3600.0)
        tuning = replace(tuning, persisted_ack_interval=interval)
    if (node_ := kids.one("LogonFailuresPerAddress")) is not None:
        tuning = replace(
            tuning, logon_failures_per_address=read_int(node_, ctx, minimum=1, maximum=1_000_000)
        )
    if (node_ := kids.one("LogonFailuresPerUser")) is not None:
        tuning = replace(
            tuning, logon_failures_per_user=read_int(node_, ctx, minimum=1, maximum=100_000)
        )
    if (node_ := kids.one("LogonFailureWindow")) is not None:
        tuning = replace(
            tuning, logon_failure_window=read_duration(node_, ctx, minimum=1.0, maximum=DAY)
        )
    for element, (name, largest) in _COUNTS.items():
        if (node_ := kids.one(element)) is not None:
            tuning = replace(tuning, **{name: read_int(node_, ctx, minimum=1, maximum=largest)})
    if (node_ := kids.one("LogonTimeout")) is not None:
        tuning = replace(
            tuning, logon_timeout=read_duration(node_, ctx, minimum=0.1, maximum=3600.0)
        )
    if (node_ := kids.one("PasswordCheckThreads")) is not None:
        tuning = replace(tuning, password_check_threads=read_int(node_, ctx, minimum=1, maximum=64))
    if (node_ := kids.one("JournalScrubInterval")) is not None:
        interval = read_duration(node_, ctx, minimum=60.0, maximum=365 * DAY, zero_ok=True)
        tuning = replace(tuning, journal_scrub_interval=interval)
    if (node_ := kids.one("JournalRepairWait")) is not None:
        wait = read_duration(node_, ctx, minimum=1.0, maximum=DAY, zero_ok=True)
        tuning = replace(tuning, journal_repair_wait=wait)
    if (node_ := kids.one("JournalScrubRate")) is not None:
        tuning = replace(
            tuning, journal_scrub_rate=read_size(node_, ctx, minimum=64 * KB, maximum=100 * GB)
        )
    if (node_ := kids.one("ActionCatchUpRecords")) is not None:
        tuning = replace(
            tuning, action_catch_up_records=read_int(node_, ctx, minimum=0, maximum=100_000_000)
        )
    if (node_ := kids.one("ActionHistoryInterval")) is not None:
        interval = read_duration(node_, ctx, minimum=10.0, maximum=DAY)
        tuning = replace(tuning, action_history_interval=interval)
    min_sync_node = kids.one("MinimumSyncDestinations")
    if min_sync_node is not None:
        minimum = read_int(min_sync_node, ctx, minimum=0, maximum=MAX_SYNC_DESTINATIONS)
        tuning = replace(tuning, minimum_sync_destinations=minimum)
    return tuning, limit_node, min_sync_node
