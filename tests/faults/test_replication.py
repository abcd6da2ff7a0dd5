"""Replication under failures: SIGKILL of either side of a sync pair
mid-stream, and a client failing over from a killed instance to its replica.

The partition test (network namespaces, root only) is tests/faults/test_partition.py.
"""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path

import orjson
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import Client, ClientError, Disconnected
from tests.support.replication import Cluster, destination, publish_resending, read_log
from tests.support.wait import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]

PER_SIDE = 50_000


def _pair(tmp_path: Path) -> Cluster:
    cluster = Cluster(tmp_path, ["a", "b"])
    cluster.add("a", destinations=[destination("b", [cluster.address("b")])])
    cluster.add("b", destinations=[destination("a", [cluster.address("a")])])
    return cluster


@pytest.mark.parametrize("victim", ["a", "b"])
def test_a_sync_pair_keeps_every_message_once_through_a_sigkill(
    tmp_path: Path, victim: str
) -> None:
    """100,000 messages published to both sides at once end in both logs exactly once,
    though one side is killed mid-stream and restarted: the resync closes the gap and the
    publisher's resends are de-duplicated."""
    cluster = _pair(tmp_path)
    cluster.start()
    rng = random.Random(15)
    progress = {"a": 0, "b": 0}
    kill_at = rng.randrange(PER_SIDE // 5, PER_SIDE // 2)
    killed = threading.Event()

    def killer() -> None:
        wait_until(lambda: progress[victim] >= kill_at, 120, interval=0.005)
        cluster.procs[victim].kill()
        killed.set()
        cluster.procs[victim].start()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()

    async def publish() -> None:
        def seen(side: str) -> object:
            return lambda acked: progress.__setitem__(side, acked)

        await asyncio.gather(
            *(
                publish_resending([cluster.procs[side].ws_url], f"pub-{side}", "orders",
                                  range(1, PER_SIDE + 1), progress=seen(side), timeout=300)
                for side in ("a", "b")
            )
        )  # fmt: skip

    try:
        wait_until(lambda: cluster.destination("a", "b")["connected"], 20)
        wait_until(lambda: cluster.destination("b", "a")["connected"], 20)
        asyncio.run(publish())
        thread.join(60)
        assert killed.is_set()
        for side in ("a", "b"):
            wait_until(lambda s=side: cluster.caught_up(s), 60, message=f"{side} caught up")
    finally:
        cluster.stop()
    for side in ("a", "b"):
        records = asyncio.run(read_log(cluster.procs[side]))
        for publisher in ("a", "b"):
            seqs = [s for h, s, _, _ in records if h == pub_hash(f"pub-{publisher}")]
            assert sorted(seqs) == list(range(1, PER_SIDE + 1)), (side, publisher)
            assert len(seqs) == PER_SIDE  # no duplicate
        assert "recovered" in cluster.procs[victim].log()


def test_a_publisher_and_a_bookmark_subscriber_fail_over_without_loss_or_duplicate(
    tmp_path: Path,
) -> None:
    """A plain publisher resends from its last persisted ack, a plain subscriber resumes
    from its last bookmark, both moving from A (killed mid-stream) to B. The subscriber
    reads ``fully_durable``: what it processed is on B too, so its bookmark is there.
    With A gone, B's sync destination A is down: B's acks wait for it until it is
    downgraded (here over REST, once the link dropped)."""
    cluster = _pair(tmp_path)
    cluster.start()
    total = 20_000
    processed: list[int] = []
    progress = {"acked": 0}

    async def subscriber() -> None:
        bookmark = "0"
        urls = [cluster.procs["a"].ws_url, cluster.procs["b"].ws_url]
        attempt = 0
        while len(processed) < total:
            url = urls[min(attempt, 1)]
            try:
                async with Client(url, "reader") as client:
                    sub = await client.subscribe(
                        "orders", bookmark=bookmark, options="fully_durable"
                    )
                    while len(processed) < total:
                        msg = await sub.get(timeout=30)
                        processed.append(int(orjson.loads(msg.data)["n"]))
                        bookmark = msg.bookmark or bookmark
            except (Disconnected, OSError, TimeoutError, ClientError):
                attempt += 1
                await asyncio.sleep(0.1)

    async def publisher() -> None:
        urls = [cluster.procs["a"].ws_url, cluster.procs["b"].ws_url]
        await publish_resending(
            urls, "writer", "orders", range(1, total + 1), batch=500,
            progress=lambda acked: progress.__setitem__("acked", acked), timeout=300,
        )  # fmt: skip

    def killer() -> None:
        wait_until(lambda: progress["acked"] >= total // 3, 120, interval=0.005)
        cluster.procs["a"].kill()
        # b's sync destination is gone: as an operator (or the downgrade action) would,
        # downgrade it so b acknowledges on its own
        wait_until(lambda: not cluster.destination("b", "a")["connected"], 30)
        cluster.api("b", "/api/replication/a/downgrade", "POST")

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()

    async def run() -> None:
        await asyncio.gather(subscriber(), publisher())

    try:
        wait_until(lambda: cluster.destination("a", "b")["connected"], 20)
        asyncio.run(run())
        thread.join(30)
    finally:
        cluster.stop()
    assert processed == list(range(1, total + 1)), "each message processed once, in order"
    b = asyncio.run(read_log(cluster.procs["b"]))
    seqs = [s for h, s, _, _ in b if h == pub_hash("writer")]
    assert seqs == list(range(1, total + 1))
