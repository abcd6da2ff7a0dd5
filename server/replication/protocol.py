"""The replication link protocol, sans-I/O: bytes in, events and bytes out.

One :class:`LinkProtocol` is one end of one link, the *source* (which connects and
pushes records) or the *destination* (which accepts them and acks). It is a state
machine over the messages of server/replication/frames.py, in the style of the
websockets library's ``protocol.py``: the adapter feeds received bytes with
:meth:`~LinkProtocol.receive_data`, takes what happened from
:meth:`~LinkProtocol.events_received` and what to write from
:meth:`~LinkProtocol.data_to_send`, and calls the side's methods (``hello``, ``welcome``,
``start_stream``, ``send_data``, ``ack``, ``refuse``) to act. It never raises into the
adapter for what the peer sent: a malformed or out-of-order message records the error,
queues a refusal for the peer and closes (a :class:`LinkClosed` event says why).

The conversation::

    source                                  destination
    hello (name, group, credentials,  --->  authenticate, check group and name
           expected group, config)          welcome (name, group, log id,
                                     <---            holdings, config)   | refuse
    validate both configurations
    stream (resync start)             --->                               | refuse
    data (records, upto) ...          --->  record them, and once durable:
                                     <---   ack (position) ...
    refuse (reason, detail) either way closes the link

Once welcomed, either end may also send peer messages (server/replication/peerframes.py:
what it knows of the fabric); they do not change the state.

States: ``HANDSHAKE`` until the welcome is sent (destination) or received (source);
``WELCOMED`` until the stream begins; ``STREAMING``; ``CLOSED``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from spool.server.replication.errors import (
    LinkRefused,
    ProtocolRefusal,
    ReplicationProtocolError,
    refusal_for,
)
from spool.server.replication.frames import (
    PROTOCOL_VERSION,
    AckFrame,
    Data,
    FrameParser,
    Hello,
    Holdings,
    Message,
    Origins,
    PeerMessage,
    Refuse,
    Stream,
    SyncNotice,
    Welcome,
    encode,
)

__all__ = [
    "Acked",
    "Carried",
    "DataReceived",
    "Event",
    "HelloReceived",
    "LinkClosed",
    "LinkProtocol",
    "PeerReceived",
    "Side",
    "State",
    "StreamStarted",
    "SyncNoticed",
    "Welcomed",
]


@dataclass(frozen=True, slots=True)
class Carried:
    """A message of the connection's other conversation (a link carrying two: the reader
    hands it to the other end's protocol, :meth:`LinkProtocol.receive_message`)."""

    message: Message


class Side(Enum):
    SOURCE = "source"
    DESTINATION = "destination"


class State(Enum):
    HANDSHAKE = "handshake"
    WELCOMED = "welcomed"
    STREAMING = "streaming"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class HelloReceived:
    """(destination) A source introduced itself; answer with welcome or refuse."""

    hello: Hello


@dataclass(frozen=True, slots=True)
class Welcomed:
    """(source) The destination accepted; validate, then start the stream or refuse."""

    welcome: Welcome


@dataclass(frozen=True, slots=True)
class StreamStarted:
    """(destination) Validation passed on the source; records follow."""

    stream: Stream


@dataclass(frozen=True, slots=True)
class DataReceived:
    """(destination) A batch of records."""

    data: Data


@dataclass(frozen=True, slots=True)
class SyncNoticed:
    """(destination) The source says what the link's effective sync type is now."""

    effective: str


@dataclass(frozen=True, slots=True)
class PeerReceived:
    """(either end) The peer told what it knows of the fabric."""

    message: PeerMessage


@dataclass(frozen=True, slots=True)
class Acked:
    """(source) The destination made everything up to ``position`` durable."""

    position: int


@dataclass(frozen=True, slots=True)
class LinkClosed:
    """The link is closed.

    Attributes:
        error: why: a refusal (ours or the peer's) or a protocol error.
        by_peer: the peer refused (else this side did, or found the protocol broken).
    """

    error: LinkRefused
    by_peer: bool


Event = (
    HelloReceived
    | Welcomed
    | StreamStarted
    | DataReceived
    | SyncNoticed
    | Acked
    | PeerReceived
    | Carried
    | LinkClosed
)


