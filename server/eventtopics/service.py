"""The event topics of an instance: what the broker publishes about its own life, for
clients to subscribe to (docs/protocol.md "Event topics").

:class:`EventTopics` is a sink of the happenings bus (server/happenings.py) for the
families of the topics turned on, and samples the SOW every ``Interval`` for
``/spool/stats/sow``. It never acts while told: a happening is counted against its
topic's budget (:class:`~spool.server.eventtopics.budget.TokenBucket`, ``MaxEventsPerSecond``
with a burst of one second's worth) and kept; at the next turn of the loop each topic's
messages are encoded and published as one run, as the broker
(:meth:`~spool.server.brokerpublish.BrokerPublisher.publish_now`). What does not fit the
budget is dropped and counted, and so is what the pipeline refuses; each is reported in
the event log at most once a minute per topic. Nothing waits for durability.

Happenings that come before :meth:`EventTopics.start` (replication links connect while
the instance starts) are kept, within the budget, and published once it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Final

from spool.server.clock import Clock, time_us
from spool.server.eventtopics.budget import TokenBucket
from spool.server.eventtopics.messages import (
    CLIENTS,
    LINKS,
    SOW_STATS,
    SUBSCRIPTIONS,
    encode,
    encode_sow_stats,
    topic_of,
)
from spool.server.ports import (
    ClientHappening,
    Happening,
    HappeningFamily,
    LifeHappening,
    LinkHappening,
    SubscriptionHappening,
)
from spool.server.protocol.errors import ProtocolFailure
from spool.server.sow.admin import SowTopicInfo
from spool.server.stats.snapshot import EventTopicCounters
from spool.server.stats.source import EventSink

__all__ = ["EventTopics", "Publish"]

#: publishes bodies to a topic as the broker, in this turn; returns why the pipeline refused
Publish = Callable[[str, Sequence[bytes]], ProtocolFailure | None]

#: the happenings family each event topic publishes
_FAMILY: Final[dict[str, HappeningFamily]] = {
    CLIENTS: "clients", SUBSCRIPTIONS: "subscriptions", LINKS: "links",
}  # fmt: skip
#: how often a topic's drops or refusals are reported at most (seconds)
REPORT_INTERVAL: Final = 60.0


class EventTopics:
    """The event topics turned on, on one instance.

    Args:
        topics: the event topics turned on (``messages.EVENT_TOPICS`` names).
        max_per_second: each topic's budget (messages a second; a burst of as many).
        sow_interval: seconds between two samples of ``/spool/stats/sow``.
        instance: the instance name every message carries.
        group: its replication group.
        publish: publishes as the broker.
        clock: the broker's clock.
        events: the event log (drops and refusals).
        sow_stats: the SOW topics' admin view (``/spool/stats/sow``).

    Attributes:
        published: messages published, per topic.
        dropped: happenings over the budget, per topic.
        refused: messages the pipeline refused, per topic.
    """

    def __init__(
        self,
        topics: frozenset[str],
        *,
        max_per_second: int,
        sow_interval: float,
        instance: str,
        group: str,
        publish: Publish,
        clock: Clock,
        events: EventSink,
        sow_stats: Callable[[], list[SowTopicInfo]],
    ) -> None:
        self.topics = topics
        self.families = frozenset(f for topic, f in _FAMILY.items() if topic in topics)
        self._burst = max_per_second
        self._buckets = {t: TokenBucket(max_per_second, max_per_second, clock) for t in topics}
        self._sow_interval = sow_interval
        self._instance = instance
        self._group = group
        self._publish = publish
        self._clock = clock
        self._events = events
        self._sow_stats = sow_stats
        self._pending: dict[str, list[LifeHappening]] = {}
        self._scheduled = False
        self._started = False
        self._closed = False
        self._sampler: asyncio.Task[None] | None = None
        #: per (what, topic): when it was last reported, and the count then
        self._reported: dict[tuple[str, str], tuple[float, int]] = {}
        self.published = dict.fromkeys(topics, 0)
        self.dropped = dict.fromkeys(topics, 0)
        self.refused = dict.fromkeys(topics, 0)

    # -- the happenings sink -----------------------------------------------------------

    def happened(self, happening: Happening) -> None:
        """Keep ``happening`` for the next turn (or drop it, over the budget)."""
        if self._closed or not isinstance(
            happening, ClientHappening | SubscriptionHappening | LinkHappening
        ):
            return
        topic = topic_of(happening)
        pending = self._pending.setdefault(topic, [])
        if len(pending) >= self._burst or not self._buckets[topic].take():
            self._count_drop(topic, 1)
            return
        pending.append(happening)
        self._schedule()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """The instance serves: publish what was kept, and sample the SOW from now on."""
        self._started = True
        if self._pending:
            self._schedule()
        if SOW_STATS in self.topics:
            self._sampler = asyncio.get_running_loop().create_task(
                self._sample(), name="spool-sow-stats"
            )

    async def close(self) -> None:
        """Shutdown: stop sampling, publish what is kept, publish nothing after."""
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None
        if self._started:
            self._flush()
        self._closed = True

    def counters(self) -> dict[str, EventTopicCounters]:
        """Per topic: published, dropped, refused (the metrics snapshot)."""
        return {
            t: {"published": self.published[t], "dropped": self.dropped[t],
                "refused": self.refused[t]}
            for t in sorted(self.topics)
        }  # fmt: skip

    # -- publishing ---------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._started and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Each topic's kept happenings as one run (a publish may close a slow subscriber,
        whose happenings then go to the next flush)."""
        self._scheduled = False
        pending, self._pending = self._pending, {}
        instance, group = self._instance, self._group
        for topic, values in pending.items():
            if values:
                self._publish_run(topic, [encode(v, instance, group) for v in values])

    def _publish_run(self, topic: str, bodies: list[bytes]) -> None:
        failure = self._publish(topic, bodies)
        if failure is None:
            self.published[topic] += len(bodies)
            return
        self.refused[topic] += len(bodies)
        self._report("refused", topic, self.refused[topic], reason=str(failure))

    async def _sample(self) -> None:
        """Every interval, one message per SOW topic on ``/spool/stats/sow``."""
        while True:
            await self._clock.sleep(self._sow_interval)
            if self._closed:
                return
            now = time_us(self._clock)
            bucket = self._buckets[SOW_STATS]
            bodies: list[bytes] = []
            for info in self._sow_stats():
                if bucket.take():
                    bodies.append(encode_sow_stats(info, self._instance, self._group, now))
                else:
                    self._count_drop(SOW_STATS, 1)
            if bodies:
                self._publish_run(SOW_STATS, bodies)

    def _count_drop(self, topic: str, count: int) -> None:
        self.dropped[topic] += count
        self._report("dropped", topic, self.dropped[topic])

    def _report(self, what: str, topic: str, total: int, **fields: object) -> None:
        """An event-log warning at most once a minute per topic and kind."""
        now = self._clock.monotonic()
        last = self._reported.get((what, topic))
        if last is not None and now - last[0] < REPORT_INTERVAL:
            return
        since = total - last[1] if last is not None else total
        self._reported[(what, topic)] = (now, total)
        detail = (
            f"over MaxEventsPerSecond ({self._burst}): dropped, not published"
            if what == "dropped"
            else "the publish path refused them"
        )
        self._events.emit(
            "warning", "events", f"event_topic_{what}", topic=topic, messages=since,
            total=total, detail=detail, **fields,
        )  # fmt: skip
