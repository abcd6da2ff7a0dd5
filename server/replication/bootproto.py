"""The bootstrap conversation, sans-I/O: bytes in, events and bytes out.

One :class:`BootstrapProtocol` is one end of one bootstrap: the *requester* (an empty
instance copying its first state) or the *source* (the instance it copies from). Like
:class:`~spool.server.replication.protocol.LinkProtocol`, the adapter feeds received bytes with
:meth:`~BootstrapProtocol.receive_data`, takes events with
:meth:`~BootstrapProtocol.events_received` and bytes with
:meth:`~BootstrapProtocol.data_to_send`; a malformed or out-of-order message closes the
conversation with a refusal the peer is told about, it never raises into the adapter.

The conversation (server/replication/bootframes.py has the messages)::

    requester                                   source
    bootstrap (who, credentials, topics,  --->  authenticate, check
               data types, start)
                                         <---   offer | busy (it is bootstrapping) | refuse
                                         <---   [sow]   data ... done(sow)
                                         <---   [txlog] data ... done(txlog)

A *repair* (server/replication/repair.py) is the same conversation with a ``repair``
request instead of ``bootstrap``: one phase (``txlog``), the records asked for.

States: ``HANDSHAKE`` until the offer; ``COPYING`` while records come; ``DONE`` after
``done(txlog)``; ``CLOSED`` after a refusal, a ``busy`` or a lost connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from spool.server.replication.errors import (
    LinkRefused,
    ProtocolRefusal,
    ReplicationProtocolError,
    SourceBootstrapping,
    refusal_for,
)
from spool.server.replication.frames import (
    PROTOCOL_VERSION,
    Bootstrap,
    Busy,
    Data,
    Done,
    FrameParser,
    Message,
    Offer,
    Refuse,
    Repair,
    encode,
)
from spool.server.replication.protocol import DataReceived, LinkClosed

__all__ = [
    "BootState",
    "BootstrapProtocol",
    "BootstrapRequested",
    "Finished",
    "Offered",
    "PhaseDone",
    "Role",
    "SourceBusy",
]


class Role(Enum):
    REQUESTER = "requester"
    SOURCE = "source"


class BootState(Enum):
    HANDSHAKE = "handshake"
    COPYING = "copying"
    DONE = "done"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class BootstrapRequested:
    """(source) An instance asks for a copy, or for the records its fences lost; answer
    with offer, busy or refuse."""

    request: Bootstrap | Repair


@dataclass(frozen=True, slots=True)
class Offered:
    """(requester) The source accepted; records follow."""

    offer: Offer


@dataclass(frozen=True, slots=True)
class SourceBusy:
    """(requester) The source is bootstrapping itself; the conversation is closed."""

    busy: Busy


@dataclass(frozen=True, slots=True)
class PhaseDone:
    """(requester) The SOW phase ended; the log's records follow."""

    last_seq: int


@dataclass(frozen=True, slots=True)
class Finished:
    """(requester) Everything was sent, up to the source's ``last_seq``."""

    last_seq: int


BootEvent = (
    BootstrapRequested | Offered | SourceBusy | DataReceived | PhaseDone | Finished | LinkClosed
)


