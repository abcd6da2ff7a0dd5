"""The happenings bus: which sinks are told of what, in which order, and a sink that
raises is reported without breaking the producer or the other sinks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from spool.server.clock import VirtualClock
from spool.server.happenings import INTEREST_LIMIT, REPORT_INTERVAL, Happenings
from spool.server.ports import (
    ClientHappening,
    Happening,
    HappeningFamily,
    LinkHappening,
    SubscriptionHappening,
)


class Events:
    def __init__(self) -> None:
        self.got: list[tuple[str, str, str, dict[str, Any]]] = []

    def emit(self, level: str, category: str, event: str, **fields: object) -> None:
        self.got.append((level, category, event, fields))


@dataclass
class Sink:
    families: frozenset[HappeningFamily]
    got: list[Happening] = field(default_factory=list)
    fails: bool = False

    def happened(self, happening: Happening) -> None:
        self.got.append(happening)
        if self.fails:
            raise ValueError("the sink broke")


def client(
    event: Literal["connected", "disconnected"] = "connected", connection: int = 1
) -> ClientHappening:
    return ClientHappening(event, 1, connection, None, None, "127.0.0.1:5000", "websocket")


def subscription() -> SubscriptionHappening:
    return SubscriptionHappening(
        "added", 2, 1, "c", None, "s1", "subscribe", "live", "orders", None, "", "none"
    )


def link() -> LinkHappening:
    return LinkHappening("connected", 3, "out", "b", "b", True, "sync", "")


def test_without_sinks_every_flag_is_down_and_nothing_happens() -> None:
    bus = Happenings(Events(), VirtualClock())
    assert (bus.clients, bus.subscriptions, bus.links) == (False, False, False)
    bus.emit(client())  # nobody to tell: no error


def test_each_sink_gets_its_families_in_order_and_the_flags_follow() -> None:
    bus = Happenings(Events(), VirtualClock())
    first = Sink(frozenset({"clients", "links"}))
    second = Sink(frozenset({"clients"}))
    bus.add(first)
    bus.add(second)
    assert (bus.clients, bus.subscriptions, bus.links) == (True, False, True)
    values = [client(connection=1), subscription(), link(), client("disconnected", 1)]
    for value in values:
        bus.emit(value)
    assert first.got == [values[0], values[2], values[3]]
    assert second.got == [values[0], values[3]]


def test_a_sink_that_raises_is_reported_once_a_minute_and_the_others_still_hear() -> None:
    events = Events()
    clock = VirtualClock()
    bus = Happenings(events, clock)
    broken = Sink(frozenset({"clients"}), fails=True)
    after = Sink(frozenset({"clients"}))
    bus.add(broken)
    bus.add(after)
    for n in range(3):
        bus.emit(client(connection=n))
    assert len(after.got) == 3 and bus.failures == 3
    (report,) = events.got
    assert report[:3] == ("error", "happenings", "sink_failed")
    assert report[3]["sink"] == "Sink" and "the sink broke" in str(report[3]["error"])
    asyncio.run(clock.advance(REPORT_INTERVAL))
    bus.emit(client(connection=4))
    assert len(events.got) == 2 and events.got[1][3]["failures"] == 4


def test_after_close_no_sink_is_told_and_none_can_be_added() -> None:
    bus = Happenings(Events(), VirtualClock())
    sink = Sink(frozenset({"clients", "subscriptions", "links"}))
    bus.add(sink)
    bus.close()
    assert (bus.clients, bus.subscriptions, bus.links) == (False, False, False)
    bus.emit(client())
    assert sink.got == []
    with pytest.raises(RuntimeError):
        bus.add(Sink(frozenset({"clients"})))


@dataclass
class TopicWatcher:
    families: frozenset[HappeningFamily]
    prefix: str
    asked: list[tuple[HappeningFamily, str]] = field(default_factory=list)

    def happened(self, happening: Happening) -> None:
        pass

    def watches(self, family: HappeningFamily, topic: str) -> bool:
        self.asked.append((family, topic))
        return topic.startswith(self.prefix)


def test_sow_interest_asks_the_sinks_once_per_topic_and_family() -> None:
    bus = Happenings(Events(), VirtualClock())
    assert not bus.sow_removals and not bus.sow_changes
    assert bus.sow_interest("sow_removals", "orders") is False  # no sink: nobody watches
    watcher = TopicWatcher(frozenset({"sow_removals"}), "ord")
    bus.add(watcher)
    assert bus.sow_removals and not bus.sow_changes
    assert [bus.sow_interest("sow_removals", t) for t in ("orders", "orders", "book")] == [
        True, True, False,
    ]  # fmt: skip
    assert bus.sow_interest("sow_changes", "orders") is False  # not its family
    assert watcher.asked == [("sow_removals", "orders"), ("sow_removals", "book")]
    other = TopicWatcher(frozenset({"sow_removals", "sow_changes"}), "bo")
    bus.add(other)  # a new sink: the answers are asked again
    assert bus.sow_interest("sow_removals", "book") is True
    assert bus.sow_interest("sow_changes", "book") is True


def test_sow_interest_forgets_every_topic_when_full() -> None:
    bus = Happenings(Events(), VirtualClock())
    watcher = TopicWatcher(frozenset({"sow_changes"}), "a")
    bus.add(watcher)
    topics = [f"a{i}" for i in range(INTEREST_LIMIT)]
    for topic in topics:
        assert bus.sow_interest("sow_changes", topic)
    assert bus.sow_interest("sow_changes", "a0")  # remembered
    assert len(watcher.asked) == INTEREST_LIMIT
    assert bus.sow_interest("sow_changes", "b") is False  # one more: all forgotten
    assert bus.sow_interest("sow_changes", "a0")
    assert [t for _, t in watcher.asked[-2:]] == ["b", "a0"]


def test_a_sow_sink_that_cannot_say_what_it_watches_is_refused() -> None:
    bus = Happenings(Events(), VirtualClock())
    with pytest.raises(TypeError, match="says which topics it watches"):
        bus.add(Sink(frozenset({"sow_removals"})))
