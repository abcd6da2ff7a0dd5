"""The asyncio Python client of Spool.

The client has three separate parts so the HA client can reuse them: the *connection*
(one websocket, frame batching out, frame parsing in), the *session state* (pending acks
by command id, subscriptions by id, persisted-publish tracking), and this public
:class:`Client` API. It imports only ``server.protocol`` and ``websockets``.

Typical use::

    async with Client("ws://127.0.0.1:9007/amps/json", "reader") as c:
        sub = await c.subscribe("orders", filter="/qty > 10", bookmark="0")
        async for msg in sub:
            print(msg.bookmark, msg.data)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from server.protocol.errors import ProtocolFailure, failure_for
from server.protocol.frame import parse_frame


class ClientError(Exception):
    """A client-side failure that is not a broker failure ack."""


class Disconnected(ClientError):
    """The connection closed; ``reason`` is the close reason the broker gave, if any."""

    def __init__(self, reason: str = "", code: int | None = None) -> None:
        super().__init__(reason or "disconnected")
        self.reason = reason
        self.code = code


@dataclass(slots=True)
class Message:
    """A message delivered to a subscription."""

    topic: str
    data: bytes
    sub_ids: tuple[str, ...]
    bookmark: str | None
    timestamp: str | None
    correlation_id: str | None
    header: dict[str, Any]

    def json(self) -> Any:
        return orjson.loads(self.data)


@dataclass(slots=True)
class Ack:
    """An ack from the broker."""

    kind: str
    cid: str | None
    status: str
    reason: str | None
    header: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == "success"


@dataclass(slots=True)
class LogonInfo:
    client_name: str
    last_seq: int
    last_bookmark: str | None
    version: str
    heartbeat: float | None


_END = object()


class Subscription:
    """An async iterator of the messages of one subscription."""

    def __init__(self, client: Client, sub_id: str, maxsize: int) -> None:
        self.client = client
        self.sub_id = sub_id
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize)
        self.completed = asyncio.Event()
        self.position_bookmark: str | None = None
        self.acks: list[Ack] = []

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while True:
            item = await self.queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
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


class Client:
    """Asyncio client for one broker connection.

    Args:
        url: ``ws://host:port/amps/json``.
        name: client name (unique per instance; it is the publisher identity).
        user_id / password: credentials when the instance has Users.
        heartbeat: seconds; the broker beats at this interval and drops a silent client.
        queue_size: messages buffered per subscription before the reader stops reading
            (backpressure reaches the broker, which then applies its slow-client policy).
    """

    def __init__(
        self,
        url: str,
        name: str,
        *,
        user_id: str | None = None,
        password: str | None = None,
        heartbeat: float | None = None,
        queue_size: int = 10_000,
        max_size: int = 64 * 1024 * 1024,
    ) -> None:
        self.url = url
        self.name = name
        self.user_id = user_id
        self.password = password
        self.heartbeat = heartbeat
        self.queue_size = queue_size
        self.max_size = max_size
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._pending: dict[str, asyncio.Future[Ack]] = {}
        self._subs: dict[str, Subscription] = {}
        self._out: list[bytes] = []
        self._wake = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._hb_task: asyncio.Task[None] | None = None
        self.persisted_seq = 0
        self._persisted = asyncio.Condition()
        self.failures: list[Ack] = []
        self.logon: LogonInfo | None = None
        self.closed = asyncio.Event()
        self.close_reason: str = ""
        self.close_code: int | None = None
        self.seq = 0

    # -- connection ----------------------------------------------------------------------

    async def connect(self, timeout: float = 10.0) -> LogonInfo:
        self._ws = await connect(
            self.url,
            compression=None,
            max_size=self.max_size,
            open_timeout=timeout,
            ping_interval=None,
        )
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        header: dict[str, Any] = {
            "c": "logon",
            "client_name": self.name,
            "version": "spool-python/0.1",
        }
        if self.user_id is not None:
            header["user_id"] = self.user_id
        if self.password is not None:
            header["pw"] = self.password
        if self.heartbeat:
            header["hb"] = self.heartbeat
        ack = await self._command(header, timeout=timeout, ack="processed")
        info = LogonInfo(
            client_name=ack.header.get("client_name", self.name),
            last_seq=int(ack.header.get("s", 0) or 0),
            last_bookmark=ack.header.get("bm"),
            version=str(ack.header.get("version", "")),
            heartbeat=ack.header.get("hb"),
        )
        self.seq = max(self.seq, info.last_seq)
        self.persisted_seq = info.last_seq
        self.logon = info
        if self.heartbeat:
            self._hb_task = asyncio.get_running_loop().create_task(self._beat())
        return info

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Send what is queued and close the connection."""
        if self._hb_task is not None:
            self._hb_task.cancel()
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._flush_out()
            with contextlib.suppress(Exception):
                await self._ws.close()
        for task in (self._reader, self._writer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._fail_all(Disconnected(self.close_reason or "closed by client", self.close_code))

    async def _beat(self) -> None:
        assert self.heartbeat
        while True:
            await asyncio.sleep(self.heartbeat)
            self._send_header({"c": "heartbeat", "o": "beat"})

    # -- outbound ------------------------------------------------------------------------

    def _send_raw(self, data: bytes) -> None:
        if self.closed.is_set():
            raise Disconnected(self.close_reason, self.close_code)
        self._out.append(data)
        self._wake.set()

    def _send_header(self, header: dict[str, Any], body: bytes = b"") -> None:
        header["l"] = len(body)
        self._send_raw(orjson.dumps(header) + body)

    async def _flush_out(self) -> None:
        if self._out and self._ws is not None:
            frame = b"".join(self._out)
            self._out.clear()
            await self._ws.send(frame)

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                await self._flush_out()
        except ConnectionClosed:
            pass

    def _next_cid(self) -> str:
        return str(next(self._ids))

    async def _command(
        self,
        header: dict[str, Any],
        body: bytes = b"",
        *,
        ack: str = "processed",
        timeout: float | None = 30.0,
    ) -> Ack:
        cid = header.setdefault("cid", self._next_cid())
        header["a"] = ack
        fut: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[cid] = fut
        try:
            self._send_header(header, body)
            result = await asyncio.wait_for(asyncio.shield(fut), timeout)
        finally:
            self._pending.pop(cid, None)
        if not result.ok:
            raise failure_for(result.reason or "", str(result.header.get("detail", "")))
        return result

    # -- API -----------------------------------------------------------------------------

    @staticmethod
    def _body(data: bytes | str | Any) -> bytes:
        if isinstance(data, bytes):
            return data
        if isinstance(data, str):
            return data.encode()
        return orjson.dumps(data)

    def publish(
        self,
        topic: str,
        data: bytes | str | Any,
        *,
        seq: int | None = None,
        persisted: bool = False,
        correlation_id: str | None = None,
        auto_seq: bool = True,
    ) -> int:
        """Queue a publish (sent with the next frame); returns its sequence number.

        With ``persisted`` the broker acks durability; :meth:`wait_persisted` waits for it.
        """
        if seq is None and auto_seq:
            self.seq += 1
            seq = self.seq
        elif seq is not None:
            self.seq = max(self.seq, seq)
        header: dict[str, Any] = {"c": "publish", "t": topic}
        if seq is not None:
            header["s"] = seq
        if persisted:
            header["a"] = "persisted"
        if correlation_id is not None:
            header["x"] = correlation_id
        self._send_header(header, self._body(data))
        return seq or 0

    async def publish_acked(
        self, topic: str, data: bytes | str | Any, *, timeout: float = 30.0
    ) -> Ack:
        """Publish and wait for the processed ack (raises the typed failure)."""
        self.seq += 1
        return await self._command(
            {"c": "publish", "t": topic, "s": self.seq}, self._body(data), timeout=timeout
        )

    async def wait_persisted(self, seq: int, timeout: float = 30.0) -> None:
        """Wait until the broker acked persistence of every publish up to ``seq``."""

        async def _wait() -> None:
            async with self._persisted:
                await self._persisted.wait_for(
                    lambda: self.persisted_seq >= seq or self.closed.is_set()
                )

        await asyncio.wait_for(_wait(), timeout)
        if self.persisted_seq < seq:
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
    ) -> Subscription:
        """Subscribe; returns once the broker processed the command."""
        sid = sub_id or f"s{next(self._ids)}"
        header: dict[str, Any] = {"c": "subscribe", "t": topic, "sub_id": sid}
        if filter is not None:
            header["f"] = filter
        if bookmark is not None:
            header["bm"] = bookmark
        if options is not None:
            header["o"] = options
        sub = Subscription(self, sid, self.queue_size)
        replaced = self._subs.get(sid)
        self._subs[sid] = sub
        cid = self._next_cid()
        header["cid"] = cid
        acks = "processed,completed" if completed else "processed"
        try:
            await self._command(header, ack=acks, timeout=timeout)
        except BaseException:
            if replaced is not None:
                self._subs[sid] = replaced
            else:
                self._subs.pop(sid, None)
            raise
        return sub

    async def unsubscribe(self, sub_id: str = "all", timeout: float = 30.0) -> None:
        await self._command({"c": "unsubscribe", "sub_id": sub_id}, timeout=timeout)
        ids = list(self._subs) if sub_id == "all" else sub_id.split(",")
        for sid in ids:
            sub = self._subs.pop(sid.strip(), None)
            if sub is not None:
                sub.queue.put_nowait(_END)

    async def flush(self, timeout: float = 30.0) -> None:
        """Returns once every earlier command is processed and persisted."""
        await self._command({"c": "flush"}, timeout=timeout)

    async def send_raw(self, frame: bytes) -> None:
        """Send bytes as one frame, untouched (tests of malformed input)."""
        assert self._ws is not None
        await self._flush_out()
        await self._ws.send(frame)

    # -- inbound -------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        assert self._ws is not None
        ws = self._ws
        try:
            async for frame in ws:
                data = frame if isinstance(frame, bytes) else frame.encode()
                parsed = parse_frame(data)
                for msg in parsed.messages:
                    h = msg.header
                    c = h.get("c")
                    if c == "publish":
                        await self._deliver(h, msg.body)
                    elif c == "ack":
                        await self._on_ack(h)
                if parsed.error is not None:
                    raise ClientError(f"broker sent a malformed frame: {parsed.error}")
        except ConnectionClosed:
            pass
        finally:
            rcvd = ws.protocol.close_rcvd
            if rcvd is not None:
                self.close_reason = rcvd.reason
                self.close_code = rcvd.code
            self._fail_all(Disconnected(self.close_reason, self.close_code))

    async def _deliver(self, h: dict[str, Any], body: bytes) -> None:
        sids = tuple(str(h.get("sids", "")).split(","))
        msg = Message(
            topic=h.get("t", ""),
            data=body,
            sub_ids=sids,
            bookmark=h.get("bm"),
            timestamp=h.get("ts"),
            correlation_id=h.get("x"),
            header=h,
        )
        for sid in sids:
            sub = self._subs.get(sid)
            if sub is not None:
                await sub.queue.put(msg)

    async def _on_ack(self, h: dict[str, Any]) -> None:
        ack = Ack(
            kind=h.get("a", ""),
            cid=h.get("cid"),
            status=h.get("status", "success"),
            reason=h.get("reason"),
            header=h,
        )
        if ack.kind == "persisted" and ack.cid is None:
            sub_id = h.get("sub_id")
            if sub_id is not None:
                sub = self._subs.get(sub_id)
                if sub is not None:
                    sub.position_bookmark = h.get("bm")
                return
            if not ack.ok:
                self.failures.append(ack)
                return
            s = int(h.get("s", 0) or 0)
            if s > self.persisted_seq:
                async with self._persisted:
                    self.persisted_seq = s
                    self._persisted.notify_all()
            return
        if ack.kind == "completed":
            sub = self._subs.get(h.get("sub_id", ""))
            if sub is not None:
                sub.completed.set()
        fut = self._pending.get(ack.cid or "")
        if fut is not None and not fut.done():
            if ack.kind == "completed" and ack.ok:
                return  # the command's processed ack resolves it
            fut.set_result(ack)
            return
        if not ack.ok:
            self.failures.append(ack)
            sub = self._subs.get(h.get("sub_id", "") or "")
            if sub is not None:
                sub.queue.put_nowait(failure_for(ack.reason or "", h.get("detail", "")))

    def _fail_all(self, exc: Disconnected) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(exc)
        for sub in self._subs.values():
            with contextlib.suppress(asyncio.QueueFull):
                sub.queue.put_nowait(exc)

        async def _notify() -> None:
            async with self._persisted:
                self._persisted.notify_all()

        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().create_task(_notify())


__all__ = [
    "Ack",
    "Client",
    "ClientError",
    "Disconnected",
    "LogonInfo",
    "Message",
    "ProtocolFailure",
    "Subscription",
]
