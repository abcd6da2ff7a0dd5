"""A progress line for long jobs: tasks done, records scanned, rate (stderr).

Spark's own console bar is turned off by the pipeline's session (one bar per stage, and
it knows nothing of records); this prints one line that rewrites itself on a terminal
(a line every few seconds elsewhere) from the SparkContext's status tracker and the job's
record accumulator, and a last line with the totals.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from pyspark import SparkContext

from spool.server.pipeline.tally import Tally

__all__ = ["Progress"]


class Progress:
    """Prints ``label: tasks d/t, N records, R records/s, S s`` while a job runs.

    Use as a context manager around the job's actions.
    """

    def __init__(
        self,
        sc: SparkContext,
        tally: Tally | None,
        label: str,
        *,
        out: TextIO | None = None,
        every: float = 2.0,
        enabled: bool = True,
    ) -> None:
        self._sc = sc
        self._tally = tally
        self._label = label
        self._out = out or sys.stderr
        self._every = every
        self._enabled = enabled
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._tty = bool(getattr(self._out, "isatty", lambda: False)())

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        if self._enabled:
            self._thread = threading.Thread(target=self._run, name="spool-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._enabled:
            self._print(final=True)

    def line(self) -> str:
        """The current line (also what the tests read)."""
        elapsed = time.monotonic() - self._started
        done = total = 0
        tracker = self._sc.statusTracker()
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        records = self._tally.records.value if self._tally is not None else 0
        rate = records / elapsed if elapsed > 0 else 0.0
        tasks = f"tasks {done}/{total}, " if total else ""
        return f"{self._label}: {tasks}{records:,} records, {rate:,.0f} records/s, {elapsed:.1f} s"

    def _print(self, final: bool = False) -> None:
        text = self.line()
        if self._tty and not final:
            self._out.write("\r" + text + "\x1b[K")
        else:
            self._out.write(("\r" if self._tty else "") + text + "\n")
        self._out.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._every if self._tty else max(self._every, 10.0)):
            self._print()
