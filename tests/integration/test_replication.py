"""Replication between real `spool serve` processes on loopback.

Each test starts its instances on ports chosen before they start (they must know each
other's address), publishes with the Python client, reads the admin API, and reads the
transaction logs back once the processes stopped.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from spool.server.bookmarks import pub_hash
from spool.server.client import Client
from spool.server.protocol.errors import SubIdNotFound
from tests.support.replication import (
    Cluster,
    destination,
    own_identity,
    publish_resending,
    read_log,
)
from tests.support.server import sow_topic
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow]


def _mine(records: list[tuple[int, int, bytes, tuple[str, ...]]], name: str) -> list[int]:
    return [s for h, s, _, _ in records if h == pub_hash(name)]


def test_a_loop_with_passthrough_delivers_every_message_once_everywhere(tmp_path: Path) -> None:
    """A -> B -> C -> A, each passing everything through: every message reaches each
    instance once, and the loop stops at the instance it started from."""
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    ring = {"a": "b", "b": "c", "c": "a"}
    for name, nxt in ring.items():
        cluster.add(
            name,
            destinations=[
                destination(nxt, [cluster.address(nxt)], sync=False, passthrough=(".*",),
                            exclude="replicate,cascade")
            ],
        )  # fmt: skip
    cluster.start()
    try:
        for name in ring:
            wait_until(lambda n=name: cluster.destination(n, ring[n])["connected"], 20)

        async def publish_all() -> None:
            await asyncio.gather(
                *(
                    publish_resending([cluster.procs[n].ws_url], f"pub-{n}", "orders",
                                      range(1, 1001))
                    for n in ring
                )
            )  # fmt: skip

        asyncio.run(publish_all())
        for name in ring:
            wait_until(lambda n=name: cluster.caught_up(n), 30, message=f"{name} caught up")
    finally:
        cluster.stop()
    for name in ring:
        records = asyncio.run(read_log(cluster.procs[name]))
        for publisher in ring:
            assert _mine(records, f"pub-{publisher}") == list(range(1, 1001)), (name, publisher)
        hops = Counter(path for _, _, _, path in records)
        # a's own messages are here with an empty path at a; b's came from c via a loop
        assert hops[()] == 1000
        assert len(records) == 3000


def test_sow_deletes_replicate_both_ways_and_expirations_stay_local(tmp_path: Path) -> None:
    """A <-> B (sync), one SOW topic: a ``sow_delete`` on either instance removes the
    records on both; each logged the other's deletes once, with the other's publisher
    identity and path; an expiration is logged by each instance for itself."""
    cluster = Cluster(tmp_path, ["a", "b"])
    sow = sow_topic("orders", "/id") + sow_topic("quotes", "/id", expiration="1s")
    for name, other in (("a", "b"), ("b", "a")):
        cluster.add(name, sow=sow, destinations=[destination(other, [cluster.address(other)])])
    cluster.start()

    async def sow_of(name: str, topic: str) -> dict[str, bytes]:
        async with Client(cluster.procs[name].ws_url, f"q-{name}") as q:
            return {m.key or "": m.data for m in (await q.sow(topic)).records}

    def keys(name: str, topic: str = "orders") -> set[str]:
        return set(asyncio.run(sow_of(name, topic)))

    try:
        for name, other in (("a", "b"), ("b", "a")):
            wait_until(lambda n=name, o=other: cluster.destination(n, o)["connected"], 20)

        async def write() -> None:
            async with Client(cluster.procs["a"].ws_url, "pub-a") as pa:
                for i in range(10):
                    await pa.publish_acked("orders", b'{"id":%d,"px":%d}' % (i, i % 2))
                await pa.publish_acked("quotes", b'{"id":1}')

        async def delete(name: str, flt: str | None = None, keys: list[str] | None = None) -> int:
            async with Client(cluster.procs[name].ws_url, f"del-{name}") as client:
                return await client.sow_delete("orders", filter=flt, keys=keys)

        asyncio.run(write())
        wait_until(lambda: keys("b") == {str(i) for i in range(10)}, 20, message="publishes")
        assert asyncio.run(delete("a", flt="/px = 1")) == 5
        assert asyncio.run(delete("b", keys=["0", "2"])) == 2
        want = {"4", "6", "8"}
        wait_until(lambda: keys("a") == want and keys("b") == want, 20, message="deletes")
        wait_until(lambda: not keys("a", "quotes") and not keys("b", "quotes"), 20)
        for name in ("a", "b"):
            wait_until(lambda n=name: cluster.caught_up(n), 20, message=f"{name} caught up")
    finally:
        cluster.stop()
    logs = {name: asyncio.run(read_log(cluster.procs[name])) for name in ("a", "b")}
    identity = {name: own_identity(cluster.procs[name]) for name in ("a", "b")}
    for name, other in (("a", "b"), ("b", "a")):
        deletes = [(h, s, path) for h, s, body, path in logs[name] if not body]
        own = sorted(s for h, s, path in deletes if h == identity[name] and not path)
        theirs = sorted(s for h, s, path in deletes if h == identity[other])
        assert own == list(range(1, len(own) + 1)) and theirs == list(range(1, len(theirs) + 1))
        assert len(own) == (5 if name == "a" else 2) and len(theirs) == (2 if name == "a" else 5)
        assert all(path == (other,) for h, _, path in deletes if h == identity[other])
        assert [h for h, _, _ in deletes].count(0) == 1  # its own expiration of the quote


def test_without_passthrough_a_chain_passes_only_its_own_and_filters_apply(
    tmp_path: Path,
) -> None:
    """A -> B -> C without passthrough: C gets only B's own publishes, and B's filtered
    block sends only the matching ones."""
    one_way = "replicate,replicate_filter,cascade"
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    cluster.add("a", destinations=[destination("b", [cluster.address("b")], exclude=one_way)])
    cluster.add(
        "b",
        destinations=[
            destination("c", [cluster.address("c")], topics=(("orders", "/n &lt;= 100"),),
                        exclude=one_way, passthrough=())
        ],
    )  # fmt: skip
    cluster.add("c")
    cluster.start()
    try:
        wait_until(lambda: cluster.destination("b", "c")["connected"], 20)
        wait_until(lambda: cluster.destination("a", "b")["connected"], 20)

        async def publish() -> None:
            await asyncio.gather(
                publish_resending([cluster.procs["a"].ws_url], "pa", "orders", range(1, 301)),
                publish_resending([cluster.procs["b"].ws_url], "pb", "orders", range(1, 301)),
            )

        asyncio.run(publish())
        wait_until(lambda: cluster.caught_up("b") and cluster.caught_up("a"), 30)
    finally:
        cluster.stop()
    b = asyncio.run(read_log(cluster.procs["b"]))
    c = asyncio.run(read_log(cluster.procs["c"]))
    assert _mine(b, "pa") == list(range(1, 301))
    assert _mine(c, "pa") == []  # a's messages arrived at b by replication: not passed on
    assert _mine(c, "pb") == list(range(1, 101))  # only b's own, only those matching
    assert all(path == ("b",) for _, _, _, path in c)


async def _assert_acks_held(cluster: Cluster, client: Client, acked: int) -> None:
    """a's sync horizon stays at ``acked`` though more is durable there (its sync
    destination is down), and the client got no persisted ack beyond it: the reply to a
    command comes after every ack a sent before it on the connection, so none is still
    on its way (an ``unsubscribe`` is answered once processed; ``flush`` would wait for
    the held acks; its refusal is its reply)."""
    info = cluster.replication("a")
    assert info["horizon"] == acked < info["durable_seq"], info
    with pytest.raises(SubIdNotFound):
        await client.unsubscribe("no-such-subscription", timeout=10)
    assert client.persisted_seq == acked
    assert cluster.replication("a")["horizon"] == acked


def test_a_down_sync_destination_stalls_acks_until_a_rest_downgrade_releases_them(
    tmp_path: Path,
) -> None:
    cluster = Cluster(tmp_path, ["a", "b"])
    cluster.add("a", destinations=[destination("b", [cluster.address("b")], exclude="replicate")])
    cluster.add("b")
    cluster.start()
    a_url = cluster.procs["a"].http_url

    async def scenario() -> None:
        async with Client(cluster.procs["a"].ws_url, "pub") as client:
            info = client.logon
            assert info is not None and info.failover == "safe" and info.async_links == ()
            for s in range(1, 101):
                client.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            await client.wait_persisted(100, timeout=20)
            cluster.procs["b"].stop()
            await asyncio.to_thread(
                wait_until, lambda: not cluster.destination("a", "b")["connected"], 20
            )
            for s in range(101, 201):
                client.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            # durable on a, but its sync destination is down: the horizon stays at 100
            await asyncio.to_thread(
                wait_until,
                lambda: cluster.replication("a")["durable_seq"] >= 200,
                10,
            )
            await _assert_acks_held(cluster, client, 100)
            async with httpx.AsyncClient(base_url=a_url) as http:
                t0 = time.monotonic()
                response = await http.post("/api/replication/b/downgrade")
                assert response.status_code == 200, response.text
                assert response.json()["effective_sync_type"] == "async"
                await client.wait_persisted(200, timeout=5)
                released = time.monotonic() - t0
                assert released < 1.0, released
                again = await http.post("/api/replication/b/downgrade")
                assert again.status_code == 409 and "already downgraded" in again.text
                missing = await http.post("/api/replication/nope/downgrade")
                assert missing.status_code == 404
            # b returns and catches up; an upgrade makes acks wait for it again
            await asyncio.to_thread(cluster.procs["b"].start)
            await asyncio.to_thread(
                wait_until, lambda: cluster.destination("a", "b")["messages_behind"] == 0, 30
            )
            async with httpx.AsyncClient(base_url=a_url) as http:
                response = await http.post("/api/replication/b/upgrade")
                assert response.status_code == 200, response.text
            await asyncio.to_thread(
                wait_until,
                lambda: cluster.destination("a", "b")["effective_sync_type"] == "sync",
                20,
            )
            cluster.procs["b"].stop()
            await asyncio.to_thread(
                wait_until, lambda: not cluster.destination("a", "b")["connected"], 20
            )
            for s in range(201, 251):
                client.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            await asyncio.to_thread(
                wait_until, lambda: cluster.replication("a")["durable_seq"] >= 250, 10
            )
            await _assert_acks_held(cluster, client, 200)
            await asyncio.to_thread(cluster.procs["b"].start)
            await client.wait_persisted(250, timeout=30)

    try:
        asyncio.run(scenario())
        events = cluster.api("a", "/api/replication")["destinations"][0]["events"]
        kinds = [e["event"] for e in events]
        assert {"downgraded", "upgrading", "upgraded"} <= set(kinds)
    finally:
        cluster.stop()
    b = asyncio.run(read_log(cluster.procs["b"]))
    assert _mine(b, "pub") == list(range(1, 251))


def test_validation_failures_and_a_group_mismatch_show_on_the_admin_api(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    cluster.add(
        "a",
        destinations=[
            destination("b", [cluster.address("b")], topics=(("orders", None),)),
            destination("c", [cluster.address("c")], group="elsewhere", exclude="replicate"),
        ],
    )
    cluster.add("b", topics=("trades",))
    cluster.add("c")
    cluster.start()
    try:
        b = wait_until(
            lambda: (d := cluster.destination("a", "b"))["validation_failures"] and d, 20
        )
        assert not b["connected"]
        failures = b["validation_failures"]
        assert any(f.startswith("[txlog] 'orders'") and "fix: add <Topic>" in f for f in failures)
        assert any(f.startswith("[replicate] 'orders'") for f in failures)
        c = wait_until(
            lambda: (
                (d := cluster.destination("a", "c"))["last_error"]
                and "group mismatch" in d["last_error"]
                and d
            ),
            20,
        )
        assert "'elsewhere'" in c["last_error"] and "'c'" in c["last_error"]
        assert any(e["event"] == "refused" for e in c["events"])
        # the destination logged the refusal too
        wait_until(lambda: "validation failed" in cluster.procs["b"].log(), 10)
        # a browser page may not open /replication (no users here: it would inject
        # messages as a peer), not even the broker's own origin: links send no Origin
        host, port = cluster.address("b")
        for origin in ("http://evil.example", f"http://{host}:{port}"):
            with pytest.raises(InvalidStatus) as info:
                asyncio.run(_open_replication(f"ws://{host}:{port}/replication", origin))
            assert info.value.response.status_code == 403
        wait_until(lambda: "origin_refused" in cluster.procs["b"].log(), 10)
    finally:
        cluster.stop()


async def _open_replication(url: str, origin: str) -> None:
    async with connect(url, origin=Origin(origin), compression=None):
        pass
