"""Instance configuration: the AMPS-shaped XML file of docs/configuration.md as frozen dataclasses.

The model (the dataclasses) is what the rest of the broker reads. :func:`load_config` parses
and validates a file, :func:`parse_config` the same from text, :func:`default_config` is the
embedded default used by ``spool serve`` without a file, and :func:`with_overrides` applies
the ``--listen`` / ``--data-dir`` command-line flags. Everything that is wrong is a
:class:`ConfigError` carrying the element's path and line: an operator fixes a file from the
message alone, and nothing is silently ignored (unknown elements, bad units, duplicates,
out-of-range values, contradictions, and elements of features that do not exist yet are all
refused at start-up).

Modules, each depending only on those above it::

    errors      ConfigError, InetAddrError, OriginError, the messages callers match on
    netaddr     HOST:PORT parsing and formatting, the loopback test, web origins
    webhookurls where a webhook may post (the Allow rule), how its URL is shown
    template    option values with {{VARIABLE}} references (actions)
    actions     the dataclasses of <Actions>: triggers, conditions, modules
    model       the dataclasses (and the transaction log's topic matcher)
    schedule    the Every option of a scheduled action
    xmltree     the expat tree with lines and paths; Children checks an element's children
    values      one element's value: ${VAR}, booleans, numbers, sizes, durations, paths...
    sections/   one reader per top-level section (admin, transports, transactionlog,
                replication, sow, tuning, users, actions and the options of each action
                module and event trigger)
    build       the root element and the cross-checks between sections
    loader      load_config (a file), parse_config (text)
    defaults    default_config, with_overrides, render_default_xml

Other modules import from this package only (``from spool.server.config import Config``); the
modules inside it are its own business. Password hashes are :mod:`spool.server.passwords` and the
regex-topic rule is :mod:`spool.server.protocol.topic`: both are shared with other layers.

Decisions beyond the AMPS shape are listed in docs/configuration.md "Decisions where the AMPS
model is silent".
"""

from __future__ import annotations

from spool.server.config.actions import (
    BASE_VARIABLES,
    DISK_VARIABLES,
    EVENT_TRIGGERS,
    LINK_STATES,
    WEBHOOK_MAX_CONCURRENCY,
    WEBHOOK_MAX_RETRIES,
    WEBHOOK_SPOOL_HEADERS,
    WEBHOOK_TIMEOUT_RANGE,
    ActionConfig,
    ActionParameter,
    ArchiveJournals,
    CompactSow,
    CompressJournals,
    Condition,
    DeleteSow,
    DiskThreshold,
    DoStep,
    DowngradeReplication,
    EchoMessage,
    EventTrigger,
    EventUse,
    ExecuteEvent,
    ExtractValues,
    IfCondition,
    IfDiskUsage,
    JournalLimits,
    JournalStep,
    OnAdmin,
    OnClient,
    OnDeadLetter,
    OnDiskUsage,
    OnExecute,
    OnLinkState,
    OnOof,
    OnPublishMessage,
    OnSchedule,
    OnShutdown,
    OnSowRemoval,
    OnStartup,
    PublishMessage,
    RedriveDeadLetters,
    RemoveJournals,
    ReplicationStep,
    Schedule,
    SetProxiedTransfer,
    SetTransport,
    Shutdown,
    Step,
    TopicMatch,
    Trigger,
    TruncateStatistics,
    UpgradeReplication,
    Webhook,
    WebhooksConfig,
)
from spool.server.config.defaults import default_config, render_default_xml, with_overrides
from spool.server.config.errors import (
    BIND_REQUIRES_USERS,
    SHARED_ADDRESS,
    ConfigError,
    InetAddrError,
    OriginError,
)
from spool.server.config.loader import load_config, parse_config
from spool.server.config.model import (
    EVENT_TOPICS,
    EVENTS_CLIENTS,
    EVENTS_LINKS,
    EVENTS_SUBSCRIPTIONS,
    EXPLICIT_ARCHIVE_DIRECTORY,
    EXPLICIT_JOURNAL_DIRECTORY,
    EXPLICIT_STATS_FILE,
    MAX_SYNC_DESTINATIONS,
    NON_EXCLUDABLE_CHECKS,
    PASS_EVERY_GROUP,
    STATS_SOW,
    VALIDATION_CHECKS,
    AdminConfig,
    AlertRuleConfig,
    BootstrapConfig,
    Config,
    DestinationConfig,
    EventTopicsConfig,
    ReplicationConfig,
    ReplicationTopic,
    ReplicationTransport,
    SowTopicConfig,
    TlsConfig,
    TopicRule,
    TransactionLogConfig,
    TransportConfig,
    TuningConfig,
    UserConfig,
)
from spool.server.config.netaddr import (
    WebOrigin,
    format_inet_addr,
    is_loopback,
    parse_host_header,
    parse_inet_addr,
    parse_origin,
)
from spool.server.config.template import Template
from spool.server.config.webhookurls import AllowList, redact_url

