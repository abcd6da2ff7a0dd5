"""One instance per data directory, with real processes.

Two ``spool serve`` on one data directory would both run and both acknowledge publishes;
half of what they acknowledged would be lost at the next restart. The second refuses to start,
naming the holder's pid and address; the kernel releases the lock of a SIGKILLed holder,
so the next start succeeds; ``spool journal`` reads a running broker's journals without
the lock.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from spool.server.cli import EXIT_IN_USE
from spool.server.client import Client
from spool.server.pipeline.catalog import Catalog
from tests.support.server import ROOT, SpoolProcess, config_xml

pytestmark = [pytest.mark.faults]


def serve_once(config: Path, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``spool serve`` expecting it to exit on its own (refused)."""
    return subprocess.run(
        [sys.executable, "-m", "spool.server.cli", "serve", "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


async def publish(url: str, name: str, n: int) -> int:
    """Publish ``n`` messages with persisted acks; the last sequence persisted."""
    async with Client(url, name) as c:
        last = 0
        for i in range(n):
            last = c.publish("orders", b'{"n":%d}' % i, persisted=True)
        await c.wait_persisted(last)
        return c.persisted_seq


async def replay_count(url: str) -> int:
    """How many messages a bookmark replay from EPOCH delivers (to the live point)."""
    async with Client(url, "reader") as c:
        sub = await c.subscribe("orders", bookmark="0", completed=True)
        count = 0
        while not sub.completed.is_set() or not sub.queue.empty():
            try:
                await sub.get(0.5)
            except TimeoutError:
                continue
            count += 1
        return count


def test_a_second_instance_is_refused_until_the_holder_dies(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = SpoolProcess(tmp_path / "first", config_xml(data)).start()
    try:
        second_cfg = tmp_path / "second.xml"
        second_cfg.write_text(config_xml(data))  # the same directories, its own port (0)
        refused = serve_once(second_cfg)
        assert refused.returncode == EXIT_IN_USE, refused.stderr
        message = refused.stderr
        assert f"pid {first.pid}" in message
        assert f"listening on 127.0.0.1:{first.port}" in message
        assert str(data) in message and "one instance per data directory" in message
        # the holder is untouched and keeps serving
        acked = asyncio.run(publish(first.ws_url, "pub", 200))
        assert acked == 200
        lock = json.loads((data / "spool.lock").read_text())
        assert lock["pid"] == first.pid and lock["address"] == f"127.0.0.1:{first.port}"
        # journal tools read a running broker's journals without the lock
        verify = subprocess.run(
            [sys.executable, "-m", "spool.server.cli", "journal", "verify", str(data / "journal"),
             "--json"],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert verify.returncode == 0, verify.stderr
        report = json.loads(verify.stdout.splitlines()[-1])["report"]
        assert report["records_recovered"] == 200 and report["truncations"] == []
        # so does the pipeline's catalog (what its Spark source plans with)
        catalog = Catalog.open(data / "journal", data / "archive")
        assert sum(j.index.count for j in catalog.journals if j.index is not None) == 200
        # SIGKILL: no shutdown, the lock file keeps the dead pid; the kernel dropped the lock
        first.kill()
        assert json.loads((data / "spool.lock").read_text())["pid"] == first.pid
        successor = SpoolProcess(tmp_path / "successor", config_xml(data)).start()
        try:
            assert json.loads((data / "spool.lock").read_text())["pid"] == successor.pid
            assert asyncio.run(replay_count(successor.ws_url)) == acked
        finally:
            successor.stop()
    finally:
        first.stop()
