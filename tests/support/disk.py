"""A real full disk for tests: a small tmpfs (``ENOSPC`` at exactly its size) and a filler
file that takes its room until the test gives it back.

Mounting needs root (CI runs as root): :func:`tmpfs` skips the test cleanly without it,
and always unmounts. A test fills the disk with :func:`fill`, makes room again by deleting
(or truncating) the filler, and runs the code under test unchanged: no flag in production
code, no mock of ``os``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["fill", "mount_tmpfs", "tmpfs", "unmount"]


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` (``mount -o size=``: ``64k``, ``12m``) at ``path``: None
    once mounted, else why not (it needs root)."""
    if os.geteuid() != 0:
        return "a full disk mounts a tmpfs: it needs root"
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        return f"cannot mount a tmpfs here: {mounted.stderr.strip()}"
    return None


def unmount(path: Path) -> None:
    """Unmount ``path`` (lazily: a file still open there does not keep it)."""
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` for the test (root only: the test is
    skipped otherwise, as where the mount fails)."""
    why_not = mount_tmpfs(path, size)
    if why_not is not None:
        pytest.skip(f"{why_not} (CI runs as root)")
    try:
        yield path
    finally:
        unmount(path)


def fill(path: Path, leave: int = 0, name: str = "filler") -> Path:
    """A file taking all the room of ``path``'s file system but ``leave`` bytes.

    Unbuffered and tolerant: another writer may take room meanwhile (then the disk is
    full sooner, which is what the caller wants).
    """
    st = os.statvfs(path)
    room = st.f_bavail * st.f_frsize - leave
    filler = path / name
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        while room > 0:
            try:
                written = f.write(chunk[: min(room, len(chunk))])
            except OSError:
                break
            room -= written or 0
    return filler
