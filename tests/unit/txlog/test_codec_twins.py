"""The compiled record codec against its pure-Python oracle: CRC-32C, the run encoder
(same bytes, same place to stop on a field that does not fit, same errors) and the bulk
decoder (same columns, records and errors on valid, damaged and adversarial journals)."""

from __future__ import annotations

from typing import Any

import google_crc32c
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format import codec
from spool.server.txlog.format.batch import RecordBatch, decode_batch_py
from spool.server.txlog.format.codec import encode, encode_run_py
from spool.server.txlog.format.record import RecordKind
from tests.support.twins import compiled, outcome, typed

_codec = compiled("spool.server.txlog.format._codec_c")
_batch = compiled("spool.server.txlog.format._batch_c")
# the selected decoder when compiled (the wrapper around decode_columns)
from spool.server.txlog.format import batch as batch_module  # noqa: E402

_decode_c = batch_module._decode_batch_c

U64 = 1 << 64
edge_ints = st.one_of(
    st.integers(min_value=0, max_value=1000),
    st.integers(min_value=U64 - 3, max_value=U64 + 2),
    st.integers(min_value=-3, max_value=-1),
    st.integers(min_value=(1 << 63) - 2, max_value=(1 << 63) + 2),
    st.integers(min_value=-(1 << 63) - 2, max_value=-(1 << 63) + 2),
)
texts = st.one_of(st.sampled_from(["orders", "json", "", "é€"]), st.text(max_size=8))


@given(st.binary(max_size=300))
def test_crc32c_matches_google_crc32c(data: bytes) -> None:
    assert _codec.crc32c(data) == google_crc32c.value(data)


def test_crc32c_of_every_length_up_to_64() -> None:
    data = bytes(range(256)) * 2
    for n in range(65):
        for off in range(9):
            chunk = data[off : off + n]
            assert _codec.crc32c(chunk) == google_crc32c.value(chunk)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    first_seq=edge_ints,
    ts=edge_ints,
    pub_hash=edge_ints,
    pub_seqs=st.lists(edge_ints, max_size=5),
    topic=texts,
    mtype=texts,
    bodies=st.lists(st.binary(max_size=50), max_size=5),
)
@example(1, 1, 1, [1, 2], "t" * 70_000, "json", [b"a", b"b"])
@example(1, 1, 1, [1, 2], "t", "j" * 256, [b"a", b"b"])
@example(1, 1, 1, [], "t", "json", [b"a"])
@example(-1, 1, 1, [], "t", "json", [b"a"])
@example(U64 - 1, 1, 1, [1, 2, 3], "t", "json", [b"a", b"b", b"c"])
@example(1, 1, 1, [1, 2, 3], "t", "json", [b"a", b"b"])
def test_encode_run_twins_agree(
    first_seq: int,
    ts: int,
    pub_hash: int,
    pub_seqs: list[int],
    topic: str,
    mtype: str,
    bodies: list[bytes],
) -> None:
    args = (first_seq, ts, pub_hash, pub_seqs, topic, mtype, bodies)
    assert outcome(_codec.encode_run, *args) == outcome(encode_run_py, *args)
    assert outcome(codec._encode_run_c, *args) == outcome(encode_run_py, *args)


@settings(max_examples=100)
@given(
    st.lists(st.binary(max_size=20), min_size=1, max_size=4),
    st.one_of(st.none(), st.lists(st.sampled_from(["", "c1", "é"]), min_size=4, max_size=4)),
    st.one_of(st.none(), st.lists(st.sampled_from(["", "k"]), min_size=4, max_size=4)),
)
def test_encode_run_with_correlation_ids_and_sow_keys_agrees(
    bodies: list[bytes], corr_ids: list[str] | None, sow_keys: list[str] | None
) -> None:
    args = (5, 1, 9, list(range(len(bodies))), "t", "json", bodies, corr_ids, sow_keys)
    assert outcome(codec._encode_run_c, *args) == outcome(encode_run_py, *args)


def test_encode_run_with_surrogates_raises_like_python() -> None:
    args = (1, 1, 1, [1], "\ud800", "json", [b"x"])
    assert outcome(_codec.encode_run, *args) == outcome(encode_run_py, *args)


