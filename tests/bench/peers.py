"""Peer brokers for the comparison runs: find or install them, run them on loopback.

Redis (Debian ``redis-server``) and Mosquitto (Debian ``mosquitto``) are found on the PATH
or in the Debian locations; when missing the harness installs the Debian package with
``apt-get`` (as root, or through ``sudo -n``), unless told not to. A peer that still is not
there is reported as *missing* with the reason; no number is ever made up for it.

Each server is started with its own temporary directory and a free loopback port and is
stopped (SIGTERM, then SIGKILL) when its ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final

#: where Debian puts the binaries when /usr/sbin is not on a user's PATH.
_EXTRA_DIRS: Final = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin")


class PeerUnavailable(Exception):
    """A peer cannot be found or installed; the message says why."""


@dataclass(frozen=True, slots=True)
class PeerBinary:
    """A peer executable found (or installed) on this machine."""

    name: str
    path: str
    version: str
    installed_now: bool


def which(binary: str) -> str | None:
    found = shutil.which(binary)
    if found:
        return found
    for d in _EXTRA_DIRS:
        candidate = os.path.join(d, binary)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _apt_install(package: str, log: list[str]) -> None:
    """Install one Debian package; ``apt-get update`` first only when apt does not know it.

    Raises:
        PeerUnavailable: apt-get is absent, not permitted, or failed.
    """
    apt = shutil.which("apt-get")
    if apt is None:
        raise PeerUnavailable("apt-get not available (not a Debian-like system)")
    prefix: list[str] = []
    if os.geteuid() != 0:
        sudo = shutil.which("sudo")
        if sudo is None:
            raise PeerUnavailable("not root and no sudo to run apt-get")
        prefix = [sudo, "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
        log.append(" ".join([*prefix, *args]))
        return subprocess.run(
            [*prefix, *args], capture_output=True, text=True, env=env, timeout=600, check=False
        )

    done = _run([apt, "install", "-y", "-qq", package])
    if done.returncode != 0:
        update = _run([apt, "update", "-qq"])
        if update.returncode != 0:
            raise PeerUnavailable(f"apt-get update failed: {update.stderr.strip()[-300:]}")
        done = _run([apt, "install", "-y", "-qq", package])
    if done.returncode != 0:
        raise PeerUnavailable(f"apt-get install {package} failed: {done.stderr.strip()[-300:]}")


def _version(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    text = (done.stdout + done.stderr).strip().splitlines()
    return text[0].strip() if text else "unknown"


def find_peer(
    binary: str, package: str, version_args: list[str], *, install: bool, log: list[str]
) -> PeerBinary:
    """The peer's executable, installing its Debian package when missing and allowed.

    Raises:
        PeerUnavailable: not found and not installable (the reason says which).
    """
    path = which(binary)
    installed_now = False
    if path is None:
        if not install:
            raise PeerUnavailable(
                f"{binary} not found and --no-install given (apt-get install {package})"
            )
        _apt_install(package, log)
        path = which(binary)
        installed_now = True
        if path is None:
            raise PeerUnavailable(f"{package} installed but {binary} still not found")
    return PeerBinary(binary, path, _version([path, *version_args]), installed_now)


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_tcp(
    port: int, proc: subprocess.Popen[bytes], timeout: float, what: str, log_path: Path
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PeerUnavailable(f"{what} exited with {proc.returncode}: {_tail(log_path)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise PeerUnavailable(f"{what} did not listen on port {port} within {timeout}s")


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-1000:]
    except OSError:
        return ""


class PeerServer:
    """A peer server process on 127.0.0.1; a context manager that stops it."""

    def __init__(self, what: str, argv: list[str], workdir: Path, port: int) -> None:
        self.what = what
        self.argv = argv
        self.workdir = workdir
        self.port = port
        self.log_path = workdir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout: float = 30.0) -> PeerServer:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_tcp(self.port, self.proc, timeout, self.what, self.log_path)
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> PeerServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def redis_server(binary: PeerBinary, workdir: Path, appendfsync: str) -> Iterator[PeerServer]:
    """``redis-server`` with AOF on (``appendonly yes``) and the given ``appendfsync``;
    RDB snapshots off so only the AOF costs what durability costs."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [
        binary.path,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--appendonly",
        "yes",
        "--appendfsync",
        appendfsync,
        "--save",
        "",
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
        "--logfile",
        "",
    ]
    server = PeerServer(f"redis-server ({appendfsync})", argv, workdir, port)
    with server.start():
        yield server


@contextlib.contextmanager
def mosquitto_server(binary: PeerBinary, workdir: Path) -> Iterator[PeerServer]:
    """``mosquitto`` with one loopback listener, anonymous access, persistence on."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = workdir / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\n"
        "allow_anonymous true\n"
        "persistence true\n"
        f"persistence_location {workdir}/\n"
        "log_dest stdout\n"
        "log_type error\n"
        "log_type warning\n"
        # as root mosquitto would switch to the 'mosquitto' user, which cannot write the
        # temporary directory; as another user this line has no effect
        "user root\n"
    )
    server = PeerServer("mosquitto", [binary.path, "-c", str(conf)], workdir, port)
    with server.start():
        yield server
