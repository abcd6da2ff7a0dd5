"""The soak's clients: what a careful application does when its broker goes away.

- :class:`Publisher` publishes with persisted acks and, after any failure (a dropped
  connection, a refused publish, a broker that stopped answering), reconnects and resends
  everything after the last sequence the broker acknowledged as persisted (the logon ack
  says which); the broker recognises the duplicates.
- :class:`BookmarkSubscriber` records every bookmark it processes and, after any failure,
  resubscribes from the last one (``bookmark_not_found=fail``: a resume point the broker
  does not know is an error here, not a silent jump to NOW).
- :class:`LiveSubscriber` subscribes without a bookmark and keeps what each connection
  received; with a ``delay`` it is the slow reader, which takes each message late so the
  broker has to spill it to the log and let it catch up.

Every client watches for silence itself (no message for ``silence`` seconds while the
broker should be sending): a frozen broker keeps its TCP connections open, and only the
client can notice that nothing comes.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import orjson
from websockets.asyncio.client import connect

from spool.server.client import Client, ClientError
from spool.server.client.connection import (
    ClientTransport,
    Handlers,
    WebSocketTransport,
    connect_websocket,
)
from spool.server.protocol.errors import ProtocolFailure, TxlogFull

__all__ = [
    "TOPICS",
    "BookmarkSubscriber",
    "Connection",
    "LiveSubscriber",
    "Publisher",
    "Target",
    "parse_bookmark",
    "topic_of",
]

#: the recorded topics; a publisher's message ``seq`` goes to ``topic_of(seq)``, so a
#: resent message goes where the first copy went.
TOPICS = ("soak.a", "soak.b", "soak.burst")

#: what a client does after a failure before it tries again (seconds)
_BACKOFF = 0.2
#: and after ``txlog full`` (the log retries on its own; resending at once is pointless)
_REFUSED_BACKOFF = 0.5


def topic_of(seq: int) -> str:
    """The topic of a publisher's message ``seq`` (every third one on ``soak.b``)."""
    return TOPICS[1] if seq % 3 == 0 else TOPICS[0]


def body_of(name: str, seq: int, pad: int) -> bytes:
    """The body of a publisher's message ``seq`` (deterministic, so a resend is identical)."""
    return orjson.dumps({"p": name, "n": seq, "pad": "x" * pad})


def parse_bookmark(bookmark: str | None) -> tuple[int, int]:
    """``PUBHASH|PUBSEQ|`` as ``(pub_hash, pub_seq)``.

    Raises:
        ValueError: not a bookmark (the broker sent a message without one).
    """
    if not bookmark:
        raise ValueError("a message of a recorded topic without a bookmark")
    pub_hash, pub_seq, *_ = bookmark.split("|")
    return int(pub_hash), int(pub_seq)


class Target(Protocol):
    """The broker the clients talk to, across restarts."""

    @property
    def url(self) -> str:
        """Its websocket URL now (the port changes at each restart)."""
        ...

    @property
    def epoch(self) -> int:
        """How many times it was restarted (a connection is made in one epoch)."""
        ...


#: the failures a client survives by reconnecting: refusals, dropped connections, a
#: broker that does not answer, a connection refused while it restarts, a handshake cut
#: by a kill (websockets raises its own exceptions for those; they are counted by name).
_RECOVERABLE: tuple[type[BaseException], ...] = (ProtocolFailure, ClientError, OSError)


#: the slow reader's kernel receive buffer: small, so what it does not read stays in the
#: broker (loopback autotuning would otherwise absorb megabytes on its behalf)
SLOW_RCVBUF = 64 * 1024


