"""One soak run: the broker, the clients, the faults in turn, the drain, the oracle.

Bounded in time (``minutes`` of faults, then at most ``drain_timeout`` for the clients to
finish) and in count (``max_messages`` per publisher). The summary is a table for people
and the same numbers as JSON (:meth:`SoakResult.to_json`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psutil

from tests.soak.actors import (
    TOPICS,
    BookmarkSubscriber,
    LiveSubscriber,
    Publisher,
)
from tests.soak.faults import Broker, FaultLog, fill, tmpfs, wait_for
from tests.soak.oracle import Verdict, judge, matches, read_log
from tests.support.server import SpoolProcess, config_xml

__all__ = ["SoakResult", "SoakSettings", "run_soak"]

NAME = "soak"
#: how long a fault may take to bite (a disk that fills) or the clients to recover
FAULT_TIMEOUT = 90.0


@dataclass
class SoakSettings:
    """What a run does. Defaults: the 5-minute ``make soak``."""

    minutes: float = 5.0
    seed: int = 20261123
    publishers: int = 3
    rate: float = 150.0  # messages per second per publisher
    fault_gap: float = 8.0  # mean seconds between the end of a fault and the next
    freeze: float = 3.0  # SIGSTOP this long (3 heartbeats)
    heartbeat: float = 1.0
    disk_mb: int = 0  # the tmpfs; 0: room for what the run writes (~40 MB a minute) + 25%
    max_messages: int = 0  # per publisher; 0: rate x duration x 1.5
    drain_timeout: float = 180.0
    slow_delay: float = 0.01  # the slow reader's time per message (100 msg/s)
    burst: int = 3000  # messages of 2 KB in a burst (0: no burst publisher)
    burst_pause: float = 20.0  # seconds between bursts

    def disk_size_mb(self) -> int:
        return self.disk_mb or max(384, int(64 + 50 * self.minutes))

    def message_cap(self) -> int:
        return self.max_messages or int(self.rate * self.minutes * 60 * 1.5) + 1000


@dataclass
class SoakResult:
    """The numbers of a run and the oracle's verdict."""

    settings: SoakSettings
    faults: FaultLog
    verdict: Verdict
    elapsed_s: float
    published: int
    acked: int
    stored: int
    refused: int
    reconnects: int
    processed: dict[str, int]
    received: dict[str, int]
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    broker_counters: dict[str, int] = field(default_factory=dict)
    leaked: list[str] = field(default_factory=list)
    exit_code: int | None = None

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.leaked and not self.faults.misses

    def to_json(self) -> dict[str, object]:
        s = self.settings
        return {
            "ok": self.ok,
            "minutes": s.minutes,
            "seed": s.seed,
            "elapsed_s": round(self.elapsed_s, 1),
            "publishers": s.publishers,
            "rate_per_publisher": s.rate,
            "faults": dict(self.faults.injected),
            "faults_skipped": self.faults.skipped,
            "fault_misses": self.faults.misses,
            "recovery_s": self.faults.recovery_s,
            "messages": {
                "published": self.published,
                "acked": self.acked,
                "stored": self.stored,
                "refused_txlog_full": self.refused,
                "publisher_reconnects": self.reconnects,
            },
            "duplicates": self.verdict.duplicates,
            "lost": self.verdict.lost,
            "bookmark_subscribers": self.processed,
            "live_subscribers": self.received,
            "checks": [
                {"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.verdict.checks
            ],
            "client_errors": self.errors,
            "broker_counters": self.broker_counters,
            "processes_leaked": self.leaked,
            "broker_exit_code": self.exit_code,
        }

    def table(self) -> str:
        s = self.settings
        kinds = ("kill", "stop", "disk")
        rows = [
            f"Spool soak: {s.minutes:g} min of faults, {self.elapsed_s:.0f} s in all, seed "
            f"{s.seed}; {s.publishers} publishers at {s.rate:g} msg/s each",
            "",
            f"{'fault':<10}{'injected':>10}{'recovery median s':>20}{'max s':>8}",
        ]
        for kind in kinds:
            times = self.faults.recovery_s.get(kind, [])
            med = f"{statistics.median(times):.2f}" if times else "-"
            top = f"{max(times):.2f}" if times else "-"
            note = (
                f"  (skipped: {self.faults.skipped[kind]})" if kind in self.faults.skipped else ""
            )
            rows.append(f"{kind:<10}{self.faults.injected[kind]:>10}{med:>20}{top:>8}{note}")
        rows += [
            "",
            f"messages published {self.published}, acked {self.acked}, stored {self.stored}, "
            f"refused (txlog full) {self.refused}, publisher reconnects {self.reconnects}",
            f"duplicates {self.verdict.duplicates}   lost {self.verdict.lost}",
            "broker: "
            + (", ".join(f"{k} {v}" for k, v in sorted(self.broker_counters.items())) or "-"),
            "",
        ]
        cut = {k: v for k, v in self.broker_counters.items() if k.startswith("disconnects/slow")}
        if any(cut.values()):
            # the slow reader keeps reading: back-pressure should spill it to the log, not
            # cut it; the oracle still holds (it resumes), so this is reported, not failed
            rows.append(f"WARN  slow-client disconnects of a reader that keeps reading: {cut}")
        for c in self.verdict.checks:
            rows.append(f"{'PASS' if c.ok else 'FAIL'}  {c.name}: {c.detail}")
        for miss in self.faults.misses:
            rows.append(f"FAIL  fault: {miss}")
        rows.append(
            f"{'PASS' if not self.leaked else 'FAIL'}  processes leaked: "
            f"{len(self.leaked)}{' ' + ', '.join(self.leaked) if self.leaked else ''}"
        )
        rows.append(f"verdict: {'PASS' if self.ok else 'FAIL'}")
        return "\n".join(rows)


def run_soak(workdir: Path, settings: SoakSettings) -> SoakResult:
    """Run the soak in ``workdir`` (the data directory goes on a tmpfs there when root)."""
    started = time.monotonic()
    standing = standing_children()
    disk = workdir / "disk"
    with tmpfs(disk, settings.disk_size_mb()) as why_not:
        data = disk / "data"
        xml = config_xml(
            data,
            name=NAME,
            journal_size="1MB",
            flush_interval="2ms",
            txlog_extra=(
                "<PreallocatedJournalFiles>1</PreallocatedJournalFiles>"
                "<WriteRetryInterval>200ms</WriteRetryInterval>"
            ),
            tuning="<SlowClientBufferLimit>128KB</SlowClientBufferLimit>",
            transport_extra="<MaxMessageSize>128KB</MaxMessageSize>",
        )
        proc = SpoolProcess(workdir / "run", xml)
        faults = FaultLog()
        if why_not is not None:
            faults.skipped["disk"] = why_not
        actors = _Actors(settings, Broker(proc), workdir)
        try:
            proc.start()
            asyncio.run(_run(actors, settings, faults, None if why_not else disk))
        finally:
            exit_code = proc.stop()
        log = read_log(data / "journal", data / "archive", NAME)
    verdict = judge(
        log, actors.publishers, actors.bookmark_subs, actors.live_subs, actors.broker.killed
    )
    return SoakResult(
        settings=settings,
        faults=faults,
        verdict=verdict,
        elapsed_s=time.monotonic() - started,
        published=sum(p.top for p in actors.publishers),
        acked=sum(p.acked for p in actors.publishers),
        stored=len(log.records),
        refused=sum(p.refused for p in actors.publishers),
        reconnects=sum(p.reconnects for p in actors.publishers),
        processed={b.name: len(b.processed) for b in actors.bookmark_subs},
        received={s.name: s.received for s in actors.live_subs},
        errors={
            a.name: dict(a.errors)
            for a in (*actors.publishers, *actors.bookmark_subs, *actors.live_subs)
        },
        broker_counters=dict(actors.broker.counters),
        leaked=leaked_processes(workdir, standing),
        exit_code=exit_code,
    )


class _Actors:
    """The clients of one run."""

    def __init__(self, settings: SoakSettings, broker: Broker, workdir: Path) -> None:
        self.broker = broker
        hb = settings.heartbeat
        cap = settings.message_cap()
        self.publishers = [
            Publisher(broker, f"pub-{i}", settings.rate, cap, heartbeat=hb)
            for i in range(1, settings.publishers + 1)
        ]
        if settings.burst:
            # 2 KB messages back to back: more than the kernel's socket buffers hold, so
            # the slow reader's subscription has to spill to the log and catch up
            self.publishers.append(
                Publisher(
                    broker,
                    "burst",
                    settings.rate,
                    cap,
                    batch=20,  # 40 KB frames, within MaxMessageSize
                    pad=2000,
                    heartbeat=hb,
                    topic=_burst_topic,
                    burst=settings.burst,
                    pause=settings.burst_pause,
                )
            )
        records = workdir / "bookmarks"
        records.mkdir(parents=True, exist_ok=True)
        self.bookmark_subs = [
            BookmarkSubscriber(broker, "bm-a", TOPICS[0], records / "bm-a.txt", heartbeat=hb),
            BookmarkSubscriber(broker, "bm-all", r"^soak\.", records / "bm-all.txt", heartbeat=hb),
        ]
        self.live_subs = [
            LiveSubscriber(broker, "live-b", TOPICS[1], heartbeat=hb),
            LiveSubscriber(broker, "live-all", r"^soak\.", heartbeat=hb),
            LiveSubscriber(
                broker,
                "slow-reader",
                r"^soak\.",
                delay=settings.slow_delay,
                queue_size=50,
                heartbeat=hb,
            ),
        ]

    def expected(self, sub: BookmarkSubscriber) -> int:
        """How many messages of ``sub``'s topics the publishers stored (each ``1..top``)."""
        return sum(
            1
            for p in self.publishers
            for seq in range(1, p.top + 1)
            if matches(sub.topic, p.topic(seq))
        )


def _burst_topic(seq: int) -> str:
    return TOPICS[2]


async def _run(
    actors: _Actors, settings: SoakSettings, faults: FaultLog, disk: Path | None
) -> None:
    stop = asyncio.Event()
    clients = [
        asyncio.create_task(a.run(stop))
        for a in (*actors.publishers, *actors.bookmark_subs, *actors.live_subs)
    ]
    reporter = asyncio.create_task(_report(actors, faults))
    try:
        await _inject(actors, settings, faults, disk)
        for p in actors.publishers:
            p.draining = True
        drained = await wait_for(
            lambda: all(p.done for p in actors.publishers), settings.drain_timeout
        )
        if drained is None:
            faults.misses.append("publishers did not get everything acknowledged in time")
        for b in actors.bookmark_subs:
            b.expected = actors.expected(b)
        caught_up = await wait_for(
            lambda: all(b.done for b in actors.bookmark_subs), settings.drain_timeout
        )
        if caught_up is None:
            faults.misses.append("bookmark subscribers did not catch up in time")
    finally:
        reporter.cancel()
        await actors.broker.scrape()
        stop.set()
        _, pending = await asyncio.wait(clients, timeout=30)
        for task in pending:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pending, return_exceptions=True)


