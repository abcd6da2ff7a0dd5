"""The ``spool`` command as a user types it, against a real ``spool serve``: broker
addresses in any reasonable form, mistakes answered in one line (never a traceback), a
publish that says what it did, and ``spool serve FILE`` logging text on a terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.server import ROOT, SpoolProcess, config_xml
from tests.support.wait import wait_until


def spool(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spool.server.cli", *argv],
        cwd=ROOT,
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def server(tmp_path: Path) -> SpoolProcess:
    proc = SpoolProcess(tmp_path / "broker").start()
    yield proc  # type: ignore[misc]
    proc.stop()


def test_the_client_commands_take_the_broker_in_any_reasonable_form(
    server: SpoolProcess,
) -> None:
    url = server.ws_url
    forms = [
        f"http://127.0.0.1:{server.port}",
        f"127.0.0.1:{server.port}",
        f"ws://127.0.0.1:{server.port}",
        url,
    ]
    for i, form in enumerate(forms):
        done = spool("publish", form, "cli/forms", f'{{"i":{i}}}')
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"published 1 message to cli/forms at {url}, persisted")
        assert done.stderr == ""
    lines = spool("publish", f"localhost:{server.port}", "cli/forms", "-", stdin=b"a\nb\n\n")
    assert lines.stdout.startswith("published 2 messages to cli/forms at ws://localhost:")
    quiet = spool("publish", form, "cli/forms", "{}", "-q")
    assert quiet.returncode == 0 and quiet.stdout == ""
    got = spool(
        "subscribe", f"127.0.0.1:{server.port}", "cli/forms", "--bookmark", "0", "--count", "7"
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [*(f'{{"i":{i}}}' for i in range(4)), "a", "b", "{}"]


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["publish", "{url}xml", "t", "{{}}"], 3, "HTTP 404: no websocket endpoint at /amps/xml: use /amps/json"),
        (["subscribe", "{url}xml", "t"], 3, "use /amps/json"),
        (["publish", "orders", '{{"a":1}}'], 2, "'orders' is not a broker address"),
        (["publish", "ftp://127.0.0.1:{port}", "t", "{{}}"], 2, "is not a broker address"),
        (["sow", "127.0.0.1:port", "t"], 2, "is not a broker address"),
        (["publish", "127.0.0.1:1", "t", "{{}}"], 3, "cannot connect to ws://127.0.0.1:1/amps/json"),
    ],
)  # fmt: skip
def test_a_mistake_is_answered_in_one_line_without_a_traceback(
    server: SpoolProcess, argv: list[str], code: int, words: str
) -> None:
    base = server.ws_url.removesuffix("json")
    done = spool(*(a.format(url=base, port=server.port) for a in argv))
    assert done.returncode == code, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("spool: "), done.stderr
    assert words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_serve_takes_its_file_as_an_argument_and_logs_text_on_a_terminal(
    tmp_path: Path,
) -> None:
    config = tmp_path / "spool.xml"
    config.write_text(config_xml(tmp_path / "data"))
    port_file = tmp_path / "port"
    main, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spool.server.cli", "serve", str(config), "--port-file", str(port_file)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
    )  # fmt: skip
    os.close(terminal)
    seen = b""

    def started() -> bool:
        nonlocal seen
        while select.select([main], [], [], 0)[0]:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the process ended: the terminal is gone
                break
            if not chunk:
                break
            seen += chunk
        if proc.poll() is not None:
            raise AssertionError(f"spool serve exited: {seen.decode(errors='replace')}")
        # the broker says it started during the server's startup, before the socket
        # listens; the port file is written once it does
        return b" instance started " in seen and port_file.exists()

    try:
        wait_until(started, 30, 0.05, "spool serve to say it started and write its port")
        assert port_file.read_text().strip()
    finally:
        proc.terminate()
        proc.wait(30)
        os.close(main)
    text = seen.decode(errors="replace")
    lines = text.splitlines()
    starting = next((line for line in lines if " instance starting " in line), None)
    assert starting is not None, text
    stamp, _, rest = starting.partition(" INFO    ")
    try:
        time.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f")  # a time a person reads
    except ValueError:
        pytest.fail(f"not a time a person reads: {stamp!r} in\n{text}")
    assert rest.startswith("instance starting name=") and f"config={config}" in rest, text
    assert not any(line.startswith("{") for line in lines), text


def test_serve_refuses_two_different_configuration_files(tmp_path: Path) -> None:
    done = spool("serve", str(tmp_path / "a.xml"), "--config", str(tmp_path / "b.xml"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "give one" in done.stderr
