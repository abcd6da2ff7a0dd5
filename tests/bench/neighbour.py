"""The noisy-neighbour family: a well-behaved client's publish latency while another one
attacks the broker, and what each attacking connection costs in memory.

Each run starts a fresh broker (``SlowClientBufferLimit`` 8 MB, the default quotas) and
measures a *probe*, a paced publisher (200 msgs/s, 100-byte bodies, persisted acks: send
to ack), twice back to back on it: alone (the baseline) and while one attacker works (the
attack). The figure that matters is ``p99_vs_baseline``, the two p99s of the same run on
the same broker (target <= 3). The broker's RSS is sampled every 50 ms from before the
attacker starts until it stops: ``rss_growth_mib`` is the peak growth, and
``rss_growth_vs_limit`` that growth over ``SlowClientBufferLimit`` per attacking
connection (target <= 1 where the attack is one connection).

The attacks, one scenario each:

- ``regex``: subscribes with filters whose constant folding would backtrack for ever
  (``REGEXP_MATCH('aaa…a!', '^(a+)+$')``), again and again, plus a ``LIKE '^(a+)+$'``
  subscription fed by its own publishes of ``aaa…a!`` (20 a second);
- ``replays``: 30 bookmark subscriptions from EPOCH over a 36 MB log of 60 KB messages on
  one connection that reads nothing;
- ``subscriptions``: 5,000 subscribes with distinct filters on the probe's own topic (past
  ``MaxSubscriptionsPerConnection`` they are refused);
- ``unauthenticated``: 2,000 sockets that open the websocket and never log on.

Not a test: the figures go to the suite's table and JSON (``make bench``); docs/security.md
and docs/performance.md quote them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import psutil

from spool.server.protocol.frame import encode_message
from tests.bench.catalog import ScenarioSpec
from tests.bench.processes import Gate, Task, run_tasks
from tests.bench.suite import Suite, reason_of
from tests.bench.wire import (
    close_quietly,
    command,
    open_session,
    scan_acks,
    subscribe_command,
    wait_acks,
)
from tests.bench.workers import paced_publisher

#: the attacked broker: an 8 MB outbound buffer per connection (messages up to 1 MB)
TUNING: Final = "<SlowClientBufferLimit>8MB</SlowClientBufferLimit>"
TRANSPORT: Final = "<MaxMessageSize>1MB</MaxMessageSize>"
LIMIT_MIB: Final = 8.0
PROBE_RATE: Final = 200
PROBE_TOPIC: Final = "public.probe"


# -- workers (each in its own process) --------------------------------------------------------


async def fill_log(gate: Gate, *, url: str, name: str, topic: str, count: int,
                   body_bytes: int, timeout: float) -> dict[str, Any]:  # fmt: skip
    """Publish ``count`` messages of ``body_bytes`` to ``topic``, 10 a frame; returns once
    a flush after them is acknowledged (every one persisted)."""
    ws, _ = await open_session(url, name, timeout=timeout)
    try:
        await gate.aopen()
        pad = b"x" * (body_bytes - 32)
        for start in range(0, count, 10):
            await ws.send(
                b"".join(
                    encode_message({"c": "publish", "t": topic}, b'{"i":%d,"pad":"%s"}' % (i, pad))
                    for i in range(start, min(count, start + 10))
                )
            )
        await ws.send(command({"c": "flush", "cid": "flush", "a": "processed"}))
        await wait_acks(ws, {"flush"}, timeout)
    finally:
        await close_quietly(ws)
    return {"count": count}


async def regex_attacker(gate: Gate, *, url: str, name: str, seconds: float,
                         timeout: float) -> dict[str, Any]:  # fmt: skip
    """Folding bombs in a loop, and a LIKE bomb fed by its own publishes."""
    ws, _ = await open_session(url, name, timeout=timeout)
    bomb = "a" * 40 + "!"
    refused = accepted = 0
    try:
        await ws.send(subscribe_command("public.regex", "like", filter="/v LIKE '^(a+)+$'"))
        await gate.aopen()
        end = time.monotonic() + seconds
        i = 0
        reader = asyncio.create_task(_drain(ws))
        while time.monotonic() < end:
            i += 1
            sid = f"fold{i}"
            flt = f"REGEXP_MATCH('{bomb}{i}', '^(a+)+$')"
            await ws.send(
                subscribe_command(PROBE_TOPIC, sid, filter=flt)
                + command({"c": "unsubscribe", "sub_id": sid})
                + encode_message(
                    {"c": "publish", "t": "public.regex"}, b'{"v":"%s"}' % bomb.encode()
                )
            )
            await asyncio.sleep(0.05)
        reader.cancel()
        accepted, refused = _counted(reader)
    finally:
        await close_quietly(ws)
    return {"sent": i, "accepted": accepted, "refused": refused}


async def replay_attacker(gate: Gate, *, url: str, name: str, topic: str, replays: int,
                          seconds: float, timeout: float) -> dict[str, Any]:  # fmt: skip
    """``replays`` bookmark subscriptions from EPOCH on one connection that reads nothing
    (a raw socket with a small receive buffer: the kernel does not read for it)."""
    sock = _raw_websocket(url, rcvbuf=64 * 1024)
    try:
        sock.sendall(_masked(command({"c": "logon", "cid": "l", "client_name": name})))
        await gate.aopen()
        frames = b"".join(
            command({"c": "subscribe", "t": topic, "sub_id": f"r{i}", "bm": "0"})
            for i in range(replays)
        )
        sock.sendall(_masked(frames))
        await asyncio.sleep(seconds)
    finally:
        sock.close()
    return {"replays": replays}


async def subscription_attacker(gate: Gate, *, url: str, name: str, subscriptions: int,
                                seconds: float, timeout: float) -> dict[str, Any]:  # fmt: skip
    """``subscriptions`` filtered subscriptions on the probe's topic, 100 per frame."""
    ws, _ = await open_session(url, name, timeout=timeout)
    try:
        await gate.aopen()
        reader = asyncio.create_task(_drain(ws))
        for start in range(0, subscriptions, 100):
            await ws.send(
                b"".join(
                    subscribe_command(PROBE_TOPIC, f"s{i}", filter=f"/v = {i}")
                    for i in range(start, min(subscriptions, start + 100))
                )
            )
            await asyncio.sleep(0)
        await asyncio.sleep(seconds)
        reader.cancel()
        accepted, refused = _counted(reader)
    finally:
        await close_quietly(ws)
    return {"accepted": accepted, "refused": refused}