async def small_buffer_connector(
    url: str,
    handlers: Handlers,
    *,
    open_timeout: float,
    max_size: int | None,
    ssl: ssl.SSLContext | None = None,
) -> ClientTransport:
    """A websocket whose socket has a :data:`SLOW_RCVBUF` receive buffer and whose library
    holds at most two frames: a reader that takes messages late pushes back at once."""
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF)
    sock.setblocking(False)
    try:
        await asyncio.wait_for(
            asyncio.get_running_loop().sock_connect(
                sock, (parts.hostname or "127.0.0.1", parts.port or 80)
            ),
            open_timeout,
        )
        ws = await connect(
            url,
            sock=sock,
            compression=None,
            max_size=max_size,
            max_queue=2,
            open_timeout=open_timeout,
            ping_interval=None,
            ssl=ssl,
        )
    except BaseException:
        sock.close()
        raise
    return WebSocketTransport(ws, handlers)


def _note(errors: Counter[str], exc: BaseException) -> None:
    errors[type(exc).__name__] += 1


@dataclass
class Publisher:
    """Publishes ``soak.*`` messages with persisted acks; resends from the last ack.

    Attributes:
        top: the highest sequence number sent so far (the end of what must be stored).
        acked: the highest sequence number the broker acknowledged as persisted.
        acks_lost: logons whose ``last_seq`` was below what had been acknowledged before
            (an acknowledged message the broker forgot: must stay empty).
        refused: ``txlog full`` answers (the disk was full).
        reconnects: connections made after the first.
    """

    target: Target
    name: str
    rate: float
    max_messages: int
    batch: int = 25
    pad: int = 120
    heartbeat: float = 1.0
    silence: float = 5.0
    #: the topic of each sequence number (a resend goes where the first copy went)
    topic: Callable[[int], str] = topic_of
    #: a burst publisher sends ``burst`` messages back to back, then pauses ``pause`` s
    burst: int = 0
    pause: float = 0.0
    top: int = 0
    acked: int = 0
    acks_lost: list[tuple[int, int]] = field(default_factory=list)
    refused: int = 0
    reconnects: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    #: set by the harness: publish nothing new, only get ``top`` acknowledged
    draining: bool = False

    @property
    def done(self) -> bool:
        return self.draining and self.acked >= self.top

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until draining and everything sent is acknowledged (or ``stop``)."""
        first = True
        while not self.done and not stop.is_set():
            if not first:
                self.reconnects += 1
                await asyncio.sleep(_BACKOFF)
            first = False
            client = Client(
                self.target.url, self.name, heartbeat=self.heartbeat, reused_seq="allow"
            )  # resends what is not acked
            try:
                info = await client.connect(timeout=self.silence)
                if info.last_seq < self.acked:
                    self.acks_lost.append((self.acked, info.last_seq))
                self.acked = max(self.acked, info.last_seq)
                await self._publish(client, stop)
            except TxlogFull as exc:
                self.refused += 1
                _note(self.errors, exc)
                await asyncio.sleep(_REFUSED_BACKOFF)
            except (*_RECOVERABLE, TimeoutError) as exc:
                _note(self.errors, exc)
            except Exception as exc:  # a handshake cut by a kill (websockets' own errors)
                _note(self.errors, exc)
            finally:
                self.acked = max(self.acked, client.persisted_seq)
                await client.close()

    async def _publish(self, client: Client, stop: asyncio.Event) -> None:
        nxt = self.acked + 1
        while not stop.is_set():
            started = time.monotonic()
            first = nxt
            if self.draining or self.top >= self.max_messages:
                # resend what is not acknowledged, nothing new, a batch at a time (a whole
                # burst in one frame would pass MaxMessageSize and end the connection)
                end = min(self.top, nxt + self.batch - 1)
            else:
                end = min(nxt + self.batch - 1, self.max_messages)
                if self.burst:  # a burst ends at a multiple of its size
                    end = min(end, (nxt - 1) // self.burst * self.burst + self.burst)
            for seq in range(nxt, end + 1):
                client.publish(
                    self.topic(seq), body_of(self.name, seq, self.pad), seq=seq, persisted=True
                )
            self.top = max(self.top, end)
            if end >= nxt:
                await client.wait_persisted(end, timeout=self.silence)
                nxt = end + 1
            self.acked = max(self.acked, client.persisted_seq)
            if self.done:
                return
            if self.draining:
                continue
            if self.burst:
                if end < first or end % self.burst == 0:  # idle, or a burst is over
                    await asyncio.sleep(self.pause)
                continue
            await asyncio.sleep(max(0.0, self.batch / self.rate - (time.monotonic() - started)))


@dataclass
class BookmarkSubscriber:
    """A bookmark subscription from EPOCH that resumes from the last bookmark it processed.

    Attributes:
        processed: ``(pub_hash, pub_seq)`` of every message processed, in order; each is
            also written as a line to ``record`` (the application's bookmark store).
        expected: set by the harness once publishing is over: how many messages of its
            topics the log holds (it stops when it has processed them).
    """

    target: Target
    name: str
    topic: str
    record: Path
    heartbeat: float = 1.0
    silence: float = 5.0
    processed: list[tuple[int, int]] = field(default_factory=list)
    connections: int = 0
    resumed_from: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    expected: int | None = None

    @property
    def done(self) -> bool:
        return self.expected is not None and len(self.processed) >= self.expected

    async def run(self, stop: asyncio.Event) -> None:
        bookmark = "0"
        with self.record.open("w") as store:
            while not self.done and not stop.is_set():
                if self.connections:
                    await asyncio.sleep(_BACKOFF)
                self.connections += 1
                self.resumed_from.append(bookmark)
                client = Client(self.target.url, self.name, heartbeat=self.heartbeat)
                try:
                    await client.connect(timeout=self.silence)
                    sub = await client.subscribe(
                        self.topic,
                        bookmark=bookmark,
                        options="bookmark_not_found=fail",
                        timeout=self.silence,
                    )
                    while not self.done and not stop.is_set():
                        msg = await sub.get(timeout=self.silence)
                        self.processed.append(parse_bookmark(msg.bookmark))
                        assert msg.bookmark is not None
                        store.write(msg.bookmark + "\n")
                        bookmark = msg.bookmark
                except (*_RECOVERABLE, TimeoutError) as exc:
                    _note(self.errors, exc)
                except Exception as exc:  # a handshake cut by a kill
                    _note(self.errors, exc)
                finally:
                    store.flush()
                    await client.close()


@dataclass
class Connection:
    """What one connection of a live subscriber received, in order."""

    epoch: int
    received: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class LiveSubscriber:
    """A subscription without a bookmark; with ``delay`` it is the slow reader.

    Attributes:
        connections: what each connection received (a live subscription starts at the
            moment it is placed, so each connection is checked on its own).
    """

    target: Target
    name: str
    topic: str
    delay: float = 0.0
    queue_size: int = 10_000
    heartbeat: float = 1.0
    silence: float = 5.0
    connections: list[Connection] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def received(self) -> int:
        return sum(len(c.received) for c in self.connections)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self.connections:
                await asyncio.sleep(_BACKOFF)
            client = Client(
                self.target.url,
                self.name,
                heartbeat=self.heartbeat,
                queue_size=self.queue_size,
                connector=small_buffer_connector if self.delay else connect_websocket,
            )
            try:
                await client.connect(timeout=self.silence)
                conn = Connection(self.target.epoch)
                self.connections.append(conn)
                sub = await client.subscribe(self.topic, timeout=self.silence)
                while not stop.is_set():
                    msg = await sub.get(timeout=self.silence)
                    conn.received.append(parse_bookmark(msg.bookmark))
                    if self.delay:
                        await asyncio.sleep(self.delay)
            except (*_RECOVERABLE, TimeoutError) as exc:
                _note(self.errors, exc)
            except Exception as exc:  # a handshake cut by a kill
                _note(self.errors, exc)
            finally:
                await client.close()