class LinkProtocol:
    """One end of a replication link.

    Args:
        side: which end.
        channel: 0 for the conversation of the end that opened the connection, 1 for the
            one the accepting end runs back over it (its messages carry
            :data:`~spool.server.replication.frames.CHANNEL`).
        carries: this end reads the connection, and the other conversation's messages it
            reads become :class:`Carried` events (else they break the protocol).

    Attributes:
        state: where the conversation is.
        closed_by: the :class:`LinkClosed` event once closed.
    """

    def __init__(self, side: Side, *, channel: int = 0, carries: bool = False) -> None:
        self.side = side
        self.channel = channel
        self._carries = carries
        self.state = State.HANDSHAKE
        self.closed_by: LinkClosed | None = None
        self._parser = FrameParser()
        self._out: list[bytes] = []
        self._events: list[Event] = []
        self._hello_sent = False
        self._hello_received = False
        self._acked = 0
        self._upto = 0

    # -- the adapter's interface ------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer (any split of the stream)."""
        if self.state is State.CLOSED:
            return
        try:
            messages = self._parser.feed_channels(data)
        except ReplicationProtocolError as exc:
            self._broken(str(exc))
            return
        for channel, message in messages:
            if channel != self.channel:
                if self._carries:
                    self._events.append(Carried(message))
                    continue
                self._broken(f"a message of channel {channel} on a link that carries one")
                return
            self.receive_message(message)
            if self.closed_by is not None:
                return

    def receive_message(self, message: Message) -> None:
        """One message of this conversation, already read off the connection (by the
        protocol of the other conversation, which reads it)."""
        if self.state is State.CLOSED:
            return
        try:
            self._handle(message)
        except ReplicationProtocolError as exc:
            self._broken(str(exc))

    def events_received(self) -> list[Event]:
        """What happened since the last call, in order."""
        events, self._events = self._events, []
        return events

    def data_to_send(self) -> bytes:
        """Bytes to write to the peer (empty when none)."""
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def connection_lost(self, error: LinkRefused) -> None:
        """The transport went away without a refusal."""
        if self.state is not State.CLOSED:
            self._close(error, by_peer=True)

    # -- both sides -------------------------------------------------------------------

    def refuse(self, error: LinkRefused) -> None:
        """Refuse (or end) the link: tell the peer why and close."""
        if self.state is State.CLOSED:
            return
        self._out.append(self._encode(Refuse(error.reason, error.detail)))
        self._close(error, by_peer=False)

    def send_peer(self, message: PeerMessage) -> None:
        """Tell the peer what this instance knows of the fabric (once welcomed)."""
        if self.state is State.CLOSED:
            raise ReplicationProtocolError("a peer message on a closed link")
        if self.state is State.HANDSHAKE:
            raise ReplicationProtocolError("peer messages go once the link is welcomed")
        self._out.append(self._encode(message))

    # -- source -------------------------------------------------------------------------

    def hello(
        self,
        *,
        name: str,
        group: str,
        destination: str,
        expect_group: str,
        user: str | None,
        secret: str | None,
        compression: str | None,
        validation: dict[str, object],
        instance_id: str = "",
    ) -> None:
        """(source) Introduce this instance; the first message of a link."""
        self._expect(Side.SOURCE, "hello")
        if self._hello_sent or self.state is not State.HANDSHAKE:
            raise ReplicationProtocolError("hello is sent once, first")
        self._hello_sent = True
        self._out.append(
            self._encode(
                Hello(PROTOCOL_VERSION, name, group, destination, expect_group, user, secret,
                      compression, validation, instance_id)
            )
        )  # fmt: skip

    def start_stream(self, start: int, source_last: int) -> None:
        """(source) Validation passed: records from ``start`` follow."""
        self._expect(Side.SOURCE, "start_stream")
        if self.state is not State.WELCOMED:
            raise ReplicationProtocolError("the stream starts once, after the welcome")
        self.state = State.STREAMING
        self._upto = max(0, start - 1)
        self._out.append(self._encode(Stream(start, source_last)))

    def notify_sync(self, effective: str) -> None:
        """(source) Tell the destination the link's effective sync type (streaming)."""
        self._expect(Side.SOURCE, "notify_sync")
        if self.state is not State.STREAMING:
            raise ReplicationProtocolError("the sync type is told while streaming")
        self._out.append(self._encode(SyncNotice(effective)))

    def send_data(self, upto: int, count: int, payload: bytes, *, compressed: bool) -> None:
        """(source) A batch of records; ``upto`` never decreases."""
        self._expect(Side.SOURCE, "send_data")
        if self.state is not State.STREAMING:
            raise ReplicationProtocolError("data goes only while streaming")
        if upto < self._upto:
            raise ReplicationProtocolError(f"upto went back from {self._upto} to {upto}")
        self._upto = upto
        self._out.append(self._encode(Data(upto, count, payload, compressed)))

    # -- destination --------------------------------------------------------------------

    def welcome(
        self,
        *,
        name: str,
        group: str,
        log_id: str,
        holdings: Holdings,
        validation: dict[str, object],
        instance_id: str = "",
        origins: Origins | None = None,
        lost_since: int | None = None,
    ) -> None:
        """(destination) Accept the source introduced by the hello."""
        self._expect(Side.DESTINATION, "welcome")
        if not self._hello_received or self.state is not State.HANDSHAKE:
            raise ReplicationProtocolError("welcome answers the hello, once")
        self.state = State.WELCOMED
        self._out.append(
            self._encode(
                Welcome(
                    PROTOCOL_VERSION,
                    name,
                    group,
                    log_id,
                    holdings,
                    validation,
                    instance_id,
                    origins or {},
                    lost_since,
                )
            )
        )

    def ack(self, position: int) -> None:
        """(destination) Everything up to ``position`` is durable here."""
        self._expect(Side.DESTINATION, "ack")
        if self.state is not State.STREAMING:
            raise ReplicationProtocolError("acks go only while streaming")
        if position < self._acked:
            raise ReplicationProtocolError(f"ack went back from {self._acked} to {position}")
        self._acked = position
        self._out.append(self._encode(AckFrame(position)))

    # -- receiving ----------------------------------------------------------------------

    def _handle(self, message: Message) -> None:
        if isinstance(message, Refuse):
            self._close(refusal_for(message.reason, message.detail), by_peer=True)
            return
        if isinstance(message, PeerMessage):
            if self.state is State.HANDSHAKE:
                raise ReplicationProtocolError("a peer message before the welcome")
            self._events.append(PeerReceived(message))
            return
        if self.side is Side.SOURCE:
            self._handle_at_source(message)
        else:
            self._handle_at_destination(message)

    def _handle_at_source(self, message: Message) -> None:
        if isinstance(message, Welcome):
            if not self._hello_sent or self.state is not State.HANDSHAKE:
                raise ReplicationProtocolError("a welcome answers the hello, once")
            if message.version != PROTOCOL_VERSION:
                raise ReplicationProtocolError(
                    f"protocol version {message.version}, expected {PROTOCOL_VERSION}"
                )
            self.state = State.WELCOMED
            self._events.append(Welcomed(message))
        elif isinstance(message, AckFrame):
            if self.state is not State.STREAMING:
                raise ReplicationProtocolError("an ack before the stream began")
            if message.position < self._acked or message.position > self._upto:
                raise ReplicationProtocolError(
                    f"ack {message.position} outside what was sent ({self._acked}..{self._upto})"
                )
            self._acked = message.position
            self._events.append(Acked(message.position))
        else:
            raise ReplicationProtocolError(f"a source does not accept {type(message).__name__}")

    def _handle_at_destination(self, message: Message) -> None:
        if isinstance(message, Hello):
            if self._hello_received:
                raise ReplicationProtocolError("a second hello")
            self._hello_received = True
            self._events.append(HelloReceived(message))
        elif isinstance(message, Stream):
            if self.state is not State.WELCOMED:
                raise ReplicationProtocolError("the stream starts once, after the welcome")
            self.state = State.STREAMING
            self._upto = max(0, message.start - 1)
            self._events.append(StreamStarted(message))
        elif isinstance(message, Data):
            if self.state is not State.STREAMING:
                raise ReplicationProtocolError("data before the stream began")
            if message.upto < self._upto:
                raise ReplicationProtocolError(
                    f"upto went back from {self._upto} to {message.upto}"
                )
            self._upto = message.upto
            self._events.append(DataReceived(message))
        elif isinstance(message, SyncNotice):
            if self.state is not State.STREAMING:
                raise ReplicationProtocolError("a sync notice before the stream began")
            self._events.append(SyncNoticed(message.effective))
        else:
            raise ReplicationProtocolError(
                f"a destination does not accept {type(message).__name__}"
            )

    # -- helpers ------------------------------------------------------------------------

    def _expect(self, side: Side, what: str) -> None:
        if self.side is not side:
            raise ReplicationProtocolError(f"{what} is for the {side.value}")
        if self.state is State.CLOSED:
            raise ReplicationProtocolError(f"{what} on a closed link")

    def _broken(self, detail: str) -> None:
        """The peer broke the protocol: tell it, and close."""
        error = ProtocolRefusal(detail)
        self._out.append(self._encode(Refuse(error.reason, detail)))
        self._close(error, by_peer=False)

    def _encode(self, message: Message) -> bytes:
        return encode(message, self.channel)

    def _close(self, error: LinkRefused, *, by_peer: bool) -> None:
        self.state = State.CLOSED
        closed = LinkClosed(error, by_peer)
        self.closed_by = closed
        self._events.append(closed)
