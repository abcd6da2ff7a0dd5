"""The soak's faults, injected into one real ``spool serve`` process.

- ``kill``: SIGKILL, then a restart on the same data directory (a new port: clients look
  the URL up again). The epoch the process served ends "killed": what live subscribers
  got from it may include records that were appended but never made durable.
- ``stop``: SIGSTOP for longer than the heartbeat, then SIGCONT. The kernel keeps the TCP
  connections open: only the clients' own silence watch and the broker's heartbeat rule
  notice.
- ``disk``: the data directory is on a small tmpfs (root only); a filler file takes all
  its room until the log refuses publishes (``txlog full``), is held so a little longer,
  then removed: the log must resume by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.disk import fill
from tests.support.server import SpoolProcess

__all__ = ["Broker", "FaultLog", "fill", "tmpfs"]

#: the broker's own counters the summary adds up across restarts (Prometheus names)
_COUNTERS = re.compile(
    r"^(spool_spills_total|spool_catch_ups_total|spool_disconnects_total)"
    r"(?:\{cause=\"([a-z_]+)\"\})? ([0-9.e+]+)$",
    re.M,
)


class Broker:
    """The broker under test across restarts (the soak's :class:`~tests.soak.actors.Target`)."""

    def __init__(self, proc: SpoolProcess) -> None:
        self.proc = proc
        self._epoch = 0
        #: epochs that ended with SIGKILL
        self.killed: set[int] = set()
        #: the broker's spill and disconnect counters, added up over its lifetimes
        self.counters: Counter[str] = Counter()

    async def scrape(self) -> None:
        """Add the process's counters to :attr:`counters` (before it dies: they restart
        from zero). A broker that does not answer is skipped (its counters are lost)."""
        try:
            r = await asyncio.to_thread(httpx.get, self.proc.http_url + "/metrics", timeout=5)
        except httpx.HTTPError:
            return
        for name, cause, value in _COUNTERS.findall(r.text):
            key = name.removeprefix("spool_").removesuffix("_total")
            self.counters[f"{key}/{cause}" if cause else key] += int(float(value))

    @property
    def url(self) -> str:
        return self.proc.ws_url

    @property
    def epoch(self) -> int:
        return self._epoch

    async def kill_and_restart(self) -> None:
        """SIGKILL, then start again (in a thread: the clients' loop keeps running)."""
        await self.scrape()
        self.proc.kill()
        self.killed.add(self._epoch)
        self._epoch += 1
        await asyncio.to_thread(self.proc.start, 60.0)

    async def freeze(self, seconds: float) -> None:
        """SIGSTOP for ``seconds``, then SIGCONT (always, even if cancelled)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)


@dataclass
class FaultLog:
    """What was injected, by kind, and how long the clients took to make progress again."""

    injected: Counter[str] = field(default_factory=Counter)
    recovery_s: dict[str, list[float]] = field(default_factory=dict)
    #: faults that did not have the effect they were meant to (a disk that never filled)
    misses: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def recovered(self, kind: str, seconds: float) -> None:
        self.recovery_s.setdefault(kind, []).append(round(seconds, 3))


@contextlib.contextmanager
def tmpfs(path: Path, size_mb: int) -> Iterator[str | None]:
    """Mount a tmpfs of ``size_mb`` at ``path``; yields None when mounted, else why not.

    Only root can mount (CI runs as root); without it the disk-full fault is skipped and
    the soak says so.
    """
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield "the disk-full fault mounts a tmpfs: it needs root"
        return
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        yield f"cannot mount a tmpfs: {done.stderr.strip()}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


async def wait_for(
    cond: Callable[[], bool], timeout: float, interval: float = 0.05
) -> float | None:
    """Poll ``cond`` on the loop until it holds; the seconds it took, or None on timeout."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not cond():
        if loop.time() - start > timeout:
            return None
        await asyncio.sleep(interval)
    return loop.time() - start
