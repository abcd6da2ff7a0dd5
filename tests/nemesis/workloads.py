"""The clients of a nemesis run, each recording its history (:mod:`tests.nemesis.history`).

| process | what it does | its events (``f``: value) |
|---|---|---|
| ``pub-N`` | a plain client publishing ``nem.pub`` with persisted acks; after any failure it connects to the next instance and resends from its last ack | ``publish`` invoke ``{first, last, topic}``, ok ``{upto}``; info ``logon {last_seq}``, ``broken {error}`` |
| ``ha-pub-N`` | an ``HAClient`` with a ``FilePublishStore`` over every instance; when its store's disk is full it waits for room | ``publish`` invoke ``{first, last, topic}`` (what the store took), ok ``{upto}`` (the store's discard mark); info ``store-refused {at, error}`` |
| ``ha-sub-N`` | an ``HAClient`` bookmark subscriber of ``nem.pub`` from EPOCH with a ``FileBookmarkStore``; discards each message | ``recv`` ok ``{msgs: [[pub_hash, seq], ...]}``, in processing order |
| ``dpub`` | a plain publisher of ``nem.delay``, as ``pub-N``, each message with ``deliver_at``: a seeded random 0.5-8 s after its first send, fixed per sequence (a resend asks for the same moment), carried in its body (``due``) | as ``pub-N``, the invoke with ``due`` (epoch seconds, one per sequence of ``first..last``) |
| ``dsub`` | an ``HAClient`` bookmark subscriber of ``nem.delay`` from EPOCH, as ``ha-sub-N`` | ``recv`` ok ``{msgs: [[pub_hash, seq, wall], ...]}``: ``wall``, the machine's clock when it took the message |
| ``qpub`` | a plain publisher of ``nem.q.in`` (the queue's topic) | as ``pub-N`` |
| ``qc-X`` | a consumer of queue ``nem.q`` on instance X; acks each message and flushes, but rejects every one whose ``n`` is 5 modulo 17 (to the dead-letter topic); now and then dies holding its lease (drops the connection without acking) | ``process`` invoke ``{bm, n, dc}`` (delivered: recorded as it arrives); ``ack`` invoke ``{bm, n, reject}`` (sent), ok ``{bm, n, reject}`` once processed and flushed (confirmed), fail ``{bm, n, refused}``; info ``die {bm, n}`` |
| ``sow-w-N`` | a plain publisher of ``nem.sow`` (keys ``k0..k{K-1}``) | as ``pub-N`` |
| ``sow-reader`` | a SOW query on each instance in turn | ``sow-read`` ok ``{rows: {key: [writer, n]}}`` |

Every client takes the cluster's ``gate`` before each new operation: the nemesis closes
it to stop traffic (before a restart of every instance, while it takes a SOW snapshot),
so what the workload does never races a step that needs it still. Publishers stop taking
new sequence numbers once ``draining`` is set and go on until everything they sent is
acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from spool.server.client import (
    Client,
    DefaultServerChooser,
    ExponentialDelayStrategy,
    FileBookmarkStore,
    FilePublishStore,
    HAClient,
    StoreIOError,
    subscribe_queue,
)
from spool.server.client.ha import ConnectionStateEvent, StaticAuthenticator
from tests.nemesis.cluster import QUEUE, TOPIC_DELAY, TOPIC_PUB, TOPIC_QIN, TOPIC_SOW
from tests.nemesis.history import Recorder

__all__ = [
    "Delays",
    "Endpoints",
    "HAPublisher",
    "HASubscriber",
    "Publisher",
    "QueueConsumer",
    "SowReader",
    "parse_bookmark",
    "pub_body",
    "sow_body",
]

#: a client that hears nothing for this long takes its connection for dead
SILENCE = 10.0
_BACKOFF = 0.3


def parse_bookmark(bookmark: str | None) -> tuple[int, int]:
    """``PUBHASH|PUBSEQ|`` as ``(pub_hash, pub_seq)``."""
    if not bookmark:
        raise ValueError("a message of a recorded topic without a bookmark")
    h, s, *_ = bookmark.split("|")
    return int(h), int(s)


def pub_body(name: str, seq: int) -> bytes:
    """A publisher's message ``seq`` (the same bytes when it is sent again)."""
    return orjson.dumps({"p": name, "n": seq, "pad": "x" * 64})


