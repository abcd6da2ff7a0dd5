"""A replication link that hears nothing is dropped within ``Replication/LinkTimeout`` on
both ends, and comes back when the network does.

Real ``spool serve`` processes on loopback; A's link to B goes through a proxy that stops
forwarding (tests/support/stallproxy.py): to both ends the link is silent and A's writes
block, as in a partition that drops every packet while TCP retransmits (the network
namespace version of this test is tests/faults/test_link_partition.py). When the link goes
silent, A is sending a burst, so its socket's write buffer is full: the case the websocket
library's keepalive could not see.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from spool.server.client import Client
from tests.support.replication import (
    Cluster,
    destination,
    event_time,
    events_since,
    publish_numbered,
)
from tests.support.stallproxy import StallingProxy
from tests.support.wait import wait_until

TIMEOUT = 1.5
#: how late a drop may be seen after the timeout: the loop's scheduling on a loaded machine
SLACK = 1.0


def _events(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = cluster.api(name, "/api/events?category=replication&limit=1000")[
        "events"
    ]
    return events


def _details(cluster: Cluster, name: str, kind: str, since: float) -> list[str]:
    return [str(e.get("detail")) for e in events_since(_events(cluster, name), since)
            if e["event"] == kind]  # fmt: skip


def test_a_silent_link_is_dropped_on_both_ends_and_sync_acks_resume(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, ["a", "b"])
    with StallingProxy(cluster.address("b")) as proxy:
        cluster.add(
            "a",
            destinations=[
                destination("b", [("127.0.0.1", proxy.port)], sync=True,
                            exclude="replicate,cascade")
            ],
            link_timeout=f"{TIMEOUT}s",
        )  # fmt: skip
        cluster.add("b", link_timeout=f"{TIMEOUT}s")
        cluster.start()
        try:
            asyncio.run(_scenario(cluster, proxy))
        finally:
            cluster.stop()


async def _scenario(cluster: Cluster, proxy: StallingProxy) -> None:
    def streaming() -> bool:
        incoming = cluster.replication("b")["incoming"]
        return bool(cluster.destination("a", "b")["connected"]) and any(
            i["name"] == "a" and i["status"] == "streaming" for i in incoming
        )

    await asyncio.to_thread(wait_until, streaming, 30, 0.05, "a -> b streaming")
    client = Client(cluster.procs["a"].ws_url, "pub")
    await client.connect(timeout=10)
    try:
        seq = publish_numbered(client, 1, 200)
        await client.wait_persisted(seq, timeout=30)  # sync: B has them

        proxy.stall()
        cut = time.time()
        # 24 MB for A to push into a link that takes nothing
        seq = publish_numbered(client, seq + 1, 3000, pad=b"x" * 8000)

        def dropped() -> tuple[float, float] | None:
            a = event_time(_events(cluster, "a"), "destination_disconnected", cut, destination="b")
            b = event_time(_events(cluster, "b"), "inbound_disconnected", cut, source="a")
            return (a, b) if a is not None and b is not None else None

        a_at, b_at = await asyncio.to_thread(
            wait_until, dropped, 10 * TIMEOUT + 30, 0.05, "both ends dropped"
        )
        assert a_at - cut <= TIMEOUT + SLACK, f"a dropped {a_at - cut:.2f}s after the cut"
        assert b_at - cut <= TIMEOUT + SLACK, f"b dropped {b_at - cut:.2f}s after the cut"
        for name, kind in (("a", "destination_disconnected"), ("b", "inbound_disconnected")):
            details = _details(cluster, name, kind, cut)
            assert details and all("nothing heard" in d for d in details), details
        assert not cluster.destination("a", "b")["connected"]
        # the sync destination holds the burst's persisted acks while the link is down
        assert client.persisted_seq < seq

        # stamped before the resume: the held welcome may cross and be logged before this
        # thread runs again
        healed = time.time()
        proxy.resume()
        await client.wait_persisted(seq, timeout=60)  # B got everything, acks flow again
        reconnected = event_time(_events(cluster, "a"), "destination_connected", healed)
        assert reconnected is not None
    finally:
        await client.close()
