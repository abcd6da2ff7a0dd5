"""No acked message is lost while the client that published it survives: real processes.

Instance ``a`` replicates to ``b`` over a link that does not hold persisted acks (async,
or downgraded over REST while ``b`` is down). An HA publisher on ``a`` (server list a, b)
publishes 10,000 messages, all acked persisted by ``a`` while ``b`` is stopped. ``a`` is
SIGKILLed and its data directory deleted (its disk is lost); ``b`` starts. The publisher
fails over to ``b`` and republishes what ``a`` never confirmed as replicated: ``b`` ends
with every message, once, in order.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import (
    ConnectionState,
    DefaultServerChooser,
    FailoverSafety,
    FilePublishStore,
    FixedDelayStrategy,
    HAClient,
)
from tests.support.replication import Cluster, destination, read_log
from tests.support.wait import async_wait_until, wait_until

pytestmark = [pytest.mark.faults]

TOTAL = 10_000
NAME = "safe-feed"


def _cluster(tmp_path: Path, *, sync: bool) -> Cluster:
    cluster = Cluster(tmp_path, ["a", "b"])
    cluster.add("a", destinations=[destination("b", [cluster.address("b")], sync=sync,
                                               exclude="replicate")])  # fmt: skip
    cluster.add("b")
    return cluster


async def _lose_a_and_fail_over(
    cluster: Cluster,
    tmp_path: Path,
    mid_stream: Callable[[HAClient], Awaitable[None]] | None = None,
) -> tuple[list[FailoverSafety], list[ConnectionState]]:
    a, b = cluster.procs["a"], cluster.procs["b"]
    b_url = f"ws://127.0.0.1:{cluster.port['b']}/amps/json"  # known before b starts
    told: list[FailoverSafety] = []
    states: list[ConnectionState] = []
    client = HAClient(
        NAME,
        publish_store=FilePublishStore(tmp_path / "pub.store"),
        chooser=DefaultServerChooser([a.ws_url, b_url]),
        delay=FixedDelayStrategy(0.1),
        connect_timeout=5,
    )
    client.add_failover_listener(lambda _uri, safety: told.append(safety))
    client.add_connection_state_listener(lambda e: states.append(e.state))
    await client.connect_and_logon()
    assert client.uri == a.ws_url
    for n in range(1, TOTAL + 1):
        client.publish("orders", b'{"n":%d}' % n)
        if n == TOTAL // 5 and mid_stream is not None:
            await mid_stream(client)
        if n % 500 == 0:
            await asyncio.sleep(0)
    await client.publish_flush(60)  # every one acked persisted by a
    assert client.unpersisted_count() == 0
    # ...and none confirmed as replicated: b is down
    assert client.unreplicated_count() == TOTAL
    await asyncio.to_thread(a.kill)
    await asyncio.to_thread(shutil.rmtree, cluster.data_dir("a"))  # a's disk is lost
    await asyncio.to_thread(b.start)
    await client.publish_flush(120, replicated=True)
    assert client.uri == b.ws_url == b_url
    await client.close()
    return told, states


def _at_b(cluster: Cluster) -> list[int]:
    records = asyncio.run(read_log(cluster.procs["b"]))
    return [s for h, s, _, _ in records if h == pub_hash(NAME)]


def test_an_async_link_loses_nothing_when_the_source_and_its_disk_are_lost(
    tmp_path: Path,
) -> None:
    cluster = _cluster(tmp_path, sync=False)
    cluster.start("a")
    try:
        told, states = asyncio.run(_lose_a_and_fail_over(cluster, tmp_path))
    finally:
        cluster.stop()
    assert told[0].failover == "unsafe" and told[0].async_links == ("b",)
    assert ConnectionState.FAILED_OVER in states
    assert _at_b(cluster) == list(range(1, TOTAL + 1)), "b has each once, in order"


def test_a_downgrade_over_rest_mid_stream_loses_nothing_either(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, sync=True)
    cluster.start("a")
    a = cluster.procs["a"]

    async def downgrade(client: HAClient) -> None:
        # b is down and sync: persisted acks wait for it until the operator downgrades
        def held() -> bool:  # durable on a, past the horizon: held for b
            info = cluster.replication("a")
            return bool(info["durable_seq"] > info["horizon"])

        await asyncio.to_thread(wait_until, held, 10, message="acks held for b")
        assert client.unpersisted_count() > 0
        async with httpx.AsyncClient(base_url=a.http_url) as http:
            response = await http.post("/api/replication/b/downgrade")
            assert response.status_code == 200, response.text
        await async_wait_until(lambda: client.safety is not None and not client.safety.safe,
                               timeout=10)  # fmt: skip

    try:
        told, _states = asyncio.run(_lose_a_and_fail_over(cluster, tmp_path, downgrade))
    finally:
        cluster.stop()
    # safe while b was sync (down: the acks waited), then told at once of the downgrade
    assert told[0].failover == "safe" and told[0].down_links == ("b",)
    assert any(t.failover == "unsafe" and "downgraded" in t.detail for t in told)
    assert _at_b(cluster) == list(range(1, TOTAL + 1)), "b has each once, in order"
