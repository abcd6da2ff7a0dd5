"""The embedded default configuration and the command-line overrides.

:func:`default_config` is what ``spool serve`` runs without a file; :func:`with_overrides`
applies ``--listen`` / ``--data-dir`` to any configuration; :func:`render_default_xml` writes
the default as a file (docs/configuration.md shows it, and a test keeps the two equal).
Values that come from here have no line: their errors carry the path only.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from spool.server.config.errors import (
    BIND_REQUIRES_USERS,
    PLAINTEXT_NEEDS_PERMISSION,
    ConfigError,
    InetAddrError,
)
from spool.server.config.model import (
    DEFAULT_HOST,
    DEFAULT_NAME,
    DEFAULT_PORT,
    DEFAULT_TRANSPORT,
    EXPLICIT_ARCHIVE_DIRECTORY,
    EXPLICIT_JOURNAL_DIRECTORY,
    EXPLICIT_STATS_FILE,
    AdminConfig,
    Config,
    TopicRule,
    TransactionLogConfig,
    TransportConfig,
)
from spool.server.config.netaddr import check_host, check_port, is_loopback
from spool.server.units import format_duration, format_size

__all__ = ["default_config", "render_default_xml", "with_overrides"]

_ADMIN_INET_ADDR = "/SpoolConfig/Admin/InetAddr"


def _check_bind(config: Config) -> None:
    if is_loopback(config.admin.host):
        return
    if not config.users:
        raise ConfigError(
            _ADMIN_INET_ADDR,
            None,
            f"{BIND_REQUIRES_USERS}; {config.admin.address} is reachable from other machines",
        )
    if config.tls is None and not config.allow_plaintext:
        raise ConfigError(
            _ADMIN_INET_ADDR,
            None,
            f"{PLAINTEXT_NEEDS_PERMISSION}; {config.admin.address} is reachable from other "
            "machines",
        )


def _listen(listen: tuple[str, int]) -> tuple[str, int]:
    host, port = listen
    try:
        return check_host(host), check_port(port)
    except InetAddrError as exc:
        raise ConfigError(_ADMIN_INET_ADDR, None, str(exc)) from None


def default_config(
    *, data_dir: Path | None = None, listen: tuple[str, int] | None = None
) -> Config:
    """The embedded default (docs/configuration.md): what ``spool serve`` runs without a file.

    Instance and group ``spool``; everything under ``./data`` (or ``data_dir``), made
    absolute against the current directory; every topic recorded in the transaction log
    (``.*``, json); one websocket transport ``websocket-json`` and the admin on
    127.0.0.1:9007 (or ``listen``); no users, hence loopback only.

    Raises:
        ConfigError: ``listen`` is not loopback (path ``/SpoolConfig/Admin/InetAddr``), or
            not a valid host/port.
    """
    root = Path(data_dir) if data_dir is not None else Path("data")
    data = root if root.is_absolute() else Path.cwd().absolute() / root
    host, port = _listen(listen) if listen is not None else (DEFAULT_HOST, DEFAULT_PORT)
    config = Config(
        name=DEFAULT_NAME,
        group=DEFAULT_NAME,
        data_directory=data,
        admin=AdminConfig(host=host, port=port, stats_file=data / "stats.db"),
        transports=(TransportConfig(DEFAULT_TRANSPORT, "websocket", host, port),),
        transaction_log=TransactionLogConfig(
            journal_directory=data / "journal",
            archive_directory=data / "archive",
            topics=(TopicRule(".*", "json", is_regex=True),),
        ),
    )
    _check_bind(config)
    return config


def with_overrides(
    cfg: Config, *, listen: tuple[str, int] | None = None, data_dir: Path | None = None
) -> Config:
    """Apply the ``--listen`` / ``--data-dir`` command-line flags to a configuration.

    ``listen`` moves the Admin and every transport (they share one address). ``data_dir``
    (made absolute against the current directory) replaces DataDirectory and moves the
    journal, archive and stats paths under it unless the file set them explicitly.

    Raises:
        ConfigError: the result binds a non-loopback address without users, or ``listen``
            is not a valid host/port (path ``/SpoolConfig/Admin/InetAddr``, no line).
    """
    config = cfg
    if data_dir is not None:
        data = Path(data_dir)
        data = data if data.is_absolute() else Path.cwd().absolute() / data
        admin = config.admin
        if EXPLICIT_STATS_FILE not in config.explicit_paths:
            admin = replace(admin, stats_file=data / "stats.db")
        txlog = config.transaction_log
        if txlog is not None:
            if EXPLICIT_JOURNAL_DIRECTORY not in config.explicit_paths:
                txlog = replace(txlog, journal_directory=data / "journal")
            if EXPLICIT_ARCHIVE_DIRECTORY not in config.explicit_paths:
                txlog = replace(txlog, archive_directory=data / "archive")
            if txlog.journal_directory == txlog.archive_directory:
                raise ConfigError(
                    "/SpoolConfig/DataDirectory",
                    None,
                    "with --data-dir the journal and archive directories would be the same",
                )
        config = replace(config, data_directory=data, admin=admin, transaction_log=txlog)
    if listen is not None:
        host, port = _listen(listen)
        config = replace(
            config,
            admin=replace(config.admin, host=host, port=port),
            transports=tuple(replace(t, host=host, port=port) for t in config.transports),
        )
    _check_bind(config)
    return config


def render_default_xml() -> str:
    """The embedded default as an XML file (for the docs and ``spool config show-default``).

    Parsing it (with the current directory as base) gives exactly :func:`default_config`.
    """
    cfg = default_config()
    admin, tuning = cfg.admin, cfg.tuning
    transport = cfg.transports[0]
    txlog = cfg.transaction_log
    if txlog is None:  # pragma: no cover - default_config() always has a transaction log
        raise RuntimeError("the embedded default lost its transaction log")
    topic = txlog.topics[0]

    def boolean(value: bool) -> str:
        return "true" if value else "false"

    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Spool's embedded default: what `spool serve` runs without a configuration file.
     Relative paths resolve against the directory of this file. -->
<SpoolConfig>
  <Name>{cfg.name}</Name>
  <Group>{cfg.group}</Group>
  <DataDirectory>./data</DataDirectory>

  <Admin>
    <InetAddr>{admin.address}</InetAddr>
    <!-- <FileName> defaults to DataDirectory/stats.db -->
    <Interval>{format_duration(admin.interval)}</Interval>
    <Authentication>{admin.authentication}</Authentication>
    <StatsRetention>{format_duration(admin.stats_retention)}</StatsRetention>
    <!-- a disconnected client's series: kept this long, and at most this many in all -->
    <ClientStatsRetention>{format_duration(admin.client_stats_retention)}</ClientStatsRetention>
    <ClientStatsLimit>{admin.client_stats_limit}</ClientStatsLimit>
    <MetricsPublic>{boolean(admin.metrics_public)}</MetricsPublic>
    <!-- <AllowedOrigins>https://ops.example.com</AllowedOrigins>: web pages of other
         origins that may use the websocket and the API (none: the broker's own pages) -->
  </Admin>

  <Transports>
    <Transport>
      <Name>{transport.name}</Name>
      <Type>{transport.type}</Type>
      <InetAddr>{transport.address}</InetAddr>
      <MessageType>{transport.message_type}</MessageType>
      <PerMessageDeflate>{boolean(transport.per_message_deflate)}</PerMessageDeflate>
      <MaxMessageSize>{format_size(transport.max_message_size)}</MaxMessageSize>
      <Enabled>{boolean(transport.enabled)}</Enabled>
    </Transport>
  </Transports>

  <TransactionLog>
    <!-- <JournalDirectory> defaults to DataDirectory/journal and
         <JournalArchiveDirectory> to DataDirectory/archive -->
    <PreallocatedJournalFiles>{txlog.preallocated_files}</PreallocatedJournalFiles>
    <JournalSize>{format_size(txlog.journal_size)}</JournalSize>
    <FlushInterval>{format_duration(txlog.flush_interval)}</FlushInterval>
    <!-- after a failed journal write: retry after this, then x2 each time, up to x16 -->
    <WriteRetryInterval>{format_duration(txlog.write_retry_interval)}</WriteRetryInterval>
    <MaxSize>{txlog.max_size}</MaxSize>  <!-- 0 = unlimited -->
    <Topic><Name>{topic.name}</Name><MessageType>{topic.message_type}</MessageType></Topic>
  </TransactionLog>

  <Tuning>
    <SlowClientBufferLimit>{format_size(tuning.slow_client_buffer_limit)}</SlowClientBufferLimit>
    <SlowClientTimeout>{format_duration(tuning.slow_client_timeout)}</SlowClientTimeout>
    <!-- HeartbeatDefault 0 = the client chooses -->
    <HeartbeatDefault>{format_duration(tuning.heartbeat_default)}</HeartbeatDefault>
    <PersistedAckInterval>{format_duration(tuning.persisted_ack_interval)}</PersistedAckInterval>
    <!-- failed logons (websocket and dashboard) before further ones are refused unchecked:
         per address and user name, per address whatever the names, per user name -->
    <LogonFailuresPerAddressUser>{tuning.logon_failures_per_address_user}</LogonFailuresPerAddressUser>
    <LogonFailuresPerAddress>{tuning.logon_failures_per_address}</LogonFailuresPerAddress>
    <LogonFailuresPerUser>{tuning.logon_failures_per_user}</LogonFailuresPerUser>
    <LogonFailureWindow>{format_duration(tuning.logon_failure_window)}</LogonFailureWindow>
    <PasswordCheckThreads>{tuning.password_check_threads}</PasswordCheckThreads>
    <!-- a connection that has not logged on within this is closed; at most so many wait -->
    <LogonTimeout>{format_duration(tuning.logon_timeout)}</LogonTimeout>
    <MaxConnectionsBeforeLogon>{tuning.max_connections_before_logon}</MaxConnectionsBeforeLogon>
    <MaxConnectionsBeforeLogonPerAddress>{tuning.max_connections_before_logon_per_address}</MaxConnectionsBeforeLogonPerAddress>
    <!-- what one connection and one user may hold at once (failure: limit exceeded) -->
    <MaxSubscriptionsPerConnection>{tuning.max_subscriptions_per_connection}</MaxSubscriptionsPerConnection>
    <MaxSubscriptionsPerUser>{tuning.max_subscriptions_per_user}</MaxSubscriptionsPerUser>
    <MaxReplaysPerConnection>{tuning.max_replays_per_connection}</MaxReplaysPerConnection>
    <MaxReplaysPerUser>{tuning.max_replays_per_user}</MaxReplaysPerUser>
    <MaxPendingQueriesPerConnection>{tuning.max_pending_queries_per_connection}</MaxPendingQueriesPerConnection>
    <MaxPendingQueriesPerUser>{tuning.max_pending_queries_per_user}</MaxPendingQueriesPerUser>
  </Tuning>

  <!-- No <Users>: no authentication, so only loopback addresses may be bound.
       TLS: <Certificate>, <PrivateKey> (and <CACertificate>, <ClientAuth> for client
       certificates) in <Admin> or a <Transport>; see docs/security.md. -->
</SpoolConfig>
"""
