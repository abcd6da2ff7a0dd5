"""Faults injected through the transaction log's file seam (never flags in production code).

:class:`FaultySeam` fails chosen journal operations (``write``, ``fsync``, ``truncate``,
``allocate``, ``open``, ``rename``) with a chosen errno, from a given call on, for some
files or all, and can simulate the "fsyncgate" page-cache loss of a failed fsync
(``lossy``). Tests switch it with :meth:`FaultySeam.fail` and :meth:`FaultySeam.heal`.

It can also be a storage that **loses what was not fsynced** when the machine crashes
(what lazyfs does for Jepsen): with ``volatile``, a write or truncation of a file only
reaches the file when that file is fsynced (through any handle: fsync is per file);
until then it is held in this process, in order. A SIGKILL of the process then loses
exactly what a power cut would lose (the page cache's unwritten data), and
:meth:`FaultySeam.crash` does the same in-process. What the seam does not hold: file
creation, renames and ``allocate`` (space reservation, unless the file holds something:
then it waits in order) happen at once, so a crash never loses a file or its preallocated
size, only its unsynced bytes.

:class:`ControlledSeam` is the same seam steered from outside the process: a real
``spool serve`` started by ``python -m tests.support.faulty_serve`` reads a control file
at each journal operation. Its syntax, one instruction a line (no file, or an empty one,
means a healthy disk)::

    OPERATION ERRNO-NAME    fail every OPERATION (write, fsync, truncate, allocate, open,
                            rename) with that errno (fsync EIO, write ENOSPC...)
    lossy                   a failed fsync also drops the writes it covered (fsyncgate)
    volatile                hold writes and truncations until their file is fsynced, so
                            a SIGKILL loses them ("lost un-fsynced writes at a crash")
    hold OPERATION SUFFIX   an OPERATION on a file whose name ends with SUFFIX
                            (``hold write .journal.new``) waits until the line is gone,
                            and says so in ``CONTROL.held`` ("OPERATION PATH"): a test
                            gates on that file to kill the process at that exact point

Changing the file changes the behaviour at the next journal operation. Turning
``volatile`` off does not write what is held: it reaches the file at its next fsync (or
is lost by a kill before that), as dirty pages would. A clean exit writes what is held
(no crash, no loss), so only a kill loses it. So a harness injects "lost un-fsynced writes
at a crash" by writing ``volatile`` before the workload and sending SIGKILL at the crash.
"""

from __future__ import annotations

import atexit
import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from spool.server.txlog.storage.files import JournalHandle, OsFileSeam

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
        if self._seam.hold(self.path, ("write", offset, bytes(data))):
            return
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
                self._seam.drop_held(self.path)
            self._dirty.clear()
            raise
        self._seam.apply_held(self.path, self._inner)
        self._inner.fsync()
        self._dirty.clear()

    def truncate(self, size: int) -> None:
        self._seam.check("truncate", self.path)
        if self._seam.hold(self.path, ("truncate", size, b"")):
            return
        self._inner.truncate(size)

    def allocate(self, size: int) -> None:
        self._seam.check("allocate", self.path)
        if self._seam.hold(self.path, ("allocate", size, b""), queued_only=True):
            return
        self._inner.allocate(size)

    def close(self) -> None:
        self._inner.close()


#: an operation held until its file's fsync: ("write", offset, data), ("truncate", size,
#: b"") or ("allocate", size, b"")
Held = tuple[str, int, bytes]


class FaultySeam:
    """The real seam, failing the ``fail_at``-th call of ``operation`` (and later ones).

    :meth:`fail` and :meth:`heal` switch failures on and off (a disk that fills up and
    is freed), for one operation or several at once; ``calls`` counts every operation
    attempted, failed ones included. ``volatile`` holds what is not fsynced (the module
    docstring); :meth:`crash` loses it.
    """

    def __init__(
        self,
        operation: str = "write",
        fail_at: int = 1 << 62,
        err: int = errno.EIO,
        *,
        lossy: bool = False,
        volatile: bool = False,
    ) -> None:
        self.inner = OsFileSeam()
        self.lossy = lossy
        self.volatile = volatile
        #: per file, the writes and truncations not fsynced yet, in order (volatile)
        self.held: dict[Path, list[Held]] = {}
        #: bytes of writes lost by :meth:`crash` or a lossy fsync so far
        self.lost_bytes = 0
        self._held_lock = threading.Lock()  # the flusher and the preallocator use the seam
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
        with self._held_lock:  # what the file holds moves with it
            held = self.held.pop(src, None)
            if held:
                self.held.setdefault(dst, []).extend(held)

    # -- volatile: what is not fsynced lives here ---------------------------------------

    def hold(self, path: Path, op: Held, *, queued_only: bool = False) -> bool:
        """Hold ``op`` until ``path`` is fsynced, when volatile (False: do it now). A file
        that holds something keeps holding, volatile or not, so the order stays;
        ``queued_only``: hold only then (an allocation is done at once otherwise)."""
        with self._held_lock:
            if (queued_only or not self.volatile) and path not in self.held:
                return False
            self.held.setdefault(path, []).append(op)
            return True

    def apply_held(self, path: Path, handle: JournalHandle) -> None:
        """Write what ``path`` holds, in order, through ``handle`` (before its fsync)."""
        with self._held_lock:
            held = self.held.pop(path, [])
        _apply(handle, held)

    def drop_held(self, path: Path) -> None:
        """Lose what ``path`` holds (its fsync failed and dropped the pages)."""
        with self._held_lock:
            held = self.held.pop(path, [])
        self.lost_bytes += _written(held)

    def crash(self) -> None:
        """A crash of the machine: everything not fsynced is lost."""
        with self._held_lock:
            held, self.held = self.held, {}
        self.lost_bytes += sum(_written(ops) for ops in held.values())

    def settle(self) -> None:
        """The process ends without a crash: the page cache writes everything back."""
        with self._held_lock:
            held, self.held = self.held, {}
        for path, ops in held.items():
            try:
                handle = self.inner.open(path, create=False)
            except FileNotFoundError:
                continue  # removed since, with what it held
            try:
                _apply(handle, ops)
            finally:
                handle.close()


