"""The link protocol as a state machine: a source and a destination over an in-memory
byte pipe that splits the stream anywhere, driven through every legal and illegal move."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from spool.server.replication.errors import (
    GroupMismatch,
    ProtocolRefusal,
    ReplicationProtocolError,
    ValidationReported,
)
from spool.server.replication.protocol import (
    Acked,
    DataReceived,
    HelloReceived,
    LinkClosed,
    LinkProtocol,
    Side,
    State,
    StreamStarted,
    Welcomed,
)


def _hello(src: LinkProtocol) -> None:
    src.hello(
        name="a", group="g", destination="b", expect_group="g", user=None, secret=None,
        compression=None, validation={"topics": []},
    )  # fmt: skip


def _welcome(dst: LinkProtocol) -> None:
    dst.welcome(name="b", group="g", log_id="L", holdings={7: (5, [(2, 3)])}, validation={})


class LinkMachine(RuleBasedStateMachine):
    """Both ends, with the bytes between them delivered in arbitrary pieces."""

    def __init__(self) -> None:
        super().__init__()
        self.src = LinkProtocol(Side.SOURCE)
        self.dst = LinkProtocol(Side.DESTINATION)
        self.to_dst = b""
        self.to_src = b""
        self.sent: list[tuple[int, int, bytes]] = []
        self.received: list[tuple[int, int, bytes]] = []
        self.acks_sent: list[int] = []
        self.acks_seen: list[int] = []
        self.upto = 0
        self.durable = 0
        self.closed: list[LinkClosed] = []

    def _pump(self, data: st.DataObject) -> None:
        for _ in range(4):
            out = self.src.data_to_send()
            self.to_dst += out
            out = self.dst.data_to_send()
            self.to_src += out
            if self.to_dst:
                n = data.draw(st.integers(0, len(self.to_dst)))
                self.dst.receive_data(self.to_dst[:n])
                self.to_dst = self.to_dst[n:]
            if self.to_src:
                n = data.draw(st.integers(0, len(self.to_src)))
                self.src.receive_data(self.to_src[:n])
                self.to_src = self.to_src[n:]
            self._collect()

    def _flush(self) -> None:
        """Deliver everything in flight (both ways) until nothing moves."""
        while True:
            self.to_dst += self.src.data_to_send()
            self.to_src += self.dst.data_to_send()
            if not self.to_dst and not self.to_src:
                return
            self.dst.receive_data(self.to_dst)
            self.src.receive_data(self.to_src)
            self.to_dst = self.to_src = b""
            self._collect()

    def _collect(self) -> None:
        for side in (self.src, self.dst):
            for event in side.events_received():
                if isinstance(event, HelloReceived):
                    assert side is self.dst and event.hello.name == "a"
                elif isinstance(event, Welcomed):
                    assert side is self.src and event.welcome.holdings == {7: (5, [(2, 3)])}
                elif isinstance(event, StreamStarted):
                    assert side is self.dst
                elif isinstance(event, DataReceived):
                    d = event.data
                    self.received.append((d.upto, d.count, d.payload))
                elif isinstance(event, Acked):
                    self.acks_seen.append(event.position)
                elif isinstance(event, LinkClosed):
                    self.closed.append(event)

    @rule(data=st.data())
    def deliver_some(self, data: st.DataObject) -> None:
        self._pump(data)

    @precondition(lambda self: self.src.state is State.HANDSHAKE and not self.src._hello_sent)
    @rule()
    def hello(self) -> None:
        _hello(self.src)

    @precondition(lambda self: self.dst.state is State.HANDSHAKE and self.dst._hello_received)
    @rule()
    def welcome(self) -> None:
        _welcome(self.dst)

    @precondition(lambda self: self.src.state is State.WELCOMED)
    @rule()
    def stream(self) -> None:
        self.src.start_stream(1, 10)

    @precondition(lambda self: self.src.state is State.STREAMING)
    @rule(step=st.integers(0, 5), payload=st.binary(max_size=20))
    def data(self, step: int, payload: bytes) -> None:
        self.upto += step
        self.src.send_data(self.upto, len(payload), payload, compressed=False)
        self.sent.append((self.upto, len(payload), payload))

    @precondition(lambda self: self.dst.state is State.STREAMING and self.received)
    @rule()
    def ack(self) -> None:
        position = self.received[-1][0]
        if position >= self.durable:
            self.durable = position
            self.dst.ack(position)
            self.acks_sent.append(position)

    @precondition(lambda self: self.dst.state is State.HANDSHAKE and self.dst._hello_received)
    @rule()
    def destination_refuses(self) -> None:
        self.dst.refuse(GroupMismatch("source expects group 'x', this instance is 'g'"))
        self._flush()
        assert self.src.state is State.CLOSED
        closed = self.src.closed_by
        assert closed is not None and closed.by_peer and isinstance(closed.error, GroupMismatch)
        assert "group 'x'" in closed.error.detail

    @precondition(lambda self: self.src.state is State.WELCOMED)
    @rule()
    def source_refuses_validation(self) -> None:
        self.src.refuse(ValidationReported("[txlog] 'orders': ..."))
        self._flush()
        assert self.dst.state is State.CLOSED
        closed = self.dst.closed_by
        assert closed is not None and isinstance(closed.error, ValidationReported)

    @precondition(lambda self: self.dst.state is not State.CLOSED)
    @rule(garbage=st.sampled_from([b"\x00\x00\x00\x00\x01", b"\x02\x00\x00\x00\x09x"]))
    def garbage_to_destination(self, garbage: bytes) -> None:
        self._flush()
        self.dst.receive_data(garbage)
        self._flush()
        assert self.dst.state is State.CLOSED and self.src.state is State.CLOSED
        closed = self.src.closed_by
        assert closed is not None and isinstance(closed.error, ProtocolRefusal)

    @invariant()
    def what_arrives_was_sent_in_order(self) -> None:
        assert self.received == self.sent[: len(self.received)]
        assert self.acks_seen == self.acks_sent[: len(self.acks_seen)]

    @invariant()
    def a_closed_end_sends_nothing_more(self) -> None:
        for side in (self.src, self.dst):
            if side.state is State.CLOSED:
                assert side.closed_by is not None

    def teardown(self) -> None:
        if self.src.state is not State.CLOSED and self.dst.state is not State.CLOSED:
            self._flush()
            assert self.received == self.sent
            assert self.acks_seen == self.acks_sent


TestLinkMachine = LinkMachine.TestCase
TestLinkMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_out_of_order_messages_close_the_link_with_a_protocol_error() -> None:
    src, dst = LinkProtocol(Side.SOURCE), LinkProtocol(Side.DESTINATION)
    _hello(src)
    dst.receive_data(src.data_to_send())
    _welcome(dst)
    src.receive_data(dst.data_to_send())
    # data before the stream began
    fake = LinkProtocol(Side.SOURCE)
    fake.state = State.STREAMING
    fake.send_data(5, 0, b"", compressed=False)
    dst.receive_data(fake.data_to_send())
    assert dst.state is State.CLOSED
    (event,) = [e for e in dst.events_received() if isinstance(e, LinkClosed)]
    assert isinstance(event.error, ProtocolRefusal) and "before the stream" in event.error.detail
    src.receive_data(dst.data_to_send())
    assert src.state is State.CLOSED


def test_an_ack_beyond_what_was_sent_is_a_protocol_error() -> None:
    src, dst = LinkProtocol(Side.SOURCE), LinkProtocol(Side.DESTINATION)
    _hello(src)
    dst.receive_data(src.data_to_send())
    _welcome(dst)
    src.receive_data(dst.data_to_send())
    src.start_stream(1, 3)
    src.send_data(3, 0, b"", compressed=False)
    dst.receive_data(src.data_to_send())
    dst.ack(9)  # the destination's side does not know the source's log
    src.receive_data(dst.data_to_send())
    assert src.state is State.CLOSED
    assert src.closed_by is not None and "outside what was sent" in src.closed_by.error.detail


def test_each_side_refuses_the_other_sides_calls() -> None:
    src, dst = LinkProtocol(Side.SOURCE), LinkProtocol(Side.DESTINATION)
    with pytest.raises(ReplicationProtocolError, match="for the destination"):
        src.ack(1)
    with pytest.raises(ReplicationProtocolError, match="for the source"):
        _hello(dst)
    with pytest.raises(ReplicationProtocolError, match="welcome answers the hello"):
        _welcome(dst)
    _hello(src)
    with pytest.raises(ReplicationProtocolError, match="once, first"):
        _hello(src)
