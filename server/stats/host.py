"""Host and process metrics (psutil) for ``/api/host`` and the sampler. Blocking: run in a thread.

CPU percentages and network rates are computed by :class:`HostProbe` from the counters it
saw at its previous call, so two probes (the sampler's and the admin API's) do not disturb
each other the way ``psutil.cpu_percent(interval=None)``'s process-global state would. The
first call of a probe reports averages since boot (CPU) or process start (process CPU) and
no network rate.

Disk figures are given per directory of the instance (journal, archive, data, stats):
the bytes of the files under it (the part Spool is responsible for) and the usage of the
filesystem holding it (what will run out). A directory that does not exist yet is measured
at its nearest existing parent, with ``dir_bytes`` 0.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import psutil

_NET_FIELDS: Final = (
    "bytes_sent",
    "bytes_recv",
    "packets_sent",
    "packets_recv",
    "errin",
    "errout",
    "dropin",
    "dropout",
)


@dataclass(frozen=True, slots=True)
class _Previous:
    at: float
    cpu_busy: float
    cpu_total: float
    proc_cpu: float
    net: tuple[int, ...]


def _existing(path: Path) -> Path:
    current = path.resolve()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


@dataclass(frozen=True, slots=True)
class FilesystemUsage:
    """The file system holding a directory: its size, what is used and free, percent used."""

    path: str
    total: int
    used: int
    free: int
    percent: float


def filesystem_usage(path: Path) -> FilesystemUsage:
    """Usage of the file system holding ``path`` (measured at its nearest existing parent).

    Blocking (a ``statvfs``): run it in a thread.
    """
    usage = psutil.disk_usage(str(_existing(path)))
    return FilesystemUsage(str(path), usage.total, usage.used, usage.free, float(usage.percent))


def directory_bytes(path: Path) -> int:
    """Total size of the regular files under ``path`` (0 when it does not exist)."""
    total = 0
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue  # removed while scanning (journal archive/remove)
        except OSError:
            continue
    return total


def _cpu_busy_total() -> tuple[float, float]:
    times = psutil.cpu_times()
    total = float(sum(times))
    idle = float(times.idle) + float(getattr(times, "iowait", 0.0))
    return total - idle, total


class HostProbe:
    """Collects host, disk, network and process figures.

    Args:
        directories: label -> directory to report (e.g. ``{"journal": Path(...)}``).
    """

    def __init__(self, directories: Mapping[str, Path]) -> None:
        self._dirs = dict(directories)
        self._process = psutil.Process()
        self._previous: _Previous | None = None
        self._lock = threading.Lock()  # concurrent /api/host requests share the baseline

    def sample(self) -> dict[str, Any]:
        """One reading (the ``/api/host`` body); see docs/admin-api.md for the fields."""
        with self._lock:
            return self._sample()

    def _sample(self) -> dict[str, Any]:
        now = time.monotonic()
        busy, total = _cpu_busy_total()
        proc_times = self._process.cpu_times()
        proc_cpu = float(proc_times.user + proc_times.system)
        net_counters = psutil.net_io_counters()
        net = tuple(int(getattr(net_counters, f)) for f in _NET_FIELDS)
        prev = self._previous
        if prev is None:
            cpu_percent = 100.0 * busy / total if total else 0.0
            proc_elapsed = max(time.time() - self._process.create_time(), 1e-9)
            proc_percent = 100.0 * proc_cpu / proc_elapsed
            rates: dict[str, float | None] = {"bytes_sent_rate": None, "bytes_recv_rate": None}
        else:
            d_total = total - prev.cpu_total
            cpu_percent = 100.0 * (busy - prev.cpu_busy) / d_total if d_total > 0 else 0.0
            elapsed = max(now - prev.at, 1e-9)
            proc_percent = 100.0 * (proc_cpu - prev.proc_cpu) / elapsed
            rates = {
                "bytes_sent_rate": max(net[0] - prev.net[0], 0) / elapsed,
                "bytes_recv_rate": max(net[1] - prev.net[1], 0) / elapsed,
            }
        self._previous = _Previous(now, busy, total, proc_cpu, net)

        memory = psutil.virtual_memory()
        swap = psutil.swap_memory()
        try:
            load = list(os.getloadavg())
        except OSError:
            load = []
        with self._process.oneshot():
            mem_info = self._process.memory_info()
            threads = self._process.num_threads()
            fds = self._process.num_fds() if hasattr(self._process, "num_fds") else 0
        return {
            "cpu": {
                "percent": round(cpu_percent, 2),
                "count": psutil.cpu_count() or 0,
                "load_avg": load,
            },
            "memory": {
                "total": memory.total,
                "available": memory.available,
                "used": memory.used,
                "percent": memory.percent,
                "swap_percent": swap.percent,
            },
            "disks": {label: self._disk(path) for label, path in self._dirs.items()},
            "network": {**dict(zip(_NET_FIELDS, net, strict=True)), **rates},
            "process": {
                "pid": self._process.pid,
                "cpu_percent": round(proc_percent, 2),
                "rss": mem_info.rss,
                "threads": threads,
                "fds": fds,
            },
        }

    @staticmethod
    def _disk(path: Path) -> dict[str, Any]:
        usage = filesystem_usage(path)
        return {
            "path": str(path),
            "dir_bytes": directory_bytes(path),
            "fs_total": usage.total,
            "fs_used": usage.used,
            "fs_free": usage.free,
            "fs_percent": usage.percent,
        }


def host_metric_values(reading: Mapping[str, Any]) -> dict[str, float]:
    """Flatten a :meth:`HostProbe.sample` reading into stats metric paths."""
    cpu = reading["cpu"]
    memory = reading["memory"]
    network = reading["network"]
    process = reading["process"]
    values: dict[str, float] = {
        "host/cpu_percent": float(cpu["percent"]),
        "host/memory_percent": float(memory["percent"]),
        "host/memory_used_bytes": float(memory["used"]),
        "host/memory_available_bytes": float(memory["available"]),
        "process/cpu_percent": float(process["cpu_percent"]),
        "process/rss_bytes": float(process["rss"]),
        "process/threads": float(process["threads"]),
        "process/fds": float(process["fds"]),
    }
    if cpu["load_avg"]:
        values["host/load1"] = float(cpu["load_avg"][0])
    for key in ("bytes_sent_rate", "bytes_recv_rate"):
        if network.get(key) is not None:
            values[f"host/net_{key}"] = float(network[key])
    for label, disk in reading["disks"].items():
        base = f"host/disk/{quote(label, safe='')}"
        values[f"{base}/dir_bytes"] = float(disk["dir_bytes"])
        values[f"{base}/fs_free_bytes"] = float(disk["fs_free"])
        values[f"{base}/fs_used_percent"] = float(disk["fs_percent"])
    return values
