"""The happenings bus: the broker's own life (a client connected, a subscription ended, a
replication link changed state) told to the parts that publish it or act on it.

Producers check their family's flag before they build anything (``if happenings.clients:``),
so with no sink of a family a happening costs one attribute read. :meth:`Happenings.emit`
hands the value to each sink of its family, on the event loop, in the order the sinks were
added. It runs while the producer is in the middle of a state change (a session closing, a
subscription being replaced), so a sink keeps the value and acts in a later turn (see
:class:`~spool.server.ports.HappeningSink`). A sink that raises anyway is reported in the
event log, at most once a minute per sink, and the other sinks still get the value.

The SOW families (``sow_removals``, ``sow_changes``) are told per topic: their sinks say
which topics they watch (:class:`~spool.server.ports.TopicSink`), and a producer on the
publish path asks :meth:`Happenings.sow_interest` after the family's flag, one cached dict
lookup per run, before it builds anything.
"""

from __future__ import annotations

from typing import Final, cast

from spool.server.clock import Clock
from spool.server.ports import (
    TOPIC_FAMILIES,
    Happening,
    HappeningFamily,
    HappeningSink,
    TopicSink,
)
from spool.server.stats.source import EventSink

__all__ = ["INTEREST_LIMIT", "Happenings"]

#: how often a failing sink is reported at most (seconds)
REPORT_INTERVAL: Final = 60.0
#: topics whose interest is remembered per family (all forgotten when full)
INTEREST_LIMIT: Final = 65_536


class Happenings:
    """The bus of one instance (built by the engine, which adds the sinks).

    Attributes:
        clients: a sink wants :class:`~spool.server.ports.ClientHappening`.
        subscriptions: a sink wants :class:`~spool.server.ports.SubscriptionHappening`.
        links: a sink wants :class:`~spool.server.ports.LinkHappening`.
        sow_removals: a sink wants :class:`~spool.server.ports.SowRemovalHappening` of
            some topics (:meth:`sow_interest` says which).
        sow_changes: a sink wants :class:`~spool.server.ports.SowChangeHappening` of some
            topics.
        dead_letters: a sink wants :class:`~spool.server.ports.DeadLetterHappening`.
        failures: sink calls that raised.
    """

    def __init__(self, events: EventSink, clock: Clock) -> None:
        self._events = events
        self._clock = clock
        self._sinks: dict[HappeningFamily, list[HappeningSink]] = {}
        #: per failing sink, when it was last reported (the clock's monotonic time)
        self._reported: dict[int, float] = {}
        self._closed = False
        self.clients = False
        self.subscriptions = False
        self.links = False
        self.sow_removals = False
        self.sow_changes = False
        self.dead_letters = False
        self.failures = 0
        #: per SOW family, topic -> whether a sink watches it
        self._interest: dict[HappeningFamily, dict[str, bool]] = {}

    def add(self, sink: HappeningSink) -> None:
        """Tell ``sink`` of the families it wants, from now on."""
        if self._closed:
            raise RuntimeError("the happenings bus is closed")
        families = sink.families
        if families & TOPIC_FAMILIES and not callable(getattr(sink, "watches", None)):
            raise TypeError(f"a sink of {sorted(families & TOPIC_FAMILIES)} says which "
                            "topics it watches")  # fmt: skip
        for family in sorted(families):
            self._sinks.setdefault(family, []).append(sink)
        self._interest.clear()
        self._set_flags()

    def sow_interest(self, family: HappeningFamily, topic: str) -> bool:
        """Whether a sink of ``family`` (a SOW family) watches ``topic``: asked of the
        sinks once per topic, then remembered (at most :data:`INTEREST_LIMIT` topics)."""
        known = self._interest.get(family)
        if known is not None:
            answer = known.get(topic)
            if answer is not None:
                return answer
        else:
            known = self._interest[family] = {}
        answer = any(
            cast(TopicSink, sink).watches(family, topic) for sink in self._sinks.get(family, ())
        )
        if len(known) >= INTEREST_LIMIT:
            known.clear()
        known[topic] = answer
        return answer

    def emit(self, happening: Happening) -> None:
        """Hand ``happening`` to every sink of its family."""
        for sink in self._sinks.get(happening.family, ()):
            try:
                sink.happened(happening)
            except Exception as exc:  # a sink must never break the producer's change
                self._failed(sink, happening, exc)

    def close(self) -> None:
        """Shutdown: no sink is told of anything after this (the flags go down, so
        producers stop building values)."""
        self._closed = True
        self._sinks.clear()
        self._interest.clear()
        self._set_flags()

    def _set_flags(self) -> None:
        sinks = self._sinks
        self.clients = bool(sinks.get("clients"))
        self.subscriptions = bool(sinks.get("subscriptions"))
        self.links = bool(sinks.get("links"))
        self.sow_removals = bool(sinks.get("sow_removals"))
        self.sow_changes = bool(sinks.get("sow_changes"))
        self.dead_letters = bool(sinks.get("dead_letters"))

    def _failed(self, sink: HappeningSink, happening: Happening, exc: Exception) -> None:
        self.failures += 1
        now = self._clock.monotonic()
        last = self._reported.get(id(sink))
        if last is not None and now - last < REPORT_INTERVAL:
            return
        self._reported[id(sink)] = now
        self._events.emit(
            "error", "happenings", "sink_failed", sink=type(sink).__name__,
            family=happening.family, error=f"{type(exc).__name__}: {exc}",
            failures=self.failures,
        )  # fmt: skip
