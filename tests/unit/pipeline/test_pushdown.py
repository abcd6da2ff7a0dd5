"""Spark filters -> ScanPredicate, and the options of the format."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringEndsWith,
    StringStartsWith,
)

from spool.server.pipeline.errors import BadOption
from spool.server.pipeline.options import parse_read, parse_stream, parse_write
from spool.server.pipeline.predicate import KIND_CODES, MAX_SEQ, ScanPredicate
from spool.server.pipeline.pushdown import push_filters

OPS = {
    EqualTo: lambda a, b: a == b,
    GreaterThan: lambda a, b: a > b,
    GreaterThanOrEqual: lambda a, b: a >= b,
    LessThan: lambda a, b: a < b,
    LessThanOrEqual: lambda a, b: a <= b,
}
T = datetime(2026, 11, 22, 12, 0, 0, 250, tzinfo=UTC)
T_US = int(T.timestamp()) * 1_000_000 + 250


def test_taken_filters_narrow_the_predicate() -> None:
    filters = [
        GreaterThan(("seq",), 10),
        LessThanOrEqual(("seq",), 20),
        GreaterThanOrEqual(("timestamp",), T),
        LessThan(("timestamp",), T.replace(tzinfo=None)),
        In(("topic",), ("a", "b")),
        EqualTo(("topic",), "b"),
        StringStartsWith(("topic",), "b"),
        EqualTo(("publisher_id",), Decimal(7)),
        In(("kind",), ("publish", "sow_delete", "nonsense")),
    ]
    p, rest = push_filters(ScanPredicate(), filters)
    assert rest == []
    assert (p.seq_lo, p.seq_hi) == (11, 20)
    assert (p.ts_lo, p.ts_hi) == (T_US, T_US - 1) and p.empty
    assert p.topics == frozenset({"b"}) and p.topic_prefix == "b"
    assert p.publishers == frozenset({7})
    assert p.kinds == frozenset({KIND_CODES["publish"], KIND_CODES["sow_delete"]})


def test_the_rest_goes_back_to_spark_by_identity() -> None:
    keep = [
        Not(EqualTo(("topic",), "a")),
        IsNull(("corr_id",)),
        StringEndsWith(("topic",), "x"),
        EqualTo(("data_text",), "x"),
        EqualTo(("publisher_id",), Decimal("7.5")),
        In(("seq",), (1, 5)),
        EqualTo(("seq",), True),
    ]
    p, rest = push_filters(ScanPredicate(), keep)
    assert p == ScanPredicate()
    assert all(a is b for a, b in zip(rest, keep, strict=True))


@given(
    ops=st.lists(st.tuples(st.sampled_from(list(OPS)), st.integers(0, 50)), max_size=4),
    seq=st.integers(0, 60),
)
def test_seq_bounds_agree_with_the_comparisons(ops: list[tuple[type, int]], seq: int) -> None:
    p, rest = push_filters(ScanPredicate(), [op(("seq",), v) for op, v in ops])
    assert rest == []
    direct = all(OPS[op](seq, v) for op, v in ops)
    assert (p.seq_lo <= seq <= p.seq_hi) == direct
    assert p.seq_hi <= MAX_SEQ


def test_options(tmp_path: Path) -> None:
    r = parse_read({"path": str(tmp_path), "Mode": "failfast", "partitionBytes": "4096"})
    assert (r.mode, r.slice_bytes, r.name) == ("FAILFAST", 4096, None)
    with pytest.raises(BadOption, match="not an option of the spool format"):
        parse_read({"path": "x", "nmae": "y"})
    with pytest.raises(BadOption, match="give the journal directory"):
        parse_read({})
    with pytest.raises(BadOption, match="one of PERMISSIVE"):
        parse_read({"path": "x", "mode": "lenient"})
    with pytest.raises(BadOption, match=r"pinOwner.*required with adminUrl"):
        parse_stream({"path": "x", "adminUrl": "http://127.0.0.1:1"})
    s = parse_stream(
        {"path": "x", "adminUrl": "http://h:1/", "pinOwner": "q", "maxRecordsPerTrigger": "5"}
    )
    assert (s.admin_url, s.max_records, s.fail_on_data_loss) == ("http://h:1", 5, True)
    with pytest.raises(BadOption, match="websocket URL"):
        parse_write({"url": "http://x"})
    with pytest.raises(BadOption, match="needs a wss:// url"):
        parse_write({"url": "ws://h:1/amps/json", "caFile": "ca.pem"})
    tls = parse_write({"url": "wss://h:1/amps/json", "caFile": "ca.pem", "certFile": "c.pem"})
    assert (tls.ca_file, tls.cert_file, tls.key_file) == ("ca.pem", "c.pem", None)
    w = parse_write({"url": "ws://h:1/amps/json", "topic": "t", "batchSize": "10"})
    assert (w.topic, w.batch_size, w.client_name) == ("t", 10, None)
