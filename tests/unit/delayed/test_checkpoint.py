"""The delayed-delivery checkpoint format (server/delayed/checkpoint.py): what it encodes
decodes to the same values, and it refuses what it did not write whole (a torn or
truncated file, a flipped bit, another kind of file, another version, contents that do
not add up)."""

from __future__ import annotations

import struct

import google_crc32c
import orjson
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from spool.server.delayed.checkpoint import (
    MAGIC,
    VERSION,
    Checkpoint,
    CheckpointError,
    Covered,
    checkpoint_name,
    decode,
    encode,
)
from spool.server.delayed.dueindex import DueEntries, DueEntry, DueIndex

I64 = st.integers(-(2**63), 2**63 - 1)
U64 = st.integers(0, 2**64 - 1)
SEQS = st.integers(0, 2**63 - 1)

ROWS = st.lists(st.tuples(I64, SEQS, U64, U64), unique_by=lambda r: r[1], max_size=40)
TOPICS = st.dictionaries(st.text(max_size=12), U64, max_size=4)


@st.composite
def checkpoints(draw: st.DrawFn) -> Checkpoint:
    """A checkpoint whose covered record is at or after every entry's seq."""
    rows: list[DueEntry] = draw(ROWS)
    low = max((r[1] for r in rows), default=0)
    covered = Covered(draw(st.integers(low, 2**64 - 1)), draw(U64), draw(U64), draw(U64))
    return Checkpoint(covered, DueEntries.of(rows), draw(TOPICS))


def _encode(c: Checkpoint) -> bytes:
    return encode(c.covered, c.entries, c.by_topic)


SAMPLE = Checkpoint(
    Covered(seq=900, pub_hash=2**64 - 1, pub_seq=17, timestamp_us=1_763_000_000_000_000),
    DueEntries.of([(1_763_000_005_000_000, 12, 2**63, 4), (1_763_000_001_000_000, 800, 9, 1)]),
    {"orders": 1, "public.ticks": 1},
)


def _file(
    head: object, raw_entries: bytes, *, magic: bytes = MAGIC, version: int = VERSION
) -> bytes:
    """A file with a valid CRC around any contents."""
    head_bytes = orjson.dumps(head)
    frame = zstandard.ZstdCompressor().compress(raw_entries)
    body = struct.pack("<8sHI", magic, version, len(head_bytes)) + head_bytes + frame
    return body + struct.pack("<I", google_crc32c.value(body))


def _head(seq: int = 900, count: int = 1, **extra: object) -> dict[str, object]:
    covered = {"seq": seq, "pub_hash": 1, "pub_seq": 2, "timestamp_us": 3}
    return {"covered": covered, "count": count, "by_topic": {}} | extra


def _rows(*rows: tuple[int, int, int, int]) -> bytes:
    return b"".join(struct.pack("<qqQQ", *r) for r in rows)


@given(checkpoints())
def test_round_trip(c: Checkpoint) -> None:
    back = decode(_encode(c))
    assert back == c
    assert list(back.entries) == list(c.entries)


def test_round_trip_of_an_index_copy() -> None:
    index = DueIndex(load=64)
    for seq in range(1, 5001):
        index.add(1_763_000_000_000_000 + (seq * 7919) % 100_000, seq, seq * 2**40, seq)
    entries = index.entries()
    back = decode(encode(Covered(5000, 1, 2, 3), entries))
    assert back.entries == entries and back.by_topic == {}
    assert back.covered == Covered(5000, 1, 2, 3)


def test_an_empty_checkpoint() -> None:
    back = decode(encode(Covered(0, 0, 0, 0), DueEntries.of([])))
    assert len(back.entries) == 0 and back.covered.seq == 0


def test_the_file_is_named_after_the_instance() -> None:
    assert checkpoint_name("a") == "a.delayed.ack"


def test_every_truncation_is_refused() -> None:
    data = _encode(SAMPLE)
    for n in range(len(data)):
        with pytest.raises(CheckpointError):
            decode(data[:n])


@given(checkpoints(), st.data())
def test_every_truncation_of_any_checkpoint_is_refused(c: Checkpoint, data: st.DataObject) -> None:
    encoded = _encode(c)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CheckpointError):
        decode(encoded[:cut])


