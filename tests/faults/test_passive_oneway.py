"""A passive destination behind a one-way network replicates both ways (network
namespaces and nftables, so root only - CI runs as root).

Topology: instance A in the root namespace, instance B in its own namespace, joined by a
veth pair. In B's namespace nftables drops every new incoming connection: B can dial out,
nobody can dial in (the test checks it). A lists B as a *passive* destination (no
address); B lists A with its address and no ``amps-replication`` transport of its own. B
dials A, A's link to B runs back over that connection, and a publisher on each side
(B's inside its namespace) gets persisted acks - which wait for the other side, both
destinations being sync - for every message; both logs end with both publishers' messages.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from spool.server.bookmarks import pub_hash
from tests.support.netns import PLAINTEXT, VethNet, veth_net
from tests.support.replication import (
    destination,
    free_ports,
    publish_resending,
    read_log,
    replication_xml,
    token_users,
)
from tests.support.server import ROOT, SpoolProcess
from tests.support.wait import wait_until

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None,
        reason="network namespaces and nftables need root, iproute2 and nft",
    ),
]

PER_SIDE = 2_000
# B's namespace: what is not loopback and starts a connection is dropped
ONE_WAY = """
table inet spool_one_way {
  chain input {
    type filter hook input priority 0; policy accept;
    iifname "lo" accept
    ct state new drop
  }
}
"""


@pytest.fixture
def net() -> Iterator[VethNet]:
    with veth_net("10.237", tag="spow") as n:
        subprocess.run(
            [*n.prefix, "nft", "-f", "-"], input=ONE_WAY, text=True, check=True,
            capture_output=True,
        )  # fmt: skip
        yield n


def test_a_passive_destination_behind_a_one_way_network_replicates_both_ways(
    tmp_path: Path, net: VethNet
) -> None:
    token, users = token_users()
    port_a, port_b = free_ports(2)
    repl = {"user": "repl", "secret": token["repl"]}
    a = SpoolProcess(
        tmp_path / "a",
        replication_xml(
            tmp_path / "a" / "data", "a", host=net.a, port=port_a, users=users,
            admin_extra=PLAINTEXT, destinations=[destination("b", [], **repl)],  # type: ignore[arg-type]
        ),
    )  # fmt: skip
    b = SpoolProcess(
        tmp_path / "b",
        replication_xml(
            tmp_path / "b" / "data", "b", host=net.b, port=port_b, users=users,
            admin_extra=PLAINTEXT, inbound=False,
            destinations=[destination("a", [(net.a, port_a)], **repl)],  # type: ignore[arg-type]
        ),
        prefix=net.prefix,
    )  # fmt: skip
    auth = {"Authorization": f"Bearer {token['ops']}"}

    def to_b() -> dict[str, object]:
        info = httpx.get(f"http://{net.a}:{port_a}/api/replication", headers=auth, timeout=5)
        info.raise_for_status()
        found: dict[str, object] = info.json()["destinations"][0]
        return found

    publisher_b: subprocess.Popen[str] | None = None
    a.start()
    b.start()
    try:
        # nobody can dial B: a connection from A's side to B's listener never opens
        with pytest.raises(OSError):
            socket.create_connection((net.b, port_b), timeout=3).close()
        wait_until(lambda: to_b()["connected"], 30, message="b dials a; a runs back over it")
        link = to_b()
        assert link["passive"] and link["via"] == "incoming" and link["address"] is None
        publisher_b = subprocess.Popen(
            [*net.prefix, sys.executable, "-m", "tests.support.netpub",
             f"ws://{net.b}:{port_b}/amps/json", "pub-b", "1", str(PER_SIDE), "app",
             token["app"]],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        # persisted acks on A wait for B (sync), and on B for A: acked means both hold it
        asyncio.run(
            publish_resending(
                [f"ws://{net.a}:{port_a}/amps/json"], "pub-a", "orders",
                range(1, PER_SIDE + 1), batch=200, timeout=120, user_id="app",
                password=token["app"],
            )
        )  # fmt: skip
        out, _ = publisher_b.communicate(timeout=120)
        assert publisher_b.returncode == 0 and out.rstrip().endswith("done"), out
        assert to_b()["disconnects"] == 0
    finally:
        if publisher_b is not None and publisher_b.poll() is None:
            publisher_b.kill()
            publisher_b.wait()
        a.stop()
        b.stop()
    for proc in (a, b):
        records = asyncio.run(read_log(proc))
        for publisher in ("pub-a", "pub-b"):
            seqs = [s for h, s, _, _ in records if h == pub_hash(publisher)]
            assert sorted(seqs) == list(range(1, PER_SIDE + 1)), (proc, publisher)
