"""Where each queue's recovery may start: the ``NAME.queues.ack`` checkpoint file.

Without it, start-up would read the whole retained log when queues are configured (a
queue's state is its messages minus its acks), so restart time would grow with retention.
The checkpoint keeps, per queue, a log seq **from which a replay gives the same queue**
(every message before it has left, every record that changes a message still to come is
at or after it; a replicated queue's changes that arrived before their message hold it
back), the queue's transfer counters through the last record it covers, a replicated
queue's publisher positions then (so that a change replayed for a message that left
before the seq is known for what it is), and a fingerprint of the queue's definition. It is only ever too early, never too late: the log is made
durable before the file is written (temp file, fsync, rename), and a log that does not
hold the record the file names makes start-up read the whole log. Recovery reads from the
smallest seq, each queue from its own (server/queues/stage.py). See docs/queues.md "The
checkpoint: restart time that does not grow with retention".
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from spool.server.config.model import QueueConfig

__all__ = [
    "CHECKPOINT_INTERVAL",
    "Checkpoint",
    "CheckpointError",
    "LastRecord",
    "Transferred",
    "checkpoint_name",
    "decode",
    "encode",
    "fingerprint",
]

#: how often the service writes a checkpoint that moved (seconds)
CHECKPOINT_INTERVAL: Final = 5.0
_VERSION: Final = 3

#: a queue's transfer counters: (in, out)
Transferred = tuple[int, int]
#: a replicated queue's publisher positions: publisher hash -> the sequence its messages
#: passed (server/queues/ownership.py ``Ownership.seen``)
Seen = Mapping[int, int]


def checkpoint_name(instance: str) -> str:
    """``NAME.queues.ack``, in the journal directory beside ``NAME.clients.ack``."""
    return f"{instance}.queues.ack"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used (the reason; start-up reads the whole log)."""


@dataclass(frozen=True, slots=True)
class LastRecord:
    """The last record a checkpoint covers: seq, and who wrote it when (its identity)."""

    seq: int
    pub_hash: int
    pub_seq: int
    timestamp_us: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Per queue, the seq its replay may start from, the definition it holds for, its
    transfer counters and (replicated) its publisher positions through :attr:`last`."""

    last: LastRecord
    seqs: Mapping[str, int]
    fingerprints: Mapping[str, str]
    transferred: Mapping[str, Transferred]
    seen: Mapping[str, Seen]

    def start_of(self, name: str, print_: str) -> int:
        """Where queue ``name`` (defined as ``print_`` now) may start (0: the whole log)."""
        if self.fingerprints.get(name) != print_:
            return 0
        return self.seqs.get(name, 0)


def fingerprint(cfg: QueueConfig, replicated: bool) -> str:
    """What a queue's checkpoint holds for: the definition of which messages enter it
    and whether ownership is rebuilt (a change reads the whole log again)."""
    text = orjson.dumps(
        [cfg.kind, cfg.underlying, cfg.underlying_regex, cfg.filter, replicated],
    )
    return hashlib.sha256(text).hexdigest()[:32]


def encode(checkpoint: Checkpoint) -> bytes:
    last = checkpoint.last
    return orjson.dumps(
        {
            "version": _VERSION,
            "last": [last.seq, last.pub_hash, last.pub_seq, last.timestamp_us],
            "queues": {
                name: {
                    "seq": seq,
                    "fingerprint": checkpoint.fingerprints[name],
                    "transferred": list(checkpoint.transferred[name]),
                    "seen": sorted(checkpoint.seen.get(name, {}).items()),
                }
                for name, seq in sorted(checkpoint.seqs.items())
            },
        }
    )


def decode(data: bytes) -> Checkpoint:
    """Parse a checkpoint file.

    Raises:
        CheckpointError: not one this version wrote (why).
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CheckpointError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict) or obj.get("version") != _VERSION:
        raise CheckpointError(f"not a version {_VERSION} checkpoint")
    last, queues = obj.get("last"), obj.get("queues")
    if (
        not isinstance(last, list)
        or len(last) != 4
        or not all(type(v) is int and v >= 0 for v in last)
        or not isinstance(queues, dict)
    ):
        raise CheckpointError("malformed")
    seqs: dict[str, int] = {}
    prints: dict[str, str] = {}
    transferred: dict[str, Transferred] = {}
    seen: dict[str, Seen] = {}
    for name, entry in queues.items():
        counts = entry.get("transferred") if isinstance(entry, dict) else None
        positions = entry.get("seen") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or type(entry.get("seq")) is not int
            or not 0 < entry["seq"] <= last[0] + 1
            or not isinstance(entry.get("fingerprint"), str)
            or not isinstance(counts, list)
            or len(counts) != 2
            or not all(type(v) is int and v >= 0 for v in counts)
            or not isinstance(positions, list)
            or not all(_is_position(p) for p in positions)
        ):
            raise CheckpointError(f"malformed entry for queue {name!r}")
        seqs[name] = entry["seq"]
        prints[name] = entry["fingerprint"]
        transferred[name] = (counts[0], counts[1])
        if positions:
            seen[name] = {pub_hash: seq for pub_hash, seq in positions}
    return Checkpoint(LastRecord(*last), seqs, prints, transferred, seen)


def _is_position(item: object) -> bool:
    """A ``[publisher hash, sequence]`` pair of the ``seen`` list."""
    return (
        isinstance(item, list)
        and len(item) == 2
        and all(type(v) is int for v in item)
        and 0 <= item[0] < 1 << 64
        and item[1] > 0
    )


def read(path: Path) -> bytes | None:
    """The file's bytes (None: there is none). Blocking: run it in a thread."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
