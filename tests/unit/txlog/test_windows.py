"""Readers of journals see every record, wherever their reads end."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.txlog.codec import encode
from server.txlog.reader import READ_SLACK, PlainSource, read_span

T0 = 1_700_000_000_000_000


def _record(seq: int, body: bytes) -> bytes:
    return encode(seq, T0 + seq, 7, seq, "t", "json", 1, (), 0, body)


@pytest.mark.parametrize("gap", [1, 2, 3, 51])
def test_read_span_reads_a_record_that_starts_just_before_its_read_ends(
    tmp_path: Path, gap: int
) -> None:
    """A record starts ``gap`` bytes before the end of what one read takes: the read
    goes on at that record instead of calling its length field bad."""
    max_bytes = 1000
    first = _record(1, b"")
    first = _record(1, b"x" * (max_bytes + READ_SLACK - gap - len(first)))
    rest = [_record(seq, b'{"n":%d}' % seq) for seq in range(2, 40)]
    path = tmp_path / "j"
    path.write_bytes(first + b"".join(rest) + bytes(4096))
    source = PlainSource(path)
    try:
        records, _offset, seq = read_span(
            source, 0, 1, len(first) + sum(map(len, rest)), 2,
            max_count=100, max_bytes=max_bytes, upto_seq=39, as_batch=False,
        )  # fmt: skip
    finally:
        source.retire()
    assert isinstance(records, list) and records
    assert [r.seq for r in records] == list(range(2, seq))
    assert [r.body for r in records] == [b'{"n":%d}' % s for s in range(2, seq)]
