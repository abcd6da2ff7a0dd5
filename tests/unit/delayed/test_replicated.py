"""Delayed delivery across a replicated pair on the memory fabric (virtual clock): the
replica holds the stored message at once and delivers it at its due time from its own
clock, also when the instance it was published on is gone; a topic a replicated queue
takes refuses delayed publishes."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.support.engine import FakeClient
from tests.support.fabric import A, B, drive, fabric_of, linked, pair, scenario, xml
from tests.support.replication import destination
from tests.unit.queues.test_replicated_queues import QUEUE


def subscribed(client: FakeClient) -> FakeClient:
    client.send(({"c": "subscribe", "t": "t", "sub_id": "s"}, b""))
    return client


def delivered(client: FakeClient) -> list[int]:
    return [orjson.loads(body)["n"] for _, body in client.deliveries("s")]


@scenario
async def test_the_replica_delivers_on_time_after_the_publishing_instance_is_gone(
    tmp_path: Path,
) -> None:
    async with fabric_of(tmp_path, pair(tmp_path)) as (fabric, clock, h):
        await linked(clock, h)
        sub_a = subscribed(await h["a"].logon("sa"))
        sub_b = subscribed(await h["b"].logon("sb"))
        pub = await h["a"].logon("pub")
        start = clock.time()
        pub.send(
            ({"c": "publish", "t": "t", "s": 1, "o": "deliver_after=30s", "a": "persisted",
              "cid": "p1"}, b'{"n":1}'),
            ({"c": "publish", "t": "t", "s": 2, "o": "deliver_after=60s"}, b'{"n":2}'),
        )  # fmt: skip
        delayed_b = h["b"].broker.delayed
        assert delayed_b is not None
        await drive(clock, lambda: delayed_b.info().pending == 2)
        assert delivered(sub_a) == delivered(sub_b) == []
        await drive(clock, lambda: delivered(sub_a) == [1] and delivered(sub_b) == [1])
        assert clock.time() - start >= 30
        # the publishing instance goes away: the replica still delivers on time
        fabric.cut(B, source="a")
        fabric.cut(A, source="b")
        await drive(clock, lambda: delivered(sub_b) == [1, 2])
        assert 60 <= clock.time() - start < 61


@scenario
async def test_a_topic_a_replicated_queue_takes_refuses_delayed_publishes(tmp_path: Path) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), sow=QUEUE),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",)), sow=QUEUE),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        pub = await h["a"].logon("pub")
        pub.send(
            ({"c": "publish", "t": "work-in", "s": 1, "o": "deliver_after=5s", "cid": "p1",
              "a": "processed"}, b'{"n":1}'),
        )  # fmt: skip
        await drive(clock, lambda: pub.acks("processed"))
        (ack,) = pub.acks("processed")
        assert (ack["status"], ack["reason"]) == ("failure", "invalid options")
        assert ack["detail"] == (
            "delayed delivery is not available on 'work-in': replicated queue 'work' takes "
            "it (a replicated queue takes messages in their publishers' order)"
        )
