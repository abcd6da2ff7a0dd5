"""The client's session state with bytes only: commands out as frames, frames in as events.

No asyncio and no sockets: every test feeds encoded broker messages to
:class:`SessionState` and checks the events it returns and the bookkeeping it keeps. The
property tests check that how the broker happens to cut its messages into frames never
changes what the client sees, and that deliveries, acks and persisted sequences match a
plain model of the protocol.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.client.errors import Disconnected, ReusedSequence, ReusedSequenceWarning
from spool.server.client.events import (
    HEARTBEAT,
    Completed,
    ConnectionFailed,
    Delivered,
    Event,
    Failed,
    Message,
    Persisted,
    PositionReported,
    QueryEnded,
    QueryRecords,
    Replied,
)
from spool.server.client.state import CLIENT_VERSION, MAX_FRAME_BYTES, SessionState, encode_body
from spool.server.protocol import errors
from spool.server.protocol.delivery import split_deliveries
from spool.server.protocol.frame import FrameError, encode_message, parse_frame

Header = dict[str, Any]


def frame(*messages: Header | tuple[Header, bytes]) -> bytes:
    """Broker messages as one frame (a bare header is a message with an empty body)."""
    out = []
    for m in messages:
        header, body = m if isinstance(m, tuple) else (m, b"")
        out.append(encode_message(header, body))
    return b"".join(out)


def ack(kind: str, cid: str | None = None, **fields: Any) -> Header:
    header: Header = {"c": "ack", "a": kind, "status": "success", **fields}
    if cid is not None:
        header["cid"] = cid
    return header


def failure(kind: str, cid: str | None, reason: str, **fields: Any) -> Header:
    return ack(kind, cid, status="failure", reason=reason, **fields)


def delivery(sids: str, body: bytes = b"{}", **fields: Any) -> tuple[Header, bytes]:
    return {"c": "publish", "t": "orders", "sids": sids, **fields}, body


def sent(state: SessionState[str]) -> list[tuple[Header, bytes]]:
    """The messages of the next outbound frame."""
    parsed = parse_frame(state.data_to_send())
    assert parsed.error is None
    return [(m.header, m.body) for m in parsed.messages]


def pairs(events: list[Event[str]]) -> list[tuple[str, Any]]:
    """Events flattened to one entry per delivered message (runs expanded); exceptions,
    which compare by identity, as their type and text."""
    out: list[tuple[str, Any]] = []
    for e in events:
        if isinstance(e, Delivered):
            out.extend(("delivered", (e.subscription, m)) for m in e.messages)
        elif isinstance(e, QueryRecords):
            out.extend(("record", (e.query, m)) for m in e.records)
        elif isinstance(e, Failed):
            out.append(("failed", (e.ack, type(e.error), str(e.error), e.subscription)))
        elif isinstance(e, ConnectionFailed):
            out.append(("connection failed", str(e.error)))
        else:
            out.append((type(e).__name__, e))
    return out


# -- commands out ------------------------------------------------------------------------


def test_everything_queued_before_a_flush_leaves_in_one_frame() -> None:
    state: SessionState[str] = SessionState("pub")
    assert state.publish("orders", b'{"n":1}') == 1
    assert state.publish("orders", b'{"n":2}', persisted=True, correlation_id="x-2") == 2
    cid = state.flush_command()
    out = sent(state)
    assert out == [
        ({"c": "publish", "t": "orders", "s": 1, "l": 7}, b'{"n":1}'),
        ({"c": "publish", "t": "orders", "s": 2, "a": "persisted", "x": "x-2", "l": 7}, b'{"n":2}'),
        ({"c": "flush", "cid": cid, "a": "processed", "l": 0}, b""),
    ]
    assert state.data_to_send() == b""
    assert state.waiting == {cid}


def test_sequence_numbers_count_up_and_an_explicit_one_moves_the_counter() -> None:
    state: SessionState[str] = SessionState("pub")
    assert state.publish("t", b"") == 1
    assert state.publish("t", b"", seq=10) == 10
    with pytest.warns(ReusedSequenceWarning, match="the broker acks it as a duplicate"):
        assert state.publish("t", b"", seq=4) == 4  # a re-send of an old number
    assert state.publish("t", b"") == 11
    assert state.publish("t", b"", auto_seq=False) == 0
    headers = [h for h, _ in sent(state)]
    assert [h.get("s") for h in headers] == [1, 10, 4, 11, None]
    cid = state.publish_command("t", b"")
    assert sent(state)[0][0] == {
        "c": "publish",
        "t": "t",
        "s": 12,
        "cid": cid,
        "a": "processed",
        "l": 0,
    }


def test_logon_subscribe_unsubscribe_and_heartbeat_headers() -> None:
    state: SessionState[str] = SessionState("me")
    logon = state.logon_command(user_id="u", password="pw", heartbeat=5.0)
    sid = state.next_sub_id()
    sub = state.subscribe_command(
        "orders", sid, filter="/qty > 1", bookmark="0", options="live", completed=True
    )
    unsub = state.unsubscribe_command("a,b")
    state.heartbeat()
    assert [h for h, _ in sent(state)] == [
        {
            "c": "logon",
            "client_name": "me",
            "version": CLIENT_VERSION,
            "user_id": "u",
            "pw": "pw",
            "hb": 5.0,
            "cid": logon,
            "a": "processed",
            "l": 0,
        },
        {
            "c": "subscribe",
            "t": "orders",
            "sub_id": sid,
            "f": "/qty > 1",
            "bm": "0",
            "o": "live",
            "cid": sub,
            "a": "processed,completed",
            "l": 0,
        },
        {"c": "unsubscribe", "sub_id": "a,b", "cid": unsub, "a": "processed", "l": 0},
        {"c": "heartbeat", "o": "beat", "l": 0},
    ]
    assert len({logon, sid, sub, unsub}) == 4


def test_a_command_keeps_the_cid_it_has() -> None:
    state: SessionState[str] = SessionState("me")
    assert state.command({"c": "flush", "cid": "mine"}) == "mine"
    assert state.waiting == {"mine"}


@pytest.mark.parametrize(
    ("data", "body"),
    [(b"\x00raw", b"\x00raw"), ("é text", "é text".encode()), ({"n": [1, 2]}, b'{"n":[1,2]}')],
)
def test_bodies_are_bytes_text_or_json(data: Any, body: bytes) -> None:
    assert encode_body(data) == body


# -- logon -------------------------------------------------------------------------------


def test_the_logon_ack_sets_the_sequences_and_the_logon_info() -> None:
    state: SessionState[str] = SessionState("pub")
    state.publish("t", b"")  # seq 1, queued before the logon
    cid = state.logon_command()
    events = state.receive_frame(
        frame(ack("processed", cid, client_name="pub", s=41, bm="7|41|", version="spool/1", hb=2))
    )
    assert [type(e) for e in events] == [Replied]
    assert state.logon is not None
    assert (state.logon.last_seq, state.logon.last_bookmark) == (41, "7|41|")
    assert (state.logon.version, state.logon.heartbeat) == ("spool/1", 2)
    assert (state.seq, state.persisted_seq) == (41, 41)
    assert state.publish("t", b"") == 42


def test_the_logon_ack_says_whether_failover_is_safe() -> None:
    state: SessionState[str] = SessionState("pub")
    cid = state.logon_command()
    state.receive_frame(frame(ack("processed", cid, failover="unsafe", async_links="b,c")))
    assert state.logon is not None
    assert (state.logon.failover, state.logon.async_links) == ("unsafe", ("b", "c"))
    assert not state.logon.failover_safe
    other: SessionState[str] = SessionState("pub")
    cid = other.logon_command()
    other.receive_frame(frame(ack("processed", cid, failover="safe", async_links="")))
    assert other.logon is not None and other.logon.failover_safe
    assert other.logon.async_links == ()
    plain: SessionState[str] = SessionState("pub")
    cid = plain.logon_command()
    plain.receive_frame(frame(ack("processed", cid)))  # a broker that does not replicate
    assert plain.logon is not None and plain.logon.failover is None


def test_a_logon_below_the_local_sequence_keeps_the_local_one() -> None:
    state: SessionState[str] = SessionState("pub")
    state.publish("t", b"", seq=50)
    cid = state.logon_command()
    state.receive_frame(frame(ack("processed", cid, s=3)))
    assert (state.seq, state.persisted_seq) == (50, 3)


def test_a_refused_logon_sets_nothing() -> None:
    state: SessionState[str] = SessionState("pub")
    cid = state.logon_command(password="wrong")
    (event,) = state.receive_frame(frame(failure("processed", cid, "auth failure", s=9)))
    assert isinstance(event, Replied) and not event.ack.ok
    assert state.logon is None and state.persisted_seq == 0


# -- acks --------------------------------------------------------------------------------


def test_a_command_is_answered_once_and_a_later_failure_is_asynchronous() -> None:
    state: SessionState[str] = SessionState("c")
    cid = state.flush_command()
    (first,) = state.receive_frame(frame(ack("processed", cid)))
    assert isinstance(first, Replied) and first.cid == cid and first.ack.ok
    assert state.waiting == frozenset()
    (late,) = state.receive_frame(frame(failure("processed", cid, "duplicate")))
    assert isinstance(late, Failed) and isinstance(late.error, errors.Duplicate)
    assert late.subscription is None
    assert [f.reason for f in state.failures] == ["duplicate"]


def test_completed_marks_the_subscription_and_only_a_failed_one_answers() -> None:
    state: SessionState[str] = SessionState("c")
    state.add_subscription("a", "A")
    cid = state.subscribe_command("t", "a", bookmark="0", completed=True)
    events = state.receive_frame(frame(ack("completed", cid, sub_id="a")))
    assert [type(e) for e in events] == [Completed]  # success: the processed ack answers
    assert state.waiting == {cid}
    events = state.receive_frame(frame(failure("completed", cid, "bookmark not found", sub_id="a")))
    assert [type(e) for e in events] == [Completed, Replied]
    assert state.waiting == frozenset()


def test_a_forgotten_command_is_not_answered() -> None:
    state: SessionState[str] = SessionState("c")
    cid = state.flush_command()
    state.forget(cid)
    assert state.receive_frame(frame(ack("processed", cid))) == []
    (event,) = state.receive_frame(frame(failure("processed", cid, "txlog full")))
    assert isinstance(event, Failed) and isinstance(event.error, errors.TxlogFull)


def test_a_failure_naming_a_subscription_reaches_it_with_its_typed_error() -> None:
    state: SessionState[str] = SessionState("c")
    state.add_subscription("a", "A")
    done, event = state.receive_frame(
        frame(failure("completed", "99", "bookmark not found", sub_id="a", detail="gone"))
    )
    assert isinstance(done, Completed) and done.subscription == "A"
    assert isinstance(event, Failed) and event.subscription == "A"
    assert isinstance(event.error, errors.BookmarkNotFound)
    assert event.error.detail == "gone"


def test_persisted_acks_report_positions_and_failures() -> None:
    state: SessionState[str] = SessionState("c")
    state.add_subscription("a", "A")
    events = state.receive_frame(
        frame(
            ack("persisted", sub_id="a", bm="5|9|"),
            ack("persisted", sub_id="gone", bm="5|10|"),
            failure("persisted", None, "txlog full", s=3),
            ack("persisted", s=2),
        )
    )
    position, failed, persisted = events
    assert position == PositionReported("A", "5|9|")
    assert isinstance(failed, Failed) and isinstance(failed.error, errors.TxlogFull)
    assert failed.ack.header["s"] == 3
    assert persisted == Persisted(2)
    assert state.persisted_seq == 2


def test_a_failure_says_which_sequences_are_not_persisted_until_a_success_covers_them() -> None:
    """A ``persisted`` failure (the broker's log refuses writes) or a refused publish with
    its ``s`` tells ``wait_persisted`` at once; a ``duplicate`` does not (it is persisted);
    a later success covering the sequence supersedes the failure."""
    state: SessionState[str] = SessionState("c")
    state.receive_frame(frame(ack("persisted", s=4)))
    assert state.not_persisted(5) is None
    state.receive_frame(frame(failure("persisted", None, "txlog full", s=8)))
    assert state.not_persisted(4) is None  # acked before
    failed = state.not_persisted(5)
    assert failed is not None and failed.reason == "txlog full"
    assert state.not_persisted(9) is None  # not covered by that failure
    state.receive_frame(frame(failure("processed", None, "txlog full", s=9)))
    assert state.not_persisted(9) is not None
    state.receive_frame(frame(failure("processed", None, "duplicate", s=12)))
    assert state.not_persisted(12) is None
    state.receive_frame(frame(ack("persisted", s=8)))  # written after all
    assert state.not_persisted(6) is None and state.not_persisted(9) is not None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), max_size=30))
def test_persisted_acks_are_conflated_to_the_highest_sequence(seqs: list[int]) -> None:
    state: SessionState[str] = SessionState("c")
    seen = 0
    expected = []
    for s in seqs:
        if s > seen:
            seen = s
            expected.append(Persisted(s))
    events = state.receive_frame(frame(*(ack("persisted", s=s) for s in seqs))) if seqs else []
    assert events == expected
    assert state.persisted_seq == seen


# -- deliveries --------------------------------------------------------------------------


def test_deliveries_are_routed_by_sub_id() -> None:
    state: SessionState[str] = SessionState("c")
    state.add_subscription("a", "A")
    state.add_subscription("b", "B")
    events = state.receive_frame(
        frame(delivery("a,x,b", b'{"n":1}', bm="1|2|", ts="20250101T000000.000001Z", x="corr"))
    )
    message = Message(
        topic="orders",
        data=b'{"n":1}',
        sub_ids=("a", "x", "b"),
        bookmark="1|2|",
        timestamp="20250101T000000.000001Z",
        correlation_id="corr",
        header={
            "c": "publish",
            "t": "orders",
            "sids": "a,x,b",
            "bm": "1|2|",
            "ts": "20250101T000000.000001Z",
            "x": "corr",
            "l": 7,
        },
    )
    assert events == [Delivered("A", [message]), Delivered("B", [message])]
    assert message.json() == {"n": 1}


def test_consecutive_deliveries_share_an_event_until_something_else_comes() -> None:
    state: SessionState[str] = SessionState("c")
    state.add_subscription("a", "A")
    state.add_subscription("b", "B")
    events = state.receive_frame(
        frame(
            delivery("a", b"1"),
            delivery("a", b"2"),
            delivery("nobody", b"-"),
            delivery("a", b"3"),
            {"c": "heartbeat"},
            delivery("a", b"4"),
            delivery("b", b"5"),
            delivery("a", b"6"),
        )
    )
    shape = [
        (e.subscription, [m.data for m in e.messages]) if isinstance(e, Delivered) else e
        for e in events
    ]
    assert shape == [
        ("A", [b"1", b"2", b"3"]),
        HEARTBEAT,
        ("A", [b"4"]),
        ("B", [b"5"]),
        ("A", [b"6"]),
    ]


def test_removed_subscriptions_receive_nothing_more() -> None:
    state: SessionState[str] = SessionState("c")
    for sid in "abc":
        state.add_subscription(sid, sid.upper())
    assert state.add_subscription("a", "A2") == "A"  # a replace hands back the old handle
    assert state.remove_subscriptions(" b , zz") == ["B"]
    assert state.remove_subscription("c") == "C"
    assert state.receive_frame(frame(delivery("b"), delivery("c"))) == []
    assert state.remove_subscriptions("all") == ["A2"]
    assert dict(state.subscriptions) == {}


# -- failures of the connection ----------------------------------------------------------


def test_a_malformed_frame_ends_the_stream_after_the_good_messages() -> None:
    state: SessionState[str] = SessionState("c")
    state.add_subscription("a", "A")
    cid = state.flush_command()
    good = frame(delivery("a", b"1"), ack("processed", cid))
    events = state.receive_frame(good + b'{"c":"publish","l":99}short')
    assert [type(e) for e in events] == [Delivered, Replied, ConnectionFailed]
    failed = events[-1]
    assert isinstance(failed, ConnectionFailed) and isinstance(failed.error, FrameError)
    assert state.error is failed.error
    assert state.receive_frame(frame(delivery("a", b"2"))) == []


def test_after_the_connection_is_lost_commands_raise_with_its_reason() -> None:
    state: SessionState[str] = SessionState("c")
    state.flush_command()
    state.connection_lost("name in use", 1008)
    state.connection_lost("second call changes nothing", 1000)
    assert state.lost and state.waiting == frozenset()
    with pytest.raises(Disconnected) as info:
        state.publish("t", b"")
    assert (info.value.reason, info.value.code) == ("name in use", 1008)
    with pytest.raises(Disconnected):
        state.flush_command()
    assert state.waiting == frozenset()
    assert state.seq == 1  # the sequence was taken before the send failed, as before


# -- properties --------------------------------------------------------------------------

SUB_IDS = ["a", "b", "c"]
KNOWN = {"bad filter", "duplicate", "not entitled", "txlog full"}


@st.composite
def broker_messages(draw: st.DrawFn) -> list[tuple[Header, bytes]]:
    """A stream of broker messages: deliveries to known and unknown subscriptions, acks of
    every kind for waiting and unknown commands, positions, failures and heartbeats."""
    sids = st.lists(st.sampled_from([*SUB_IDS, "zz"]), min_size=1, max_size=3).map(",".join)
    cids = st.sampled_from(["1", "2", "3", "4", "77"])
    one = st.one_of(
        st.builds(delivery, sids, st.binary(max_size=20), bm=st.text(max_size=8)),
        st.builds(lambda k, c: (ack(k, c), b""), st.sampled_from(["processed", "completed"]), cids),
        st.builds(
            lambda k, c, s, r: (failure(k, c, r, sub_id=s), b""),
            st.sampled_from(["processed", "completed"]),
            cids,
            st.sampled_from([*SUB_IDS, "zz"]),
            st.sampled_from(["bad filter", "duplicate", "not entitled", "no such reason"]),
        ),
        st.builds(lambda s: (ack("persisted", s=s), b""), st.integers(0, 100)),
        st.builds(
            lambda s: (failure("persisted", None, "txlog full", s=s), b""), st.integers(0, 9)
        ),
        st.builds(lambda s: (ack("persisted", sub_id=s, bm="p"), b""), st.sampled_from(SUB_IDS)),
        st.builds(lambda s: (ack("completed", None, sub_id=s), b""), st.sampled_from(SUB_IDS)),
        st.just(({"c": "heartbeat"}, b"")),
        st.builds(
            lambda s, r: ({"c": "oof", "t": "orders", "sids": s, "k": "1", "reason": r}, b"o"),
            sids,
            st.sampled_from(["match", "deleted"]),
        ),
        st.builds(
            lambda q, b: ({"c": "sow", "t": "orders", "qid": q, "k": "k"}, b),
            st.sampled_from(["q1", "qz"]),
            st.binary(max_size=5),
        ),
        st.builds(lambda q: ({"c": "group_end", "qid": q}, b""), st.sampled_from(["q1", "qz"])),
    )
    return draw(st.lists(one, max_size=40))


def fresh_state() -> SessionState[str]:
    state: SessionState[str] = SessionState("c")
    for sid in SUB_IDS:
        state.add_subscription(sid, sid.upper())
    state.add_query("q1", "Q1")
    for _ in range(4):
        state.flush_command()  # cids 1..4 wait
    state.data_to_send()
    return state


def bookkeeping(state: SessionState[str]) -> tuple[Any, ...]:
    return state.persisted_seq, state.waiting, [f.header for f in state.failures]


@settings(max_examples=300, deadline=None)
@given(broker_messages(), st.data())
def test_any_split_into_frames_gives_the_same_events(
    messages: list[tuple[Header, bytes]], data: st.DataObject
) -> None:
    whole = fresh_state()
    events_whole = whole.receive_frame(frame(*messages)) if messages else []
    cuts = (
        sorted(data.draw(st.sets(st.integers(1, len(messages) - 1)))) if len(messages) > 1 else []
    )
    split = fresh_state()
    events_split: list[Event[str]] = []
    for start, end in zip([0, *cuts], [*cuts, len(messages)], strict=True):
        if start < end:
            events_split.extend(split.receive_frame(frame(*messages[start:end])))
    assert pairs(events_split) == pairs(events_whole)
    assert bookkeeping(split) == bookkeeping(whole)


@settings(max_examples=300, deadline=None)
@given(broker_messages())
def test_events_follow_a_model_of_the_protocol(messages: list[tuple[Header, bytes]]) -> None:
    """Every delivery reaches each known subscription it names, in order; every waiting
    command is answered at most once; the persisted sequence is the highest acked."""
    state = fresh_state()
    events = state.receive_frame(frame(*messages)) if messages else []
    got = pairs(events)
    expected_deliveries = [
        (sid.upper(), h["sids"], body, h["c"])
        for h, body in messages
        if h["c"] in ("publish", "oof")
        for sid in h["sids"].split(",")
        if sid in SUB_IDS
    ]
    delivered = [
        (v[0], v[1].header["sids"], v[1].data, v[1].command)
        for kind, v in got
        if kind == "delivered"
    ]
    assert delivered == expected_deliveries
    # query records reach the query registered under their qid, in order; others are not
    expected_records = [body for h, body in messages if h["c"] == "sow" and h["qid"] == "q1"]
    records = [m.data for e in events if isinstance(e, QueryRecords) for m in e.records]
    assert records == expected_records
    assert all((isinstance(e, QueryRecords) and e.query == "Q1") or not isinstance(e, QueryRecords)
               for e in events)  # fmt: skip
    ends = [e.query for e in events if isinstance(e, QueryEnded)]
    assert ends == ["Q1"] * sum(
        1 for h, _ in messages if h["c"] == "group_end" and h["qid"] == "q1"
    )
    replied = [e.cid for e in events if isinstance(e, Replied)]
    assert len(replied) == len(set(replied)) and set(replied) <= {"1", "2", "3", "4"}
    assert state.waiting == {"1", "2", "3", "4"} - set(replied)
    persisted = [
        h["s"]
        for h, _ in messages
        if h.get("a") == "persisted" and "s" in h and h["status"] == "success"
    ]
    assert state.persisted_seq == max(persisted, default=0)
    failed = [e for e in events if isinstance(e, Failed)]
    assert [e.ack for e in failed] == state.failures
    assert all(
        e.error.reason == (e.ack.reason if e.ack.reason in KNOWN else "invalid message")
        for e in failed
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["t1", "t2"]), st.binary(max_size=30), st.booleans()),
        max_size=20,
    ),
    st.data(),
)
def test_outbound_frames_hold_every_command_once_in_order(
    publishes: list[tuple[str, bytes, bool]], data: st.DataObject
) -> None:
    state: SessionState[str] = SessionState("p")
    frames: list[bytes] = []
    for topic, body, flush_after in publishes:
        state.publish(topic, body)
        if flush_after:
            frames.append(state.data_to_send())
    frames.append(state.data_to_send())
    got = [
        (m.header["t"], m.header["s"], m.body) for f in frames if f for m in parse_frame(f).messages
    ]
    assert got == [(t, i, b) for i, (t, b, _) in enumerate(publishes, start=1)]
    assert all(f for f in frames[:-1])  # a flush after a publish always has something


@st.composite
def replay_frames(draw: st.DrawFn) -> list[tuple[Header, bytes]]:
    """Frames shaped like a replay (runs of deliveries to one subscription), sometimes with
    another subscription, a second sub id, an unknown one or an ack among them."""
    sid = draw(st.sampled_from([*SUB_IDS, "zz"]))
    n = draw(st.integers(min_value=1, max_value=30))
    messages = [delivery(sid, draw(st.binary(max_size=12)), bm=f"b|{i}|") for i in range(n)]
    odd = st.one_of(
        st.builds(delivery, st.sampled_from([*SUB_IDS, "zz", f"{SUB_IDS[0]},{SUB_IDS[1]}"])),
        st.just((ack("persisted", s=3), b"")),
        st.just(({"c": "heartbeat"}, b"")),
    )
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        messages.insert(draw(st.integers(0, len(messages))), draw(odd))
    return messages


@settings(max_examples=300, deadline=None)
@given(st.one_of(replay_frames(), broker_messages()), st.booleans())
def test_the_one_subscription_fast_path_gives_the_general_events(
    messages: list[tuple[Header, bytes]], damaged: bool
) -> None:
    """``receive_frame`` takes a shortcut for a frame of deliveries to one subscription; its
    events and bookkeeping are those of the general loop (the oracle) on every frame."""
    data = frame(*messages) + (b"\xff{not a header" if damaged else b"")
    fast, general = fresh_state(), fresh_state()
    events_fast = fast.receive_frame(data)
    events_general = general._receive_items(*split_deliveries(data))
    assert pairs(events_fast) == pairs(events_general)
    assert [type(e) for e in events_fast] == [type(e) for e in events_general]  # same runs
    assert bookkeeping(fast) == bookkeeping(general)
    assert (fast.error is None) == (general.error is None)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=MAX_FRAME_BYTES + 10), min_size=1, max_size=12))
def test_frames_out_stay_under_the_limit_unless_one_message_is_larger(sizes: list[int]) -> None:
    """Publishing faster than the socket drains must not queue everything into one frame
    (21 MB from twenty ``publish_many`` of 1,000 x 1 KB), past the broker's 16 MiB
    message limit: the broker would close the connection."""
    state: SessionState[str] = SessionState("p")
    for n in sizes:
        state.publish("t", b"x" * n)
    frames = []
    while frame := state.data_to_send():
        frames.append(frame)
    got = [m for f in frames for m in parse_frame(f).messages]
    assert [len(m.body) for m in got] == sizes  # every message once, in order
    for f in frames:
        if len(f) > MAX_FRAME_BYTES:
            assert len(parse_frame(f).messages) == 1  # only a message too large alone


def test_a_reused_sequence_is_refused_or_allowed_as_configured() -> None:
    state: SessionState[str] = SessionState("pub")
    state.publish("t", b"", seq=5)
    state.reused_seq = "refuse"
    with pytest.raises(ReusedSequence) as err:
        state.publish("t", b"", seq=5)
    assert (err.value.seq, err.value.highest) == (5, 5)
    with pytest.raises(ReusedSequence):
        state.publish_keyed("t", b"", sow_key="k", seq=3)
    assert [h.get("s") for h, _ in sent(state)] == [5]  # nothing of the refused ones sent
    state.publish("t", b"", seq=6)  # above: fine
    state.reused_seq = "allow"
    state.publish("t", b"", seq=2)  # a deliberate resend: no word
    assert [h.get("s") for h, _ in sent(state)] == [6, 2]
