"""Reads verify whole index blocks with one CRC each; damage is still found at its record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.txlog import CorruptRecord
from spool.server.txlog.format.batch import decode_batch
from spool.server.txlog.format.codec import decode_records, encode
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.storage.source import verified_range
from tests.unit.txlog.helpers import journal_files, run
from tests.unit.txlog.test_recovery import flip, make_log, offset_of, write_log


def _records(sizes: list[int]) -> list[bytes]:
    return [
        encode(i + 1, 1_700_000_000_000_000 + i, 7, i + 1, "t", "json", 1, (), 0, b"x" * n)
        for i, n in enumerate(sizes)
    ]


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=80),
    block=st.sampled_from([256, 512, 4096]),
    flip_at=st.one_of(st.none(), st.floats(0, 0.999)),
    start_rec=st.integers(0, 79),
)
def test_verified_range_covers_only_intact_whole_blocks(
    sizes: list[int], block: int, flip_at: float | None, start_rec: int
) -> None:
    records = _records(sizes)
    builder = IndexBuilder(1, block)
    off = 0
    for i, data in enumerate(records):
        builder.add(i + 1, off, len(data), 0, 7, i + 1, data)
        off += len(data)
    journal = bytearray(b"".join(records))
    bad = None
    if flip_at is not None:
        bad = int(flip_at * len(journal))
        journal[bad] ^= 0x10
    # read from a record boundary, as readers do
    start_rec = min(start_rec, len(records) - 1)
    base = sum(len(r) for r in records[:start_rec])
    buf = bytes(journal[base:])
    t0, t1 = verified_range(buf, base, builder.block_crcs(base, base + len(buf)))
    assert 0 <= t0 <= t1 <= len(buf)
    if bad is not None:
        assert not (t0 <= bad - base < t1), "a damaged byte was trusted"
    else:
        # everything from the first closed block inside the read is trusted
        blocks = builder.block_crcs(base, base + len(buf))
        if blocks:
            last = blocks[-1]
            assert (t0, t1) == (blocks[0][0] - base, last[0] + last[1] - base)
    # decoding with that range is the same as decoding with every CRC checked
    try:
        want = decode_batch(buf, 0, len(buf), start_rec + 1, max_count=1000)
    except CorruptRecord as exc:
        with pytest.raises(CorruptRecord) as got:
            decode_batch(buf, 0, len(buf), start_rec + 1, max_count=1000, trusted=(t0, t1))
        assert (got.value.offset, got.value.reason) == (exc.offset, exc.reason)
    else:
        have = decode_batch(buf, 0, len(buf), start_rec + 1, max_count=1000, trusted=(t0, t1))
        assert list(have[0]) == list(want[0]) and have[1] == want[1]


def test_damage_in_a_sealed_journal_is_reported_at_its_record_on_read(tmp_path: Path) -> None:
    """Recovery checks the tail; older journals are checked as they are read."""
    write_log(tmp_path, 2500)
    first = journal_files(tmp_path)[0]
    at = offset_of(first, 300)
    flip(first, at + 60)

    async def body() -> None:
        log = make_log(tmp_path)
        await log.open()
        got: list[int] = []
        with pytest.raises(CorruptRecord) as exc:
            seq = 1
            while batch := await log.read_view(seq, max_count=100):
                got.extend(batch.seqs)
                seq = batch.last_seq + 1
        assert exc.value.offset == at
        assert got == list(range(1, len(got) + 1)) and len(got) < 300
        await log.close()

    run(body)


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(0, 200), min_size=1, max_size=30), data=st.data())
def test_batch_records_in_any_order_equal_decoded_records(sizes: list[int], data: Any) -> None:
    """RecordBatch builds a record from its columns and buffer whatever order it is asked."""
    records = [
        encode(i + 1, 1_700_000_000_000_000 + i, 7, i + 1, "t", "json", 1, (), 0, b"y" * n,
               "corr" if n % 7 == 0 else "")
        for i, n in enumerate(sizes)
    ]  # fmt: skip
    buf = b"".join(records)
    want, _ = decode_records(buf, 0, len(buf), 1, max_count=1000)
    batch, _ = decode_batch(buf, 0, len(buf), 1, max_count=1000)
    order = data.draw(st.permutations(range(len(sizes))), label="order")
    for i in order:
        assert batch[i] == want[i]
        assert batch.corr_id(i) == want[i].corr_id
        assert batch.bookmark(i) == want[i].bookmark
    assert batch.has_corr_ids() == any(r.corr_id for r in want)
    assert batch.kinds() == {int(r.kind) for r in want}
