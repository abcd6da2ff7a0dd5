"""Scenes for the tests of damaged logs, their repair and the refold that follows: brokers
on one memory fabric and virtual clock started and stopped by name, a publisher that
waits for its persisted acks, and the views of SOW and queue state those tests compare
(what the instance holds against a rebuild from its whole log)."""

from __future__ import annotations

from pathlib import Path

import orjson

from spool.server.clock import VirtualClock
from spool.server.sow.history import state_at
from tests.support.engine import EngineHarness, FakeClient
from tests.support.fabric import A, B, C, drive, persisted
from tests.support.replication import MemoryFabric

#: each scene instance's replication address on the memory fabric
ADDRESSES = {"a": A, "b": B, "c": C}


class Scene:
    """Brokers on one memory fabric and virtual clock, started and stopped by name."""

    def __init__(self, tmp_path: Path, configs: dict[str, str]) -> None:
        self.tmp = tmp_path
        self.configs = configs
        self.fabric, self.clock = MemoryFabric(), VirtualClock()
        self.hs: dict[str, EngineHarness] = {}

    async def start(self, *names: str) -> EngineHarness:
        """Start ``names`` (each registered at its address first); returns the last."""
        started = []
        for name in names:
            h = EngineHarness(self.tmp / name, self.configs[name], clock=self.clock,
                              connector=self.fabric.connector(name))  # fmt: skip
            self.fabric.register(ADDRESSES[name], h.broker)
            self.hs[name] = h
            started.append(h)
        for h in started:
            await h.__aenter__()
        return started[-1]

    async def stop(self, name: str) -> None:
        await self.hs.pop(name).__aexit__(None, None, None)

    async def close(self) -> None:
        for name in list(self.hs):
            await self.stop(name)
        await self.fabric.close()


def caught_up(h: EngineHarness) -> bool:
    """Every destination of ``h`` acknowledged its whole log."""
    repl = h.broker.replication
    assert repl is not None
    return all(d.acked >= h.last_seq for d in repl.destinations.values())


def own_identity(h: EngineHarness) -> int:
    """The publisher identity of the instance's own records (queue acks, deletes)."""
    txlog = h.broker.txlog
    assert txlog is not None
    return txlog.own_pub_hash


class Publisher:
    """A client publishing with its own sequence numbers, a persisted ack asked on the
    last message of each send, which waits for that ack."""

    def __init__(self, h: EngineHarness, client: FakeClient) -> None:
        self.h, self.client, self.n = h, client, 0

    async def send(self, topic: str, bodies: list[bytes]) -> range:
        """Publish ``bodies``; returns the sequences they took."""
        seqs = range(self.n + 1, self.n + 1 + len(bodies))
        self.n += len(bodies)
        last = seqs[-1]
        self.client.send(*[
            ({"c": "publish", "t": topic, "s": s, **({"a": "persisted"} if s == last else {})}, b)
            for s, b in zip(seqs, bodies, strict=True)
        ])  # fmt: skip
        await drive(self.h.clock, lambda: persisted(self.client) == self.n)
        return seqs

    def delete(self, key: str, topic: str = "orders") -> None:
        self.client.send(({"c": "sow_delete", "t": topic, "k": key}, b""))


def order(k: str, v: int) -> bytes:
    """A SOW record of the ``orders`` topics these tests configure (key ``/k``)."""
    return orjson.dumps({"k": k, "v": v})


def jobs(*names: str) -> list[bytes]:
    """Queue messages, one per name."""
    return [orjson.dumps({"m": m}) for m in names]


def sow_state(h: EngineHarness, topic: str = "orders") -> dict[str, tuple[bytes, int]]:
    """The SOW topic as the instance holds it: key -> (body, seq)."""
    store = h.broker.sow.topics.store(topic)
    return {r.key: (r.body, r.seq) for r in store.records()} if store is not None else {}


def sow_keys(h: EngineHarness, topic: str = "orders") -> list[str]:
    store = h.broker.sow.topics.store(topic)
    return store.keys() if store is not None else []


async def folded_sow(h: EngineHarness, topic: str = "orders") -> dict[str, tuple[bytes, int]]:
    """The SOW topic as a rebuild from the whole log gives it."""
    txlog, topics = h.broker.txlog, h.broker.sow.topics
    assert txlog is not None
    stores = await state_at(
        txlog, txlog.last_seq, 1 << 62, topics.rule, topics.spec, lambda t: t == topic
    )
    return {r.key: (r.body, r.seq) for r in stores[topic].records()} if stores else {}


def work(client: FakeClient, sub_id: str = "q") -> list[str]:
    """The names of the queue messages ``client`` was given, in delivery order."""
    return [orjson.loads(body)["m"] for _, body in client.deliveries(sub_id)]


def ack_work(client: FakeClient, names: set[str], queue: str = "work", sub_id: str = "q") -> None:
    """Ack the delivered messages named ``names`` in one ``sow_delete``."""
    bms = [
        str(h["bm"]) for h, body in client.deliveries(sub_id) if orjson.loads(body)["m"] in names
    ]
    assert len(bms) == len(names)
    client.send(({"c": "sow_delete", "t": queue, "bm": ",".join(bms)}, b""))


async def consume_all(h: EngineHarness, want: list[str], queue: str = "work") -> list[str]:
    """Subscribe a new consumer to ``queue``, take ``len(want)`` messages, then let five
    more seconds pass so a message given twice would show: every name given, sorted."""
    consumer = await h.logon("consumer")
    consumer.send(({"c": "subscribe", "t": queue, "sub_id": "q", "o": "max_backlog=100"}, b""))
    await drive(h.clock, lambda: len(work(consumer)) >= len(want))
    await h.clock.advance(5)
    await drive(h.clock, lambda: True)
    return sorted(work(consumer))
