"""The example systemd unit (docs/spool.service): systemd accepts it, and its commands
do what it relies on (docs/running.md): ``ExecStart`` as written serves from an empty
directory, ``ExecReload``'s SIGHUP leaves the instance serving, SIGTERM drains and ends
it, and the exit codes of ``RestartPreventExitStatus`` mean what the unit says."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support.server import ROOT
from tests.support.wait import wait_until

UNIT = ROOT / "docs" / "spool.service"
SPOOL = Path(sys.executable).with_name("spool")


def directive(name: str) -> str:
    (line,) = [ln for ln in UNIT.read_text().splitlines() if ln.startswith(f"{name}=")]
    return line.partition("=")[2]


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is missing (Debian's systemd package)"
    unit = tmp_path / "spool.service"
    unit.write_text(UNIT.read_text().replace("/opt/spool/bin/spool", str(SPOOL)))
    done = subprocess.run(
        [tool, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def test_the_units_commands_do_what_it_relies_on(tmp_path: Path) -> None:
    argv = shlex.split(directive("ExecStart"))
    assert argv[0] == "/opt/spool/bin/spool" and "/var/lib/spool" in argv
    assert directive("RestartPreventExitStatus").split() == ["2", "4"]
    assert directive("ExecReload") == "/bin/kill -HUP $MAINPID"
    data, cwd = tmp_path / "var-lib-spool", tmp_path / "empty"
    cwd.mkdir()
    port_file = tmp_path / "port"
    command = [str(SPOOL), *(str(data) if a == "/var/lib/spool" else a for a in argv[1:])]
    extra = ["--listen", "127.0.0.1:0", "--port-file", str(port_file)]
    proc = subprocess.Popen(
        [*command, *extra], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        port = wait_until(lambda: port_file.exists() and port_file.read_text().strip(), 60,
                          0.05, "the unit's instance to listen")  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/readyz").json() == {"ready": True}

        proc.send_signal(signal.SIGHUP)  # ExecReload

        def reload_refused() -> bool:
            events = httpx.get(f"{url}/api/events", params={"category": "tls"}).json()["events"]
            return any(e["event"] == "reload_failed" for e in events)

        wait_until(reload_refused, 30, 0.05, "the SIGHUP to be handled")
        assert proc.poll() is None and httpx.get(f"{url}/readyz").status_code == 200

        # a second instance on the same data directory: 4, not restarted
        second = subprocess.run(
            [*command, "--listen", "127.0.0.1:0"], cwd=cwd, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert second.returncode == 4, second.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(int(directive("TimeoutStopSec")))
        assert proc.stderr is not None
        stderr = proc.stderr.read().decode()
        proc.stderr.close()
    # drained, then ended by the signal (re-raised once the server stopped), which systemd
    # counts as a clean stop
    assert code == -signal.SIGTERM, stderr
    assert " INFO    instance stopped " in stderr
    assert not list(cwd.iterdir())  # everything it wrote is under the data directory
    assert " INFO    instance started " in stderr  # --log-format text

    # a configuration it refuses: 2, not restarted
    bad = tmp_path / "bad.xml"
    bad.write_text("<SpoolConfig><Nonsense/></SpoolConfig>")
    refused = subprocess.run(
        [str(SPOOL), "serve", str(bad)], cwd=cwd, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.startswith("spool: "), refused.stderr
