"""The SOW's wire encoders: the batch form equals the one-record form; parsed back, every
message says what it should."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import format_timestamp_us
from spool.server.protocol.frame import parse_frame
from spool.server.sow.memory import new_record
from spool.server.wire import (
    encode_group,
    encode_keyed,
    encode_oof,
    encode_sow_record,
    encode_sow_records,
    topic_json,
)
from tests.support.twins import outcome

records = st.lists(
    st.builds(
        new_record,
        st.text(max_size=8),
        st.binary(max_size=30),
        st.integers(0, 3),
        st.integers(0, 4_000_000_000_000_000),  # until the year 2096
        st.integers(0, 2**64 - 1),
        st.integers(0, 2**64 - 1),
        st.just(0),
        st.integers(1, 100),
    ),
    max_size=20,
)


@given(records, st.booleans(), st.booleans(), st.text(max_size=5))
def test_a_batch_is_its_records_one_by_one(
    recs: list,
    send_key: bool,
    want_ts: bool,
    qid: str,  # type: ignore[type-arg]
) -> None:
    topic = topic_json("orders")
    q = topic_json(qid)
    batch = encode_sow_records(topic, q, recs, send_key=send_key, want_ts=want_ts)
    one_by_one = b"".join(
        encode_sow_record(
            topic,
            q,
            r.key if send_key else None,
            r.body,
            r.bookmark,
            format_timestamp_us(r.timestamp_us) if want_ts else None,
        )
        for r in recs
    )
    assert batch == one_by_one
    parsed = parse_frame(batch) if batch else None
    if parsed is not None:
        assert parsed.error is None
        assert [m.body for m in parsed.messages] == [r.body for r in recs]
        for m, r in zip(parsed.messages, recs, strict=True):
            assert m.header["c"] == "sow" and m.header["qid"] == qid
            assert m.header.get("k") == (r.key if send_key else None)
            assert m.header.get("bm") == (r.bookmark or None)


def test_group_keyed_and_oof_messages_parse() -> None:
    frame = (
        encode_group(b"group_begin", b'"q"', b'"s"')
        + encode_keyed(b'"t"', b'"s"', 'k"1', b"{}", "1|2|", "ts")
        + encode_oof(b'"t"', b'"s"', "k", "expired", b"{}")
        + encode_group(b"group_end", b'"q"')
    )
    parsed = parse_frame(frame)
    assert parsed.error is None
    got = [m.header for m in parsed.messages]
    assert got[0] == {"c": "group_begin", "qid": "q", "sub_id": "s", "l": 0}
    assert got[1] == {"c": "publish", "t": "t", "sids": "s", "k": 'k"1', "bm": "1|2|",
                      "ts": "ts", "l": 2}  # fmt: skip
    assert got[2] == {"c": "oof", "t": "t", "sids": "s", "k": "k", "reason": "expired", "l": 2}
    assert got[3] == {"c": "group_end", "qid": "q", "l": 0}


# a lone surrogate: neither orjson nor str.encode takes it, so both encoders must raise
texts = st.one_of(st.text(max_size=8), st.just("a\ud800"), st.sampled_from(['k"}{[]\\', "é€😀"]))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([b'"orders"', b'"a/b"', topic_json('t"{}')]),
    st.one_of(st.none(), texts),
    st.binary(max_size=30),
    st.one_of(st.none(), st.just(""), texts),
    st.one_of(st.none(), st.just(""), texts),
)
def test_a_keyed_delivery_is_a_sow_record_with_the_publish_head(
    topic: bytes, key: str | None, body: bytes, bookmark: str | None, ts: str | None
) -> None:
    """``encode_keyed`` writes out :func:`encode_sow_record`'s tail (its fast twin):
    past their heads (``publish`` with ``sids`` / ``sow`` with ``qid``) the bytes are
    the same, and an argument one cannot encode raises the same error in both."""
    sids, qid = b'"s1,s2"', b'"q"'
    keyed = outcome(encode_keyed, topic, sids, key, body, bookmark, ts)
    record = outcome(encode_sow_record, topic, qid, key, body, bookmark, ts)
    if keyed[0] == "raised" or record[0] == "raised":
        assert keyed == record
        return
    keyed_head = b'{"c":"publish","t":' + topic + b',"sids":' + sids
    record_head = b'{"c":"sow","t":' + topic + b',"qid":' + qid
    assert keyed[1].startswith(keyed_head) and record[1].startswith(record_head)
    assert keyed[1][len(keyed_head) :] == record[1][len(record_head) :]
