"""Replication in tests: configuration builders, and an in-memory fabric of brokers.

Configurations (used by the in-process scenarios and by the multi-process tests alike)::

    xml = replication_xml(data_dir, "a", port=9107, destinations=[
        destination("b", [("127.0.0.1", 9207)], sync=True, passthrough=(".*",)),
    ])

The in-memory fabric links brokers of one process (server/engine.py takes a ``connector``):
a source dialing ``(host, port)`` gets a pipe to the broker registered at that address,
whose replication service accepts it as the web endpoint would. :meth:`MemoryFabric.cut`
breaks the pipes to an address (from one source, or all) and refuses new ones until
:meth:`MemoryFabric.heal`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from server.engine import Broker
from server.replication.inbound import InboundLink
from server.replication.transport import Connector, Dialed, LinkLost

_EOF = b""


def destination(
    name: str,
    addresses: Sequence[tuple[str, int]],
    *,
    sync: bool = True,
    group: str | None = None,
    topics: Iterable[tuple[str, str | None]] = ((".*", None),),
    exclude: str = "",
    passthrough: Sequence[str] = (),
    compression: str | None = None,
    user: str | None = None,
    secret: str | None = None,
) -> str:
    """One ``<Destination>``: topic blocks are ``(name, filter or None)``."""
    blocks = "".join(
        f"<Topic><Name>{t}</Name>"
        + (f"<Filter>{f}</Filter>" if f else "")
        + (f"<ExcludeValidation>{exclude}</ExcludeValidation>" if exclude else "")
        + "</Topic>"
        for t, f in topics
    )
    addrs = "".join(f"<InetAddr>{h}:{p}</InetAddr>" for h, p in addresses)
    creds = f"<User>{user}</User><Password>{secret}</Password>" if user else ""
    comp = f"<Compression>{compression}</Compression>" if compression else ""
    return (
        f"<Destination><Name>{name}</Name>"
        + (f"<Group>{group}</Group>" if group else "")
        + f"<SyncType>{'sync' if sync else 'async'}</SyncType>"
        + "".join(f"<PassThrough>{p}</PassThrough>" for p in passthrough)
        + blocks
        + f"<Transport><Type>amps-replication</Type>{addrs}{comp}{creds}</Transport>"
        + "</Destination>"
    )


def replication_xml(
    data_dir: Path,
    name: str,
    *,
    port: int = 0,
    group: str | None = None,
    destinations: Sequence[str] = (),
    inbound: bool = True,
    topics: Sequence[str] = (".*",),
    flush_interval: str = "1ms",
    ack_interval: str | None = None,
    journal_size: str = "64MB",
    tuning: str = "",
    users: str = "",
    admin_interval: str = "1s",
) -> str:
    """An instance that replicates: its log records ``topics``; ``destinations`` from
    :func:`destination`; an inbound ``/replication`` endpoint unless ``inbound`` is False."""
    topic_xml = "".join(
        f"<Topic><Name>{t}</Name><MessageType>json</MessageType></Topic>" for t in topics
    )
    repl = ""
    if destinations or ack_interval:
        ack = f"<AckInterval>{ack_interval}</AckInterval>" if ack_interval else ""
        repl = f"<Replication>{ack}{''.join(destinations)}</Replication>"
    replication_transport = (
        "<Transport><Name>amps-replication</Name><Type>amps-replication</Type>"
        f"<InetAddr>127.0.0.1:{port}</InetAddr></Transport>"
        if inbound
        else ""
    )
    return (
        "<SpoolConfig>"
        f"<Name>{name}</Name>"
        + (f"<Group>{group}</Group>" if group else "")
        + f"<DataDirectory>{data_dir}</DataDirectory>"
        f"<Admin><InetAddr>127.0.0.1:{port}</InetAddr>"
        f"<FileName>{data_dir / 'stats.db'}</FileName><Interval>{admin_interval}</Interval></Admin>"
        "<Transports><Transport><Name>websocket-json</Name><Type>websocket</Type>"
        f"<InetAddr>127.0.0.1:{port}</InetAddr><MessageType>json</MessageType></Transport>"
        f"{replication_transport}</Transports>"
        "<TransactionLog>"
        f"<JournalDirectory>{data_dir / 'journal'}</JournalDirectory>"
        f"<JournalArchiveDirectory>{data_dir / 'archive'}</JournalArchiveDirectory>"
        f"<JournalSize>{journal_size}</JournalSize>"
        f"<FlushInterval>{flush_interval}</FlushInterval>{topic_xml}</TransactionLog>"
        f"{repl}"
        f"{'<Tuning>' + tuning + '</Tuning>' if tuning else ''}"
        f"{'<Users>' + users + '</Users>' if users else ''}"
        "</SpoolConfig>"
    )


class _Pipe:
    """Both ends of one in-memory link."""

    def __init__(self, remote: str) -> None:
        self.to_source: asyncio.Queue[bytes] = asyncio.Queue()
        self.to_destination: asyncio.Queue[bytes] = asyncio.Queue()
        self.closed = False
        self.link: InboundLink | None = None
        self.source = _SourceEnd(self, remote)
        self.destination = _DestinationEnd(self, "memory-source")
        self.delivery = asyncio.get_running_loop().create_task(self._deliver())

    async def _deliver(self) -> None:
        """Source -> destination, in order, awaiting the link (its backpressure); the end
        of the stream reaches the link after everything sent before it."""
        while True:
            data = await self.to_destination.get()
            if data is _EOF or self.link is None:
                if self.link is not None:
                    self.link.lost()
                return
            await self.link.receive(data)

    def close(self) -> None:
        """An end closes: what was sent before still arrives, then the end of stream."""
        if self.closed:
            return
        self.closed = True
        self.to_source.put_nowait(_EOF)
        self.to_destination.put_nowait(_EOF)

    def cut(self) -> None:
        """A partition: both ends lose the link now, what was in flight is lost."""
        if self.closed:
            return
        self.closed = True
        self.to_source.put_nowait(_EOF)
        self.delivery.cancel()
        if self.link is not None:
            self.link.lost()


class _SourceEnd:
    def __init__(self, pipe: _Pipe, remote: str) -> None:
        self._pipe = pipe
        self._remote = remote

    @property
    def remote(self) -> str:
        return self._remote

    async def send(self, data: bytes) -> None:
        if self._pipe.closed:
            raise LinkLost("in-memory pipe is cut")
        self._pipe.to_destination.put_nowait(data)

    async def recv(self) -> bytes:
        if self._pipe.closed and self._pipe.to_source.empty():
            raise LinkLost("in-memory pipe is cut")
        data = await self._pipe.to_source.get()
        if data is _EOF:
            raise LinkLost("in-memory pipe is cut")
        return data

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self._pipe.close()


class _DestinationEnd:
    def __init__(self, pipe: _Pipe, remote: str) -> None:
        self._pipe = pipe
        self._remote = remote

    @property
    def remote(self) -> str:
        return self._remote

    async def send(self, data: bytes) -> None:
        if self._pipe.closed:
            raise LinkLost("in-memory pipe is cut")
        self._pipe.to_source.put_nowait(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self._pipe.close()


class MemoryFabric:
    """Brokers of one process, reachable by address through in-memory pipes.

    A broker's connector is :meth:`connector` of its own name, so a partition can cut one
    direction between two brokers (``cut(address, source="a")``) or everything reaching
    an address (``cut(address)``).
    """

    def __init__(self) -> None:
        self.brokers: dict[tuple[str, int], Broker] = {}
        self.down: set[tuple[tuple[str, int], str | None]] = set()
        self.pipes: dict[tuple[str, int], list[tuple[str, _Pipe]]] = {}
        self.dials: list[tuple[str, tuple[str, int]]] = []

    def register(self, address: tuple[str, int], broker: Broker) -> None:
        self.brokers[address] = broker

    def connector(self, source: str) -> Connector:
        """The dialer of the broker called ``source``."""

        async def connect(host: str, port: int) -> Dialed:
            return await self._connect(source, (host, port))

        return connect

    async def _connect(self, source: str, address: tuple[str, int]) -> Dialed:
        self.dials.append((source, address))
        broker = self.brokers.get(address)
        if (
            (address, None) in self.down
            or (address, source) in self.down
            or broker is None
            or broker.replication is None
        ):
            raise OSError(f"connection from {source} to {address[0]}:{address[1]} refused")
        if not broker.ready:
            raise LinkLost(f"{address[0]}:{address[1]} is not accepting replication")
        pipe = _Pipe(f"{address[0]}:{address[1]}")
        pipe.link = broker.replication.accept(pipe.destination)
        self.pipes.setdefault(address, []).append((source, pipe))
        return pipe.source

    def cut(self, address: tuple[str, int], *, source: str | None = None) -> None:
        """Break the pipes to ``address`` (from ``source``, or from everyone) and refuse
        new ones: a partition."""
        self.down.add((address, source))
        kept = []
        for owner, pipe in self.pipes.pop(address, []):
            if source is None or owner == source:
                pipe.cut()
            else:
                kept.append((owner, pipe))
        self.pipes[address] = kept

    def heal(self, address: tuple[str, int], *, source: str | None = None) -> None:
        self.down.discard((address, source))

    async def close(self) -> None:
        for pipes in self.pipes.values():
            for _owner, pipe in pipes:
                pipe.cut()
                with contextlib.suppress(asyncio.CancelledError):
                    await pipe.delivery