def delayed_body(name: str, seq: int, due: float) -> bytes:
    """A delayed publisher's message ``seq``, due at ``due`` (epoch seconds)."""
    return orjson.dumps({"p": name, "n": seq, "due": due})


@dataclass
class Delays:
    """The due times of a delayed publisher's messages: each drawn once, at its first
    send, ``lo``..``hi`` seconds after it; a resend (after a failover) asks for the same
    moment, so every instance that stores the message has it due at one time."""

    rng: random.Random
    lo: float = 0.5
    hi: float = 8.0
    due: dict[int, float] = field(default_factory=dict)

    def of(self, seq: int) -> float:
        """Epoch seconds (to the microsecond, as ``deliver_at`` carries them)."""
        t = self.due.get(seq)
        if t is None:
            t = self.due[seq] = round(time.time() + self.rng.uniform(self.lo, self.hi), 6)
        return t


def sow_body(keys: int) -> Callable[[str, int], bytes]:
    def body(name: str, seq: int) -> bytes:
        return orjson.dumps({"k": f"k{seq % keys}", "w": name, "n": seq})

    return body


@dataclass
class Endpoints:
    """Where the clients connect, and as whom."""

    urls: dict[str, str]  # node -> websocket URL
    user: str
    token: str
    #: open while traffic may flow (the nemesis closes it)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    def order(self, home: str) -> list[tuple[str, str]]:
        """Every (node, url), ``home`` first, then the others in name order after it."""
        names = sorted(self.urls)
        i = names.index(home)
        return [(n, self.urls[n]) for n in names[i:] + names[:i]]

    def node_of(self, url: str | None) -> str | None:
        return next((n for n, u in self.urls.items() if u == url), None)

    def chooser(self, home: str) -> DefaultServerChooser:
        """An HA client's server list: ``home`` first, then the others."""
        return DefaultServerChooser(
            [u for _, u in self.order(home)],
            authenticator=StaticAuthenticator(self.user, self.token),
        )

    def client(self, url: str, name: str, **kw: Any) -> Client:
        return Client(url, name, user_id=self.user, password=self.token, heartbeat=1.0, **kw)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _listen(rec: Recorder, ends: Endpoints, client: HAClient) -> None:
    """Record an HA client's connection states and the errors it reports (``state``,
    ``error`` info events): what it did while the nemesis acted."""

    def state(event: ConnectionStateEvent) -> None:
        rec.info("state", {"state": event.state.name, "detail": event.detail[:200]},
                 ends.node_of(event.uri))  # fmt: skip

    def error(exc: BaseException) -> None:
        rec.info("error", {"error": _error(exc)}, ends.node_of(client.uri))

    client.add_connection_state_listener(state)
    client.exception_listener = error


async def _restarting(
    rec: Recorder,
    session: Callable[[asyncio.Event], Awaitable[None]],
    stop: asyncio.Event,
    done: Callable[[], bool],
) -> None:
    """Run an HA client's ``session`` until ``stop`` or ``done()``; an error it gives up
    on is recorded (``broken``) and a new session starts from the client's file store,
    as an application restarts it."""
    while not stop.is_set() and not done():
        try:
            await session(stop)
        except Exception as exc:
            rec.info("broken", {"error": _error(exc)})
            await asyncio.sleep(_BACKOFF)


