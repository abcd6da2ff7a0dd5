"""Where each queue's recovery may start: the ``NAME.queues.ack`` checkpoint file.

Without it, start-up reads the whole retained log when queues are configured (a queue's
state is its messages minus its acks, and nothing else keeps it), so restart time grows
with retention. The checkpoint keeps, per queue, a log seq **from which a replay gives
the same queue**: every message of the queue before it has left (acked, expired, past a
limit, delivered at most once), and every record that changes a message still in the
queue (or still to come) is at or after it. Recovery then reads from the smallest of the
queues' seqs, and each queue takes only the records from its own on
(server/queues/stage.py).

A queue's seq is the smaller of

- where its log pin holds (its oldest message, or a bounded queue's cursor, or the end of
  the log when it is empty): messages before it have left, and their acks come after them;
- the record of each ownership change a replicated queue received *before its message*
  (links are ordered per pair only; an ack, a grant, or a transfer request to this
  instance): it is kept here (:meth:`QueueRuntime.early_records`)
  while the change waits, while its message is in the queue, and, once the message left
  (or never entered, acked first), until the pin passed where the message can be. A replay
  from after such a record would lose the change (an ack: the message delivered again; a
  grant: two owners).

**Transfer counters.** A replicated queue's ``transferred_in`` / ``transferred_out``
are counted from the grants of this copy's log, one record at a time as it is logged or
read back (server/queues/stage.py ``QueueRuntime._count``). The file keeps each queue's
counters as they were through its last record (taken at the same moment as that
record, between two loop turns: every record up to it counted, none after), and the
replay counts only the grants of the records after it. So a restart gives the counters
the whole history of the log would, exactly, whichever checkpoint it starts from (an
older one only means more records are replayed and counted).

**Crash safety.** A checkpoint is only ever too early, never too late:

- the seqs are taken, then the log is made durable up to its end at that moment, then the
  file is written (temp file, fsync, rename): a checkpoint never names acks the disk may
  lose;
- a crash before the rename leaves the previous (earlier) checkpoint;
- the file names the last record it covers (seq, publisher, time): a log that does not
  hold that record (restored, replaced, truncated) makes start-up ignore the checkpoint
  and read the whole log, as does a queue whose definition changed (underlying topic,
  filter, kind, replication): the file stores a fingerprint of each.
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
_VERSION: Final = 2

#: a queue's transfer counters: (in, out)
Transferred = tuple[int, int]


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
    """Per queue, the seq its replay may start from, the definition it holds for, and
    its transfer counters through :attr:`last`."""

    last: LastRecord
    seqs: Mapping[str, int]
    fingerprints: Mapping[str, str]
    transferred: Mapping[str, Transferred]

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
    for name, entry in queues.items():
        counts = entry.get("transferred") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or type(entry.get("seq")) is not int
            or not 0 < entry["seq"] <= last[0] + 1
            or not isinstance(entry.get("fingerprint"), str)
            or not isinstance(counts, list)
            or len(counts) != 2
            or not all(type(v) is int and v >= 0 for v in counts)
        ):
            raise CheckpointError(f"malformed entry for queue {name!r}")
        seqs[name] = entry["seq"]
        prints[name] = entry["fingerprint"]
        transferred[name] = (counts[0], counts[1])
    return Checkpoint(LastRecord(*last), seqs, prints, transferred)


def read(path: Path) -> bytes | None:
    """The file's bytes (None: there is none). Blocking: run it in a thread."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