async def unauthenticated_attacker(gate: Gate, *, url: str, sockets: int, seconds: float,
                                   timeout: float) -> dict[str, Any]:  # fmt: skip
    """``sockets`` websocket upgrades that never log on, held for ``seconds``."""
    await gate.aopen()
    held: list[socket.socket] = []
    refused = 0
    try:
        for _ in range(sockets):
            try:
                held.append(_raw_websocket(url))
            except (OSError, ConnectionError):
                refused += 1
        await asyncio.sleep(seconds)
    finally:
        for s in held:
            with contextlib.suppress(OSError):
                s.close()
    return {"upgraded": len(held), "refused": refused}


# -- the family --------------------------------------------------------------------------------


def _probe(url: str, name: str, seconds: float, timeout: float) -> Task:
    return Task(
        paced_publisher,
        {"url": url, "name": name, "topic": PROBE_TOPIC, "rate": PROBE_RATE,
         "seconds": seconds, "body_bytes": 100, "persisted": True, "timeout": timeout},
    )  # fmt: skip


def _attacker(attack: str, url: str, name: str, seconds: float, timeout: float) -> Task:
    # the attacker outlasts the probe: every probe message is sent under attack
    hold = seconds + 1.0
    if attack == "regex":
        return Task(regex_attacker, {"url": url, "name": name, "seconds": hold,
                                     "timeout": timeout})  # fmt: skip
    if attack == "replays":
        return Task(replay_attacker, {"url": url, "name": name, "topic": "public.big",
                                      "replays": 30, "seconds": hold,
                                      "timeout": timeout})  # fmt: skip
    if attack == "subscriptions":
        return Task(subscription_attacker, {"url": url, "name": name, "subscriptions": 5000,
                                            "seconds": hold, "timeout": timeout})  # fmt: skip
    return Task(unauthenticated_attacker, {"url": url, "sockets": 2000, "seconds": hold,
                                           "timeout": timeout})  # fmt: skip