def _journal(draw: st.DrawFn) -> bytes:
    """Records as the log writes them: runs of plain publishes, some records with a path,
    a correlation id or a SOW key, other kinds (scheduled and due records included, and
    now and then a kind no version defines yet), several topics."""
    out: list[bytes] = []
    seq = 1
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        topic = draw(st.sampled_from(["orders", "trades", "é"]))
        if draw(st.booleans()):
            bodies = draw(st.lists(st.binary(max_size=30), min_size=1, max_size=6))
            out += encode_run_py(seq, 1_700_000_000_000_000, 7, list(range(len(bodies))),
                                 topic, "json", bodies)  # fmt: skip
            seq += len(bodies)
        else:
            out.append(
                encode(
                    seq, draw(edge_ints.filter(lambda v: -(1 << 63) <= v < 1 << 63)),
                    draw(st.integers(0, U64 - 1)), draw(st.integers(0, U64 - 1)), topic, "json",
                    draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 9])),
                    tuple(draw(st.lists(st.sampled_from(["a", "bb"]), max_size=2))), 0,
                    draw(st.binary(max_size=20)), draw(st.sampled_from(["", "x1"])),
                    draw(st.sampled_from(["", "k"])),
                )
            )  # fmt: skip
            seq += 1
    return b"".join(out)


@st.composite
def journals(draw: st.DrawFn) -> bytes:
    buf = _journal(draw)
    if draw(st.booleans()):
        buf += bytes(draw(st.integers(min_value=0, max_value=60)))  # preallocated zeros
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        if not buf:
            break
        i = draw(st.integers(min_value=0, max_value=len(buf) - 1))
        if draw(st.booleans()):
            buf = buf[:i] + bytes([draw(st.integers(0, 255))]) + buf[i + 1 :]
        else:
            buf = buf[:i]
    return buf


def _batch_view(result: tuple[RecordBatch, int]) -> Any:
    batch, stop = result
    return (
        stop,
        batch.first_seq,
        batch.nbytes,
        typed(batch.topics),
        batch.bodies,
        typed(batch.timestamps_us),
        typed(batch.pub_hashes),
        typed(batch.pub_seqs),
        sorted(batch.kinds()),
        # what routing reads of each record without building it
        [(batch.path(i), batch.corr_id(i), batch.sow_key(i)) for i in range(len(batch))],
        batch.plain,
        batch.has_corr_ids(),
        list(batch),  # every Record, built from the buffer
    )


def _decode_view(fn: Any, *args: Any, **kwargs: Any) -> Any:
    # building the view builds every Record (list(batch)), which may raise too (a record
    # inside a trusted range skipped its CRC but still has to decode): same on both sides
    return outcome(lambda: _batch_view(fn(*args, **kwargs)))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    buf=journals(),
    expect_seq=st.integers(min_value=0, max_value=3),
    max_count=st.integers(min_value=0, max_value=12),
    max_bytes=st.sampled_from([1, 100, 1 << 20]),
    upto_seq=st.one_of(st.none(), st.integers(min_value=0, max_value=12)),
    trusted=st.tuples(st.integers(0, 200), st.integers(0, 400)),
    start=st.integers(min_value=0, max_value=3),
)
def test_decode_batch_twins_agree(
    buf: bytes,
    expect_seq: int,
    max_count: int,
    max_bytes: int,
    upto_seq: int | None,
    trusted: tuple[int, int],
    start: int,
) -> None:
    end = len(buf)
    pos = 0 if start != 3 else min(end, 5)  # mostly record-aligned, sometimes not
    kwargs = {"max_count": max_count, "max_bytes": max_bytes, "upto_seq": upto_seq,
              "trusted": trusted}  # fmt: skip
    want = _decode_view(decode_batch_py, buf, pos, end, expect_seq or 1, **kwargs)
    got = _decode_view(_decode_c, buf, pos, end, expect_seq or 1, **kwargs)
    assert got == want


def test_decode_batch_edge_bounds_fall_back_to_python() -> None:
    buf = b"".join(encode_run_py(U64 - 2, 1, 1, [1, 2], "t", "json", [b"a", b"b"]))
    for args in ((buf, 0, len(buf), U64 - 2), (buf, 0, len(buf) + 10, U64 - 2)):
        assert _decode_view(_decode_c, *args) == _decode_view(decode_batch_py, *args)


