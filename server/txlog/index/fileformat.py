"""The index file: the bytes of ``NAME.<base20>.index`` and their codec (no I/O).

This module is the only definition of the layout in code; :mod:`.builder` produces
it and :mod:`.sealed` reads it. Both forms share a 32-byte header (magic
``b"SPOOLIDX"``, version, form, block size, base seq, header CRC), little-endian. The
*open* form (the active journal) is block entries, each followed by its publisher ranges
and its own CRC, appended after the journal bytes they describe were fsynced (the index
is not fsynced: a torn or stale entry fails a CRC, and recovery scans from there). The
*sealed* form (written once, read through ``mmap``) is the block table, the publisher
ranges and summaries, sorted, and a footer with a CRC of the whole file. See
docs/transaction-log.md "Index file layout" for every field.

Thread-safety: pure functions over bytes and immutable values; safe from any thread.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

import google_crc32c

from spool.server.txlog.index.answers import BLOCK_BYTES

__all__ = [
    "BLOCK",
    "FOOTER_SIZE",
    "HEADER",
    "PUB",
    "RANGE",
    "BlockRow",
    "Footer",
    "JournalFacts",
    "OpenIndexEntry",
    "PubRow",
    "RangeRow",
    "encode_block_entry",
    "encode_open_header",
    "encode_sealed",
    "parse_open_index",
    "parse_sealed",
]

MAGIC: Final = b"SPOOLIDX"
VERSION: Final = 1
FORM_OPEN: Final = 1
FORM_SEALED: Final = 2
FOOTER_MAGIC: Final = 0x58495053

HEADER: Final = struct.Struct("<8sBBHIQI4x")  # 32
BLOCK: Final = struct.Struct("<QQIIqIIHHI")  # 48
RANGE: Final = struct.Struct("<QQQQII")  # 40
PUB: Final = struct.Struct("<QQQQQ")  # 40
FOOTER: Final = struct.Struct("<QQQQqqqQQQQIIIII")  # 108, then the file CRC
FOOTER_SIZE: Final = FOOTER.size + 4
_U32: Final = struct.Struct("<I")

#: ``(first_seq, offset, length, count, ts_max, data_crc, last_rel)`` of one block
BlockRow = tuple[int, int, int, int, int, int, int]
#: ``(pub_hash, first_pub_seq, last_pub_seq, last_seq, block, count)``
RangeRow = tuple[int, int, int, int, int, int]
#: ``(pub_hash, min_pub_seq, max_pub_seq, last_seq, count)``
PubRow = tuple[int, int, int, int, int]

_extend = google_crc32c.extend
_value = google_crc32c.value
_ZERO_CRC: Final = b"\0\0\0\0"


class JournalFacts(NamedTuple):
    """What a sealed index's footer says about its journal (its first/last facts)."""

    records: int
    data_len: int
    first_seq: int
    last_seq: int
    first_ts: int
    last_ts: int
    ts_max: int
    first_pub_hash: int
    first_pub_seq: int
    last_pub_hash: int
    last_pub_seq: int


class Footer(NamedTuple):
    """A validated sealed footer: the journal's facts and the sizes of the tables."""

    records: int
    data_len: int
    first_seq: int
    last_seq: int
    first_ts: int
    last_ts: int
    ts_max: int
    first_pub_hash: int
    first_pub_seq: int
    last_pub_hash: int
    last_pub_seq: int
    nblocks: int
    nranges: int
    npubs: int

    @property
    def blocks_offset(self) -> int:
        """Where the block table starts."""
        return HEADER.size

    @property
    def ranges_offset(self) -> int:
        """Where the range table starts."""
        return HEADER.size + self.nblocks * BLOCK.size

    @property
    def pubs_offset(self) -> int:
        """Where the publisher summaries start."""
        return self.ranges_offset + self.nranges * RANGE.size

    @property
    def file_size(self) -> int:
        """The size the whole file must have."""
        return self.pubs_offset + self.npubs * PUB.size + FOOTER_SIZE


class OpenIndexEntry(NamedTuple):
    """One verified block entry of an open-form index."""

    first_seq: int
    offset: int
    length: int
    records: int
    ts_max: int
    data_crc: int
    last_rel: int
    ranges: list[tuple[int, ...]]


# -- header -------------------------------------------------------------------------------


def encode_header(form: int, base_seq: int, block_bytes: int) -> bytes:
    """The 32-byte header of either form."""
    raw = HEADER.pack(MAGIC, VERSION, form, 0, block_bytes, base_seq, 0)
    return HEADER.pack(MAGIC, VERSION, form, 0, block_bytes, base_seq, _value(raw[:24]))


def encode_open_header(base_seq: int, block_bytes: int = BLOCK_BYTES) -> bytes:
    """The 32-byte header of an open-form index (all a new journal's index holds)."""
    return encode_header(FORM_OPEN, base_seq, block_bytes)


