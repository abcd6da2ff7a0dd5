"""The journal record codec: bytes <-> :class:`Record`, with no I/O.

This is the one definition of the on-disk record. The broker, the ``spool journal`` tools
and the PySpark pipeline all read journals through it, so it imports only the standard
library and ``google_crc32c`` (hardware CRC-32C) and never touches a file. A record is a
56-byte little-endian header (length, format ``0xA1``, kind, flags, seq, time, publisher
bookmark, field lengths), its variable fields and body, and a CRC-32C of everything before
it; a zero length marks the end of data (preallocated zeros). The fixed lengths are
checked against ``length`` so a corrupt length cannot run a reader into the next record,
and checking a record is one CRC compared with :data:`CRC_RESIDUE`. Reasons for bad bytes
are stable strings. See docs/transaction-log.md "Record format" for every field.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import google_crc32c

from spool.server import speedups
from spool.server.txlog.errors import CorruptRecord, FieldOutOfRange, RecordTooLarge
from spool.server.txlog.format.record import (
    DUE_KEY,
    FLAG_LATE,
    LOST_KEY,
    Record,
    RecordKind,
    late_key,
)

__all__ = [
    "CRC_RESIDUE",
    "CRC_SIZE",
    "FORMAT",
    "HEADER",
    "HEADER_SIZE",
    "MAX_RECORD",
    "MIN_RECORD",
    "ScanResult",
    "Special",
    "build_record",
    "check_at",
    "decode",
    "decode_records",
    "decode_text",
    "encode",
    "encode_record",
    "iter_records",
    "make_record",
    "record_size",
    "scan",
    "skip_to",
    "special_fields",
]

FORMAT: Final = 0xA1
HEADER: Final = struct.Struct("<IBBHQqQQHBBHHI")
HEADER_SIZE: Final = HEADER.size  # 52
CRC_SIZE: Final = 4
MIN_RECORD: Final = HEADER_SIZE + CRC_SIZE
MAX_RECORD: Final = 0xFFFFFFFF
#: CRC-32C of any record including its own trailing CRC (the polynomial's residue).
CRC_RESIDUE: Final = 0x48674BC7

_U32: Final = struct.Struct("<I")
_KINDS: Final[dict[int, RecordKind]] = {k.value: k for k in RecordKind}
_LOST: Final = int(RecordKind.LOST)
_DUE: Final = int(RecordKind.DUE)
_crc = google_crc32c.value

# Encoded strings repeat (a few topics, one message type): cache their bytes. Bounded so a
# stream of unique topics cannot grow it without limit.
_STR_CACHE_MAX: Final = 4096
_enc_cache: dict[str, bytes] = {}
_dec_cache: dict[bytes, str] = {}


def _utf8(text: str) -> bytes:
    data = _enc_cache.get(text)
    if data is None:
        data = text.encode()
        if len(_enc_cache) < _STR_CACHE_MAX:
            _enc_cache[text] = data
    return data


def decode_text(data: bytes) -> str:
    text = _dec_cache.get(data)
    if text is None:
        text = data.decode()
        if len(_dec_cache) < _STR_CACHE_MAX:
            _dec_cache[data] = text
    return text


_SETTERS: Final = tuple(getattr(Record, name).__set__ for name in Record.__slots__)
_new = object.__new__


def make_record(
    seq: int,
    timestamp_us: int,
    pub_hash: int,
    pub_seq: int,
    topic: str,
    message_type: str,
    kind: RecordKind,
    path: tuple[str, ...],
    flags: int,
    body: bytes,
    corr_id: str,
    sow_key: str,
) -> Record:
    """Build a :class:`Record` about twice as fast as its constructor.

    ``Record`` is a frozen slotted dataclass whose ``__init__`` goes through
    ``object.__setattr__`` per field; decoding builds millions of them, so this sets the
    slots through their descriptors directly. The result is an ordinary ``Record``
    (equal, hashable, immutable); the arguments are the fields in declaration order.
    """
    rec = _new(Record)
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11 = _SETTERS
    s0(rec, seq)
    s1(rec, timestamp_us)
    s2(rec, pub_hash)
    s3(rec, pub_seq)
    s4(rec, topic)
    s5(rec, message_type)
    s6(rec, kind)
    s7(rec, path)
    s8(rec, flags)
    s9(rec, body)
    s10(rec, corr_id)
    s11(rec, sow_key)
    return rec


def encode(
    seq: int,
    timestamp_us: int,
    pub_hash: int,
    pub_seq: int,
    topic: str,
    message_type: str,
    kind: int,
    path: tuple[str, ...],
    flags: int,
    body: bytes,
    corr_id: str = "",
    sow_key: str = "",
) -> bytes:
    """Encode one record from its fields (the append hot path: no Record needed).

    Returns:
        The complete record bytes, CRC included.

    Raises:
        RecordTooLarge: a string or the body exceeds its length field.
        FieldOutOfRange: an integer does not fit (negative, or above its width).
    """
    tb = _enc_cache.get(topic) or _utf8(topic)
    mb = _enc_cache.get(message_type) or _utf8(message_type)
    if path or corr_id or sow_key:
        return _encode_full(
            seq, timestamp_us, pub_hash, pub_seq, tb, mb, kind, path, flags, body, corr_id, sow_key
        )
    tl = len(tb)
    ml = len(mb)
    bl = len(body)
    length = MIN_RECORD + tl + ml + bl
    try:
        head = HEADER.pack(
            length, FORMAT, kind, flags, seq, timestamp_us, pub_hash, pub_seq, tl, ml, 0, 0, 0, bl
        )
    except struct.error:
        raise _range_error(
            length, kind, flags, seq, timestamp_us, pub_hash, pub_seq, tb, mb, b"", b""
        ) from None
    data = b"".join((head, tb, mb, body))
    return data + _U32.pack(_crc(data))


def encode_run_py(
    first_seq: int,
    timestamp_us: int,
    pub_hash: int,
    pub_seqs: list[int],
    topic: str,
    message_type: str,
    bodies: list[bytes],
    corr_ids: list[str] | None = None,
    sow_keys: list[str] | None = None,
    *,
    kind: int = RecordKind.PUBLISH,
    path: tuple[str, ...] = (),
) -> list[bytes]:
    """Encode consecutive records of one publisher, topic, kind and path, one timestamp.

    The batched form of :func:`encode`: the topic, message type and path are encoded once
    and the per-record work is one header pack, one concatenation and one CRC (a SOW key
    per record included, when ``sow_keys`` is given; a replicated run's path too). Record
    ``i`` gets seq ``first_seq + i``. With correlation ids, each record is a whole
    :func:`encode` instead.

    This is the pure-Python implementation and the oracle of the compiled one
    (``_codec_c.pyx``, :mod:`spool.server.speedups`); :data:`encode_run` is the one selected.

    Returns:
        The encoded records, from the first; fewer than given when one cannot be encoded
        (:func:`encode` of that record raises the reason).

    Raises:
        ValueError: ``pub_seqs`` and ``bodies`` differ in length (plain records).
    """
    names = [_utf8(name) for name in path]
    if corr_ids or len(names) > 0xFF or any(len(nb) > 0xFF for nb in names):
        return _encode_each(
            first_seq, timestamp_us, pub_hash, pub_seqs, topic, message_type, bodies,
            corr_ids, sow_keys, kind, path,
        )  # fmt: skip
    tb = _enc_cache.get(topic) or _utf8(topic)
    mb = _enc_cache.get(message_type) or _utf8(message_type)
    tl = len(tb)
    ml = len(mb)
    pb = b"".join(bytes((len(nb),)) + nb for nb in names)
    fixed = MIN_RECORD + tl + ml + len(pb)
    strings = tb + mb + pb
    npath = len(path)
    pack = HEADER.pack
    crc = _crc
    u32 = _U32.pack
    kind = int(kind)
    out: list[bytes] = []
    keep = out.append
    seq = first_seq
    try:
        if sow_keys is None:
            for ps, body in zip(pub_seqs, bodies, strict=True):
                bl = len(body)
                data = pack(fixed + bl, FORMAT, kind, 0, seq, timestamp_us, pub_hash, ps, tl, ml,
                            npath, 0, 0, bl) + strings + body  # fmt: skip
                keep(data + u32(crc(data)))
                seq += 1
        else:
            for ps, body, key in zip(pub_seqs, bodies, sow_keys, strict=True):
                bl = len(body)
                kb = key.encode()
                data = b"".join((pack(fixed + len(kb) + bl, FORMAT, kind, 0, seq, timestamp_us,
                                      pub_hash, ps, tl, ml, npath, 0, len(kb), bl),
                                 strings, kb, body))  # fmt: skip
                keep(data + u32(crc(data)))
                seq += 1
    except struct.error:
        pass  # that record does not fit: the caller gets the ones before it
    return out


def _encode_each(
    first_seq: int,
    timestamp_us: int,
    pub_hash: int,
    pub_seqs: list[int],
    topic: str,
    message_type: str,
    bodies: list[bytes],
    corr_ids: list[str] | None,
    sow_keys: list[str] | None,
    kind: int,
    path: tuple[str, ...],
) -> list[bytes]:
    """:func:`encode_run` of records with correlation ids (or a path too long to batch),
    one at a time."""
    out: list[bytes] = []
    for i, body in enumerate(bodies):
        fields = (
            first_seq + i, timestamp_us, pub_hash, pub_seqs[i], topic, message_type, kind,
            path, 0, body, corr_ids[i] if corr_ids else "", sow_keys[i] if sow_keys else "",
        )  # fmt: skip
        try:
            out.append(encode(*fields))
        except Exception:
            break  # that record cannot be encoded: the caller gets the ones before it
    return out


def _encode_run_c(
    first_seq: int,
    timestamp_us: int,
    pub_hash: int,
    pub_seqs: list[int],
    topic: str,
    message_type: str,
    bodies: list[bytes],
    corr_ids: list[str] | None = None,
    sow_keys: list[str] | None = None,
    *,
    kind: int = RecordKind.PUBLISH,
    path: tuple[str, ...] = (),
) -> list[bytes]:
    """:func:`encode_run_py` with the publishes' loop compiled (``_codec_c.pyx``), a
    replicated run's path included (a destination records every replicated message with
    one: in Python that loop was a seventh of its CPU); other kinds and records with
    correlation ids or SOW keys take the Python definition."""
    if corr_ids or sow_keys or kind != RecordKind.PUBLISH:
        return encode_run_py(
            first_seq, timestamp_us, pub_hash, pub_seqs, topic, message_type, bodies,
            corr_ids, sow_keys, kind=kind, path=path,
        )  # fmt: skip
    assert _encode_plain_c is not None  # selected only when it was built
    if not path:
        return _encode_plain_c(first_seq, timestamp_us, pub_hash, pub_seqs, topic,
                               message_type, bodies)  # fmt: skip
    names = [_utf8(name) for name in path]
    if len(names) > 0xFF or any(len(nb) > 0xFF for nb in names):
        return encode_run_py(
            first_seq, timestamp_us, pub_hash, pub_seqs, topic, message_type, bodies,
            kind=kind, path=path,
        )  # fmt: skip
    path_bytes = b"".join(bytes((len(nb),)) + nb for nb in names)
    return _encode_plain_c(first_seq, timestamp_us, pub_hash, pub_seqs, topic, message_type,
                           bodies, path_bytes, len(names))  # fmt: skip


try:
    from spool.server.txlog.format._codec_c import encode_run as _encode_plain_c
except ImportError:  # not built: speedups.status() says why
    _encode_plain_c = None  # type: ignore[assignment]

encode_run = _encode_run_c if speedups.ENABLED and _encode_plain_c is not None else encode_run_py


def _encode_full(
    seq: int,
    timestamp_us: int,
    pub_hash: int,
    pub_seq: int,
    tb: bytes,
    mb: bytes,
    kind: int,
    path: tuple[str, ...],
    flags: int,
    body: bytes,
    corr_id: str,
    sow_key: str,
) -> bytes:
    """:func:`encode` for records with a path, a correlation id or a SOW key."""
    cb = corr_id.encode()
    sb = sow_key.encode()
    if len(path) > 0xFF:
        raise RecordTooLarge("path", len(path), 0xFF)
    parts = []
    for name in path:
        nb = _utf8(name)
        if len(nb) > 0xFF:
            raise RecordTooLarge("path name", len(nb), 0xFF)
        parts.append(bytes((len(nb),)))
        parts.append(nb)
    pb = b"".join(parts)
    length = MIN_RECORD + len(tb) + len(mb) + len(pb) + len(cb) + len(sb) + len(body)
    try:
        head = HEADER.pack(
            length, FORMAT, kind, flags, seq, timestamp_us, pub_hash, pub_seq,
            len(tb), len(mb), len(path), len(cb), len(sb), len(body),
        )  # fmt: skip
    except struct.error:
        raise _range_error(
            length, kind, flags, seq, timestamp_us, pub_hash, pub_seq, tb, mb, cb, sb
        ) from None
    data = b"".join((head, tb, mb, pb, cb, sb, body))
    return data + _U32.pack(_crc(data))


def _range_error(
    length: int,
    kind: int,
    flags: int,
    seq: int,
    ts: int,
    pub_hash: int,
    pub_seq: int,
    tb: bytes,
    mb: bytes,
    cb: bytes,
    sb: bytes,
) -> Exception:
    """Name the field that made ``HEADER.pack`` fail (the slow path of a failed encode)."""
    for name, size, limit in (
        ("topic", len(tb), 0xFFFF),
        ("message_type", len(mb), 0xFF),
        ("corr_id", len(cb), 0xFFFF),
        ("sow_key", len(sb), 0xFFFF),
        ("record", length, MAX_RECORD),
    ):
        if size > limit:
            return RecordTooLarge(name, size, limit)
    u64 = 1 << 64
    for name, value, lo, hi in (
        ("kind", kind, 0, 0x100),
        ("flags", flags, 0, 0x10000),
        ("seq", seq, 0, u64),
        ("timestamp_us", ts, -(1 << 63), 1 << 63),
        ("pub_hash", pub_hash, 0, u64),
        ("pub_seq", pub_seq, 0, u64),
    ):
        if not lo <= value < hi:
            return FieldOutOfRange(name, value)
    return FieldOutOfRange("record", length)


def encode_record(record: Record) -> bytes:
    """Encode a :class:`Record` (convenience over :func:`encode`)."""
    return encode(
        record.seq, record.timestamp_us, record.pub_hash, record.pub_seq, record.topic,
        record.message_type, record.kind, record.path, record.flags, record.body,
        record.corr_id, record.sow_key,
    )  # fmt: skip


def record_size(buf: bytes, pos: int = 0) -> int:
    """The ``length`` field of the record at ``pos`` (0 = end of data), without checks."""
    if len(buf) - pos < 4:
        return 0
    size: int = _U32.unpack_from(buf, pos)[0]
    return size


def check_at(buf: bytes, pos: int, limit: int) -> tuple[int, ...]:
    """Validate the record at ``pos`` and return its unpacked header.

    Raises:
        CorruptRecord: the bytes at ``pos`` are not a complete, intact record.
    """
    if limit - pos < HEADER_SIZE:
        raise CorruptRecord(pos, "torn record")
    h = HEADER.unpack_from(buf, pos)
    length = h[0]
    if length < MIN_RECORD:
        raise CorruptRecord(pos, "bad length")
    if h[1] != FORMAT:
        raise CorruptRecord(pos, "bad format")
    if pos + length > limit:
        raise CorruptRecord(pos, "torn record")
    if _crc(buf[pos : pos + length]) != CRC_RESIDUE:
        raise CorruptRecord(pos, "crc mismatch")
    return h


def _fields(
    buf: bytes, pos: int, h: tuple[int, ...]
) -> tuple[str, str, RecordKind, tuple[str, ...], str, str, bytes]:
    """The variable fields of the record of an already checked header ``h`` at ``pos``
    (topic, message type, kind, path, correlation id, SOW key, body), every check of
    :func:`build_record` applied in its order."""
    length, _, kind, _, _, _, _, _, tl, ml, pc, cl, sl, bl = h
    p = pos + HEADER_SIZE
    try:
        topic = decode_text(buf[p : p + tl])
        p += tl
        mtype = decode_text(buf[p : p + ml])
        p += ml
        path: tuple[str, ...] = ()
        if pc:
            names = []
            for _ in range(pc):
                n = buf[p]
                names.append(decode_text(buf[p + 1 : p + 1 + n]))
                p += 1 + n
            path = tuple(names)
        corr = buf[p : p + cl].decode() if cl else ""
        p += cl
        sow = buf[p : p + sl].decode() if sl else ""
        p += sl
    except UnicodeDecodeError:
        raise CorruptRecord(pos, "bad utf-8") from None
    except IndexError:
        raise CorruptRecord(pos, "length mismatch") from None
    if p + bl + CRC_SIZE != pos + length:
        raise CorruptRecord(pos, "length mismatch")
    rkind = _KINDS.get(kind)
    if rkind is None:
        raise CorruptRecord(pos, "unknown kind")
    return topic, mtype, rkind, path, corr, sow, buf[p : p + bl]


def build_record(buf: bytes, pos: int, h: tuple[int, ...]) -> Record:
    """Build the Record of an already checked header ``h`` at ``pos``."""
    topic, mtype, rkind, path, corr, sow, body = _fields(buf, pos, h)
    return make_record(h[4], h[5], h[6], h[7], topic, mtype, rkind, path, h[3], body, corr, sow)


#: what a batch keeps of a record of the rare shape: its path, correlation id, SOW key
Special = tuple[tuple[str, ...], str, str]


def special_fields(buf: bytes, pos: int, h: tuple[int, ...]) -> tuple[str, bytes, Special]:
    """Topic, body and :data:`Special` fields of the record at ``pos`` (a path, a
    correlation id or a SOW key), with :func:`build_record`'s checks and errors but no
    :class:`Record`: a batch decoder keeps these and builds the record when asked (a
    replicating instance reads back every record that came from elsewhere, each with a
    path, only to route it)."""
    topic, _, _, path, corr, sow, body = _fields(buf, pos, h)
    return topic, body, (path, corr, sow)


def decode(buf: bytes, pos: int = 0, limit: int | None = None) -> tuple[Record, int]:
    """Decode the record at ``pos``.

    Returns:
        ``(record, offset just past it)``.

    Raises:
        CorruptRecord: not a complete, intact record (a zero length is ``bad length``).
    """
    end = len(buf) if limit is None else limit
    h = check_at(buf, pos, end)
    return build_record(buf, pos, h), pos + h[0]


def decode_records(
    buf: bytes,
    pos: int,
    end: int,
    expect_seq: int,
    *,
    max_count: int = 1000,
    max_bytes: int = 1 << 20,
    upto_seq: int | None = None,
) -> tuple[list[Record], int]:
    """Decode consecutive records from ``pos`` (bulk; the replay read path).

    Stops at ``end``, after ``max_count`` records, once ``max_bytes`` of records were
    taken (at least one record is always returned when available), after ``upto_seq``,
    at a zero length (end of data), or before an incomplete record at the end of the
    buffer (the caller reads more, or reports a torn record).

    Args:
        buf: bytes holding whole records from ``pos``.
        pos: offset of the first record.
        end: offset where valid data ends in ``buf``.
        expect_seq: the seq the first record must carry; later ones follow contiguously.
        max_count: most records returned.
        max_bytes: stop once this many record bytes were taken.
        upto_seq: last seq wanted.

    Returns:
        ``(records, offset after the last one)``.

    Raises:
        CorruptRecord: a record fails its checks (a complete record only: a record cut
            by ``end`` is left for the next read).
    """
    out: list[Record] = []
    taken = 0
    last = upto_seq if upto_seq is not None else 1 << 64
    seq = expect_seq
    unpack = HEADER.unpack_from
    crc = _crc
    text = decode_text
    kinds = _KINDS
    make = make_record
    while pos < end and len(out) < max_count and taken < max_bytes and seq <= last:
        if end - pos < HEADER_SIZE:
            break
        h = unpack(buf, pos)
        length, fmt, kind, flags, rseq, ts, ph, ps, tl, ml, pc, cl, sl, bl = h
        if length == 0 or (length >= MIN_RECORD and pos + length > end):
            break  # end of data, or incomplete: the caller decides
        if length < MIN_RECORD or fmt != FORMAT or crc(buf[pos : pos + length]) != CRC_RESIDUE:
            check_at(buf, pos, end)  # raises with the precise reason
        if rseq != seq:
            raise CorruptRecord(pos, "sequence gap")
        rkind = kinds.get(kind)
        if pc or cl or sl or rkind is None or MIN_RECORD + tl + ml + bl != length:
            out.append(build_record(buf, pos, h))  # rare shapes, and the precise errors
        else:
            p = pos + HEADER_SIZE
            q = p + tl
            try:
                topic = text(buf[p:q])
                mtype = text(buf[q : q + ml])
            except UnicodeDecodeError:
                raise CorruptRecord(pos, "bad utf-8") from None
            q += ml
            body = buf[q : q + bl]
            out.append(make(seq, ts, ph, ps, topic, mtype, rkind, (), flags, body, "", ""))
        pos += length
        taken += length
        seq += 1
    return out, pos


def skip_to(buf: bytes, pos: int, end: int, seq_at_pos: int, target: int) -> tuple[int, int]:
    """Walk record lengths from ``pos`` (seq ``seq_at_pos``) to the record ``target``.

    Only lengths are read (the records skipped are not returned, so not checked); the
    walk stops early at the end of the buffer or at a zero/invalid length.

    Returns:
        ``(offset, seq)`` reached: ``seq == target`` unless the buffer ended first.
    """
    seq = seq_at_pos
    while seq < target and end - pos >= HEADER_SIZE:
        length = _U32.unpack_from(buf, pos)[0]
        if length < MIN_RECORD or pos + length > end:
            break
        pos += length
        seq += 1
    return pos, seq


@dataclass(slots=True)
class ScanResult:
    """What :func:`scan` found: one row per valid record, and where/why it stopped.

    Attributes:
        rows: ``(journal offset, length, timestamp_us, pub_hash, pub_seq)`` per record,
            the offset being ``base`` plus the record's position in the buffer;
            ``pub_hash`` is the record's index key (:func:`~spool.server.txlog.format.record.index_key`;
            a placeholder's is ``LOST_KEY``, a due record's ``DUE_KEY``, with the record's
            seq as ``pub_seq``).
        end: position in the buffer just past the last valid record.
        next_seq: the seq the next record must carry.
        reason: ``None`` when the scan stopped cleanly (end of data, or an incomplete
            record at the end of a non-final buffer), ``"end of data"`` at a zero length,
            otherwise the damage reason (see the module docstring).
        need_more: the buffer ends inside a record that may continue in the next read.
    """

    rows: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    end: int = 0
    next_seq: int = 0
    reason: str | None = None
    need_more: bool = False

    @property
    def damaged(self) -> bool:
        """The scan stopped on bytes that are not a valid record (not a clean end)."""
        return self.reason is not None and self.reason != "end of data"

    @property
    def offsets(self) -> list[int]:
        """The journal offset of each valid record."""
        return [r[0] for r in self.rows]


def scan(
    buf: bytes, pos: int, end: int, expect_seq: int, *, final: bool, base: int = 0
) -> ScanResult:
    """Validate records from ``pos`` and collect what an index needs (recovery's loop).

    Every record's CRC, format byte, length arithmetic, kind and sequence are checked;
    strings are not decoded (a record with a valid CRC was written by :func:`encode`).

    Args:
        buf: the bytes read.
        pos: position of the first record in ``buf``.
        end: position where the bytes read end.
        expect_seq: seq the first record must carry.
        final: ``buf`` reaches the end of the file: an incomplete record is a torn tail
            rather than a read boundary.
        base: journal offset of ``buf[0]`` (for the rows' offsets).
    """
    res = ScanResult(end=pos, next_seq=expect_seq)
    add = res.rows.append
    unpack = HEADER.unpack_from
    crc = _crc
    kinds = _KINDS
    seq = expect_seq
    reason: str | None = None
    while True:
        if end - pos < HEADER_SIZE:
            if _data_ends(buf, pos, end, final):
                reason = "end of data"
            elif end > pos:
                if final:
                    reason = "torn record"
                else:
                    res.need_more = True
            break
        length, fmt, kind, _f, rseq, ts, ph, ps, tl, ml, pc, cl, sl, bl = unpack(buf, pos)
        if length == 0:
            reason = "end of data"
            break
        if length < MIN_RECORD or fmt != FORMAT:
            reason = "bad length" if length < MIN_RECORD else "bad format"
            break
        if pos + length > end:
            if final:
                reason = "torn record"
            else:
                res.need_more = True
            break
        if crc(buf[pos : pos + length]) != CRC_RESIDUE:
            reason = "crc mismatch"
            break
        fixed = MIN_RECORD + tl + ml + cl + sl + bl + pc
        if fixed > length or (not pc and fixed != length):
            reason = "length mismatch"
            break
        if kind not in kinds:
            reason = "unknown kind"
            break
        if rseq != seq:
            reason = "sequence gap"
            break
        # a late record is indexed under its late key (server/txlog/format/record.py FLAG_LATE),
        # a placeholder of fenced records under LOST_KEY and a due record under DUE_KEY,
        # each with its own seq
        if kind == _LOST:
            add((base + pos, length, ts, LOST_KEY, rseq))
        elif kind == _DUE:
            add((base + pos, length, ts, DUE_KEY, rseq))
        else:
            add((base + pos, length, ts, late_key(ph) if _f & FLAG_LATE else ph, ps))
        pos += length
        seq += 1
    res.end = pos
    res.next_seq = seq
    res.reason = reason
    return res


def _data_ends(buf: bytes, pos: int, end: int, final: bool) -> bool:
    """Whether the fewer than :data:`HEADER_SIZE` bytes at ``pos`` end the data: a zero
    length field, or (at the end of the file) 1 to 3 zero bytes, the preallocated space
    left after a record that filled its journal to within a length field."""
    if end - pos >= 4:
        return buf[pos : pos + 4] == b"\0\0\0\0"
    return final and end > pos and not any(buf[pos:end])


def iter_records(buf: bytes, expect_seq: int | None = None) -> Iterator[Record]:
    """Every record of a journal's bytes, in order, until the end of data.

    This is the entry point for offline readers (the Spark pipeline, ``spool journal
    dump``). ``expect_seq`` defaults to the first record's own seq.

    Raises:
        CorruptRecord: at the first record that fails its checks.
    """
    pos = 0
    end = len(buf)
    seq = expect_seq
    while end - pos >= 4 and _U32.unpack_from(buf, pos)[0] != 0:
        record, nxt = decode(buf, pos, end)
        if seq is not None and record.seq != seq:
            raise CorruptRecord(pos, "sequence gap")
        seq = record.seq + 1
        yield record
        pos = nxt
