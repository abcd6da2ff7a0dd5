"""A network partition between two replicating instances heals with no loss (issue 15
acceptance; network namespaces, so root only - CI runs as root).

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
import random
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.bookmarks import pub_hash
from tests.support.replication import (
    destination,
    free_ports,
    publish_resending,
    read_log,
    replication_xml,
)
from tests.support.server import ROOT, SpoolProcess
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
# The 10.200.N.x addresses live only inside the namespaces this test creates (nothing
# outside can reach them), so the listeners run without TLS; the config refuses a
# non-loopback listener with users and no TLS unless it is told so explicitly.
PLAINTEXT = "<AllowPlaintext>true</AllowPlaintext>"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Net:
    """A namespace for B and a veth pair to the root namespace (deleted at the end)."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 10000}{random.randrange(100)}"
        self.ns = f"sp{tag}"
        self.host_if = f"sp{tag}a"
        self.ns_if = f"sp{tag}b"
        subnet = random.randrange(1, 250)
        self.a = f"10.200.{subnet}.1"
        self.b = f"10.200.{subnet}.2"

    def up(self) -> None:
        _ip("netns", "add", self.ns)
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _ip("link", "set", self.ns_if, "netns", self.ns)
        _ip("addr", "add", f"{self.a}/24", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        for cmd in (
            ("link", "set", "lo", "up"),
            ("addr", "add", f"{self.b}/24", "dev", self.ns_if),
            ("link", "set", self.ns_if, "up"),
        ):
            _ip("netns", "exec", self.ns, "ip", *cmd)
        # prompt recovery after the partition (inside B's namespace only)
        subprocess.run(
            ["ip", "netns", "exec", self.ns, "sysctl", "-q", "-w",
             "net.ipv4.tcp_rto_max_ms=1000", "net.ipv4.tcp_retries2=40"],
            check=False, capture_output=True,
        )  # fmt: skip

    def partition(self, cut: bool) -> None:
        _ip("netns", "exec", self.ns, "ip", "link", "set", self.ns_if, "down" if cut else "up")

    def down(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], check=False, capture_output=True)

    @property
    def prefix(self) -> tuple[str, ...]:
        return ("ip", "netns", "exec", self.ns)


@pytest.fixture
def net() -> Iterator[Net]:
    n = Net()
    try:
        n.up()
    except subprocess.CalledProcessError as exc:
        n.down()
        pytest.skip(f"cannot build network namespaces here: {exc.stderr!r}")
    try:
        yield n
    finally:
        n.down()


def test_a_ten_second_partition_heals_with_no_loss(tmp_path: Path, net: Net) -> None:
    token = {name: secrets.token_urlsafe(24) for name in ("app", "repl", "ops")}
    users = (
        f"<User><Name>app</Name><Token>{token['app']}</Token>"
        "<Read>.*</Read><Write>.*</Write></User>"
        f"<User><Name>repl</Name><Token>{token['repl']}</Token><Write>.*</Write></User>"
        f"<User><Name>ops</Name><Token>{token['ops']}</Token><Admin>true</Admin></User>"
    )
    port_a, port_b = free_ports(2)
    hosts = {"a": (net.a, port_a), "b": (net.b, port_b)}
    procs: dict[str, SpoolProcess] = {}
    for name, other in (("a", "b"), ("b", "a")):
        xml = replication_xml(
            tmp_path / name / "data", name, host=hosts[name][0], port=hosts[name][1],
            users=users, admin_extra=PLAINTEXT,
            destinations=[destination(other, [hosts[other]], user="repl", secret=token["repl"])],
        )  # fmt: skip
        procs[name] = SpoolProcess(tmp_path / name, xml, prefix=net.prefix if name == "b" else ())
    url = {n: f"ws://{h}:{p}/amps/json" for n, (h, p) in hosts.items()}
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
            net.partition(True)
            time.sleep(PARTITION)
            net.partition(False)

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
