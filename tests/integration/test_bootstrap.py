"""Bootstrap between real `spool serve` processes on loopback.

An empty instance with ``<Bootstrap>`` copies the log and SOW of its source before it
serves; a SIGKILL mid-copy and a restart resume it; two empty instances configured to
bootstrap from each other are refused with the fix; the copy is followed by live
replication with no gap.
"""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from pathlib import Path

import httpx
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import Client
from spool.server.replication.bootstrap import marker_path
from tests.support.replication import (
    Cluster,
    bootstrap_xml,
    destination,
    publish_resending,
    read_log,
)
from tests.support.server import SpoolProcess, sow_topic
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow]

#: the acceptance criterion's log size
LOG_MESSAGES = 200_000
SOW = sow_topic("orders", "/id") + sow_topic("quotes", "/id")
_LOGGED_AT_A = (("md", None), ("orders", None))
_LOGGED_AT_B = ("md", "orders", "quotes")


def _boot(cluster: Cluster, name: str) -> dict[str, object]:
    result: dict[str, object] = cluster.api(name, "/api/bootstrap")
    return result


def _seqs(records: list[tuple[int, int, bytes, tuple[str, ...]]], publisher: str) -> list[int]:
    return [s for h, s, _, _ in records if h == pub_hash(publisher)]


async def _sow(url: str, topic: str) -> dict[str, bytes]:
    async with Client(url, f"q-{topic}") as q:
        return {m.key or "": m.data for m in (await q.sow(topic)).records}


def test_an_empty_instance_bootstraps_resumes_after_a_kill_and_replicates_live(
    tmp_path: Path,
) -> None:
    """b publishes, replicates to a, loses its disk; a gets 200,000 more messages and SOW
    records (quotes: a SOW topic a's log does not record, so only its SOW has them); b
    restarts empty with <Bootstrap> from a, is killed mid-copy, restarts, resumes, and
    then replicates live: its log ends with every message exactly once, including its
    own first ones (which reached it back through a, bypassing loop protection)."""
    cluster = Cluster(tmp_path, ["a", "b"])
    to_b = destination("b", [cluster.address("b")], sync=False, topics=_LOGGED_AT_A)
    to_a = destination("a", [cluster.address("a")], sync=False, topics=_LOGGED_AT_A)
    cluster.add("a", topics=("md", "orders"), sow=SOW, destinations=[to_b])
    cluster.add("b", topics=_LOGGED_AT_B, sow=SOW, destinations=[to_a])
    cluster.start()
    try:
        wait_until(lambda: cluster.destination("b", "a")["connected"], 20)
        asyncio.run(publish_resending([cluster.procs["b"].ws_url], "pub-b", "md", range(1, 101)))
        wait_until(lambda: cluster.caught_up("b"), 20, message="b's messages at a")
        cluster.procs["b"].stop()
        shutil.rmtree(cluster.data_dir("b"))

        asyncio.run(
            publish_resending(
                [cluster.procs["a"].ws_url], "pub-a", "md", range(1, LOG_MESSAGES + 1),
                batch=5000, timeout=600,
            )
        )  # fmt: skip

        async def sow_writes() -> None:
            async with Client(cluster.procs["a"].ws_url, "pub-sow") as client:
                for i in range(50):
                    client.publish("orders", b'{"id":%d,"v":1}' % i)
                for i in range(20):
                    client.publish("quotes", b'{"id":%d,"px":%d}' % (i, i))
                await client.publish_acked("orders", b'{"id":0,"v":2}')

        asyncio.run(sow_writes())

        b = cluster.add(
            "b", topics=_LOGGED_AT_B, sow=SOW, destinations=[to_a],
            bootstrap=bootstrap_xml(["md", "orders", "quotes"], [cluster.address("a")],
                                    "txlog,sow"),
        )  # fmt: skip
        b.start()
        wait_until(
            lambda: _boot(cluster, "b")["state"] == "copying" and _boot(cluster, "b")["records"],
            60, interval=0.01, message="b copying",
        )  # fmt: skip
        b.kill()
        assert marker_path(cluster.data_dir("b"), "b").exists()
        b.start()
        wait_until(lambda: _boot(cluster, "b")["state"] == "done", 300, message="b bootstrapped")
        boot = _boot(cluster, "b")
        assert boot["source"] == "a" and boot["error"] is None
        assert not marker_path(cluster.data_dir("b"), "b").exists()
        wait_until(lambda: httpx.get(f"{b.http_url}/readyz").status_code == 200, 20)

        # live replication takes over with no gap
        asyncio.run(
            publish_resending(
                [cluster.procs["a"].ws_url], "pub-a", "md",
                range(LOG_MESSAGES + 1, LOG_MESSAGES + 1001),
            )
        )  # fmt: skip
        wait_until(lambda: cluster.caught_up("a"), 60, message="a's live messages at b")
        orders = asyncio.run(_sow(b.ws_url, "orders"))
        quotes = asyncio.run(_sow(b.ws_url, "quotes"))
        assert set(orders) == {str(i) for i in range(50)} and b'"v":2' in orders["0"]
        assert set(quotes) == {str(i) for i in range(20)}
    finally:
        cluster.stop()
    log = asyncio.run(read_log(cluster.procs["b"]))
    mine = _seqs(log, "pub-a")
    assert Counter(mine).most_common(1)[0][1] == 1, "a record copied twice"
    assert sorted(mine) == list(range(1, LOG_MESSAGES + 1001))
    assert sorted(_seqs(log, "pub-b")) == list(range(1, 101))
    text = cluster.procs["b"].log()
    assert "bootstrap_resuming" in text and "bootstrap_done" in text


