"""Transaction-log benchmarks (not tests): group commit, ack latency, restart, replay reads.

Run: ``python -m tests.bench.bench_txlog [--quick]``; prints a JSON dict of metrics.

- ``append_us``: cost of one ``append()`` on the event loop (encode, index, buffer).
- ``durable_appends_per_s``: 100-byte bodies appended as fast as the loop allows,
  FlushInterval 1 ms, until all are fsynced (group commit).
- ``ack_p50_ms`` / ``ack_p99_ms`` / ``ack_fsyncs_per_s``: appends paced at 20k msgs/s,
  latency from append to the durable callback.
- ``open_s`` / ``open_rebuild_s``: restart with N records (1M, or 200k quick) with
  indexes, then with every ``.index`` and ``clients.ack`` deleted.
- ``read_batch_records_per_s`` / ``read_view_records_per_s``: replay from the journal
  files (tail cache off), as lists of Record and as columnar batches.
- ``bookmark_lookup_us`` / ``later_lookup_us`` / ``time_lookup_us``: random lookups over
  the whole log (``later``: where a resume after the bookmark starts at the latest).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from spool.server.config import TransactionLogConfig
from spool.server.txlog import TransactionLog

BODY = b'{"order":123456,"sym":"ABCD","qty":100,"px":101.25,"side":"buy","acct":"XYZ-1"}'.ljust(
    100, b" "
)


def _config(tmp: Path, flush: float = 0.001) -> TransactionLogConfig:
    return TransactionLogConfig(
        journal_directory=tmp / "journal",
        archive_directory=tmp / "archive",
        preallocated_files=2,
        journal_size=64 * 1024 * 1024,
        flush_interval=flush,
    )


async def _fill(log: TransactionLog, n: int, publishers: int = 10) -> float:
    """Append ``n`` records as fast as possible; seconds until all are durable."""
    start = time.perf_counter()
    next_ps = [log.publisher_last(p + 1) + 1 for p in range(publishers)]
    i = 0
    while i < n:
        for _ in range(min(2000, n - i)):
            p = i % publishers
            log.append(
                topic="orders", message_type="json", pub_hash=p + 1, pub_seq=next_ps[p], body=BODY
            )
            next_ps[p] += 1
            i += 1
        await asyncio.sleep(0)  # let the flusher hand batches to its thread
    await log.wait_durable(log.last_seq)
    return time.perf_counter() - start


async def _append_cost(tmp: Path, n: int) -> float:
    log = TransactionLog(_config(tmp), "bench")
    await log.open()
    start = time.perf_counter()
    for i in range(n):
        log.append(topic="orders", message_type="json", pub_hash=1, pub_seq=i + 1, body=BODY)
    cost = (time.perf_counter() - start) / n * 1e6
    await log.close()
    return cost


async def _throughput(tmp: Path, n: int) -> dict[str, float]:
    log = TransactionLog(_config(tmp), "bench")
    await log.open()
    seconds = await _fill(log, n)
    stats = log.stats()
    await log.close()
    return {
        "durable_appends_per_s": n / seconds,
        "durable_flushes": stats["flushes"],
        "durable_records_per_flush": n / max(stats["flushes"], 1.0),
    }


async def _latency(tmp: Path, seconds: float, rate: int = 20_000) -> dict[str, float]:
    log = TransactionLog(_config(tmp), "bench")
    await log.open()
    sent: dict[int, float] = {}
    lat: list[float] = []

    def durable(seq: int) -> None:
        now = time.perf_counter()
        for s in [s for s in sent if s <= seq]:
            lat.append(now - sent.pop(s))

    log.add_durable_listener(durable)
    start = time.perf_counter()
    ps = 0
    while (elapsed := time.perf_counter() - start) < seconds:
        due = rate * elapsed  # paced on the clock, whatever the sleeps overshoot
        while ps < due:
            ps += 1
            rec = log.append(topic="orders", message_type="json", pub_hash=1, pub_seq=ps, body=BODY)
            sent[rec.seq] = time.perf_counter()
        await asyncio.sleep(0.0005)
    await log.wait_durable(log.last_seq)
    stats = log.stats()
    await log.close()
    lat.sort()
    return {
        "ack_msgs_per_s": ps / seconds,
        "ack_p50_ms": statistics.median(lat) * 1000,
        "ack_p99_ms": lat[int(len(lat) * 0.99)] * 1000,
        "ack_fsyncs_per_s": stats["flushes"] / seconds,
        "ack_fsync_p50_ms": stats["fsync_p50_ms"],
        "ack_fsync_p99_ms": stats["fsync_p99_ms"],
    }


async def _restart_and_replay(tmp: Path, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    log = TransactionLog(_config(tmp), "bench")
    await log.open()
    await _fill(log, n)
    await log.close()

    log = TransactionLog(_config(tmp), "bench", tail_cache_bytes=0)
    start = time.perf_counter()
    report = await log.open()
    out["open_s"] = time.perf_counter() - start
    assert report.records_recovered == n, report

    start = time.perf_counter()
    seq, count = 1, 0
    while count < n:
        batch = await log.read_batch(seq, max_count=1000)
        count += len(batch)
        seq += len(batch)
    out["read_batch_records_per_s"] = n / (time.perf_counter() - start)

    start = time.perf_counter()
    seq, count = 1, 0
    while count < n:
        got = len(await log.read_view(seq, max_count=1000))
        count += got
        seq += got
    out["read_view_records_per_s"] = n / (time.perf_counter() - start)

    rng = random.Random(1)
    per_pub = n // 10
    probes = [(rng.randrange(1, 11), rng.randrange(1, per_pub)) for _ in range(2000)]
    start = time.perf_counter()
    for ph, ps in probes:
        assert log.seq_for_bookmark(ph, ps) is not None
    out["bookmark_lookup_us"] = (time.perf_counter() - start) / len(probes) * 1e6
    start = time.perf_counter()
    for ph, ps in probes:
        assert log.seq_for_later(ph, ps) is not None
    out["later_lookup_us"] = (time.perf_counter() - start) / len(probes) * 1e6
    t0 = log.journals()[0].first_time_us or 0
    t1 = log.journals()[-3].last_time_us or t0
    times = [rng.randrange(t0, t1 + 1) for _ in range(2000)]
    start = time.perf_counter()
    for t in times:
        log.seq_for_time(t)
    out["time_lookup_us"] = (time.perf_counter() - start) / len(times) * 1e6
    await log.close()

    for p in (tmp / "journal").iterdir():
        if p.name.endswith(".index") or p.name.endswith(".clients.ack"):
            p.unlink()
    log = TransactionLog(_config(tmp), "bench")
    start = time.perf_counter()
    report = await log.open()
    out["open_rebuild_s"] = time.perf_counter() - start
    assert report.records_recovered == n
    await log.close()
    out["log_records"] = float(n)
    return out


def run(quick: bool = False) -> dict[str, float]:
    """Every metric, with ``quick`` sizes for a smoke run."""
    results: dict[str, float] = {}
    base = Path(tempfile.mkdtemp(prefix="bench-txlog-"))
    try:
        results["append_us"] = asyncio.run(
            _append_cost(base / "append", 50_000 if quick else 200_000)
        )
        results.update(asyncio.run(_throughput(base / "throughput", 100_000 if quick else 500_000)))
        results.update(asyncio.run(_latency(base / "latency", 1.0 if quick else 5.0)))
        results.update(
            asyncio.run(_restart_and_replay(base / "restart", 200_000 if quick else 1_000_000))
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {k: round(v, 3) for k, v in results.items()}


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
