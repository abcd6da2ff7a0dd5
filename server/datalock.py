"""One instance per data directory: an exclusive lock held for the life of the process.

Two ``spool serve`` processes on the same data directory would both append to the same
journals and both acknowledge publishes; after a restart half of what they acknowledged
would be gone. Like Kafka's ``.lock`` in each log directory and PostgreSQL's
``postmaster.pid``, an instance takes an exclusive lock before it touches any file, and a
second process refuses to start, naming the holder.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on a small file: advisory, exclusive per open
file description (a second open of the same file in the same process conflicts too, unlike
``fcntl`` record locks), released by the kernel when the process exits however it exits
(SIGKILL included), so a crash never leaves a stale lock behind. The file is never
deleted (deleting a lock file another process is about to lock is a classic race); its
contents are rewritten by each holder: pid, instance, address, start time, as JSON.

Which files (:func:`lock_paths`):

- ``DataDirectory/spool.lock``: one instance per data directory, whatever its name.
- ``JournalDirectory/NAME.lock`` and ``JournalArchiveDirectory/NAME.lock``: the journal
  directories may be shared by instances of *different* names (the prefix rule of
  docs/transaction-log.md), and may live outside the data directory; two instances of the
  same name on one journal directory would write the same journals.

Only the broker takes the lock. ``spool journal dump / verify / find`` open journals
read-only and never need it, so they work on a running broker's directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import orjson

from spool.server.config import Config
from spool.server.protocol.errors import SpoolError

__all__ = [
    "DATA_LOCK_NAME",
    "DataDirectoryInUse",
    "DataDirectoryLock",
    "LockHolder",
    "lock_paths",
]

#: the lock file in the data directory (instance-agnostic: one instance per directory)
DATA_LOCK_NAME: Final = "spool.lock"
#: the most of a lock file read back to name its holder
_MAX_READ: Final = 4096


@dataclass(frozen=True, slots=True)
class LockHolder:
    """Who holds a lock, as its lock file says (fields missing while it starts up).

    Attributes:
        pid: the holder's process id.
        instance: its instance name.
        address: where it listens (``host:port``), once it does.
        started: when it took the lock (ISO-8601 UTC).
    """

    pid: int | None
    instance: str | None
    address: str | None
    started: str | None

    @classmethod
    def parse(cls, data: bytes) -> LockHolder:
        """Read a lock file's contents; anything unreadable gives an unknown holder."""
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError:
            raw = {}
        if not isinstance(raw, dict):
            raw = {}
        pid = raw.get("pid")
        return cls(
            pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            instance=_text(raw.get("instance")),
            address=_text(raw.get("address")),
            started=_text(raw.get("started")),
        )

    def describe(self) -> str:
        """``instance 'spool' (pid 123, listening on 127.0.0.1:9007, since ...)``."""
        parts = [f"pid {self.pid}" if self.pid is not None else "pid unknown"]
        parts.append(f"listening on {self.address}" if self.address else "not listening yet")
        if self.started:
            parts.append(f"since {self.started}")
        who = f"instance {self.instance!r}" if self.instance else "another instance"
        return f"{who} ({', '.join(parts)})"


class DataDirectoryInUse(SpoolError):
    """Another process holds the lock of one of this instance's directories.

    Attributes:
        path: the lock file.
        holder: what its lock file says about the holder.
    """

    def __init__(self, path: Path, holder: LockHolder) -> None:
        super().__init__(
            f"{path.parent} is in use by {holder.describe()}: one instance per data "
            f"directory (lock file {path}); stop that instance or give this one another "
            "--data-dir"
        )
        self.path = path
        self.holder = holder


def lock_paths(config: Config) -> list[Path]:
    """The lock files of an instance, in the order they are taken (see the module)."""
    paths = [config.data_directory / DATA_LOCK_NAME]
    txlog = config.transaction_log
    if txlog is not None:
        name = f"{config.name}.lock"
        for directory in (txlog.journal_directory, txlog.archive_directory):
            path = directory / name
            if path not in paths:
                paths.append(path)
    return paths


class DataDirectoryLock:
    """The instance's locks, held until :meth:`release` or the end of the process.

    Use :meth:`acquire`; it takes every lock of :func:`lock_paths` or none.
    """

    def __init__(self, config: Config, held: list[tuple[Path, int]]) -> None:
        self._config = config
        self._held = held
        self._started = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        self._address: str | None = None

    @classmethod
    def acquire(cls, config: Config) -> DataDirectoryLock:
        """Take every lock of the instance (creating the directories), or none.

        Raises:
            DataDirectoryInUse: another process holds one; the ones taken are released.
            OSError: a directory or lock file cannot be created.
        """
        held: list[tuple[Path, int]] = []
        try:
            for path in lock_paths(config):
                held.append((path, _take(path)))
        except BaseException:
            for _, fd in held:
                os.close(fd)
            raise
        lock = cls(config, held)
        lock._write()
        return lock

    @property
    def paths(self) -> list[Path]:
        """The lock files held."""
        return [path for path, _ in self._held]

    def record_address(self, address: str) -> None:
        """Write where the instance listens into its lock files (once it is bound, so a
        refused second instance can name it)."""
        self._address = address
        self._write()

    def release(self) -> None:
        """Release every lock (the process keeps running; at exit the kernel would)."""
        held, self._held = self._held, []
        for _, fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _write(self) -> None:
        data = orjson.dumps(
            {
                "pid": os.getpid(),
                "instance": self._config.name,
                "address": self._address,
                "started": self._started,
                "data_directory": str(self._config.data_directory),
            }
        )
        for _, fd in self._held:
            # overwrite in place, then cut: a reader never sees an empty file
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))


def _take(path: Path) -> int:
    """Open and lock one lock file; the descriptor holds the lock.

    Raises:
        DataDirectoryInUse: another open file description holds it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # O_CLOEXEC: a child process (a worker, a shell-out) must not inherit the lock
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = LockHolder.parse(os.pread(fd, _MAX_READ, 0))
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise DataDirectoryInUse(path, holder) from exc
        raise
    return fd


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
