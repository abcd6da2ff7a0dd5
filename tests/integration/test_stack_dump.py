"""`kill -USR1` on a running instance writes its threads' Python stacks to its log and
changes nothing else (server/cli.py): how a stuck instance is diagnosed, by an operator or
by the test harness before it kills a broker that ignored SIGTERM."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx

from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until


def test_sigusr1_dumps_the_stacks_and_the_instance_keeps_serving(tmp_path: Path) -> None:
    proc = SpoolProcess(tmp_path, config_xml(tmp_path / "data")).start()
    try:
        assert proc.proc is not None
        os.kill(proc.proc.pid, signal.SIGUSR1)
        wait_until(lambda: "most recent call first" in proc.log(), 20, message="a stack dump")
        assert "Thread 0x" in proc.log()
        assert httpx.get(f"{proc.http_url}/readyz", timeout=10).status_code == 200
    finally:
        assert proc.stop() in (0, -signal.SIGTERM)
