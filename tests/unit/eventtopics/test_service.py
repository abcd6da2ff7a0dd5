"""The event topics service on a virtual clock with a recording publisher: one run per
topic per turn, the budget and its reports, refusals counted, SOW samples every
interval, nothing before start is lost and nothing after close is published."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import orjson

from spool.server.clock import VirtualClock
from spool.server.eventtopics import EventTopics
from spool.server.eventtopics.messages import CLIENTS, LINKS, SOW_STATS, SUBSCRIPTIONS
from spool.server.ports import ClientHappening, LinkHappening
from spool.server.protocol.errors import ProtocolFailure, TxlogFull
from spool.server.sow.admin import SowTopicInfo


class Events:
    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []

    def emit(self, level: str, category: str, event: str, **fields: object) -> None:
        self.got.append((event, fields))


class Publisher:
    def __init__(self) -> None:
        self.runs: list[tuple[str, list[dict[str, Any]]]] = []
        self.refuse: ProtocolFailure | None = None

    def __call__(self, topic: str, bodies: Sequence[bytes]) -> ProtocolFailure | None:
        if self.refuse is not None:
            return self.refuse
        self.runs.append((topic, [orjson.loads(b) for b in bodies]))
        return None


def info(topic: str, records: int) -> SowTopicInfo:
    return SowTopicInfo(
        topic=topic, rule=topic, durability="transient", recorded=False, records=records,
        bytes=0, key_paths=[], expiration=0.0, subscribers=0, file=None, file_bytes=None,
        file_seq=None, unwritten=None, last_compaction=None, write_error=None,
    )  # fmt: skip


def service(
    clock: VirtualClock, publisher: Publisher, events: Events, topics: set[str],
    per_second: int = 1000, sow: list[SowTopicInfo] | None = None,
) -> EventTopics:  # fmt: skip
    return EventTopics(
        frozenset(topics), max_per_second=per_second, sow_interval=5.0, instance="a",
        group="g", publish=publisher, clock=clock, events=events,
        sow_stats=lambda: list(sow or []),
    )  # fmt: skip


def connected(n: int) -> ClientHappening:
    return ClientHappening("connected", 1, n, None, None, "127.0.0.1:1", "websocket")


def link() -> LinkHappening:
    return LinkHappening("disconnected", 1, "out", "b", "b", False, "sync", "lost")


def test_one_run_per_topic_per_turn_and_only_the_families_turned_on() -> None:
    async def scenario() -> None:
        clock, pub, events = VirtualClock(), Publisher(), Events()
        topics = service(clock, pub, events, {CLIENTS, LINKS})
        assert topics.families == frozenset({"clients", "links"})
        topics.start()
        for n in range(50):
            topics.happened(connected(n))
        topics.happened(link())
        await asyncio.sleep(0)
        assert [(t, len(docs)) for t, docs in pub.runs] == [(CLIENTS, 50), (LINKS, 1)]
        assert [d["connection"] for d in pub.runs[0][1]] == list(range(50))
        assert topics.counters()[CLIENTS] == {"published": 50, "dropped": 0, "refused": 0}
        assert SUBSCRIPTIONS not in topics.counters()

    asyncio.run(scenario())


def test_what_comes_before_start_is_kept_and_published_at_start() -> None:
    async def scenario() -> None:
        clock, pub, events = VirtualClock(), Publisher(), Events()
        topics = service(clock, pub, events, {LINKS})
        topics.happened(link())
        await asyncio.sleep(0)
        assert pub.runs == []
        topics.start()
        await asyncio.sleep(0)
        assert [t for t, _ in pub.runs] == [LINKS]

    asyncio.run(scenario())


def test_a_storm_is_cut_at_the_budget_and_reported_once_a_minute() -> None:
    async def scenario() -> None:
        clock, pub, events = VirtualClock(), Publisher(), Events()
        topics = service(clock, pub, events, {CLIENTS}, per_second=10)
        topics.start()
        for n in range(100):
            topics.happened(connected(n))
        await asyncio.sleep(0)
        assert sum(len(docs) for _, docs in pub.runs) == 10
        assert topics.dropped[CLIENTS] == 90
        assert [(e, f["messages"]) for e, f in events.got] == [("event_topic_dropped", 1)]
        await clock.advance(61)
        for n in range(100):
            topics.happened(connected(n))
        await asyncio.sleep(0)
        assert sum(len(docs) for _, docs in pub.runs) == 20
        assert [(e, f["total"]) for e, f in events.got] == [
            ("event_topic_dropped", 1), ("event_topic_dropped", 91),
        ]  # fmt: skip
        assert events.got[1][1]["messages"] == 90

    asyncio.run(scenario())


def test_a_refused_run_is_counted_and_reported() -> None:
    async def scenario() -> None:
        clock, pub, events = VirtualClock(), Publisher(), Events()
        topics = service(clock, pub, events, {CLIENTS})
        topics.start()
        pub.refuse = TxlogFull("the log cannot write")
        topics.happened(connected(1))
        topics.happened(connected(2))
        await asyncio.sleep(0)
        assert topics.counters()[CLIENTS] == {"published": 0, "dropped": 0, "refused": 2}
        ((event, fields),) = events.got
        assert event == "event_topic_refused" and "cannot write" in str(fields["reason"])

    asyncio.run(scenario())


def test_the_sow_is_sampled_every_interval() -> None:
    async def scenario() -> None:
        clock, pub, events = VirtualClock(), Publisher(), Events()
        sow = [info("a", 1), info("b", 2)]
        topics = service(clock, pub, events, {SOW_STATS}, sow=sow)
        topics.start()
        await clock.advance(4.9)
        assert pub.runs == []
        await clock.advance(0.1)
        ((topic, docs),) = pub.runs
        assert topic == SOW_STATS and [(d["topic"], d["records"]) for d in docs] == [
            ("a", 1), ("b", 2),
        ]  # fmt: skip
        assert docs[0]["time_us"] == int(clock.time() * 1_000_000)
        await clock.advance(5)
        assert len(pub.runs) == 2
        await topics.close()
        await clock.advance(10)
        assert len(pub.runs) == 2

    asyncio.run(scenario())


def test_close_publishes_what_is_kept_and_nothing_after() -> None:
    async def scenario() -> None:
        clock, pub, events = VirtualClock(), Publisher(), Events()
        topics = service(clock, pub, events, {CLIENTS})
        topics.start()
        topics.happened(connected(1))
        await topics.close()
        assert [len(docs) for _, docs in pub.runs] == [1]
        topics.happened(connected(2))
        await asyncio.sleep(0)
        assert [len(docs) for _, docs in pub.runs] == [1]

    asyncio.run(scenario())
