"""An in-process engine for scenario tests: a real Broker on a VirtualClock, fake transports.

Everything but the network is real: the broker, its transaction log in a tmp directory
(the flusher's write and fsync run in a thread), the SQLite stats file, the event log.
Time is virtual: heartbeats, group-commit intervals, replay pacing and position acks move
only when the test advances the clock, so scenarios assert exact virtual times. A client
is a :class:`FakeClient` whose frames go straight to its session's ``receive`` and whose
outbound frames are collected and parsed with the protocol codec::

    async with EngineHarness(tmp_path, flush_interval="100ms") as h:
        c = await h.logon("pub")
        c.send({"c": "publish", "t": "orders"}, b'{"id":1}')
        await h.clock.advance(0.1)                # the group commit is due
        await h.until(lambda: h.durable_seq == 1)  # its fsync runs in a thread
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import wraps
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import orjson

from spool.server.actions import RunRecord
from spool.server.actions.webhooks import WebhookPort
from spool.server.client.connection import Handlers
from spool.server.clock import VirtualClock
from spool.server.config import parse_config
from spool.server.engine import Broker
from spool.server.ports import Happening, HappeningFamily
from spool.server.protocol.frame import parse_frame
from spool.server.replication.transport import Connector
from spool.server.session import Session
from spool.server.txlog import FileSeam
from tests.support.server import config_xml
from tests.support.wait import async_wait_until

T = TypeVar("T")

Header = dict[str, Any]


def scenario(fn: Callable[[Path], Awaitable[None]]) -> Callable[[Path], None]:
    """A test written as a coroutine of ``tmp_path``, run on a loop of its own."""

    @wraps(fn)
    def wrapper(tmp_path: Path) -> None:
        asyncio.run(fn(tmp_path))

    return wrapper


class FakeTransport:
    """A connection that keeps what the broker sends, as fast as it comes, at a steady pace
    on the virtual clock (``rate``), or not at all (:meth:`stop_reading`).

    A send returns once the frame was taken: at once, after ``len(frame) / rate`` virtual
    seconds, or (stopped) when reading resumes; like uvicorn's send under TCP flow control,
    the broker's writer waits in it meanwhile.
    """

    def __init__(self, remote: str, clock: VirtualClock | None = None) -> None:
        self.remote = remote
        self.frames: list[bytes] = []
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self._clock = clock
        #: bytes per second of virtual time (None: takes every frame at once)
        self.rate: float | None = None
        self._reading = asyncio.Event()
        self._reading.set()

    def stop_reading(self) -> None:
        """Take nothing more until :meth:`resume_reading`."""
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    async def send_pieces(self, pieces: Sequence[bytes], size: int) -> None:
        frame = b"".join(pieces)
        await self._reading.wait()
        if self.rate is not None:
            assert self._clock is not None, "a paced reader needs the harness's clock"
            await self._clock.sleep(len(frame) / self.rate)
        self.frames.append(frame)

    async def close(self, code: int, reason: str) -> None:
        self.close_code = code
        self.close_reason = reason


class FakeClient:
    """One connection to the in-process broker."""

    def __init__(self, session: Session, transport: FakeTransport) -> None:
        self.session = session
        self.transport = transport
        self._read = 0
        #: messages before this index (the logon ack) are left out of every view
        self.skip = 0

    def send(self, *messages: tuple[Header, bytes]) -> None:
        """Send the messages in one frame."""
        frame = b""
        for header, body in messages:
            frame += orjson.dumps({**header, "l": len(body)}) + body
        self.session.receive(frame)

    def received(self) -> list[tuple[Header, bytes]]:
        """Every message the broker sent this client so far, in order."""
        out: list[tuple[Header, bytes]] = []
        for frame in self.transport.frames:
            parsed = parse_frame(frame)
            assert parsed.error is None, parsed.error
            out.extend((m.header, m.body) for m in parsed.messages)
        return out[self.skip :]

    def new(self) -> list[tuple[Header, bytes]]:
        """The messages received since the previous call."""
        got = self.received()
        fresh = got[self._read :]
        self._read = len(got)
        return fresh

    def deliveries(self, sub_id: str | None = None) -> list[tuple[Header, bytes]]:
        """The ``publish`` messages received (for one subscription id, if given)."""
        return [
            (h, b)
            for h, b in self.received()
            if h.get("c") == "publish"
            and (sub_id is None or sub_id in str(h.get("sids", "")).split(","))
        ]

    def acks(self, kind: str | None = None) -> list[Header]:
        """The acks received (of one kind, if given)."""
        return [
            h
            for h, _ in self.received()
            if h.get("c") == "ack" and (kind is None or h["a"] == kind)
        ]

    @property
    def closed(self) -> bool:
        return self.session.closed


class ClientLink:
    """A :class:`spool.server.client.Client` connection to the in-process broker (the client's
    ``Transport``): the client's frames go to the session's ``receive`` on the next loop
    turn, the broker's frames to the client's handler as the session's writer sends them.

    :meth:`stop_reading` holds the broker's frames back (the writer waits, as under TCP
    flow control) so a test decides when the client hears what the broker answered.
    """

    def __init__(self, harness: EngineHarness, handlers: Handlers) -> None:
        self.handlers = handlers
        self.closed = False
        self._reading = asyncio.Event()
        self._reading.set()
        self._scheduled = False
        self._loop = asyncio.get_running_loop()
        self.last_received = self._loop.time()
        harness._clients += 1
        self.remote = f"127.0.0.1:{10000 + harness._clients}"
        self.session = harness.broker.connect(self)

    def stop_reading(self) -> None:
        """Deliver nothing more of the broker's to the client until :meth:`resume_reading`."""
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    # -- the broker's side (a transport of the session) -----------------------------------

    async def send_pieces(self, pieces: Sequence[bytes], size: int) -> None:
        await self._reading.wait()
        if not self.closed:
            self.last_received = self._loop.time()
            await self.handlers.frame_received(b"".join(pieces))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """The broker closed the connection, or the client did (its session ends)."""
        if not self.closed:
            self.closed = True
            self.handlers.connection_lost(reason, code)
        if not self.session.closed:
            await self.session.close("connection lost", 1000)

    # -- the client's side (Transport) ------------------------------------------------------

    def flush_soon(self) -> None:
        if not self._scheduled and not self.closed:
            self._scheduled = True
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        if self.closed:
            return
        data = self.handlers.data_to_send()
        if data:
            self.session.receive(data)

    async def flush(self) -> None:
        self._drain()

    async def send(self, frame: bytes) -> None:
        self._drain()
        if not self.closed:
            self.session.receive(frame)

    def start_heartbeat(self, interval: float, beat: Callable[[], None]) -> None:
        raise RuntimeError("an in-process ClientLink sends no heartbeats: connect without one")

    def abort(self) -> None:
        self._loop.create_task(self.close(1006, "aborted"))