def test_a_bootstrapping_instance_refuses_clients_and_shows_its_progress(tmp_path: Path) -> None:
    """No source reachable: the instance waits, not ready; clients and links are refused,
    the admin API and the dashboard's banner say why."""
    cluster = Cluster(tmp_path, ["a", "nobody"])
    a = cluster.add("a", bootstrap=bootstrap_xml(["md"], [cluster.address("nobody")]))
    a.start()
    try:
        wait_until(lambda: _boot(cluster, "a")["error"], 20, message="a connection error")
        boot = _boot(cluster, "a")
        assert boot["state"] == "waiting"
        assert httpx.get(f"{a.http_url}/readyz").status_code == 503
        alerts = cluster.api("a", "/api/instance")["alerts"]
        assert [x["id"] for x in alerts] == ["bootstrap-in-progress"]
        assert "Clients are refused" in alerts[0]["message"]

        async def logon() -> None:
            async with Client(a.ws_url, "early") as client:
                await client.publish_acked("md", b"{}")

        with pytest.raises(Exception):  # noqa: B017 - refused before the upgrade
            asyncio.run(logon())
    finally:
        a.stop()


def test_a_mutual_bootstrap_is_refused_with_the_fix(tmp_path: Path) -> None:
    """a and b, both empty, bootstrap from each other: both stop, saying so and how to fix
    it, instead of waiting forever."""
    cluster = Cluster(tmp_path, ["a", "b"])
    for name, other in (("a", "b"), ("b", "a")):
        cluster.add(name, bootstrap=bootstrap_xml(["md"], [cluster.address(other)]))
    cluster.start()
    try:
        for name in ("a", "b"):
            proc = cluster.procs[name]

            def stopped(p: SpoolProcess = proc) -> bool:
                return p.proc is not None and p.proc.poll() is not None

            wait_until(stopped, 60, message=f"{name} stops")
            text = proc.log()
            assert "mutual bootstrap" in text, text[-3000:]
            assert "remove <Bootstrap> from one of them" in text
    finally:
        cluster.stop()


def test_an_instance_with_state_is_never_bootstrapped(tmp_path: Path) -> None:
    """<Bootstrap> on an instance that already holds a record: nothing is copied, it
    serves at once, and says so."""
    cluster = Cluster(tmp_path, ["a", "src"])
    a = cluster.add("a")
    a.start()
    try:
        asyncio.run(publish_resending([a.ws_url], "pub", "md", range(1, 4)))
    finally:
        a.stop()
    a = cluster.add("a", bootstrap=bootstrap_xml(["md"], [cluster.address("src")]))
    a.start()
    try:
        wait_until(lambda: httpx.get(f"{a.http_url}/readyz").status_code == 200, 20)
        assert _boot(cluster, "a")["state"] == "skipped"
        assert cluster.api("a", "/api/instance")["alerts"] == []
    finally:
        a.stop()
    assert "bootstrap_skipped" in a.log()
    assert not marker_path(cluster.data_dir("a"), "a").exists()
    assert _seqs(asyncio.run(read_log(a)), "pub") == [1, 2, 3]


def test_sow_records_whose_journals_were_removed_are_copied(tmp_path: Path) -> None:
    """a (1 MB journals) gets 50 orders, then enough other messages to close journals,
    then updates of 10 orders; the closed journals are removed by the admin action, so
    a's SOW holds 40 records its log no longer has. An empty b bootstrapping the orders
    (txlog,sow) from a ends with exactly a's SOW."""
    cluster = Cluster(tmp_path, ["a", "b"])
    sow = sow_topic("orders", "/id")
    a = cluster.add("a", topics=("orders", "md"), sow=sow, journal_size="1MB")
    a.start()
    try:

        async def fill() -> None:
            async with Client(a.ws_url, "pub-sow") as client:
                for i in range(50):
                    client.publish("orders", b'{"id":%d,"v":1}' % i)
                await client.publish_acked("orders", b'{"id":0,"v":1}')
                pad = b"x" * 1000
                for s in range(1, 2601):  # > 2 journals of 1 MB
                    client.publish("md", b'{"n":%d,"pad":"%s"}' % (s, pad))
                await client.publish_acked("md", b'{"n":0}')
                for i in range(10):
                    client.publish("orders", b'{"id":%d,"v":2}' % i)
                await client.publish_acked("orders", b'{"id":9,"v":2}')

        asyncio.run(fill())
        journals = cluster.api("a", "/api/transaction_log")["journals"]
        closed = [j["id"] for j in journals if j["state"] == "closed"]
        assert len(closed) >= 2, journals
        removed = httpx.post(
            f"{a.http_url}/api/transaction_log/journals/{closed[-1]}/remove", timeout=30
        )
        assert removed.status_code == 200, removed.text
        totals = cluster.api("a", "/api/transaction_log")["totals"]
        # the first 51 records (every order at v=1) are gone from a's log
        assert totals["first_seq"] > 51, totals
        source_sow = asyncio.run(_sow(a.ws_url, "orders"))
        assert len(source_sow) == 50
        assert sum(b'"v":1' in v for v in source_sow.values()) == 40

        b = cluster.add(
            "b", topics=("orders",), sow=sow,
            bootstrap=bootstrap_xml(["orders"], [cluster.address("a")], "txlog,sow"),
        )  # fmt: skip
        b.start()
        wait_until(lambda: _boot(cluster, "b")["state"] == "done", 60, message="b bootstrapped")
        wait_until(lambda: httpx.get(f"{b.http_url}/readyz").status_code == 200, 20)
        assert asyncio.run(_sow(b.ws_url, "orders")) == source_sow
    finally:
        cluster.stop()
    text = cluster.procs["b"].log()
    assert "bootstrap_done" in text
