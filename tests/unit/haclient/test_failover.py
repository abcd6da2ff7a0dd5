"""The HA client and failover safety, over the scripted broker on a virtual clock: the
publish store kept until replicated while failover is unsafe, the notices, the chooser's
preference, the store's bound, MOST_RECENT, and a resumed bookmark subscription that
waits for its server to catch up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import (
    MOST_RECENT,
    CatchUpTimeout,
    ConnectionState,
    ConnectionStateEvent,
    DefaultServerChooser,
    FailoverSafety,
    FixedDelayStrategy,
    HAClient,
    HASubscription,
    MemoryBookmarkStore,
    MemoryPublishStore,
    PublishStoreFull,
)
from spool.server.client.ha import ACTIVE, CATCHING_UP, ENDED
from spool.server.clock import VirtualClock
from tests.unit.haclient.fakebroker import FakeBroker
from tests.unit.haclient.test_haclient import make, run_async


def unsafe_broker(clock: VirtualClock) -> FakeBroker:
    broker = FakeBroker(clock.monotonic)
    broker.failover = "unsafe"
    broker.options = frozenset({"failover", "replicated"})
    return broker


@run_async
async def test_while_failover_is_unsafe_only_replicated_acks_empty_the_store() -> None:
    clock = VirtualClock()
    broker = unsafe_broker(clock)
    store = MemoryPublishStore()
    client, _, _ = make(clock, broker, publish_store=store)
    told: list[tuple[str, FailoverSafety]] = []
    client.add_failover_listener(lambda uri, safety: told.append((uri, safety)))
    info = await client.connect_and_logon()
    assert info.options == ("failover", "replicated")
    assert broker.commands[0][0]["o"] == "failover,replicated"
    assert told[0][0] == "ws://a" and not told[0][1].safe and told[0][1].detail == "logon"
    for n in range(1, 11):
        client.publish("orders", b"%d" % n)
    await client.publish_flush(5)  # persisted by the broker...
    assert client.unpersisted_count() == 0
    assert client.unreplicated_count() == 10  # ...but kept: not on every destination yet
    await broker.link.reply({"c": "ack", "a": "replicated", "status": "success", "s": 6})
    assert client.unreplicated_count() == 4
    # the broker dies and comes back with its log: everything the store holds is sent
    # again (the logon's s does not trim it), the broker drops them as duplicates
    broker.drop()
    await clock.advance(1)
    again = [h["s"] for h in broker.commands[1] if h["c"] == "publish"]
    assert again == [7, 8, 9, 10]
    assert client.unreplicated_count() == 4
    # a downgrade's notice, then safe again: from then on persisted acks empty the store
    await broker.link.reply({"c": "ack", "a": "failover", "status": "success",
                             "failover": "safe", "async_links": "", "detail": "upgraded"})  # fmt: skip
    assert client.safety is not None and client.safety.safe
    assert told[-1][1].detail == "upgraded"
    client.publish("orders", b"11")
    await clock.advance(0)
    assert client.unreplicated_count() == 0  # the persisted ack of 11 covers 7..11
    await client.publish_flush(5, replicated=True)
    await client.close()


@run_async
async def test_a_broker_without_replicated_acks_is_trusted_on_its_persisted_acks() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    broker.failover = "unsafe"  # says unsafe, but predates the logon options
    store = MemoryPublishStore()
    client, _, _ = make(clock, broker, publish_store=store)
    await client.connect_and_logon()
    for n in range(5):
        client.publish("orders", b"%d" % n)
    await client.publish_flush(5, replicated=True)
    assert store.unpersisted_count() == 0
    await client.close()


@run_async
async def test_a_full_store_refuses_publishes_until_the_broker_confirms_some() -> None:
    clock = VirtualClock()
    broker = unsafe_broker(clock)
    client, _, _ = make(clock, broker, publish_store=MemoryPublishStore(capacity=5))
    await client.connect_and_logon()
    client.publish_many("orders", [b"%d" % n for n in range(4)])
    client.publish("orders", b"4")
    with pytest.raises(PublishStoreFull, match="capacity of 5") as err:
        client.publish("orders", b"5")
    assert "peak rate x longest outage" in str(err.value)
    with pytest.raises(PublishStoreFull):
        client.publish_many("orders", [b"a", b"b"])
    waiter = asyncio.create_task(client.wait_for_room(2))
    await clock.advance(0)
    assert not waiter.done()  # persisted, not replicated: still held
    await broker.link.reply({"c": "ack", "a": "replicated", "status": "success", "s": 2})
    await asyncio.wait_for(waiter, 1)
    client.publish_many("orders", [b"a", b"b"])
    with pytest.raises(ValueError, match="cannot fit"):
        await client.wait_for_room(6)
    with pytest.raises(TimeoutError):
        await client.wait_for_room(1, timeout=0.01)
    await client.close()


def test_the_chooser_moves_on_to_the_servers_last_known_safe_first() -> None:
    chooser = DefaultServerChooser(["ws://a", "ws://b", "ws://c", "ws://d"])
    chooser.report_safety("ws://b", False)
    chooser.report_safety("ws://c", True)
    chooser.report_safety("ws://a", False)
    tried = []
    for _ in range(8):
        uri = chooser.current_uri()
        assert uri is not None
        tried.append(uri)
        chooser.report_failure(OSError("down"), uri)
    # from a (unsafe): c (safe), d (unknown), then the other unsafe one; each rotation
    # tries every URI once, the safest first
    assert tried == ["ws://a", "ws://c", "ws://d", "ws://b", "ws://c", "ws://d", "ws://a",
                     "ws://b"]  # fmt: skip
    chooser.report_success("ws://b")
    assert chooser.current_uri() == "ws://b"  # a working server is not left for a safer one


@run_async
async def test_the_client_tells_the_chooser_what_each_server_said() -> None:
    clock = VirtualClock()
    broker = unsafe_broker(clock)
    client, _, _ = make(clock, broker, uris=("ws://a", "ws://b"))
    await client.connect_and_logon()
    chooser = client.chooser
    assert isinstance(chooser, DefaultServerChooser)
    assert chooser.safety("ws://a") is False
    await broker.link.reply({"c": "ack", "a": "failover", "status": "success",
                             "failover": "safe", "async_links": ""})  # fmt: skip
    assert chooser.safety("ws://a") is True
    await client.close()


@run_async
async def test_most_recent_resumes_from_the_store_and_starts_at_epoch_without_one() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    store = MemoryBookmarkStore()
    client, _, _ = make(clock, broker, bookmark_store=store)
    await client.connect_and_logon()
    for n in range(1, 4):
        client.publish("orders", b"%d" % n)
    await client.publish_flush(5)
    sub = await client.subscribe("orders", bookmark=MOST_RECENT, sub_id="r")
    subscribe = [h for h in broker.commands[0] if h["c"] == "subscribe"][-1]
    assert subscribe["bm"] == "0"  # nothing stored: EPOCH, never the name itself
    first = await sub.get(1)
    first.discard()
    await sub.unsubscribe()
    again = await client.subscribe("orders", bookmark=MOST_RECENT, sub_id="r")
    subscribe = [h for h in broker.commands[0] if h["c"] == "subscribe"][-1]
    assert subscribe["bm"] == first.bookmark
    # 2 and 3 were handed out already in this process (received, not discarded): the
    # replay's copies are dropped; the next new message comes
    client.publish("orders", b"4")
    assert (await again.get(1)).data == b"4"
    await client.close()


async def _resumed_subscription(
    clock: VirtualClock, broker: FakeBroker, **kw: Any
) -> tuple[HAClient, HASubscription, list[ConnectionStateEvent], list[BaseException]]:
    client, events, errors = make(clock, broker, uris=("ws://a", "ws://b"), **kw)
    await client.connect_and_logon()
    for n in range(1, 6):
        client.publish("orders", b"%d" % n)
    await client.publish_flush(5)
    sub = await client.subscribe("orders", bookmark="0", sub_id="r")
    for _ in range(5):
        (await sub.get(1)).discard()
    # the failover lands on a server whose log lacks what the subscriber processed
    del broker.log[2:]
    broker.persisted["pub"] = 2
    events.clear()
    broker.drop()
    await clock.advance(0.1)
    return client, sub, events, errors


@run_async
async def test_a_resumed_subscription_waits_for_its_server_to_catch_up() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, sub, events, errors = await _resumed_subscription(
        clock, broker, catch_up_timeout=30.0, catch_up_retry=1.0
    )
    assert sub.state == CATCHING_UP
    subscribes = [h for h in broker.commands[1] if h["c"] == "subscribe"]
    assert "bookmark_not_found=fail" in subscribes[0]["o"]
    states = [e.state for e in events]
    assert ConnectionState.CATCHING_UP in states and ConnectionState.RESUBSCRIBED in states
    await clock.advance(5)
    assert sub.state == CATCHING_UP and sub.waited == 5.0
    client.publish("orders", b"6")  # publishing goes on meanwhile
    # the publisher's store republishes what the failed server had: the resume point is
    # in this server's log now
    for n in (3, 4, 5):
        broker.log.insert(n - 1, (f"{pub_hash('pub')}|{n}|", "orders", b"%d" % n))
    await clock.advance(1)
    assert sub.state == ACTIVE
    assert events[-1].state is ConnectionState.CAUGHT_UP
    assert (await sub.get(1)).data == b"6"  # nothing repeated, nothing skipped
    assert not errors
    await client.close()


@pytest.mark.parametrize("policy", ["epoch", "now", "fail"])
@run_async
async def test_the_catch_up_policy_applies_after_the_timeout_and_is_reported(policy: str) -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, sub, _events, errors = await _resumed_subscription(
        clock, broker, catch_up_timeout=3.0, catch_up_retry=1.0, catch_up_policy=policy
    )
    await clock.advance(10)
    timeouts = [e for e in errors if isinstance(e, CatchUpTimeout)]
    assert len(timeouts) == 1 and timeouts[0].policy == policy and timeouts[0].sub_id == "r"
    last = [h for h in broker.commands[1] if h["c"] == "subscribe"][-1]
    if policy == "fail":
        assert sub.state == ENDED
        with pytest.raises(CatchUpTimeout):
            await sub.get(1)
    else:
        assert sub.state == ACTIVE
        assert last["bm"] == ("0" if policy == "epoch" else "0|1|")
        assert "bookmark_not_found" not in str(last.get("o"))
        client.publish("orders", b"7")
        assert (await sub.get(1)).data == b"7"
    await client.close()


def test_a_catch_up_policy_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="catch_up_policy must be one of fail, epoch, now"):
        HAClient("x", chooser=DefaultServerChooser(["ws://a"]), catch_up_policy="later",
                 delay=FixedDelayStrategy(1))  # fmt: skip


@run_async
async def test_no_catch_up_time_replays_the_new_server_from_its_start_at_once() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, sub, _events, errors = await _resumed_subscription(
        clock, broker, catch_up_timeout=0.0, catch_up_retry=1.0
    )
    await clock.advance(0)
    subscribes = [h for h in broker.commands[1] if h["c"] == "subscribe"]
    assert [h["bm"] for h in subscribes][-1] == "0"  # EPOCH, without waiting a retry
    assert sub.state == ACTIVE and sub.waited == 0.0
    assert [e.policy for e in errors if isinstance(e, CatchUpTimeout)] == ["epoch"]
    await client.close()
