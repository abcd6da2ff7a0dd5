"""Delayed delivery through process faults: stored messages survive a SIGKILL and a
failover, each is delivered exactly once and never before its due time.

Real broker processes; the publisher asks for persisted acks, so every message the test
counts on is durable (on both sides of a sync pair) before the fault. Due times are
absolute (``deliver_at``) on this machine's clock, the brokers' clock too: a delivery
received before its due time was delivered early.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from spool.server.client import Client, ClientError, Disconnected
from tests.conftest import ServerFactory
from tests.support.replication import Cluster, destination
from tests.support.server import SpoolProcess
from tests.support.wait import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]

TOTAL = 600


def _dues(seed: int, earliest: float, latest: float) -> dict[int, float]:
    """Per message, its due time: seeded, spread between ``earliest`` and ``latest``
    seconds from now, in no particular order of the sequence."""
    rng = random.Random(seed)
    now = time.time()
    return {n: now + rng.uniform(earliest, latest) for n in range(1, TOTAL + 1)}


async def _publish(url: str, dues: dict[int, float]) -> None:
    """Publish every message with its due time and wait until all are persisted."""
    async with Client(url, "delayed-writer") as client:
        for n, due in dues.items():
            body = orjson.dumps({"n": n, "due": due})
            client.publish("orders", body, seq=n, persisted=True,
                           deliver_at=datetime.fromtimestamp(due, UTC))  # fmt: skip
        await client.wait_persisted(TOTAL, timeout=60)


async def _receive_all(url: str) -> list[tuple[int, float, float]]:
    """A bookmark subscription from the start of the log until every message came:
    ``(n, due, received)`` in arrival order (a duplicate shows as a repeated ``n``)."""
    got: list[tuple[int, float, float]] = []
    deadline = time.monotonic() + 120
    async with Client(url, "delayed-reader") as client:
        sub = await client.subscribe("orders", bookmark="0")
        while len({n for n, _, _ in got}) < TOTAL and time.monotonic() < deadline:
            msg = await sub.get(timeout=60)
            doc = orjson.loads(msg.data)
            got.append((int(doc["n"]), float(doc["due"]), time.time()))
        # anything more would be a duplicate: the due records written so far are all
        # replayed by now, and nothing else is pending
        with pytest.raises(TimeoutError):
            await sub.get(timeout=1.0)
    return got


def _check(got: list[tuple[int, float, float]]) -> None:
    ns = [n for n, _, _ in got]
    assert sorted(ns) == list(range(1, TOTAL + 1)), "each delayed message exactly once"
    early = [(n, round(due - received, 4)) for n, due, received in got if received < due]
    assert early == [], "delivered before its due time"
    # delivered in due order (ties: the order they were stored, by sequence)
    dues = [due for _, due, _ in got]
    assert dues == sorted(dues)


def test_pending_messages_survive_a_sigkill_and_are_delivered_once_never_early(
    spool_server_factory: ServerFactory,
) -> None:
    """Some messages fall due before the kill (delivered then), some while the broker is
    down (delivered as it starts), the rest after the restart, on time."""
    proc = spool_server_factory(name="a", journal_size="8MB")
    dues = _dues(31, 0.5, 8.0)
    asyncio.run(_publish(proc.ws_url, dues))
    # once a few have fallen due and been delivered here, kill it
    first = min(dues.values())
    wait_until(lambda: time.time() > first + 0.5, 30)
    proc.kill()
    proc.start()
    got = asyncio.run(_receive_all(proc.ws_url))
    _check(got)
    assert any(due < time.time() - 1 for due in dues.values())


def _pair(tmp_path: Path) -> Cluster:
    cluster = Cluster(tmp_path, ["a", "b"])
    cluster.add("a", destinations=[destination("b", [cluster.address("b")])])
    cluster.add("b", destinations=[destination("a", [cluster.address("a")])])
    return cluster


def test_the_replica_delivers_each_delayed_message_once_after_the_publisher_side_dies(
    tmp_path: Path,
) -> None:
    """Published to A (a sync pair: persisted means on B too), A is killed before any
    falls due: B delivers every one at its time from what replication gave it."""
    cluster = _pair(tmp_path)
    cluster.start()
    try:
        wait_until(lambda: cluster.destination("a", "b")["connected"], 20)
        wait_until(lambda: cluster.destination("b", "a")["connected"], 20)
        dues = _dues(32, 4.0, 10.0)
        asyncio.run(_publish(cluster.procs["a"].ws_url, dues))
        assert time.time() < min(dues.values()), "published before the first fell due"
        cluster.procs["a"].kill()
        got = asyncio.run(_receive_all_retrying(cluster.procs["b"]))
        _check(got)
    finally:
        cluster.stop()


async def _receive_all_retrying(proc: SpoolProcess) -> list[tuple[int, float, float]]:
    """:func:`_receive_all` on ``proc``, connecting again if the connection drops while
    the pair's link goes down."""
    for _attempt in range(5):
        try:
            return await _receive_all(proc.ws_url)
        except (Disconnected, OSError, ClientError):
            await asyncio.sleep(0.2)
    return await _receive_all(proc.ws_url)
