"""One nemesis run: the cluster, the clients, the schedule, the final heal, the checker.

The phases, each bounded by progress rather than by the wall clock (a stall bound: how
long nothing may move before a wait gives up and says so):

1. build the network and start the instances (ready: recovered and listening);
2. start the clients; run the schedule's periods one after the other (each fault
   healed at its end, then a wait until the publishers move again);
3. the final heal: publishers stop taking new sequence numbers and get everything
   acknowledged; every copy catches up; the bookmark subscribers process every
   acknowledged message; every instance delivers every delayed message it holds (none
   pending); the queue drains; a last SOW snapshot. A wait that stalls is a
   ``liveness`` failure in the history (the run goes on to the checker);
4. stop the instances (SIGTERM), read every journal, check, report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from spool.server.bookmarks import pub_hash
from tests.nemesis.checker import HeldOrders, Verdict, check, held_orders
from tests.nemesis.cluster import QUEUE, TOPIC_DELAY, TOPIC_PUB, TOPIC_QIN, TOPIC_SOW, Cluster
from tests.nemesis.history import Histories, read_history
from tests.nemesis.journals import InstanceLog, read_instance
from tests.nemesis.nemesis import FILLER, Nemesis, progress_wait
from tests.nemesis.net import Network
from tests.nemesis.schedule import KINDS, Schedule, draw_schedule
from tests.nemesis.workloads import (
    Delays,
    Endpoints,
    HAPublisher,
    HASubscriber,
    Publisher,
    QueueConsumer,
    SowReader,
    sow_body,
)
from tests.soak.harness import leaked_processes, standing_children
from tests.support.disk import mount_tmpfs, unmount

__all__ = ["Result", "Settings", "run_nemesis"]

#: the tmpfs of the HA clients' file stores (an hour's run writes a few tens of MB)
STORES_MB = 256

SOW_KEYS = 40


@dataclass
class Settings:
    """What a run does. Defaults: ``make nemesis`` (5 minutes, 3 instances)."""

    minutes: float = 5.0
    seed: int = 20261129
    instances: int = 3
    topology: str = "mixed"
    faults: tuple[str, ...] = tuple(KINDS)
    #: scales every fault's nominal duration (the CI variant runs shorter ones)
    pace: float = 1.0
    rate: float = 40.0  # messages per second of each nem.pub publisher
    netns: bool = True
    #: seconds without progress before a wait gives up (liveness bound)
    stall: float = 120.0
    disk_mb: int = 0  # each instance's tmpfs; 0: sized from the run's length

    def disk_size_mb(self) -> int:
        return self.disk_mb or int(96 + 6 * self.minutes)


@dataclass
class Result:
    settings: Settings
    schedule: Schedule
    verdict: Verdict
    elapsed_s: float
    injected: dict[str, int]
    skipped: dict[str, str]
    misses: list[str]
    recovery_s: dict[str, list[float]]
    network: str
    published: dict[str, int] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    snapshots: int = 0
    leaked: list[str] = field(default_factory=list)
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    workdir: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.leaked

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "settings": asdict(self.settings),
            "schedule": [p.to_json() for p in self.schedule.periods],
            "elapsed_s": round(self.elapsed_s, 1),
            "network": self.network,
            "faults": {
                "injected": self.injected,
                "skipped": self.skipped,
                "misses": self.misses,
                "recovery_s": self.recovery_s,
            },
            "messages": {
                "published": self.published,
                "acked": self.acked,
                "stored": self.stored,
            },
            "sow_snapshots": self.snapshots,
            "delayed": self.verdict.delayed,
            "checked": self.verdict.checked,
            "notes": self.verdict.notes,
            "anomaly_counts": dict(self.verdict.counts()),
            "anomalies": [a.to_json() for a in self.verdict.anomalies],
            "processes_leaked": self.leaked,
            "exit_codes": self.exit_codes,
            "workdir": self.workdir,
        }


def run_nemesis(workdir: Path, settings: Settings, keep_data: bool = False) -> Result:
    """Run in ``workdir`` (histories, stores, instance directories, the report);
    ``keep_data``: each instance's data directory stays there too, in
    ``cluster/<name>/disk-kept`` (as root it lives on a tmpfs unmounted at the end)."""
    started = time.monotonic()
    standing = standing_children()
    workdir.mkdir(parents=True, exist_ok=True)
    names = ["a", "b", "c", "d", "e"][: settings.instances]
    schedule = draw_schedule(
        settings.seed, names, settings.minutes * 60, settings.faults, pace=settings.pace
    )
    (workdir / "run.json").write_text(
        json.dumps(
            {"settings": asdict(settings), "schedule": [p.to_json() for p in schedule.periods]},
            indent=2,
        )
    )
    net = Network.build(names, want_isolation=settings.netns)
    cluster = Cluster(workdir / "cluster", settings.instances, settings.topology, net)
    histories = Histories(workdir / "history")
    logs: dict[str, InstanceLog] = {}
    earlier: list[HeldOrders] = []
    exit_codes: dict[str, int | None] = {}
    state: dict[str, Any] = {}
    stores = workdir / "stores"
    # the HA clients' file stores on a disk of their own, for the client-disk-full fault
    state["stores_tmpfs"] = mount_tmpfs(stores, f"{STORES_MB}m")
    try:
        cluster.start(settings.disk_size_mb())
        asyncio.run(_run(cluster, histories, schedule, settings, workdir, state))
        histories.close()
        for inst in cluster:
            exit_codes[inst.name] = inst.stop()
        for inst in cluster:
            logs[inst.name] = read_instance(inst.data, inst.name)
        earlier = earlier_orders(cluster, keep_data)
    finally:
        histories.close()
        cluster.close(keep_data)
        net.down()
        if state["stores_tmpfs"] is None:
            if keep_data:
                with contextlib.suppress(OSError):
                    shutil.copytree(stores, workdir / "stores-kept", dirs_exist_ok=True)
            unmount(stores)
    events = list(read_history(workdir / "history"))
    verdict = check(events, logs, earlier=earlier)
    nem: Nemesis | None = state.get("nemesis")
    pubs = state.get("publishers", [])
    return Result(
        settings=settings,
        schedule=schedule,
        verdict=verdict,
        elapsed_s=time.monotonic() - started,
        injected=dict(nem.injected) if nem else {},
        skipped=dict(nem.skipped) if nem else {},
        misses=list(nem.misses) if nem else ["the run did not start"],
        recovery_s=dict(nem.recovery_s) if nem else {},
        network=(
            f"namespaces on 10.238.{net.subnet}.0/24"
            if net.isolated
            else f"loopback ({net.why_not})"
        ),
        published={p.name: p.top for p in pubs},
        acked={p.name: p.acked for p in pubs},
        stored={n: len(log.records) for n, log in logs.items()},
        snapshots=nem.snapshots if nem else 0,
        leaked=leaked_processes(workdir / "cluster", standing),
        exit_codes=exit_codes,
        workdir=str(workdir),
    )


def earlier_orders(cluster: Cluster, keep_data: bool) -> list[HeldOrders]:
    """The orders of the journals the faults replaced (the checker's ``earlier``), read
    from what :meth:`Instance.earlier_log` kept; those copies are removed after reading
    unless ``keep_data``."""
    out = []
    for inst in cluster:
        for data in inst.earlier_logs():
            out.append(held_orders(read_instance(data, inst.name).records))
            if not keep_data:
                shutil.rmtree(data.parent)
    return out


async def _run(
    cluster: Cluster,
    histories: Histories,
    schedule: Schedule,
    settings: Settings,
    workdir: Path,
    state: dict[str, Any],
) -> None:
    names = cluster.names
    ends = Endpoints({i.name: i.ws_url for i in cluster}, "app", cluster.tokens.app)
    ends.gate.set()
    stores = workdir / "stores"
    stores.mkdir(exist_ok=True)
    rec = histories.recorder
    rate = settings.rate
    rng = random.Random(settings.seed ^ 0x5EED)
    consumers = [
        QueueConsumer(rec(f"qc-{n}"), ends, f"qc-{n}", n, random.Random(rng.random()))
        for n in names
    ]
    delays = Delays(random.Random(rng.random()))
    publishers: list[Publisher | HAPublisher] = [
        Publisher(rec("pub-1"), ends, "pub-1", TOPIC_PUB, names[0], rate),
        Publisher(rec("pub-2"), ends, "pub-2", TOPIC_PUB, names[1], rate),
        HAPublisher(rec("ha-pub-1"), ends, "ha-pub-1", names[2], stores / "ha-pub-1.store", rate),
        Publisher(rec("qpub"), ends, "qpub", TOPIC_QIN, names[0], rate / 3, batch=5),
        Publisher(
            rec("sow-w-1"),
            ends,
            "sow-w-1",
            TOPIC_SOW,
            names[1],
            rate / 4,
            batch=5,
            body=sow_body(SOW_KEYS),
        ),
        Publisher(
            rec("sow-w-2"),
            ends,
            "sow-w-2",
            TOPIC_SOW,
            names[-1],
            rate / 4,
            batch=5,
            body=sow_body(SOW_KEYS),
        ),
        # published on one instance, subscribed on another: the due record dsub reads is
        # written from the clock of an instance that got the message by replication
        Publisher(
            rec("dpub"), ends, "dpub", TOPIC_DELAY, names[-1], rate / 4, batch=5, delays=delays
        ),
    ]
    subscribers = [
        HASubscriber(rec("ha-sub-1"), ends, "ha-sub-1", names[0], stores / "ha-sub-1.store"),
        HASubscriber(rec("ha-sub-2"), ends, "ha-sub-2", names[-1], stores / "ha-sub-2.store"),
        HASubscriber(
            rec("dsub"),
            ends,
            "dsub",
            names[0],
            stores / "dsub.store",
            topic=TOPIC_DELAY,
            timed=True,
        ),
    ]
    reader = SowReader(rec("sow-reader"), ends)
    state["publishers"] = publishers
    ha_publishers = [p for p in publishers if isinstance(p, HAPublisher)]
    stop = asyncio.Event()
    clients = [*publishers, *subscribers, *consumers, reader]
    tasks = [asyncio.create_task(c.run(stop), name=getattr(c, "name", "client")) for c in clients]
    nemesis = Nemesis(
        cluster,
        ends,
        rec("nemesis"),
        acked=lambda: sum(p.acked for p in publishers),
        settled=lambda: all(p.acked >= p.top for p in publishers),
        rng=rng,
        stall=settings.stall,
        filler=rec(FILLER),
        stores=stores,
        stores_tmpfs=state["stores_tmpfs"],
        store_failed=lambda: any(
            c is not None and c.store_failure is not None
            for c in [p.client for p in ha_publishers] + [s.client for s in subscribers]
        ),
    )
    state["nemesis"] = nemesis
    background = [
        asyncio.create_task(_flush(histories)),
        asyncio.create_task(_report(publishers, subscribers, consumers, nemesis)),
    ]
    try:
        # the clients first connect and move before the first fault
        await progress_wait(
            lambda: all(p.acked > 0 for p in publishers),
            nemesis.acked,
            stall=settings.stall,
            cap=settings.stall * 2,
        )
        for period in schedule.periods:
            nemesis.rec.info("period", {"index": period.index, "what": period.describe()})
            print(f"[nemesis] {period.describe()}", file=sys.stderr, flush=True)
            await nemesis.run_period(period)
        await _final(cluster, nemesis, publishers, subscribers, consumers, settings)
    finally:
        stop.set()
        _, pending = await asyncio.wait(tasks, timeout=30)
        for t in pending:
            t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pending, return_exceptions=True)
        for t in background:
            t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*background, return_exceptions=True)


async def _final(
    cluster: Cluster,
    nemesis: Nemesis,
    publishers: list[Publisher | HAPublisher],
    subscribers: list[HASubscriber],
    consumers: list[QueueConsumer],
    settings: Settings,
) -> None:
    """The final heal and the liveness checks (each bounded by progress)."""
    rec = nemesis.rec
    cluster.net.heal()
    for inst in cluster:
        inst.delay_control.write_text("")
        inst.clock_control.write_text("0\n")
        inst.resume()
    rec.info("final-heal")
    stall, cap = settings.stall, settings.stall * 10

    async def bounded(what: str, done: Any, progress: Any) -> bool:
        ok, took = await progress_wait(done, progress, stall=stall, cap=cap)
        if ok:
            rec.ok("liveness", {"what": what, "seconds": round(took, 2)})
        else:
            rec.fail(
                "liveness", {"what": f"{what}: {await _detail(what)}", "seconds": round(took, 2)}
            )
        return ok

    async def _detail(what: str) -> str:
        if what.startswith("publishers"):
            return ", ".join(
                f"{p.name} acked {p.acked} of {p.top}" for p in publishers if not p.done
            )
        if what.startswith("copies"):
            out = []
            for inst in cluster:
                with contextlib.suppress(Exception):
                    info = await inst.api("/api/replication")
                    out.append(
                        f"{inst.name} durable {info['durable_seq']}: "
                        + ", ".join(
                            f"->{d['name']} {'up' if d['connected'] else 'down'} "
                            f"acked {d['last_acked_position']}"
                            for d in info["destinations"]
                        )
                    )
            return "; ".join(out)
        if what.startswith("subscribers"):
            return ", ".join(f"{s.name} lacks {len(wanted(s) - s.seen)}" for s in subscribers)
        if what.startswith("delayed"):
            return "; ".join(
                f"{n} pending {d.get('pending')} next due {d.get('next_due')} "
                f"waiting {d.get('waiting')}"
                for n, d in (await delayed()).items()
            )
        if what.startswith("queue"):
            left = sorted(queue_expected - acked())
            depths = []
            for inst in cluster:
                try:
                    q = await inst.api(f"/api/queues/{QUEUE}")
                except Exception as exc:
                    depths.append(f"{inst.name} unreadable ({exc!r:.120})")
                    continue
                depths.append(f"{inst.name} depth {q['depth']} owned {q['owned']}")
            return f"{len(left)} never acked (n = {left[:20]}); " + "; ".join(depths)
        return ""

    for p in publishers:
        p.draining = True
    await bounded(
        "publishers get every message acknowledged",
        lambda: all(p.done for p in publishers),
        nemesis.acked,
    )
    marks: dict[str, int] = {}

    async def marked() -> bool:
        marks.update(await cluster.durable_marks() or {})
        return bool(marks)

    await progress_wait(marked, lambda: 0, stall=stall, cap=cap)
    await bounded(
        "copies catch up",
        lambda: cluster.caught_up(marks),
        lambda: cluster.catch_up_progress(marks),
    )
    expected = {
        (pub_hash(p.name), s)
        for p in publishers
        if p.name.startswith(("pub-", "ha-pub-"))
        for s in range(1, p.acked + 1)
    }
    dexpected = {
        (pub_hash(p.name), s) for p in publishers if p.name == "dpub" for s in range(1, p.acked + 1)
    }

    def wanted(s: HASubscriber) -> set[tuple[int, int]]:
        return dexpected if s.topic == TOPIC_DELAY else expected

    await bounded(
        "subscribers process every acknowledged message",
        lambda: all(wanted(s) <= s.seen for s in subscribers),
        lambda: sum(len(s.seen) for s in subscribers),
    )

    async def delayed() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for inst in cluster:
            try:
                out[inst.name] = await inst.api("/api/delayed")
            except Exception as exc:
                out[inst.name] = {"pending": None, "error": repr(exc)[:120]}
        return out

    async def pending() -> int:
        """Minus the delayed messages still pending on every instance (grows as they
        fall due; one that does not answer counts as a million)."""
        return -sum(
            10**6 if d.get("pending") is None else int(d["pending"])
            for d in (await delayed()).values()
        )

    async def none_pending() -> bool:
        return await pending() == 0

    # each instance writes its own due records: one whose timer missed the due time
    # would hold its delayed messages forever, which dsub (on one instance) cannot see
    await bounded("delayed messages fall due on every instance", none_pending, pending)
    qpub = next(p for p in publishers if p.name == "qpub")
    queue_expected = set(range(1, qpub.acked + 1))

    def acked() -> set[int]:
        out: set[int] = set()
        for c in consumers:
            out |= c.attempted
        return out

    async def drained() -> bool:
        if not queue_expected <= acked():
            return False
        for inst in cluster:
            try:
                q = await inst.api(f"/api/queues/{QUEUE}")
            except Exception:
                return False
            if q["depth"]:
                return False
        return True

    await bounded("queue drains on every instance", drained, lambda: len(acked()))
    if not await nemesis.snapshot(-1):
        rec.fail("liveness", {"what": "the final SOW snapshot could not be taken"})


async def _flush(histories: Histories) -> None:
    while True:
        await asyncio.sleep(1.0)
        histories.flush()


async def _report(
    publishers: list[Publisher | HAPublisher],
    subscribers: list[HASubscriber],
    consumers: list[QueueConsumer],
    nemesis: Nemesis,
    every: float = 15.0,
) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        await asyncio.sleep(every)
        pubs = " ".join(f"{p.name}={p.acked}/{p.top}" for p in publishers)
        subs = " ".join(f"{s.name}={len(s.seen)}" for s in subscribers)
        qc = sum(c.acked for c in consumers)
        print(
            f"[nemesis {loop.time() - start:5.0f}s] faults {dict(nemesis.injected)} | {pubs} | "
            f"{subs} | queue acked {qc}",
            file=sys.stderr,
            flush=True,
        )


def load_settings(path: Path) -> Settings:
    """The settings a run wrote to its ``run.json`` (to replay it)."""
    d = orjson.loads(path.read_bytes())["settings"]
    d["faults"] = tuple(d["faults"])
    return Settings(**d)
