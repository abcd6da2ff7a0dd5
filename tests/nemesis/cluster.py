"""The cluster under test: 3 to 5 real ``spool serve`` processes that replicate.

Each instance runs under ``tests/support/faulty_serve.py`` (the real broker with a file
seam steered by a control file, and a wall clock that jumps when another control file
says so), in its own network namespace when there are namespaces
(:mod:`tests.nemesis.net`), with its data directory on its own tmpfs as root (so a
full disk is its alone). Its replication links leave through a delaying proxy in its
namespace (:mod:`tests.nemesis.proxy`).

What every instance holds (the same on all, so every check has one expectation):

- the transaction log records every topic; journals of 1 MB, one preallocated;
- ``nem.pub``: the publishers' topic; ``nem.delay``: the delayed publisher's (a plain
  recorded topic like ``nem.pub``: no queue takes it, which would refuse delayed
  publishes); ``nem.sow``: a SOW topic keyed by ``/k``;
  ``nem.q``: a replicated queue over ``nem.q.in`` (at-least-once, 10 s lease) whose
  dead letters go to ``nem.q.dead``, a SOW topic keyed by the original bookmark;
- users ``app`` (clients), ``repl`` (the links and bootstraps) and ``ops`` (admin), with
  tokens: the listeners are not on loopback;
- destinations by topology, every one passing every group through:

  ========  ===============================================================
  ``sync``  a full mesh, every link sync
  ``mixed`` a full mesh, each instance sync to the next one, async to the rest
  ``chain`` a line a - b - c ..., both ways, sync (the ends hear each other
            through the middle)
  ========  ===============================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.nemesis.net import Network
from tests.support.disk import mount_tmpfs, unmount
from tests.support.replication import bootstrap_xml, destination, free_ports, replication_xml
from tests.support.server import ROOT, SpoolProcess, sow_topic

__all__ = [
    "QUEUE",
    "TOPIC_DELAY",
    "TOPIC_PUB",
    "TOPIC_QDEAD",
    "TOPIC_QIN",
    "TOPIC_SOW",
    "TOPOLOGIES",
    "Cluster",
    "Instance",
    "links",
]

TOPIC_PUB = "nem.pub"
#: delayed publishes (``deliver_at``); recorded and replicated as every topic is
TOPIC_DELAY = "nem.delay"
TOPIC_SOW = "nem.sow"
TOPIC_QIN = "nem.q.in"
QUEUE = "nem.q"
TOPIC_QDEAD = "nem.q.dead"
TOPOLOGIES = ("sync", "mixed", "chain")
#: the port every instance listens on inside its own namespace (nothing else is there)
NS_PORT = 9100
NS_PROXY_BASE = 9200


def links(names: list[str], topology: str) -> dict[tuple[str, str], bool]:
    """Every replication link ``(source, destination) -> sync``."""
    n = len(names)
    out: dict[tuple[str, str], bool] = {}
    if topology == "chain":
        for a, b in itertools.pairwise(names):
            out[(a, b)] = out[(b, a)] = True
        return out
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if a != b:
                out[(a, b)] = topology == "sync" or j == (i + 1) % n
    if topology not in ("sync", "mixed"):
        raise ValueError(f"unknown topology {topology!r}; one of {', '.join(TOPOLOGIES)}")
    return out


@dataclass
class Tokens:
    app: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    repl: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    ops: str = field(default_factory=lambda: secrets.token_urlsafe(18))

    def users_xml(self) -> str:
        return (
            f"<User><Name>app</Name><Token>{self.app}</Token>"
            "<Read>.*</Read><Write>.*</Write></User>"
            f"<User><Name>repl</Name><Token>{self.repl}</Token>"
            "<Read>.*</Read><Write>.*</Write></User>"
            f"<User><Name>ops</Name><Token>{self.ops}</Token><Admin>true</Admin>"
            "<Read>.*</Read></User>"
        )


class Instance:
    """One ``spool serve`` of the cluster, across its restarts."""

    def __init__(self, cluster: Cluster, name: str, port: int, proxy_ports: dict[str, int]):
        self.cluster = cluster
        self.name = name
        self.port = port
        #: peer -> the port of this instance's proxy listener towards it
        self.proxy_ports = proxy_ports
        self.dir = cluster.root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.disk = self.dir / "disk"
        self.disk.mkdir(exist_ok=True)
        self.data = self.disk / "data"
        self.seam_control = self.dir / "seam.control"
        self.clock_control = self.dir / "clock.control"
        self.delay_control = self.dir / "delay.control"
        #: the peers this instance replicates to now (a membership fault removes some)
        self.peers = {dst for (src, dst) in cluster.links if src == name}
        #: an instance wiped and started empty copies its state from the first of these
        #: peers that can be copied from, in this order
        self.bootstrap_from: list[str] | None = None
        self.proc = SpoolProcess(
            self.dir / "run",
            self.config(),
            prefix=cluster.net.prefix(name),
            control=self.seam_control,
            extra_args=("--clock", str(self.clock_control)),
        )
        self.proxy: subprocess.Popen[bytes] | None = None
        self.paused = False
        #: how many times it was started
        self.starts = 0
        self.tmpfs: str | None = None  # why there is no tmpfs (None: mounted)

    # -- addresses --------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self.cluster.net.host(self.name)

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}/amps/json"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- configuration ----------------------------------------------------------------

    def config(self) -> str:
        c = self.cluster
        dests = [
            destination(
                peer,
                [("127.0.0.1", self.proxy_ports[peer])],
                sync=c.links[(self.name, peer)],
                passthrough=(".*",),
                user="repl",
                secret=c.tokens.repl,
            )
            for peer in sorted(self.peers)
        ]
        boot = ""
        if self.bootstrap_from is not None:
            boot = bootstrap_xml(
                [".*"],
                [(c.instances[src].host, c.instances[src].port) for src in self.bootstrap_from],
                "txlog,sow",
                transport_extra=f"<User>repl</User><Token>{c.tokens.repl}</Token>",
            )
        queue = (
            f"<Queue><Name>{QUEUE}</Name><UnderlyingTopic>{TOPIC_QIN}</UnderlyingTopic>"
            "<LeasePeriod>10s</LeasePeriod><MaxPerSubscriptionBacklog>10"
            f"</MaxPerSubscriptionBacklog><DeadLetter><Topic>{TOPIC_QDEAD}</Topic>"
            "</DeadLetter></Queue>"
        )
        return replication_xml(
            self.data,
            self.name,
            host=self.host,
            port=self.port,
            destinations=dests,
            flush_interval="2ms",
            journal_size="1MB",
            txlog_extra=(
                "<PreallocatedJournalFiles>1</PreallocatedJournalFiles>"
                "<WriteRetryInterval>200ms</WriteRetryInterval>"
            ),
            users=c.tokens.users_xml(),
            admin_interval="2s",
            admin_extra="<AllowPlaintext>true</AllowPlaintext>" if c.net.isolated else "",
            sow=sow_topic(TOPIC_SOW, "/k")
            + queue
            + sow_topic(TOPIC_QDEAD, "/dead_letter/bookmark"),
            bootstrap=boot,
        )

    def write_config(self) -> None:
        self.proc.config_path.write_text(self.config())

    # -- the process ------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.proc.proc is not None and self.proc.proc.poll() is None

    def launch(self, timeout: float = 180.0) -> None:
        """Start the process and wait until it listens (it may not be ready yet)."""
        self.write_config()
        self.proc.start(timeout)
        self.starts += 1
        self.paused = False

    def start(self, timeout: float = 180.0) -> None:
        """Start and wait until ready (recovery, a bootstrap, then the transports)."""
        self.launch(timeout)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if not self.running:
                raise RuntimeError(f"{self.name} exited while starting:\n{self.proc.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready after {timeout:g} s")
            time.sleep(0.1)

    def _ready(self) -> bool:
        try:
            r = httpx.get(
                self.http_url + "/readyz",
                headers={"Authorization": f"Bearer {self.cluster.tokens.ops}"},
                timeout=2,
            )
        except httpx.HTTPError:
            return False
        return r.status_code == 200

    def kill(self) -> None:
        self.resume()
        self.proc.kill()

    def stop(self) -> int | None:
        self.resume()
        return self.proc.stop(60)

    def pause(self) -> None:
        if self.running and not self.paused:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.paused and self.running:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    async def ready(self) -> bool:
        return await asyncio.to_thread(self._ready)

    async def bootstrap(self) -> dict[str, Any]:
        """``/api/bootstrap`` (its progress and last error), or ``{}`` when it does not
        answer."""
        try:
            state: dict[str, Any] = await self.api("/api/bootstrap")
        except (httpx.HTTPError, OSError):
            return {}
        return state

    # -- the proxy --------------------------------------------------------------------

    def start_proxy(self) -> None:
        c = self.cluster
        routes = [
            f"{self.proxy_ports[peer]}={c.instances[peer].host}:{c.instances[peer].port}"
            for peer in sorted(self.proxy_ports)
        ]
        ready = self.dir / "proxy.ready"
        ready.unlink(missing_ok=True)
        log = open(self.dir / "proxy.log", "ab")  # noqa: SIM115
        self.proxy = subprocess.Popen(
            [*c.net.prefix(self.name), sys.executable, "-m", "tests.nemesis.proxy",
             "--control", str(self.delay_control), "--ready", str(ready), *routes],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proxy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the proxy of {self.name} did not start")
            time.sleep(0.05)

    def stop_proxy(self) -> None:
        if self.proxy is not None and self.proxy.poll() is None:
            self.proxy.kill()
            self.proxy.wait()

    # -- the disk ---------------------------------------------------------------------

    def mount(self, size_mb: int) -> None:
        self.tmpfs = mount_tmpfs(self.disk, f"{size_mb}m")

    def unmount(self, keep: bool = False) -> None:
        """Unmount the tmpfs; ``keep``: copy what it holds to ``disk-kept`` first (a run
        kept for reading its journals afterwards)."""
        if self.tmpfs is None:
            if keep:
                with contextlib.suppress(OSError):
                    shutil.copytree(self.disk, self.dir / "disk-kept", dirs_exist_ok=True)
            unmount(self.disk)

    def earlier_log(self, tag: str) -> Path:
        """Where the journals a fault replaces are kept (``earlier/<tag>/data``, laid out
        like the data directory): a subscriber may have read messages in the order those
        held them, which the records copied back in a peer's order no longer show."""
        return self.dir / "earlier" / tag / "data"

    def keep_log(self, tag: str) -> None:
        """Copy every journal of the instance (it is stopped) to :meth:`earlier_log`, as
        before a wipe."""
        dest = self.earlier_log(tag)
        for part in ("journal", "archive"):
            if (self.data / part).is_dir():
                shutil.copytree(
                    self.data / part,
                    dest / part,
                    ignore=shutil.ignore_patterns("*.prealloc.*"),
                    dirs_exist_ok=True,
                )

    def earlier_logs(self) -> list[Path]:
        """The data directories kept in :meth:`earlier_log`, oldest first."""
        kept = self.dir / "earlier"
        if not kept.is_dir():
            return []
        dirs = sorted(kept.iterdir(), key=lambda d: (int(d.name.partition("-")[0]), d.name))
        return [d / "data" for d in dirs]

    def wipe(self) -> None:
        """Delete everything the instance holds (it is stopped)."""
        for child in self.disk.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()

    # -- the admin API ----------------------------------------------------------------

    async def api(self, path: str, method: str = "GET", timeout: float = 5.0) -> Any:
        headers = {"Authorization": f"Bearer {self.cluster.tokens.ops}"}
        async with httpx.AsyncClient(timeout=timeout) as client:
            r = await client.request(method, self.http_url + path, headers=headers)
        r.raise_for_status()
        return r.json()


