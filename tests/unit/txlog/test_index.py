"""Sparse indexes checked against an oracle (a list of the records' facts)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.txlog.format.codec import encode, scan
from spool.server.txlog.format.record import RecordKind
from spool.server.txlog.index.builder import IndexBuilder
from spool.server.txlog.index.fileformat import BLOCK, parse_open_index
from spool.server.txlog.index.sealed import SealedIndex

Row = tuple[int, int, int, int, int, int]  # seq, offset, length, ts, pub_hash, pub_seq


def build(rows_spec: list[tuple[int, int, int]], base: int = 1) -> tuple[list[Row], bytes]:
    """Records from ``(ts, pub_hash, body_len)``: each publisher's pub_seq counts up."""
    rows: list[Row] = []
    parts = []
    offset = 0
    next_ps: dict[int, int] = {}
    for i, (ts, ph, blen) in enumerate(rows_spec):
        ps = next_ps.get(ph, 0) + 1 if ph else 0
        if ph:
            next_ps[ph] = ps
        data = encode(base + i, ts, ph, ps, "t", "json", RecordKind.PUBLISH, (), 0, b"x" * blen)
        rows.append((base + i, offset, len(data), ts, ph, ps))
        parts.append(data)
        offset += len(data)
    return rows, b"".join(parts)


specs = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=1000),  # timestamps, not monotonic
        st.sampled_from([0, 11, 22, 33]),  # publishers (0: anonymous)
        st.integers(min_value=0, max_value=200),
    ),
    min_size=1,
    max_size=80,
)


def builder_from(rows: list[Row], buf: bytes, block_bytes: int) -> tuple[IndexBuilder, list[bytes]]:
    b = IndexBuilder(rows[0][0], block_bytes)
    entries = []
    for seq, off, length, ts, ph, ps in rows:
        e = b.add(seq, off, length, ts, ph, ps, buf[off : off + length])
        if e:
            entries.append(e)
    return b, entries


def check_view(view: IndexBuilder | SealedIndex, rows: list[Row]) -> None:
    """Every lookup lands on a block that holds the answer the oracle gives."""
    by_seq = {r[0]: r for r in rows}
    assert view.count == len(rows)
    assert view.first_seq == rows[0][0] and view.last_seq == rows[-1][0]
    assert view.data_len == rows[-1][1] + rows[-1][2]
    assert view.first_ts == rows[0][3] and view.last_ts == rows[-1][3]
    assert view.ts_max == max(r[3] for r in rows)
    assert view.first_bookmark == (rows[0][4], rows[0][5])
    assert view.last_bookmark == (rows[-1][4], rows[-1][5])
    for seq, off, *_ in rows:
        span = view.span_for_seq(seq)
        assert span is not None and span.seq <= seq < span.seq + span.count
        assert span.offset <= off < span.offset + span.length
        assert by_seq[span.seq][1] == span.offset
    assert view.span_for_seq(rows[-1][0] + 1) is None
    assert view.span_for_seq(rows[0][0] - 1) is None
    for t in sorted({r[3] for r in rows} | {-1, 1001}):
        want = next((r[0] for r in rows if r[3] >= t), None)
        span = view.span_for_time(t)
        if want is None:
            assert span is None
        else:
            assert span is not None and span.seq <= want < span.seq + span.count
            # and nothing before the span reaches t
            assert all(r[3] < t for r in rows if r[0] < span.seq)
    for seq, _, _, _, ph, ps in rows:
        if not ph:
            continue
        span = view.span_for_bookmark(ph, ps)
        assert span is not None and span.seq <= seq < span.seq + span.count
    for ph in {r[4] for r in rows if r[4]}:
        mine = [r for r in rows if r[4] == ph]
        summary = view.publisher(ph)
        assert summary is not None
        assert (summary.min_pub_seq, summary.max_pub_seq) == (mine[0][5], mine[-1][5])
        assert summary.last_seq == mine[-1][0] and summary.count == len(mine)
        assert view.span_for_bookmark(ph, mine[-1][5] + 1) is None
    assert view.publisher(44) is None and view.span_for_bookmark(44, 1) is None
    assert {p.pub_hash for p in view.publishers()} == {r[4] for r in rows if r[4]}


@settings(max_examples=60)
@given(specs, st.sampled_from([64, 300, 4096]))
def test_builder_sealed_and_open_forms_agree_with_oracle(
    spec: list[tuple[int, int, int]], block: int
) -> None:
    rows, buf = build(spec, base=100)
    b, entries = builder_from(rows, buf, block)
    check_view(b, rows)
    sealed_bytes = b.seal()
    sealed = SealedIndex.from_buffer(sealed_bytes, 100)
    assert sealed is not None
    check_view(sealed, rows)
    # every block's CRC covers exactly its bytes
    for first, off, length, cnt, _ts, crc, rel in sealed.blocks():
        import google_crc32c

        assert google_crc32c.value(buf[off : off + length]) == crc
        assert rel < length and cnt >= 1 and first >= 100
    # open form: the entries emitted while building, then restored, give the same answers
    open_form = b.open_form()
    parsed, problem = parse_open_index(open_form, 100)
    assert problem is None
    restored = IndexBuilder(100, block)
    restored.restore(parsed)
    restored.set_edges(
        (rows[0][3], rows[0][4], rows[0][5]), (rows[-1][3], rows[-1][4], rows[-1][5])
    )
    check_view(restored, rows)
    assert b"".join(entries) == open_form[32 : 32 + len(b"".join(entries))]


