"""Reading past damage: every intact record is found again, every damaged one is named.

The oracle is the journal as written: a record whose bytes the damage touched is lost,
every other one must be in a piece, with its own seq; the lost spans hold exactly the
lost seqs (the last one's end unknown when nothing intact follows).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spool.server.txlog.damage.salvage import LostSpan, salvage
from spool.server.txlog.format.codec import encode
from spool.server.txlog.format.record import RecordKind


class BytesSource:
    """A journal held in memory (the salvage reads through the source protocol)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.path = Path("memory.journal")

    def read(self, offset: int, length: int) -> bytes:
        return self.data[offset : offset + length]

    def size(self) -> int:
        return len(self.data)

    def acquire(self) -> None: ...

    def release(self) -> None: ...

    def retire(self) -> None: ...


def journal(sizes: list[int], base: int = 1) -> tuple[bytes, list[int]]:
    """Records of the given body sizes from seq ``base``; the bytes and each offset."""
    parts = []
    offsets = []
    pos = 0
    for i, size in enumerate(sizes):
        seq = base + i
        data = encode(seq, 1000 + seq, 7, seq, "t", "json", RecordKind.PUBLISH, (), 0,
                      bytes([seq % 251]) * size)  # fmt: skip
        offsets.append(pos)
        parts.append(data)
        pos += len(data)
    return b"".join(parts), offsets


def intact_seqs(result_pieces: list[list[int]]) -> list[int]:
    return [s for piece in result_pieces for s in piece]


def seqs_of(sv: object) -> list[int]:
    from spool.server.txlog.damage.salvage import Salvage

    assert isinstance(sv, Salvage)
    return [p.first_seq + i for p in sv.pieces for i in range(len(p.rows))]


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=2, max_size=60),
    data=st.data(),
)
def test_a_flipped_byte_loses_exactly_its_record(sizes: list[int], data: st.DataObject) -> None:
    buf, offsets = journal(sizes)
    where = data.draw(st.integers(0, len(buf) - 1), label="offset")
    hit = max(i for i, off in enumerate(offsets) if off <= where)
    damaged = bytearray(buf)
    damaged[where] ^= data.draw(st.integers(1, 255), label="mask")
    tail = bytes(data.draw(st.integers(0, 64), label="zeros after"))
    sv = salvage(BytesSource(bytes(damaged) + tail), 1)
    n = len(sizes)
    assert seqs_of(sv) == [s for s in range(1, n + 1) if s != hit + 1]
    end = offsets[hit + 1] if hit + 1 < n else None
    if end is None:
        assert len(sv.spans) == 1
        span = sv.spans[0]
        assert (span.offset, span.first_seq, span.last_seq) == (offsets[hit], hit + 1, None)
        assert sv.end == offsets[hit]
    else:
        assert [(s.offset, s.end, s.first_seq, s.last_seq) for s in sv.spans] == [
            (offsets[hit], end, hit + 1, hit + 1)
        ]
        assert sv.end == len(buf)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 200), min_size=3, max_size=60),
    data=st.data(),
)
def test_zeroed_bytes_lose_the_records_they_touch(sizes: list[int], data: st.DataObject) -> None:
    buf, offsets = journal(sizes)
    a = data.draw(st.integers(0, len(buf) - 2), label="start")
    b = data.draw(st.integers(a + 1, min(len(buf), a + 2000)), label="stop")
    damaged = buf[:a] + bytes(b - a) + buf[b:]
    ends = [off + len(_record(sizes, i)) for i, off in enumerate(offsets)]
    touched = {
        i + 1 for i, off in enumerate(offsets) if damaged[off : ends[i]] != buf[off : ends[i]]
    }
    assume(touched)
    sv = salvage(BytesSource(damaged), 1)
    n = len(sizes)
    survivors = [s for s in range(1, n + 1) if s not in touched]
    first_lost = min(touched)
    last_lost = max(touched)
    if last_lost == n:  # nothing intact after the damage: a tail (zeros: the data ends)
        assert seqs_of(sv) == [s for s in survivors if s < first_lost]
        assert all(span.last_seq is None for span in sv.spans)
    else:
        assert seqs_of(sv) == survivors
        assert [(s.first_seq, s.last_seq) for s in sv.spans] == [(first_lost, last_lost)]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 200), min_size=2, max_size=40),
    data=st.data(),
)
def test_garbage_between_records_loses_nothing_and_is_named(
    sizes: list[int], data: st.DataObject
) -> None:
    """Bytes inserted at a record boundary: a span of no seq at all, every record kept."""
    buf, offsets = journal(sizes)
    k = data.draw(st.integers(1, len(sizes) - 1), label="boundary")
    junk = data.draw(st.binary(min_size=1, max_size=300), label="junk")
    if junk[:4] == b"\0\0\0\0":
        junk = b"\x01" + junk[1:]
    damaged = buf[: offsets[k]] + junk + buf[offsets[k] :]
    sv = salvage(BytesSource(damaged), 1)
    assert seqs_of(sv) == list(range(1, len(sizes) + 1))
    assert [(s.offset, s.end, s.first_seq, s.last_seq) for s in sv.spans] == [
        (offsets[k], offsets[k] + len(junk), k + 1, k)
    ]


def _record(sizes: list[int], i: int) -> bytes:
    seq = i + 1
    return encode(seq, 1000 + seq, 7, seq, "t", "json", RecordKind.PUBLISH, (), 0,
                  bytes([seq % 251]) * sizes[i])  # fmt: skip


def test_a_clean_journal_has_one_piece_and_no_span() -> None:
    buf, _ = journal([10] * 20, base=41)
    sv = salvage(BytesSource(buf + bytes(100)), 41)
    assert not sv.damaged
    assert seqs_of(sv) == list(range(41, 61))
    assert sv.end == len(buf) and sv.next_seq == 61


def test_index_blocks_resume_after_a_damaged_length() -> None:
    """A flipped length loses its record; an index block after it is a resume point."""
    buf, offsets = journal([30] * 10)
    damaged = bytearray(buf)
    damaged[offsets[4]] ^= 0x40  # the length field of seq 5
    hint = (offsets[7], len(buf) - offsets[7], 8, _crc(buf[offsets[7] :]))
    sv = salvage(BytesSource(bytes(damaged)), 1, hints=[hint])
    assert seqs_of(sv) == [1, 2, 3, 4, 6, 7, 8, 9, 10]
    assert sv.spans == [LostSpan(offsets[4], offsets[5], 5, 5, "crc mismatch")] or [
        (s.first_seq, s.last_seq) for s in sv.spans
    ] == [(5, 5)]


def _crc(data: bytes) -> int:
    import google_crc32c

    return google_crc32c.value(data)
