"""The ``<Actions>`` section: scheduled and on-demand administration (docs/configuration.md, AMPS).

Shape::

    <Actions>
      <Action>
        <Name>nightly</Name>                               unique; URL-safe
        <On><Module>amps-action-on-schedule</Module>       one or more triggers
            <Options><Every>Daily 02:00</Every></Options></On>
        <If><Module>amps-action-if-condition</Module>      conditions and modules, run in
            <Options><Condition>...</Condition></Options></If>     file order
        <Do><Module>amps-action-do-archive-journal</Module>
            <Options><Age>1d</Age></Options></Do>
      </Action>
    </Actions>

Every error names the element: an unknown module (with a "did you mean"), a module in the
wrong place (a ``Do`` module under ``<On>``), a missing or unknown option, a bad schedule, a
variable nothing defines, a module of a subsystem this version does not have (the queue
modules), a replication module without a sync destination to act on. The options
of each module are read by :mod:`spool.server.config.sections.actionmodules`, those of the
event triggers by :mod:`spool.server.config.sections.actiontriggers`.

An action whose triggers are event triggers (once per message or happening) is an *event
action*: it may not also have a schedule, start-up, admin... trigger (those run it on its
own, with none of the variables of a message), and its templates use only the variables
every one of its triggers gives; its steps may not be maintenance (journals, statistics,
SOW compaction) nor, once per message, changes of the instance (a transport, a link, a
queue). Once every action is read, a loop of on-publish actions that the file proves
(:mod:`spool.server.config.sections.actionloops`) is refused; ``<Webhooks>`` says where
webhook modules may post (:mod:`spool.server.config.sections.webhooks`). A module this
version does not run yet is refused last, after every action was read and checked.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from spool.server.config.actions import (
    ACTION_MODULES,
    BASE_VARIABLES,
    CONDITION_MODULES,
    EVENT_TRIGGERS,
    MODULE_PREFIX,
    TRIGGER_MODULES,
    ActionConfig,
    ExtractValues,
    OnAdmin,
    OnExecute,
    OnPublishMessage,
    OnShutdown,
    OnStartup,
    Step,
    Trigger,
    WebhooksConfig,
)
from spool.server.config.errors import ConfigError
from spool.server.config.model import SowTopicConfig
from spool.server.config.sections.actionloops import check_loops
from spool.server.config.sections.actionmodules import (
    CONDITION_READERS,
    DO_READERS,
    TRIGGER_READERS,
    UNSUPPORTED_MODULES,
    ActionFacts,
    ActionScope,
    StepReader,
)
from spool.server.config.sections.actiontriggers import EVENT_TRIGGER_READERS
from spool.server.config.sections.webhooks import read_webhook, read_webhooks
from spool.server.config.values import Context, read_name, read_value
from spool.server.config.xmltree import Children, Spec, XmlNode, fail

__all__ = ["ActionFacts", "read_actions"]

_ACTIONS_SPEC: Final[Spec] = {"Webhooks": False, "Action": True}
_ACTION_SPEC: Final[Spec] = {"Name": False, "On": True, "If": True, "Do": True}
_STEP_SPEC: Final[Spec] = {"Module": False, "Options": False}
#: triggers an action may have once only
_SINGLE: Final = (OnStartup, OnShutdown, OnAdmin)

_PLACES: Final[Mapping[str, tuple[str, ...]]] = {
    "On": TRIGGER_MODULES,
    "If": CONDITION_MODULES,
    "Do": ACTION_MODULES,
}
_WHAT: Final[Mapping[str, str]] = {"On": "a trigger", "If": "a condition", "Do": "a module"}
_DO_READERS: Final[Mapping[str, StepReader]] = {
    **DO_READERS,
    "spool-action-do-webhook": read_webhook,
}


def _not_supported(module_node: XmlNode, name: str) -> ConfigError:
    return fail(
        module_node,
        f"{name} is not supported yet: {UNSUPPORTED_MODULES[name]} are not part of this "
        "version of Spool; remove this module",
    )


def _module_name(node: XmlNode, ctx: Context) -> tuple[str, XmlNode | None, XmlNode]:
    """The ``<Module>`` of an ``On``/``If``/``Do`` element, checked for its place, the
    element's ``<Options>`` and the ``<Module>`` element."""
    kids = Children(node, _STEP_SPEC)
    module_node = kids.require("Module", f" (the {_WHAT[node.tag][2:]} to run)")
    name = read_value(module_node, ctx)
    allowed = _PLACES[node.tag]
    if name in allowed:
        return name, kids.one("Options"), module_node
    if name in UNSUPPORTED_MODULES:
        raise _not_supported(module_node, name)
    for tag, names in _PLACES.items():
        if name in names:
            raise fail(
                module_node,
                f"{name} is {_WHAT[tag]}: it belongs in <{tag}>, not in <{node.tag}>",
            )
    hint = ""
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.7)
    if close:
        hint = f"; did you mean {close[0]}?"
    elif not name.startswith(MODULE_PREFIX):
        hint = f"; module names start with {MODULE_PREFIX}"
    raise fail(
        module_node,
        f"unknown module {name!r} in <{node.tag}> (known: {', '.join(allowed)}){hint}",
    )


