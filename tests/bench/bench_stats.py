"""Benchmarks of the stats and auth hot spots (not tests: no assertions on timing).

- ``histogram_observe_per_s``: LatencyHistogram.observe, called once per persisted ack.
- ``stats_write_rows_per_s``: StatsWriter.write of a 500-series tick (WAL, synchronous NORMAL).
- ``stats_query_points_per_s``: raw series read; ``stats_downsample_rows_per_s``: rows
  averaged per second by a stepped query.
- ``token_auth_per_s``: bearer-token lookup among 100 users; ``scrypt_verify_ms``: one
  password check (N=2**14, r=8, p=1).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

from spool.server.auth import UserAuthenticator
from spool.server.config import UserConfig
from spool.server.passwords import hash_password, verify_password
from spool.server.stats.histogram import LatencyHistogram
from spool.server.stats.store import StatsStore


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 1) if seconds > 0 else float("inf")


def run(quick: bool = False) -> dict[str, float]:
    """Run every benchmark; ``quick`` shrinks the workloads ~10x."""
    rng = random.Random(1)
    scale = 1 if quick else 10
    results: dict[str, float] = {}

    hist = LatencyHistogram()
    values = [rng.lognormvariate(-7, 1) for _ in range(100_000)]
    start = time.perf_counter()
    for _ in range(scale):
        for v in values:
            hist.observe(v)
    results["histogram_observe_per_s"] = _rate(len(values) * scale, time.perf_counter() - start)

    with tempfile.TemporaryDirectory() as tmp:
        store = StatsStore.open(Path(tmp) / "stats.db")
        try:
            paths = [f"clients/c{i}/msgs_in_rate" for i in range(500)]
            ticks = 20 * scale
            start = time.perf_counter()
            for t in range(ticks):
                store.writer.write(1_700_000_000.0 + t, {p: rng.random() for p in paths})
            results["stats_write_rows_per_s"] = _rate(
                ticks * len(paths), time.perf_counter() - start
            )
            series = "clients/c7/msgs_in_rate"
            for t in range(ticks, ticks + 5_000 * scale):
                store.writer.write(1_700_000_000.0 + t, {series: rng.random()})
            start = time.perf_counter()
            points = store.reader.query_series(series, 0, 2e9)
            results["stats_query_points_per_s"] = _rate(len(points), time.perf_counter() - start)
            start = time.perf_counter()
            store.reader.query_series(series, 1_700_000_000.0, 2e9, 60.0)
            results["stats_downsample_rows_per_s"] = _rate(len(points), time.perf_counter() - start)
        finally:
            store.close()

    users = tuple(UserConfig(name=f"u{i}", token=f"token-{i:04d}") for i in range(100))
    auth = UserAuthenticator(users)
    lookups = 2_000 * scale
    start = time.perf_counter()
    for i in range(lookups):
        auth.by_token(f"token-{i % 100:04d}")
    results["token_auth_per_s"] = _rate(lookups, time.perf_counter() - start)

    stored = hash_password("benchmark password")
    checks = 3 if quick else 10
    start = time.perf_counter()
    for _ in range(checks):
        verify_password("benchmark password", stored)
    results["scrypt_verify_ms"] = round((time.perf_counter() - start) / checks * 1000, 2)
    return results


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