@dataclass
class Publisher:
    """A plain client publishing with persisted acks, resending after a failure; with
    ``delays``, each message delayed (``deliver_at``, the body :func:`delayed_body`).

    Attributes:
        top: the highest sequence sent; acked: the highest persisted ack received.
    """

    rec: Recorder
    ends: Endpoints
    name: str
    topic: str
    home: str
    rate: float
    batch: int = 10
    body: Callable[[str, int], bytes] = pub_body
    delays: Delays | None = None
    top: int = 0
    acked: int = 0
    draining: bool = False
    #: connections after the first (a failover each)
    reconnects: int = 0

    @property
    def done(self) -> bool:
        return self.draining and self.acked >= self.top

    async def run(self, stop: asyncio.Event) -> None:
        route = self.ends.order(self.home)
        attempt = 0
        while not self.done and not stop.is_set():
            node, url = route[attempt % len(route)]
            if attempt:
                self.reconnects += 1
                await asyncio.sleep(_BACKOFF)
            # it numbers its publishes and resends from its last ack on purpose: what the
            # instance already holds must come back as duplicates, so no reuse warning
            client = self.ends.client(url, self.name, reused_seq="allow")
            try:
                info = await client.connect(timeout=SILENCE)
                self.rec.info("logon", {"last_seq": info.last_seq}, node)
                await self._publish(client, node, stop)
            except Exception as exc:  # any failure: the next instance, from the last ack
                self.rec.info("broken", {"error": _error(exc), "acked": self.acked}, node)
                attempt += 1
            finally:
                await client.close()

    async def _publish(self, client: Client, node: str, stop: asyncio.Event) -> None:
        # everything after the last ack is sent again, whatever the instance says it
        # holds (its logon's sequence is its log's, not an acknowledgement): it drops
        # duplicates and acknowledges them with the rest
        nxt = self.acked + 1
        while not stop.is_set():
            started = time.monotonic()
            if nxt > self.top:
                # nothing left to send again: a new batch, when the gate lets it
                if self.draining:
                    if self.done:
                        return
                    await asyncio.sleep(0.05)
                    continue
                await self.ends.gate.wait()
                end = nxt + self.batch - 1
            else:
                end = min(self.top, nxt + self.batch - 1)
            value: dict[str, Any] = {"topic": self.topic, "first": nxt, "last": end}
            if self.delays is None:
                self.rec.invoke("publish", value, node)
                for seq in range(nxt, end + 1):
                    client.publish(self.topic, self.body(self.name, seq), seq=seq, persisted=True)
            else:
                dues = [self.delays.of(seq) for seq in range(nxt, end + 1)]
                self.rec.invoke("publish", {**value, "due": dues}, node)
                for seq, due in zip(range(nxt, end + 1), dues, strict=True):
                    client.publish(
                        self.topic,
                        delayed_body(self.name, seq, due),
                        seq=seq,
                        persisted=True,
                        deliver_at=datetime.fromtimestamp(due, UTC),
                    )
            self.top = max(self.top, end)
            await client.wait_persisted(end, timeout=SILENCE)
            nxt = end + 1
            if client.persisted_seq > self.acked:
                self.acked = client.persisted_seq
                self.rec.ok("publish", {"upto": self.acked}, node)
            if self.done:
                return
            if not self.draining:
                await asyncio.sleep(max(0.0, self.batch / self.rate - (time.monotonic() - started)))