def parse_header(data: bytes | mmap.mmap) -> tuple[int, int, int] | None:
    """``(form, block_bytes, base_seq)`` of a valid header, else None."""
    if len(data) < HEADER.size:
        return None
    magic, version, form, _, block_bytes, base, crc = HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or _value(bytes(data[:24])) != crc:
        return None
    return form, block_bytes, base


# -- open form ----------------------------------------------------------------------------


def encode_block_entry(
    first_seq: int,
    offset: int,
    length: int,
    count: int,
    ts_max: int,
    data_crc: int,
    last_rel: int,
    ranges: list[bytes],
) -> bytes:
    """One open-form block entry followed by its packed :data:`RANGE` entries."""
    fields = (first_seq, offset, length, count, ts_max, data_crc, last_rel, len(ranges), 0)
    tail = b"".join(ranges)
    crc = _extend(_value(BLOCK.pack(*fields, 0)), tail)
    return BLOCK.pack(*fields, crc) + tail


def parse_open_index(data: bytes, base_seq: int) -> tuple[list[OpenIndexEntry], str | None]:
    """The consistent prefix of an open-form index.

    Entries must pass their CRC and follow each other (seq and offset contiguous from the
    journal's start); parsing stops at the first that does not.

    Returns:
        ``(entries, problem)``: ``problem`` is None when every byte parsed, else why the
        rest was ignored.
    """
    head = parse_header(data)
    if head is None:
        return [], "bad header"
    form, _, base = head
    if form != FORM_OPEN:
        return [], "not an open index"
    if base != base_seq:
        return [], "base mismatch"
    pos = HEADER.size
    out: list[OpenIndexEntry] = []
    seq = base_seq
    offset = 0
    size = len(data)
    unpack = BLOCK.unpack_from
    entry_size = BLOCK.size
    while pos < size:
        if size - pos < entry_size:
            return out, "torn entry"
        first, off, length, cnt, ts_max, dcrc, last_rel, npub, _r, crc = unpack(data, pos)
        end = pos + entry_size + npub * RANGE.size
        if end > size:
            return out, "torn entry"
        tail = data[pos + entry_size : end]
        if _extend(_value(data[pos : pos + entry_size - 4] + _ZERO_CRC), tail) != crc:
            return out, "entry crc mismatch"
        if first != seq or off != offset or cnt == 0 or last_rel >= length:
            return out, "entry out of sequence"
        ranges = list(RANGE.iter_unpack(tail)) if npub else []
        out.append(OpenIndexEntry(first, off, length, cnt, ts_max, dcrc, last_rel, ranges))
        seq += cnt
        offset += length
        pos = end
    return out, None


# -- sealed form --------------------------------------------------------------------------


def encode_sealed(
    base_seq: int,
    block_bytes: int,
    blocks: Sequence[BlockRow],
    ranges: Sequence[RangeRow],
    pubs: Sequence[PubRow],
    facts: JournalFacts,
) -> bytes:
    """The whole sealed-form file.

    Args:
        base_seq: the journal's base sequence.
        block_bytes: the block size the index was cut with.
        blocks: every block, in order.
        ranges: every publisher range, sorted by ``(pub_hash, first_pub_seq)``.
        pubs: every publisher summary, sorted by ``pub_hash``.
        facts: the journal's first/last facts for the footer.
    """
    parts = [encode_header(FORM_SEALED, base_seq, block_bytes)]
    pack = BLOCK.pack
    parts.extend(pack(f, o, ln, c, ts, crc, rel, 0, 0, 0) for f, o, ln, c, ts, crc, rel in blocks)
    parts.extend(RANGE.pack(*row) for row in ranges)
    parts.extend(PUB.pack(*row) for row in pubs)
    parts.append(FOOTER.pack(*facts, len(blocks), len(ranges), len(pubs), FOOTER_MAGIC, 0))
    body = b"".join(parts)
    return body + _U32.pack(_value(body))


def parse_sealed(buf: bytes | mmap.mmap, base_seq: int) -> Footer | None:
    """The footer of an intact sealed index of journal ``base_seq``, else None.

    Checks the header (form, base), the whole-file CRC, the footer's magic and base, and
    that the table sizes it declares add up to the file's size, so a reader can index the
    tables without bounds checks.
    """
    size = len(buf)
    head = parse_header(buf)
    if head is None or head[0] != FORM_SEALED or head[2] != base_seq:
        return None
    if size < HEADER.size + FOOTER_SIZE:
        return None
    if _value(bytes(buf[: size - 4])) != _U32.unpack_from(buf, size - 4)[0]:
        return None
    *fields, magic, _reserved = FOOTER.unpack_from(buf, size - FOOTER_SIZE)
    footer = Footer(*fields)
    if magic != FOOTER_MAGIC or footer.file_size != size or footer.first_seq != base_seq:
        return None
    return footer
