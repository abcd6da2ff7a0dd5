"""What replication keeps between runs: acked positions and this log's identity.

One small JSON file per instance, ``DataDirectory/replication/NAME.replication.json``::

    {"version": 1,
     "log_id": "5b0c...",                  # this instance's log, as destinations know it
     "instance_id": "e41a...",             # this instance, as its peers tell it apart
     "destinations": {"spool-b": {"remote": "spool-b", "remote_log_id": "9f1e...",
                                  "acked": 81234}}}

- ``acked`` is how far a destination acknowledged this instance's log (its local seq).
  A source that reconnects to the *same* remote log starts no earlier than the record
  after it; the holdings the destination reports decide the rest (a remote whose log is
  another - a failover address reaching a different instance, a log that started over -
  resyncs from its holdings alone).
- ``log_id`` names this instance's log to the instances that replicate to it. It is new
  whenever the log is empty at start-up (the journals were wiped, or it never had any),
  so a source does not trust positions a wiped destination acknowledged before.
- ``instance_id`` names this instance itself: its peers tell two instances that share a
  Name apart by it (the second link is refused). It is kept for as long as this file is,
  also when the log starts over; a file without one (an older version) gets one.

The file is written whole to a temporary file, fsynced and renamed (in a worker thread,
at most once a second while positions move, and at stop), so a crash leaves the previous
version: a position that is a little old only makes a resync send a little more, which
the destination de-duplicates. A file that cannot be read starts from nothing and says so.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import orjson

__all__ = ["FILE_VERSION", "AckedState", "ReplicationState", "load", "save", "state_path"]

FILE_VERSION: Final = 1


@dataclass(slots=True)
class AckedState:
    """How far one destination acknowledged this instance's log.

    Attributes:
        remote: the name of the instance that acknowledged it.
        remote_log_id: that instance's log identity then.
        acked: the local seq it acknowledged.
    """

    remote: str
    remote_log_id: str
    acked: int


@dataclass(slots=True)
class ReplicationState:
    """The file's content."""

    log_id: str
    destinations: dict[str, AckedState] = field(default_factory=dict)
    instance_id: str = field(default_factory=lambda: secrets.token_hex(16))

    @classmethod
    def new(cls, instance_id: str | None = None) -> ReplicationState:
        """A state for a log that starts over (a fresh log identity, no positions); the
        instance keeps ``instance_id`` when it had one."""
        state = cls(secrets.token_hex(16))
        if instance_id:
            state.instance_id = instance_id
        return state

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "version": FILE_VERSION,
                "log_id": self.log_id,
                "instance_id": self.instance_id,
                "destinations": {
                    name: {"remote": a.remote, "remote_log_id": a.remote_log_id, "acked": a.acked}
                    for name, a in sorted(self.destinations.items())
                },
            },
            option=orjson.OPT_INDENT_2,
        )

    @classmethod
    def decode(cls, data: bytes) -> ReplicationState:
        """Parse the file.

        Raises:
            ValueError: not a state file of this version.
        """
        obj = orjson.loads(data)
        if not isinstance(obj, dict) or obj.get("version") != FILE_VERSION:
            raise ValueError("not a replication state file of version 1")
        log_id = obj.get("log_id")
        dests = obj.get("destinations")
        if not isinstance(log_id, str) or not isinstance(dests, dict):
            raise ValueError("a replication state file has a log_id and destinations")
        state = cls(log_id)
        instance_id = obj.get("instance_id")
        if instance_id is not None:
            if not isinstance(instance_id, str) or not instance_id:
                raise ValueError("a replication state file's instance_id is a string")
            state.instance_id = instance_id
        for name, entry in dests.items():
            if not isinstance(entry, dict):
                raise ValueError(f"destination {name!r}: not an object")
            remote, remote_id, acked = (
                entry.get("remote"),
                entry.get("remote_log_id"),
                entry.get("acked"),
            )
            if not isinstance(remote, str) or not isinstance(remote_id, str):
                raise ValueError(f"destination {name!r}: remote and remote_log_id are strings")
            if not isinstance(acked, int) or acked < 0:
                raise ValueError(f"destination {name!r}: acked is a non-negative integer")
            state.destinations[name] = AckedState(remote, remote_id, acked)
        return state


def state_path(data_directory: Path, instance: str) -> Path:
    """Where an instance keeps its replication state."""
    return data_directory / "replication" / f"{instance}.replication.json"


def load(path: Path) -> tuple[ReplicationState | None, str | None]:
    """Read the state file (blocking: run in a thread).

    Returns:
        The state (None when there is none or it cannot be used) and, when it could not
        be used, why.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read {path}: {exc}"
    try:
        return ReplicationState.decode(data), None
    except (ValueError, orjson.JSONDecodeError) as exc:
        return None, f"{path} is not usable ({exc}); starting from no positions"


def save(path: Path, data: bytes) -> None:
    """Write the state file atomically (blocking: run in a thread)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