@dataclass(frozen=True, slots=True)
class _Read:
    """An action as read, with what the checks after the last action need: the elements
    of its steps (the loop check names one) and the refusals of what it uses that is not
    run yet (raised once everything is checked)."""

    action: ActionConfig
    steps: list[XmlNode]
    not_run: list[ConfigError]


def _triggers(
    kids: Children, ctx: Context, facts: ActionFacts, action: XmlNode, not_run: list[ConfigError]
) -> list[Trigger]:
    nodes = kids.many("On")
    if not nodes:
        raise fail(action, "<Action> needs an <On> (when it runs, e.g. amps-action-on-schedule)")
    triggers: list[Trigger] = []
    seen: dict[type, XmlNode] = {}
    first_of: dict[bool, str] = {}  # event trigger or not -> the first module of that kind
    for node in nodes:
        name, options, module_node = _module_name(node, ctx)
        reader = EVENT_TRIGGER_READERS.get(name) or TRIGGER_READERS[name]
        trigger = reader(node, options, ctx, facts)
        kind = type(trigger)
        if kind in _SINGLE and kind in seen:
            raise fail(
                node, f"{name} appears twice in this action (first at line {seen[kind].line})"
            )
        is_event = isinstance(trigger, EVENT_TRIGGERS)
        if (not is_event) in first_of:  # the other kind came first
            action_name = read_value(kids.require("Name"), ctx)
            event, other = (name, first_of[False]) if is_event else (first_of[True], name)
            raise fail(
                node,
                f"action {action_name!r} runs per event ({event}) and {other} runs it on its "
                "own: use two actions",
            )
        first_of.setdefault(is_event, name)
        seen.setdefault(kind, node)
        if name in UNSUPPORTED_MODULES:
            not_run.append(_not_supported(module_node, name))
        triggers.append(trigger)
    return triggers


def _scope(triggers: list[Trigger]) -> ActionScope:
    """The variables a run of these triggers starts with (unchecked under on-execute).

    A run has the variables of the trigger that fired it. Under event triggers, the
    action's templates may use only what every one of them gives (a run of one cannot
    fill a variable only another gives, and an empty value in a message body goes
    unnoticed); under the others, a variable of any trigger may be used (empty in the
    runs of the others, as in AMPS).
    """
    if any(isinstance(t, OnExecute) for t in triggers):
        return ActionScope(None)
    names = set(BASE_VARIABLES)
    if all(isinstance(t, EVENT_TRIGGERS) for t in triggers):
        shared = set(triggers[0].provides).intersection(*(t.provides for t in triggers[1:]))
        names.update(shared)
        # its webhooks are queued, not waited for: no status to give; a run of a happening
        # publishes without waiting for the log: no bookmark to give
        withheld = {"AMPS_WEBHOOK_STATUS"}
        if any(not isinstance(t, OnPublishMessage) for t in triggers):
            withheld.add("AMPS_PUBLISHED_BOOKMARK")
        return ActionScope(names, frozenset(withheld))
    for trigger in triggers:
        names.update(trigger.provides)
        if isinstance(trigger, OnAdmin):
            names.update(p.name for p in trigger.parameters)
    return ActionScope(names)


def _check_event_use(element: XmlNode, module: str, step: Step, rates: set[str]) -> None:
    """Refuse a step an event action may not run: maintenance (journals, statistics, SOW
    files) once per event, or a change of the instance (a transport, a link, a queue,
    shutdown) once per message."""
    if not rates:
        return
    per = "message" if "message" in rates else "event"
    if step.event_use == "never":
        raise fail(element, f"{module} is a maintenance step: run it on a schedule or on "
                   f"demand, not per {per}")  # fmt: skip
    if step.event_use == "happening" and per == "message":
        raise fail(element, f"{module} changes the instance: an action may run it per client "
                   "or link happening, not per message")  # fmt: skip


