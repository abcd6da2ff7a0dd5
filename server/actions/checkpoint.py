"""The trigger checkpoint file: where each on-publish action resumes after a restart.

An action triggered by published messages runs on them after they are appended, so a
crash can stop it with candidates not run yet. At start-up the on-publish stage
(:mod:`spool.server.actions.onpublish`), which owns this file, offers again the log's
records after each action's checkpoint: runs are at least once across a crash, and the messages they derive are
deduplicated by their identity. The file, ``NAME.triggers.json``, holds per action the
seq :meth:`spool.server.actions.lanes.EventLane.checkpoint` answered (every candidate up
to it done, its derived messages durable)::

    {"version": 1, "log": OWN_PUB_HASH, "actions": {"NAME": SEQ, ...}}

``log`` is the log's own publisher identity (``TransactionLog.own_pub_hash``): seqs mean
something in one log only, so a file another log wrote (a data directory copied or
recreated beside an old file) must not move a single action. An action absent from the
file has no checkpoint (it starts at the log's end, never replaying history).

This module is the format alone: :func:`encode` and :func:`decode` are pure. The stage
writes the bytes whole and durably with the log's helper
(:func:`spool.server.txlog.storage.files.write_durable`: temp file, fsync, rename,
directory fsync), so a crash leaves the old file or the new one. A file :func:`decode`
refuses is ignored with a warning: the actions start without a checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

__all__ = ["VERSION", "TriggerCheckpointError", "checkpoint_name", "decode", "encode"]

#: the format this module writes and the only one it reads
VERSION: Final = 1
#: the largest publisher identity and seq (both are unsigned 64-bit in the log)
_MAX_U64: Final = (1 << 64) - 1
_KEYS: Final = frozenset({"version", "log", "actions"})


class TriggerCheckpointError(ValueError):
    """A trigger checkpoint file that cannot be used (the message says why)."""


def checkpoint_name(instance: str) -> str:
    """``NAME.triggers.json``: the file name of instance ``instance``'s checkpoint."""
    return f"{instance}.triggers.json"


def _is_u64(value: Any) -> bool:
    return type(value) is int and 0 <= value <= _MAX_U64


def encode(log_id: int, marks: Mapping[str, int]) -> bytes:
    """The file's bytes: ``marks`` (action name -> checkpoint seq) for the log whose own
    publisher identity is ``log_id``. Names sorted: the same marks give the same bytes.

    Raises:
        ValueError: ``log_id`` is not a publisher identity, or a seq not a seq (what
            :func:`decode` would refuse is never written).
    """
    if not _is_u64(log_id) or log_id == 0:
        raise ValueError(f"not a log's publisher identity: {log_id!r}")
    for name, seq in marks.items():
        if not _is_u64(seq):
            raise ValueError(f"action {name!r}: not a seq: {seq!r}")
    body = {"version": VERSION, "log": log_id, "actions": dict(marks)}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def decode(data: bytes, expected_log: int) -> dict[str, int]:
    """The checkpoint seq of each action in a file this version wrote for the log whose
    own publisher identity is ``expected_log``.

    Raises:
        TriggerCheckpointError: not JSON, not this version's shape (another version, a
            missing or unknown key, a value of the wrong type, a negative seq), or written
            for another log.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TriggerCheckpointError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise TriggerCheckpointError("not a JSON object")
    version = obj.get("version")
    if type(version) is not int or version != VERSION:
        said = f"version {version!r}" if "version" in obj else "no version"
        raise TriggerCheckpointError(f"{said}, this instance reads version {VERSION}")
    if obj.keys() != _KEYS:
        keys = ", ".join(sorted(map(repr, obj.keys() ^ _KEYS)))
        raise TriggerCheckpointError(f"not the version {VERSION} keys (differs in {keys})")
    log, actions = obj["log"], obj["actions"]
    if not _is_u64(log) or log == 0:
        raise TriggerCheckpointError(f"log {log!r} is not a publisher identity")
    if log != expected_log:
        raise TriggerCheckpointError(
            f"written for another log (publisher {log:#x}, this log is {expected_log:#x})"
        )
    if not isinstance(actions, dict):
        raise TriggerCheckpointError("actions is not an object")
    marks: dict[str, int] = {}
    for name, seq in actions.items():
        if not _is_u64(seq):
            raise TriggerCheckpointError(f"action {name!r}: {seq!r} is not a seq")
        marks[name] = seq
    return marks
