"""The loaded-run tool (tests/tools/loaded.py): runs in a row, the first failure stops
them, burners run beside the command and never outlive the tool."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tools import loaded
from tests.tools.loaded import main

ROOT = Path(__file__).resolve().parents[2]

#: A command that appends the pids of its parent's other children (the burners) to a
#: file, one line per run, and fails on the run named by the file ``fail-on``.
RECORD = """
import os, sys
out = sys.argv[1]
me, parent = os.getpid(), os.getppid()
children = open(f"/proc/{parent}/task/{parent}/children").read().split()
with open(out, "a") as f:
    f.write(" ".join(c for c in children if int(c) != me) + "\\n")
runs = len(open(out).read().splitlines())
fail_on = os.path.join(os.path.dirname(out), "fail-on")
if os.path.exists(fail_on) and int(open(fail_on).read()) == runs:
    sys.exit(7)
"""


def tool(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    record = [sys.executable, "-c", RECORD, str(tmp_path / "runs")]
    return subprocess.run(
        [sys.executable, "-m", "tests.tools.loaded", *args, "--", *record],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_every_run_goes_beside_the_burners_and_they_stop_after(tmp_path: Path) -> None:
    done = tool(tmp_path, "--runs", "3", "--burners", "2")
    assert done.returncode == 0, done.stderr
    runs = (tmp_path / "runs").read_text().splitlines()
    assert len(runs) == 3
    burners = {int(pid) for pid in runs[0].split()}
    assert len(burners) == 2
    assert all({int(pid) for pid in run.split()} == burners for run in runs)
    assert not any(alive(pid) for pid in burners)
    assert done.stdout.count("exit 0") == 3


def test_the_first_failing_run_stops_the_runs_with_its_status(tmp_path: Path) -> None:
    (tmp_path / "fail-on").write_text("2")
    done = tool(tmp_path, "--runs", "3", "--burners", "1")
    assert done.returncode == 7
    assert len((tmp_path / "runs").read_text().splitlines()) == 2
    assert "loaded run 2/3: exit 7" in done.stdout


def test_burners_end_when_the_tool_is_killed(tmp_path: Path) -> None:
    started = tmp_path / "started"
    wait = (
        "import os, sys, time\n"
        "p = os.getppid()\n"
        f"open({str(started)!r}, 'w').write(open(f'/proc/{{p}}/task/{{p}}/children').read())\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.tools.loaded",
            "--runs",
            "1",
            "--burners",
            "2",
            "--",
            sys.executable,
            "-c",
            wait,
        ],
        cwd=ROOT,
    )
    command: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not started.exists() or not started.read_text():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.05)
        children = [int(pid) for pid in started.read_text().split()]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        command = [
            pid for pid in children if b"time.sleep" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        burners = [pid for pid in children if pid not in command]
        assert len(burners) == 2
        deadline = time.monotonic() + 60
        while any(alive(pid) for pid in burners):
            assert time.monotonic() < deadline, "a burner outlived the tool"
            time.sleep(0.05)
    finally:
        for pid in command:
            os.kill(pid, signal.SIGKILL)


def test_a_command_is_required() -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--runs", "1"])
    assert exit_.value.code == 2


def test_a_burner_whose_tool_is_already_gone_ends_at_once() -> None:
    """A tool killed while a burner's interpreter starts: the burner was told the tool's
    pid, sees another parent, and ends (it does not adopt its new parent as the one to
    watch)."""
    gone = subprocess.run([sys.executable, "-c", loaded.BURN, "0"], timeout=60, check=False)
    assert gone.returncode == 0
