"""Where delayed delivery's recovery may start: the ``NAME.delayed.ack`` checkpoint format.

Without a checkpoint, start-up would find the pending delayed messages by reading the log
from its first seq, so restart time would grow with the longest delay. The file holds
every pending entry of the due-time index (server/delayed/dueindex.py) as of a log record
it names, the *covered* record: start-up loads the entries and reads the log only after
that record. It is only ever too early, never too late: the log is made durable through
the covered record before the file is written, so an entry the file holds may have been
delivered by a record after it (recovery removes those), never the reverse. A file that
cannot be used (this module refuses it with :class:`CheckpointError`) or whose covered
record the log no longer holds makes start-up read the whole log.

Layout (little-endian)::

    0     8  magic      b"SPOOLDLY"
    8     2  version    1
    10    4  json_len   N
    14    N  JSON       {"covered": {"seq", "pub_hash", "pub_seq", "timestamp_us"},
                         "count", "by_topic": {topic: pending}}
    14+N     entries    one zstd frame of count x (due_us i64, seq i64, pub_hash u64,
                        pub_seq u64), in (due_us, seq) order
    end   4  crc32c     CRC-32C of every byte before it

Pure: :func:`encode` and :func:`decode` turn values into bytes and back; the file's owner
writes it (temp file, fsync, rename) and reads it, in a thread.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import lt
from typing import Final

import google_crc32c
import orjson
import zstandard

from spool.server.delayed.dueindex import DueEntries

__all__ = [
    "MAGIC",
    "VERSION",
    "Checkpoint",
    "CheckpointError",
    "Covered",
    "checkpoint_name",
    "decode",
    "encode",
]

MAGIC: Final = b"SPOOLDLY"
VERSION: Final = 1
_HEAD: Final = struct.Struct("<8sHI")  # 14
_CRC: Final = struct.Struct("<I")
#: bytes of one entry: due_us, seq (signed), pub_hash, pub_seq (unsigned), 8 bytes each
_ENTRY_SIZE: Final = 32
_U64: Final = 2**64 - 1
#: zstd level: the entries are a few tens of MB at most, written every few seconds
_LEVEL: Final = 3


def checkpoint_name(instance: str) -> str:
    """``NAME.delayed.ack``, in the journal directory beside ``NAME.queues.ack``."""
    return f"{instance}.delayed.ack"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used (the reason; start-up reads the whole log)."""