def _action(node: XmlNode, ctx: Context, facts: ActionFacts) -> _Read:
    kids = Children(node, _ACTION_SPEC)
    name = read_name(kids.require("Name", " (unique; POST /api/actions/NAME)"), ctx, "action name")
    not_run: list[ConfigError] = []
    triggers = _triggers(kids, ctx, facts, node, not_run)
    scope = _scope(triggers)
    rates: set[str] = {t.rate for t in triggers if isinstance(t, EVENT_TRIGGERS)}
    steps: list[Step] = []
    step_nodes: list[XmlNode] = []
    for child in node.children:  # If and Do in file order
        if child.tag not in ("If", "Do"):
            continue
        module, options, module_node = _module_name(child, ctx)
        readers = CONDITION_READERS if child.tag == "If" else _DO_READERS
        step = readers[module](child, options, ctx, facts, scope)
        _check_event_use(child, module, step, rates)
        step_nodes.append(child)
        scope.add(step.provides)
        steps.append(step)
        if module in UNSUPPORTED_MODULES:
            not_run.append(_not_supported(module_node, module))
        if isinstance(step, ExtractValues) and step.data is None and not rates:
            raise fail(child, f"{module} without <Data> reads the message that fired the run, "
                       "and this action runs on no message: give it <Data> (a JSON template)")  # fmt: skip
    if not any(child.tag == "Do" for child in node.children):
        raise fail(node, f"action {name!r} needs at least one <Do> (what it does)")
    action = ActionConfig(name, tuple(triggers), tuple(steps), where=node.path)
    return _Read(action, step_nodes, not_run)


def read_actions(
    node: XmlNode,
    ctx: Context,
    *,
    transports: tuple[str, ...],
    has_txlog: bool,
    destinations: Mapping[str, bool] | None = None,
    replicated_queues: tuple[str, ...] = (),
    queues: tuple[str, ...] = (),
    dead_letter_reasons: Mapping[str, frozenset[str]] | None = None,
    client_transports: tuple[str, ...] | None = None,
    sow_topics: tuple[SowTopicConfig, ...] = (),
    replicates: bool = False,
    event_topics: frozenset[str] = frozenset(),
) -> tuple[tuple[ActionConfig, ...], WebhooksConfig]:
    """Read ``<Actions>`` (see the module docstring): the actions, and where their webhooks
    may post (``<Webhooks>``).

    Every action is read and checked in full before a module this version does not run
    yet is refused (at its ``<Module>``, the first in file order), so a file written for
    the release that runs it shows all its other errors now.

    Args:
        node: the ``<Actions>`` element.
        ctx: the value context.
        transports: the configured transport names (enable/disable-transport name one).
        has_txlog: a ``<TransactionLog>`` is configured (the journal modules need it).
        destinations: the replication destinations, name -> configured sync (the
            replication modules and triggers name them).
        replicated_queues, queues: the replicated queues (the proxied-transfer
            modules switch them) and every queue.
        dead_letter_reasons: the queues with a dead-letter topic, each with the reasons
            it dead-letters for (the redrive module and the dead-letter trigger name one).
        client_transports: the transports clients connect to (the client triggers name
            them; None: all of ``transports``).
        sow_topics: the SOW topic rules (the SOW triggers name a topic they keep).
        replicates: the instance has replication links.
        event_topics: the event topics turned on.

    Raises:
        ConfigError: at the first element in error.
    """
    directories = ("data", "stats", "journal", "archive") if has_txlog else ("data", "stats")
    reasons = dict(dead_letter_reasons or {})
    facts = ActionFacts(
        transports, has_txlog, directories, dict(destinations or {}), replicated_queues, queues,
        reasons, transports if client_transports is None else client_transports,
        sow_topics, replicates, event_topics,
    )  # fmt: skip
    kids = Children(node, _ACTIONS_SPEC)
    webhooks = WebhooksConfig()
    if (webhooks_node := kids.one("Webhooks")) is not None:
        webhooks = read_webhooks(webhooks_node, ctx)
        facts = replace(facts, webhook_allow=webhooks.allow)
    read: list[_Read] = []
    first: dict[str, int] = {}
    for action_node in kids.many("Action"):
        one = _action(action_node, ctx, facts)
        name = one.action.name
        if name in first:
            raise fail(action_node, f"duplicate action name {name!r} (first at line {first[name]})")
        first[name] = action_node.line
        read.append(one)
    check_loops([(one.action, one.steps) for one in read])
    for one in read:
        if one.not_run:
            raise one.not_run[0]
    return tuple(one.action for one in read), webhooks
