"""A nemesis run stopped with SIGTERM (a CI job's timeout, ``kill``) leaves nothing behind:
no instance process, no network namespace, no tmpfs mount."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.soak.harness import leaked_processes
from tests.support.server import ROOT

pytestmark = [pytest.mark.nemesis, pytest.mark.faults, pytest.mark.slow]


def _namespaces(tag: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(tag)]


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/mounts") as f:
        return [line.split()[1] for line in f if line.split()[1].startswith(str(path))]


@pytest.mark.timeout(600)
def test_sigterm_stops_the_instances_and_removes_the_network(tmp_path: Path) -> None:
    work = tmp_path / "work"
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.nemesis", "--minutes", "10", "--seed", "7",
         "--instances", "3", "--workdir", str(work), "--out", str(tmp_path / "out")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert run.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def read() -> None:
        assert run.stdout is not None
        for line in run.stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # the first fault is injected once every instance serves and the network is up
        while True:
            line = lines.get(timeout=300)
            output.append(line)
            if line.startswith("[nemesis] #"):
                break
        tag = f"spnem-{run.pid}"
        isolated = os.geteuid() == 0 and bool(_namespaces(tag))
        assert leaked_processes(work / "cluster"), "no instance was running: nothing to stop"
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=300) == 130, "".join(output)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        reader.join(timeout=60)
        run.stdout.close()
    while not lines.empty():
        output.append(lines.get())
    text = "".join(output)
    assert "interrupted: the instances were stopped" in text, text
    assert not leaked_processes(work / "cluster"), text
    assert not _mounts_under(tmp_path), text
    if isolated:
        assert not _namespaces(tag), text
