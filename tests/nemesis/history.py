"""Histories: what every client and the nemesis did, one JSON line per event.

Each process (a client, or the nemesis itself) appends to ``history/NAME.jsonl``::

    {"type": "invoke", "wall": 1764374400.12, "mono": 12.503, "process": "pub-1",
     "f": "publish", "value": {"topic": "nem.pub", "first": 41, "last": 50}, "node": "a"}

- ``type``: ``invoke`` (an operation starts), ``ok`` (it completed), ``fail`` (it did
  not happen), ``info`` (the outcome is unknown, or a note: a connection, a fault);
- ``wall``: the machine's clock; ``mono``: seconds since the run started on the
  harness's monotonic clock (every process of the harness shares it, so events of
  different processes are ordered by it);
- ``f`` and ``value``: the operation and its argument or result (per workload: the
  module docstring of :mod:`tests.nemesis.workloads`);
- ``node``: the instance the client used (None when it had none).

The checker reads the files back (:func:`read_history`), so a run's histories can be
checked again later (``python -m tests.nemesis --check DIR``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

__all__ = ["Event", "Histories", "Recorder", "read_history"]


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    wall: float
    mono: float
    process: str
    f: str
    value: Any
    node: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "wall": self.wall,
            "mono": self.mono,
            "process": self.process,
            "f": self.f,
            "value": self.value,
            "node": self.node,
        }


class Recorder:
    """One process's history file; events are buffered and written by :meth:`flush`."""

    def __init__(self, histories: Histories, process: str) -> None:
        self._histories = histories
        self.process = process
        self._file: IO[bytes] = open(histories.root / f"{process}.jsonl", "ab")  # noqa: SIM115
        self._buffer: list[bytes] = []

    def record(self, type_: str, f: str, value: Any = None, node: str | None = None) -> float:
        """Append an event; returns its ``mono`` time."""
        mono = self._histories.mono()
        self._buffer.append(
            orjson.dumps(
                {
                    "type": type_,
                    "wall": round(time.time(), 6),
                    "mono": round(mono, 6),
                    "process": self.process,
                    "f": f,
                    "value": value,
                    "node": node,
                }
            )
            + b"\n"
        )
        if len(self._buffer) >= 256:
            self.flush()
        return mono

    def invoke(self, f: str, value: Any = None, node: str | None = None) -> float:
        return self.record("invoke", f, value, node)

    def ok(self, f: str, value: Any = None, node: str | None = None) -> float:
        return self.record("ok", f, value, node)

    def fail(self, f: str, value: Any = None, node: str | None = None) -> float:
        return self.record("fail", f, value, node)

    def info(self, f: str, value: Any = None, node: str | None = None) -> float:
        return self.record("info", f, value, node)

    def flush(self) -> None:
        if self._buffer:
            self._file.write(b"".join(self._buffer))
            self._file.flush()
            self._buffer.clear()

    def close(self) -> None:
        self.flush()
        self._file.close()


class Histories:
    """The run's history directory and its shared monotonic origin."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.origin = time.monotonic()
        self._recorders: dict[str, Recorder] = {}

    def mono(self) -> float:
        return time.monotonic() - self.origin

    def recorder(self, process: str) -> Recorder:
        if process not in self._recorders:
            self._recorders[process] = Recorder(self, process)
        return self._recorders[process]

    def flush(self) -> None:
        for r in self._recorders.values():
            r.flush()

    def close(self) -> None:
        for r in self._recorders.values():
            r.close()
        self._recorders.clear()


def read_history(root: Path) -> Iterator[Event]:
    """Every event of every file under ``root``, in ``mono`` order (a torn last line, left
    by a killed harness, is skipped)."""
    events: list[Event] = []
    for path in sorted(root.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                d = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            events.append(
                Event(d["type"], d["wall"], d["mono"], d["process"], d["f"], d["value"], d["node"])
            )
    events.sort(key=lambda e: e.mono)
    return iter(events)
