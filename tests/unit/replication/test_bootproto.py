"""The bootstrap conversation as a state machine, without sockets: a requester and a
source over an in-memory byte pipe that splits the stream anywhere; the codec of its
messages; every out-of-order move refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.replication.bootproto import (
    BootState,
    BootstrapProtocol,
    BootstrapRequested,
    Finished,
    Offered,
    PhaseDone,
    Role,
    SourceBusy,
)
from spool.server.replication.errors import (
    AuthRefused,
    ProtocolRefusal,
    ReplicationProtocolError,
    SourceBootstrapping,
)
from spool.server.replication.frames import (
    PROTOCOL_VERSION,
    Bootstrap,
    Busy,
    Data,
    Done,
    FrameParser,
    Offer,
    Repair,
    RepairFence,
    encode,
    first_type,
)
from spool.server.replication.frames import MessageType as T
from spool.server.replication.protocol import DataReceived, LinkClosed


def _request(data_types: list[str], *, start: int = 0, sow_done: bool = False) -> Bootstrap:
    return Bootstrap(
        PROTOCOL_VERSION, "b", "g", "repl", "s3cret", [("orders", False), ("^md", True)],
        data_types, start, sow_done, None,
    )  # fmt: skip


_OFFER = Offer("a", "g", "L1", 1, 10, 4096, 3)


def _pipe(src: BootstrapProtocol, dst: BootstrapProtocol, cuts: list[int]) -> None:
    """Move what ``src`` queued into ``dst``, split at ``cuts``."""
    data = src.data_to_send()
    pos = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        dst.receive_data(data[pos:cut])
        pos = max(pos, cut)
    dst.receive_data(data[pos:])


@given(
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6),
    payloads=st.lists(st.binary(max_size=40), max_size=4),
    with_sow=st.booleans(),
)
def test_a_whole_copy_across_any_split(
    cuts: list[int], payloads: list[bytes], with_sow: bool
) -> None:
    requester = BootstrapProtocol(Role.REQUESTER)
    source = BootstrapProtocol(Role.SOURCE)
    kinds = ["txlog", "sow"] if with_sow else ["txlog"]
    requester.request(_request(kinds, start=5))
    _pipe(requester, source, cuts)
    (asked,) = source.events_received()
    assert isinstance(asked, BootstrapRequested)
    assert asked.request.start == 5 and asked.request.secret == "s3cret"
    source.offer(_OFFER)
    if with_sow:
        assert source.phase == "sow"
        source.send_data(0, 1, b"sow-record", compressed=False)
        source.done(0)
    assert source.phase == "txlog"
    for i, payload in enumerate(payloads):
        source.send_data(i + 1, 1, payload, compressed=False)
    source.done(len(payloads))
    assert source.state is BootState.DONE
    _pipe(source, requester, cuts)
    events = requester.events_received()
    assert isinstance(events[0], Offered) and events[0].offer == _OFFER
    got = [e.data.payload for e in events if isinstance(e, DataReceived)]
    assert got == ([b"sow-record"] if with_sow else []) + payloads
    if with_sow:
        assert any(isinstance(e, PhaseDone) for e in events)
    assert events[-1] == Finished(len(payloads))
    assert requester.state is BootState.DONE


def test_resuming_after_the_sow_phase_skips_it() -> None:
    source = BootstrapProtocol(Role.SOURCE)
    source.receive_data(encode(_request(["txlog", "sow"], sow_done=True)))
    source.events_received()
    source.offer(_OFFER)
    assert source.phase == "txlog"


def test_busy_carries_who_the_source_waits_on_and_closes() -> None:
    requester = BootstrapProtocol(Role.REQUESTER)
    source = BootstrapProtocol(Role.SOURCE)
    requester.request(_request(["txlog"]))
    _pipe(requester, source, [])
    source.events_received()
    source.busy("a", ["b"])
    assert source.state is BootState.CLOSED
    _pipe(source, requester, [])
    busy, closed = requester.events_received()
    assert busy == SourceBusy(Busy("a", ["b"]))
    assert isinstance(closed, LinkClosed) and isinstance(closed.error, SourceBootstrapping)


def test_a_refusal_reaches_the_requester_with_its_class() -> None:
    requester = BootstrapProtocol(Role.REQUESTER)
    source = BootstrapProtocol(Role.SOURCE)
    requester.request(_request(["txlog"]))
    _pipe(requester, source, [])
    source.refuse(AuthRefused("unknown user"))
    _pipe(source, requester, [])
    (closed,) = requester.events_received()
    assert isinstance(closed, LinkClosed) and closed.by_peer
    assert isinstance(closed.error, AuthRefused) and closed.error.detail == "unknown user"


@pytest.mark.parametrize(
    "message",
    [
        Data(1, 1, b"x"),  # data before the offer
        Done("txlog", 3),  # done before the offer
        Bootstrap(
            PROTOCOL_VERSION, "x", "g", None, None, [("t", False)], ["txlog"], 0, False, None
        ),
    ],
)
def test_a_requester_refuses_out_of_order_messages(message: Data | Done | Bootstrap) -> None:
    requester = BootstrapProtocol(Role.REQUESTER)
    requester.request(_request(["txlog"]))
    requester.data_to_send()
    requester.receive_data(encode(message))
    (closed,) = requester.events_received()
    assert isinstance(closed, LinkClosed) and isinstance(closed.error, ProtocolRefusal)
    assert not closed.by_peer
    assert first_type(requester.data_to_send()) == T.REFUSE


def test_a_done_of_the_wrong_phase_is_refused() -> None:
    requester = BootstrapProtocol(Role.REQUESTER)
    requester.request(_request(["txlog", "sow"]))
    requester.receive_data(encode(_OFFER) + encode(Done("txlog", 9)))
    events = requester.events_received()
    assert isinstance(events[-1], LinkClosed) and "done(txlog) while copying sow" in str(
        events[-1].error
    )


def test_a_source_takes_one_request_of_its_version() -> None:
    source = BootstrapProtocol(Role.SOURCE)
    old = _request(["txlog"])
    source.receive_data(
        encode(Bootstrap(9, old.name, old.group, None, None, old.topics, ["txlog"], 0, False, None))
    )
    (closed,) = source.events_received()
    assert isinstance(closed, LinkClosed) and "protocol version 9" in str(closed.error)
    source = BootstrapProtocol(Role.SOURCE)
    source.receive_data(encode(_request(["txlog"])) + encode(_request(["txlog"])))
    events = source.events_received()
    assert isinstance(events[0], BootstrapRequested) and isinstance(events[1], LinkClosed)


def test_the_wrong_side_cannot_act() -> None:
    source = BootstrapProtocol(Role.SOURCE)
    with pytest.raises(ReplicationProtocolError):
        source.request(_request(["txlog"]))
    with pytest.raises(ReplicationProtocolError):
        source.offer(_OFFER)  # nothing was requested
    requester = BootstrapProtocol(Role.REQUESTER)
    with pytest.raises(ReplicationProtocolError):
        requester.send_data(1, 1, b"", compressed=False)


@given(
    st.builds(
        Bootstrap,
        version=st.integers(0, 5),
        name=st.text(max_size=8),
        group=st.text(max_size=8),
        user=st.none() | st.text(max_size=8),
        secret=st.none() | st.text(max_size=8),
        topics=st.lists(st.tuples(st.text(max_size=8), st.booleans()), min_size=1, max_size=3),
        data_types=st.sampled_from([["txlog"], ["sow"], ["txlog", "sow"]]),
        start=st.integers(0, 2**62),
        sow_done=st.booleans(),
        compression=st.sampled_from([None, "zstd"]),
    )
    | st.builds(Offer, st.text(max_size=8), st.text(max_size=8), st.text(max_size=8),
                *[st.integers(0, 2**62)] * 4)
    | st.builds(Done, st.sampled_from(["sow", "txlog"]), st.integers(0, 2**62))
    | st.builds(Busy, st.text(max_size=8), st.lists(st.text(max_size=8), max_size=3))
)  # fmt: skip
def test_codec_round_trip(message: Bootstrap | Offer | Done | Busy) -> None:
    (back,) = FrameParser().feed(encode(message))
    assert back == message
    if isinstance(message, Bootstrap):
        assert back.secret == message.secret  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "payload",
    [
        b'{"version":1,"name":"b","group":"g","topics":[],"data_types":["txlog"],'
        b'"start":0,"sow_done":false}',
        b'{"version":1,"name":"b","group":"g","topics":[["t",false]],"data_types":["log"],'
        b'"start":0,"sow_done":false}',
        b'{"version":1,"name":"b","group":"g","topics":[["t",false]],"data_types":["txlog"],'
        b'"start":-1,"sow_done":false}',
        b'{"version":1,"name":"b","group":"g","topics":[["t"]],"data_types":["txlog"],'
        b'"start":0,"sow_done":false}',
    ],
)
def test_malformed_requests_are_protocol_errors(payload: bytes) -> None:
    frame = (len(payload) + 1).to_bytes(4, "little") + bytes([T.BOOTSTRAP]) + payload
    with pytest.raises(ReplicationProtocolError):
        FrameParser().feed(frame)


# -- a repair: the same conversation, asked with ``repair`` ------------------------------


def _repair() -> Repair:
    return Repair(
        PROTOCOL_VERSION, "a", "g", "repl", "s3cret",
        [RepairFence(1601, 3, [(7, 40, 42), (9, 1, 1)], (1_000_000, None)),
         RepairFence(9000, 1, [], (5, 10))],
        "zstd",
    )  # fmt: skip


@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6))
def test_a_repair_request_round_trips_and_is_served_in_one_phase(cuts: list[int]) -> None:
    requester = BootstrapProtocol(Role.REQUESTER)
    source = BootstrapProtocol(Role.SOURCE)
    requester.request(_repair())
    data = requester.data_to_send()
    assert first_type(data) == T.REPAIR
    requester._out.append(data)  # put it back for the pipe
    _pipe(requester, source, cuts)
    (asked,) = source.events_received()
    assert isinstance(asked, BootstrapRequested) and asked.request == _repair()
    source.offer(_OFFER)
    assert source.phase == "txlog"
    source.send_data(5, 1, b"runs", compressed=False)
    source.done(10)
    _pipe(source, requester, cuts)
    events = requester.events_received()
    assert [type(e) for e in events] == [Offered, DataReceived, Finished]
    assert requester.state is BootState.DONE


@pytest.mark.parametrize(
    ("fences", "fragment"),
    [
        ([], "1 to 1024 fenced ranges"),
        (
            [{"first_seq": 1, "records": 1, "intervals": [[7, 5, 4]], "window": [0, None]}],
            "[pub_hash, first, last]",
        ),
        (
            [{"first_seq": 1, "records": 1, "intervals": [[7, -1, 4]], "window": [0, None]}],
            "[pub_hash, first, last]",
        ),
        ([{"first_seq": 1, "records": 1, "intervals": [], "window": [0]}], "'window'"),
        ([{"first_seq": -1, "records": 1, "intervals": [], "window": [0, None]}], "first_seq"),
        ([[1, 2]], "a repair fence is an object"),
    ],
)
def test_a_malformed_repair_request_is_refused_with_what_is_wrong(
    fences: list[object], fragment: str
) -> None:
    import orjson

    payload = orjson.dumps({"version": PROTOCOL_VERSION, "name": "a", "group": "g",
                            "fences": fences})  # fmt: skip
    frame = (len(payload) + 1).to_bytes(4, "little")
    source = BootstrapProtocol(Role.SOURCE)
    source.receive_data(frame + bytes([T.REPAIR]) + payload)
    (closed,) = source.events_received()
    assert isinstance(closed, LinkClosed) and isinstance(closed.error, ProtocolRefusal)
    assert fragment in closed.error.detail