async def _inject(
    actors: _Actors, settings: SoakSettings, faults: FaultLog, disk: Path | None
) -> None:
    """Faults in turn (kill, stop, disk) until ``minutes`` have passed."""
    rng = random.Random(settings.seed)
    kinds = ["kill", "stop"] + (["disk"] if disk is not None else [])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.minutes * 60
    pubs = actors.publishers
    n = 0
    while True:
        gap = rng.uniform(settings.fault_gap * 0.5, settings.fault_gap * 1.5)
        if loop.time() + gap >= deadline:
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            return
        await asyncio.sleep(gap)
        kind = kinds[n % len(kinds)]
        n += 1
        if kind == "kill":
            await actors.broker.kill_and_restart()
        elif kind == "stop":
            await actors.broker.freeze(settings.freeze)
        else:
            assert disk is not None
            refused = sum(p.refused for p in pubs)
            filler = await asyncio.to_thread(fill, disk)
            try:
                bit = await wait_for(partial(_refused_since, pubs, refused), FAULT_TIMEOUT)
                if bit is None:
                    faults.misses.append(f"disk: never refused within {FAULT_TIMEOUT:g} s")
                else:
                    await asyncio.sleep(1.0)  # refused for a while: retries happen meanwhile
            finally:
                filler.unlink()
        faults.injected[kind] += 1
        marks = {p.name: p.acked for p in pubs}
        took = await wait_for(partial(_progressed, pubs, marks), FAULT_TIMEOUT)
        if took is None:
            faults.misses.append(f"{kind}: publishers made no progress within {FAULT_TIMEOUT:g} s")
        else:
            faults.recovered(kind, took)


