"""One owner per store file: an exclusive ``fcntl.flock`` on ``<store>.lock``.

``flock`` locks belong to the open file description, so the lock is released by the
kernel when its holder dies (a SIGKILLed client leaves no stale lock behind), and a second
``open`` of the same file is refused even inside the same process. The holder writes
``pid host`` into the file so the refusal can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from spool.server.client.ha.errors import StoreLocked


class StoreLock:
    """An exclusive lock on ``path`` (created if missing), taken at construction.

    Raises:
        StoreLocked: another owner holds it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 256, 0).decode(errors="replace").strip()
            os.close(fd)
            raise StoreLocked(str(path), holder) from None
        # who holds it is information for a refused opener only: a full disk that refuses
        # these bytes must not fail the open (nor keep the lock taken above)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the lock up (the file stays; its content is stale information only)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)  # closing the descriptor releases the lock in any case


__all__ = ["StoreLock"]
