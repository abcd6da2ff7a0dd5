"""Real broker processes for tests: `spool serve` on 127.0.0.1 with an ephemeral port."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from spool.server.config import load_config
from spool.server.txlog import TransactionLog
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT_PATH = os.pathsep.join((str(ROOT / ".devpath"), str(ROOT)))
"""A PYTHONPATH that runs this checkout's code (``spool.*`` from its ``.devpath`` links,
``tests`` from its root) whichever checkout the venv was installed from."""


def config_xml(
    data_dir: Path,
    *,
    name: str = "spool-test",
    txlog: bool = True,
    topics: tuple[str, ...] = (".*",),
    flush_interval: str = "1ms",
    journal_size: str = "64MB",
    users: str = "",
    tuning: str = "",
    admin_interval: str = "1s",
    admin_extra: str = "",
    transport_extra: str = "",
    txlog_extra: str = "",
    actions: str = "",
    sow: str = "",
    event_topics: str = "",
) -> str:
    """An instance config listening on 127.0.0.1:0 with everything under ``data_dir``.

    ``actions`` is the inside of an ``<Actions>`` element (none when empty); ``sow`` the
    inside of a ``<SOW>`` section (its ``<Topic>`` elements), if any; ``event_topics`` the
    inside of ``<EventTopics>``.
    """
    tl = ""
    if txlog:
        topic_xml = "".join(
            f"<Topic><Name>{t}</Name><MessageType>json</MessageType></Topic>" for t in topics
        )
        tl = (
            "<TransactionLog>"
            f"<JournalDirectory>{data_dir / 'journal'}</JournalDirectory>"
            f"<JournalArchiveDirectory>{data_dir / 'archive'}</JournalArchiveDirectory>"
            f"<JournalSize>{journal_size}</JournalSize>"
            f"<FlushInterval>{flush_interval}</FlushInterval>"
            f"{txlog_extra}{topic_xml}</TransactionLog>"
        )
    return (
        "<SpoolConfig>"
        f"<Name>{name}</Name>"
        f"<DataDirectory>{data_dir}</DataDirectory>"
        "<Admin><InetAddr>127.0.0.1:0</InetAddr>"
        f"<FileName>{data_dir / 'stats.db'}</FileName><Interval>{admin_interval}</Interval>"
        f"{admin_extra}</Admin>"
        "<Transports><Transport><Name>websocket-json</Name><Type>websocket</Type>"
        "<InetAddr>127.0.0.1:0</InetAddr><MessageType>json</MessageType>"
        f"{transport_extra}</Transport></Transports>"
        f"{tl}"
        f"{'<SOW>' + sow + '</SOW>' if sow else ''}"
        f"{'<Tuning>' + tuning + '</Tuning>' if tuning else ''}"
        f"{'<Users>' + users + '</Users>' if users else ''}"
        f"{'<Actions>' + actions + '</Actions>' if actions else ''}"
        f"{'<EventTopics>' + event_topics + '</EventTopics>' if event_topics else ''}"
        "</SpoolConfig>"
    )


class SpoolProcess:
    """One `spool serve` process. ``start()`` returns once it is listening."""

    def __init__(
        self,
        workdir: Path,
        xml: str | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        prefix: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        tls: bool = False,
        control: Path | None = None,
    ) -> None:
        """``prefix``: a command the server runs under (``ip netns exec NS``)."""
        self.workdir = workdir
        #: the config serves TLS: URLs are wss:// and https://
        self.tls = tls
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "spool.xml"
        if xml is None:
            xml = config_xml(workdir / "data")
        self.config_path.write_text(xml)
        self.port_file = workdir / "port"
        self.log_path = workdir / "server.log"
        self.extra_args = extra_args
        self.prefix = prefix
        #: with a control file, the journal file seam fails what it names: the process
        #: runs under tests/support/faulty_serve.py (see tests/support/faults.py)
        self.control = control
        self.env = env or {}  # added to this process's environment (SPOOL_NO_EXTENSIONS...)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._log: IO[bytes] | None = None

    @property
    def ws_url(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://127.0.0.1:{self.port}/amps/json"

    @property
    def http_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the server (SIGHUP reloads its TLS certificate pair)."""
        assert self.proc is not None
        self.proc.send_signal(sig)

    def start(self, timeout: float = 30.0) -> SpoolProcess:
        if self.port_file.exists():
            self.port_file.unlink()
        self._log = open(self.log_path, "ab")  # noqa: SIM115
        launcher = ["-m", "spool.server.cli"]
        if self.control is not None:
            launcher = ["-m", "tests.support.faulty_serve", "--control", str(self.control)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen(
            [
                *self.prefix,
                sys.executable,
                *launcher,
                "serve",
                "--config",
                str(self.config_path),
                "--port-file",
                str(self.port_file),
                *self.extra_args,
            ],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            self.port = wait_until(
                self._listening_port, timeout, interval=0.02, message="spool serve to listen"
            )
        except TimeoutError:
            self.kill()
            raise TimeoutError("spool serve did not start listening:\n" + self.log()) from None
        except BaseException:
            self.kill()  # it died before listening: reap it and close its log file
            raise
        return self

    def _listening_port(self) -> int | None:
        """The port once the server wrote it; raises if the process died before that."""
        assert self.proc is not None
        if self.port_file.exists():
            text = self.port_file.read_text().strip()
            if text:
                return int(text)
        if self.proc.poll() is not None:
            raise RuntimeError(f"spool serve exited with {self.proc.returncode}:\n" + self.log())
        return None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait (graceful shutdown); returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            self._close_log()
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # stuck: its threads' stacks into its log (server/cli.py registers SIGUSR1
            # with faulthandler) before the kill, for whoever reads the failed test's log
            self.proc.send_signal(signal.SIGUSR1)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(2)
            self.proc.kill()
            return self.proc.wait()
        finally:
            self._close_log()

    def kill(self) -> None:
        """SIGKILL: the crash of the fault tests."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def sow_topic(
    name: str,
    *keys: str,
    durability: str = "persistent",
    expiration: str | None = None,
) -> str:
    """One ``SOW/Topic`` element for :func:`config_xml`'s ``sow``."""
    key_xml = "".join(f"<Key>{k}</Key>" for k in keys)
    exp = f"<Expiration>{expiration}</Expiration>" if expiration else ""
    return (
        f"<Topic><Name>{name}</Name><MessageType>json</MessageType>{key_xml}"
        f"<Durability>{durability}</Durability>{exp}</Topic>"
    )


async def read_records(config_path: Path) -> list[tuple[int, int, bytes]]:
    """Every record of a stopped broker's transaction log: (publisher hash, seq, body)."""
    cfg = load_config(config_path)
    assert cfg.transaction_log is not None
    log = TransactionLog(cfg.transaction_log, cfg.name)
    await log.open()
    out: list[tuple[int, int, bytes]] = []
    seq = log.first_seq
    while True:
        batch = await log.read_batch(seq, max_count=10_000)
        if not batch:
            break
        out.extend((r.pub_hash, r.pub_seq, r.body) for r in batch)
        seq = batch[-1].seq + 1
    await log.close()
    return out
