"""The Spool benchmark workers: each runs in its own process (see processes.py).

Every worker prepares (connects, logs on, subscribes), passes ``gate``, does the measured
work and returns a small dict of monotonic-ns stamps, counts or latency percentiles (never
the raw samples: a run can hold millions).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from array import array
from typing import Any
from urllib.parse import urlsplit

import httpx
from websockets.asyncio.client import ClientConnection

from spool.server.client.connection import Handlers, StreamTransport
from tests.bench.bodies import STAMP_RE, PublishEncoder, body_pool, stamped_body
from tests.bench.processes import Gate
from tests.bench.stats import latency_summary
from tests.bench.wire import (
    PUBLISH_MARK,
    BenchProtocolError,
    close_quietly,
    command,
    logon_command,
    open_session,
    scan_acks,
    subscribe_command,
    wait_acks,
)


def _check_failures(acks: list[dict[str, Any]]) -> None:
    for h in acks:
        if h.get("status", "success") != "success":
            raise BenchProtocolError(
                f"{h.get('a')} ack failed: {h.get('reason')} {h.get('detail', '')}".strip()
            )


class _PersistedTracker:
    """Follows the conflated persisted acks of one publisher connection."""

    def __init__(self, ws: ClientConnection, base: int, on_ack: Any = None) -> None:
        self.ws = ws
        self.acked = base
        self.changed = asyncio.Event()
        self._on_ack = on_ack
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            data = frame if isinstance(frame, bytes) else frame.encode()
            for h in scan_acks(data):
                if h.get("a") != "persisted" or "cid" in h or "sub_id" in h:
                    continue
                if h.get("status", "success") != "success":
                    raise BenchProtocolError(f"publish {h.get('s')} failed: {h.get('reason')}")
                s = int(h.get("s", 0))
                if s > self.acked:
                    if self._on_ack is not None:
                        self._on_ack(self.acked, s, time.monotonic_ns())
                    self.acked = s
                    self.changed.set()

    async def wait_for(self, seq: int) -> None:
        """Until ``acked >= seq`` (re-raises a failure of the reader)."""
        while self.acked < seq:
            if self.task.done():
                self.task.result()
                raise BenchProtocolError("connection closed before the persisted ack")
            self.changed.clear()
            waiter = asyncio.ensure_future(self.changed.wait())
            await asyncio.wait({waiter, self.task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()


async def publish_burst(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    count: int,
    body_bytes: int,
    seed: int,
    persisted: bool,
    window: int,
    per_frame: int,
    timeout: float,
    cafile: str | None = None,
) -> dict[str, Any]:
    """Publish ``count`` messages as fast as the broker takes them.

    Without acks the run ends at the ack of a ``flush`` sent after the last publish (every
    earlier publish processed and, on a recorded topic, persisted). With persisted acks at
    most ``window`` messages are unacked at any time and the run ends at the ack covering
    the last one.
    """
    ws, logon = await open_session(url, name, timeout=timeout, cafile=cafile)
    base = int(logon.get("s", 0) or 0)
    bodies = body_pool(body_bytes, seed)
    enc = PublishEncoder(topic, persisted=persisted)
    tracker = _PersistedTracker(ws, base) if persisted else None
    try:
        await gate.aopen()
        start = time.monotonic_ns()
        sent = 0
        while sent < count:
            n = min(per_frame, count - sent)
            if tracker is not None and base + sent + n - tracker.acked > window:
                await asyncio.wait_for(tracker.wait_for(base + sent + n - window), timeout)
            await ws.send(enc.frame(base + sent + 1, bodies, sent, n))
            sent += n
        if tracker is not None:
            await asyncio.wait_for(tracker.wait_for(base + count), timeout)
        else:
            await ws.send(command({"c": "flush", "cid": "flush", "a": "processed"}))
            await wait_acks(ws, {"flush"}, timeout)
        end = time.monotonic_ns()
    finally:
        if tracker is not None:
            tracker.task.cancel()
        await close_quietly(ws)
    return {"start_ns": start, "end_ns": end, "count": count, "bytes": count * body_bytes}


async def _count_until(ws: ClientConnection, expected: int) -> tuple[int, int, int]:
    """Read frames until ``expected`` deliveries; returns (first_ns, last_ns, count)."""
    count = 0
    first = 0
    last = 0
    mark = PUBLISH_MARK
    while count < expected:
        frame = await ws.recv(decode=False)
        n = frame.count(mark)
        if n:
            last = time.monotonic_ns()
            if not count:
                first = last
            count += n
        elif b'"status":"failure"' in frame:
            _check_failures(scan_acks(frame))
    return first, last, count


async def live_subscribers(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    connections: int,
    expected_each: int,
    timeout: float,
) -> dict[str, Any]:
    """``connections`` connections, one live subscription each; counts deliveries."""
    sockets: list[ClientConnection] = []
    try:
        for start in range(0, connections, 50):
            batch = await asyncio.gather(
                *(
                    open_session(url, f"{name}-{i}", timeout=timeout)
                    for i in range(start, min(connections, start + 50))
                )
            )
            sockets.extend(ws for ws, _ in batch)
        for ws in sockets:
            await ws.send(subscribe_command(topic, "s1"))
        await asyncio.gather(*(wait_acks(ws, {"s1"}, timeout) for ws in sockets))
        await gate.aopen()
        done = await asyncio.wait_for(
            asyncio.gather(*(_count_until(ws, expected_each) for ws in sockets)), timeout
        )
    finally:
        await asyncio.gather(*(close_quietly(ws) for ws in sockets))
    return {
        "first_ns": min(d[0] for d in done),
        "last_ns": max(d[1] for d in done),
        "count": sum(d[2] for d in done),
    }


async def late_subscriber(
    gate: Gate,
    *,
    url: str,
    metrics_url: str,
    name: str,
    topic: str,
    expected: int,
    timeout: float,
) -> dict[str, Any]:
    """A live subscriber that reads nothing until its subscription has spilled (the
    broker's ``spool_spills_total`` went up), then everything: the burst family's reader.

    Its socket's receive buffer is small, so the kernel does not absorb the burst for it.
    """
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    ws, _ = await open_session(url, name, timeout=timeout, sock=sock)
    try:
        await ws.send(subscribe_command(topic, "s1"))
        await wait_acks(ws, {"s1"}, timeout)
        async with httpx.AsyncClient(timeout=timeout) as http:
            baseline = await _spills(http, metrics_url)
            await gate.aopen()
            deadline = time.monotonic() + timeout
            while await _spills(http, metrics_url) <= baseline:
                if time.monotonic() > deadline:
                    raise TimeoutError("the subscription never spilled")
                await asyncio.sleep(0.005)
        reading = time.monotonic_ns()
        first, last, count = await asyncio.wait_for(_count_until(ws, expected), timeout)
    finally:
        await close_quietly(ws)
    return {"reading_ns": reading, "first_ns": first, "last_ns": last, "count": count}


async def _spills(http: httpx.AsyncClient, metrics_url: str) -> float:
    for line in (await http.get(metrics_url)).text.splitlines():
        if line.startswith("spool_spills_total "):
            return float(line.rsplit(" ", 1)[1])
    raise BenchProtocolError("spool_spills_total is not in /metrics")


class _ReplayCounter:
    """The frame handler of :func:`replay_subscriber`: the logon ack, then deliveries
    counted by their mark (as :func:`_count_until` does)."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.first = 0
        self.last = 0
        self.logon: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.done = asyncio.Event()
        self.ended = asyncio.Event()

    async def frame_received(self, frame: bytes) -> None:
        n = frame.count(PUBLISH_MARK)
        if n:
            self.last = time.monotonic_ns()
            if not self.count:
                self.first = self.last
            self.count += n
            if self.count >= self.expected:
                self.done.set()
            return
        acks = scan_acks(frame)
        if not self.logon.done():
            for ack in acks:
                if ack.get("cid") == "logon":
                    self.logon.set_result(ack)
            return
        _check_failures(acks)

    @staticmethod
    def data_to_send() -> bytes:
        return b""

    def connection_lost(self, reason: str, code: int | None) -> None:
        self.ended.set()
        if not self.logon.done():
            self.logon.set_exception(BenchProtocolError(f"closed before the logon: {reason}"))


async def replay_subscriber(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    expected: int,
    filter: str | None,
    timeout: float,
    cafile: str | None = None,
) -> dict[str, Any]:
    """Subscribe from EPOCH after go (the subscribe is part of the measured time) and count
    deliveries until ``expected``; ``cpu_s`` is this process's CPU time meanwhile.

    Reads through the Python client's own transport (``StreamTransport``: the socket, or
    the TLS layer, reads into the buffer frames are parsed from), what ``Client`` uses.
    """
    counter = _ReplayCounter(expected)
    handlers = Handlers(counter.frame_received, counter.data_to_send, counter.connection_lost)
    context = ssl.create_default_context(cafile=cafile) if url.startswith("wss://") else None
    transport = await StreamTransport.open(
        url, handlers, open_timeout=timeout, max_size=None, ssl=context
    )
    try:
        await transport.send(logon_command(name))
        logon = await asyncio.wait_for(counter.logon, timeout)
        _check_failures([logon])
        await gate.aopen()
        cpu0 = time.process_time()
        start = time.monotonic_ns()
        await transport.send(subscribe_command(topic, "r1", bookmark="0", filter=filter))
        done = asyncio.ensure_future(counter.done.wait())
        ended = asyncio.ensure_future(counter.ended.wait())
        await asyncio.wait({done, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        done.cancel()
        ended.cancel()
        if counter.count < expected:
            raise BenchProtocolError(f"replay ended at {counter.count} of {expected} messages")
        cpu_s = time.process_time() - cpu0
    finally:
        await transport.close()
    return {"start_ns": start, "first_ns": counter.first, "last_ns": counter.last,
            "count": counter.count, "cpu_s": cpu_s}  # fmt: skip


async def paced_publisher(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    rate: int,
    seconds: float,
    body_bytes: int,
    persisted: bool,
    timeout: float,
) -> dict[str, Any]:
    """Publish ``rate * seconds`` stamped messages at ``rate`` per second.

    Whatever is due is sent in one frame each time the loop wakes (about every
    millisecond: asyncio's timer resolution), stamped with the time the frame is built.
    With ``persisted`` the latency from send to the persisted ack covering each message
    is measured too.
    """
    total = int(rate * seconds)
    ws, logon = await open_session(url, name, timeout=timeout)
    base = int(logon.get("s", 0) or 0)
    enc = PublishEncoder(topic, persisted=persisted)
    send_ns = array("q", bytes(8 * total))
    lat = array("q")

    def on_ack(prev: int, upto: int, now: int) -> None:
        for seq in range(prev + 1, upto + 1):
            lat.append(now - send_ns[seq - base - 1])

    tracker = _PersistedTracker(ws, base, on_ack) if persisted else None
    try:
        await gate.aopen()
        start = time.monotonic_ns()
        interval = 1e9 / rate
        sent = 0
        last_send = start
        while sent < total:
            now = time.monotonic_ns()
            due = min(total, int((now - start) / interval) + 1) - sent
            if due <= 0:
                await asyncio.sleep((start + sent * interval - now) / 1e9)
                continue
            msgs = []
            for j in range(due):
                i = sent + j
                send_ns[i] = now
                msgs.append(enc.message(base + i + 1, stamped_body(now, i, body_bytes)))
            await ws.send(b"".join(msgs))
            sent += due
            last_send = now
        if tracker is not None:
            await asyncio.wait_for(tracker.wait_for(base + total), timeout)
    finally:
        if tracker is not None:
            tracker.task.cancel()
        await close_quietly(ws)
    out: dict[str, Any] = {"sent": total, "start_ns": start, "last_send_ns": last_send}
    if persisted:
        out.update(latency_summary(lat))
    return out


async def latency_subscriber(
    gate: Gate, *, url: str, name: str, topic: str, expected: int, timeout: float
) -> dict[str, Any]:
    """A live subscriber that reads the send stamp of each delivered message."""
    ws, _ = await open_session(url, name, timeout=timeout)
    lat = array("q")
    try:
        await ws.send(subscribe_command(topic, "l1"))
        await wait_acks(ws, {"l1"}, timeout)
        await gate.aopen()

        async def _read() -> None:
            finditer = STAMP_RE.findall
            while len(lat) < expected:
                frame = await ws.recv(decode=False)
                now = time.monotonic_ns()
                for stamp in finditer(frame):
                    lat.append(now - int(stamp))

        await asyncio.wait_for(_read(), timeout)
    finally:
        await close_quietly(ws)
    return latency_summary(lat)


async def hold_connections(
    gate: Gate, *, url: str, name: str, connections: int, timeout: float
) -> dict[str, Any]:
    """Open ``connections`` logged-on idle connections, hold them through the gate."""
    sockets: list[ClientConnection] = []
    try:
        for start in range(0, connections, 50):
            batch = await asyncio.gather(
                *(
                    open_session(url, f"{name}-{i}", timeout=timeout)
                    for i in range(start, min(connections, start + 50))
                )
            )
            sockets.extend(ws for ws, _ in batch)
        await gate.aopen()
    finally:
        await asyncio.gather(*(close_quietly(ws) for ws in sockets))
    return {"connections": len(sockets)}


async def hold_subscriptions(
    gate: Gate, *, url: str, name: str, topic_prefix: str, subscriptions: int, timeout: float
) -> dict[str, Any]:
    """One connection with ``subscriptions`` live subscriptions to distinct exact topics."""
    ws, _ = await open_session(url, name, timeout=timeout)
    try:
        for start in range(0, subscriptions, 100):
            ids = [f"m{i}" for i in range(start, min(subscriptions, start + 100))]
            await ws.send(b"".join(subscribe_command(f"{topic_prefix}/{sid}", sid) for sid in ids))
            await wait_acks(ws, set(ids), timeout)
        await gate.aopen()
    finally:
        await close_quietly(ws)
    return {"subscriptions": subscriptions}


async def logon_once(url: str, name: str, timeout: float) -> None:
    """Connect, log on, close: proves an instance serves clients (restart scenario)."""
    ws, _ = await open_session(url, name, timeout=timeout)
    await close_quietly(ws)