def test_compiled_columns_are_plain_ints() -> None:
    buf = b"".join(encode_run_py(1, -5, U64 - 1, [U64 - 1], "t", "json", [b"a"]))
    cols = _batch.decode_columns(buf, 0, len(buf), 1, 10, 1 << 20, None, 0, 0)
    assert cols is not None
    assert cols[2] == [-5] and cols[3] == [U64 - 1] and cols[4] == [U64 - 1]


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    first_seq=edge_ints,
    pub_seqs=st.lists(edge_ints, max_size=4),
    path=st.lists(
        st.one_of(st.sampled_from(["a", "spool-b", "é", ""]), st.text(max_size=6)), max_size=4
    ),
    bodies=st.lists(st.binary(max_size=40), max_size=4),
)
@example(1, [1, 2], ["x" * 255, "b"], [b"a", b"b"])
@example(1, [1, 2], ["x" * 256], [b"a", b"b"])
@example(1, [1], ["n"] * 256, [b"a"])
@example(1, [1], ["\ud800"], [b"a"])
def test_encode_run_with_a_path_agrees(
    first_seq: int, pub_seqs: list[int], path: list[str], bodies: list[bytes]
) -> None:
    """A replicated run (every record with the path it came by) through the compiled loop:
    the same bytes, stop and errors as the Python definition, long names and paths too."""
    args = (first_seq, 7, 9, pub_seqs, "orders", "json", bodies)
    kw = {"path": tuple(path)}
    assert outcome(codec._encode_run_c, *args, **kw) == outcome(encode_run_py, *args, **kw)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    RecordKind.PUBLISH,
                    RecordKind.QUEUE_ACK,
                    RecordKind.SOW_DELETE,
                    RecordKind.SCHEDULED,
                    RecordKind.DUE,
                ]
            ),
            st.sampled_from([(), ("a@g",)]),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_a_mixed_batch_reads_each_kind_without_building_records(
    shapes: list[tuple[RecordKind, tuple[str, ...]]],
) -> None:
    """``RecordBatch.kind`` reads the header byte of a batch of several kinds; it must
    say what the built record says, with either decoder, in any order of asking."""
    buf = b"".join(
        encode(i + 1, 1000 + i, 7, i + 1, "q", "json", kind, path, 0, b"{}")
        for i, (kind, path) in enumerate(shapes)
    )
    for decode in (decode_batch_py, _decode_c):
        batch, _ = decode(buf, 0, len(buf), 1, max_count=100)
        fresh, _ = decode(buf, 0, len(buf), 1, max_count=100)
        got = [batch.kind(i) for i in reversed(range(len(shapes)))][::-1]
        assert got == [int(kind) for kind, _ in shapes]
        assert got == [int(fresh.record(i).kind) for i in range(len(shapes))]
        assert batch.kind(-1) == int(shapes[-1][0])


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(buf=journals())
def test_kept_fields_are_the_built_records_fields(buf: bytes) -> None:
    """The path, correlation id and SOW key a batch keeps of each record (without building
    it) are the fields of the Record built from the same bytes, with either decoder, the
    second decode of the same bytes too (the compiled one then takes paths from its
    cache)."""
    for decode in (decode_batch_py, _decode_c, _decode_c):
        try:
            batch, _ = decode(buf, 0, len(buf), 1, max_count=100)
            records = list(batch)
        except CorruptRecord:
            continue
        kept = [(batch.path(i), batch.corr_id(i), batch.sow_key(i)) for i in range(len(batch))]
        assert kept == [(r.path, r.corr_id, r.sow_key) for r in records]
        assert batch.plain == (not any(any(k) for k in kept))


def test_records_with_a_path_are_not_built_to_be_routed() -> None:
    """Decoding a replicated run (every record with the path it came by) and reading each
    record's path and kind builds no Record (what a replication pump does with records
    that came from elsewhere)."""
    buf = b"".join(encode_run_py(1, 5, 7, [1, 2, 3], "t", "json", [b"a", b"b", b"c"],
                                 path=("spool-b",)))  # fmt: skip
    for decode in (decode_batch_py, _decode_c, _decode_c):
        batch, _ = decode(buf, 0, len(buf), 1)
        assert [batch.path(i) for i in range(3)] == [("spool-b",)] * 3
        assert [batch.kind(i) for i in range(3)] == [int(RecordKind.PUBLISH)] * 3
        assert batch.topics == ["t"] * 3 and batch.bodies == [b"a", b"b", b"c"]
        assert batch._records is None  # nothing built
        assert batch[1].path == ("spool-b",) and batch[1].body == b"b"