class Cluster:
    """The instances, their network and their configuration."""

    def __init__(self, root: Path, count: int, topology: str, net: Network) -> None:
        if not 3 <= count <= 5:
            raise ValueError("a cluster has 3 to 5 instances")
        self.root = root
        self.names = ["a", "b", "c", "d", "e"][:count]
        self.topology = topology
        self.links = links(self.names, topology)
        self.net = net
        self.tokens = Tokens()
        if net.isolated:
            ports = {n: NS_PORT for n in self.names}
            proxy = {
                n: {p: NS_PROXY_BASE + self.names.index(p) for p in self.names if p != n}
                for n in self.names
            }
        else:
            free = iter(free_ports(count * count))
            ports = {n: next(free) for n in self.names}
            proxy = {n: {p: next(free) for p in self.names if p != n} for n in self.names}
        self.instances: dict[str, Instance] = {}
        for n in self.names:
            self.instances[n] = Instance(self, n, ports[n], proxy[n])

    def __iter__(self) -> Any:
        return iter(self.instances.values())

    def start(self, disk_mb: int) -> None:
        for inst in self:
            inst.mount(disk_mb)
        for inst in self:
            inst.start_proxy()
        threads = [threading.Thread(target=inst.start) for inst in self]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for inst in self:
            if not inst.running:
                raise RuntimeError(f"{inst.name} did not start:\n{inst.proc.log()}")

    def close(self, keep_data: bool = False) -> None:
        """Stop everything the cluster started (a ``finally``); ``keep_data``: copy each
        instance's files out of its tmpfs first (``Instance.unmount``)."""
        for inst in self:
            with contextlib.suppress(Exception):
                inst.stop()
            inst.stop_proxy()
        for inst in self:
            inst.unmount(keep_data)

    async def durable_marks(self) -> dict[str, int] | None:
        """Each instance's durable log position now (None when one does not answer)."""
        marks = {}
        for inst in self:
            try:
                marks[inst.name] = (await inst.api("/api/replication"))["durable_seq"]
            except (httpx.HTTPError, OSError):
                return None
        return marks

    async def _acked(self) -> dict[str, list[tuple[bool, int]]] | None:
        """Per instance, (connected, acknowledged position) of each destination it has."""
        out = {}
        for inst in self:
            try:
                info = await inst.api("/api/replication")
            except (httpx.HTTPError, OSError):
                return None
            out[inst.name] = [
                (d["connected"], d["last_acked_position"])
                for d in info["destinations"]
                if d["name"] in inst.peers
            ]
        return out

    async def caught_up(self, marks: dict[str, int]) -> bool:
        """Every destination of every instance is connected and acknowledged its log up
        to ``marks`` (a moment's durable positions: the brokers' own records, queue
        transfer requests, keep coming, so "the whole log" would be a moving target)."""
        acked = await self._acked()
        if acked is None:
            return False
        return all(c and pos >= marks.get(n, 0) for n, dests in acked.items() for c, pos in dests)

    async def catch_up_progress(self, marks: dict[str, int]) -> int:
        """How much of the way to ``marks`` the destinations have come (grows while they
        catch up; liveness waits watch it)."""
        acked = await self._acked()
        if acked is None:
            return 0
        return sum(min(pos, marks.get(n, 0)) for n, dests in acked.items() for _, pos in dests)
