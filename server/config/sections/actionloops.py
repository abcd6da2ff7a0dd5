"""Loops between on-publish actions that the file alone proves: refused at load.

Action A *feeds* action B when A publishes, unconditionally, to a topic written out in
full that an on-publish trigger of B without a ``Filter`` watches (local messages: the
broker's own publish is local). A's publish is unconditional when no condition
(``<If>``) comes before it. A cycle of such edges would publish for ever, each message
deriving the next, so it is refused at the publish step that closes it.

A loop through a templated topic, a filter or a condition cannot be decided from the file
(an enrichment published back to its own topic, filtered on a field it adds, is a normal
use); the runtime cuts those after a few derived hops.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import NamedTuple

from spool.server.config.actions import (
    ActionConfig,
    IfCondition,
    IfDiskUsage,
    OnPublishMessage,
    PublishMessage,
)
from spool.server.config.xmltree import XmlNode, fail

__all__ = ["check_loops"]


class _Edge(NamedTuple):
    """A publish step of one action whose messages run another."""

    topic: str
    target: str
    step: XmlNode


def _edges(actions: Sequence[tuple[ActionConfig, Sequence[XmlNode]]]) -> dict[str, list[_Edge]]:
    watchers = [
        (action.name, trigger)
        for action, _ in actions
        if action.event_driven
        for trigger in action.triggers
        if isinstance(trigger, OnPublishMessage)
        and trigger.filter is None
        and trigger.source != "replicated"
    ]
    edges: dict[str, list[_Edge]] = {}
    for action, nodes in actions:
        out = edges.setdefault(action.name, [])
        for step, node in zip(action.steps, nodes, strict=True):
            if isinstance(step, IfCondition | IfDiskUsage):
                break  # what follows runs only when the condition holds
            if not isinstance(step, PublishMessage) or not step.topic.constant:
                continue
            topic = step.topic.text
            for target, trigger in watchers:
                if trigger.topic.matches(topic):
                    out.append(_Edge(topic, target, node))
    return edges


def check_loops(actions: Sequence[tuple[ActionConfig, Sequence[XmlNode]]]) -> None:
    """Refuse the first unconditional loop (see the module docstring).

    Args:
        actions: each action with the elements of its steps (``If``/``Do``, in order).

    Raises:
        ConfigError: at the publish step that closes the loop.
    """
    edges = _edges(actions)
    state: dict[str, bool] = {}  # False: being visited (on the path); True: done

    def visit(name: str, path: list[tuple[str, _Edge]]) -> None:
        state[name] = False
        for edge in edges.get(name, ()):
            seen = state.get(edge.target)
            if seen is None:
                visit(edge.target, [*path, (name, edge)])
            elif not seen:  # back to an action on the path: a cycle
                sources = [*(source for source, _ in path), name]
                start = sources.index(edge.target)
                steps = [*(e for _, e in path[start:]), edge]
                words = [f"{sources[start]!r} publishes to {steps[0].topic!r}"]
                words += [
                    f"which triggers {e.target!r}, which publishes to {n.topic!r}"
                    for e, n in itertools.pairwise(steps)
                ]
                raise fail(
                    edge.step,
                    f"{', '.join(words)}, which triggers {edge.target!r}: a loop (each "
                    "message would derive the next for ever); add a Filter to a trigger, or "
                    "publish to another topic",
                )
        state[name] = True

    for action, _ in actions:
        if action.name not in state:
            visit(action.name, [])