async def _report(actors: _Actors, faults: FaultLog, every: float = 15.0) -> None:
    """A progress line on stderr every ``every`` seconds (a long run shows it is alive)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        await asyncio.sleep(every)
        pubs = " ".join(
            f"{p.name}={p.acked}/{p.top}{'D' if p.draining else ''}" for p in actors.publishers
        )
        subs = " ".join(
            f"{b.name}={len(b.processed)}/{b.expected if b.expected is not None else '?'}"
            for b in actors.bookmark_subs
        )
        live = " ".join(f"{s.name}={s.received}" for s in actors.live_subs)
        print(
            f"[soak {loop.time() - start:5.0f}s] faults {dict(faults.injected)} | {pubs} | "
            f"{subs} | {live}",
            file=sys.stderr,
            flush=True,
        )


def _refused_since(pubs: list[Publisher], before: int) -> bool:
    return sum(p.refused for p in pubs) > before


def _progressed(pubs: list[Publisher], marks: dict[str, int]) -> bool:
    """Every publisher got a persisted ack past ``marks``, or has everything acknowledged
    and nothing to send now (a burst publisher in its pause, one at its cap)."""
    return all(
        p.acked > marks[p.name] or (p.acked >= p.top and (p.burst or p.top >= p.max_messages))
        for p in pubs
    )


def standing_children() -> frozenset[int]:
    """This process's children before a run (helpers an earlier test left running in the
    same process, such as multiprocessing's forkserver): :func:`leaked_processes` does not
    count them."""
    return frozenset(c.pid for c in psutil.Process().children(recursive=True))


def leaked_processes(workdir: Path, before: frozenset[int] = frozenset()) -> list[str]:
    """Processes still alive that belong to the run: our children not among ``before``
    (:func:`standing_children` at the start), or anything started with a path under
    ``workdir`` on its command line."""
    leaked: dict[int, str] = {}
    for child in psutil.Process().children(recursive=True):
        if child.pid in before:
            continue
        with contextlib.suppress(psutil.Error):
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                leaked[child.pid] = " ".join(child.cmdline())[:120]
    marker = str(workdir / "run")  # the broker's config lives there
    for p in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(p.info["cmdline"] or [])
            if marker in cmd and p.pid not in leaked:
                leaked[p.pid] = cmd[:120]
    return [f"{pid}: {cmd}" for pid, cmd in sorted(leaked.items())]
