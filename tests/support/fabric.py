"""Brokers of one process on one virtual clock, linked by in-memory pipes.

:func:`fabric_of` starts one :class:`~tests.support.engine.EngineHarness` per
configuration, each dialing the others through a
:class:`~tests.support.replication.MemoryFabric`; :func:`drive` moves the virtual clock
until a condition holds. Used by the replication unit tests (tests/unit/replication).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import wraps
from pathlib import Path

from spool.server.clock import VirtualClock
from tests.support.engine import EngineHarness, FakeClient
from tests.support.replication import MemoryFabric, destination, replication_xml

__all__ = [
    "A",
    "B",
    "C",
    "drive",
    "fabric_of",
    "linked",
    "pair",
    "persisted",
    "publish",
    "records",
    "scenario",
    "xml",
]

A = ("a.test", 1)
B = ("b.test", 2)
C = ("c.test", 3)


def scenario(fn: Callable[[Path], Awaitable[None]]) -> Callable[[Path], None]:
    @wraps(fn)
    def wrapper(tmp_path: Path) -> None:
        asyncio.run(fn(tmp_path))

    return wrapper


async def drive(clock: VirtualClock, cond: Callable[[], object], timeout: float = 60.0) -> None:
    """Move virtual time in small steps (group commits, ack intervals, back-offs) and let
    the threads (fsync) report, until ``cond()`` holds. ``timeout`` is wall-clock time, a
    guard against a hang only: generous, for a loaded machine."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await clock.advance(0.002)
        await asyncio.sleep(0.001)


@asynccontextmanager
async def fabric_of(
    tmp_path: Path, configs: dict[str, str]
) -> AsyncIterator[tuple[MemoryFabric, VirtualClock, dict[str, EngineHarness]]]:
    """Start one broker per (name -> xml), linked by a memory fabric."""
    fabric = MemoryFabric()
    clock = VirtualClock()
    addresses = {"a": A, "b": B, "c": C}
    harnesses: dict[str, EngineHarness] = {}
    for name, xml in configs.items():
        h = EngineHarness(tmp_path / name, xml, clock=clock, connector=fabric.connector(name))
        fabric.register(addresses[name], h.broker)
        harnesses[name] = h
    for h in harnesses.values():
        await h.__aenter__()
    try:
        yield fabric, clock, harnesses
    finally:
        for h in harnesses.values():
            await h.__aexit__(None, None, None)
        await fabric.close()


def xml(tmp: Path, name: str, *dests: str, **kw: object) -> str:
    return replication_xml(tmp / name / "data", name, destinations=dests, **kw)  # type: ignore[arg-type]


def pair(tmp: Path) -> dict[str, str]:
    """``a`` and ``b``, each the other's sync destination (every group passed through)."""
    return {"a": xml(tmp, "a", destination("b", [B])), "b": xml(tmp, "b", destination("a", [A]))}


async def linked(clock: VirtualClock, h: dict[str, EngineHarness]) -> None:
    """Until every destination of every broker streams."""

    def up() -> bool:
        for harness in h.values():
            repl = harness.broker.replication
            if repl is None or not all(d.connected for d in repl.destinations.values()):
                return False
        return True

    await drive(clock, up)


async def records(h: EngineHarness) -> list[tuple[int, int, bytes, tuple[str, ...]]]:
    """Every durable record of a broker: (pub_hash, pub_seq, body, path)."""
    txlog = h.broker.txlog
    assert txlog is not None
    out = []
    seq = txlog.first_seq
    while batch := await txlog.read_batch(seq, max_count=10_000):
        out.extend((r.pub_hash, r.pub_seq, r.body, r.path) for r in batch)
        seq = batch[-1].seq + 1
    return out


def publish(client: FakeClient, topic: str, seqs: range, *, acks: str = "persisted") -> None:
    client.send(*[({"c": "publish", "t": topic, "s": s, "a": acks}, b'{"n":%d}' % s) for s in seqs])


def persisted(client: FakeClient) -> int:
    return max((int(h["s"]) for h in client.acks("persisted")), default=0)
