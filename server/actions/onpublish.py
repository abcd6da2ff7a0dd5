"""The on-publish trigger: a publish stage that offers appended messages to actions' lanes.

:class:`PublishTriggers` is an appended stage of the publish pipeline, after the fan-out,
added only when an ``amps-action-on-publish-message`` trigger is configured: an instance
without one has no hook on its publish path at all. The pipeline asks
:meth:`PublishTriggers.applies_to` once per topic (the topic table keeps the answer), so a
topic no trigger watches has no hook either, and its runs cost nothing here.

For a watched topic, :meth:`PublishTriggers.appended` costs one dict lookup per run and one
O(1) lane offer per trigger that watches it: no filter runs here (the action's worker
filters, off the publish path), and a full lane drops and counts rather than wait. Only
publishes reach it (``sow_delete`` and queue records replicated in pass appended stages
too), and only from the trigger's ``MessageSource``: ``local`` runs were published here
(by a client or the broker), ``replicated`` ones came over a link. A message refused by
the pipeline (entitlement, duplicate, ``txlog full``) never reaches appended stages, so
never fires an action.

Loops: each derived identity an action publishes under is remembered with its depth (how
many derived hops from a client's message, :meth:`PublishTriggers.derived`); a run whose
publisher is at :data:`~spool.server.actions.eventrunner.MAX_DERIVED_DEPTH` is not offered
and counted ``loop_cut``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from spool.server.actions.eventrunner import MAX_DERIVED_DEPTH, MessageRun
from spool.server.actions.lanes import EventLane
from spool.server.actions.results import EventTally
from spool.server.config import Config, OnPublishMessage
from spool.server.ports import AppendedRun, Outbound
from spool.server.topics import TOPIC_LIMIT
from spool.server.txlog.format.record import RecordKind

__all__ = ["LINEAGE_LIMIT", "PublishTriggers"]

#: Derived identities whose depth is remembered (the oldest is forgotten past it: a
#: message of a forgotten identity counts as a client's, so a loop runs at most this
#: many more hops before it is cut again).
LINEAGE_LIMIT: Final = 65_536
_PUBLISHES: Final = (RecordKind.PUBLISH, RecordKind.DELTA_PUBLISH)


@dataclass(frozen=True, slots=True)
class _Binding:
    """One on-publish trigger of an action, and where its candidates go."""

    lane: EventLane[MessageRun]
    trigger: OnPublishMessage
    index: int
    tally: EventTally


class PublishTriggers:
    """The on-publish triggers of an instance, as a publish stage (see the module docstring).

    Args:
        config: the instance configuration (its actions).
    """

    def __init__(self, config: Config) -> None:
        #: whether any action has an on-publish trigger (else the stage is not added)
        self.configured = any(
            isinstance(t, OnPublishMessage) for action in config.actions for t in action.triggers
        )
        self._bindings: list[_Binding] = []
        self._by_topic: dict[str, tuple[_Binding, ...]] = {}
        #: derived identity -> its depth, the newest last
        self._lineage: OrderedDict[int, int] = OrderedDict()

    def bind(
        self, lane: EventLane[MessageRun], trigger: OnPublishMessage, index: int, tally: EventTally
    ) -> None:
        """Offer the runs ``trigger`` (the ``index``-th trigger of the lane's action)
        watches to ``lane``; loops cut are counted in ``tally``. Before the first publish."""
        self._bindings.append(_Binding(lane, trigger, index, tally))
        self._by_topic.clear()

    def _resolve(self, topic: str) -> tuple[_Binding, ...]:
        found = tuple(b for b in self._bindings if b.trigger.topic.matches(topic))
        if len(self._by_topic) >= TOPIC_LIMIT:
            self._by_topic.clear()
        self._by_topic[topic] = found
        return found

    def applies_to(self, topic: str) -> bool:
        """Whether a trigger watches ``topic`` (asked once per topic by the topic table)."""
        return bool(self._resolve(topic))

    def appended(self, run: AppendedRun) -> None:
        """Offer ``run`` to the lane of each trigger that watches its topic and source."""
        if run.kind not in _PUBLISHES:
            return
        bindings = self._by_topic.get(run.topic)
        if bindings is None:  # forgotten since the topic table asked
            bindings = self._resolve(run.topic)
        depth = self._lineage.get(run.pub_hash, 0) if self._lineage else 0
        replicated = bool(run.path)
        for binding in bindings:
            source = binding.trigger.source
            if source != "all" and (source == "replicated") != replicated:
                continue
            if depth >= MAX_DERIVED_DEPTH:
                binding.tally.loop_cut += len(run.bodies)
                continue
            binding.lane.offer(MessageRun(run, binding.index, depth))

    def reaches(self, topic: str, peer: Outbound) -> bool:
        """Never: the stage sends nothing to anyone."""
        return False

    def derived(self, pub_hash: int, depth: int) -> None:
        """An action published under ``pub_hash`` messages ``depth`` derived hops from a
        client's (the event runner tells, before it publishes them)."""
        lineage = self._lineage
        if lineage.get(pub_hash, 0) >= depth:
            return
        lineage[pub_hash] = depth
        lineage.move_to_end(pub_hash)
        if len(lineage) > LINEAGE_LIMIT:
            lineage.popitem(last=False)