@dataclass
class HAPublisher:
    """An ``HAClient`` with a file publish store, failing over across every instance."""

    rec: Recorder
    ends: Endpoints
    name: str
    home: str
    store: Path
    rate: float
    batch: int = 10
    top: int = 0
    acked: int = 0
    draining: bool = False
    client: HAClient | None = None

    @property
    def done(self) -> bool:
        return self.draining and self.acked >= self.top

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until drained (the client made again from its store after an error
        it gives up on)."""
        await _restarting(self.rec, self._session, stop, lambda: self.done)

    async def _session(self, stop: asyncio.Event) -> None:
        client = self.client = HAClient(
            self.name,
            publish_store=FilePublishStore(self.store),
            chooser=self.ends.chooser(self.home),
            delay=ExponentialDelayStrategy(initial=0.2, maximum=2.0),
            connect_timeout=SILENCE,
        )
        client.set_heartbeat(1.0, SILENCE / 2)
        _listen(self.rec, self.ends, client)
        watcher = asyncio.create_task(self._watch_acks(stop, client))
        try:
            await client.connect_and_logon()
            self.top = client.publish_store.last_seq
            while not stop.is_set() and not self.draining:
                started = time.monotonic()
                await self.ends.gate.wait()
                if client.unpersisted_count() > 500:  # pace on what waits for acks
                    await asyncio.sleep(0.1)
                    continue
                first = client.publish_store.last_seq + 1
                node = self.ends.node_of(client.uri)
                # publish() only stores and queues: nothing is sent before the invoke
                # below is recorded, which names only what the store took
                refused: StoreIOError | None = None
                for n in range(first, first + self.batch):
                    try:
                        seq = client.publish(TOPIC_PUB, pub_body(self.name, n))
                    except StoreIOError as exc:  # its disk is full: nothing was taken
                        refused = exc
                        break
                    if seq != n:
                        self.rec.info("renumbered", {"expected": n, "got": seq}, node)
                last = client.publish_store.last_seq
                if last >= first:
                    self.rec.invoke(
                        "publish", {"topic": TOPIC_PUB, "first": first, "last": last}, node
                    )
                self.top = last
                if refused is not None:
                    self.rec.info("store-refused", {"at": last + 1, "error": _error(refused)}, node)
                    await client.wait_for_room()
                    continue
                await asyncio.sleep(max(0.0, self.batch / self.rate - (time.monotonic() - started)))
            while not stop.is_set() and not self.done:
                await asyncio.sleep(0.1)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await client.close()

    async def _watch_acks(self, stop: asyncio.Event, client: HAClient) -> None:
        while not stop.is_set():
            done = client.publish_store.last_discarded
            if done > self.acked:
                self.acked = done
                self.rec.ok("publish", {"upto": done}, self.ends.node_of(client.uri))
            await asyncio.sleep(0.1)


@dataclass
class HASubscriber:
    """An ``HAClient`` bookmark subscriber of ``topic`` from EPOCH (a file bookmark
    store), discarding each message once recorded; ``timed``: with the wall time it took
    each (the delayed topic's subscriber, whose checks compare it with the due time)."""

    rec: Recorder
    ends: Endpoints
    name: str
    home: str
    store: Path
    topic: str = TOPIC_PUB
    timed: bool = False
    processed: int = 0
    seen: set[tuple[int, int]] = field(default_factory=set)
    client: HAClient | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """Process until stopped (the client made again from its bookmark store after
        an error it gives up on: its subscription ended)."""
        await _restarting(self.rec, self._session, stop, lambda: False)

    async def _session(self, stop: asyncio.Event) -> None:
        client = self.client = HAClient(
            self.name,
            bookmark_store=FileBookmarkStore(self.store, fsync=False),
            chooser=self.ends.chooser(self.home),
            delay=ExponentialDelayStrategy(initial=0.2, maximum=2.0),
            connect_timeout=SILENCE,
        )
        client.set_heartbeat(1.0, SILENCE / 2)
        _listen(self.rec, self.ends, client)
        batch: list[list[Any]] = []
        node: str | None = None
        last_flush = time.monotonic()

        def flush() -> None:
            nonlocal last_flush
            if batch:
                self.rec.ok("recv", {"msgs": list(batch)}, node)
                batch.clear()
            last_flush = time.monotonic()

        try:
            await client.connect_and_logon()
            sub = await client.subscribe(self.topic, bookmark="0", sub_id=self.name)
            while not stop.is_set():
                try:
                    msg = await sub.get(timeout=0.5)
                except TimeoutError:
                    flush()
                    continue
                now_node = self.ends.node_of(client.uri)
                if now_node != node:
                    flush()
                    node = now_node
                key = parse_bookmark(msg.bookmark)
                if self.timed:
                    batch.append([key[0], key[1], round(time.time(), 6)])
                else:
                    batch.append([key[0], key[1]])
                self.seen.add(key)
                self.processed += 1
                client.discard(msg)
                if len(batch) >= 200 or time.monotonic() - last_flush > 0.5:
                    flush()
        finally:
            flush()
            await client.close()


@dataclass
class QueueConsumer:
    """A consumer of the queue on one instance: acks, flushes, sometimes dies holding
    its lease."""

    rec: Recorder
    ends: Endpoints
    name: str
    home: str
    rng: random.Random
    die_share: float = 0.02
    acked: int = 0
    deliveries: int = 0
    #: the messages (``n``) this consumer acked, and those whose ack it saw confirmed
    attempted: set[int] = field(default_factory=set)
    confirmed: set[int] = field(default_factory=set)

    async def run(self, stop: asyncio.Event) -> None:
        url = self.ends.urls[self.home]
        node = self.home
        while not stop.is_set():
            client = self.ends.client(url, self.name)
            try:
                await client.connect(timeout=SILENCE)
                sub = await subscribe_queue(client, QUEUE, max_backlog=5)
                self.rec.info("subscribed", None, node)
                await self._consume(client, sub, node, stop)
            except Exception as exc:
                self.rec.info("broken", {"error": _error(exc)}, node)
            finally:
                await client.close()
            await asyncio.sleep(_BACKOFF)

    async def _consume(self, client: Client, sub: Any, node: str, stop: asyncio.Event) -> None:
        arrived: asyncio.Queue[tuple[Any, str, int]] = asyncio.Queue()
        receiver = asyncio.create_task(self._receive(client, sub, node, arrived))
        try:
            await self._process(client, sub, node, stop, arrived, receiver)
        finally:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receiver

    async def _receive(
        self, client: Client, sub: Any, node: str, arrived: asyncio.Queue[tuple[Any, str, int]]
    ) -> None:
        """Records each delivery as it arrives: a message the broker sent before an ack
        reached it (a lease that ended meanwhile) is a delivery before that ack, even
        when the consumer takes it from its backlog after the ack was confirmed."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                msg = await sub.get(timeout=1.0)
            except TimeoutError:
                heard = client.last_received
                if heard is not None and loop.time() - heard > SILENCE:
                    raise TimeoutError("the instance went silent") from None
                continue
            bm = msg.bookmark
            n = msg.json()["n"]
            self.deliveries += 1
            self.rec.invoke("process", {"bm": bm, "n": n, "dc": msg.delivery_count}, node)
            arrived.put_nowait((msg, bm, n))

    async def _process(
        self,
        client: Client,
        sub: Any,
        node: str,
        stop: asyncio.Event,
        arrived: asyncio.Queue[tuple[Any, str, int]],
        receiver: asyncio.Task[None],
    ) -> None:
        while not stop.is_set():
            if receiver.done():
                receiver.result()  # raises what ended the receiving
                return
            try:
                msg, bm, n = await asyncio.wait_for(arrived.get(), timeout=1.0)
            except TimeoutError:
                continue
            if self.rng.random() < self.die_share:
                self.rec.info("die", {"bm": bm, "n": n}, node)
                client.abandon("the consumer dies holding its lease")
                return
            await self.ends.gate.wait()
            reject = rejected(n)
            self.rec.invoke("ack", {"bm": bm, "n": n, "reject": reject}, node)
            self.attempted.add(n)
            if reject:
                msg.reject("nemesis rejects it")
            else:
                msg.ack()
            await sub.settled()
            if sub.errors:
                raise sub.errors.pop()
            refused = int(sub.acks[-1].header.get("refused", 0)) if sub.acks else 0
            if refused:
                self.rec.fail("ack", {"bm": bm, "n": n, "refused": refused}, node)
                continue
            await client.flush(timeout=SILENCE)
            self.acked += 1
            self.confirmed.add(n)
            self.rec.ok("ack", {"bm": bm, "n": n, "reject": reject}, node)


def rejected(n: int) -> bool:
    """Whether the queue consumers reject message ``n`` (to the dead-letter topic)."""
    return n % 17 == 5


@dataclass
class SowReader:
    """Queries the SOW topic on each instance in turn."""

    rec: Recorder
    ends: Endpoints
    name: str = "sow-reader"
    every: float = 2.0

    async def run(self, stop: asyncio.Event) -> None:
        order = sorted(self.ends.urls)
        i = 0
        while not stop.is_set():
            node = order[i % len(order)]
            i += 1
            await self.ends.gate.wait()
            client = self.ends.client(self.ends.urls[node], self.name)
            try:
                await client.connect(timeout=SILENCE)
                self.rec.invoke("sow-read", None, node)
                result = await client.sow(TOPIC_SOW, timeout=SILENCE)
                self.rec.ok("sow-read", {"rows": sow_rows(result.records)}, node)
            except Exception as exc:
                self.rec.fail("sow-read", {"error": _error(exc)}, node)
            finally:
                await client.close()
            await asyncio.sleep(self.every)


def sow_rows(records: Sequence[Any]) -> dict[str, list[Any]]:
    """A SOW answer as ``{key: [writer, n]}`` (the writer's name and sequence)."""
    rows: dict[str, list[Any]] = {}
    for m in records:
        body = orjson.loads(m.data)
        rows[body["k"]] = [body["w"], body["n"]]
    return rows


#: what the harness publishes where (topic -> the publishers' prefix)
TOPICS = {TOPIC_PUB: "pub", TOPIC_DELAY: "dpub", TOPIC_QIN: "qpub", TOPIC_SOW: "sow-w"}
