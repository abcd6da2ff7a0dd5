"""Write-outage benchmarks (not tests): what a full or failing disk costs the log.

Run: ``python -m tests.bench.bench_outage [--quick]``; prints a JSON dict of metrics.
Faults come through the log's file seam (tests/support/faults.py), on real files.

- ``refused_append_many_us``: one ``append_many`` of a 100-message run refused during an
  outage (publishers keep sending while the disk is full: refusing must stay cheap).
- ``resume_records_per_s`` / ``resume_ms``: an outage with N 100-byte records accepted
  before it (100k, or 20k quick), then the disk heals: the retry that rewrites all of them
  through freshly opened files and fsyncs them, from its start to the durable position.
- ``append_us_after_resume``: ``append()`` once writes were resumed, to compare with
  bench_txlog's ``append_us`` (the outage leaves nothing behind on the hot path).
"""

from __future__ import annotations

import asyncio
import errno
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from spool.server.config import TransactionLogConfig
from spool.server.txlog import TransactionLog
from tests.support.faults import FaultySeam

BODY = b'{"order":123456,"sym":"ABCD","qty":100,"px":101.25,"side":"buy","acct":"XYZ-1"}'.ljust(
    100, b" "
)


def _config(tmp: Path) -> TransactionLogConfig:
    return TransactionLogConfig(
        journal_directory=tmp / "journal",
        archive_directory=tmp / "archive",
        preallocated_files=2,
        journal_size=64 * 1024 * 1024,
        flush_interval=0.001,
        write_retry_interval=0.05,
    )


class _TimedSeam(FaultySeam):
    """Notes when the first write of each attempt starts (the resume's start)."""

    def __init__(self) -> None:
        super().__init__()
        self.last_write_start = 0.0

    def check(self, operation: str, path: Path) -> None:
        if operation == "write":
            self.last_write_start = time.perf_counter()
        super().check(operation, path)


async def _measure(tmp: Path, pending: int) -> dict[str, float]:
    seam = _TimedSeam()
    log = TransactionLog(_config(tmp), "bench", files=seam)
    await log.open()
    seq = 0
    # an outage with ``pending`` records accepted before it began
    seam.fail("write", errno.ENOSPC)
    for start in range(0, pending, 1000):
        n = min(1000, pending - start)
        log.append_many(
            topic="orders", message_type="json", pub_hash=1,
            pub_seqs=list(range(seq + 1, seq + n + 1)), bodies=[BODY] * n,
        )  # fmt: skip
        seq += n
    while log.write_outage is None:
        await asyncio.sleep(0.001)
    # refusals while it lasts
    seqs = list(range(seq + 1, seq + 101))
    bodies = [BODY] * 100
    rounds = 20_000
    t0 = time.perf_counter()
    for _ in range(rounds):
        log.append_many(
            topic="orders", message_type="json", pub_hash=1, pub_seqs=seqs, bodies=bodies
        )
    refused_us = (time.perf_counter() - t0) / rounds * 1e6
    # the disk heals: the next retry rewrites everything pending
    seam.heal()
    await log.wait_durable(seq)
    done = time.perf_counter()
    resume_s = done - seam.last_write_start
    # the hot path afterwards
    n = 20_000
    t0 = time.perf_counter()
    for i in range(n):
        log.append(topic="orders", message_type="json", pub_hash=1, pub_seq=seq + 1 + i, body=BODY)
    append_us = (time.perf_counter() - t0) / n * 1e6
    await log.wait_durable(log.last_seq)
    await log.close()
    return {
        "refused_append_many_us": refused_us,
        "resume_records_per_s": pending / resume_s,
        "resume_ms": resume_s * 1000.0,
        "append_us_after_resume": append_us,
    }


def run(quick: bool = False) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="spool-bench-outage-"))
    try:
        return asyncio.run(_measure(tmp, 20_000 if quick else 100_000))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