def _once(suite: Suite, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    attack = str(spec.params["attack"])
    seconds = 3.0 if s.quick else 8.0
    rid = suite.next_id()
    with suite.spool_broker(f"neighbour-{attack}-{rid}", tuning=TUNING,
                            transport_extra=TRANSPORT) as broker:  # fmt: skip
        proc = psutil.Process(broker.pid)
        url = broker.ws_url
        if attack == "replays":
            run_tasks(
                [Task(fill_log, {"url": url, "name": f"fill-{rid}", "topic": "public.big",
                                 "count": 600, "body_bytes": 60_000,
                                 "timeout": s.worker_timeout})],
                timeout=s.worker_timeout,
            )  # fmt: skip
        (alone,) = run_tasks([_probe(url, f"probe-a-{rid}", seconds, s.worker_timeout)],
                             timeout=s.worker_timeout)  # fmt: skip
        with _rss_peak(proc) as peak:
            probe, attacked = run_tasks(
                [
                    _probe(url, f"probe-b-{rid}", seconds, s.worker_timeout),
                    _attacker(attack, url, f"attacker-{rid}", seconds, s.worker_timeout),
                ],
                timeout=s.worker_timeout,
            )
    growth = max(0, peak.value - peak.before) / 2**20
    out: dict[str, float] = {
        "baseline_p50_ms": alone["p50_ms"],
        "baseline_p99_ms": alone["p99_ms"],
        "p50_ms": probe["p50_ms"],
        "p99_ms": probe["p99_ms"],
        "max_ms": probe["max_ms"],
        "p99_vs_baseline": probe["p99_ms"] / alone["p99_ms"],
        "rss_growth_mib": growth,
    }
    connections = int(spec.params["connections"])
    if connections:
        out["rss_growth_vs_limit"] = growth / (LIMIT_MIB * connections)
    out.update({f"attacker_{k}": float(v) for k, v in attacked.items()})
    return out


def run_neighbour(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    for spec in specs:
        try:
            suite.measure(spec, functools.partial(_once, suite, spec))
        except Exception as exc:  # a family never takes the suite down
            suite.record(spec, "error", reason_of(exc))


# -- helpers -----------------------------------------------------------------------------------


class _Peak:
    def __init__(self, before: int) -> None:
        self.before = before
        self.value = before


@contextlib.contextmanager
def _rss_peak(proc: psutil.Process) -> Iterator[_Peak]:
    """The broker's RSS before, and its peak while the block runs (sampled every 50 ms)."""
    peak = _Peak(proc.memory_info().rss)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            with contextlib.suppress(psutil.Error):
                peak.value = max(peak.value, proc.memory_info().rss)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


async def _drain(ws: Any) -> tuple[int, int]:
    """Read everything; count the success and failure acks (returned when cancelled)."""
    counts = [0, 0]
    task = asyncio.current_task()
    assert task is not None
    task.counts = counts  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        while True:
            frame = await ws.recv(decode=False)
            for ack in scan_acks(frame):
                counts[0 if ack.get("status") == "success" else 1] += 1
    return counts[0], counts[1]


def _counted(task: asyncio.Task[tuple[int, int]]) -> tuple[int, int]:
    counts: list[int] = task.counts  # type: ignore[attr-defined]
    return counts[0], counts[1]


def _raw_websocket(url: str, rcvbuf: int | None = None) -> socket.socket:
    """A websocket upgrade on a plain socket that the caller reads (or not) itself.

    Raises:
        ConnectionError: the upgrade was refused.
    """
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    sock.sendall(
        (
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        sock.close()
        raise ConnectionError(head.split(b"\r\n", 1)[0].decode(errors="replace"))
    return sock


def _masked(payload: bytes) -> bytes:
    """One client frame (binary, masked as RFC 6455 requires of clients)."""
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = bytes([0x82, 0x80 | n])
    elif n < 65536:
        head = bytes([0x82, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x82, 0x80 | 127]) + n.to_bytes(8, "big")
    key = (mask * (n // 4 + 1))[:n]
    return (
        head
        + mask
        + (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
    )