class HappeningRecorder:
    """A happenings sink that keeps what it is told, in order."""

    def __init__(self, families: frozenset[HappeningFamily]) -> None:
        self.families = families
        self.got: list[Happening] = []

    def happened(self, happening: Happening) -> None:
        self.got.append(happening)


class EngineHarness:
    """A broker in this process, on a virtual clock.

    Args:
        tmp_path: where its data directory goes.
        xml: a whole configuration (default: :func:`config_xml` with ``config_kw``).
        clock: a clock shared with other harnesses (several brokers of one scenario).
        connector: how its replication links dial (tests/support/replication.py).
        files: the file seam of the broker's journal writes (fault injection).
        webhooks: what posts its actions' webhooks (a fake port answering on the loop).
        **config_kw: options of :func:`tests.support.server.config_xml`.
    """

    def __init__(
        self,
        tmp_path: Path,
        xml: str | None = None,
        *,
        clock: VirtualClock | None = None,
        connector: Connector | None = None,
        files: FileSeam | None = None,
        webhooks: WebhookPort | None = None,
        **config_kw: Any,
    ) -> None:
        if xml is None:
            xml = config_xml(tmp_path / "data", **config_kw)
        self.config = parse_config(xml)
        self.clock = clock if clock is not None else VirtualClock()
        extra = {"connector": connector} if connector is not None else {}
        self.broker = Broker(
            self.config, clock=self.clock, console_log=False, files=files, webhooks=webhooks,
            **extra,
        )  # fmt: skip
        self._clients = 0
        #: the client connections made by :meth:`client_connector`
        self.links: list[ClientLink] = []

    async def __aenter__(self) -> EngineHarness:
        await self.broker.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # the log's close waits for the flusher, which may sleep on the virtual clock until
        # its next group commit: let that commit happen first
        txlog = self.broker.txlog
        if txlog is not None and txlog.write_error is None and self.last_seq > self.durable_seq:
            try:
                await self.commit()
            except Exception:
                if exc is None:
                    raise
        await self._stop_moving_time()

    async def _stop_moving_time(self, timeout: float = 60.0) -> None:
        """Stop the broker, moving virtual time while it stops: a record that arrives
        during the stop (a replication link still delivering one when a scenario ends on
        a loaded machine) leaves the log a group commit to wait for, whose flusher sleeps
        on this clock; with nobody moving time that stop waited for ever. ``timeout`` is
        wall-clock time, a guard only."""
        stopping = asyncio.ensure_future(self.broker.stop())
        # a stop that needs no time is left alone (time moved at teardown could fire a
        # timer a test did not expect); only one still running after half a second is
        # helped along
        await asyncio.wait({stopping}, timeout=0.5)
        deadline = time.monotonic() + timeout
        while not stopping.done():
            if time.monotonic() > deadline:
                stopping.cancel()
                raise TimeoutError("the broker did not stop")
            await asyncio.wait({stopping}, timeout=0.005)  # threads (fsync) report meanwhile
            if not stopping.done() and not self.clock.advancing:
                await self.clock.advance(0.01)
        stopping.result()

    def sink(self, *families: HappeningFamily) -> HappeningRecorder:
        """A sink of the broker's happenings of ``families``, added now (before the
        connections it is to hear of)."""
        recorder = HappeningRecorder(frozenset(families))
        self.broker.happenings.add(recorder)
        return recorder

    def connect(self) -> FakeClient:
        """A new connection (not logged on)."""
        self._clients += 1
        transport = FakeTransport(f"127.0.0.1:{10000 + self._clients}", clock=self.clock)
        return FakeClient(self.broker.connect(transport), transport)

    async def client_connector(
        self,
        url: str,
        handlers: Handlers,
        *,
        open_timeout: float,
        max_size: int | None,
        ssl: Any = None,
    ) -> ClientLink:
        """A ``connector`` for :class:`spool.server.client.Client` and ``HAClient``: every URL
        reaches this broker (:attr:`links` keeps the connections, in order)."""
        link = ClientLink(self, handlers)
        self.links.append(link)
        return link

    async def logon(self, name: str, **fields: Any) -> FakeClient:
        """A new connection, logged on as ``name`` (the logon ack is consumed)."""
        client = self.connect()
        client.send(({"c": "logon", "cid": "logon", "client_name": name, **fields}, b""))
        await self.until(lambda: any(h.get("cid") == "logon" for h, _ in client.received()))
        client.skip = len(client.received())
        return client

    async def settle(self) -> None:
        """Let every task that can run, run (virtual time stands still)."""
        await self.clock.wait_all_blocked()

    async def until(self, cond: Callable[[], object], timeout: float = 10.0) -> None:
        """Wait (real time, for work in threads such as fsync) until ``cond()`` holds."""
        await async_wait_until(lambda: bool(cond()), timeout=timeout)

    async def drive(self, work: Awaitable[T]) -> T:
        """Await ``work`` while moving the virtual clock 10 ms at a time (the group
        commits, timers and backoff sleeps it waits on), letting threads (fsync) report
        back in real time between steps."""
        task = asyncio.ensure_future(work)
        while not task.done():
            await self.clock.advance(0.01)
            await asyncio.sleep(0.001)
        return task.result()

    async def run_admin(self, action: str, user: str = "tester", **params: Any) -> RunRecord:
        """Run the on-admin action ``action`` as ``user`` with ``params``, the clock moving
        meanwhile (:meth:`drive`)."""
        return await self.drive(self.broker.actions.run_admin(action, params, user))

    @property
    def durable_seq(self) -> int:
        assert self.broker.txlog is not None
        return self.broker.txlog.durable_seq

    @property
    def last_seq(self) -> int:
        assert self.broker.txlog is not None
        return self.broker.txlog.last_seq

    async def commit(self) -> None:
        """Advance to the next group commit and wait until everything appended is durable."""
        target = self.last_seq
        tl = self.config.transaction_log
        assert tl is not None
        # the flusher sleeps at most one interval after an append; its write is a thread
        await self.clock.advance(tl.flush_interval)
        await self.until(lambda: self.durable_seq >= target)
        await self.settle()


def actions_engine(
    tmp_path: Path, actions: str, files: FileSeam | None = None, **kw: Any
) -> EngineHarness:
    """An engine whose configuration holds ``actions`` (the inside of ``<Actions>``), with
    statistics sampled once a day (the sampler does not wake every virtual second)."""
    xml = config_xml(tmp_path / "data", admin_interval="1d", actions=actions, **kw)
    return EngineHarness(tmp_path, xml=xml, files=files)
