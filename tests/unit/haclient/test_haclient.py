"""The HA client's reconnect handler over a scripted broker on a virtual clock: the steps
in order, the exact delay schedule, giving up, the publish gap, and an iterator that
outlives connections."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec

import pytest

from spool.server.client import (
    ConnectionState,
    ConnectionStateEvent,
    DefaultServerChooser,
    DefaultSubscriptionManager,
    ExponentialDelayStrategy,
    FixedDelayStrategy,
    HAClient,
    HASubscription,
    MemoryPublishStore,
    PublishGap,
    ReconnectGaveUp,
)
from spool.server.clock import VirtualClock
from spool.server.protocol.errors import NotEntitled, TxlogFull
from tests.unit.haclient.fakebroker import FakeBroker

P = ParamSpec("P")


def run_async(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))

    return wrapper


def make(
    clock: VirtualClock, broker: FakeBroker, uris: tuple[str, ...] = ("ws://a",), **kw: Any
) -> tuple[HAClient, list[ConnectionStateEvent], list[BaseException]]:
    kw.setdefault("delay", FixedDelayStrategy(0.5, clock=clock.monotonic))
    client = HAClient(
        "pub", chooser=DefaultServerChooser(list(uris), max_rounds=kw.pop("max_rounds", None)),
        connector=broker.connect, sleep=clock.sleep, **kw,
    )  # fmt: skip
    events: list[ConnectionStateEvent] = []
    errors: list[BaseException] = []
    client.add_connection_state_listener(events.append)
    client.exception_listener = errors.append
    return client, events, errors


@run_async
async def test_reconnect_runs_the_steps_in_order() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, events, _ = make(clock, broker)
    await client.connect_and_logon()
    sub = await client.subscribe("orders", bookmark="0", sub_id="s1")
    broker.hold_acks = True
    for n in range(1, 6):
        client.publish("orders", b"%d" % n)
    await clock.advance(0)
    assert client.unpersisted_count() == 5  # sent, not acked
    got = [(await sub.get(1)).data for _ in range(5)]
    assert got == [b"1", b"2", b"3", b"4", b"5"]
    # the broker persisted only 3 when it died (it forgets 4 and 5)
    broker.persisted["pub"] = 3
    del broker.log[3:]
    broker.hold_acks = False
    events.clear()
    broker.drop()
    await clock.advance(1)
    assert len(broker.transports) == 2
    assert [e.state for e in events] == [
        ConnectionState.DISCONNECTED, ConnectionState.RECONNECTING, ConnectionState.CONNECTED,
        ConnectionState.LOGGED_ON, ConnectionState.PUBLISH_REPLAYED, ConnectionState.RESUBSCRIBED,
    ]  # fmt: skip
    second = broker.commands[1]
    kinds = [(h["c"], h.get("s"), h.get("sub_id"), h.get("bm")) for h in second]
    assert kinds[0][0] == "logon"
    # republished with their own numbers, in order, then the subscription under its sub_id
    # from the bookmark store's resume point (nothing discarded yet: where it started)
    assert kinds[1:] == [("publish", 4, None, None), ("publish", 5, None, None),
                         ("subscribe", None, "s1", "0")]  # fmt: skip
    await clock.advance(0)
    assert client.unpersisted_count() == 0
    # the replay from EPOCH brings 1..3 again (dropped: already received) and the
    # republished 4 and 5 (dropped too); the next new message comes once
    client.publish("orders", b"6")
    assert (await sub.get(1)).data == b"6"
    assert sub.queue.empty()
    await client.close()


@run_async
async def test_the_exponential_schedule_drives_the_attempts_exactly() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    delay = ExponentialDelayStrategy(initial=1, maximum=8, backoff=2, jitter=0,
                                     clock=clock.monotonic)  # fmt: skip
    client, _, _ = make(clock, broker, delay=delay)
    broker.fail_next = 6
    task = asyncio.create_task(client.connect_and_logon())
    await clock.advance(100)
    await task
    assert [t for _, t in broker.attempts] == [0, 1, 3, 7, 15, 23, 31]
    await client.close()


@run_async
async def test_giving_up_reaches_the_listener_the_waiters_and_the_iterators() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, events, errors = make(clock, broker, uris=("ws://a", "ws://b"), max_rounds=2)
    await client.connect_and_logon()
    sub = await client.subscribe("orders", bookmark="0")
    broker.fail_next = 100
    broker.drop()
    await clock.advance(10)
    assert [u for u, _ in broker.attempts[1:]] == ["ws://a", "ws://b", "ws://a", "ws://b"]
    assert len(errors) == 1 and isinstance(errors[0], ReconnectGaveUp)
    assert "in 2 rounds" in str(errors[0]) and "refused: ws://b" in str(errors[0])
    with pytest.raises(ReconnectGaveUp):
        await sub.get(1)
    with pytest.raises(ReconnectGaveUp):
        client.publish("orders", b"x")
    assert events[-1].state is ConnectionState.CLOSED
    await client.close()


@run_async
async def test_a_publish_gap_is_a_failed_attempt_with_both_numbers_then_giving_up() -> None:
    """A server lacking publishes the store already discarded is reported (both numbers)
    and counts as a failed attempt on that server: the chooser moves on, and with no
    server left the client gives up with the gap as the last error (the browser client
    does the same)."""
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    store = MemoryPublishStore()
    client, _, errors = make(
        clock, broker, uris=("ws://a", "ws://b"), max_rounds=1, publish_store=store,
        error_on_publish_gap=True,
    )  # fmt: skip
    await client.connect_and_logon()
    for n in range(10):
        client.publish("orders", b"%d" % n)
    await client.publish_flush(5)
    assert store.last_discarded == 10
    broker.persisted["pub"] = 4  # both URIs lead to a log that never had 5..10
    broker.drop()
    await clock.advance(5)
    gaps = [e for e in errors if isinstance(e, PublishGap)]
    assert len(gaps) == 2  # one per server tried, the chooser moved on after each
    assert (gaps[0].server_seq, gaps[0].store_seq) == (4, 10)
    assert "up to sequence 4" in str(gaps[0]) and "discarded up to 10" in str(gaps[0])
    assert isinstance(errors[-1], ReconnectGaveUp)
    assert isinstance(errors[-1].last_error, PublishGap)
    assert store.last_discarded == 10  # nothing trimmed by a server that lacked them
    await client.close()


@run_async
async def test_a_refused_logon_is_a_failed_attempt_on_that_server() -> None:
    """A server that refuses the logon (here: the client name is still held at another
    instance of the fabric, whose old connection is not noticed gone yet) is a failed
    attempt on that server: the chooser moves on, the session resumes on the next one,
    and with no server left the refusal is the last error of giving up."""
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, events, errors = make(clock, broker, uris=("ws://a", "ws://b"), max_rounds=2)
    await client.connect_and_logon()
    client.publish("orders", b"1")
    await client.publish_flush(5)
    broker.refuse_logon = ["name in use elsewhere"]
    broker.drop()
    await clock.advance(1)
    assert client.uri == "ws://b" and [u for u, _ in broker.attempts] == ["ws://a"] * 2 + ["ws://b"]
    refused = [e for e in events if e.state is ConnectionState.DISCONNECTED][-1]
    assert refused.uri == "ws://a" and "name in use elsewhere" in refused.detail
    client.publish("orders", b"2")
    await client.publish_flush(5)
    assert [body for _, _, body in broker.log] == [b"1", b"2"]
    broker.refuse_logon = ["shutting down"] * 4
    broker.drop()
    await clock.advance(10)
    assert len(errors) == 1 and isinstance(errors[0], ReconnectGaveUp)
    assert "shutting down" in repr(errors[0].last_error)
    await client.close()


@run_async
async def test_connect_and_logon_after_giving_up_starts_afresh() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    delay = FixedDelayStrategy(0.5, max_total=2, clock=clock.monotonic)
    client, _, errors = make(clock, broker, delay=delay)
    broker.fail_next = 100
    task = asyncio.create_task(client.connect_and_logon())
    await clock.advance(10)
    with pytest.raises(ReconnectGaveUp):
        await task
    assert isinstance(errors[-1], ReconnectGaveUp)
    attempts = len(broker.attempts)
    broker.fail_next = 0  # the network is back
    task = asyncio.create_task(client.connect_and_logon())
    await clock.advance(1)
    await task
    assert len(broker.attempts) == attempts + 1
    client.publish("orders", b"after")
    await client.publish_flush(5)
    await client.close()


@run_async
async def test_failover_reports_the_new_uri_and_the_iterator_has_no_gap_or_duplicate() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)  # one log behind both URIs: a replicated pair
    client, events, _ = make(clock, broker, uris=("ws://a", "ws://b"))
    await client.connect_and_logon()
    sub = await client.subscribe("orders", bookmark="0")
    for n in range(1, 4):
        client.publish("orders", b"%d" % n)
    seen = []
    for i in range(3):
        m = await sub.get(1)
        seen.append(m.data)
        if i == 1:
            client.discard(m)  # the client's form; the message's own below
        else:
            m.discard()
    broker.fail_next = 1  # a is down for good: the chooser moves on to b
    broker.drop()
    await clock.advance(1)
    assert client.uri == "ws://b"
    assert [e.uri for e in events if e.state is ConnectionState.FAILED_OVER] == ["ws://b"]
    resub = broker.commands[-1][-1]
    assert resub["c"] == "subscribe" and resub["bm"].split(",")[0].endswith("|3|")
    for n in range(4, 7):
        client.publish("orders", b"%d" % n)
    seen += [(await sub.get(1)).data for _ in range(3)]
    assert seen == [b"1", b"2", b"3", b"4", b"5", b"6"]
    await client.close()


@run_async
async def test_what_is_published_while_resubscribing_is_sent_once_connected() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, _ = make(clock, broker)
    await client.connect_and_logon()
    await client.subscribe("orders", sub_id="plain")

    def publish_during_resume(event: ConnectionStateEvent) -> None:
        if event.state is ConnectionState.PUBLISH_REPLAYED:
            client.publish("orders", b"late")  # after step 7 sent the store's content

    client.add_connection_state_listener(publish_during_resume)
    broker.drop()
    await clock.advance(1)
    await client.publish_flush(5)
    assert [body for _, _, body in broker.log] == [b"late"]
    assert client.unpersisted_count() == 0
    await client.close()


@run_async
async def test_connect_and_logon_twice_keeps_one_connection() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, _ = make(clock, broker)
    first = await client.connect_and_logon()
    assert await client.connect_and_logon() is first
    assert len(broker.transports) == 1
    await client.close()


@run_async
async def test_plain_subscriptions_are_entered_again_as_they_were() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, _ = make(clock, broker)
    await client.connect_and_logon()
    await client.subscribe("orders", filter="/qty > 1", options="oof", sub_id="p")
    await client.delta_subscribe("quotes", sub_id="d")
    await client.sow_and_subscribe("books", filter="/open = true", sub_id="w", top_n=5,
                                   orderby="/px DESC", batch_size=50, delta=True)  # fmt: skip
    broker.drop()
    await clock.advance(1)
    again = [h for h in broker.commands[1] if "sub_id" in h]
    assert [(h["c"], h["t"], h["sub_id"], h.get("f"), h.get("o"), h.get("bm")) for h in again] == [
        ("subscribe", "orders", "p", "/qty > 1", "oof", None),
        ("delta_subscribe", "quotes", "d", None, None, None),
        ("sow_and_delta_subscribe", "books", "w", "/open = true", None, None),
    ]
    assert (again[-1]["top_n"], again[-1]["orderby"], again[-1]["bs"]) == (5, "/px DESC", 50)
    result = await client.sow("books", filter="/open = true")  # on the new connection
    assert result.records == [] and broker.commands[1][-1]["c"] == "sow"
    assert await client.sow_delete("books", keys=["k1"]) == 0
    assert broker.commands[1][-1]["c"] == "sow_delete"
    assert client.publish_many("orders", [b"a", {"b": 1}]) == 2
    await client.publish_flush(5)
    assert [body for _, _, body in broker.log] == [b"a", b'{"b":1}']
    await client.close()


@run_async
async def test_a_replaced_subscription_manager_decides_what_is_entered_again() -> None:
    class OnlyBookmarked(DefaultSubscriptionManager[HASubscription]):
        async def resubscribe(self, enter: Callable[[HASubscription], Awaitable[None]]) -> None:
            for sub in self.all():
                if sub.spec.bookmark is not None:
                    await enter(sub)
                else:
                    sub.end()

    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, _ = make(clock, broker, subscription_manager=OnlyBookmarked())
    await client.connect_and_logon()
    plain = await client.subscribe("orders", sub_id="plain")
    await client.subscribe("orders", bookmark="0", sub_id="kept")
    broker.drop()
    await clock.advance(1)
    assert [h["sub_id"] for h in broker.commands[1] if h["c"] == "subscribe"] == ["kept"]
    assert [m async for m in plain] == []  # ended by the manager
    await client.close()


@run_async
async def test_unsubscribe_ends_the_iteration_and_close_ends_the_rest() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, _ = make(clock, broker)
    await client.connect_and_logon()
    a = await client.subscribe("orders", sub_id="a")
    b = await client.subscribe("orders", sub_id="b")
    client.publish("orders", b"1")
    assert (await a.get(1)).data == b"1"
    await a.unsubscribe()
    assert [m async for m in a] == []
    assert any(h["c"] == "unsubscribe" and h["sub_id"] == "a" for h in broker.commands[0])
    await client.close()
    assert [m.data async for m in b] == [b"1"]  # what was buffered, then the end


@run_async
async def test_set_heartbeat_on_a_connected_client_asks_the_broker_to_beat() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, _ = make(clock, broker)
    await client.connect_and_logon()
    client.set_heartbeat(5)
    await clock.advance(0)
    assert {"c": "heartbeat", "o": "start,5"}.items() <= broker.commands[0][-1].items()
    broker.drop()
    await clock.advance(1)
    assert broker.commands[1][0]["hb"] == 5  # every later logon asks for it
    await client.close()


@run_async
async def test_a_refused_resubscription_ends_that_iteration_and_reaches_the_listener() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, errors = make(clock, broker)
    await client.connect_and_logon()
    sub = await client.subscribe("orders", sub_id="s")
    broker.drop()
    broker.refuse_subscribe = "not entitled"
    await clock.advance(1)
    with pytest.raises(NotEntitled):
        await sub.get(1)
    assert [type(e) for e in errors] == [NotEntitled]
    await client.close()


@run_async
async def test_a_refused_first_subscribe_raises_and_is_not_kept() -> None:
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, errors = make(clock, broker)
    await client.connect_and_logon()
    broker.refuse_subscribe = "not entitled"
    with pytest.raises(NotEntitled):
        await client.subscribe("secret", sub_id="s")
    assert client.subscriptions.get("s") is None and errors == []
    broker.refuse_subscribe = ""
    await client.subscribe("secret", sub_id="s")  # the sub_id is free again
    await client.close()


@run_async
async def test_a_publish_refused_for_now_stays_until_sent_again_whatever_the_acks_say() -> None:
    """A ``txlog full`` refusal keeps the message: an ack past it (from a broker that wrote
    later ones anyway) discards only what is below it, and the store goes again from it, in
    order, on the same connection, after the delay strategy's wait."""
    clock = VirtualClock()
    broker = FakeBroker(clock.monotonic)
    client, _, errors = make(clock, broker, delay=FixedDelayStrategy(0.5, clock=clock.monotonic))
    await client.connect_and_logon()
    broker.hold_acks = True
    for n in range(1, 5):
        client.publish("orders", b"%d" % n)
    await clock.advance(0)
    failure = {"c": "ack", "a": "processed", "status": "failure", "reason": "txlog full"}
    # the first resend goes at once; hold the link's answers until both acks are in
    await broker.link.reply(
        {**failure, "s": 2}, {"c": "ack", "a": "persisted", "status": "success", "s": 4}
    )
    assert client.publish_store.unpersisted_count() == 3  # 2, 3, 4 kept
    assert client.unpersisted_count() == 3
    assert [type(e) for e in errors] == [TxlogFull]
    await clock.advance(0)
    sent = [h["s"] for h in broker.commands[-1] if h.get("c") == "publish"]
    assert sent == [1, 2, 3, 4, 2, 3, 4] and len(broker.transports) == 1
    # refused again: the next resend waits the strategy's delay
    await broker.link.reply({**failure, "s": 2})
    await clock.advance(0.4)
    assert len([h for h in broker.commands[-1] if h.get("c") == "publish"]) == 7
    await clock.advance(0.1)
    sent = [h["s"] for h in broker.commands[-1] if h.get("c") == "publish"]
    assert sent[7:] == [2, 3, 4]
    client.publish("orders", b"5")
    await clock.advance(0)
    await broker.link.reply({"c": "ack", "a": "persisted", "status": "success", "s": 5})
    assert client.publish_store.unpersisted_count() == 0
    await client.close()
