"""The asyncio :class:`Client` composed from its parts.

Two kinds of broker stand in for the real one:

- a fake transport (the :class:`~spool.server.client.connection.ClientTransport` seam): the test plays
  the broker by reading the commands the client flushed and feeding frames to it;
- a scripted websocket server on loopback, for the regressions about what reaches a
  consumer when the connection ends or a queue is full (they run over the real transport).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, ParamSpec

import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from spool.server.client import Client, ClientError, Disconnected, Message, client_context
from spool.server.client.connection import ClientTransport, Handlers
from spool.server.protocol import errors
from spool.server.protocol.frame import FrameError, encode_message, parse_frame
from tests.support.wait import async_wait_until

P = ParamSpec("P")
Header = dict[str, Any]


def run_async(fn: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))

    return wrapper


def frame(*messages: Header | tuple[Header, bytes]) -> bytes:
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


def delivery(sids: str, body: bytes, **fields: Any) -> tuple[Header, bytes]:
    return {"c": "publish", "t": "orders", "sids": sids, **fields}, body


# -- a fake transport --------------------------------------------------------------------


class FakeTransport:
    """A :class:`ClientTransport` with the broker played by the test."""

    def __init__(self, handlers: Handlers) -> None:
        self.handlers = handlers
        self.frames: list[bytes] = []
        self.commands: asyncio.Queue[tuple[Header, bytes]] = asyncio.Queue()
        self.closes: list[tuple[int, str]] = []
        self.heartbeat: tuple[float, Callable[[], None]] | None = None
        self.last_received = 0.0
        self._scheduled = False

    def flush_soon(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_now)

    def _flush_now(self) -> None:
        self._scheduled = False
        while data := self.handlers.data_to_send():
            self._sent(data)

    def _sent(self, data: bytes) -> None:
        self.frames.append(data)
        for m in parse_frame(data).messages:
            self.commands.put_nowait((m.header, m.body))

    async def flush(self) -> None:
        self._flush_now()

    async def send(self, frame: bytes) -> None:
        self._flush_now()
        self._sent(frame)

    def start_heartbeat(self, interval: float, beat: Callable[[], None]) -> None:
        self.heartbeat = (interval, beat)

    def abort(self) -> None:
        self.handlers.connection_lost("", None)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self.closes:
            self._flush_now()
            self.handlers.connection_lost(reason, code)  # the peer echoes the close
        self.closes.append((code, reason))

    # the broker's side

    async def next_command(self) -> Header:
        header, _ = await asyncio.wait_for(self.commands.get(), 5)
        return header

    async def reply(self, *messages: Header | tuple[Header, bytes]) -> None:
        await self.handlers.frame_received(frame(*messages))


class FakeConnector:
    def __init__(self) -> None:
        self.transport: FakeTransport | None = None
        self.calls: list[tuple[str, float, int | None]] = []
        self.ssl: ssl.SSLContext | None = None

    async def __call__(
        self,
        url: str,
        handlers: Handlers,
        *,
        open_timeout: float,
        max_size: int | None,
        ssl: ssl.SSLContext | None = None,
    ) -> ClientTransport:
        self.calls.append((url, open_timeout, max_size))
        self.ssl = ssl
        self.transport = FakeTransport(handlers)
        return self.transport


async def connected(**kwargs: Any) -> tuple[Client, FakeTransport]:
    connector = FakeConnector()
    client = Client("ws://fake/amps/json", "tester", connector=connector, **kwargs)
    task = asyncio.create_task(client.connect(timeout=5))
    await async_wait_until(lambda: connector.transport is not None, 5, message="connect")
    assert connector.transport is not None
    logon = await connector.transport.next_command()
    assert logon["c"] == "logon"
    await connector.transport.reply(ack("processed", logon["cid"], s=7, bm="1|7|", version="v"))
    await task
    return client, connector.transport


async def answered(fake: FakeTransport, task: asyncio.Task[Any], **fields: Any) -> Header:
    """Answer the next command with a processed ack and return it (after ``task`` ran)."""
    command = await fake.next_command()
    await fake.reply(ack("processed", command["cid"], **fields))
    await task
    return command


@run_async
async def test_connect_logs_on_through_the_connector_and_starts_the_heartbeat() -> None:
    connector = FakeConnector()
    client = Client(
        "ws://fake/amps/json",
        "tester",
        user_id="u",
        password="pw",
        heartbeat=2.5,
        max_size=1234,
        connector=connector,
    )
    task = asyncio.create_task(client.connect(timeout=3))
    await async_wait_until(lambda: connector.transport is not None, 5, message="connect")
    fake = connector.transport
    assert fake is not None
    logon = await fake.next_command()
    assert (logon["client_name"], logon["user_id"], logon["pw"], logon["hb"]) == (
        "tester",
        "u",
        "pw",
        2.5,
    )
    await fake.reply(ack("processed", logon["cid"], s=7, bm="1|7|", version="v", hb=2.5))
    info = await task
    assert connector.calls == [("ws://fake/amps/json", 3, 1234)]
    assert (info.last_seq, info.last_bookmark, info.version) == (7, "1|7|", "v")
    assert client.logon is info
    assert (client.seq, client.persisted_seq) == (7, 7)
    assert fake.heartbeat is not None and fake.heartbeat[0] == 2.5
    fake.heartbeat[1]()  # the transport's timer fires
    assert await fake.next_command() == {"c": "heartbeat", "o": "beat", "l": 0}
    await client.close()
    fake.heartbeat[1]()  # a late beat after the close is dropped, not raised
    assert fake.commands.empty()


@run_async
async def test_a_refused_logon_raises_its_typed_failure() -> None:
    connector = FakeConnector()
    client = Client("ws://fake/amps/json", "tester", connector=connector)
    task = asyncio.create_task(client.connect())
    await async_wait_until(lambda: connector.transport is not None, 5, message="connect")
    assert connector.transport is not None
    logon = await connector.transport.next_command()
    await connector.transport.reply(
        ack("processed", logon["cid"], status="failure", reason="auth failure")
    )
    with pytest.raises(errors.AuthFailure):
        await task
    assert client.logon is None


@run_async
async def test_publishes_of_one_turn_share_a_frame_and_persisted_acks_wake_waiters() -> None:
    client, fake = await connected()
    frames_before = len(fake.frames)
    seqs = [client.publish("orders", {"n": n}, persisted=True) for n in range(3)]
    assert seqs == [8, 9, 10]  # after the 7 the logon reported
    waiter = asyncio.create_task(client.wait_persisted(10, timeout=5))
    for _ in range(3):
        await fake.next_command()
    assert len(fake.frames) == frames_before + 1
    await fake.reply(ack("persisted", s=9))
    assert client.persisted_seq == 9 and not waiter.done()
    await fake.reply(ack("persisted", s=10))
    await waiter
    await client.close()


@run_async
async def test_wait_persisted_raises_when_the_connection_ends_first() -> None:
    client, fake = await connected()
    seq = client.publish("orders", b"x", persisted=True)
    waiter = asyncio.create_task(client.wait_persisted(seq, timeout=5))
    await fake.next_command()
    fake.handlers.connection_lost("shutting down", 1001)
    with pytest.raises(Disconnected) as info:
        await waiter
    assert (info.value.reason, info.value.code) == ("shutting down", 1001)
    assert (client.close_reason, client.close_code) == ("shutting down", 1001)
    with pytest.raises(Disconnected):
        client.publish("orders", b"late")


@run_async
async def test_subscription_receives_deliveries_positions_and_completed() -> None:
    client, fake = await connected()
    task = asyncio.create_task(client.subscribe("orders", bookmark="0", completed=True))
    command = await answered(fake, task)
    sub = task.result()
    assert (command["sub_id"], command["a"]) == (sub.sub_id, "processed,completed")
    await fake.reply(
        delivery(sub.sub_id, b'{"n":1}', bm="1|1|"),
        delivery(f"other,{sub.sub_id}", b'{"n":2}', bm="1|2|"),
        ack("completed", command["cid"], sub_id=sub.sub_id),
        ack("persisted", sub_id=sub.sub_id, bm="1|2|"),
    )
    assert sub.completed.is_set()
    assert sub.position_bookmark == "1|2|"
    first, second = await sub.get(1), await sub.get(1)
    assert (first.json(), first.bookmark) == ({"n": 1}, "1|1|")
    assert second.sub_ids == ("other", sub.sub_id)
    await client.close()


@run_async
async def test_a_refused_replace_keeps_the_previous_subscription() -> None:
    client, fake = await connected()
    task = asyncio.create_task(client.subscribe("orders", sub_id="a"))
    await answered(fake, task)
    first = task.result()
    replace = asyncio.create_task(client.subscribe("orders", sub_id="a", filter="/x >"))
    command = await fake.next_command()
    await fake.reply(ack("processed", command["cid"], status="failure", reason="bad filter"))
    with pytest.raises(errors.BadFilter):
        await replace
    await fake.reply(delivery("a", b"still here"))
    assert (await first.get(1)).data == b"still here"
    fresh = asyncio.create_task(client.subscribe("orders", sub_id="b", filter="bad"))
    command = await fake.next_command()
    await fake.reply(ack("processed", command["cid"], status="failure", reason="bad filter"))
    with pytest.raises(errors.BadFilter):
        await fresh
    await fake.reply(delivery("b", b"nobody"))  # no subscription b any more: dropped
    await client.close()


@run_async
async def test_a_command_that_times_out_is_forgotten() -> None:
    client, fake = await connected()
    with pytest.raises(TimeoutError):
        await client.flush(timeout=0.05)
    command = await fake.next_command()
    await fake.reply(ack("processed", command["cid"], status="failure", reason="txlog full"))
    assert [f.reason for f in client.failures] == ["txlog full"]
    await client.close()


@run_async
async def test_send_raw_sends_queued_messages_first() -> None:
    client, fake = await connected()
    client.publish("orders", b"queued")
    await client.send_raw(b"{broken")
    assert fake.frames[-2:] == [
        frame(({"c": "publish", "t": "orders", "s": 8}, b"queued")),
        b"{broken",
    ]
    await client.close()


@run_async
async def test_a_malformed_frame_fails_everything_and_closes_with_a_protocol_error() -> None:
    client, fake = await connected()
    task = asyncio.create_task(client.subscribe("orders", sub_id="a"))
    await answered(fake, task)
    sub = task.result()
    flush = asyncio.create_task(client.flush())
    await fake.next_command()
    await fake.reply(delivery("a", b"good"))
    await fake.handlers.frame_received(b'{"c":"ack","a":"processed"')
    with pytest.raises(Disconnected) as info:
        await flush
    assert (info.value.reason, info.value.code) == ("invalid message", 1002)
    assert isinstance(info.value.__cause__, FrameError)
    assert fake.closes == [(1002, "invalid message")]
    assert (await sub.get(1)).data == b"good"
    with pytest.raises(Disconnected):
        await sub.get(1)
    await client.close()


# -- a scripted websocket broker (regressions over the real transport) -------------------


class ScriptedBroker:
    """A websocket server that accepts every logon and lets the test answer the rest."""

    def __init__(self) -> None:
        self.commands: asyncio.Queue[Header] = asyncio.Queue()
        self.conn: ServerConnection | None = None
        self.close: tuple[int | None, str | None] | None = None
        self._server: Server | None = None
        self.url = ""

    async def __aenter__(self) -> ScriptedBroker:
        self._server = await serve(self._handle, "127.0.0.1", 0, compression=None)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}/amps/json"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, ws: ServerConnection) -> None:
        self.conn = ws
        try:
            async for data in ws:
                raw = data if isinstance(data, bytes) else data.encode()
                for m in parse_frame(raw).messages:
                    if m.header.get("c") == "logon":
                        await ws.send(frame(ack("processed", m.header["cid"], s=0)))
                    else:
                        await self.commands.put(m.header)
        except ConnectionClosed:
            pass
        self.close = (ws.close_code, ws.close_reason)

    async def next_command(self) -> Header:
        return await asyncio.wait_for(self.commands.get(), 5)

    async def send(self, data: bytes) -> None:
        assert self.conn is not None
        await self.conn.send(data)

    async def answer(self, task: asyncio.Task[Any]) -> Header:
        command = await self.next_command()
        await self.send(frame(ack("processed", command["cid"])))
        await asyncio.wait_for(task, 5)
        return command


async def subscribed(broker: ScriptedBroker, client: Client, sub_id: str) -> Any:
    task = asyncio.create_task(client.subscribe("orders", sub_id=sub_id))
    await broker.answer(task)
    return task.result()


@run_async
async def test_a_malformed_frame_from_the_broker_closes_the_websocket() -> None:
    # Before: the reader stopped on a ClientError, waiters got a bare "disconnected" and
    # the websocket stayed open.
    async with ScriptedBroker() as broker:
        client = Client(broker.url, "c")
        await client.connect()
        flush = asyncio.create_task(client.flush())
        await broker.next_command()
        await broker.send(b"not a header")
        with pytest.raises(Disconnected) as info:
            await flush
        assert (info.value.reason, info.value.code) == ("invalid message", 1002)
        await async_wait_until(lambda: broker.close is not None, 5, message="the close")
        assert broker.close == (1002, "invalid message")
        await client.close()


@run_async
async def test_unsubscribe_ends_an_iteration_whose_queue_is_full() -> None:
    # Before: the end marker was put with put_nowait, so unsubscribe() raised QueueFull
    # after the broker had removed the subscription.
    async with ScriptedBroker() as broker:
        client = Client(broker.url, "c", queue_size=1)
        await client.connect()
        sub = await subscribed(broker, client, "a")
        await broker.send(frame(delivery("a", b"1")))
        await async_wait_until(sub.queue.full, 5, message="a full queue")
        await broker.answer(asyncio.create_task(client.unsubscribe("a")))
        got = [m.data async for m in sub]
        assert got == [b"1"]
        await client.close()


@run_async
async def test_a_lost_connection_reaches_a_consumer_behind_a_full_queue() -> None:
    # Before: the Disconnected was dropped when the queue was full, so the consumer got
    # the queued messages and then waited forever.
    async with ScriptedBroker() as broker:
        client = Client(broker.url, "c", queue_size=2)
        await client.connect()
        sub = await subscribed(broker, client, "a")
        await broker.send(frame(delivery("a", b"1"), delivery("a", b"2")))
        await async_wait_until(sub.queue.full, 5, message="a full queue")
        assert broker.conn is not None
        await broker.conn.close(1001, "shutting down")
        await asyncio.wait_for(client.closed.wait(), 5)
        got: list[Message] = [await sub.get(5), await sub.get(5)]
        assert [m.data for m in got] == [b"1", b"2"]
        with pytest.raises(Disconnected) as info:
            await sub.get(5)
        assert info.value.reason == "shutting down"
        await client.close()


@run_async
async def test_a_subscription_failure_waits_for_room_in_a_full_queue() -> None:
    # Before: the failure was put with put_nowait; QueueFull killed the reader and the
    # whole connection was reported lost.
    async with ScriptedBroker() as broker:
        client = Client(broker.url, "c", queue_size=1)
        await client.connect()
        sub = await subscribed(broker, client, "a")
        await broker.send(
            frame(
                delivery("a", b"1"),
                ack("completed", "99", sub_id="a", status="failure", reason="txlog full"),
            )
        )
        await async_wait_until(sub.queue.full, 5, message="a full queue")
        assert (await sub.get(5)).data == b"1"
        with pytest.raises(errors.TxlogFull):
            await sub.get(5)
        await broker.answer(asyncio.create_task(client.flush()))
        assert not client.closed.is_set()
        await client.close()


@run_async
async def test_batches_hand_out_each_frame_s_run_and_mix_with_per_message_reads() -> None:
    client, fake = await connected()
    task = asyncio.create_task(client.subscribe("orders", bookmark="0"))
    await answered(fake, task)
    sub = task.result()
    sid = sub.sub_id
    await fake.reply(*(delivery(sid, b'{"n":%d}' % n, bm=f"1|{n}|") for n in range(5)))
    await fake.reply(
        delivery(sid, b'{"n":5}'), ack("persisted", sub_id=sid, bm="1|5|"), delivery(sid, b"6")
    )
    assert sub.queue.qsize() == 7
    first = await sub.get(1)  # one message, then the rest of its run as a batch
    batches = sub.batches()
    rest = await anext(batches)
    assert [first.json()] + [m.json() for m in rest] == [{"n": n} for n in range(5)]
    assert first.json() is first.json()  # decoded once, on first use
    # the second frame was two runs: the ack in between split them
    assert [[m.data for m in await anext(batches)] for _ in range(2)] == [[b'{"n":5}'], [b"6"]]
    assert sub.queue.qsize() == 0 and sub.queue.empty()
    await client.close()
    with pytest.raises(Disconnected):
        await anext(batches)


@run_async
async def test_publish_many_numbers_and_encodes_a_batch_in_one_frame() -> None:
    client, fake = await connected()
    assert client.seq == 7  # from the logon ack
    last = client.publish_many("orders", [b"a", "b", {"c": 1}], persisted=True)
    assert last == 10 and client.seq == 10
    frames = []
    for _ in range(3):
        frames.append(await fake.next_command())
    assert [(h["c"], h["t"], h["s"], h["a"], h["l"]) for h in frames] == [
        ("publish", "orders", 8, "persisted", 1),
        ("publish", "orders", 9, "persisted", 1),
        ("publish", "orders", 10, "persisted", 7),
    ]
    assert client.publish_many("orders", []) == 10
    await client.close()


def test_a_tls_context_needs_a_wss_url() -> None:
    with pytest.raises(ClientError, match="needs a wss:// URL"):
        Client("ws://fake/amps/json", "t", ssl=client_context())


def test_the_tls_context_reaches_the_connector() -> None:
    async def main() -> None:
        connector = FakeConnector()
        ctx = client_context(insecure=True)
        client = Client("wss://fake/amps/json", "t", connector=connector, ssl=ctx)
        task = asyncio.create_task(client.connect(timeout=5))
        await async_wait_until(lambda: connector.transport is not None, 5, message="connect")
        assert connector.ssl is ctx
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_client_context_verifies_unless_told_not_to(tmp_path: Path) -> None:
    strict = client_context()
    assert strict.verify_mode == ssl.CERT_REQUIRED and strict.check_hostname
    assert strict.minimum_version == ssl.TLSVersion.TLSv1_2
    loose = client_context(insecure=True)
    assert loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname
    with pytest.raises(ClientError, match="cannot use the CA file"):
        client_context(cafile=tmp_path / "missing.pem")
    with pytest.raises(ClientError, match="needs its certificate"):
        client_context(keyfile=tmp_path / "k.pem")
