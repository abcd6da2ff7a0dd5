"""The scrub family: what the background scrub of a large finished log costs publishers.

One broker whose log already holds a few hundred megabytes of finished journals
(``Tuning/JournalScrubInterval`` 0: the scrub runs only when asked, so "off" is really
off), at the scrub's default pace (``JournalScrubRate``, 64 MB/s). Each run is **paired**
(tests/bench/pairing.py, ABBA): two measurements with a scrub pass under way and two
without, of

- persisted publish throughput (the ``spool.publish.persisted`` workload), then
- persisted-ack latency of a paced publisher (send to the persisted ack covering it).

While a measured side runs, a watcher asks for a new pass (``POST
/api/transaction_log/scrub``) whenever the last one ended, so the scrub reads for the
whole measurement; ``scrub_mb_per_s`` is what it read meanwhile (its
``spool_txlog_scrub_bytes_total`` counter), the proof that it ran. Before every
measurement the finished journals are dropped from the page cache
(``posix_fadvise(DONTNEED)`` on those files only), so the scrub reads the disk as it
would on a server whose old journals are cold, not memory.

``vs_scrub_off`` (throughput) and ``p99_vs_scrub_off`` (latency) are the ratios of the
two sides of one run: the goal a user would accept is that the scrub costs publishers at
most a tenth of their throughput, and does not double their p99.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx

from tests.bench.catalog import ScenarioSpec
from tests.bench.pairing import combined, pair_order
from tests.bench.processes import Task, run_tasks
from tests.bench.spool_families import (
    _persisted_latency_once,
    _pid,
    _publish_once,
    _scrape,
    _seconds,
    _with_broker,
)
from tests.bench.suite import BENCH_TUNING, Suite, reason_of
from tests.bench.workers import publish_burst
from tests.support.server import SpoolProcess

#: the scrub runs only when asked: the "off" side has none
SCRUB_TUNING = BENCH_TUNING + "<JournalScrubInterval>0</JournalScrubInterval>"
#: the bench brokers' journal size (tests/support/server.py): the log the scrub reads is
#: many finished journals
JOURNAL_SIZE = "64MB"
#: bodies of the messages that fill the log before the runs (few messages, many bytes)
FILL_BODY = 8192
#: how often the watcher looks whether the scrub's pass ended
WATCH_S = 0.2


def _fill(suite: Suite, broker: SpoolProcess, megabytes: int) -> dict[str, float]:
    """Publish ``megabytes`` of persisted 8 KB messages: the large finished log."""
    s = suite.settings
    count = megabytes * (1 << 20) // FILL_BODY
    (res,) = run_tasks(
        [
            Task(
                publish_burst,
                {
                    "url": broker.ws_url,
                    "name": "scrub-filler",
                    "topic": "bench/scrub/old",
                    "count": count,
                    "body_bytes": FILL_BODY,
                    "seed": s.seed,
                    "persisted": True,
                    "window": 1000,
                    "per_frame": 10,
                    "timeout": s.worker_timeout * 4,
                },
            )
        ],
        timeout=s.worker_timeout * 4,
    )
    return {"messages": float(count), "seconds": _seconds(res["start_ns"], res["end_ns"])}


def _cold(journal_dir: Path) -> None:
    """Drop this log's journals from the page cache (written back first), so a scrub
    reads them from the disk; other processes' files are untouched."""
    os.sync()
    for path in journal_dir.glob("*.journal"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _scrubbing(http_url: str) -> Iterator[Callable[[], bool]]:
    """A scrub pass under way for as long as the block runs: a new one is asked for
    whenever the last one ended (within :data:`WATCH_S`). Yields a callable saying
    whether the watcher is still at work."""
    stop = threading.Event()

    def watch() -> None:
        with httpx.Client(base_url=http_url, timeout=10) as client:
            while not stop.is_set():
                status = client.get("/api/transaction_log").json()["scrub"]
                if not status["running"]:
                    client.post("/api/transaction_log/scrub").raise_for_status()
                stop.wait(WATCH_S)

    with httpx.Client(base_url=http_url, timeout=10) as client:
        client.post("/api/transaction_log/scrub").raise_for_status()
    thread = threading.Thread(target=watch, name="scrub-watcher", daemon=True)
    thread.start()
    try:
        yield lambda: bool(thread.is_alive())
    finally:
        stop.set()
        thread.join(30)


def _scrub_ended(broker: SpoolProcess, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{broker.http_url}/api/transaction_log", timeout=10).json()["scrub"][
        "running"
    ]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the scrub's pass did not end in {timeout:.0f}s")
        time.sleep(WATCH_S)


def _scrub_bytes(broker: SpoolProcess) -> float:
    return _scrape(broker, "spool_txlog_scrub_bytes_total")


def _side(
    broker: SpoolProcess,
    journal_dir: Path,
    measure: Callable[[], dict[str, float]],
    scrub: bool,
) -> dict[str, float]:
    """One measurement, with the scrub reading the whole time or not at all (a pass
    the other side asked for runs to its end first: a pass cannot be stopped)."""
    _scrub_ended(broker)
    _cold(journal_dir)
    before = _scrub_bytes(broker)
    if not scrub:
        out = measure()
        read = _scrub_bytes(broker) - before
        if read:
            raise RuntimeError(f"the scrub read {read:.0f} bytes on the side without it")
        return out
    started = time.monotonic()
    with _scrubbing(broker.http_url) as alive:
        out = measure()
        if not alive():
            raise RuntimeError("the scrub watcher stopped during the measurement")
        seconds = time.monotonic() - started
        out["scrub_mb_per_s"] = (_scrub_bytes(broker) - before) / seconds / 1e6
    return out


def _paired_once(
    suite: Suite,
    spec: ScenarioSpec,
    broker: SpoolProcess,
    journal_dir: Path,
    order: Iterator[int],
) -> dict[str, float]:
    """Throughput then latency, each ABBA with the scrub on and off (module docstring)."""
    call = next(order)
    sides: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    publish = functools.partial(_publish_once, suite, broker, spec)
    for scrub in pair_order(call):
        sides[scrub].append(_side(broker, journal_dir, publish, scrub))
    latency_spec = ScenarioSpec(
        spec.name, spec.family, spec.title,
        {**spec.params, "rate_per_s": spec.params["latency_rate_per_s"]},
    )  # fmt: skip
    paced = functools.partial(_persisted_latency_once, suite, broker, latency_spec)
    lat: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for scrub in pair_order(call):
        lat[scrub].append(_side(broker, journal_dir, paced, scrub))
    scrubbed = [r.pop("scrub_mb_per_s") for r in (*sides[True], *lat[True])]
    on, off = combined(sides[True]), combined(sides[False])
    lat_on, lat_off = combined(lat[True]), combined(lat[False])
    return {
        "msgs_per_s": on["msgs_per_s"],
        "scrub_off_msgs_per_s": off["msgs_per_s"],
        "vs_scrub_off": on["msgs_per_s"] / off["msgs_per_s"],
        "p50_ms": lat_on["p50_ms"],
        "p99_ms": lat_on["p99_ms"],
        "scrub_off_p50_ms": lat_off["p50_ms"],
        "scrub_off_p99_ms": lat_off["p99_ms"],
        "p99_vs_scrub_off": lat_on["p99_ms"] / lat_off["p99_ms"],
        "scrub_mb_per_s": sum(scrubbed) / len(scrubbed),
    }


def run_scrub(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings
    megabytes = 128 if s.quick else 512

    def body(broker: SpoolProcess) -> None:
        journal_dir = broker.workdir / "data" / "journal"
        try:
            filled = _fill(suite, broker, megabytes)
        except Exception as exc:
            suite.record_all(specs, "error", f"filling the log failed: {reason_of(exc)}")
            return
        suite.log(f"  scrub: {megabytes} MB of finished journals in {filled['seconds']:.1f}s")
        for spec in specs:
            suite.measure(
                spec,
                functools.partial(_paired_once, suite, spec, broker, journal_dir, itertools.count()),
                params={
                    "count": s.publish_count, "per_frame": s.per_frame, "window": s.window,
                    "flush_interval": "1ms", "log_mb": megabytes, "journal_size": JOURNAL_SIZE,
                    "latency_seconds": s.latency_seconds,
                    "paired": "each run: publish twice with a scrub pass under way and "
                    "twice without, ABBA; then the paced latency the same way",
                },
                profile_pid=functools.partial(_pid, broker),
            )  # fmt: skip

    _with_broker(suite, "scrub", specs, body, tuning=SCRUB_TUNING)
