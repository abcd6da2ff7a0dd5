"""Journal file names and the file seam through which journals are written.

Names (``NAME`` is the instance name; a 20-digit zero-padded base sequence makes ``ls``
sort journals in log order, as Kafka's segment names do)::

    NAME.00000000000000000001.journal        a journal whose first record is seq 1
    NAME.00000000000000000001.journal.zst    the same, compressed (zstd; or .gz)
    NAME.00000000000000000001.index          its index (a cache; see index/answers.py)
    NAME.prealloc.0000                       a preallocated journal not yet given a base
    NAME.clients.ack                         publisher -> last sequence cache
    damaged/                                 bytes recovery cut, kept for inspection

A preallocated file cannot be named by its base sequence before the log knows it, so it
waits under ``NAME.prealloc.N`` and is renamed when the log rolls into it.

Prefix rule: only names of the form above, with this instance's exact name, belong to the
log; other instances' files sharing the directory are never touched.

Every journal write goes through a :class:`FileSeam` so tests can inject failures
(``EIO`` on the third write, ``ENOSPC`` on allocation...) without flags in production
code, as the websockets tests intercept their transport.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, Protocol

from spool.server.txlog.errors import InvalidInstanceName

__all__ = [
    "DAMAGED_DIR",
    "FileSeam",
    "JournalHandle",
    "OsFileSeam",
    "ParsedName",
    "clients_ack_name",
    "discover_instances",
    "fsync_dir",
    "index_name",
    "journal_name",
    "move_journal",
    "parse_name",
    "prealloc_name",
    "validate_instance",
    "write_atomic",
    "write_durable",
]

DIGITS: Final = 20
#: bytes copied at a time when a journal moves to another file system
COPY_CHUNK: Final = 8 << 20
DAMAGED_DIR: Final = "damaged"
Compression = Literal["zstd", "gzip"]
SUFFIX: Final[dict[str, Compression]] = {".zst": "zstd", ".gz": "gzip"}
EXT: Final[dict[Compression, str]] = {"zstd": ".zst", "gzip": ".gz"}
_INSTANCE_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_NAME_RE: Final = re.compile(
    r"(?P<inst>.+)\.(?:(?P<base>\d{20})\.(?P<ext>journal(?:\.zst|\.gz)?|index)"
    r"|prealloc\.(?P<pre>\d{4,})|(?P<ack>clients\.ack))"
)


def validate_instance(name: str) -> str:
    """Check that ``name`` can prefix file names (letters, digits, ``_ . -``)."""
    if not _INSTANCE_RE.fullmatch(name) or name.endswith("."):
        raise InvalidInstanceName(
            f"instance name {name!r} cannot prefix journal files "
            "(letters, digits, '_', '.', '-'; at most 128 characters)"
        )
    return name


def journal_name(instance: str, base: int, compression: Compression | None = None) -> str:
    """``NAME.<base20>.journal[.zst|.gz]``."""
    ext = EXT[compression] if compression else ""
    return f"{instance}.{base:0{DIGITS}d}.journal{ext}"


def index_name(instance: str, base: int) -> str:
    """``NAME.<base20>.index``."""
    return f"{instance}.{base:0{DIGITS}d}.index"


def prealloc_name(instance: str, n: int) -> str:
    """``NAME.prealloc.NNNN``."""
    return f"{instance}.prealloc.{n:04d}"


def clients_ack_name(instance: str) -> str:
    """``NAME.clients.ack``."""
    return f"{instance}.clients.ack"


@dataclass(frozen=True, slots=True)
class ParsedName:
    """What a file name in a journal directory stands for."""

    instance: str
    kind: Literal["journal", "index", "prealloc", "clients"]
    base: int = 0
    compression: Compression | None = None
    number: int = 0


def parse_name(filename: str, instance: str | None = None) -> ParsedName | None:
    """Parse a log file name; None for anything else or another instance's file."""
    m = _NAME_RE.fullmatch(filename)
    if m is None:
        return None
    inst = m.group("inst")
    if instance is not None and inst != instance:
        return None
    if m.group("ack"):
        return ParsedName(inst, "clients")
    if m.group("pre"):
        return ParsedName(inst, "prealloc", number=int(m.group("pre")))
    base = int(m.group("base"))
    ext = m.group("ext")
    if ext == "index":
        return ParsedName(inst, "index", base)
    return ParsedName(inst, "journal", base, SUFFIX.get(ext[len("journal") :]))


