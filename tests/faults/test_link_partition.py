"""A partition that drops every packet: both ends of both links drop within
``Replication/LinkTimeout``, and a sync publisher's acks resume after the heal (network
namespaces and iptables, so root only - CI runs as root).

Topology: instance A in the root namespace on 10.232.N.1, instance B in its own namespace
on 10.232.N.2, joined by a veth pair; each replicates to the other (A -> B sync). The
partition is a pair of iptables DROP rules inside B's namespace for A's address, in both
directions: packets vanish, and TCP retransmits quietly for many minutes. The test itself
watches B through a second address of the root side (10.232.N.3), which the rules leave
alone, so both instances' events are read while the partition lasts.

No TCP setting is changed for it: the kernel defaults (``tcp_retries2`` 15, RTO up to
120 s) are what hides a partition from an application, and what the link timeout must see
through.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spool.server.client import Client
from tests.support.netns import VethNet, pair, veth_net
from tests.support.replication import (
    event_time,
    events_since,
    publish_numbered,
)
from tests.support.wait import wait_until

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("iptables") is None,
        reason="network namespaces and iptables need root, iproute2 and iptables",
    ),
]

TIMEOUT = 3.0
#: how late a drop may be seen after the timeout: the loop's scheduling on a loaded machine
SLACK = 1.5


def _drop_a(net: VethNet, action: str) -> None:
    """Insert (``-I``) or delete (``-D``) the partition's rules inside B's namespace."""
    for chain, side in (("INPUT", "-s"), ("OUTPUT", "-d")):
        subprocess.run(
            [*net.prefix, "iptables", action, chain, side, net.a, "-j", "DROP"],
            check=True, capture_output=True,
        )  # fmt: skip


@pytest.fixture
def net() -> Iterator[VethNet]:
    with veth_net("10.232", tag="spl", observer=True) as n:
        try:
            _drop_a(n, "-I")  # iptables works in the namespace (then removed: no cut yet)
            _drop_a(n, "-D")
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"iptables does not work in a network namespace here: {exc.stderr!r}")
        yield n


def test_both_ends_of_both_links_drop_within_the_timeout(tmp_path: Path, net: VethNet) -> None:
    both = pair(tmp_path, net, sync=(True, False), link_timeout=f"{TIMEOUT:g}s")
    token, hosts, procs = both.token, both.hosts, both.procs
    auth = {"Authorization": f"Bearer {token['ops']}"}
    assert net.observer is not None
    # B is watched from the observer address, which the partition leaves alone
    http = {
        "a": httpx.Client(headers=auth, timeout=5),
        "b": httpx.Client(
            headers=auth, timeout=5, transport=httpx.HTTPTransport(local_address=net.observer)
        ),
    }

    def api(name: str, path: str) -> Any:
        h, p = hosts[name]
        response = http[name].get(f"http://{h}:{p}{path}")
        response.raise_for_status()
        return response.json()

    def events(name: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = api(name, "/api/events?category=replication&limit=1000")[
            "events"
        ]
        return found

    def streaming(name: str, other: str) -> bool:
        info = api(name, "/api/replication")
        return bool(info["destinations"][0]["connected"]) and any(
            i["name"] == other and i["status"] == "streaming" for i in info["incoming"]
        )

    for proc in procs.values():
        proc.start()
    try:
        wait_until(lambda: streaming("a", "b") and streaming("b", "a"), 30, 0.1, "links up")
        asyncio.run(_partition_and_heal(net, both.url("a"), token, events))
    finally:
        for client in http.values():
            client.close()
        for proc in procs.values():
            proc.stop()


async def _partition_and_heal(net: VethNet, url: str, token: dict[str, str], events: Any) -> None:
    client = Client(url, "pub", user_id="app", password=token["app"])
    await client.connect(timeout=10)
    try:
        seq = publish_numbered(client, 1, 200)
        await client.wait_persisted(seq, timeout=30)  # A -> B is sync: B has them

        _drop_a(net, "-I")
        cut = time.time()
        # 24 MB for A to push into a link whose packets vanish
        seq = publish_numbered(client, seq + 1, 3000, pad=b"x" * 8000)

        ends = {
            ("a", "destination_disconnected", "destination", "b"),
            ("a", "inbound_disconnected", "source", "b"),
            ("b", "destination_disconnected", "destination", "a"),
            ("b", "inbound_disconnected", "source", "a"),
        }

        def all_dropped() -> dict[tuple[str, str], float] | None:
            seen: dict[tuple[str, str], float] = {}
            for name, kind, field, other in ends:
                at = event_time(events(name), kind, cut, **{field: other})
                if at is None:
                    return None
                seen[(name, kind)] = at
            return seen

        dropped = await asyncio.to_thread(
            wait_until, all_dropped, 10 * TIMEOUT + 30, 0.1, "every end dropped"
        )
        for end, at in dropped.items():
            assert at - cut <= TIMEOUT + SLACK, f"{end} dropped {at - cut:.2f}s after the cut"
        for name in ("a", "b"):
            details = [
                str(e.get("detail"))
                for e in events_since(events(name), cut)
                if e["event"].endswith("_disconnected")
            ]
            assert details and all("nothing heard" in d for d in details), details
        assert client.persisted_seq < seq  # the sync destination holds the acks meanwhile

        _drop_a(net, "-D")
        healed = time.time()
        await client.wait_persisted(seq, timeout=60)  # B got everything, acks flow again
        for name, other in (("a", "b"), ("b", "a")):
            assert event_time(events(name), "destination_connected", healed, destination=other)
    finally:
        await client.close()