def test_every_flipped_bit_of_the_sample_is_refused() -> None:
    data = _encode(SAMPLE)
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CheckpointError):
            decode(bytes(flipped))


@given(checkpoints(), st.data())
def test_any_flipped_bit_is_refused(c: Checkpoint, data: st.DataObject) -> None:
    encoded = bytearray(_encode(c))
    bit = data.draw(st.integers(0, len(encoded) * 8 - 1))
    encoded[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CheckpointError):
        decode(bytes(encoded))


def test_bytes_after_the_end_are_refused() -> None:
    with pytest.raises(CheckpointError, match="CRC"):
        decode(_encode(SAMPLE) + b"\0")


@pytest.mark.parametrize("version", [0, VERSION + 1, 0xFFFF])
def test_another_version_is_refused(version: int) -> None:
    data = _file(_head(), _rows((5, 6, 7, 8)), version=version)
    with pytest.raises(CheckpointError, match=f"version {version}; this broker reads version 1"):
        decode(data)


def test_another_kind_of_file_is_refused() -> None:
    with pytest.raises(CheckpointError, match="not a delayed-delivery checkpoint"):
        decode(_file(_head(), _rows((5, 6, 7, 8)), magic=b"SPOOLACK"))


def test_a_well_formed_file_is_decoded() -> None:
    """The helper below writes what the encoder writes: the refusals that follow are
    about the contents, not the frame around them."""
    back = decode(_file(_head(), _rows((5, 6, 7, 8))))
    assert list(back.entries) == [(5, 6, 7, 8)] and back.covered == Covered(900, 1, 2, 3)


@pytest.mark.parametrize(
    ("head", "raw", "reason"),
    [
        ("not an object", _rows(), "no covered record"),
        ({"count": 0, "by_topic": {}}, _rows(), "no covered record"),
        (_head(count=0) | {"covered": {"seq": 1}}, _rows(), "no covered record"),
        (_head(seq=-1, count=0), _rows(), "no covered record"),
        (_head(count=-1), _rows(), "no entry count"),
        (_head(count=True), _rows((5, 6, 7, 8)), "no entry count"),
        (_head(by_topic={"t": -1}), _rows((5, 6, 7, 8)), "counts per topic"),
        (_head(count=2), _rows((5, 6, 7, 8)), "hold 32 bytes, not 64"),
        (_head(count=0), _rows((5, 6, 7, 8)), "hold 32 bytes, not 0"),
        (_head(count=2), _rows((5, 6, 7, 8), (5, 6, 0, 0)), "order"),
        (_head(count=2), _rows((5, 6, 7, 8), (4, 7, 0, 0)), "order"),
        (_head(count=2), _rows((5, 7, 7, 8), (5, 6, 0, 0)), "order"),
        (_head(seq=5), _rows((5, 6, 7, 8)), "past the covered record"),
    ],
)
def test_contents_that_do_not_add_up_are_refused(head: object, raw: bytes, reason: str) -> None:
    with pytest.raises(CheckpointError, match=reason):
        decode(_file(head, raw))


def test_a_json_part_that_is_not_json_is_refused() -> None:
    body = (
        struct.pack("<8sHI", MAGIC, VERSION, 3) + b"{x}" + zstandard.ZstdCompressor().compress(b"")
    )
    with pytest.raises(CheckpointError, match="not JSON"):
        decode(body + struct.pack("<I", google_crc32c.value(body)))


def test_entries_that_are_not_a_zstd_frame_are_refused() -> None:
    head = orjson.dumps(_head(count=0))
    body = struct.pack("<8sHI", MAGIC, VERSION, len(head)) + head + b"not zstd"
    with pytest.raises(CheckpointError, match="the entries"):
        decode(body + struct.pack("<I", google_crc32c.value(body)))


def test_a_json_length_past_the_end_is_refused() -> None:
    body = struct.pack("<8sHI", MAGIC, VERSION, 1000) + b"{}"
    with pytest.raises(CheckpointError, match="past the end"):
        decode(body + struct.pack("<I", google_crc32c.value(body)))