__all__ = [
    "BASE_VARIABLES",
    "BIND_REQUIRES_USERS",
    "DISK_VARIABLES",
    "EVENTS_CLIENTS",
    "EVENTS_LINKS",
    "EVENTS_SUBSCRIPTIONS",
    "EVENT_TOPICS",
    "EVENT_TRIGGERS",
    "EXPLICIT_ARCHIVE_DIRECTORY",
    "EXPLICIT_JOURNAL_DIRECTORY",
    "EXPLICIT_STATS_FILE",
    "LINK_STATES",
    "MAX_SYNC_DESTINATIONS",
    "NON_EXCLUDABLE_CHECKS",
    "PASS_EVERY_GROUP",
    "SHARED_ADDRESS",
    "STATS_SOW",
    "VALIDATION_CHECKS",
    "WEBHOOK_MAX_CONCURRENCY",
    "WEBHOOK_MAX_RETRIES",
    "WEBHOOK_SPOOL_HEADERS",
    "WEBHOOK_TIMEOUT_RANGE",
    "ActionConfig",
    "ActionParameter",
    "AdminConfig",
    "AlertRuleConfig",
    "AllowList",
    "ArchiveJournals",
    "BootstrapConfig",
    "CompactSow",
    "CompressJournals",
    "Condition",
    "Config",
    "ConfigError",
    "DeleteSow",
    "DestinationConfig",
    "DiskThreshold",
    "DoStep",
    "DowngradeReplication",
    "EchoMessage",
    "EventTopicsConfig",
    "EventTrigger",
    "EventUse",
    "ExecuteEvent",
    "ExtractValues",
    "IfCondition",
    "IfDiskUsage",
    "InetAddrError",
    "JournalLimits",
    "JournalStep",
    "OnAdmin",
    "OnClient",
    "OnDeadLetter",
    "OnDiskUsage",
    "OnExecute",
    "OnLinkState",
    "OnOof",
    "OnPublishMessage",
    "OnSchedule",
    "OnShutdown",
    "OnSowRemoval",
    "OnStartup",
    "OriginError",
    "PublishMessage",
    "RedriveDeadLetters",
    "RemoveJournals",
    "ReplicationConfig",
    "ReplicationStep",
    "ReplicationTopic",
    "ReplicationTransport",
    "Schedule",
    "SetProxiedTransfer",
    "SetTransport",
    "Shutdown",
    "SowTopicConfig",
    "Step",
    "Template",
    "TlsConfig",
    "TopicMatch",
    "TopicRule",
    "TransactionLogConfig",
    "TransportConfig",
    "Trigger",
    "TruncateStatistics",
    "TuningConfig",
    "UpgradeReplication",
    "UserConfig",
    "WebOrigin",
    "Webhook",
    "WebhooksConfig",
    "default_config",
    "format_inet_addr",
    "is_loopback",
    "load_config",
    "parse_config",
    "parse_host_header",
    "parse_inet_addr",
    "parse_origin",
    "redact_url",
    "render_default_xml",
    "with_overrides",
]
