"""The SOW file format: a header, then an append-only list of puts and deletes (sans-I/O).

A persistent SOW topic keeps one file (server/sow/filestore.py writes it). For topics
recorded in the transaction log the file is a *checkpoint*: it holds only changes whose
log records are durable, each with its log sequence, so after a crash the state is the
file's valid prefix plus the log after that prefix's last sequence; for other topics it is
the only copy. A change whose length runs past the end, whose CRC fails or whose fields do
not add up ends the readable part: :func:`read_changes` reports where and why, and the
owner truncates the file there. See docs/sow.md "Durability and recovery" for the layout.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import google_crc32c

from spool.server import speedups
from spool.server.ports import SowRecord

__all__ = [
    "CHANGE_DELETE",
    "CHANGE_PUT",
    "HEADER_FIXED",
    "MAGIC",
    "VERSION",
    "ChangeRecord",
    "Header",
    "SowDamage",
    "decode_header",
    "encode_delete",
    "encode_header",
    "encode_put",
    "encode_puts",
    "live_changes",
    "put_size",
    "read_changes",
    "walk_changes",
]

MAGIC: Final = b"SPOOLSOW"
VERSION: Final = 1
CHANGE_PUT: Final = 1
CHANGE_DELETE: Final = 2

_HEAD: Final = struct.Struct("<8sHHQqHH")
HEADER_FIXED: Final = _HEAD.size  # 32
_PUT: Final = struct.Struct("<IBBHQqQQqI")
_DEL: Final = struct.Struct("<IBBHQ")
_COMMON: Final = struct.Struct("<IBBHQ")
_U32: Final = struct.Struct("<I")
_CRC_RESIDUE: Final = 0x48674BC7
_crc = google_crc32c.value


@dataclass(frozen=True, slots=True)
class Header:
    """What a SOW file says about itself."""

    topic: str
    keys: tuple[str, ...]
    base_seq: int
    written_us: int
    size: int


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """One change read back from a file (``body`` is None for a delete)."""

    op: int
    key: str
    seq: int
    timestamp_us: int
    pub_hash: int
    pub_seq: int
    expires_us: int
    body: bytes | None
    size: int


@dataclass(frozen=True, slots=True)
class SowDamage:
    """Where the readable part of a file ends and why (``torn change`` at the tail after
    a crash; anything else is damage inside the file)."""

    offset: int
    reason: str


def encode_header(
    topic: str, keys: tuple[str, ...], base_seq: int, written_us: int | None = None
) -> bytes:
    """The header of a new (or compacted) file."""
    tb = topic.encode()
    kb = ",".join(keys).encode()
    data = (
        _HEAD.pack(
            MAGIC,
            VERSION,
            0,
            base_seq,
            written_us if written_us is not None else int(time.time() * 1e6),
            len(tb),
            len(kb),
        )
        + tb
        + kb
    )
    return data + _U32.pack(_crc(data))


def decode_header(buf: bytes) -> Header | str:
    """The header at the start of ``buf``, or the reason it is not one."""
    if len(buf) < HEADER_FIXED + 4:
        return "short header"
    magic, version, _flags, base_seq, written_us, tl, kl = _HEAD.unpack_from(buf, 0)
    if magic != MAGIC:
        return "bad magic"
    if version != VERSION:
        return f"bad version {version}"
    end = HEADER_FIXED + tl + kl
    if len(buf) < end + 4:
        return "short header"
    if _crc(buf[: end + 4]) != _CRC_RESIDUE:
        return "header crc"
    try:
        topic = buf[HEADER_FIXED : HEADER_FIXED + tl].decode()
        keys_text = buf[HEADER_FIXED + tl : end].decode()
    except UnicodeDecodeError:
        return "header utf-8"
    keys = tuple(keys_text.split(",")) if keys_text else ()
    return Header(topic, keys, base_seq, written_us, end + 4)


def put_size(key: bytes, body: bytes) -> int:
    """Bytes a put of this key and body takes in the file."""
    return _PUT.size + len(key) + len(body) + 4


def encode_put(rec: SowRecord) -> bytes:
    """A put change of ``rec``."""
    kb = rec.key.encode()
    body = rec.body
    data = (
        _PUT.pack(
            _PUT.size + len(kb) + len(body) + 4,
            CHANGE_PUT,
            0,
            len(kb),
            rec.seq,
            rec.timestamp_us,
            rec.pub_hash,
            rec.pub_seq,
            rec.expires_us,
            len(body),
        )
        + kb
        + body
    )
    return data + _U32.pack(_crc(data))


def encode_delete(key: str, seq: int) -> bytes:
    """A delete change of ``key``."""
    kb = key.encode()
    data = _DEL.pack(_DEL.size + len(kb) + 4, CHANGE_DELETE, 0, len(kb), seq) + kb
    return data + _U32.pack(_crc(data))


def read_changes(buf: bytes, pos: int) -> Iterator[ChangeRecord | SowDamage]:
    """The changes from ``pos`` to the end of ``buf``; a :class:`SowDamage` ends the walk
    where the readable part ends (nothing after it is trusted)."""
    put = _PUT.unpack_from
    for item in walk_changes(buf, pos):
        if type(item) is SowDamage:
            yield item
            return
        at, length, op, key, seq = item  # type: ignore[misc]
        if op == CHANGE_DELETE:
            yield ChangeRecord(op, key, seq, 0, 0, 0, 0, None, length)
        else:
            _l, _o, _p, kl, _s, ts, ph, ps, exp, bl = put(buf, at)
            start = at + _PUT.size + kl
            yield ChangeRecord(op, key, seq, ts, ph, ps, exp, buf[start : start + bl], length)


#: one change found by :func:`walk_changes`: (offset, length, op, key, seq)
Found = tuple[int, int, int, str, int]


def walk_changes(buf: bytes, pos: int) -> Iterator[Found | SowDamage]:
    """Where the changes from ``pos`` are, checked (length, op, CRC, UTF-8 key, field
    sizes) but not decoded beyond the key; a :class:`SowDamage` ends the walk.

    The one validation of the format: :func:`read_changes` decodes what it finds, and a
    compaction copies the live changes' bytes as they are (no object per change, no
    re-encoding: the compaction was a fifth of a SOW topic's CPU under updates).
    """
    end = len(buf)
    unpack = _COMMON.unpack_from
    body_len = _U32.unpack_from
    crc = _crc
    put_fixed = _PUT.size
    del_fixed = _DEL.size
    while pos < end:
        if end - pos < _COMMON.size:
            yield SowDamage(pos, "torn change")
            return
        length, op, _pad, kl, seq = unpack(buf, pos)
        if length == 0:
            yield SowDamage(pos, "zero length")
            return
        if pos + length > end:
            yield SowDamage(pos, "torn change")
            return
        if op == CHANGE_PUT:
            fixed = put_fixed
        elif op == CHANGE_DELETE:
            fixed = del_fixed
        else:
            yield SowDamage(pos, "bad op")
            return
        if length < fixed + kl + 4 or crc(buf[pos : pos + length]) != _CRC_RESIDUE:
            yield SowDamage(pos, "crc mismatch" if length >= fixed + kl + 4 else "bad length")
            return
        try:
            key = buf[pos + fixed : pos + fixed + kl].decode()
        except UnicodeDecodeError:
            yield SowDamage(pos, "bad utf-8")
            return
        extra = body_len(buf, pos + fixed - 4)[0] if op == CHANGE_PUT else 0
        if length != fixed + kl + extra + 4:
            yield SowDamage(pos, "length mismatch")
            return
        yield pos, length, op, key, seq
        pos += length


#: what :func:`live_changes` finds: live key -> (offset, length) of its last put, the
#: highest sequence, and where the readable part ends (None: at the end)
LiveScan = tuple[dict[str, tuple[int, int]], int, SowDamage | None]


def encode_puts_py(records: list[SowRecord]) -> bytes:
    """The put changes of ``records``, concatenated (the SOW writer's batch).

    This is the pure-Python implementation and the oracle of the compiled one
    (``_fileformat_c.pyx``, :mod:`spool.server.speedups`); :data:`encode_puts` is the one
    selected.
    """
    return b"".join(map(encode_put, records))


def live_changes_py(buf: bytes, pos: int, base_seq: int) -> LiveScan:
    """Where the live puts of the changes from ``pos`` are (a compaction copies them as
    they are), the highest sequence (``base_seq`` at least) and the damage that ends the
    readable part, if any.

    This is the pure-Python implementation and the oracle of the compiled one
    (``_fileformat_c.pyx``); :data:`live_changes` is the one selected.
    """
    live: dict[str, tuple[int, int]] = {}
    top = base_seq
    for found in walk_changes(buf, pos):
        if type(found) is SowDamage:
            return live, top, found
        at, length, op, key, seq = found  # type: ignore[misc]
        if op == CHANGE_PUT:
            live[key] = (at, length)
        else:
            live.pop(key, None)
        if seq > top:
            top = seq
    return live, top, None


def _encode_puts_c(records: list[SowRecord]) -> bytes:
    assert _encode_puts_compiled is not None  # selected only when it was built
    return _encode_puts_compiled(records, encode_puts_py)


def _live_changes_c(buf: bytes, pos: int, base_seq: int) -> LiveScan:
    assert _live_changes_compiled is not None
    live, top, damage = _live_changes_compiled(buf, pos, base_seq)
    return live, top, (SowDamage(*damage) if damage is not None else None)


try:
    from spool.server.sow._fileformat_c import encode_puts as _encode_puts_compiled
    from spool.server.sow._fileformat_c import live_changes as _live_changes_compiled
except ImportError:  # not built: speedups.status() says why
    _encode_puts_compiled = None  # type: ignore[assignment]
    _live_changes_compiled = None  # type: ignore[assignment]

_compiled = speedups.ENABLED and _encode_puts_compiled is not None
encode_puts = _encode_puts_c if _compiled else encode_puts_py
live_changes = _live_changes_c if _compiled else live_changes_py
