"""Configured triggers and steps in words, for the admin API and the dashboard."""

from __future__ import annotations

from typing import Final

from spool.server.config import (
    ArchiveJournals,
    CompactSow,
    CompressJournals,
    DeleteSow,
    DowngradeReplication,
    EchoMessage,
    ExecuteEvent,
    ExtractValues,
    IfCondition,
    IfDiskUsage,
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
    SetProxiedTransfer,
    SetTransport,
    Shutdown,
    Step,
    Trigger,
    TruncateStatistics,
    UpgradeReplication,
    Webhook,
    redact_url,
)
from spool.server.units import format_duration

__all__ = ["describe_step", "describe_trigger"]


def describe_trigger(trigger: Trigger) -> str:
    """A trigger in words."""
    match trigger:
        case OnSchedule():
            return trigger.schedule.describe()
        case OnStartup():
            return "at start-up, before clients are served"
        case OnShutdown():
            return "when shutdown begins"
        case OnAdmin():
            return "on demand (POST /api/actions/NAME, the dashboard)"
        case OnDiskUsage():
            return f"{trigger.label} file system above {trigger.above:g}% used"
        case OnExecute():
            return f"event {trigger.event}"
        case OnPublishMessage():
            return (f"each message published to {trigger.topic.text}{_where(trigger.filter)}"
                    f"{_source(trigger.source)}")  # fmt: skip
        case OnSowRemoval():
            return (f"each SOW record {trigger.reason} from {trigger.topic.text}"
                    f"{_where(trigger.filter)}{_source(trigger.source)}")  # fmt: skip
        case OnOof():
            return (f"each record of {trigger.topic.text} out of focus"
                    f"{_where(trigger.filter)} ({', '.join(trigger.reasons)})")  # fmt: skip
        case OnDeadLetter():
            return (f"each dead letter of {_plural('queue', trigger.queues)} "
                    f"({', '.join(trigger.reasons)}){_where(trigger.filter)}")  # fmt: skip
        case OnClient():
            what = _CLIENT_EVENTS[trigger.event]
            on = f" on {_plural('transport', trigger.transports)}" if trigger.transports else ""
            return f"each client {what}{on}{_where(trigger.filter)}"
        case OnLinkState():
            links = (_plural("link", trigger.links) if trigger.links
                     else _LINK_DIRECTIONS[trigger.direction])  # fmt: skip
            return f"{', '.join(trigger.states)} of {links}{_where(trigger.filter)}"
    return ""


_CLIENT_EVENTS: Final = {"connected": "connection", "logged_on": "logon",
                         "disconnected": "disconnection"}  # fmt: skip
_LINK_DIRECTIONS: Final = {"out": "links to destinations", "in": "links from sources",
                           "both": "replication links"}  # fmt: skip


def _where(flt: str | None) -> str:
    return f" where {flt}" if flt is not None else ""


def _source(source: str) -> str:
    return "" if source == "local" else f" ({source} messages)"


def _plural(noun: str, names: tuple[str, ...]) -> str:
    return f"{noun}{'s' if len(names) > 1 else ''} {', '.join(names)}"


def describe_step(step: Step) -> str:
    """A step in words: what it checks or does, with its options."""
    match step:
        case IfCondition():
            return f"if {step.expression.text}"
        case IfDiskUsage():
            return f"if {step.label} {step.threshold.describe()}"
        case ArchiveJournals():
            return f"archive journals {step.limits.describe()}"
        case CompressJournals():
            return f"compress ({step.method}) journals {step.limits.describe()}"
        case RemoveJournals():
            return f"remove journals {step.limits.describe()}"
        case TruncateStatistics():
            return f"delete statistics older than {format_duration(step.age)}"
        case SetTransport():
            return f"{'enable' if step.enabled else 'disable'} transport {step.transport}"
        case DowngradeReplication():
            return (
                f"downgrade {_destinations(step.destinations)} more than "
                f"{format_duration(step.age)} behind"
            )
        case UpgradeReplication():
            return (
                f"upgrade downgraded {_destinations(step.destinations)} less than "
                f"{format_duration(step.age)} behind"
            )
        case PublishMessage():
            return f"publish to {step.topic.text}"
        case ExecuteEvent():
            return f"raise event {step.event}"
        case SetProxiedTransfer():
            return (f"{'enable' if step.enabled else 'disable'} proxied transfer of "
                    f"queue{'s' if len(step.queues) > 1 else ''} {', '.join(step.queues)}")  # fmt: skip
        case RedriveDeadLetters():
            return f"redrive dead letters of queue {step.queue}"
        case Shutdown():
            return "shut the instance down"
        case DeleteSow():
            which = (f"where {step.filter.text}" if step.filter is not None
                     else f"with key {step.key.text if step.key is not None else ''}")  # fmt: skip
            return f"delete SOW records of {step.topic.text} {which}"
        case CompactSow():
            if not step.topics:
                return "compact every persistent SOW topic"
            return f"compact SOW {_plural('topic', step.topics)}"
        case EchoMessage():
            return (f"echo ({step.level}, at most {step.max_per_second}/s): "
                    f"{step.message.text}")  # fmt: skip
        case ExtractValues():
            source = f" from {step.data.text}" if step.data is not None else ""
            return f"extract {', '.join(step.provides)}{source}"
        case Webhook():
            # header values and the signing key are secrets, the query may hold a token
            extra = [_plural("header", tuple(n for n, _ in step.headers))] if step.headers else []
            if step.signing_key is not None:
                extra.append("signed")
            more = f" ({', '.join(extra)})" if extra else ""
            return f"post to {redact_url(step.url.text)}{more}"
    return ""


def _destinations(names: tuple[str, ...]) -> str:
    if not names:
        return "sync destinations"
    return f"destination{'s' if len(names) > 1 else ''} {', '.join(names)}"
