"""A network partition between two replicating instances heals with no loss (network
namespaces, so root only - CI runs as root).

Topology: instance A in the root namespace on 10.200.N.1, instance B in its own namespace
on 10.200.N.2, joined by a veth pair; both bind a non-loopback address, so both have users
(tokens for the clients, for the replication links and for the admin API). A publisher
publishes to each side (the one for B runs inside B's namespace), the veth goes down for
10 seconds while both keep publishing to their own side, then comes back. Both logs end
with every message of both publishers exactly once.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from spool.server.bookmarks import pub_hash
from tests.support.netns import VethNet, pair, veth_net
from tests.support.replication import publish_resending, read_log
from tests.support.server import ROOT
from tests.support.wait import wait_until

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="network namespaces need root and iproute2",
    ),
]

PER_SIDE = 4_000
PARTITION = 10.0


@pytest.fixture
def net() -> Iterator[VethNet]:
    with veth_net("10.200") as n:
        # prompt recovery after the partition (inside B's namespace only)
        subprocess.run(
            [*n.prefix, "sysctl", "-q", "-w",
             "net.ipv4.tcp_rto_max_ms=1000", "net.ipv4.tcp_retries2=40"],
            check=False, capture_output=True,
        )  # fmt: skip
        yield n


def test_a_ten_second_partition_heals_with_no_loss(tmp_path: Path, net: VethNet) -> None:
    both = pair(tmp_path, net)
    token, hosts, procs = both.token, both.hosts, both.procs
    url = {n: both.url(n) for n in hosts}
    auth = {"Authorization": f"Bearer {token['ops']}"}

    def api(name: str) -> dict[str, object]:
        h, p = hosts[name]
        response = httpx.get(f"http://{h}:{p}/api/replication", headers=auth, timeout=5)
        response.raise_for_status()
        data: dict[str, object] = response.json()
        return data

    def connected(name: str) -> bool:
        dests = api(name)["destinations"]
        assert isinstance(dests, list)
        return all(d["connected"] for d in dests)

    for proc in procs.values():
        proc.start()
    publisher_b: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: connected("a"), 30, message="a -> b")
        # a publisher inside B's namespace, publishing to B throughout
        publisher_b = subprocess.Popen(
            [*net.prefix, sys.executable, "-m", "tests.support.netpub", url["b"], "pub-b",
             "1", str(PER_SIDE), "app", token["app"]],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        acked_b = {"n": 0}

        def follow() -> None:
            assert publisher_b is not None and publisher_b.stdout is not None
            for line in publisher_b.stdout:
                if line.startswith("acked "):
                    acked_b["n"] = int(line.split()[1])

        threading.Thread(target=follow, daemon=True).start()
        progress_a = {"n": 0}

        def partition_when_busy() -> None:
            wait_until(lambda: progress_a["n"] >= PER_SIDE // 4, 120, interval=0.01)
            net.set_link(False)
            cut = time.monotonic()
            try:
                # at least PARTITION, and until a dropped its link (LinkTimeout of
                # silence): a loaded machine may take longer to notice than the cut lasts
                wait_until(lambda: not connected("a"), 120, message="a saw the partition")
                time.sleep(max(0.0, PARTITION - (time.monotonic() - cut)))
            finally:
                net.set_link(True)

        cutter = threading.Thread(target=partition_when_busy, daemon=True)
        cutter.start()
        asyncio.run(
            publish_resending(
                [url["a"]], "pub-a", "orders", range(1, PER_SIDE + 1), batch=200,
                progress=lambda n: progress_a.__setitem__("n", n), timeout=240,
                user_id="app", password=token["app"],
            )
        )  # fmt: skip
        cutter.join(60)
        assert publisher_b.wait(240) == 0
        assert acked_b["n"] == PER_SIDE
        for name in ("a", "b"):
            wait_until(
                lambda n=name: (
                    (info := api(n))["destinations"][0]["last_acked_position"]  # type: ignore[index]
                    >= info["durable_seq"]
                ),
                60,
                message=f"{name} caught up after the partition",
            )
        assert api("a")["destinations"][0]["disconnects"] >= 1  # type: ignore[index]
    finally:
        if publisher_b is not None:
            if publisher_b.poll() is None:
                publisher_b.kill()
                publisher_b.wait()
            if publisher_b.stdout is not None:
                publisher_b.stdout.close()
        for proc in procs.values():
            proc.stop()
    for name in ("a", "b"):
        records = asyncio.run(read_log(procs[name]))
        for publisher in ("pub-a", "pub-b"):
            seqs = [s for h, s, _, _ in records if h == pub_hash(publisher)]
            assert sorted(seqs) == list(range(1, PER_SIDE + 1)), (name, publisher)
            assert len(seqs) == PER_SIDE
