"""The asyncio Python client of Spool: the public :class:`Client` API.

The client is three parts, so the HA client can reuse the first two as they are:

- the *connection* (:mod:`spool.server.client.connection`): one websocket, bytes in and out,
  the reader, writer and heartbeat tasks; no protocol knowledge;
- the *session state* (:mod:`spool.server.client.state`, sans-I/O): frames in, events out;
  commands encoded and batched into frames; command ids, waiting commands, subscriptions
  by id, publish sequence numbers and the last persisted one;
- this module: :class:`Client` composes the two. It turns commands into futures it awaits,
  and applies the state's events to asyncio objects: acks resolve futures, deliveries go
  to a :class:`Subscription`'s queue, persisted acks wake :meth:`Client.wait_persisted`.

The package imports only ``spool.server.protocol`` and ``websockets``.

Typical use::

    async with Client("ws://127.0.0.1:9007/amps/json", "reader") as c:
        sub = await c.subscribe("orders", filter="/qty > 10", bookmark="0")
        async for msg in sub:
            print(msg.bookmark, msg.data)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Final, Unpack

from spool.server.client.buffer import EMPTY, MessageBuffer
from spool.server.client.connection import ClientTransport, Handlers
from spool.server.client.errors import ClientError, Disconnected, InvalidOption
from spool.server.client.events import (
    Ack,
    Completed,
    ConnectionFailed,
    Delivered,
    Event,
    Failed,
    FailoverSafety,
    LogonInfo,
    Message,
    Persisted,
    PositionReported,
    QueryEnded,
    QueryRecords,
    Replied,
)
from spool.server.client.options import ClientKeywords, ClientOptions, resolve
from spool.server.client.state import SessionState, encode_body, publish_options
from spool.server.protocol.errors import ProtocolFailure, failure_for
from spool.server.protocol.frame import FrameError

#: the queue item that ends a subscription's iteration (after an unsubscribe).
_END: Final = object()

#: close code and reason when the broker sent a frame the client cannot parse (RFC 6455
#: 1002, protocol error; the reason is the protocol's failure string, as the JS client).
_MALFORMED_CODE: Final = 1002
_MALFORMED_REASON: Final = "invalid message"


def _nothing() -> None:
    """``flush_soon`` before there is a transport."""


class Subscription:
    """An async iterator of the messages of one subscription; :meth:`batches` iterates
    them a run at a time.

    Attributes:
        sub_id: the subscription id.
        queue: the messages not consumed yet, in the runs they arrived in (bounded by the
            client's ``queue_size`` in messages: when it is full the client stops reading,
            and backpressure reaches the broker).
        completed: set when the broker's ``completed`` ack arrived (replay caught up).
        snapshot_done: set at the ``group_end`` of a ``sow_and_subscribe`` snapshot (its
            ``sow`` records come first in the iteration, then live messages).
        position_bookmark: the last durable position the broker reported for it.
    """

    def __init__(self, client: Client, sub_id: str, maxsize: int) -> None:
        self.client = client
        self.sub_id = sub_id
        self.queue = MessageBuffer(maxsize)
        self.completed = asyncio.Event()
        self.snapshot_done = asyncio.Event()
        self.position_bookmark: str | None = None
        self.acks: list[Ack] = []

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        take = self.queue.take
        while True:
            item = take()
            if item is EMPTY:
                item = await self.queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, Message)
            yield item

    async def batches(self) -> AsyncIterator[Sequence[Message]]:
        """The messages a run at a time: each batch holds the consecutive deliveries of
        one frame for this subscription (up to thousands during a replay), in order.

        Ends like the per-message iteration (after an unsubscribe; raises what ended the
        subscription). Mixing both iterations is fine: a batch starts where the other
        left off.
        """
        while True:
            item = await self.queue.get_batch()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, list)
            yield item

    async def get(self, timeout: float | None = None) -> Message:
        """The next message (raises TimeoutError after ``timeout``)."""
        item = await asyncio.wait_for(self.queue.get(), timeout)
        if item is _END:
            raise Disconnected("subscription ended")
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, Message)
        return item

    async def unsubscribe(self) -> None:
        await self.client.unsubscribe(self.sub_id)

    def _end(self, item: BaseException | object) -> None:
        """Queue the last item (the end marker or the exception that ended it) after every
        message already queued, without blocking."""
        self.queue.put_end(item)


@dataclass(slots=True)
class SowResult:
    """The answer to a ``sow`` query.

    Attributes:
        records: the records, in the broker's order (``Message.command`` is ``sow``,
            ``Message.key`` the SOW key).
        matches: how many records matched the filter.
        returned: how many were returned (``top_n`` applied).
    """

    records: list[Message]
    matches: int
    returned: int


class Client:
    """Asyncio client for one broker connection.

    Args:
        url: ``ws://host:port/amps/json``, or ``wss://`` on a TLS listener (the broker's
            certificate is verified: against the ``ssl`` option's CAs, else the system's).
        name: client name (unique per instance; it is the publisher identity).
        options: how to connect and log on (:class:`ClientOptions`: credentials, TLS,
            heartbeat, timeouts, buffer sizes; docs/python-client.md "Options").
        **keywords: the same options as keyword arguments (``heartbeat=1.0``), instead
            of ``options``.

    Raises:
        InvalidOption: an option out of its range, or ``options`` and option keywords
            both given.
        ClientError: the ``ssl`` option given for a ``ws://`` URL.
    """

    def __init__(
        self,
        url: str,
        name: str,
        *,
        options: ClientOptions | None = None,
        **keywords: Unpack[ClientKeywords],
    ) -> None:
        opts = resolve(options, keywords)
        if opts.ssl is not None and not url.lower().startswith("wss://"):
            raise ClientError(f"a TLS context needs a wss:// URL, not {url!r}")
        self.url = url
        self.name = name
        #: the options given (a heartbeat set later by :meth:`set_heartbeat` replaces its own)
        self.options = opts
        self._state: SessionState[Subscription] = SessionState(name)
        self._state.reused_seq = opts.reused_seq
        self._conn: ClientTransport | None = None
        #: the transport's ``flush_soon`` once connected; before that, commands only queue.
        self._flush_soon: Callable[[], None] = _nothing
        self._waiters: dict[str, asyncio.Future[Ack]] = {}
        self._persisted = asyncio.Condition()
        self._notify: asyncio.Task[None] | None = None
        self.closed = asyncio.Event()
        self.close_reason: str = ""
        self.close_code: int | None = None
        #: called with every event of the session but deliveries, after the client applied
        #: it (the HA client's hook: persisted acks trim its publish store, durable
        #: positions reach its bookmark store, failures its exception listener)
        self.event_hook: Callable[[Event[Subscription]], None] | None = None

    # -- session values (kept by the session state) --------------------------------------

    @property
    def seq(self) -> int:
        """The last sequence number given to a publish."""
        return self._state.seq

    @seq.setter
    def seq(self, value: int) -> None:
        self._state.seq = value

    @property
    def persisted_seq(self) -> int:
        """The highest sequence number the broker acked as persisted."""
        return self._state.persisted_seq

    @property
    def replicated_seq(self) -> int:
        """The highest sequence number the broker acked as replicated on this connection
        (the logon option ``replicated``)."""
        return self._state.replicated_seq

    @property
    def safety(self) -> FailoverSafety | None:
        """The safety of failing over from the broker: the logon ack's, then the latest
        ``failover`` notice's (None: the broker does not replicate)."""
        return self._state.safety

    @property
    def failures(self) -> list[Ack]:
        """Failure acks no command waited for (refused fire-and-forget publishes, ...)."""
        return self._state.failures

    @property
    def logon(self) -> LogonInfo | None:
        """What the logon ack said, once connected."""
        return self._state.logon

    # -- connection ----------------------------------------------------------------------

    async def connect(self, timeout: float | None = None) -> LogonInfo:
        """Open the connection and log on, each within ``timeout`` seconds (default: the
        ``connect_timeout`` option); raises the typed failure if refused."""
        opts = self.options
        if timeout is None:
            timeout = opts.connect_timeout
        handlers = Handlers(self._frame_received, self._state.data_to_send, self._connection_lost)
        self._conn = await opts.connector(
            self.url, handlers, open_timeout=timeout, max_size=opts.max_size, ssl=opts.ssl
        )
        self._flush_soon = self._conn.flush_soon
        cid = self._state.logon_command(
            user_id=opts.user_id, password=opts.password, heartbeat=opts.heartbeat,
            options=opts.logon_options,
        )  # fmt: skip
        await self._reply(cid, timeout)
        info = self._state.logon
        assert info is not None  # a successful logon ack sets it
        if opts.heartbeat:
            self._conn.start_heartbeat(opts.heartbeat, self._beat)
        return info

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Send what is queued and close the connection."""
        if self._conn is not None:
            await self._conn.close()
        self._fail_all(Disconnected(self.close_reason or "closed by client", self.close_code))

    @property
    def last_received(self) -> float | None:
        """Event-loop time of the last frame from the broker (None before connecting)."""
        return None if self._conn is None else self._conn.last_received

    def set_heartbeat(self, interval: float) -> None:
        """Ask the broker to beat every ``interval`` seconds from now on (``heartbeat``
        with ``o=start,N``) and beat back at the same interval."""
        self.options = replace(self.options, heartbeat=interval)
        self._state.send({"c": "heartbeat", "o": f"start,{interval:g}"})
        self._flush_soon()
        if self._conn is not None:
            self._conn.start_heartbeat(interval, self._beat)

    def abandon(self, reason: str) -> None:
        """Give the connection up at once (a peer that stopped answering): every waiter
        and subscription fails with ``Disconnected(reason)`` now, and the transport is
        dropped without a closing handshake (a frozen peer would never answer one)."""
        if self.closed.is_set():
            return
        self.close_reason = reason
        self._fail_all(Disconnected(reason))
        if self._conn is not None:
            self._conn.abort()

    def _beat(self) -> None:
        if not self.closed.is_set():
            self._state.heartbeat()
            self._flush_soon()

    # -- outbound ------------------------------------------------------------------------

    async def _command(
        self,
        header: dict[str, Any],
        body: bytes = b"",
        *,
        ack: str = "processed",
        timeout: float | None = 30.0,
    ) -> Ack:
        """Send a command and wait for its ``ack`` (raises the typed failure)."""
        return await self._reply(self._state.command(header, body, ack=ack), timeout)

    async def _reply(self, cid: str, timeout: float | None) -> Ack:
        """Wait for the final ack of queued command ``cid``."""
        fut: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._waiters[cid] = fut
        self._flush_soon()
        try:
            result = await asyncio.wait_for(asyncio.shield(fut), timeout)
        finally:
            self._waiters.pop(cid, None)
            self._state.forget(cid)
        if not result.ok:
            retry = result.header.get("retry_after")
            raise failure_for(
                result.reason or "",
                str(result.header.get("detail", "")),
                float(retry) if isinstance(retry, int | float) else None,
            )
        return result

    # -- API -----------------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        data: bytes | str | Any,
        *,
        seq: int | None = None,
        persisted: bool = False,
        correlation_id: str | None = None,
        auto_seq: bool = True,
        sow_key: str | None = None,
        expiration: int | None = None,
        deliver_at: datetime | None = None,
        deliver_after: float | timedelta | None = None,
        options: str | None = None,
    ) -> int:
        """Queue a publish (sent with the next frame); returns its sequence number.

        With ``persisted`` the broker acks durability; :meth:`wait_persisted` waits for it.
        On a SOW topic, ``sow_key`` gives the record's key (topics without ``Key`` paths)
        and ``expiration`` its lifetime in seconds.

        Delayed delivery (a topic the transaction log records; docs/protocol.md "Publish
        options"): the broker stores and acks the message now and delivers it at
        ``deliver_at`` (an aware datetime, to the microsecond) or ``deliver_after``
        seconds (or a timedelta, > 0) after it takes it; one of the two. ``options`` is
        the ``o`` header as text instead (what the two produce; the HA client resends a
        stored one through it).

        Raises:
            ValueError: ``deliver_at`` with ``deliver_after`` (or either with ``options``),
                a naive ``deliver_at``, a ``deliver_after`` that is not > 0.
        """
        delayed = publish_options(deliver_at, deliver_after)
        if delayed is not None:
            if options is not None:
                raise ValueError("give options or deliver_at / deliver_after, not both")
            options = delayed
        if sow_key is not None or expiration is not None or options is not None:
            seq = self._state.publish_keyed(topic, encode_body(data), sow_key=sow_key,
                                            expiration=expiration, persisted=persisted,
                                            seq=seq, correlation_id=correlation_id,
                                            options=options)  # fmt: skip
            self._flush_soon()
            return seq
        seq = self._state.publish(
            topic,
            encode_body(data),
            seq=seq,
            persisted=persisted,
            correlation_id=correlation_id,
            auto_seq=auto_seq,
        )
        self._flush_soon()
        return seq

    def publish_many(
        self, topic: str, items: Sequence[bytes | str | Any], *, persisted: bool = False
    ) -> int:
        """Queue a publish per item (bytes, text or JSON-able), encoded in one pass and
        sent in the next frame; returns the last sequence number.

        The fast path for publishing many messages: the same as :meth:`publish` per item
        with automatic sequence numbers, but the headers are encoded once for the batch.
        """
        bodies = [d if type(d) is bytes else encode_body(d) for d in items]
        seq = self._state.publish_many(topic, bodies, persisted=persisted)
        self._flush_soon()
        return seq

    async def publish_acked(
        self, topic: str, data: bytes | str | Any, *, timeout: float = 30.0
    ) -> Ack:
        """Publish and wait for the processed ack (raises the typed failure)."""
        return await self._reply(self._state.publish_command(topic, encode_body(data)), timeout)

    async def wait_persisted(self, seq: int, timeout: float = 30.0) -> None:
        """Wait until the broker acked persistence of every publish up to ``seq``.

        Raises:
            ProtocolFailure: the broker said ``seq`` is not persisted (``txlog full`` while
                its log refuses writes, or the publish was refused): at once, not after
                ``timeout``. That failure stays the answer for ``seq`` until a later
                persisted ack covers it: the publish may still be persisted (the log
                retries), so wait for :attr:`persisted_seq` or resend from it (duplicates
                are recognised and acked as persisted).
            Disconnected: the connection closed first.
            TimeoutError: nothing decided within ``timeout``.
        """
        state = self._state

        async def _wait() -> None:
            async with self._persisted:
                await self._persisted.wait_for(
                    lambda: (
                        state.persisted_seq >= seq
                        or state.not_persisted(seq) is not None
                        or self.closed.is_set()
                    )
                )

        await asyncio.wait_for(_wait(), timeout)
        if state.persisted_seq >= seq:
            return
        failed = state.not_persisted(seq)
        if failed is not None:
            raise failure_for(failed.reason or "", str(failed.header.get("detail", "")))
        raise Disconnected(self.close_reason, self.close_code)

    async def subscribe(
        self,
        topic: str,
        *,
        filter: str | None = None,
        bookmark: str | None = None,
        options: str | None = None,
        sub_id: str | None = None,
        completed: bool = False,
        timeout: float = 30.0,
        delta: bool = False,
    ) -> Subscription:
        """Subscribe; returns once the broker processed the command (``delta``: a
        ``delta_subscribe``)."""
        sid = sub_id or self._state.next_sub_id()
        return await self._registered(
            sid,
            lambda: self._state.subscribe_command(
                topic, sid, filter=filter, bookmark=bookmark, options=options,
                completed=completed, delta=delta,
            ),
            timeout,
        )  # fmt: skip

    async def _registered(
        self, sid: str, send: Callable[[], str], timeout: float, *, query: bool = False
    ) -> Subscription:
        """Register subscription ``sid`` (and, with ``query``, its snapshot's records),
        queue its command (``send`` returns the cid) and wait for the broker's answer; on
        any failure the registration is undone (a replaced subscription comes back)."""
        sub = Subscription(self, sid, self.options.queue_size)
        replaced = self._state.add_subscription(sid, sub)
        if query:
            self._state.add_query(sid, sub)
        try:
            await self._reply(send(), timeout)
        except BaseException:
            if query:
                self._state.remove_query(sid)
            if replaced is not None:
                self._state.add_subscription(sid, replaced)
            else:
                self._state.remove_subscription(sid)
            raise
        return sub

    # -- State of the World ---------------------------------------------------------------

    def delta_publish(
        self,
        topic: str,
        data: bytes | str | Any,
        *,
        sow_key: str | None = None,
        expiration: int | None = None,
        persisted: bool = False,
        seq: int | None = None,
        correlation_id: str | None = None,
    ) -> int:
        """Queue a ``delta_publish``: the fields given are merged into the stored record
        (nested objects field by field); returns its sequence number."""
        seq = self._state.publish_keyed(topic, encode_body(data), delta=True, sow_key=sow_key,
                                        expiration=expiration, persisted=persisted,
                                        seq=seq, correlation_id=correlation_id)  # fmt: skip
        self._flush_soon()
        return seq

    async def sow(
        self,
        topic: str,
        *,
        filter: str | None = None,
        top_n: int | None = None,
        orderby: str | None = None,
        batch_size: int | None = None,
        bookmark: str | None = None,
        keys: list[str] | None = None,
        options: str | None = None,
        timeout: float = 60.0,
    ) -> SowResult:
        """Query a SOW topic (or every SOW topic a regex matches); with ``bookmark`` the
        state as of that bookmark or moment. Returns once every record arrived."""
        qid = f"q{self._state.next_cid()}"
        collector = Subscription(self, qid, 0)  # unbounded: the records are read after
        self._state.add_query(qid, collector)
        try:
            cid = self._state.sow_command(
                "sow", topic, qid, filter=filter, top_n=top_n, orderby=orderby,
                batch_size=batch_size, bookmark=bookmark, keys=keys, options=options,
                ack="stats",
            )  # fmt: skip
            ack = await self._reply(cid, timeout)
        finally:
            self._state.remove_query(qid)
        records: list[Message] = []
        queue = collector.queue
        while not queue.empty():
            item = queue.take()
            if isinstance(item, Message):
                records.append(item)
        header = ack.header
        return SowResult(records, int(header.get("matches", len(records))),
                         int(header.get("records_returned", len(records))))  # fmt: skip

    async def sow_and_subscribe(
        self,
        topic: str,
        *,
        filter: str | None = None,
        top_n: int | None = None,
        orderby: str | None = None,
        batch_size: int | None = None,
        bookmark: str | None = None,
        options: str | None = None,
        sub_id: str | None = None,
        delta: bool = False,
        timeout: float = 30.0,
    ) -> Subscription:
        """Query and subscribe in one step: iterating the subscription gives the snapshot's
        records (``command`` ``sow``), then every later change (``publish``, ``oof``), with
        none lost or doubled in between. ``delta``: ``sow_and_delta_subscribe``."""
        sid = sub_id or self._state.next_sub_id()
        return await self._registered(
            sid,
            lambda: self._state.sow_command(
                "sow_and_delta_subscribe" if delta else "sow_and_subscribe", topic, sid,
                sub_id=sid, filter=filter, top_n=top_n, orderby=orderby,
                batch_size=batch_size, bookmark=bookmark, options=options,
            ),
            timeout,
            query=True,
        )  # fmt: skip

    async def delta_subscribe(
        self,
        topic: str,
        *,
        filter: str | None = None,
        options: str | None = None,
        sub_id: str | None = None,
        timeout: float = 30.0,
    ) -> Subscription:
        """Subscribe to a SOW topic receiving only what changed in each record (plus its
        key fields); a record the subscription did not hold yet comes whole."""
        return await self.subscribe(topic, filter=filter, options=options, sub_id=sub_id,
                                    timeout=timeout, delta=True)  # fmt: skip

    async def sow_delete(
        self,
        topic: str,
        *,
        filter: str | None = None,
        keys: list[str] | None = None,
        data: bytes | str | Any | None = None,
        timeout: float = 60.0,
    ) -> int:
        """Delete SOW records by filter, by keys, or the one a message's key names;
        returns how many were deleted."""
        body = encode_body(data) if data is not None else b""
        cid = self._state.sow_delete_command(topic, filter=filter, keys=keys, data=body)
        ack = await self._reply(cid, timeout)
        return int(ack.header.get("records_deleted", 0))

    async def queue_ack(
        self,
        queue: str,
        bookmarks: Sequence[str],
        *,
        option: str | None = None,
        reason: str | None = None,
        timeout: float = 30.0,
    ) -> Ack:
        """Acknowledge queue messages by bookmark (a ``sow_delete`` with ``bm``);
        ``option`` ``cancel`` gives them back, ``expire`` drops them unprocessed,
        ``reject`` refuses them (``reason``: why, kept with their dead letters). Returns
        the ``stats`` ack (``records_deleted``, ``returned``, ``refused``).
        server/client/queue.py batches these per loop turn."""
        header: dict[str, Any] = {"c": "sow_delete", "t": queue, "bm": ",".join(bookmarks)}
        if option is not None:
            header["o"] = option
        if reason is not None:
            header["reason"] = reason
        return await self._reply(self._state.command(header, ack="stats"), timeout)

    async def unsubscribe(self, sub_id: str = "all", timeout: float = 30.0) -> None:
        """Unsubscribe ``all`` or a comma list of ids; their iterations end."""
        await self._reply(self._state.unsubscribe_command(sub_id), timeout)
        for sub in self._state.remove_subscriptions(sub_id):
            sub._end(_END)

    async def flush(self, timeout: float = 30.0) -> None:
        """Returns once every earlier command is processed and persisted."""
        await self._reply(self._state.flush_command(), timeout)

    async def send_raw(self, frame: bytes) -> None:
        """Send bytes as one frame, untouched (tests of malformed input)."""
        assert self._conn is not None
        await self._conn.send(frame)

    # -- inbound -------------------------------------------------------------------------

    async def _frame_received(self, data: bytes) -> None:
        for event in self._state.receive_frame(data):
            if type(event) is Delivered:
                # Awaited: a full buffer stops the reader (backpressure to the broker).
                await event.subscription.queue.put_run(event.messages)
            elif type(event) is QueryRecords:
                await event.query.queue.put_run(event.records)
            else:
                await self._apply(event)

    async def _apply(self, event: Event[Subscription]) -> None:
        if isinstance(event, Replied):
            fut = self._waiters.get(event.cid)
            if fut is not None and not fut.done():
                fut.set_result(event.ack)
        elif isinstance(event, Persisted):
            async with self._persisted:
                self._persisted.notify_all()
        elif isinstance(event, PositionReported):
            event.subscription.position_bookmark = event.bookmark
        elif isinstance(event, Completed):
            event.subscription.completed.set()
        elif isinstance(event, QueryEnded):
            event.query.snapshot_done.set()
            self._state.remove_query(event.query.sub_id)
        elif isinstance(event, Failed):
            if event.subscription is not None:
                event.subscription.queue.put_end(event.error)
            else:  # perhaps a publish that wait_persisted waits for
                async with self._persisted:
                    self._persisted.notify_all()
        elif isinstance(event, ConnectionFailed):
            await self._malformed(event.error)
        hook = self.event_hook
        if hook is not None:
            hook(event)
        # Delivered never gets here (the hot path above); HeartbeatReceived needs nothing:
        # the transport already noted when the last frame came.

    async def _malformed(self, error: FrameError) -> None:
        """The broker sent a frame we cannot parse: nothing after it can be trusted, so
        every waiter fails now and the connection closes with a protocol error."""
        self.close_reason = _MALFORMED_REASON
        self.close_code = _MALFORMED_CODE
        exc = Disconnected(_MALFORMED_REASON, _MALFORMED_CODE)
        exc.__cause__ = error
        self._fail_all(exc)
        if self._conn is not None:
            await self._conn.close(_MALFORMED_CODE, _MALFORMED_REASON)

    def _connection_lost(self, reason: str, code: int | None) -> None:
        if not self.closed.is_set():
            self.close_reason = reason
            self.close_code = code
        self._fail_all(Disconnected(self.close_reason, self.close_code))

    def _fail_all(self, exc: Disconnected) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        self._state.connection_lost(self.close_reason, self.close_code)
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(exc)
        for sub in self._state.subscriptions.values():
            sub._end(exc)

        async def _notify() -> None:
            async with self._persisted:
                self._persisted.notify_all()

        with contextlib.suppress(RuntimeError):
            self._notify = asyncio.get_running_loop().create_task(_notify())


__all__ = [
    "Ack",
    "Client",
    "ClientError",
    "ClientOptions",
    "Disconnected",
    "InvalidOption",
    "LogonInfo",
    "Message",
    "ProtocolFailure",
    "SowResult",
    "Subscription",
]
