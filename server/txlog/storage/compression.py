"""Compressed journals: written in independent chunks so they stay randomly readable.

:func:`compress_journal` cuts a finished journal into chunks of :data:`CHUNK_BYTES` and
compresses each on its own:

- **zstd** (the default): one zstd frame per chunk, followed by a seek table in the zstd
  *seekable format* (a skippable frame, magic ``0x184D2A5E``, holding per frame its
  compressed and decompressed sizes, then a 9-byte footer: frame count u32, descriptor
  u8, magic ``0x8F92EAB1``). Any ``zstd -d`` still decompresses the file (skippable
  frames are ignored), and a reader finds the chunk of any offset without decompressing
  the others.
- **gzip**: one gzip member per chunk (``gunzip`` concatenates members). gzip has no seek
  table, so the reader walks the members once and remembers their offsets.

:class:`CompressedReader` reads any ``.journal.zst`` / ``.journal.gz``: ours, or one an
operator compressed by hand (a single frame/member: then a read decompresses it whole,
once, and keeps it while it is the most recent chunk used).

Thread-safety: a reader may be used from several threads; its chunk table and cache are
guarded by a lock. Compression runs in a worker thread (never on the event loop).
"""

from __future__ import annotations

import bisect
import functools
import os
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Final

import zstandard

from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.storage.files import Compression

__all__ = ["CHUNK_BYTES", "CompressedReader", "compress_journal"]

CHUNK_BYTES: Final = 256 * 1024
SKIPPABLE_MAGIC: Final = 0x184D2A5E
SEEKABLE_MAGIC: Final = 0x8F92EAB1
_SEEK_FOOTER: Final = struct.Struct("<IBI")  # frames, descriptor, magic
_SEEK_ENTRY: Final = struct.Struct("<II")  # compressed size, decompressed size
_SKIP_HEADER: Final = struct.Struct("<II")  # magic, frame size
_CACHE_CHUNKS: Final = 4


def compress_journal(
    src: Path, dst: Path, method: Compression, *, data_len: int, level: int | None = None
) -> int:
    """Compress the first ``data_len`` bytes of journal ``src`` into ``dst``.

    The output is written to ``dst.tmp``, fsynced and renamed, so ``dst`` either does not
    exist or is complete. The caller fsyncs the directory and removes ``src``.

    Returns:
        The size of ``dst`` in bytes.
    """
    tmp = dst.with_name(dst.name + ".tmp")
    entries: list[tuple[int, int]] = []
    squeeze: Callable[[bytes], bytes]
    if method == "zstd":
        cctx = zstandard.ZstdCompressor(
            level=level or 3, write_content_size=True, write_checksum=True
        )
        squeeze = cctx.compress
    else:
        squeeze = functools.partial(_gzip_member, level=level or 6)

    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        remaining = data_len
        while remaining > 0:
            chunk = fin.read(min(CHUNK_BYTES, remaining))
            if not chunk:
                raise OSError(f"{src} ends before its {data_len} data bytes")
            remaining -= len(chunk)
            comp = squeeze(chunk)
            fout.write(comp)
            entries.append((len(comp), len(chunk)))
        if method == "zstd":
            fout.write(_seek_table(entries))
        fout.flush()
        os.fdatasync(fout.fileno())
        size = fout.tell()
    os.replace(tmp, dst)
    return size


def _gzip_member(chunk: bytes, level: int) -> bytes:
    comp = zlib.compressobj(level, zlib.DEFLATED, 31)  # 31: gzip wrapper, mtime 0
    return comp.compress(chunk) + comp.flush()


def _seek_table(entries: list[tuple[int, int]]) -> bytes:
    body = b"".join(_SEEK_ENTRY.pack(c, d) for c, d in entries)
    body += _SEEK_FOOTER.pack(len(entries), 0, SEEKABLE_MAGIC)
    return _SKIP_HEADER.pack(SKIPPABLE_MAGIC, len(body)) + body


