"""A broker clock whose wall time jumps when a control file says so (fault tests only).

:class:`JumpingClock` is the real clock plus an offset: the control file holds a number
of seconds (``-90``, ``3600``), added to :meth:`time` from the moment the file changes;
a missing file is no offset. An empty file, or one that is not a number, is one being
written (``write_text`` empties it first): the offset stays. Only the wall clock jumps: :meth:`monotonic` and
:meth:`sleep` are the system's (no real clock's monotonic time jumps). A daemon thread
reads the file every ``poll`` seconds, so :meth:`time` costs one addition.

``python -m tests.support.faulty_serve --clock PATH serve ...`` runs a real broker on it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

__all__ = ["JumpingClock"]


class JumpingClock:
    """The system clock, its wall time offset by what the control file says."""

    def __init__(self, control: Path, *, poll: float = 0.05) -> None:
        self.control = control
        self.offset = 0.0
        self._poll = poll
        self._read()
        threading.Thread(target=self._watch, name="jumping-clock", daemon=True).start()

    def time(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def _read(self) -> None:
        try:
            text = self.control.read_text().strip()
        except FileNotFoundError:
            self.offset = 0.0
            return
        try:
            self.offset = float(text)
        except ValueError:  # a file being written: keep the offset until it is whole
            pass

    def _watch(self) -> None:
        while True:
            time.sleep(self._poll)
            self._read()
