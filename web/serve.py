"""Running an instance under uvicorn: `spool serve`.

The broker lives in uvicorn's event loop. On SIGTERM/SIGINT the shutdown runs in order:
1. stop accepting connections, 2. close every client with ``shutting down`` after its
buffered messages left (persisted acks included), 3. uvicorn's own connection shutdown,
4. the app lifespan stops the broker (sampler, final fsync of the log, event log).

The data directory's lock (server/datalock.py) is taken by the caller before anything
touches a file; once bound, the server writes its address into the lock file, so a second
instance refused on the same directory can say who holds it and where.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
import ssl
import sys
from collections.abc import Callable
from pathlib import Path

import uvicorn

from spool.server import speedups
from spool.server.clock import SYSTEM_CLOCK, Clock
from spool.server.config import Config
from spool.server.datalock import DataDirectoryLock
from spool.server.engine import Broker
from spool.server.eventlog import ConsoleFormat
from spool.server.tls.errors import TlsError
from spool.server.txlog import FileSeam
from spool.web.app import create_app
from spool.web.tls import tls_protocols
from spool.web.wsdirect import DirectWebSocketProtocol, probe


class SpoolServer(uvicorn.Server):
    """uvicorn server that drains broker sessions before uvicorn closes connections."""

    def __init__(
        self,
        config: uvicorn.Config,
        spool_config: Config,
        port_file: Path | None,
        broker: Broker,
        lock: DataDirectoryLock | None = None,
    ) -> None:
        super().__init__(config)
        self.spool_config = spool_config
        self.port_file = port_file
        self.broker = broker
        self.lock = lock
        self._reloads: set[asyncio.Task[None]] = set()
        # an action's amps-action-do-shutdown stops the server as SIGTERM does
        broker.lifecycle.shutdown_hosts.append(self._shutdown_requested)

    def _shutdown_requested(self, reason: str) -> None:
        self.should_exit = True

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._check_websocket_protocol()
        await super().startup(sockets)
        if not self.started:
            return
        tune_gc()
        # SIGHUP reloads the certificate pair (uvicorn handles only SIGINT and SIGTERM)
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._sighup)
        port = self.bound_port()
        host = self.spool_config.admin.host
        shown = f"[{host}]" if ":" in host else host
        if self.lock is not None:
            self.lock.record_address(f"{shown}:{port}")
        if self.port_file is not None:
            tmp = self.port_file.with_suffix(".tmp")
            tmp.write_text(str(port))
            tmp.replace(self.port_file)
        tls = self.broker.tls is not None
        ws, http = ("wss", "https") if tls else ("ws", "http")
        print(
            f"spool {self.spool_config.name} listening"
            f"{' (TLS)' if tls else ''}:\n"
            f"  websocket  {ws}://{shown}:{port}/amps/json\n"
            f"  dashboard  {http}://{shown}:{port}/\n"
            f"  admin API  {http}://{shown}:{port}/api/instance\n"
            f"  metrics    {http}://{shown}:{port}/metrics",
            file=sys.stderr,
            flush=True,
        )
        notice = speedups.startup_notice()
        if notice is not None:
            print(notice, file=sys.stderr, flush=True)

    def _check_websocket_protocol(self) -> None:
        """Turn the websocket extensions off, with a warning, when this uvicorn lacks one
        of the internals they use (web/wsdirect.py), before the first connection."""
        protocol_class = self.config.ws_protocol_class
        if protocol_class is None or not issubclass(protocol_class, DirectWebSocketProtocol):
            return
        missing = probe(protocol_class, self.config, self.server_state)
        if missing:
            self.broker.events.emit(
                "warning", "instance", "websocket_extensions_off",
                uvicorn=uvicorn.__version__, missing=missing,
                effect="frames are sent through uvicorn's send; replication links keep "
                "uvicorn's keepalive (a partitioned peer is noticed later)",
            )  # fmt: skip

    def _sighup(self) -> None:
        """Reload the TLS certificate pair (a failure is in the event log; the old pair
        keeps serving)."""
        if self.broker.tls is None:
            self.broker.events.emit(
                "warning", "tls", "reload_failed", user="SIGHUP",
                error="TLS is not configured on this instance; nothing to reload",
            )  # fmt: skip
            return

        async def reload() -> None:
            try:
                await self.broker.operations.reload_tls("SIGHUP")
            except TlsError:
                pass  # written to the event log by the listener

        task = asyncio.get_running_loop().create_task(reload())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    def bound_port(self) -> int:
        for server in self.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return self.config.port

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # 1. stop accepting
        for server in self.servers:
            server.close()
        # 2. drain and close broker sessions with "shutting down"
        await self.broker.drain()
        # 3. and 4. uvicorn closes the remaining connections, then the lifespan stops
        await super().shutdown(sockets)


#: allocations of tracked objects between young collections (CPython's default: 700)
GC_GEN0_THRESHOLD = 10_000
#: young collections between middle-generation ones (CPython's default: 10)
GC_GEN1_THRESHOLD = 1_000


def tune_gc() -> None:
    """Set the cyclic garbage collector up for a broker (once started).

    A replay or a publish burst allocates container objects by the million (header
    tuples, batch lists), nearly all freed by reference counting, never by the cycle
    collector. With CPython's default threshold the collector runs every 700
    allocations and re-examines what is alive, which can cost as much as decoding a
    replay batch. Everything alive after start-up (modules, config, app) is
    moved out of the collector's sight (``gc.freeze``), and young collections run every
    10,000 allocations: each pause stays in the low milliseconds, garbage cycles are
    still collected.

    A queue's messages live from their publish to their ack: long enough to survive a
    young collection, rarely long enough to outlive the next middle one. With CPython's
    10 young collections per middle one, each survivor would be examined once more there
    and promoted, and full collections would follow the promotions (a steady cost on a
    replicated queue broker). With 1,000 most survivors
    are acked, and freed by reference counting, before a middle collection comes;
    cyclic garbage that outlives a young collection waits longer (about 10 million
    allocations) to be collected.
    """
    gc.freeze()
    _g0, _g1, g2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, GC_GEN1_THRESHOLD, g2)


SslContextFactory = Callable[[uvicorn.Config, Callable[[], ssl.SSLContext]], ssl.SSLContext]


def _listener_context(context: ssl.SSLContext) -> SslContextFactory:
    """uvicorn's ``ssl_context_factory`` handing it the listener's own context (not one
    built from uvicorn's ``ssl_*`` settings): reloads swap pairs behind it."""

    def factory(_config: uvicorn.Config, _default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        return context

    return factory


def protocols(*, tls: bool) -> tuple[type[asyncio.Protocol] | str, type[asyncio.Protocol]]:
    """uvicorn's ``http`` and ``ws`` arguments: the websocket protocol is always the
    broker's (web/wsdirect.py: frames written from their pieces, without a joined copy);
    on a TLS listener both classes also put the TLS facts in the scope (web/tls.py)."""
    if tls:
        return tls_protocols()
    return "auto", DirectWebSocketProtocol


def run(
    config: Config,
    *,
    port_file: Path | None = None,
    log_level: str = "warning",
    log_format: ConsoleFormat = "json",
    lock: DataDirectoryLock | None = None,
    files: FileSeam | None = None,
    clock: Clock | None = None,
) -> int:
    """Serve until a signal; returns the process exit code.

    Args:
        log_format: the event log on stderr (server/eventlog.py).
        lock: the instance's data-directory lock, taken by the caller (its lock files get
            the bound address).
        files: the transaction log's file seam (None: the real one; the fault tests'
            launcher, tests/support/faulty_serve.py, injects failures here).
        clock: the broker's time source (None: the system's; the same launcher injects
            one whose wall clock jumps).
    """
    broker = Broker(config, files=files, clock=clock or SYSTEM_CLOCK, console_format=log_format)
    app = create_app(config, broker=broker)
    ws = next((t for t in config.transports if t.type == "websocket"), None)
    http_protocol, ws_protocol = protocols(tls=broker.tls is not None)
    ssl_factory: SslContextFactory | None = None
    if broker.tls is not None:
        # our context (its SNI callback switches handshakes to the active pair, see
        # server/tls/listener.py)
        ssl_factory = _listener_context(broker.tls.context)
    uv_config = uvicorn.Config(
        app,
        host=config.admin.host,
        port=config.admin.port,
        http=http_protocol,
        ws=ws_protocol,
        ssl_context_factory=ssl_factory,
        ws_per_message_deflate=ws.per_message_deflate if ws is not None else False,
        ws_max_size=ws.max_message_size if ws is not None else 16 * 1024 * 1024,
        ws_ping_interval=20.0,
        ws_ping_timeout=20.0,
        lifespan="on",
        log_level=log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
        server_header=False,
    )
    server = SpoolServer(uv_config, config, port_file, broker, lock)
    server.run()
    return 0 if server.started else 1