def discover_instances(directory: Path) -> set[str]:
    """Instance names that have journals in ``directory`` (for the CLI's default)."""
    found: set[str] = set()
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return found
    for name in names:
        parsed = parse_name(name)
        if parsed is not None and parsed.kind == "journal":
            found.add(parsed.instance)
    return found


class JournalHandle(Protocol):
    """An open journal file, writable at explicit offsets."""

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data`` at ``offset``."""
        ...

    def fsync(self) -> None:
        """Make written data durable (fdatasync)."""
        ...

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes."""
        ...

    def allocate(self, size: int) -> None:
        """Reserve zero-filled space up to ``size`` bytes (fails early on a full disk)."""
        ...

    def close(self) -> None:
        """Close the file."""
        ...


class FileSeam(Protocol):
    """Opens journal files for writing; the one place writes can be intercepted."""

    def open(self, path: Path, *, create: bool) -> JournalHandle:
        """Open ``path`` read-write (``create``: it must not exist yet)."""
        ...

    def rename(self, src: Path, dst: Path) -> None:
        """Atomically rename ``src`` to ``dst`` (same directory)."""
        ...


class _OsHandle:
    """A journal file through ``os`` calls (pwrite, fdatasync, ftruncate, fallocate)."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, offset)
            view = view[n:]
            offset += n

    def fsync(self) -> None:
        os.fdatasync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)

    def allocate(self, size: int) -> None:
        current = os.fstat(self._fd).st_size
        if size > current:
            os.posix_fallocate(self._fd, current, size - current)

    def close(self) -> None:
        os.close(self._fd)


class OsFileSeam:
    """The real file seam."""

    def open(self, path: Path, *, create: bool) -> JournalHandle:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
        return _OsHandle(os.open(path, flags, 0o644))

    def rename(self, src: Path, dst: Path) -> None:
        os.rename(src, dst)


def fsync_dir(directory: Path) -> None:
    """fsync a directory so renames and creations in it survive a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def move_journal(seam: FileSeam, src: Path, dst: Path) -> None:
    """Move a finished journal to another directory, durably.

    A rename when both are on one file system (the caller fsyncs both directories).
    Otherwise the journal is copied through the seam to ``dst.tmp``, the copy fsynced and
    renamed into place and the directory fsynced, and only then is the original removed:
    a crash at any point leaves an intact copy (both, at worst: recovery keeps the
    archived one and deletes the other, and deletes a ``.tmp`` leftover).
    """
    try:
        seam.rename(src, dst)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    with open(src, "rb") as fh:
        write_durable(seam, dst, iter(lambda: fh.read(COPY_CHUNK), b""))
    os.unlink(src)


def write_durable(seam: FileSeam, path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write a file whole and durably, through the seam as journals are: ``PATH.tmp``
    written (``data``, or its chunks in order) and fsynced, renamed over ``path``, the
    directory fsynced. A crash leaves the old file or the new one, never part of one (a
    ``.tmp`` left over is replaced next time); once this returns the new one survives a
    crash, on a storage that loses un-fsynced writes too."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()  # one a crash interrupted
    handle = seam.open(tmp, create=True)
    try:
        offset = 0
        for chunk in (data,) if isinstance(data, bytes) else data:
            handle.write(offset, chunk)
            offset += len(chunk)
        handle.fsync()
    finally:
        handle.close()
    seam.rename(tmp, path)
    fsync_dir(path.parent)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write a small file whole: temp file, (fsync), rename over ``path``.

    Used for caches (indexes, ``clients.ack``): a crash leaves either the old or the new
    file, never a half-written one under the final name.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
