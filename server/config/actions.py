"""The model of ``<Actions>``: what each action runs on, checks and does (frozen dataclasses).

An action (docs/configuration.md, AMPS "Actions") is a name, one or more triggers (``<On>``) and an
ordered list of steps: conditions (``<If>``) and modules (``<Do>``), run in file order.
Every trigger, condition and module is a dataclass of its own carrying exactly the options
that module takes, already validated by :mod:`spool.server.config.sections.actions`, so the
scheduler (:mod:`spool.server.actions`) never re-checks a value. Each carries its AMPS module name
(``module``) and the path of its element (``where``), so run records and errors name the
step the way the operator wrote it.

Durations are float seconds, sizes int bytes, percentages floats in ``(0, 100)``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Final, Literal

from spool.server.config.template import Template
from spool.server.units import format_duration, format_size

__all__ = [
    "ACTION_MODULES",
    "BASE_VARIABLES",
    "CONDITION_MODULES",
    "DISK_VARIABLES",
    "EVENT_TRIGGERS",
    "LINK_STATES",
    "MODULE_PREFIX",
    "TRIGGER_MODULES",
    "WEBHOOK_MAX_CONCURRENCY",
    "WEBHOOK_MAX_RETRIES",
    "WEBHOOK_SPOOL_HEADERS",
    "WEBHOOK_TIMEOUT_RANGE",
    "ActionConfig",
    "ActionParameter",
    "ArchiveJournals",
    "CompactSow",
    "CompressJournals",
    "Condition",
    "DeleteSow",
    "DiskThreshold",
    "DoStep",
    "DowngradeReplication",
    "EchoMessage",
    "EventTrigger",
    "EventUse",
    "ExecuteEvent",
    "ExtractValues",
    "IfCondition",
    "IfDiskUsage",
    "JournalLimits",
    "JournalStep",
    "MessageSource",
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
    "PublishMessage",
    "RemoveJournals",
    "ReplicationStep",
    "Schedule",
    "SetTransport",
    "Shutdown",
    "Step",
    "TopicMatch",
    "Trigger",
    "TruncateStatistics",
    "UpgradeReplication",
    "Webhook",
    "WebhooksConfig",
]

#: Every module name starts with this (the AMPS spelling).
MODULE_PREFIX: Final = "amps-action-"
#: Variables every run has (``{{AMPS_BYTE_XX}}`` too).
BASE_VARIABLES: Final = (
    "AMPS_INSTANCE_NAME",
    "AMPS_ACTION_NAME",
    "AMPS_TRIGGER",
    "AMPS_DATETIME",
    "AMPS_UNIX_TIMESTAMP",
)
#: Variables a disk-usage trigger or condition adds: the path, its used percent, free bytes.
DISK_VARIABLES: Final = ("AMPS_DISK_PATH", "AMPS_DISK_PERCENT", "AMPS_DISK_FREE_BYTES")


@dataclass(frozen=True, slots=True)
class Schedule:
    """When an ``amps-action-on-schedule`` trigger fires (its ``Every`` option).

    Attributes:
        kind: ``every`` (a timer: every ``interval`` seconds from the start of the
            instance), ``daily`` (at ``time_of_day`` each day) or ``weekly`` (at
            ``time_of_day`` on ``weekday``).
        interval: seconds between two runs of an ``every`` schedule (0 otherwise).
        time_of_day: seconds after local midnight (calendar schedules).
        weekday: 0 = Monday .. 6 = Sunday (weekly schedules), else None.
        zone: the IANA time zone the calendar times are in (``UTC`` by default).
        text: the ``Every`` value as written.
    """

    kind: Literal["every", "daily", "weekly"]
    interval: float = 0.0
    time_of_day: int = 0
    weekday: int | None = None
    zone: str = "UTC"
    text: str = ""

    def describe(self) -> str:
        """A one-line description for the admin API and the dashboard."""
        if self.kind == "every":
            return f"every {self.text}"
        hh, rest = divmod(self.time_of_day, 3600)
        mm, ss = divmod(rest, 60)
        clock = f"{hh:02d}:{mm:02d}" + (f":{ss:02d}" if ss else "")
        if self.kind == "daily":
            return f"daily at {clock} {self.zone}"
        assert self.weekday is not None
        return f"{_WEEKDAYS[self.weekday]} at {clock} {self.zone}"


_WEEKDAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


# -- triggers (<On>) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OnSchedule:
    """``amps-action-on-schedule``: on a timer or at calendar times."""

    provides: ClassVar[tuple[str, ...]] = ("AMPS_SCHEDULE",)
    schedule: Schedule
    where: str = ""
    module: str = "amps-action-on-schedule"


@dataclass(frozen=True, slots=True)
class OnStartup:
    """``amps-action-on-startup``: once recovery is done, before clients are served."""

    provides: ClassVar[tuple[str, ...]] = ()
    where: str = ""
    module: str = "amps-action-on-startup"


@dataclass(frozen=True, slots=True)
class OnShutdown:
    """``amps-action-on-shutdown``: when shutdown begins, before clients are closed."""

    provides: ClassVar[tuple[str, ...]] = ()
    where: str = ""
    module: str = "amps-action-on-shutdown"


@dataclass(frozen=True, slots=True)
class ActionParameter:
    """A parameter an on-admin action takes (``POST /api/actions/NAME``, the run form).

    Attributes:
        name: the variable it sets (``{{NAME}}`` in the action's options).
        default: used when the request does not give it; None = required.
        pattern: a regular expression the whole value must match, or None.
        description: shown beside the field of the dashboard's form.
    """

    name: str
    default: str | None = None
    pattern: str | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class OnAdmin:
    """``amps-action-on-admin``: ``POST /api/actions/NAME`` and the dashboard's "Run now".

    Its parameters become variables of the run; ``AMPS_USER`` is who asked.
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_USER",)
    parameters: tuple[ActionParameter, ...] = ()
    where: str = ""
    module: str = "amps-action-on-admin"


@dataclass(frozen=True, slots=True)
class OnDiskUsage:
    """``amps-action-on-disk-usage``: the file system holding ``path`` is above ``above`` %.

    Attributes:
        label: ``journal``, ``archive``, ``data``, ``stats`` (the instance's directories,
            resolved with :meth:`Config.directory`, so ``--data-dir`` moves them too), or
            the path given.
        path: the directory given, None for one of the instance's.
        above: the used percentage that fires the action (strictly above).
        interval: seconds between two checks.
        repeat: while it stays above, fire again every ``repeat`` seconds (None: once per
            crossing; it re-arms when usage falls to ``above`` or below).
    """

    provides: ClassVar[tuple[str, ...]] = DISK_VARIABLES
    label: str
    path: Path | None
    above: float
    interval: float = 60.0
    repeat: float | None = None
    where: str = ""
    module: str = "amps-action-on-disk-usage"


@dataclass(frozen=True, slots=True)
class OnExecute:
    """``amps-action-on-execute``: an ``amps-action-do-execute-event`` raised ``event``.

    The run inherits the variables of the run that raised the event.
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_EVENT",)
    event: str
    where: str = ""
    module: str = "amps-action-on-execute"


# -- event triggers: an action that runs once per message or happening -------------------------

#: Where a message comes from: published on this instance (by a client or the broker) or
#: received over a replication link.
MessageSource = Literal["local", "replicated", "all"]
#: The states a replication link reports (server/replication/history.py), per direction.
LINK_STATES: Final[Mapping[str, tuple[str, ...]]] = {
    "out": (
        "connected", "disconnected", "refused", "downgraded", "upgrading", "upgraded",
        "reconnect", "tls_failed", "fence_skipped",
    ),
    "in": ("connected", "streaming", "sync", "disconnected"),
}  # fmt: skip
#: What a removed SOW record or an out-of-focus record gives a run.
_RECORD_VARIABLES: Final = ("AMPS_TOPIC", "AMPS_DATA", "AMPS_SOW_KEY", "AMPS_BOOKMARK")
_CLIENT_VARIABLES: Final = (
    "AMPS_CLIENT_NAME",
    "AMPS_CONNECTION_NAME",
    "AMPS_AUTHENTICATION_ID",
    "AMPS_REMOTE_ADDRESS",
    "AMPS_TRANSPORT_NAME",
)


@dataclass(frozen=True, slots=True)
class TopicMatch:
    """The topic an event trigger watches: one name, or a regular expression of names
    (``is_regex``: the text has a regex metacharacter; matched with ``re.search``, as the
    ``TransactionLog/Topic`` rules are)."""

    text: str
    is_regex: bool = False

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this trigger watches."""
        if self.is_regex:
            return re.search(self.text, topic) is not None
        return topic == self.text


@dataclass(frozen=True, slots=True)
class OnPublishMessage:
    """``amps-action-on-publish-message``: once per message published to ``topic``.

    Attributes:
        topic: the topics it watches.
        filter: only messages that match this filter (None: all).
        source: ``local`` (published on this instance, the default), ``replicated``
            (received over a link) or ``all``.
    """

    provides: ClassVar[tuple[str, ...]] = (
        "AMPS_TOPIC", "AMPS_DATA", "AMPS_DATA_LENGTH", "AMPS_BOOKMARK", "AMPS_CORRELATION_ID",
        "AMPS_CLIENT_NAME", "AMPS_SOW_KEY", "AMPS_TIMESTAMP", "AMPS_MESSAGE_SOURCE",
    )  # fmt: skip
    rate: ClassVar[Literal["message", "happening"]] = "message"
    topic: TopicMatch
    filter: str | None = None
    source: MessageSource = "local"
    where: str = ""
    module: str = "amps-action-on-publish-message"


@dataclass(frozen=True, slots=True)
class OnSowRemoval:
    """``amps-action-on-sow-delete-message`` (``reason`` ``deleted``) and
    ``amps-action-on-sow-expire-message`` (``expired``): once per SOW record removed.

    Attributes:
        reason: which removals fire it.
        topic: the SOW topics it watches.
        filter: only records whose last state matches (None: all).
        source: deletes made here (``local``), received over a link (``replicated``) or
            both (``all``); expirations are always local (each instance expires its own).
    """

    rate: ClassVar[Literal["message", "happening"]] = "message"
    reason: Literal["deleted", "expired"]
    topic: TopicMatch
    filter: str | None = None
    source: MessageSource = "local"
    where: str = ""
    module: str = "amps-action-on-sow-delete-message"

    @property
    def provides(self) -> tuple[str, ...]:
        """The record's variables; an expiration adds its reason (``time_limit``)."""
        extra = ("AMPS_REASON",) if self.reason == "expired" else ()
        return (*_RECORD_VARIABLES, "AMPS_DATA_LENGTH", *extra)


@dataclass(frozen=True, slots=True)
class OnOof:
    """``amps-action-on-oof-message``: a SOW record leaves the set its filter selects.

    Attributes:
        topic: the SOW topics it watches.
        filter: the set: records that match it (None: every record, so only removals
            take one out).
        reasons: ``match`` (an update makes it stop matching), ``deleted``, ``expired``.
    """

    provides: ClassVar[tuple[str, ...]] = (*_RECORD_VARIABLES, "AMPS_REASON")
    rate: ClassVar[Literal["message", "happening"]] = "message"
    topic: TopicMatch
    filter: str | None = None
    reasons: tuple[str, ...] = ("match", "deleted", "expired")
    where: str = ""
    module: str = "amps-action-on-oof-message"


@dataclass(frozen=True, slots=True)
class OnDeadLetter:
    """``spool-action-on-queue-dead-letter``: once per message a queue gives up on (on
    the instance that dead-lettered it).

    Attributes:
        queues: the queues it watches (each has a ``<DeadLetter>``).
        reasons: which removals fire it (a subset of the queues' dead-letter reasons).
        filter: only dead letters (the envelope) that match (None: all).
    """

    provides: ClassVar[tuple[str, ...]] = (
        "AMPS_TOPIC", "AMPS_DATA", "AMPS_QUEUE", "AMPS_REASON", "AMPS_BOOKMARK",
        "AMPS_CONSUMER", "AMPS_DELIVERIES",
    )  # fmt: skip
    rate: ClassVar[Literal["message", "happening"]] = "message"
    queues: tuple[str, ...]
    reasons: tuple[str, ...]
    filter: str | None = None
    where: str = ""
    module: str = "spool-action-on-queue-dead-letter"


@dataclass(frozen=True, slots=True)
class OnClient:
    """``amps-action-on-connect-client`` (``connected``), ``amps-action-on-disconnect-client``
    (``disconnected``) and ``spool-action-on-logon-client`` (``logged_on``).

    Attributes:
        event: the step in a connection's life that fires it.
        filter: over the happening as a document (``/client_name``, ``/cause``...).
        transports: only connections of these transports (empty: every client transport).
    """

    rate: ClassVar[Literal["message", "happening"]] = "happening"
    event: Literal["connected", "disconnected", "logged_on"]
    filter: str | None = None
    transports: tuple[str, ...] = ()
    where: str = ""
    module: str = "amps-action-on-connect-client"

    @property
    def provides(self) -> tuple[str, ...]:
        """The connection's variables; a disconnect adds why."""
        extra = ("AMPS_REASON", "AMPS_DISCONNECT_CAUSE") if self.event == "disconnected" else ()
        return (*_CLIENT_VARIABLES, *extra)


@dataclass(frozen=True, slots=True)
class OnLinkState:
    """``spool-action-on-link-state``, and the AMPS replication triggers as fixed
    selections of it (``amps-action-on-connect-replication``: ``out``, ``connected``...).

    Attributes:
        direction: ``out`` (destinations), ``in`` (sources) or ``both``.
        states: the link states that fire it (:data:`LINK_STATES`).
        links: only these links (empty: all of that direction).
        filter: over the happening as a document (``/link``, ``/state``, ``/detail``...).
    """

    provides: ClassVar[tuple[str, ...]] = (
        "AMPS_REPLICATION_PEER_NAME", "AMPS_LINK_NAME", "AMPS_LINK_DIRECTION",
        "AMPS_LINK_STATE", "AMPS_LINK_DETAIL", "AMPS_SYNC_TYPE",
    )  # fmt: skip
    rate: ClassVar[Literal["message", "happening"]] = "happening"
    direction: Literal["out", "in", "both"]
    states: tuple[str, ...]
    links: tuple[str, ...] = ()
    filter: str | None = None
    where: str = ""
    module: str = "spool-action-on-link-state"


EventTrigger = OnPublishMessage | OnSowRemoval | OnOof | OnDeadLetter | OnClient | OnLinkState
#: The classes of :data:`EventTrigger` (for ``isinstance``).
EVENT_TRIGGERS: Final = (OnPublishMessage, OnSowRemoval, OnOof, OnDeadLetter, OnClient, OnLinkState)

Trigger = OnSchedule | OnStartup | OnShutdown | OnAdmin | OnDiskUsage | OnExecute | EventTrigger


#: Where a step may run (its ``event_use``): ``any`` action, even once per message;
#: ``happening``: not per message (it changes the instance: a transport, a link, a queue),
#: but per client or link happening; ``never`` per event (maintenance: journals,
#: statistics, SOW files; or an action of its own: ``do-execute-event``).
EventUse = Literal["any", "happening", "never"]


# -- conditions (<If>) ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IfCondition:
    """``amps-action-if-condition``: a filter expression over the instance's metrics.

    ``expression`` may hold ``{{VARIABLE}}`` references, expanded before it is compiled.
    """

    provides: ClassVar[tuple[str, ...]] = ()
    event_use: ClassVar[EventUse] = "any"
    expression: Template
    where: str = ""
    module: str = "amps-action-if-condition"


@dataclass(frozen=True, slots=True)
class DiskThreshold:
    """One bound on a file system: used percent above / below, or free bytes below."""

    kind: Literal["above", "below", "free_below"]
    value: float

    def describe(self) -> str:
        if self.kind == "above":
            return f"used above {self.value:g}%"
        if self.kind == "below":
            return f"used below {self.value:g}%"
        return f"free below {format_size(int(self.value))}"


@dataclass(frozen=True, slots=True)
class IfDiskUsage:
    """``amps-action-if-disk-usage``: the file system holding ``path`` passes ``threshold``.

    ``label`` and ``path`` as in :class:`OnDiskUsage`.
    """

    provides: ClassVar[tuple[str, ...]] = DISK_VARIABLES
    event_use: ClassVar[EventUse] = "happening"
    label: str
    path: Path | None
    threshold: DiskThreshold
    where: str = ""
    module: str = "amps-action-if-disk-usage"


Condition = IfCondition | IfDiskUsage


# -- modules (<Do>) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JournalLimits:
    """Which journals a journal module acts on (at least one limit is set).

    A journal is *due* when its last record is older than ``age``, or when keeping it
    would leave more than ``count`` journals, or more than ``size`` bytes, of those the
    module could still act on (counting the active journal, which is never acted on).
    Journals are always taken oldest first and only as an unbroken run from the oldest.
    """

    age: float | None = None
    count: int | None = None
    size: int | None = None

    def describe(self) -> str:
        parts = []
        if self.age is not None:
            parts.append(f"older than {format_duration(self.age)}")
        if self.count is not None:
            parts.append(f"beyond the newest {self.count}")
        if self.size is not None:
            parts.append(f"beyond {format_size(self.size)}")
        return " or ".join(parts)


@dataclass(frozen=True, slots=True)
class ArchiveJournals:
    """``amps-action-do-archive-journal``: move due journals to the archive directory."""

    provides: ClassVar[tuple[str, ...]] = ("AMPS_JOURNALS_ARCHIVED",)
    event_use: ClassVar[EventUse] = "never"
    limits: JournalLimits
    where: str = ""
    module: str = "amps-action-do-archive-journal"


@dataclass(frozen=True, slots=True)
class CompressJournals:
    """``amps-action-do-compress-journal``: compress due journals (``zstd`` or ``gzip``)."""

    provides: ClassVar[tuple[str, ...]] = ("AMPS_JOURNALS_COMPRESSED",)
    event_use: ClassVar[EventUse] = "never"
    limits: JournalLimits
    method: Literal["zstd", "gzip"] = "zstd"
    where: str = ""
    module: str = "amps-action-do-compress-journal"


@dataclass(frozen=True, slots=True)
class RemoveJournals:
    """``amps-action-do-remove-journal``: delete due journals, oldest first."""

    provides: ClassVar[tuple[str, ...]] = ("AMPS_JOURNALS_REMOVED",)
    event_use: ClassVar[EventUse] = "never"
    limits: JournalLimits
    where: str = ""
    module: str = "amps-action-do-remove-journal"


JournalStep = ArchiveJournals | CompressJournals | RemoveJournals


@dataclass(frozen=True, slots=True)
class TruncateStatistics:
    """``amps-action-do-truncate-statistics``: delete stats samples older than ``age``."""

    provides: ClassVar[tuple[str, ...]] = ("AMPS_STATS_SAMPLES_DELETED",)
    event_use: ClassVar[EventUse] = "never"
    age: float
    where: str = ""
    module: str = "amps-action-do-truncate-statistics"


@dataclass(frozen=True, slots=True)
class SetTransport:
    """``amps-action-do-enable-transport`` / ``amps-action-do-disable-transport``."""

    provides: ClassVar[tuple[str, ...]] = ()
    event_use: ClassVar[EventUse] = "happening"
    transport: str
    enabled: bool
    where: str = ""
    module: str = "amps-action-do-enable-transport"


@dataclass(frozen=True, slots=True)
class DowngradeReplication:
    """``amps-action-do-downgrade-replication``: persisted acks stop waiting for a sync
    destination that is more than ``age`` seconds behind (its oldest unacknowledged
    record is older than that), unless ``Tuning/MinimumSyncDestinations`` forbids it.

    Attributes:
        age: how far behind a destination may fall before it is downgraded.
        destinations: the destinations it watches (``<Destination>``); empty: every
            destination configured sync.
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_DESTINATIONS_DOWNGRADED",)
    event_use: ClassVar[EventUse] = "happening"
    age: float
    destinations: tuple[str, ...] = ()
    where: str = ""
    module: str = "amps-action-do-downgrade-replication"


@dataclass(frozen=True, slots=True)
class UpgradeReplication:
    """``amps-action-do-upgrade-replication``: a downgraded destination that is connected
    and less than ``age`` seconds behind is upgraded (it becomes sync again once it has
    acknowledged what the log held when it was asked).

    Attributes:
        age: how close a destination must be before it is upgraded.
        destinations: as :class:`DowngradeReplication`'s.
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_DESTINATIONS_UPGRADED",)
    event_use: ClassVar[EventUse] = "happening"
    age: float
    destinations: tuple[str, ...] = ()
    where: str = ""
    module: str = "amps-action-do-upgrade-replication"


ReplicationStep = DowngradeReplication | UpgradeReplication


@dataclass(frozen=True, slots=True)
class PublishMessage:
    """``amps-action-do-publish-message``: publish ``data`` to ``topic`` as the broker.

    Both may hold ``{{VARIABLE}}`` references; ``data`` is a JSON body, expanded with
    :meth:`~spool.server.config.template.Template.expand_json` (values JSON-escaped inside
    strings, raw in value positions). ``correlation_id`` (a template too) is the message's correlation
    id (None: none; under an on-publish trigger, the source message's bookmark).
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_PUBLISHED_BOOKMARK",)
    event_use: ClassVar[EventUse] = "any"
    topic: Template
    data: Template
    message_type: str = "json"
    correlation_id: Template | None = None
    where: str = ""
    module: str = "amps-action-do-publish-message"


@dataclass(frozen=True, slots=True)
class ExecuteEvent:
    """``amps-action-do-execute-event``: raise ``event`` (runs the ``on-execute`` actions)."""

    provides: ClassVar[tuple[str, ...]] = ()
    event_use: ClassVar[EventUse] = "never"
    event: str
    where: str = ""
    module: str = "amps-action-do-execute-event"


@dataclass(frozen=True, slots=True)
class SetProxiedTransfer:
    """``amps-action-do-enable-proxied-transfer`` / ``...-disable-proxied-transfer``: let
    this instance take over the messages of replicated queues whose owner is offline (or
    stop), as ``POST /api/queues/{name}/enable_proxied_transfer`` does.

    Attributes:
        queues: the replicated queues it switches (``<Queue>`` options; none given:
            every replicated queue of the instance, resolved when the file is read).
        enabled: enable or disable.
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_PROXIED_TRANSFER_TAKEN",)
    event_use: ClassVar[EventUse] = "happening"
    queues: tuple[str, ...]
    enabled: bool
    where: str = ""
    module: str = "amps-action-do-enable-proxied-transfer"


@dataclass(frozen=True, slots=True)
class RedriveDeadLetters:
    """``spool-action-do-redrive-dead-letters``: send a queue's dead letters back, as
    ``POST /api/queues/{name}/redrive`` does (docs/queues.md "Redrive").

    Attributes:
        queue: the queue (it has a ``<DeadLetter>``).
        filter: which dead letters (None: all not sent back yet).
        limit: at most this many per run.
        target: where they go (None: each to its original topic).
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_DEAD_LETTERS_REDRIVEN",)
    event_use: ClassVar[EventUse] = "happening"
    queue: str
    filter: str | None
    limit: int
    target: str | None
    where: str = ""
    module: str = "spool-action-do-redrive-dead-letters"


@dataclass(frozen=True, slots=True)
class Shutdown:
    """``amps-action-do-shutdown``: stop the instance gracefully (as SIGTERM does)."""

    provides: ClassVar[tuple[str, ...]] = ()
    event_use: ClassVar[EventUse] = "happening"
    where: str = ""
    module: str = "amps-action-do-shutdown"


@dataclass(frozen=True, slots=True)
class DeleteSow:
    """``amps-action-do-delete-sow``: delete records of a SOW topic, those that match
    ``filter`` or the one whose key is ``key`` (exactly one of the two is set).

    All three are templates. ``AMPS_SOW_DELETED`` is how many records went.
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_SOW_DELETED",)
    event_use: ClassVar[EventUse] = "any"
    topic: Template
    filter: Template | None = None
    key: Template | None = None
    where: str = ""
    module: str = "amps-action-do-delete-sow"


@dataclass(frozen=True, slots=True)
class CompactSow:
    """``spool-action-do-compact-sow``: rewrite the files of persistent SOW topics without
    their dead space. ``AMPS_SOW_COMPACTED`` is how many topics were compacted.

    Attributes:
        topics: the topics (or the SOW rules' regular expressions) it compacts; empty:
            every persistent one.
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_SOW_COMPACTED",)
    event_use: ClassVar[EventUse] = "never"
    topics: tuple[str, ...] = ()
    where: str = ""
    module: str = "spool-action-do-compact-sow"


@dataclass(frozen=True, slots=True)
class EchoMessage:
    """``amps-action-do-echo-message``: write ``message`` (a template) to the event log.

    Attributes:
        level: the event's level.
        max_per_second: at most this many lines a second for this step; the rest are
            counted, and told of in one line.
    """

    provides: ClassVar[tuple[str, ...]] = ()
    event_use: ClassVar[EventUse] = "any"
    message: Template
    level: Literal["info", "warning", "error"] = "info"
    max_per_second: int = 100
    where: str = ""
    module: str = "amps-action-do-echo-message"


@dataclass(frozen=True, slots=True)
class ExtractValues:
    """``amps-action-do-extract-values``: set variables from expressions over the message
    that fired the run (or over ``data``, a JSON template, when given).

    Attributes:
        values: (variable name, value expression) in file order; each expression
            compiles (the filter language's value expressions, docs/filters.md).
    """

    event_use: ClassVar[EventUse] = "any"
    values: tuple[tuple[str, str], ...]
    data: Template | None = None
    where: str = ""
    module: str = "amps-action-do-extract-values"

    @property
    def provides(self) -> tuple[str, ...]:
        """The variables it sets."""
        return tuple(name for name, _ in self.values)


#: headers each webhook post carries already (from other options, or always): neither a
#: ``Header`` option nor the sender's caller may give them
WEBHOOK_SPOOL_HEADERS: Final = frozenset({
    "content-type", "content-length", "host", "user-agent", "transfer-encoding",
    "connection", "spool-event-id", "spool-action", "spool-signature",
})  # fmt: skip
#: the shortest and the longest ``Timeout`` of a webhook (seconds)
WEBHOOK_TIMEOUT_RANGE: Final = (0.1, 60.0)
#: the most ``Retries`` of a webhook
WEBHOOK_MAX_RETRIES: Final = 10
#: the most posts of one webhook step in flight at once (``Concurrency``)
WEBHOOK_MAX_CONCURRENCY: Final = 16


@dataclass(frozen=True, slots=True)
class Webhook:
    """``spool-action-do-webhook``: POST ``body`` to ``url``.

    The scheme, host and port of ``url`` are written out (templates only in its path and
    query) and lie under a ``<Webhooks><Allow>`` prefix. Header values and the signing
    key are secrets: never shown (``repr`` leaves them out; descriptions name headers only).

    Attributes:
        url: where it posts.
        body: what it posts.
        content_type: the ``Content-Type`` header.
        headers: (name, value template) sent with each post.
        signing_key: when set, each post carries ``Spool-Signature: sha256=...``, the
            HMAC-SHA256 of the body with this key.
        timeout: seconds one attempt may take.
        retries: further attempts after a connection error, a timeout, 429 or 5xx.
        backoff: seconds before the first retry (doubling after each).
        concurrency: posts of this step in flight at once (1: in order).
    """

    provides: ClassVar[tuple[str, ...]] = ("AMPS_WEBHOOK_STATUS",)
    event_use: ClassVar[EventUse] = "any"
    url: Template
    body: Template
    content_type: str = "application/json"
    headers: tuple[tuple[str, Template], ...] = field(default=(), repr=False)
    signing_key: str | None = field(default=None, repr=False)
    timeout: float = 5.0
    retries: int = 3
    backoff: float = 1.0
    concurrency: int = 1
    where: str = ""
    module: str = "spool-action-do-webhook"


@dataclass(frozen=True, slots=True)
class WebhooksConfig:
    """``<Actions><Webhooks>``: where webhook modules may post, and how many posts wait.

    Attributes:
        allow: URL prefixes (``https://hooks.example.com/spool/``), normalised: scheme
            and host in lower case, default port left out, dot segments resolved. A
            webhook's URL is under one, scheme included (``http`` only under an
            ``http://`` entry).
        threads: threads that post (connects, TLS, reads happen there).
        queue_depth: posts waiting on the instance at most; past it a post fails.
    """

    allow: tuple[str, ...] = ()
    threads: int = 4
    queue_depth: int = 10_000


DoStep = (
    ArchiveJournals
    | CompressJournals
    | RemoveJournals
    | TruncateStatistics
    | SetTransport
    | DowngradeReplication
    | UpgradeReplication
    | PublishMessage
    | ExecuteEvent
    | SetProxiedTransfer
    | RedriveDeadLetters
    | Shutdown
    | DeleteSow
    | CompactSow
    | EchoMessage
    | ExtractValues
    | Webhook
)
Step = Condition | DoStep


@dataclass(frozen=True, slots=True)
class ActionConfig:
    """One ``<Action>``.

    Attributes:
        name: unique among the actions; ``POST /api/actions/NAME`` runs an on-admin one.
        triggers: when it runs (one or more ``<On>``).
        steps: conditions and modules, in file order.
        where: the path of its element.
    """

    name: str
    triggers: tuple[Trigger, ...]
    steps: tuple[Step, ...]
    where: str = ""

    def trigger_of(self, kind: type[Trigger]) -> Trigger | None:
        """The first trigger of that class, or None."""
        return next((t for t in self.triggers if isinstance(t, kind)), None)

    @property
    def event_driven(self) -> bool:
        """Whether it runs once per message or happening (all its triggers are event
        triggers: the loader refuses one mixed with a schedule, start-up, admin...)."""
        return all(isinstance(t, EVENT_TRIGGERS) for t in self.triggers)


#: Trigger module names this version reads (and runs).
TRIGGER_MODULES: Final = (
    "amps-action-on-schedule",
    "amps-action-on-startup",
    "amps-action-on-shutdown",
    "amps-action-on-admin",
    "amps-action-on-disk-usage",
    "amps-action-on-execute",
    "amps-action-on-publish-message",
    "amps-action-on-sow-delete-message",
    "amps-action-on-sow-expire-message",
    "amps-action-on-oof-message",
    "spool-action-on-queue-dead-letter",
    "amps-action-on-connect-client",
    "amps-action-on-disconnect-client",
    "spool-action-on-logon-client",
    "amps-action-on-connect-replication",
    "amps-action-on-disconnect-replication",
    "amps-action-on-downgrade-replication",
    "amps-action-on-upgrade-replication",
    "amps-action-on-connect-incoming-replication",
    "amps-action-on-disconnect-incoming-replication",
    "spool-action-on-link-state",
)
#: Condition module names this version has.
CONDITION_MODULES: Final = ("amps-action-if-condition", "amps-action-if-disk-usage")
#: Do module names this version reads (as for the triggers).
ACTION_MODULES: Final = (
    "amps-action-do-archive-journal",
    "amps-action-do-compress-journal",
    "amps-action-do-remove-journal",
    "amps-action-do-truncate-statistics",
    "amps-action-do-enable-transport",
    "amps-action-do-disable-transport",
    "amps-action-do-downgrade-replication",
    "amps-action-do-upgrade-replication",
    "amps-action-do-publish-message",
    "amps-action-do-execute-event",
    "amps-action-do-enable-proxied-transfer",
    "amps-action-do-disable-proxied-transfer",
    "amps-action-do-shutdown",
    "spool-action-do-redrive-dead-letters",
    "amps-action-do-delete-sow",
    "spool-action-do-compact-sow",
    "amps-action-do-echo-message",
    "amps-action-do-extract-values",
    "spool-action-do-webhook",
)
