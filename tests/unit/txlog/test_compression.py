"""Compressed journals: our chunked files and hand-compressed ones read the same way."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest
import zstandard

from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.storage.compression import CHUNK_BYTES, CompressedReader, compress_journal
from spool.server.txlog.storage.files import Compression


def raw_data(n: int) -> bytes:
    rng = random.Random(n)
    return b"".join(b'{"id":%d,"v":"%s"}' % (i, b"x" * rng.randrange(50)) for i in range(n))


@pytest.mark.parametrize("method", ["zstd", "gzip"])
def test_compressed_journal_reads_back_at_any_offset(tmp_path: Path, method: Compression) -> None:
    raw = raw_data(40_000)
    assert len(raw) > 3 * CHUNK_BYTES
    src = tmp_path / "j.journal"
    src.write_bytes(raw + bytes(1000))  # preallocated zeros after the data are not kept
    dst = tmp_path / ("j.journal" + (".zst" if method == "zstd" else ".gz"))
    size = compress_journal(src, dst, method, data_len=len(raw))
    assert size == dst.stat().st_size < len(raw)
    assert not dst.with_name(dst.name + ".tmp").exists()
    reader = CompressedReader(dst, method)
    assert reader.size() == len(raw)
    rng = random.Random(1)
    for _ in range(50):
        off = rng.randrange(len(raw))
        length = rng.randrange(1, 3 * CHUNK_BYTES)
        assert reader.read(off, length) == raw[off : off + length]
    assert reader.read(len(raw), 10) == b""
    # standard tools read it whole
    whole = zstandard.ZstdDecompressor().decompressobj(read_across_frames=True)
    plain = (
        whole.decompress(dst.read_bytes())
        if method == "zstd"
        else gzip.decompress(dst.read_bytes())
    )
    assert plain == raw


@pytest.mark.parametrize("method", ["zstd", "gzip"])
def test_hand_compressed_single_stream_is_readable(tmp_path: Path, method: Compression) -> None:
    raw = raw_data(5_000)
    path = tmp_path / "j.journal.x"
    if method == "zstd":
        path.write_bytes(zstandard.ZstdCompressor().compress(raw))
    else:
        path.write_bytes(gzip.compress(raw))
    reader = CompressedReader(path, method)
    assert reader.size() == len(raw)
    assert reader.read(1234, 5000) == raw[1234:6234]


@pytest.mark.parametrize("method", ["zstd", "gzip"])
def test_damaged_compressed_data_is_reported_not_misread(
    tmp_path: Path, method: Compression
) -> None:
    raw = raw_data(40_000)
    src = tmp_path / "j.journal"
    src.write_bytes(raw)
    dst = tmp_path / "j.journal.c"
    compress_journal(src, dst, method, data_len=len(raw))
    blob = bytearray(dst.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # inside a middle chunk
    dst.write_bytes(bytes(blob))
    reader = CompressedReader(dst, method)
    if method == "gzip":  # found while walking the members: the data ends before it
        assert reader.damage is not None
        assert 0 < reader.size() < len(raw)
        assert reader.read(0, reader.size()) == raw[: reader.size()]
    else:  # the seek table still lists every frame: the bad one fails when read
        assert reader.size() == len(raw)
        with pytest.raises(CorruptRecord) as info:
            for off in range(0, len(raw), CHUNK_BYTES):
                assert reader.read(off, CHUNK_BYTES) == raw[off : off + CHUNK_BYTES]
        assert info.value.offset % CHUNK_BYTES == 0


def test_truncated_single_stream_ends_early(tmp_path: Path) -> None:
    raw = raw_data(5_000)
    path = tmp_path / "j.journal.gz"
    path.write_bytes(gzip.compress(raw)[:-20])
    reader = CompressedReader(path, "gzip")
    assert reader.size() == 0 and reader.damage == "truncated compressed data"
