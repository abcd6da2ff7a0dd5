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
import secrets
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from spool.server.bookmarks import broker_pub_hash
from spool.server.client import Client, ClientError, Disconnected
from spool.server.config import load_config
from spool.server.engine import Broker
from spool.server.peer import Peer
from spool.server.replication.bootsource import BootstrapSource
from spool.server.replication.errors import NotAccepting
from spool.server.replication.inbound import InboundLink
from spool.server.replication.transport import Connector, Dialed, LinkLost
from spool.server.txlog import TransactionLog
from spool.server.txlog.publishers.incarnation import read_incarnation
from tests.support.server import SpoolProcess

_EOF = b""


def free_ports(n: int) -> list[int]:
    """``n`` ports free on 127.0.0.1 now (bound together, then released), for instances
    that must know each other's address before they start."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def destination(
    name: str,
    addresses: Sequence[tuple[str, int]],
    *,
    sync: bool = True,
    group: str | None = None,
    topics: Iterable[tuple[str, str | None]] = ((".*", None),),
    exclude: str = "",
    passthrough: Sequence[str] | None = None,
    compression: str | None = None,
    user: str | None = None,
    secret: str | None = None,
    transport_extra: str = "",
) -> str:
    """One ``<Destination>``: topic blocks are ``(name, filter or None)``; ``passthrough``
    None writes no ``<PassThrough>`` (the default: every group), ``()`` the empty
    ``<PassThrough/>`` (none: only messages published to the source);
    ``transport_extra``: more ``<Transport>`` elements (TLS)."""
    blocks = "".join(
        f"<Topic><Name>{t}</Name>"
        + (f"<Filter>{f}</Filter>" if f else "")
        + (f"<ExcludeValidation>{exclude}</ExcludeValidation>" if exclude else "")
        + "</Topic>"
        for t, f in topics
    )
    addrs = "".join(f"<InetAddr>{h}:{p}</InetAddr>" for h, p in addresses)
    creds = f"<User>{user}</User><Token>{secret}</Token>" if user else ""
    comp = f"<Compression>{compression}</Compression>" if compression else ""
    return (
        f"<Destination><Name>{name}</Name>"
        + (f"<Group>{group}</Group>" if group else "")
        + f"<SyncType>{'sync' if sync else 'async'}</SyncType>"
        + _passthrough_xml(passthrough)
        + blocks
        + f"<Transport><Type>amps-replication</Type>{addrs}{comp}{creds}{transport_extra}"
        + "</Transport>"
        + "</Destination>"
    )


def _passthrough_xml(patterns: Sequence[str] | None) -> str:
    if patterns is None:
        return ""
    if not patterns:
        return "<PassThrough/>"
    return "".join(f"<PassThrough>{p}</PassThrough>" for p in patterns)


def replication_xml(
    data_dir: Path,
    name: str,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    group: str | None = None,
    destinations: Sequence[str] = (),
    inbound: bool = True,
    topics: Sequence[str] = (".*",),
    flush_interval: str = "1ms",
    ack_interval: str | None = None,
    link_timeout: str | None = None,
    journal_size: str = "64MB",
    txlog_extra: str = "",
    tuning: str = "",
    users: str = "",
    admin_interval: str = "1s",
    admin_extra: str = "",
    sow: str = "",
    actions: str = "",
    bootstrap: str = "",
    replication_extra: str = "",
) -> str:
    """An instance that replicates: its log records ``topics``; ``destinations`` from
    :func:`destination`; an inbound ``/replication`` endpoint unless ``inbound`` is False;
    ``admin_extra``: more ``<Admin>`` elements (the listener's TLS); ``sow``: ``<SOW>``
    topics (tests/support/server.py ``sow_topic``); ``actions``: the ``<Action>`` elements
    of an ``<Actions>``; ``bootstrap``: a ``<Bootstrap>`` (:func:`bootstrap_xml`);
    ``replication_extra``: more elements of the ``amps-replication`` transport (the
    listener's TLS given there); ``txlog_extra``: more ``<TransactionLog>`` elements;
    ``ack_interval`` and ``link_timeout`` go to ``<Replication>``."""
    topic_xml = "".join(
        f"<Topic><Name>{t}</Name><MessageType>json</MessageType></Topic>" for t in topics
    )
    repl = ""
    if destinations or ack_interval or link_timeout:
        ack = f"<AckInterval>{ack_interval}</AckInterval>" if ack_interval else ""
        timeout = f"<LinkTimeout>{link_timeout}</LinkTimeout>" if link_timeout else ""
        repl = f"<Replication>{ack}{timeout}{''.join(destinations)}</Replication>"
    replication_transport = (
        "<Transport><Name>amps-replication</Name><Type>amps-replication</Type>"
        f"<InetAddr>{host}:{port}</InetAddr>{replication_extra}</Transport>"
        if inbound
        else ""
    )
    return (
        "<SpoolConfig>"
        f"<Name>{name}</Name>"
        + (f"<Group>{group}</Group>" if group else "")
        + f"<DataDirectory>{data_dir}</DataDirectory>"
        f"<Admin><InetAddr>{host}:{port}</InetAddr>"
        f"<FileName>{data_dir / 'stats.db'}</FileName><Interval>{admin_interval}</Interval>"
        f"{admin_extra}</Admin>"
        "<Transports><Transport><Name>websocket-json</Name><Type>websocket</Type>"
        f"<InetAddr>{host}:{port}</InetAddr><MessageType>json</MessageType></Transport>"
        f"{replication_transport}</Transports>"
        "<TransactionLog>"
        f"<JournalDirectory>{data_dir / 'journal'}</JournalDirectory>"
        f"<JournalArchiveDirectory>{data_dir / 'archive'}</JournalArchiveDirectory>"
        f"<JournalSize>{journal_size}</JournalSize>"
        f"<FlushInterval>{flush_interval}</FlushInterval>{txlog_extra}{topic_xml}"
        "</TransactionLog>"
        f"{repl}"
        f"{'<SOW>' + sow + '</SOW>' if sow else ''}"
        f"{'<Tuning>' + tuning + '</Tuning>' if tuning else ''}"
        f"{'<Users>' + users + '</Users>' if users else ''}"
        f"{'<Actions>' + actions + '</Actions>' if actions else ''}"
        f"{bootstrap}"
        "</SpoolConfig>"
    )


def bootstrap_xml(
    topics: Sequence[str],
    addresses: Sequence[tuple[str, int]],
    data_types: str = "txlog",
    *,
    transport_extra: str = "",
) -> str:
    """A ``<Bootstrap>`` copying ``topics`` from the first reachable of ``addresses``;
    ``transport_extra``: more elements of its ``<Transport>`` (TLS)."""
    blocks = "".join(f"<Topic><Name>{t}</Name></Topic>" for t in topics)
    addrs = "".join(f"<InetAddr>{h}:{p}</InetAddr>" for h, p in addresses)
    return (
        f"<Bootstrap>{blocks}<DataType>{data_types}</DataType>"
        f"<Transport><Type>amps-replication</Type>{addrs}{transport_extra}</Transport>"
        "</Bootstrap>"
    )


class _Pipe:
    """Both ends of one in-memory link."""

    def __init__(self, remote: str) -> None:
        self.to_source: asyncio.Queue[bytes] = asyncio.Queue()
        self.to_destination: asyncio.Queue[bytes] = asyncio.Queue()
        self.closed = False
        self.link: InboundLink | None = None
        #: set for a pipe whose first message decides (Replication.open, as for the web):
        #: a bootstrap request is served by a BootstrapSource, anything else is a link
        self.dispatch: Callable[[bytes], InboundLink | BootstrapSource] | None = None
        self.copy: BootstrapSource | None = None
        self.source = _SourceEnd(self, remote)
        self.destination = _DestinationEnd(self, "memory-source")
        self.delivery = asyncio.get_running_loop().create_task(self._deliver())

    async def _deliver(self) -> None:
        """Source -> destination, in order, awaiting the link (its backpressure); the end
        of the stream reaches the link after everything sent before it."""
        while True:
            data = await self.to_destination.get()
            if data is not _EOF and self.dispatch is not None:
                try:
                    opened = self.dispatch(data)
                except NotAccepting:
                    self.dispatch = None
                    self.close()  # as the web endpoint's close: the source sees the link lost
                    return
                self.dispatch = None
                if isinstance(opened, BootstrapSource):
                    self.copy = opened
                else:
                    self.link = opened
            if self.copy is not None:
                if data is _EOF:
                    self.copy.lost()
                    return
                self.copy.receive(data)
                continue
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
        if self.copy is not None:
            self.copy.lost()


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

    A broker's connector is :meth:`connector` of its own name, so a partition can cut the
    connections one broker dialed to another (``cut(address, source="a")``) or everything
    reaching an address (``cut(address)``). A connection carries the links both ways once
    the dialed broker runs its own link back over it (docs/replication.md "Passive
    destinations"): cutting it cuts both.
    """

    def __init__(self) -> None:
        self.brokers: dict[tuple[str, int], Broker] = {}
        self.down: set[tuple[tuple[str, int], str | None]] = set()
        self.pipes: dict[tuple[str, int], list[tuple[str, _Pipe]]] = {}
        self.dials: list[tuple[str, tuple[str, int]]] = []
        #: what a destination's listener sees of each source (the address, and the subject
        #: of a client certificate as if mutual TLS verified it)
        self.peers: dict[str, Peer] = {}

    def register(self, address: tuple[str, int], broker: Broker) -> None:
        self.brokers[address] = broker

    def connector(self, source: str) -> Connector:
        """The dialer of the broker called ``source``."""

        async def connect(
            host: str, port: int, tls: ssl.SSLContext | None = None, timeout: float = 6.0
        ) -> Dialed:
            """In-memory pipes are never silent: ``timeout`` has nothing to watch."""
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
        booting = broker.bootstrapper is not None and broker.bootstrapper.running
        if not broker.ready and not booting and not broker.starting_repair:
            raise LinkLost(f"{address[0]}:{address[1]} is not accepting replication")
        pipe = _Pipe(f"{address[0]}:{address[1]}")
        peer = self.peers.get(source, Peer("127.0.0.1", 40000 + len(self.dials)))
        replication = broker.replication

        def dispatch(first: bytes) -> InboundLink | BootstrapSource:
            """The web endpoint's dispatch (Replication.open): a bootstrap request, or a
            link once the broker is ready (NotAccepting: the pipe is closed)."""
            boot = broker.bootstrapper
            return replication.open(
                first, pipe.destination, peer, lambda: list(broker.sow.topics),
                boot.busy_for if boot is not None else None,
            )  # fmt: skip

        pipe.dispatch = dispatch
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


class Cluster:
    """Broker processes that replicate to each other, on ports known before they start.

    Args:
        root: where their work directories go.
        names: the instances.
    """

    def __init__(self, root: Path, names: Sequence[str]) -> None:
        self.root = root
        self.port = dict(zip(names, free_ports(len(names)), strict=True))
        self.procs: dict[str, SpoolProcess] = {}

    def address(self, name: str) -> tuple[str, int]:
        return ("127.0.0.1", self.port[name])

    def data_dir(self, name: str) -> Path:
        return self.root / name / "data"

    def add(self, name: str, *, destinations: Sequence[str] = (), **kw: Any) -> SpoolProcess:
        """Configure (not start) instance ``name``; ``kw``: :func:`replication_xml`'s."""
        xml = replication_xml(
            self.data_dir(name), name, port=self.port[name], destinations=destinations, **kw
        )
        proc = SpoolProcess(self.root / name, xml)
        self.procs[name] = proc
        return proc

    @classmethod
    def both_ways(cls, root: Path, **kw: Any) -> Cluster:
        """Instances ``a`` and ``b``, each the other's destination (sync, passing every
        group through), configured alike (``kw``: :func:`replication_xml`'s, e.g. the
        queue both hold); not started."""
        return cls.mesh(root, ["a", "b"], **kw)

    @classmethod
    def mesh(cls, root: Path, names: Sequence[str], **kw: Any) -> Cluster:
        """Instances ``names``, each a destination of every other (sync, passing every
        group through), configured alike (``kw``: :func:`replication_xml`'s); not
        started."""
        cluster = cls(root, names)
        for name in names:
            cluster.add(
                name,
                destinations=[
                    destination(other, [cluster.address(other)], passthrough=(".*",))
                    for other in names
                    if other != name
                ],
                **kw,
            )
        return cluster

    def start(self, *names: str) -> None:
        for name in names or list(self.procs):
            self.procs[name].start()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()

    def api(self, name: str, path: str, method: str = "GET") -> Any:
        """A call to an instance's admin API (JSON)."""
        response = httpx.request(method, f"{self.procs[name].http_url}{path}", timeout=10)
        response.raise_for_status()
        return response.json()

    def replication(self, name: str) -> Any:
        return self.api(name, "/api/replication")

    def destination(self, name: str, dest: str) -> Any:
        return next(d for d in self.replication(name)["destinations"] if d["name"] == dest)

    def caught_up(self, name: str) -> bool:
        """Every destination of ``name`` acknowledged its whole log."""
        info = self.replication(name)
        return all(
            d["connected"] and d["last_acked_position"] >= info["durable_seq"]
            for d in info["destinations"]
        )


def token_users() -> tuple[dict[str, str], str]:
    """Tokens for users ``app`` (reads and writes everything), ``repl`` (what replication
    links log on as) and ``ops`` (admin), and their ``<User>`` elements: an instance that
    listens beyond loopback must have users."""
    token = {name: secrets.token_urlsafe(24) for name in ("app", "repl", "ops")}
    users = (
        f"<User><Name>app</Name><Token>{token['app']}</Token>"
        "<Read>.*</Read><Write>.*</Write></User>"
        f"<User><Name>repl</Name><Token>{token['repl']}</Token><Write>.*</Write></User>"
        f"<User><Name>ops</Name><Token>{token['ops']}</Token><Admin>true</Admin></User>"
    )
    return token, users


def publish_numbered(client: Client, first: int, count: int, pad: bytes = b"") -> int:
    """Queue persisted publishes of ``{"n":N}`` (with a ``"p"`` of ``pad`` when given) to
    ``orders`` for N = first .. first + count - 1; returns the last N."""
    for n in range(first, first + count):
        body = b'{"n":%d,"p":"%s"}' % (n, pad) if pad else b'{"n":%d}' % n
        client.publish("orders", body, seq=n, persisted=True)
    return first + count - 1


def events_since(events: Iterable[dict[str, Any]], since: float) -> list[dict[str, Any]]:
    """The entries of an event log (``GET /api/events``) stamped at or after ``since``
    (seconds since the epoch), oldest first."""
    return [e for e in events if datetime.fromisoformat(e["time"]).timestamp() >= since]


def event_time(
    events: Iterable[dict[str, Any]], kind: str, since: float, **match: str
) -> float | None:
    """When the first ``kind`` event at or after ``since`` whose fields match ``match``
    was logged (seconds since the epoch), or None."""
    for e in events_since(events, since):
        if e["event"] == kind and all(e.get(k) == v for k, v in match.items()):
            return datetime.fromisoformat(e["time"]).timestamp()
    return None


def own_identity(proc: SpoolProcess) -> int:
    """The instance's own publisher identity (server/txlog/publishers/incarnation.py), from its files."""
    cfg = load_config(proc.config_path)
    assert cfg.transaction_log is not None
    token = read_incarnation(Path(cfg.transaction_log.journal_directory), cfg.name)
    assert token is not None
    return broker_pub_hash(cfg.name, token)


async def read_log(proc: SpoolProcess) -> list[tuple[int, int, bytes, tuple[str, ...]]]:
    """Every record of a stopped instance's log: (pub_hash, pub_seq, body, path)."""
    cfg = load_config(proc.config_path)
    assert cfg.transaction_log is not None
    log = TransactionLog(cfg.transaction_log, cfg.name)
    await log.open()
    out: list[tuple[int, int, bytes, tuple[str, ...]]] = []
    seq = log.first_seq
    try:
        while batch := await log.read_batch(seq, max_count=10_000):
            out.extend((r.pub_hash, r.pub_seq, r.body, r.path) for r in batch)
            seq = batch[-1].seq + 1
    finally:
        await log.close()
    return out


async def publish_resending(
    urls: Sequence[str],
    name: str,
    topic: str,
    seqs: range,
    *,
    batch: int = 1000,
    progress: Callable[[int], None] | None = None,
    timeout: float = 120.0,
    user_id: str | None = None,
    password: str | None = None,
) -> int:
    """Publish ``seqs`` with persisted acks as a plain client does to survive failures:
    on a lost connection, connect again (the next URL of ``urls`` when one is down) and
    resend everything after the last persisted ack. Returns the last acked sequence."""
    acked = seqs.start - 1
    attempt = 0
    deadline = time.monotonic() + timeout
    while acked < seqs.stop - 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: acked up to {acked} of {seqs.stop - 1}")
        url = urls[attempt % len(urls)]
        client = Client(url, name, user_id=user_id, password=password, reused_seq="allow")
        try:
            await client.connect(timeout=5)
            nxt = acked + 1
            while nxt < seqs.stop:
                end = min(seqs.stop - 1, nxt + batch - 1)
                for s in range(nxt, end + 1):
                    client.publish(topic, b'{"n":%d}' % s, seq=s, persisted=True)
                await client.wait_persisted(end, timeout=30)
                acked = end  # only an ack of this connection counts (not the logon's)
                if progress is not None:
                    progress(acked)
                nxt = end + 1
        except (Disconnected, OSError, TimeoutError, ClientError):
            attempt += 1
            await asyncio.sleep(0.1)
        finally:
            await client.close()
    return acked
