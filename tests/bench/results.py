"""Benchmark results: the per-scenario record, the run record, and the JSON history file.

The history file (``bench-results.json`` at the repository root unless ``--out``) is one
JSON array; each element is one suite run with the machine, the versions, the git commit,
the settings and every scenario's per-run values. A run is appended by rewriting the file
through a temporary file and ``os.replace``, so an interrupted write never loses the
history. A file that is not a JSON array is never overwritten: it is moved aside.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import psutil

from tests.bench.catalog import ScenarioSpec, Target
from tests.bench.stats import Summary, summarize

#: version of the layout of one run record in the history file.
SCHEMA_VERSION: Final = 1

ROOT: Final = Path(__file__).resolve().parents[2]

Status = Literal["ok", "error", "missing", "skipped"]


@dataclass(slots=True)
class ScenarioResult:
    """What one scenario produced.

    Attributes:
        spec: the scenario.
        status: ``ok``; ``error`` (it ran and failed: a broken broker or peer);
            ``missing`` (a peer or module is not available; reported, never faked);
            ``skipped`` (not applicable in this run).
        reason: why, when not ``ok``.
        params: the parameters used (the spec's plus the mode's counts).
        runs: per-run metric dicts, in order (warm-up runs excluded).
        detail: extra facts (error traceback, peer versions, profile summary).
        seconds: wall time spent on the scenario, warm-up included.
    """

    spec: ScenarioSpec
    status: Status = "ok"
    reason: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, float]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def metrics(self) -> dict[str, Summary]:
        """Median and spread of every metric present in all runs."""
        if not self.runs:
            return {}
        names = [k for k in self.runs[0] if all(k in r for r in self.runs)]
        return {name: summarize([r[name] for r in self.runs]) for name in names}

    def target_verdicts(self) -> list[tuple[Target, float | None, bool | None]]:
        """(target, median or None, met or None) for each of the spec's targets."""
        metrics = self.metrics()
        out: list[tuple[Target, float | None, bool | None]] = []
        for t in self.spec.targets:
            s = metrics.get(t.metric)
            if s is None:
                out.append((t, None, None))
            else:
                out.append((t, s.median, t.met(s.median)))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "family": self.spec.family,
            "title": self.spec.title,
            "headline": list(self.spec.headline),
            "status": self.status,
            "reason": self.reason,
            "params": self.params,
            "seconds": round(self.seconds, 3),
            "metrics": {k: v.as_dict() for k, v in self.metrics().items()},
            "targets": [
                {**t.as_dict(), "observed": obs, "met": met}
                for t, obs, met in self.target_verdicts()
            ],
            "detail": self.detail,
        }


def _run(cmd: list[str], timeout: float = 10.0) -> str | None:
    """Output of a read-only command, or None when it cannot run."""
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()


def git_info() -> dict[str, Any]:
    """Commit, branch and whether the work tree has uncommitted changes (read-only git)."""
    commit = _run(["git", "rev-parse", "HEAD"])
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "commit": commit,
        "branch": _run(["git", "rev-parse", "--abbrev-ref", "HEAD"]),
        "dirty": bool(status) if status is not None else None,
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_info(workdir: Path | None = None) -> dict[str, Any]:
    """Facts about the machine that change benchmark numbers."""
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "cpu_model": _cpu_model(),
        "logical_cpus": psutil.cpu_count(logical=True),
        "physical_cpus": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
    }
    with contextlib.suppress(OSError):
        info["loadavg_at_start"] = list(os.getloadavg())
    if workdir is not None:
        with contextlib.suppress(OSError):
            usage = psutil.disk_usage(str(workdir))
            info["workdir_free_bytes"] = usage.free
        best = ""
        for part in psutil.disk_partitions(all=True):
            if str(workdir).startswith(part.mountpoint) and len(part.mountpoint) > len(best):
                best = part.mountpoint
                info["workdir_fs"] = {
                    "mountpoint": part.mountpoint,
                    "fstype": part.fstype,
                    "device": part.device,
                }
    return info


#: Python distributions whose versions are recorded with every run.
PACKAGES: Final = (
    "spool-broker",
    "starlette",
    "uvicorn",
    "websockets",
    "orjson",
    "google-crc32c",
    "redis",
    "hiredis",
    "paho-mqtt",
    "psutil",
    "py-spy",
)


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _jsonable(value: Any) -> Any:
    """A copy where non-finite floats are null, tuples are lists and paths are strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def append_run(path: Path, record: dict[str, Any]) -> Path | None:
    """Append one run record to the JSON history at ``path``.

    Returns the path the previous content was moved to when it was not a JSON array
    (it is kept, never overwritten), else None.
    """
    runs: list[Any] = []
    moved: Path | None = None
    if path.exists():
        text = path.read_text()
        try:
            loaded = json.loads(text) if text.strip() else []
        except json.JSONDecodeError:
            loaded = None
        if isinstance(loaded, list):
            runs = loaded
        else:
            moved = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S')}")
            os.replace(path, moved)
    runs.append(_jsonable(record))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(runs, fh, indent=1, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return moved


def load_runs(path: Path) -> list[dict[str, Any]]:
    """The run records in a history file (empty when it does not exist)."""
    if not path.exists():
        return []
    loaded = json.loads(path.read_text())
    if not isinstance(loaded, list):
        raise ValueError(f"{path} is not a JSON array of runs")
    return loaded
