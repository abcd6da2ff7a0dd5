"""Actions benchmarks (not tests): what a journal policy costs, and its plan.

Run: ``python -m tests.bench.bench_actions [--quick]``; prints a JSON dict of metrics.

- ``archive_compress_ms`` / ``compress_mb_per_s``: one on-demand run of an action that
  archives and then compresses (zstd) every closed journal of a real broker's log (16
  journals of 4 MB of 100-byte records, or 4 of 1 MB quick): the run as the admin API
  times it, and the raw megabytes compressed per second of it (the file work runs in
  threads; the loop stays free).
- ``remove_ms``: a second run removing them.
- ``plan_us``: the transaction-log page's plan (``journal_plan``: which of three
  policies touches which journal next) over 1,000 journals, sans-I/O, per call: the
  page asks for it every 3 s.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from spool.server.actions.plan import ScheduledAction, journal_plan
from spool.server.config import parse_config
from spool.server.txlog.storage.journal import JournalInfo
from tests.support.engine import EngineHarness
from tests.support.server import config_xml

BODY = b'{"order":123456,"sym":"ABCD","qty":100,"px":101.25,"side":"buy","acct":"XYZ-1"}'.ljust(
    100, b" "
)

ACTIONS = """
<Action><Name>age-out</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Count>1</Count></Options></Do>
  <Do><Module>amps-action-do-compress-journal</Module><Options><Count>1</Count></Options></Do>
</Action>
<Action><Name>drop</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-remove-journal</Module><Options><Count>1</Count></Options></Do>
</Action>"""
POLICY = """
<Action><Name>retention</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>1h</Every></Options></On>
  <Do><Module>amps-action-do-archive-journal</Module><Options><Age>1d</Age></Options></Do>
  <Do><Module>amps-action-do-compress-journal</Module><Options><Age>7d</Age></Options></Do>
  <Do><Module>amps-action-do-remove-journal</Module><Options><Age>30d</Age></Options></Do>
</Action>"""


async def _until_done(h: EngineHarness, work: Any) -> Any:
    """Await ``work`` while moving the harness's virtual clock (group commits)."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await h.clock.advance(0.01)
        await asyncio.sleep(0.001)
    return task.result()


async def _policy(tmp: Path, journals: int, journal_mb: int) -> dict[str, float]:
    xml = config_xml(
        tmp / "data", admin_interval="1d", journal_size=f"{journal_mb}MB", actions=ACTIONS,
        txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
    )  # fmt: skip
    async with EngineHarness(tmp, xml=xml) as h:
        txlog = h.broker.txlog
        assert txlog is not None
        seq = 0
        while sum(1 for j in txlog.journals() if j.state == "closed") < journals:
            n = 2000
            txlog.append_many(
                topic="orders", message_type="json", pub_hash=1,
                pub_seqs=list(range(seq + 1, seq + n + 1)), bodies=[BODY] * n,
            )  # fmt: skip
            seq += n
            await h.commit()
        closed = [j for j in txlog.journals() if j.state == "closed"]
        raw = sum(j.data_bytes for j in closed)
        actions = h.broker.actions
        # the runs' own times are on the harness's virtual clock: time them in real time
        t0 = time.perf_counter()
        run = await _until_done(h, actions.run_admin("age-out", {}, "bench"))
        archive_compress_s = time.perf_counter() - t0
        assert run.outcome == "succeeded", run.message
        t0 = time.perf_counter()
        run = await _until_done(h, actions.run_admin("drop", {}, "bench"))
        remove_s = time.perf_counter() - t0
        assert run.outcome == "succeeded", run.message
    return {
        "journals": float(len(closed)),
        "archive_compress_ms": archive_compress_s * 1000.0,
        "compress_mb_per_s": raw / 1e6 / archive_compress_s,
        "remove_ms": remove_s * 1000.0,
    }


def _plan_us(n: int = 1000, rounds: int = 50) -> float:
    now = 1_700_000_000.0
    journals = [
        JournalInfo(
            id=1 + i * 1000, path=f"/j/{i}", state="closed" if i < n - 1 else "active",
            size_bytes=4 << 20, data_bytes=4 << 20, compression=None, records=1000,
            first_seq=1 + i * 1000, last_seq=(i + 1) * 1000, first_bookmark=None,
            last_bookmark=None, first_time_us=int((now - (n - i) * 3600) * 1e6),
            last_time_us=int((now - (n - i) * 3600 + 3599) * 1e6),
        )
        for i in range(n)
    ]  # fmt: skip
    xml = config_xml(Path("/nonexistent/data"), actions=POLICY)
    config = parse_config(xml)
    actions = [ScheduledAction(a, lambda t: t + 3600.0) for a in config.actions]
    t0 = time.perf_counter()
    for _ in range(rounds):
        journal_plan(journals, [], actions, now)
    return (time.perf_counter() - t0) / rounds * 1e6


def run(quick: bool = False) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="spool-bench-actions-"))
    try:
        out = asyncio.run(_policy(tmp, 4, 1) if quick else _policy(tmp, 16, 4))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["plan_us"] = _plan_us(200 if quick else 1000)
    return out


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