def _apply(handle: JournalHandle, ops: list[Held]) -> None:
    for kind, value, data in ops:
        if kind == "write":
            handle.write(value, data)
        elif kind == "truncate":
            handle.truncate(value)
        else:
            handle.allocate(value)


def _written(ops: list[Held]) -> int:
    return sum(len(data) for kind, _, data in ops if kind == "write")


#: how often a held operation looks at the control file again
HOLD_POLL = 0.02


class ControlledSeam(FaultySeam):
    """A :class:`FaultySeam` that reads what to do from a control file at each call (the
    syntax is in the module docstring). Every journal operation costs one ``stat`` of it
    (tests only). A clean exit of the process writes what ``volatile`` holds."""

    def __init__(self, control: Path) -> None:
        super().__init__()
        self.failures.clear()
        self.control = control
        self._seen: tuple[int, int] | None = None
        #: (operation, file name suffix) of each ``hold`` line
        self.holds: list[tuple[str, str]] = []
        atexit.register(self.settle)

    @property
    def held_marker(self) -> Path:
        """The file that says which operation a ``hold`` line stopped."""
        return self.control.with_name(self.control.name + ".held")

    def check(self, operation: str, path: Path) -> None:
        self._reload()
        if self._holds(operation, path):
            # whole or absent (a test reads it as soon as it exists)
            partial = self.held_marker.with_name(self.held_marker.name + ".partial")
            partial.write_text(f"{operation} {path}\n")
            os.replace(partial, self.held_marker)
            while self._holds(operation, path):
                time.sleep(HOLD_POLL)  # until the test removes the line or kills us
                self._reload()
        super().check(operation, path)

    def _holds(self, operation: str, path: Path) -> bool:
        return any(op == operation and path.name.endswith(sfx) for op, sfx in self.holds)

    def _reload(self) -> None:
        try:
            st = self.control.stat()
        except FileNotFoundError:
            if self._seen is not None:
                self._seen = None
                self.heal()
                self.holds = []
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return
        self._seen = stamp
        self.heal()
        self.lossy = False
        self.volatile = False
        self.holds = []
        for line in self.control.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "hold":
                self.holds.append((parts[1], parts[2]))
            elif parts == ["lossy"]:
                self.lossy = True
            elif parts == ["volatile"]:
                self.volatile = True
            elif len(parts) == 2:
                self.fail(parts[0], getattr(errno, parts[1]))


#: A journal write the test never releases fails after this long instead of hanging.
GATE_TIMEOUT = 60.0


class _GatedHandle:
    """A journal file whose data writes wait for the gate (flusher thread side)."""

    def __init__(self, inner: JournalHandle, gate: threading.Event) -> None:
        self._inner = inner
        self._gate = gate

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        if not self._gate.wait(GATE_TIMEOUT):
            raise OSError("the test never flushed the transaction log")
        self._inner.write(offset, data)

    def fsync(self) -> None:
        self._inner.fsync()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)

    def allocate(self, size: int) -> None:
        self._inner.allocate(size)

    def close(self) -> None:
        self._inner.close()


class GatedSeam:
    """A file seam whose journal data writes pass only while :attr:`gate` is set, so the
    flusher cannot make records durable on its own: a test decides when they are."""

    def __init__(self) -> None:
        self._inner = OsFileSeam()
        self.gate = threading.Event()

    def open(self, path: Path, *, create: bool) -> JournalHandle:
        return _GatedHandle(self._inner.open(path, create=create), self.gate)

    def rename(self, src: Path, dst: Path) -> None:
        self._inner.rename(src, dst)
