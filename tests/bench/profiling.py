"""Profiling the broker during a scenario with py-spy, and reading its collapsed stacks.

``--profile`` runs each profiled scenario once more with ``py-spy record`` attached to the
broker process (sampling without pausing it, ``--nonblocking``), writes the raw collapsed
stacks next to the results, and summarizes the hot spots: for each function
(``file:function``) the share of samples where it is the innermost frame (*self*) and
where it is anywhere on the stack (*inclusive*), and for the project's own functions the
share charged to them including the libraries they call. Only busy stacks are sampled
(idle threads are not), summed over the broker's threads, so the percentages are shares of
the broker's busy time.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

#: py-spy's raw frame: ``function (path:line)`` or ``function (path)``.
_FRAME_RE: Final = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

ROOT: Final = Path(__file__).resolve().parents[2]


def find_py_spy() -> str | None:
    """py-spy next to the running interpreter (the venv) or on the PATH."""
    candidate = Path(sys.executable).with_name("py-spy")
    if candidate.exists() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which("py-spy")


def frame_key(frame: str, root: Path = ROOT) -> str:
    """``file:function`` for a raw frame, the file relative to the repository (or to
    site-packages / the standard library) so keys read like ``server/session.py:receive``."""
    m = _FRAME_RE.match(frame.strip())
    if m is None:
        return frame.strip()
    func, path = m.group("func"), m.group("file")
    rootstr = str(root) + os.sep
    if path.startswith(rootstr):
        path = path[len(rootstr) :]
    else:
        for marker in ("site-packages" + os.sep, "dist-packages" + os.sep):
            idx = path.find(marker)
            if idx >= 0:
                path = path[idx + len(marker) :]
                break
        else:
            lib = path.rfind(os.sep + "python3")
            if lib >= 0:
                rest = path[lib + 1 :]
                path = "stdlib/" + rest.split(os.sep, 1)[-1] if os.sep in rest else rest
    return f"{path}:{func}"


def is_project(key: str) -> bool:
    return key.startswith(("server/", "web/"))


@dataclass(frozen=True, slots=True)
class HotSpot:
    key: str
    self_pct: float
    inclusive_pct: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "function": self.key,
            "self_pct": round(self.self_pct, 2),
            "inclusive_pct": round(self.inclusive_pct, 2),
        }


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    """Hot spots of one profile. ``samples`` counts sampled (busy) stacks."""

    samples: int
    by_self: tuple[HotSpot, ...]
    by_project: tuple[HotSpot, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "top_self": [h.as_dict() for h in self.by_self],
            "top_project": [h.as_dict() for h in self.by_project],
        }


def summarize_collapsed(text: str, top: int = 15, root: Path = ROOT) -> ProfileSummary:
    """Hot spots from py-spy ``--format raw`` output (``f1;f2;...;fN COUNT`` per line).

    ``by_self`` ranks every function by its self share. ``by_project`` ranks the project's
    own functions (server/, web/) by the time *attributed* to them: a sample counts for
    the innermost project frame on its stack, so time spent inside a library
    (orjson, websockets, asyncio) is charged to the project function that called it;
    that is where a fix would go. Its ``self_pct`` field holds that attributed share.
    """
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    attributed: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        line = line.rstrip()
        if not line:
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        keys = [frame_key(f, root) for f in frames]
        # py-spy may prefix the thread ("process 123:..." / "thread (0x..)") as a frame
        keys = [k for k in keys if not k.startswith(("process ", "thread "))] or keys
        total += count
        self_counts[keys[-1]] += count
        for k in set(keys):
            incl_counts[k] += count
        for k in reversed(keys):
            if is_project(k):
                attributed[k] += count
                break
    if total == 0:
        return ProfileSummary(0, (), ())

    def pct(n: int) -> float:
        return n * 100.0 / total

    by_self = tuple(
        HotSpot(k, pct(n), pct(incl_counts[k])) for k, n in self_counts.most_common(top)
    )
    by_project = tuple(
        HotSpot(k, pct(n), pct(incl_counts[k])) for k, n in attributed.most_common(top)
    )
    return ProfileSummary(total, by_self, by_project)


class PySpyRecorder:
    """``py-spy record`` attached to one process until :meth:`stop`."""

    def __init__(self, py_spy: str, pid: int, out: Path, rate: int = 250) -> None:
        self.out = out
        self.started = 0.0
        out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--nonblocking",
                "--full-filenames",
                "--output",
                str(out),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.started = time.monotonic()

    def stop(self, timeout: float = 30.0) -> ProfileSummary:
        """Stop sampling (SIGINT makes py-spy write its file) and summarize it.

        Raises:
            RuntimeError: py-spy failed or wrote nothing (its output is the message).
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            output, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            output, _ = self.proc.communicate()
        if not self.out.exists():
            raise RuntimeError("py-spy wrote no profile: " + output.decode(errors="replace")[-500:])
        return summarize_collapsed(self.out.read_text(errors="replace"))