@dataclass(frozen=True, slots=True)
class Covered:
    """The last log record a checkpoint covers: its seq, and who wrote it when (its
    identity, to tell whether the log at start-up is the one the file was written for)."""

    seq: int
    pub_hash: int
    pub_seq: int
    timestamp_us: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The pending entries as of :attr:`covered`, and how many each topic had."""

    covered: Covered
    entries: DueEntries
    by_topic: Mapping[str, int] = field(default_factory=dict)


def encode(
    covered: Covered, entries: DueEntries, by_topic: Mapping[str, int] | None = None
) -> bytes:
    """The file's bytes: ``entries`` (in ``(due_us, seq)`` order, as
    :meth:`DueIndex.entries` and :meth:`DueEntries.of` give them) as of ``covered``, and
    the pending count per topic."""
    head = orjson.dumps(
        {
            "covered": {
                "seq": covered.seq,
                "pub_hash": covered.pub_hash,
                "pub_seq": covered.pub_seq,
                "timestamp_us": covered.timestamp_us,
            },
            "count": len(entries),
            "by_topic": dict(sorted((by_topic or {}).items())),
        }
    )
    frame = zstandard.ZstdCompressor(level=_LEVEL).compress(_interleave(entries))
    body = b"".join((_HEAD.pack(MAGIC, VERSION, len(head)), head, frame))
    return body + _CRC.pack(google_crc32c.value(body))


def decode(data: bytes) -> Checkpoint:
    """Parse a checkpoint file.

    Raises:
        CheckpointError: not a whole file this version wrote (why: truncated, another
            kind of file, another version, a CRC mismatch, or contents that do not
            add up).
    """
    if len(data) < _HEAD.size + _CRC.size:
        raise CheckpointError(f"truncated: {len(data)} bytes, shorter than any checkpoint")
    magic, version, head_len = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise CheckpointError(f"not a delayed-delivery checkpoint (magic {magic!r})")
    if version != VERSION:
        raise CheckpointError(f"version {version}; this broker reads version {VERSION}")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if google_crc32c.value(data[: -_CRC.size]) != crc:
        raise CheckpointError("CRC mismatch: torn or damaged")
    start = _HEAD.size + head_len
    if start > len(data) - _CRC.size:
        raise CheckpointError("malformed: the JSON part runs past the end")
    covered, count, by_topic = _head(data[_HEAD.size : start])
    entries = _entries(data[start : -_CRC.size], count)
    if count and max(entries.seq) > covered.seq:
        raise CheckpointError("malformed: an entry's seq is past the covered record")
    return Checkpoint(covered, entries, by_topic)


def _head(raw: bytes) -> tuple[Covered, int, dict[str, int]]:
    """The JSON part: the covered record, the entry count, the counts per topic."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CheckpointError(f"malformed: the JSON part is not JSON: {exc}") from None
    covered = obj.get("covered") if isinstance(obj, dict) else None
    names = ("seq", "pub_hash", "pub_seq", "timestamp_us")
    if (
        not isinstance(covered, dict)
        or sorted(covered) != sorted(names)
        or not all(_u64(covered[k]) for k in names)
    ):
        raise CheckpointError("malformed: no covered record")
    count, by_topic = obj.get("count"), obj.get("by_topic")
    if not _u64(count):
        raise CheckpointError("malformed: no entry count")
    if not isinstance(by_topic, dict) or not all(_u64(v) for v in by_topic.values()):
        raise CheckpointError("malformed: counts per topic")
    return Covered(*(covered[k] for k in names)), count, by_topic


def _entries(frame: bytes, count: int) -> DueEntries:
    """The entries' zstd frame, checked to hold ``count`` entries in order."""
    size = count * _ENTRY_SIZE
    try:
        declared = zstandard.frame_content_size(frame)
        if declared != size:
            raise CheckpointError(f"malformed: the entries hold {declared} bytes, not {size}")
        raw = zstandard.ZstdDecompressor().decompress(frame, max_output_size=size)
    except zstandard.ZstdError as exc:
        raise CheckpointError(f"malformed: the entries: {exc}") from None
    if len(raw) != size:
        raise CheckpointError(f"malformed: the entries hold {len(raw)} bytes, not {size}")
    entries = _deinterleave(raw)
    due, seq = entries.due_us, entries.seq
    keys = zip(due, seq, strict=True)
    if not all(map(lt, keys, zip(due[1:], seq[1:], strict=True))):
        raise CheckpointError("malformed: the entries are not in (due_us, seq) order")
    return entries


def _u64(value: object) -> bool:
    return type(value) is int and 0 <= value <= _U64


def _interleave(entries: DueEntries) -> bytes:
    """The columns as rows of four little-endian 64-bit values (copies in C)."""
    out = bytearray(len(entries) * _ENTRY_SIZE)
    signed, unsigned = memoryview(out).cast("q"), memoryview(out).cast("Q")
    signed[0::4] = memoryview(entries.due_us)
    signed[1::4] = memoryview(entries.seq)
    unsigned[2::4] = memoryview(entries.pub_hash)
    unsigned[3::4] = memoryview(entries.pub_seq)
    if sys.byteorder == "big":
        swapped = array("Q", out)
        swapped.byteswap()
        return swapped.tobytes()
    return bytes(out)


def _deinterleave(raw: bytes) -> DueEntries:
    """Rows of four little-endian 64-bit values as the four columns."""
    if sys.byteorder == "big":
        swapped = array("Q", raw)
        swapped.byteswap()
        raw = swapped.tobytes()
    signed, unsigned = memoryview(raw).cast("q"), memoryview(raw).cast("Q")
    cols = (signed[0::4], signed[1::4], unsigned[2::4], unsigned[3::4])
    due, seq, pub_hash, pub_seq = (array(c.format, c.tobytes()) for c in cols)
    return DueEntries(due, seq, pub_hash, pub_seq)