class BootstrapProtocol:
    """One end of a bootstrap.

    Args:
        role: which end.

    Attributes:
        state: where the conversation is.
        phase: ``sow`` or ``txlog`` while copying (what the data messages hold).
        closed_by: the :class:`LinkClosed` event once closed.
    """

    def __init__(self, role: Role) -> None:
        self.role = role
        self.state = BootState.HANDSHAKE
        self.phase = ""
        self.closed_by: LinkClosed | None = None
        self._parser = FrameParser()
        self._out: list[bytes] = []
        self._events: list[BootEvent] = []
        self._requested = False
        self._phases: tuple[str, ...] = ()
        self._upto = 0

    # -- the adapter's interface ------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer (any split of the stream)."""
        if self.state in (BootState.CLOSED, BootState.DONE):
            return
        try:
            messages = self._parser.feed(data)
        except ReplicationProtocolError as exc:
            self._broken(str(exc))
            return
        for message in messages:
            try:
                self._handle(message)
            except ReplicationProtocolError as exc:
                self._broken(str(exc))
            if self.state in (BootState.CLOSED, BootState.DONE):
                return

    def events_received(self) -> list[BootEvent]:
        """What happened since the last call, in order."""
        events, self._events = self._events, []
        return events

    def data_to_send(self) -> bytes:
        """Bytes to write to the peer (empty when none)."""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def connection_lost(self, error: LinkRefused) -> None:
        """The transport went away."""
        if self.state not in (BootState.CLOSED, BootState.DONE):
            self._close(error, by_peer=True)

    def refuse(self, error: LinkRefused) -> None:
        """End the conversation, telling the peer why."""
        if self.state is BootState.CLOSED:
            return
        self._out.append(encode(Refuse(error.reason, error.detail)))
        self._close(error, by_peer=False)

    # -- requester --------------------------------------------------------------------

    def request(self, request: Bootstrap | Repair) -> None:
        """(requester) Ask for the copy (or the repair); the first message."""
        self._expect(Role.REQUESTER, "request")
        if self._requested:
            raise ReplicationProtocolError("the bootstrap request is sent once, first")
        self._requested = True
        self._phases = self._plan(request)
        self._out.append(encode(request))

    # -- source -----------------------------------------------------------------------

    def offer(self, offer: Offer) -> None:
        """(source) Accept the request: records follow."""
        self._expect(Role.SOURCE, "offer")
        if not self._requested or self.state is not BootState.HANDSHAKE:
            raise ReplicationProtocolError("an offer answers the request, once")
        self.state = BootState.COPYING
        self.phase = self._phases[0]
        self._out.append(encode(offer))

    def busy(self, name: str, waiting_on: list[str]) -> None:
        """(source) This instance is bootstrapping itself: come back later."""
        self._expect(Role.SOURCE, "busy")
        if self.state is not BootState.HANDSHAKE:
            raise ReplicationProtocolError("busy answers the request")
        self._out.append(encode(Busy(name, waiting_on)))
        self._close(SourceBootstrapping(f"{name!r} is bootstrapping"), by_peer=False)

    def send_data(self, upto: int, count: int, payload: bytes, *, compressed: bool) -> None:
        """(source) Records of the current phase; ``upto`` never decreases within one."""
        self._expect(Role.SOURCE, "send_data")
        if self.state is not BootState.COPYING:
            raise ReplicationProtocolError("data goes only while copying")
        if upto < self._upto:
            raise ReplicationProtocolError(f"upto went back from {self._upto} to {upto}")
        self._upto = upto
        self._out.append(encode(Data(upto, count, payload, compressed)))

    def done(self, last_seq: int) -> None:
        """(source) The current phase is complete."""
        self._expect(Role.SOURCE, "done")
        if self.state is not BootState.COPYING:
            raise ReplicationProtocolError("done ends a phase of the copy")
        self._out.append(encode(Done(self.phase, last_seq)))
        self._next_phase()

    # -- receiving ----------------------------------------------------------------------

    def _handle(self, message: Message) -> None:
        if isinstance(message, Refuse):
            self._close(refusal_for(message.reason, message.detail), by_peer=True)
        elif self.role is Role.SOURCE:
            if not isinstance(message, Bootstrap | Repair) or self._requested:
                raise ReplicationProtocolError(
                    f"a bootstrap source accepts one bootstrap request, not "
                    f"{type(message).__name__}"
                )
            if message.version != PROTOCOL_VERSION:
                raise ReplicationProtocolError(
                    f"protocol version {message.version}, this instance speaks {PROTOCOL_VERSION}"
                )
            self._requested = True
            self._phases = self._plan(message)
            self._events.append(BootstrapRequested(message))
        elif isinstance(message, Offer):
            if self.state is not BootState.HANDSHAKE:
                raise ReplicationProtocolError("an offer answers the request, once")
            self.state = BootState.COPYING
            self.phase = self._phases[0]
            self._events.append(Offered(message))
        elif isinstance(message, Busy):
            if self.state is not BootState.HANDSHAKE:
                raise ReplicationProtocolError("busy answers the request")
            self._events.append(SourceBusy(message))
            self._close(SourceBootstrapping(f"{message.name!r} is bootstrapping"), by_peer=True)
        elif isinstance(message, Data):
            if self.state is not BootState.COPYING:
                raise ReplicationProtocolError("data before the offer")
            if message.upto < self._upto:
                raise ReplicationProtocolError(
                    f"upto went back from {self._upto} to {message.upto}"
                )
            self._upto = message.upto
            self._events.append(DataReceived(message))
        elif isinstance(message, Done):
            if self.state is not BootState.COPYING or message.phase != self.phase:
                raise ReplicationProtocolError(
                    f"done({message.phase}) while copying {self.phase or 'nothing'}"
                )
            if self._next_phase():
                self._events.append(PhaseDone(message.last_seq))
            else:
                self._events.append(Finished(message.last_seq))
        else:
            raise ReplicationProtocolError(
                f"a bootstrapping instance does not accept {type(message).__name__}"
            )

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _plan(request: Bootstrap | Repair) -> tuple[str, ...]:
        """The phases, in order: the SOW first (records no longer in the log are older
        than those in it: the log's copies then win by bookmark), then the log; a
        repair's records come from the log."""
        if isinstance(request, Repair):
            return ("txlog",)
        phases = []
        if "sow" in request.data_types and not request.sow_done:
            phases.append("sow")
        if "txlog" in request.data_types:
            phases.append("txlog")
        return tuple(phases) or ("txlog",)

    def _next_phase(self) -> bool:
        """Move to the next phase; False when there is none (the copy is done)."""
        i = self._phases.index(self.phase)
        self._upto = 0
        if i + 1 < len(self._phases):
            self.phase = self._phases[i + 1]
            return True
        self.state = BootState.DONE
        return False

    def _expect(self, role: Role, what: str) -> None:
        if self.role is not role:
            raise ReplicationProtocolError(f"{what} is for the {role.value}")
        if self.state is BootState.CLOSED:
            raise ReplicationProtocolError(f"{what} on a closed bootstrap")

    def _broken(self, detail: str) -> None:
        error = ProtocolRefusal(detail)
        self._out.append(encode(Refuse(error.reason, detail)))
        self._close(error, by_peer=False)

    def _close(self, error: LinkRefused, *, by_peer: bool) -> None:
        self.state = BootState.CLOSED
        closed = LinkClosed(error, by_peer)
        self.closed_by = closed
        self._events.append(closed)
