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
of each module are read by :mod:`spool.server.config.sections.actionmodules`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Final

from spool.server.config.actions import (
    ACTION_MODULES,
    BASE_VARIABLES,
    CONDITION_MODULES,
    MODULE_PREFIX,
    TRIGGER_MODULES,
    ActionConfig,
    OnAdmin,
    OnExecute,
    OnShutdown,
    OnStartup,
    Step,
    Trigger,
)
from spool.server.config.sections.actionmodules import (
    CONDITION_READERS,
    DO_READERS,
    TRIGGER_READERS,
    UNSUPPORTED_MODULES,
    ActionFacts,
    ActionScope,
)
from spool.server.config.values import Context, read_name, read_value
from spool.server.config.xmltree import Children, Spec, XmlNode, fail

__all__ = ["ActionFacts", "read_actions"]

_ACTIONS_SPEC: Final[Spec] = {"Action": True}
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


def _module_name(node: XmlNode, ctx: Context) -> tuple[str, XmlNode | None]:
    """The ``<Module>`` of an ``On``/``If``/``Do`` element, checked for its place, and the
    element's ``<Options>``."""
    kids = Children(node, _STEP_SPEC)
    module_node = kids.require("Module", f" (the {_WHAT[node.tag][2:]} to run)")
    name = read_value(module_node, ctx)
    allowed = _PLACES[node.tag]
    if name in allowed:
        return name, kids.one("Options")
    if name in UNSUPPORTED_MODULES:
        raise fail(
            module_node,
            f"{name} is not supported yet: {UNSUPPORTED_MODULES[name]} are not part of this "
            "version of Spool; remove this module",
        )
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


def _triggers(kids: Children, ctx: Context, facts: ActionFacts, action: XmlNode) -> list[Trigger]:
    nodes = kids.many("On")
    if not nodes:
        raise fail(action, "<Action> needs an <On> (when it runs, e.g. amps-action-on-schedule)")
    triggers: list[Trigger] = []
    seen: dict[type, XmlNode] = {}
    for node in nodes:
        name, options = _module_name(node, ctx)
        trigger = TRIGGER_READERS[name](node, options, ctx, facts)
        kind = type(trigger)
        if kind in _SINGLE and kind in seen:
            raise fail(
                node, f"{name} appears twice in this action (first at line {seen[kind].line})"
            )
        seen.setdefault(kind, node)
        triggers.append(trigger)
    return triggers


def _scope(triggers: list[Trigger]) -> ActionScope:
    """The variables a run of these triggers starts with (unchecked under on-execute)."""
    if any(isinstance(t, OnExecute) for t in triggers):
        return ActionScope(None)
    names = set(BASE_VARIABLES)
    for trigger in triggers:
        names.update(trigger.provides)
        if isinstance(trigger, OnAdmin):
            names.update(p.name for p in trigger.parameters)
    return ActionScope(names)


def _action(node: XmlNode, ctx: Context, facts: ActionFacts) -> ActionConfig:
    kids = Children(node, _ACTION_SPEC)
    name = read_name(kids.require("Name", " (unique; POST /api/actions/NAME)"), ctx, "action name")
    triggers = _triggers(kids, ctx, facts, node)
    scope = _scope(triggers)
    steps: list[Step] = []
    for child in node.children:  # If and Do in file order
        if child.tag not in ("If", "Do"):
            continue
        module, options = _module_name(child, ctx)
        readers = CONDITION_READERS if child.tag == "If" else DO_READERS
        step = readers[module](child, options, ctx, facts, scope)
        scope.add(step.provides)
        steps.append(step)
    if not any(child.tag == "Do" for child in node.children):
        raise fail(node, f"action {name!r} needs at least one <Do> (what it does)")
    return ActionConfig(name, tuple(triggers), tuple(steps), where=node.path)


def read_actions(
    node: XmlNode,
    ctx: Context,
    *,
    transports: tuple[str, ...],
    has_txlog: bool,
    destinations: Mapping[str, bool] | None = None,
    replicated_queues: tuple[str, ...] = (),
    queues: tuple[str, ...] = (),
    dead_letter_queues: tuple[str, ...] = (),
) -> tuple[ActionConfig, ...]:
    """Read ``<Actions>`` (see the module docstring).

    Args:
        node: the ``<Actions>`` element.
        ctx: the value context.
        transports: the configured transport names (enable/disable-transport name one).
        has_txlog: a ``<TransactionLog>`` is configured (the journal modules need it).
        destinations: the replication destinations, name -> configured sync (the
            replication modules name them).
        replicated_queues, queues: the replicated queues (the proxied-transfer
            modules switch them) and every queue.
        dead_letter_queues: the queues with a dead-letter topic (the redrive module
            names one).

    Raises:
        ConfigError: at the first element in error.
    """
    directories = ("data", "stats", "journal", "archive") if has_txlog else ("data", "stats")
    facts = ActionFacts(
        transports, has_txlog, directories, dict(destinations or {}), replicated_queues, queues,
        dead_letter_queues,
    )  # fmt: skip
    kids = Children(node, _ACTIONS_SPEC)
    actions: list[ActionConfig] = []
    first: dict[str, int] = {}
    for action_node in kids.many("Action"):
        action = _action(action_node, ctx, facts)
        if action.name in first:
            raise fail(
                action_node,
                f"duplicate action name {action.name!r} (first at line {first[action.name]})",
            )
        first[action.name] = action_node.line
        actions.append(action)
    return tuple(actions)
