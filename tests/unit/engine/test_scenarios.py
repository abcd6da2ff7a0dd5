"""Engine behaviour as scenarios: a real Broker in this process, on a virtual clock.

Each test drives the engine through its real seams (frames into a session, the admin
surface, the publish pipeline) and asserts exact virtual times where time matters.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from spool.server.bookmarks import format_bookmark, pub_hash
from spool.server.ports import Origin, PublishRun
from spool.server.protocol.errors import InvalidOptions
from tests.support.engine import EngineHarness, FakeClient, scenario


def publish(topic: str, body: bytes, **header: Any) -> tuple[dict[str, Any], bytes]:
    return {"c": "publish", "t": topic, **header}, body


def subscribe(topic: str, sub_id: str, **header: Any) -> tuple[dict[str, Any], bytes]:
    return {"c": "subscribe", "t": topic, "sub_id": sub_id, "a": "processed", **header}, b""


def bodies(client: FakeClient, sub_id: str) -> list[bytes]:
    return [b for _, b in client.deliveries(sub_id)]


# -- heartbeats ------------------------------------------------------------------------


@scenario
async def test_heartbeat_kept_alive_by_beats_and_closed_two_intervals_after_silence(
    tmp_path: Path,
) -> None:
    async with EngineHarness(tmp_path) as h:
        c = await h.logon("hb", hb=1)
        beats: list[float] = []
        for _ in range(5):
            # the client answers each beat half an interval later
            await h.clock.advance(0.5)
            c.send(({"c": "heartbeat", "o": "beat"}, b""))
            await h.clock.advance(0.5)
            beats.extend(h.clock.monotonic() for hd, _ in c.new() if hd.get("c") == "heartbeat")
        assert beats == [1.0, 2.0, 3.0, 4.0, 5.0]
        assert not c.closed
        # silence from t=4.5: the beat at 6.0 still goes out (1.5 s since the last one),
        # at 7.0 the client has been silent for 2.5 s > 2 intervals
        await h.clock.advance(1.999)
        assert not c.closed
        assert [hd.get("c") for hd, _ in c.new()] == ["heartbeat"]  # the one at 6.0
        await h.clock.advance(0.001)
        assert c.closed
        assert c.transport.close_reason == "heartbeat"


# -- publishing ------------------------------------------------------------------------


@scenario
async def test_a_duplicate_inside_a_run_is_answered_alone_and_splits_it(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(subscribe("orders", "s"))
        await h.settle()
        pub = await h.logon("pub")
        pub.send(
            publish("orders", b"1", s=1, a="processed", cid="1"),
            publish("orders", b"2", s=2, a="processed", cid="2"),
            publish("orders", b"2again", s=2, a="processed", cid="3"),
            publish("orders", b"3", s=3, a="processed", cid="4"),
        )
        await h.settle()
        acks = [(a["cid"], a["status"], a.get("reason")) for a in pub.acks("processed")]
        assert acks == [
            ("1", "success", None),
            ("2", "success", None),
            ("3", "failure", "duplicate"),
            ("4", "success", None),
        ]
        assert bodies(sub, "s") == [b"1", b"2", b"3"]
        assert h.last_seq == 3


@scenario
async def test_acks_interleave_with_deliveries_on_the_publishers_own_connection(
    tmp_path: Path,
) -> None:
    async with EngineHarness(tmp_path) as h:
        c = await h.logon("both")
        c.send(subscribe("t", "own"))
        await h.settle()
        c.new()
        c.send(
            publish("t", b"a", a="processed", cid="1"),
            publish("t", b"b"),
            publish("t", b"c", a="received,processed", cid="3"),
        )
        await h.settle()
        seen = [(m.get("c"), m.get("a") or bytes(b).decode()) for m, b in c.new()]
        assert seen == [
            ("ack", "processed"),
            ("publish", "a"),
            ("publish", "b"),
            ("ack", "received"),
            ("ack", "processed"),
            ("publish", "c"),
        ]


@scenario
async def test_a_replicated_run_keeps_its_publishers_bookmark(tmp_path: Path) -> None:
    """An origin that is not the publisher: the bookmark is the record's, not the link's."""
    async with EngineHarness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(subscribe("md", "live"), subscribe("md", "bm", bm="0"))
        await h.settle()
        elsewhere = pub_hash("a-client-on-another-instance")
        link = Origin("replication", "link-from-b", None, None)
        h.broker.pipeline.publish(
            link, PublishRun("md", elsewhere, [41, 42], [b"x", b"y"], [], path=("b",))
        )
        await h.commit()
        await h.until(lambda: len(sub.deliveries("bm")) == 2)
        for sid in ("live", "bm"):
            assert [hd["bm"] for hd, _ in sub.deliveries(sid)] == [
                format_bookmark(elsewhere, 41),
                format_bookmark(elsewhere, 42),
            ]
        assert h.broker.txlog is not None
        assert h.broker.txlog.publisher_last(elsewhere) == 42


# -- options and commands refused until their subsystem exists --------------------------


@pytest.mark.parametrize(
    ("options", "bookmark"),
    [
        ("oof", None),
        ("no_sowkey", None),
        ("max_backlog=10", None),
        ("oof", "0"),
        ("top_n=5", None),
        ("conflation=1s", None),
        ("fully_durable", None),
    ],
)
def test_options_that_would_be_ignored_are_refused(
    tmp_path: Path, options: str, bookmark: str | None
) -> None:
    async def body() -> None:
        async with EngineHarness(tmp_path) as h:
            c = await h.logon("c")
            extra = {"bm": bookmark} if bookmark else {}
            c.send(subscribe("t", "s", o=options, cid="sub", **extra))
            await h.settle()
            (ack,) = c.acks("processed")
            assert (ack["status"], ack["reason"]) == ("failure", "invalid options")
            assert c.session.subs == {}

    asyncio.run(body())


@scenario
async def test_delta_publish_is_refused_and_nothing_is_logged(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path) as h:
        c = await h.logon("c")
        c.send(({"c": "delta_publish", "t": "t", "cid": "d", "a": "processed"}, b'{"a":1}'))
        await h.settle()
        (ack,) = c.acks("processed")
        assert (ack["status"], ack["reason"]) == ("failure", "invalid topic")
        assert h.last_seq == 0


# -- bookmark subscriptions: pause, resume, durability ---------------------------------


@scenario
async def test_pausing_a_live_subscription_is_refused_over_the_admin_surface(
    tmp_path: Path,
) -> None:
    async with EngineHarness(tmp_path) as h:
        c = await h.logon("c")
        c.send(subscribe("t", "fast", bm="0", o="live"))
        await h.settle()
        with pytest.raises(InvalidOptions):
            h.broker.operations.pause_subscription("c", "fast")
        assert c.session.subs["fast"].progress.state != "paused"


@scenario
async def test_subscriptions_resumed_together_deliver_only_durable_records_in_log_order(
    tmp_path: Path,
) -> None:
    async with EngineHarness(tmp_path, flush_interval="100ms") as h:
        c = await h.logon("c")
        c.send(subscribe("a", "A", bm="0"), subscribe("b", "B", bm="0", o="fully_durable"))
        await h.settle()
        ops = h.broker.operations
        ops.pause_subscription("c", "A")
        ops.pause_subscription("c", "B")
        assert [s.progress.state for s in c.session.subs.values()] == ["paused", "paused"]
        p = await h.logon("p")
        # the first group commit runs at once; the next one waits for the window (the
        # virtual clock does not move until the test advances it)
        p.send(publish("warm-up", b"w"))
        await h.until(lambda: h.durable_seq == 1)
        p.send(publish("a", b"a1"), publish("b", b"b1"), publish("a", b"a2"))
        await h.settle()
        ops.resume_subscriptions("c", ["A", "B"])
        await h.settle()
        # appended, not yet durable: nothing may be delivered to either
        assert h.durable_seq == 1 and h.last_seq == 4
        assert c.deliveries() == []
        await h.commit()
        await h.until(lambda: len(c.deliveries()) == 3)
        assert [b for _, b in c.deliveries()] == [b"a1", b"b1", b"a2"]
        assert [hd["sids"] for hd, _ in c.deliveries()] == ["A", "B", "A"]


@scenario
async def test_a_paused_subscription_receives_nothing_until_resumed(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path) as h:
        c = await h.logon("c")
        c.send(subscribe("t", "s", bm="0", o="pause"))
        p = await h.logon("p")
        p.send(publish("t", b"1"), publish("t", b"2"))
        await h.commit()
        await h.clock.advance(5.0)
        assert c.deliveries() == []
        assert c.session.subs["s"].progress.state == "paused"
        c.send(({"c": "subscribe", "t": "t", "sub_id": "s", "o": "resume"}, b""))
        await h.until(lambda: len(c.deliveries()) == 2)
        assert bodies(c, "s") == [b"1", b"2"]
