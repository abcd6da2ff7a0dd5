"""Faults injected through the transaction log's file seam (never flags in production code).

:class:`FaultySeam` fails chosen journal operations (``write``, ``fsync``, ``truncate``,
``allocate``, ``open``, ``rename``) with a chosen errno, from a given call on, for some
files or all, and can simulate the "fsyncgate" page-cache loss of a failed fsync
(``lossy``). Tests switch it with :meth:`FaultySeam.fail` and :meth:`FaultySeam.heal`.

:class:`ControlledSeam` is the same seam steered from outside the process: a real
``spool serve`` started by ``python -m tests.support.faulty_serve`` fails an operation
while a control file names it (``fsync EIO``, ``write ENOSPC``...), so a process test
can break and heal the disk of a running broker.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from server.txlog.files import JournalHandle, OsFileSeam

__all__ = ["ControlledSeam", "FaultyHandle", "FaultySeam"]


class FaultyHandle:
    """A journal handle whose operations fail once the seam says so.

    With ``seam.lossy``, an injected fsync failure also does what Linux may do to the
    dirty pages behind it (the "fsyncgate" behaviour): the bytes written since the last
    successful fsync are lost, and the error is reported once. What reads back is what
    the disk held at the last successful fsync: zeros where nothing was written yet (as
    never-written preallocated space reads), the earlier bytes where a write went over
    data that was already durable (a failed writeback does not destroy the old blocks).
    A log that only fsyncs again afterwards then "succeeds" over data that is not there;
    one that rewrites from memory does not.
    """

    def __init__(self, inner: JournalHandle, seam: FaultySeam, path: Path) -> None:
        self._inner = inner
        self._seam = seam
        self.path = path
        #: (offset, bytes there before the write) of each write since the last fsync
        self._dirty: list[tuple[int, bytes]] = []

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self._seam.check("write", self.path)
        with open(self.path, "rb") as fh:  # the seam may turn lossy before the fsync
            fh.seek(offset)
            before = fh.read(len(data))
        self._inner.write(offset, data)
        self._dirty.append((offset, before.ljust(len(data), b"\0")))

    def fsync(self) -> None:
        try:
            self._seam.check("fsync", self.path)
        except OSError:
            if self._seam.lossy:
                for offset, before in reversed(self._dirty):  # back to the durable image
                    self._inner.write(offset, before)
            self._dirty.clear()
            raise
        self._inner.fsync()
        self._dirty.clear()

    def truncate(self, size: int) -> None:
        self._seam.check("truncate", self.path)
        self._inner.truncate(size)

    def allocate(self, size: int) -> None:
        self._seam.check("allocate", self.path)
        self._inner.allocate(size)

    def close(self) -> None:
        self._inner.close()


class FaultySeam:
    """The real seam, failing the ``fail_at``-th call of ``operation`` (and later ones).

    :meth:`fail` and :meth:`heal` switch failures on and off (a disk that fills up and
    is freed), for one operation or several at once; ``calls`` counts every operation
    attempted, failed ones included.
    """

    def __init__(
        self,
        operation: str = "write",
        fail_at: int = 1 << 62,
        err: int = errno.EIO,
        *,
        lossy: bool = False,
    ) -> None:
        self.inner = OsFileSeam()
        self.lossy = lossy
        self.calls: dict[str, int] = {}
        #: operation -> (first failing call number, errno, which files; None: all)
        self.failures: dict[str, tuple[int, int, Callable[[Path], bool] | None]] = {
            operation: (fail_at, err, None)
        }

    def fail(
        self, operation: str, err: int = errno.EIO, *, only: Callable[[Path], bool] | None = None
    ) -> None:
        """Fail every ``operation`` (on the files ``only`` accepts) from now on with ``err``;
        other operations set to fail keep failing."""
        self.failures[operation] = (self.calls.get(operation, 0) + 1, err, only)

    def heal(self) -> None:
        """Stop failing."""
        self.failures.clear()

    def check(self, operation: str, path: Path) -> None:
        n = self.calls[operation] = self.calls.get(operation, 0) + 1
        failure = self.failures.get(operation)
        if failure is not None and n >= failure[0] and (failure[2] is None or failure[2](path)):
            raise OSError(failure[1], f"injected {operation} failure", str(path))

    def open(self, path: Path, *, create: bool) -> JournalHandle:
        self.check("open", path)
        return FaultyHandle(self.inner.open(path, create=create), self, path)

    def rename(self, src: Path, dst: Path) -> None:
        self.check("rename", src)
        self.inner.rename(src, dst)


class ControlledSeam(FaultySeam):
    """A :class:`FaultySeam` that reads what to fail from a control file at each call.

    The file holds lines ``OPERATION ERRNO-NAME`` (``fsync EIO``), and ``lossy`` for a
    failed fsync to drop what it covered; no file, or an empty one, fails nothing. Every
    journal operation costs one ``stat`` of it (tests only).
    """

    def __init__(self, control: Path) -> None:
        super().__init__()
        self.failures.clear()
        self.control = control
        self._seen: tuple[int, int] | None = None

    def check(self, operation: str, path: Path) -> None:
        self._reload()
        super().check(operation, path)

    def _reload(self) -> None:
        try:
            st = self.control.stat()
        except FileNotFoundError:
            if self._seen is not None:
                self._seen = None
                self.heal()
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return
        self._seen = stamp
        self.heal()
        self.lossy = False
        for line in self.control.read_text().splitlines():
            parts = line.split()
            if parts == ["lossy"]:
                self.lossy = True
            elif len(parts) == 2:
                self.fail(parts[0], getattr(errno, parts[1]))
