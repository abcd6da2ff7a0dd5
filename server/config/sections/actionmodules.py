"""The ``<Options>`` of each action module: one reader per module, each returning its model.

:mod:`spool.server.config.sections.actions` reads the shape of an action and hands every
``<On>``, ``<If>`` and ``<Do>`` to the reader of its ``<Module>`` here, with the facts of
the other sections an option is checked against (:class:`ActionFacts`: the transports, the
transaction log, the instance's directories) and the variables defined at that point of the
action (:class:`ActionScope`), so a ``{{VARIABLE}}`` no trigger or earlier module defines is an
error at the option that uses it.

A module that this version does not run is refused with "not supported yet" naming the
element, never accepted and ignored (:data:`UNSUPPORTED_MODULES`; docs/actions.md "Against
the AMPS modules" lists each with its status). A module not run that has a reader here
is read and checked in full before the action is refused.
The event triggers are read by :mod:`spool.server.config.sections.actiontriggers`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import orjson

from spool.server.config.actions import (
    ActionParameter,
    ArchiveJournals,
    CompactSow,
    CompressJournals,
    DeleteSow,
    DiskThreshold,
    DowngradeReplication,
    EchoMessage,
    ExecuteEvent,
    ExtractValues,
    IfCondition,
    IfDiskUsage,
    JournalLimits,
    OnAdmin,
    OnDiskUsage,
    OnExecute,
    OnSchedule,
    OnShutdown,
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
)
from spool.server.config.model import MESSAGE_TYPES, REDRIVE_MAX, SowTopicConfig
from spool.server.config.schedule import ScheduleError, check_zone, parse_every
from spool.server.config.template import Template, TemplateError, is_byte_variable
from spool.server.config.values import (
    DAY,
    Context,
    read_choice,
    read_duration,
    read_expression,
    read_int,
    read_name,
    read_path,
    read_regex,
    read_size,
    read_value,
)
from spool.server.config.xmltree import Children, Spec, XmlNode, fail
from spool.server.expr import FilterSyntaxError, compile_filter, compile_value
from spool.server.protocol.topic import is_regex_topic

__all__ = [
    "CONDITION_READERS",
    "DO_READERS",
    "TRIGGER_READERS",
    "UNSUPPORTED_MODULES",
    "ActionFacts",
    "ActionScope",
    "Options",
    "StepReader",
    "TriggerReader",
    "sow_rule",
]

_MESSAGE_TRIGGERS: Final = "message-driven triggers"
_CLIENT_TRIGGERS: Final = "client-driven triggers"
_LINK_TRIGGERS: Final = "replication link triggers"

#: Modules this version does not run, with what they belong to. One with a reader is read
#: and checked in full, then the action is refused naming the module (so a file written
#: for the release that runs it is checked now); the others are refused at their
#: ``<Module>``. Each entry goes when the module runs.
UNSUPPORTED_MODULES: Final[Mapping[str, str]] = {
    "amps-action-on-deliver-message": _MESSAGE_TRIGGERS,
    "amps-action-on-message-condition-timeout": _MESSAGE_TRIGGERS,
    "amps-action-on-subscribe": _CLIENT_TRIGGERS,
    "amps-action-on-unsubscribe": _CLIENT_TRIGGERS,
    "amps-action-on-replication-resync-complete": _LINK_TRIGGERS,
    "amps-action-do-query-sow": "SOW queries from actions",
}

_PARAMETER_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PERCENT: Final = re.compile(r"(\d{1,2}(?:\.\d+)?)\s*%?")
_TOPIC_MAX: Final = 1024


@dataclass(frozen=True, slots=True)
class ActionFacts:
    """What the options of an action are checked against (the other sections).

    Attributes:
        transports: the configured transport names.
        has_txlog: a ``<TransactionLog>`` is configured.
        directories: the names of the instance's directories a disk module may watch
            (``data``, ``stats``, and ``journal``, ``archive`` with a transaction log).
        destinations: the replication destinations, name -> configured sync.
        replicated_queues: the queues whose messages have owners on several instances
            (a ``Queue`` or ``GroupLocalQueue`` of an instance that replicates).
        queues: every configured queue.
        dead_letter_reasons: the queues with a ``<DeadLetter>``, each with the removals
            that make a dead letter (:attr:`dead_letter_queues` are its keys).
        client_transports: the transports clients connect to (``websocket``).
        sow_topics: the ``<SOW><Topic>`` rules (the SOW triggers and modules name one).
        replicates: the instance has links (``<Replication>`` or an ``amps-replication``
            transport): replicated messages may arrive, link triggers can fire.
        event_topics: the event topics turned on (``<EventTopics>``).
        webhook_allow: the URL prefixes webhooks may post to (``<Actions><Webhooks>``).
    """

    transports: tuple[str, ...]
    has_txlog: bool
    directories: tuple[str, ...]
    destinations: Mapping[str, bool] = field(default_factory=dict)
    replicated_queues: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    dead_letter_reasons: Mapping[str, frozenset[str]] = field(default_factory=dict)
    client_transports: tuple[str, ...] = ()
    sow_topics: tuple[SowTopicConfig, ...] = ()
    replicates: bool = False
    event_topics: frozenset[str] = frozenset()
    webhook_allow: tuple[str, ...] = ()

    @property
    def dead_letter_queues(self) -> tuple[str, ...]:
        """The queues with a ``<DeadLetter>``, in configuration order."""
        return tuple(self.dead_letter_reasons)


class ActionScope:
    """The variables defined at a point of an action (None: not checked, see below).

    An action raised by an event inherits the raiser's variables, which the loader cannot
    know: its references are not checked. ``withheld`` are names no step may add here
    (``AMPS_PUBLISHED_BOOKMARK`` in an action run by a happening: it publishes without
    waiting for the transaction log, so it has no bookmark to give; ``AMPS_WEBHOOK_STATUS``
    in any event action: its posts are queued, not waited for).
    """

    def __init__(self, names: set[str] | None, withheld: frozenset[str] = frozenset()) -> None:
        self.names = names
        self.withheld = withheld

    def add(self, names: tuple[str, ...]) -> None:
        if self.names is not None:
            self.names.update(n for n in names if n not in self.withheld)

    def template(self, node: XmlNode, ctx: Context) -> Template:
        """The value of ``node`` as a template whose references are all defined."""
        return self.parse(node, read_value(node, ctx))

    def parse(self, node: XmlNode, text: str) -> Template:
        """``text`` (a part of the value of ``node``) as a template whose references are
        all defined; an error names ``node``."""
        try:
            template = Template.parse(text)
        except TemplateError as exc:
            raise fail(node, str(exc)) from None
        if self.names is None:
            return template
        for name in template.variables:
            if name not in self.names and not is_byte_variable(name):
                known = ", ".join(sorted(self.names))
                raise fail(
                    node,
                    f"unknown variable {{{{{name}}}}}: nothing defines it at this point of the "
                    f"action (defined here: {known})",
                )
        return template


class Options:
    """The ``<Options>`` of an ``On``/``If``/``Do`` element (absent = no options)."""

    def __init__(self, element: XmlNode, options: XmlNode | None, spec: Spec, name: str) -> None:
        self.element = element
        self.node = options
        if options is None:
            self.kids: Children | None = None
            return
        if not spec and (options.children or "".join(options.text).strip()):
            raise fail(options, f"{name} takes no options; remove <Options>")
        self.kids = Children(options, spec)

    def one(self, tag: str) -> XmlNode | None:
        return self.kids.one(tag) if self.kids is not None else None

    def many(self, tag: str) -> list[XmlNode]:
        return self.kids.many(tag) if self.kids is not None else []

    def require(self, tag: str, name: str, why: str = "") -> XmlNode:
        node = self.one(tag)
        if node is None:
            where = self.node if self.node is not None else self.element
            raise fail(where, f"{name} needs the option <{tag}>{why}")
        return node


StepReader = Callable[[XmlNode, XmlNode | None, Context, ActionFacts, ActionScope], Step]
TriggerReader = Callable[[XmlNode, XmlNode | None, Context, ActionFacts], Trigger]


# -- shared values --------------------------------------------------------------------------


def _percent(node: XmlNode, ctx: Context) -> float:
    value = read_value(node, ctx)
    match = _PERCENT.fullmatch(value)
    number = float(match.group(1)) if match else -1.0
    if not 0 < number < 100:
        raise fail(node, f"{value!r} is not a percentage between 0 and 100 (e.g. 80%)")
    return number


def _disk_path(node: XmlNode, ctx: Context, facts: ActionFacts) -> tuple[str, Path | None]:
    """A directory of the instance (journal, archive, data, stats: no path), or a path."""
    value = read_value(node, ctx)
    if value in facts.directories:
        return value, None
    if "/" not in value:
        labels = ", ".join(facts.directories)
        extra = "" if facts.has_txlog else " (journal and archive need a <TransactionLog>)"
        raise fail(node, f"{value!r} is neither a directory of the instance ({labels}){extra} "
                   "nor a path")  # fmt: skip
    path = read_path(node, ctx)
    return str(path), path


# -- triggers -------------------------------------------------------------------------------


def _on_schedule(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    name = "amps-action-on-schedule"
    opts = Options(element, options, {"Every": False, "TimeZone": False}, name)
    every = opts.require("Every", name, " (15m, Daily 02:00, Weekly Sun 03:00)")
    zone: str | None = None
    if (zone_node := opts.one("TimeZone")) is not None:
        try:
            zone = check_zone(read_value(zone_node, ctx))
        except ScheduleError as exc:
            raise fail(zone_node, str(exc)) from None
    try:
        schedule = parse_every(read_value(every, ctx), zone)
    except ScheduleError as exc:
        raise fail(every, f"bad schedule: {exc}") from None
    return OnSchedule(schedule, where=element.path)


def _on_startup(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    Options(element, options, {}, "amps-action-on-startup")
    return OnStartup(where=element.path)


def _on_shutdown(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    Options(element, options, {}, "amps-action-on-shutdown")
    return OnShutdown(where=element.path)


def _parameter(node: XmlNode, ctx: Context) -> ActionParameter:
    kids = Children(node, {"Name": False, "Default": False, "Pattern": False, "Description": False})
    name_node = kids.require("Name")
    name = read_value(name_node, ctx)
    if not _PARAMETER_NAME.fullmatch(name) or name.upper().startswith("AMPS_"):
        raise fail(
            name_node,
            f"{name!r} is not a parameter name: 1 to 64 letters, digits and _, not starting "
            "with a digit nor with AMPS_ (reserved for the broker's variables)",
        )
    pattern = None
    if (pattern_node := kids.one("Pattern")) is not None:
        pattern = read_regex(pattern_node, ctx)
    default = None
    if (default_node := kids.one("Default")) is not None:
        # a default may be empty: <Default></Default> means "nothing"
        default = "".join(default_node.text).strip()
        if pattern is not None and re.fullmatch(pattern, default) is None:
            raise fail(
                default_node, f"the default {default!r} does not match the Pattern {pattern!r}"
            )
    description = ""
    if (description_node := kids.one("Description")) is not None:
        description = read_value(description_node, ctx)
    return ActionParameter(name, default, pattern, description)


def _on_admin(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    opts = Options(element, options, {"Parameter": True}, "amps-action-on-admin")
    parameters: list[ActionParameter] = []
    first: dict[str, int] = {}
    for node in opts.many("Parameter"):
        parameter = _parameter(node, ctx)
        if parameter.name in first:
            raise fail(
                node,
                f"duplicate parameter {parameter.name!r} (first at line {first[parameter.name]})",
            )
        first[parameter.name] = node.line
        parameters.append(parameter)
    return OnAdmin(tuple(parameters), where=element.path)


def _on_disk_usage(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    name = "amps-action-on-disk-usage"
    spec: Spec = {"Path": False, "Above": False, "Interval": False, "Repeat": False}
    opts = Options(element, options, spec, name)
    label, path = _disk_path(
        opts.require("Path", name, " (journal, archive, data, stats)"), ctx, facts
    )
    above = _percent(opts.require("Above", name, " (a used percentage, e.g. 80%)"), ctx)
    interval = 60.0
    if (interval_node := opts.one("Interval")) is not None:
        interval = read_duration(interval_node, ctx, minimum=1.0, maximum=DAY)
    repeat = None
    if (repeat_node := opts.one("Repeat")) is not None:
        repeat = read_duration(repeat_node, ctx, minimum=1.0, maximum=30 * DAY)
        if repeat < interval:
            raise fail(
                repeat_node, "Repeat cannot be shorter than Interval (checks happen every Interval)"
            )
    return OnDiskUsage(label, path, above, interval, repeat, where=element.path)


def _on_execute(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts
) -> Trigger:
    opts = Options(element, options, {"Event": False}, "amps-action-on-execute")
    event = read_name(opts.require("Event", "amps-action-on-execute"), ctx, "event name")
    return OnExecute(event, where=element.path)


TRIGGER_READERS: Final[Mapping[str, TriggerReader]] = {
    "amps-action-on-schedule": _on_schedule,
    "amps-action-on-startup": _on_startup,
    "amps-action-on-shutdown": _on_shutdown,
    "amps-action-on-admin": _on_admin,
    "amps-action-on-disk-usage": _on_disk_usage,
    "amps-action-on-execute": _on_execute,
}


# -- conditions -----------------------------------------------------------------------------


def _if_condition(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-if-condition"
    opts = Options(element, options, {"Condition": False}, name)
    node = opts.require("Condition", name, " (a filter over the metrics, e.g. /txlog/bytes > 1e9)")
    template = scope.template(node, ctx)
    # compile it as it will run (references as a number) so a syntax error shows at load
    probe = template.expand({}, lambda _: "0") if not template.constant else template.text
    try:
        compile_filter(probe)
    except FilterSyntaxError as exc:
        raise fail(node, f"bad condition: {exc}") from None
    return IfCondition(template, where=element.path)


def _if_disk_usage(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-if-disk-usage"
    spec: Spec = {"Path": False, "Above": False, "Below": False, "FreeBelow": False}
    opts = Options(element, options, spec, name)
    label, path = _disk_path(
        opts.require("Path", name, " (journal, archive, data, stats)"), ctx, facts
    )
    given = [tag for tag in ("Above", "Below", "FreeBelow") if opts.one(tag) is not None]
    if len(given) != 1:
        where = opts.node if opts.node is not None else element
        raise fail(where, f"{name} needs exactly one of <Above>, <Below> (used percent) or "
                   f"<FreeBelow> (a size); got {', '.join(given) or 'none'}")  # fmt: skip
    node = opts.require(given[0], name)
    if given[0] == "FreeBelow":
        threshold = DiskThreshold(
            "free_below", float(read_size(node, ctx, minimum=1, maximum=1024**5))
        )
    else:
        threshold = DiskThreshold("above" if given[0] == "Above" else "below", _percent(node, ctx))
    return IfDiskUsage(label, path, threshold, where=element.path)


CONDITION_READERS: Final[Mapping[str, StepReader]] = {
    "amps-action-if-condition": _if_condition,
    "amps-action-if-disk-usage": _if_disk_usage,
}


# -- modules --------------------------------------------------------------------------------


def _limits(name: str, opts: Options, ctx: Context) -> JournalLimits:
    age = count = size = None
    if (age_node := opts.one("Age")) is not None:
        age = read_duration(age_node, ctx, minimum=1e-3, maximum=3650 * DAY, zero_ok=True)
    if (count_node := opts.one("Count")) is not None:
        count = read_int(count_node, ctx, minimum=0, maximum=10_000_000)
    if (size_node := opts.one("Size")) is not None:
        size = read_size(size_node, ctx, minimum=1, maximum=1024**5, zero_ok=True)
    if age is None and count is None and size is None:
        where = opts.node if opts.node is not None else opts.element
        raise fail(
            where,
            f"{name} needs <Age> (journals older than that), <Count> (keep the newest N) or "
            "<Size> (keep the newest journals up to that size), or several",
        )
    return JournalLimits(age, count, size)


def _needs_txlog(element: XmlNode, name: str, facts: ActionFacts) -> None:
    if not facts.has_txlog:
        raise fail(element, f"{name} acts on the transaction log's journals: configure a "
                   "<TransactionLog>, or remove this module")  # fmt: skip


_LIMITS: Final[Spec] = {"Age": False, "Count": False, "Size": False}


def _archive(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-do-archive-journal"
    _needs_txlog(element, name, facts)
    opts = Options(element, options, _LIMITS, name)
    return ArchiveJournals(_limits(name, opts, ctx), where=element.path)


def _compress(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-do-compress-journal"
    _needs_txlog(element, name, facts)
    opts = Options(element, options, {**_LIMITS, "Method": False}, name)
    limits = _limits(name, opts, ctx)
    method_node = opts.one("Method")
    if (
        method_node is not None
        and read_choice(method_node, ctx, ("zstd", "gzip"), "compression Method") == "gzip"
    ):
        return CompressJournals(limits, "gzip", where=element.path)
    return CompressJournals(limits, "zstd", where=element.path)


def _remove(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-do-remove-journal"
    _needs_txlog(element, name, facts)
    opts = Options(element, options, _LIMITS, name)
    return RemoveJournals(_limits(name, opts, ctx), where=element.path)


def _truncate(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-do-truncate-statistics"
    opts = Options(element, options, {"Age": False}, name)
    age = read_duration(opts.require("Age", name, " (samples older than that go)"), ctx,
                        minimum=1.0, maximum=3650 * DAY)  # fmt: skip
    return TruncateStatistics(age, where=element.path)


def _transport(enabled: bool) -> StepReader:
    name = f"amps-action-do-{'enable' if enabled else 'disable'}-transport"

    def reader(
        element: XmlNode,
        options: XmlNode | None,
        ctx: Context,
        facts: ActionFacts,
        scope: ActionScope,
    ) -> Step:
        opts = Options(element, options, {"Transport": False}, name)
        node = opts.require("Transport", name, " (a transport's <Name>)")
        transport = read_value(node, ctx)
        if transport not in facts.transports:
            raise fail(node, f"no transport named {transport!r} (configured: "
                       f"{', '.join(facts.transports)})")  # fmt: skip
        return SetTransport(transport, enabled, where=element.path, module=name)

    return reader


def _replication(downgrade: bool) -> StepReader:
    verb = "downgrade" if downgrade else "upgrade"
    name = f"amps-action-do-{verb}-replication"
    why = (
        " (seconds behind past which persisted acks stop waiting for a destination)"
        if downgrade
        else " (seconds behind under which a downgraded destination is upgraded)"
    )

    def reader(
        element: XmlNode,
        options: XmlNode | None,
        ctx: Context,
        facts: ActionFacts,
        scope: ActionScope,
    ) -> Step:
        sync = [d for d, is_sync in facts.destinations.items() if is_sync]
        if not sync:
            what = (
                "no <Replication> <Destination> is configured"
                if not facts.destinations
                else "no <Destination> has <SyncType>sync</SyncType>"
            )
            raise fail(element, f"{name} changes the sync type of sync replication "
                       f"destinations, and {what}; remove this module")  # fmt: skip
        opts = Options(element, options, {"Age": False, "Destination": True}, name)
        age = read_duration(opts.require("Age", name, why), ctx, minimum=1e-3,
                            maximum=3650 * DAY)  # fmt: skip
        chosen: list[str] = []
        for node in opts.many("Destination"):
            dest = read_value(node, ctx)
            if dest not in facts.destinations:
                raise fail(node, f"no replication destination named {dest!r} (configured: "
                           f"{', '.join(facts.destinations)})")  # fmt: skip
            if not facts.destinations[dest]:
                raise fail(node, f"destination {dest!r} is configured async: only a "
                           "destination with <SyncType>sync</SyncType> can be downgraded "
                           "and upgraded")  # fmt: skip
            if dest in chosen:
                raise fail(node, f"destination {dest!r} is named twice")
            chosen.append(dest)
        if downgrade:
            return DowngradeReplication(age, tuple(chosen), where=element.path)
        return UpgradeReplication(age, tuple(chosen), where=element.path)

    return reader


def _proxied(enabled: bool) -> StepReader:
    name = f"amps-action-do-{'enable' if enabled else 'disable'}-proxied-transfer"

    def reader(
        element: XmlNode,
        options: XmlNode | None,
        ctx: Context,
        facts: ActionFacts,
        scope: ActionScope,
    ) -> Step:
        if not facts.replicated_queues:
            raise fail(element, f"{name} switches proxied transfer of replicated queues, and "
                       "this instance has none (a <Queue> or <GroupLocalQueue> of an instance "
                       "with <Replication>); remove this module")  # fmt: skip
        opts = Options(element, options, {"Queue": True}, name)
        chosen: list[str] = []
        for node in opts.many("Queue"):
            queue = read_value(node, ctx)
            if queue not in facts.replicated_queues:
                what = ("is not replicated (a LocalQueue)" if queue in facts.queues
                        else "is not a configured queue")  # fmt: skip
                raise fail(node, f"queue {queue!r} {what}; replicated queues: "
                           f"{', '.join(facts.replicated_queues)}")  # fmt: skip
            if queue in chosen:
                raise fail(node, f"queue {queue!r} is named twice")
            chosen.append(queue)
        return SetProxiedTransfer(
            tuple(chosen) or facts.replicated_queues, enabled, where=element.path, module=name
        )

    return reader


def _redrive(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "spool-action-do-redrive-dead-letters"
    opts = Options(
        element, options, {"Queue": False, "Filter": False, "Limit": False, "Target": False}, name
    )
    queue_node = opts.require("Queue", name, " (the queue whose dead letters go back)")
    queue = read_value(queue_node, ctx)
    if queue not in facts.dead_letter_queues:
        what = "has no <DeadLetter>" if queue in facts.queues else "is not a configured queue"
        raise fail(queue_node, f"queue {queue!r} {what}; queues with dead letters: "
                   f"{', '.join(facts.dead_letter_queues) or 'none'}")  # fmt: skip
    flt: str | None = None
    if (filter_node := opts.one("Filter")) is not None:
        flt = read_expression(filter_node, ctx)
    limit = 100
    if (limit_node := opts.one("Limit")) is not None:
        limit = read_int(limit_node, ctx, minimum=1, maximum=REDRIVE_MAX)
    target: str | None = None
    if (target_node := opts.one("Target")) is not None:
        target = read_value(target_node, ctx)
        if is_regex_topic(target):
            raise fail(target_node, "the Target is one topic, not a regular expression")
    return RedriveDeadLetters(queue, flt, limit, target, where=element.path)


def _publish(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-do-publish-message"
    spec: Spec = {"Topic": False, "Data": False, "MessageType": False, "CorrelationId": False}
    opts = Options(element, options, spec, name)
    topic_node = opts.require("Topic", name)
    topic = scope.template(topic_node, ctx)
    if topic.constant and (
        is_regex_topic(topic.text) or len(topic.text) > _TOPIC_MAX
        or any(ord(ch) < 32 for ch in topic.text)
    ):  # fmt: skip
        raise fail(topic_node, f"{topic.text!r} cannot be published to: a topic name has no "
                   f"regex characters, no control characters, at most {_TOPIC_MAX} characters")  # fmt: skip
    if topic.constant and topic.text in facts.event_topics:
        raise fail(topic_node, f"{topic.text!r} is an event topic turned on in <EventTopics>: "
                   "only the broker publishes it")  # fmt: skip
    data_node = opts.require("Data", name, " (the message body, JSON)")
    data = scope.template(data_node, ctx)
    if data.constant:
        try:
            orjson.loads(data.text)
        except orjson.JSONDecodeError as exc:
            raise fail(data_node, f"the Data is not JSON: {exc}") from None
    if (type_node := opts.one("MessageType")) is not None:
        read_choice(type_node, ctx, MESSAGE_TYPES, "MessageType")
    correlation_id: Template | None = None
    if (correlation_node := opts.one("CorrelationId")) is not None:
        correlation_id = scope.template(correlation_node, ctx)
        if any(ord(ch) < 32 for ch in correlation_id.text):
            raise fail(correlation_node, "a CorrelationId has no control characters")
    return PublishMessage(topic, data, correlation_id=correlation_id, where=element.path)


def sow_rule(node: XmlNode, topic: str, facts: ActionFacts) -> SowTopicConfig:
    """The SOW rule that keeps ``topic`` (a topic, or a rule's own regular expression);
    refused at ``node`` when there is none, with the rules listed."""
    for rule in facts.sow_topics:
        if rule.name == topic or (not is_regex_topic(topic) and rule.matches(topic)):
            return rule
    names = ", ".join(r.name for r in facts.sow_topics) or "none"
    raise fail(node, f"no SOW topic rule matches {topic!r} (SOW topics: {names})")


def _probe_filter(node: XmlNode, template: Template, what: str) -> None:
    """Compile a filter template as it will run (references as a number), so a syntax
    error shows at load."""
    probe = template.expand({}, lambda _: "0") if not template.constant else template.text
    try:
        compile_filter(probe)
    except FilterSyntaxError as exc:
        raise fail(node, f"bad {what}: {exc}") from None


def _delete_sow(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-do-delete-sow"
    opts = Options(element, options, {"Topic": False, "Filter": False, "Key": False}, name)
    topic_node = opts.require("Topic", name, " (the SOW topic)")
    topic = scope.template(topic_node, ctx)
    if topic.constant:
        sow_rule(topic_node, topic.text, facts)
        if is_regex_topic(topic.text):
            raise fail(topic_node, "the Topic is one topic, not a regular expression")
    given = [tag for tag in ("Filter", "Key") if opts.one(tag) is not None]
    if len(given) != 1:
        where = opts.node if opts.node is not None else element
        raise fail(where, f"{name} needs exactly one of <Filter> (the records that match) or "
                   f"<Key> (one record's key); got {', '.join(given) or 'none'}")  # fmt: skip
    node = opts.require(given[0], name)
    template = scope.template(node, ctx)
    if given[0] == "Key":
        return DeleteSow(topic, key=template, where=element.path)
    _probe_filter(node, template, "filter")
    return DeleteSow(topic, filter=template, where=element.path)


def _compact_sow(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "spool-action-do-compact-sow"
    if not any(rule.persistent for rule in facts.sow_topics):
        raise fail(element, f"{name} compacts the files of persistent SOW topics, and this "
                   "instance has none; remove this module")  # fmt: skip
    opts = Options(element, options, {"Topic": True}, name)
    chosen: list[str] = []
    for node in opts.many("Topic"):
        topic = read_value(node, ctx)
        if not sow_rule(node, topic, facts).persistent:
            raise fail(node, f"{topic!r} is a transient SOW topic (memory only): it has no "
                       "file to compact")  # fmt: skip
        if topic in chosen:
            raise fail(node, f"topic {topic!r} is named twice")
        chosen.append(topic)
    return CompactSow(tuple(chosen), where=element.path)


_LEVELS: Final = ("info", "warning", "error")


def _echo(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-do-echo-message"
    spec: Spec = {"Message": False, "Level": False, "MaxPerSecond": False}
    opts = Options(element, options, spec, name)
    message = scope.template(opts.require("Message", name, " (the line to write)"), ctx)
    level = "info"
    if (level_node := opts.one("Level")) is not None:
        level = read_choice(level_node, ctx, _LEVELS, "Level")
    rate = 100
    if (rate_node := opts.one("MaxPerSecond")) is not None:
        rate = read_int(rate_node, ctx, minimum=1, maximum=10_000)
    if level == "warning":
        return EchoMessage(message, "warning", rate, where=element.path)
    if level == "error":
        return EchoMessage(message, "error", rate, where=element.path)
    return EchoMessage(message, "info", rate, where=element.path)


def _extract_values(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    name = "amps-action-do-extract-values"
    opts = Options(element, options, {"Value": True, "Data": False}, name)
    data: Template | None = None
    if (data_node := opts.one("Data")) is not None:
        data = scope.template(data_node, ctx)
    nodes = opts.many("Value")
    if not nodes:
        where = opts.node if opts.node is not None else element
        raise fail(where, f"{name} needs at least one <Value> (NAME=expression, e.g. "
                   "SYM=/sym)")  # fmt: skip
    values: list[tuple[str, str]] = []
    first: dict[str, int] = {}
    for node in nodes:
        variable, equals, expression = read_value(node, ctx).partition("=")
        variable, expression = variable.strip(), expression.strip()
        if not equals or not expression:
            raise fail(node, "a Value is NAME=expression (e.g. NOTIONAL=/qty * /px)")
        if not _PARAMETER_NAME.fullmatch(variable) or variable.upper().startswith("AMPS_"):
            raise fail(node, f"{variable!r} is not a variable name: 1 to 64 letters, digits "
                       "and _, not starting with a digit nor with AMPS_ (reserved for the "
                       "broker's variables)")  # fmt: skip
        if variable in first:
            raise fail(node, f"{variable!r} is set twice (first at line {first[variable]})")
        try:
            compile_value(expression)
        except FilterSyntaxError as exc:
            raise fail(node, f"the expression of {variable} does not compile: {exc}") from None
        first[variable] = node.line
        values.append((variable, expression))
    return ExtractValues(tuple(values), data, where=element.path)


def _execute_event(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    opts = Options(element, options, {"Event": False}, "amps-action-do-execute-event")
    event = read_name(opts.require("Event", "amps-action-do-execute-event"), ctx, "event name")
    return ExecuteEvent(event, where=element.path)


def _shutdown(
    element: XmlNode, options: XmlNode | None, ctx: Context, facts: ActionFacts, scope: ActionScope
) -> Step:
    Options(element, options, {}, "amps-action-do-shutdown")
    return Shutdown(where=element.path)


DO_READERS: Final[Mapping[str, StepReader]] = {
    "amps-action-do-archive-journal": _archive,
    "amps-action-do-compress-journal": _compress,
    "amps-action-do-remove-journal": _remove,
    "amps-action-do-truncate-statistics": _truncate,
    "amps-action-do-enable-transport": _transport(True),
    "amps-action-do-disable-transport": _transport(False),
    "amps-action-do-downgrade-replication": _replication(True),
    "amps-action-do-upgrade-replication": _replication(False),
    "amps-action-do-publish-message": _publish,
    "amps-action-do-execute-event": _execute_event,
    "amps-action-do-enable-proxied-transfer": _proxied(True),
    "amps-action-do-disable-proxied-transfer": _proxied(False),
    "amps-action-do-shutdown": _shutdown,
    "spool-action-do-redrive-dead-letters": _redrive,
    "amps-action-do-delete-sow": _delete_sow,
    "spool-action-do-compact-sow": _compact_sow,
    "amps-action-do-echo-message": _echo,
    "amps-action-do-extract-values": _extract_values,
}
