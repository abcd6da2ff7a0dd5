"""A query result cut into pieces: every record once, in order, no piece over the budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.ports import SowRecord
from spool.server.sow.streaming import _pieces
from spool.server.wire import encode_sow_records


def _record(i: int, key_len: int, body_len: int) -> SowRecord:
    return SowRecord("k" * key_len + str(i), b"x" * body_len, i + 1, 0, 7, i + 1, 0, i + 1)


def _encode(part: object) -> bytes:
    return encode_sow_records(b'"t"', b'"q"', part)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 5000)), min_size=1, max_size=60),
    budget=st.integers(1, 20_000),
    overhead=st.integers(1, 200),
)
def test_pieces_cover_the_records_in_order_within_the_budget(
    sizes: list[tuple[int, int]], budget: int, overhead: int
) -> None:
    records = [_record(i, k, b) for i, (k, b) in enumerate(sizes)]
    pieces = list(_pieces(records, _encode, budget, overhead))
    assert [r for part, _ in pieces for r in part] == records
    for part, data in pieces:
        assert part  # never an empty piece
        assert data == _encode(part)
        assert len(data) <= budget or len(part) == 1
    assert b"".join(data for _, data in pieces) == _encode(records)