@settings(max_examples=40)
@given(specs, st.sampled_from([64, 4096]))
def test_scanned_and_appended_builders_are_identical(
    spec: list[tuple[int, int, int]], block: int
) -> None:
    rows, buf = build(spec)
    appended, _ = builder_from(rows, buf, block)
    scanned = IndexBuilder(1, block)
    # feed the scan in two uneven pieces, as recovery reads in chunks
    cut = rows[len(rows) // 2][1]
    for start, stop in ((0, cut), (cut, len(buf))):
        piece = buf[start:stop]
        res = scan(piece, 0, len(piece), scanned.last_seq + 1, final=stop == len(buf), base=start)
        scanned.add_scanned(piece, start, res)
    assert scanned.seal() == appended.seal()


def test_sealed_index_rejects_damage(tmp_path: Path) -> None:
    rows, buf = build([(i, 11, 50) for i in range(100)])
    b, _ = builder_from(rows, buf, 256)
    data = b.seal()
    path = tmp_path / "x.index"
    path.write_bytes(data)
    index = SealedIndex.load(path, 1)
    assert index is not None
    index.close()
    assert SealedIndex.load(path, 2) is None  # another journal's index
    rng = random.Random(5)
    for _ in range(20):
        broken = bytearray(data)
        broken[rng.randrange(len(broken))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(broken))
        assert SealedIndex.load(path, 1) is None
    path.write_bytes(data[:-1])
    assert SealedIndex.load(path, 1) is None


def test_open_index_keeps_its_consistent_prefix() -> None:
    rows, buf = build([(i, 11, 100) for i in range(60)])
    b, _ = builder_from(rows, buf, 256)
    data = b.open_form()
    entries, problem = parse_open_index(data, 1)
    assert problem is None and len(entries) == b.block_count
    torn = data[:-5]
    entries, problem = parse_open_index(torn, 1)
    assert problem == "torn entry" and len(entries) == b.block_count - 1
    flipped = bytearray(data)
    second = 32 + BLOCK.size + 40 * len(entries[0].ranges) + 3  # inside the second entry
    flipped[second] ^= 0xFF
    entries, problem = parse_open_index(bytes(flipped), 1)
    assert problem == "entry crc mismatch" and len(entries) == 1
    assert parse_open_index(data, 2) == ([], "base mismatch")
    assert parse_open_index(b"nonsense", 1) == ([], "bad header")


@pytest.mark.parametrize("block", [1, 4096])
def test_one_record_blocks_and_one_block_journals(block: int) -> None:
    rows, buf = build([(5, 11, 10), (3, 11, 10), (9, 22, 10)])
    b, _ = builder_from(rows, buf, block)
    check_view(b, rows)
    assert b.block_count == (3 if block == 1 else 0)


@settings(max_examples=80)
@given(specs, st.sampled_from([64, 300, 4096]), st.lists(st.integers(1, 12), max_size=30))
def test_runs_build_what_single_records_build(
    spec: list[tuple[int, int, int]], block: int, cuts: list[int]
) -> None:
    """``add_run`` over runs of one time and key (the append path's shape) closes the same
    blocks with the same entries, and seals the same index, as ``add`` record by record."""
    # the append path's runs share a timestamp and a key: give each run of the
    # spec one of each, cutting it into runs of the drawn lengths
    rows, buf = build(spec, base=7)
    runs: list[list[Row]] = []
    i = 0
    for size in [*cuts, len(rows)]:
        if i >= len(rows):
            break
        runs.append(rows[i : i + size])
        i += size
    flat: list[Row] = []
    next_ps: dict[int, int] = {}
    for run in runs:
        ts, ph = run[0][3], run[0][4]
        for seq, off, ln, *_ in run:
            ps = next_ps[ph] = next_ps.get(ph, 0) + 1 if ph else 0
            flat.append((seq, off, ln, ts, ph, ps))
    runs = []
    for size in [*cuts, len(flat)]:
        taken = sum(map(len, runs))
        if taken >= len(flat):
            break
        runs.append(flat[taken : taken + size])
    single, want = builder_from(flat, buf, block)
    batched = IndexBuilder(7, block)
    got: list[bytes] = []
    for run in runs:
        offsets = [r[1] for r in run] + [run[-1][1] + run[-1][2]]
        got.extend(
            batched.add_run(
                run[0][0], offsets, [buf[r[1] : r[1] + r[2]] for r in run], [r[2] for r in run],
                run[0][3], run[0][4], [r[5] for r in run],
            )
        )  # fmt: skip
    assert got == want
    check_view(batched, flat)
    assert batched.seal() == single.seal()