class CompressedReader:
    """Random reads of the raw bytes of a compressed journal."""

    def __init__(self, path: Path, method: Compression) -> None:
        self.path = path
        self.method = method
        self._lock = threading.Lock()
        # raw start offset of each chunk, compressed (start, end) of each chunk
        self._raw: list[int] | None = None
        self._comp: list[tuple[int, int]] = []
        self._size = 0
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._damage: str | None = None

    def size(self) -> int:
        """Raw (decompressed) size in bytes (up to the first undecodable frame/member)."""
        with self._lock:
            self._ensure_table()
            return self._size

    @property
    def damage(self) -> str | None:
        """Why the data ends early at :meth:`size`, when the file is damaged there."""
        with self._lock:
            self._ensure_table()
            return self._damage

    def read(self, offset: int, length: int) -> bytes:
        """Raw bytes ``[offset, offset + length)`` (shorter at the end of the data)."""
        with self._lock:
            self._ensure_table()
            raw = self._raw
            assert raw is not None
            end = min(offset + length, self._size)
            if offset >= end:
                return b""
            i = bisect.bisect_right(raw, offset) - 1
            parts = []
            pos = offset
            while pos < end:
                data = self._chunk(i)
                start = pos - raw[i]
                take = data[start : start + (end - pos)]
                parts.append(take)
                pos += len(take)
                i += 1
            return parts[0] if len(parts) == 1 else b"".join(parts)

    def _chunk(self, i: int) -> bytes:
        data = self._cache.get(i)
        if data is not None:
            self._cache.move_to_end(i)
            return data
        start, end = self._comp[i]
        with open(self.path, "rb") as fh:
            fh.seek(start)
            comp = fh.read(end - start)
        assert self._raw is not None
        try:
            data = _decompress(comp, self.method)
        except _BadChunk as exc:
            raise CorruptRecord(self._raw[i], str(exc), str(self.path)) from None
        self._cache[i] = data
        if len(self._cache) > _CACHE_CHUNKS:
            self._cache.popitem(last=False)
        return data

    def _ensure_table(self) -> None:
        if self._raw is not None:
            return
        table = _read_seek_table(self.path) if self.method == "zstd" else None
        if table is None:
            with open(self.path, "rb") as fh:
                blob = fh.read()
            table, self._damage = _walk(blob, self.method, self._cache)
        raw: list[int] = []
        r = 0
        for _start, _end, dsize in table:
            raw.append(r)
            r += dsize
        self._raw = raw
        self._comp = [(start, end) for start, end, _ in table]
        self._size = r


class _BadChunk(ValueError):
    """A frame or member that does not decompress."""


def _decompress_one(comp: bytes, method: Compression) -> tuple[bytes, int]:
    """Decompress the first frame/member of ``comp``: ``(data, bytes consumed)``."""
    try:
        if method == "zstd":
            dobj = zstandard.ZstdDecompressor().decompressobj()
            data: bytes = dobj.decompress(comp)
            done, rest = dobj.eof, len(dobj.unused_data)
        else:
            zobj = zlib.decompressobj(31)
            data = zobj.decompress(comp)
            done, rest = zobj.eof, len(zobj.unused_data)
    except (zlib.error, zstandard.ZstdError) as exc:
        raise _BadChunk(f"bad compressed data ({exc})") from None
    if not done:
        raise _BadChunk("truncated compressed data")
    return data, len(comp) - rest


def _decompress(comp: bytes, method: Compression) -> bytes:
    data, consumed = _decompress_one(comp, method)
    if consumed != len(comp):
        raise _BadChunk("bad compressed data (frame size)")
    return data


def _read_seek_table(path: Path) -> list[tuple[int, int, int]] | None:
    """The frames listed by a zstd seek table at the end of ``path``, if there is one.

    Only the table is read (a few bytes per 256 KB chunk), not the compressed data.
    """
    with open(path, "rb") as fh:
        total = fh.seek(0, 2)
        if total < _SKIP_HEADER.size + _SEEK_FOOTER.size:
            return None
        fh.seek(total - _SEEK_FOOTER.size)
        frames, descriptor, magic = _SEEK_FOOTER.unpack(fh.read(_SEEK_FOOTER.size))
        if magic != SEEKABLE_MAGIC:
            return None
        entry = _SEEK_ENTRY.size + (4 if descriptor & 0x80 else 0)
        table_len = frames * entry + _SEEK_FOOTER.size
        start = total - table_len - _SKIP_HEADER.size
        if start < 0:
            return None
        fh.seek(start)
        blob = fh.read(table_len + _SKIP_HEADER.size)
    skip_magic, frame_size = _SKIP_HEADER.unpack_from(blob, 0)
    if skip_magic != SKIPPABLE_MAGIC or frame_size != table_len:
        return None
    out: list[tuple[int, int, int]] = []
    c = 0
    for k in range(frames):
        csize, dsize = _SEEK_ENTRY.unpack_from(blob, _SKIP_HEADER.size + k * entry)
        out.append((c, c + csize, dsize))
        c += csize
    return out if c == start else None


def _walk(
    blob: bytes, method: Compression, cache: OrderedDict[int, bytes]
) -> tuple[list[tuple[int, int, int]], str | None]:
    """Find frame/member boundaries by decompressing once (files without a seek table).

    The decompressed chunks found on the way are kept in ``cache`` (up to its bound),
    since the read that triggered the walk usually wants one of them.

    Returns:
        ``(chunks, damage)``: the walk stops at the first frame that does not decompress
        and says why.
    """
    out: list[tuple[int, int, int]] = []
    pos = 0
    while pos < len(blob):
        if method == "zstd" and len(blob) - pos >= 8:
            magic, size = _SKIP_HEADER.unpack_from(blob, pos)
            if magic & 0xFFFFFFF0 == 0x184D2A50:  # any skippable frame
                pos += 8 + size
                continue
        try:
            data, consumed = _decompress_one(blob[pos:], method)
        except _BadChunk as exc:
            return out, str(exc)
        if len(cache) < _CACHE_CHUNKS:
            cache[len(out)] = data
        out.append((pos, pos + consumed, len(data)))
        pos += consumed
    return out, None
