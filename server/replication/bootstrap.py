"""Bootstrapping: an empty instance copies its first state from a peer before it serves.

With ``<Bootstrap>`` configured, :meth:`Bootstrapper.needed` decides at start-up (after
the log's recovery, before replication and clients): a marker file
(``DataDirectory/replication/NAME.bootstrap.json``) means an interrupted copy resumes;
an instance holding any state is never copied over; an empty one is. While it runs the
instance is not ready (clients and links are refused, the admin API shows progress).
:meth:`Bootstrapper.run` checks the user the copied records are written as, writes the
marker, tries the sources in ``InetAddr`` order (server/replication/bootsource.py serves,
server/replication/bootproto.py is the conversation), copies the SOW then the log through
the publish pipeline as a link's batches, records progress in the marker once durable,
never skips a record it refuses, and detects a mutual bootstrap. Live replication then
takes over with no gap. See docs/bootstrap.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import orjson
import zstandard

from spool.server.alerts import Alert
from spool.server.auth import UserAuthenticator
from spool.server.clock import Clock, sleep_or_wake
from spool.server.config import BootstrapConfig, Config, UserConfig, format_inet_addr
from spool.server.ports import Origin, PublishRun, Traffic
from spool.server.protocol.errors import NotEntitled, ProtocolFailure, TxlogFull
from spool.server.publishing import PublishPipeline
from spool.server.replication import state as state_file
from spool.server.replication.bootproto import (
    BootstrapProtocol,
    Finished,
    Offered,
    PhaseDone,
    Role,
    SourceBusy,
)
from spool.server.replication.bootsource import BootstrapBusy
from spool.server.replication.errors import (
    AuthRefused,
    BootstrapFailed,
    BootstrapNotAllowed,
    GroupMismatch,
    LinkRefused,
    MutualBootstrap,
    NameConflict,
    NotAccepting,
    NotEntitledToReplicate,
    ProtocolRefusal,
    RecordRefused,
    ReplicationProtocolError,
    SourceDamaged,
    ValidationReported,
    VersionMismatch,
)
from spool.server.replication.frames import (
    PROTOCOL_VERSION,
    Bootstrap,
    Data,
    Offer,
    Run,
    decode_runs,
)
from spool.server.replication.hops import format_hop
from spool.server.replication.linkauth import authenticate_own
from spool.server.replication.protocol import DataReceived, LinkClosed
from spool.server.replication.replies import FailureReplies
from spool.server.replication.transport import (
    Connector,
    Dialed,
    LinkLost,
    LinkTlsFailed,
    LinkWriter,
)
from spool.server.sow.memory import MemoryStore
from spool.server.stats.source import EventSink
from spool.server.tls.context import load_dial_context
from spool.server.tls.errors import TlsError
from spool.server.txlog import RecordKind, TransactionLog

__all__ = ["BootstrapProgress", "Bootstrapper", "Marker", "marker_path"]

#: seconds between rounds over the sources when none could be copied from
RETRY_MIN: Final = 0.5
RETRY_MAX: Final = 5.0
#: seconds a source is left alone after a refusal that retrying will not change soon
REFUSED_RETRY: Final = 30.0
#: seconds a source whose log holds damage waiting for a repair is left alone
DAMAGED_RETRY: Final = 10.0
#: the refusals of a source that only a change of configuration (there or here) ends
_LASTING: Final = (
    VersionMismatch, AuthRefused, NameConflict, GroupMismatch, NotEntitledToReplicate,
    BootstrapNotAllowed, ProtocolRefusal, ValidationReported,
)  # fmt: skip
#: seconds between marker writes while copying, and between progress events
MARKER_EVERY: Final = 0.5
PROGRESS_EVERY: Final = 2.0
#: records appended but not yet durable before reading more waits for the group commit
UNDURABLE_LIMIT: Final = 200_000


def marker_path(data_directory: Path, instance: str) -> Path:
    """Where an interrupted bootstrap is remembered."""
    return data_directory / "replication" / f"{instance}.bootstrap.json"


@dataclass(slots=True)
class Marker:
    """What an interrupted bootstrap had made durable (the marker file's content).

    Attributes:
        copied_upto: the source's log is copied (and durable here) up to this seq.
        sow_done: the SOW phase ended and is durable here.
        source: the source's Name, and ``log_id`` the identity of its log: ``copied_upto``
            is a position in that log only; resuming from another source (or a source
            whose log started over) starts the log phase over from its beginning (the
            bookmarks drop what was copied already).
        records: records copied so far (progress across restarts).
    """

    copied_upto: int = 0
    sow_done: bool = False
    source: str = ""
    records: int = 0
    log_id: str = ""

    def encode(self) -> bytes:
        return orjson.dumps(
            {"copied_upto": self.copied_upto, "sow_done": self.sow_done,
             "source": self.source, "records": self.records, "log_id": self.log_id}
        )  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> Marker | None:
        """The marker (blocking: run in a thread); None when there is none.

        Raises:
            BootstrapFailed: it is there but unreadable.
        """
        try:
            obj = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise BootstrapFailed(
                f"the bootstrap marker {path} cannot be read ({exc}); an interrupted "
                "bootstrap cannot resume from it: empty the data directory and start again"
            ) from None
        if not isinstance(obj, dict):
            raise BootstrapFailed(f"the bootstrap marker {path} is not a JSON object")
        upto, done, source, records = (
            obj.get("copied_upto"), obj.get("sow_done"), obj.get("source"), obj.get("records")
        )  # fmt: skip
        if not isinstance(upto, int) or not isinstance(done, bool) or not isinstance(records, int):
            raise BootstrapFailed(f"the bootstrap marker {path} is malformed")
        log_id = obj.get("log_id")
        return cls(
            upto, done, source if isinstance(source, str) else "", records,
            log_id if isinstance(log_id, str) else "",
        )  # fmt: skip


@dataclass(slots=True)
class BootstrapProgress:
    """How far a bootstrap is, for the event log, ``/api/bootstrap`` and the dashboard.

    Attributes:
        state: ``not configured``, ``skipped`` (the instance had state), ``waiting`` (no
            source could be copied from yet), ``copying``, ``done`` or ``failed``.
        source: the instance being copied from.
        phase: ``sow`` or ``txlog`` while copying.
        records, bytes: copied so far (records: across restarts).
        total_records: an estimate of the records to copy (the source's log range and its
            SOW records; the topics not asked for make it an upper bound).
        total_bytes: the source's estimate of the log bytes to read.
        rate: records per second over the copy so far.
        eta_seconds: time left at that rate (None until it can be told).
        waiting_on: sources found bootstrapping themselves.
        error: why the last attempt failed (or why it stopped).
        retry_at: when the next attempt starts (wall time), while waiting for it.
        user: the user of this instance whose Write entitlements the copied records
            carry (None without ``<Users>``).
    """

    state: str = "not configured"
    source: str = ""
    phase: str = ""
    records: int = 0
    bytes: int = 0
    total_records: int = 0
    total_bytes: int = 0
    rate: float = 0.0
    eta_seconds: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    waiting_on: list[str] = field(default_factory=list)
    error: str | None = None
    retry_at: float | None = None
    user: str | None = None

    def alerts(self) -> list[Alert]:
        """The dashboard's banner while a bootstrap runs (clients are refused until it
        ends) or after it failed; nothing otherwise."""
        if self.state not in ("waiting", "copying", "failed"):
            return []
        since = (
            datetime.fromtimestamp(self.started_at, UTC).isoformat(timespec="seconds")
            if self.started_at is not None
            else ""
        ).replace("+00:00", "Z")
        if self.state == "failed":
            return [{"id": "bootstrap-failed", "level": "error", "title": "Bootstrap failed",
                     "message": str(self.error), "since": since}]  # fmt: skip
        if self.state == "waiting":
            waiting = (
                f"; bootstrapping themselves: {', '.join(self.waiting_on)}"
                if self.waiting_on
                else ""
            )
            message = (
                f"No source could be copied from yet ({self.error or 'connecting'}){waiting}."
                " Clients are refused until the copy is done."
            )
        else:
            eta = f", about {self.eta_seconds:.0f} s left" if self.eta_seconds else ""
            message = (
                f"Copying the {self.phase or 'txlog'} of {self.source}: {self.records:,} of "
                f"~{self.total_records:,} records, {self.bytes / 1e6:.1f} MB, "
                f"{self.rate:,.0f} records/s{eta}. Clients are refused until the copy is done."
            )
        return [{"id": "bootstrap-in-progress", "level": "warning", "title": "Bootstrapping",
                 "message": message, "since": since}]  # fmt: skip

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state, "source": self.source, "phase": self.phase,
            "records": self.records, "bytes": self.bytes,
            "total_records": self.total_records, "total_bytes": self.total_bytes,
            "rate": round(self.rate, 1), "eta_seconds": self.eta_seconds,
            "started_at": self.started_at, "finished_at": self.finished_at,
            "waiting_on": list(self.waiting_on), "error": self.error,
            "retry_at": self.retry_at, "user": self.user,
        }  # fmt: skip


class Bootstrapper:
    """The bootstrap of one instance (module docstring). Owned by the event loop."""

    def __init__(
        self,
        config: Config,
        bootstrap: BootstrapConfig,
        txlog: TransactionLog,
        pipeline: PublishPipeline,
        sow_stores: Callable[[], Iterable[MemoryStore]],
        clock: Clock,
        events: EventSink,
        connector: Connector,
        auth: UserAuthenticator,
    ) -> None:
        self.config = config
        self.bootstrap = bootstrap
        self.txlog = txlog
        self.pipeline = pipeline
        self.auth = auth
        #: whose Write entitlements the copied records carry (None: no ``<Users>``)
        self.user: UserConfig | None = None
        self._sow_stores = sow_stores
        self._clock = clock
        self.events = events
        self._connector = connector
        self.path = marker_path(config.data_directory, config.name)
        self.progress = BootstrapProgress()
        self.marker = Marker()
        self.running = False
        self._mutual: str | None = None
        self._wake = asyncio.Event()
        self._copied_at_start = 0
        self._last_event = 0.0
        self._last_marker = 0.0
        self._tls_reported: str | None = None
        #: per source address: (monotonic time before which it is not tried, the refusal)
        self._held: dict[str, tuple[float, str]] = {}
        #: the last attempt met a source of another log than the interrupted copy's
        self._switched = False

    # -- start-up ------------------------------------------------------------------------

    async def needed(self) -> bool:
        """Whether to copy (a marker, or an empty instance); says so in the event log."""
        marker = await asyncio.to_thread(Marker.load, self.path)
        if marker is not None:
            self.marker = marker
            self.events.emit(
                "warning", "replication", "bootstrap_resuming", copied_upto=marker.copied_upto,
                sow_done=marker.sow_done, records=marker.records, source=marker.source,
                detail="an earlier bootstrap was interrupted; it resumes",
            )  # fmt: skip
            return True
        held = self.txlog.last_seq > 0 or any(len(s) for s in self._sow_stores())
        if held:
            self.progress.state = "skipped"
            self.events.emit(
                "info", "replication", "bootstrap_skipped", last_seq=self.txlog.last_seq,
                detail="the instance holds state; a bootstrap never overwrites it",
            )  # fmt: skip
            return False
        return True

    def busy_for(self, requester: str) -> BootstrapBusy | None:
        """(the source side, while this instance bootstraps) What to answer ``requester``
        asking for a copy: busy, naming whom this instance waits on. Being asked by an
        instance this one waits on is a mutual bootstrap."""
        if not self.running:
            return None
        if requester in self.progress.waiting_on:
            self._mutual = requester
            self._wake.set()
        return BootstrapBusy(sorted(self.progress.waiting_on))

    async def run(self) -> None:
        """Copy until done.

        Raises:
            MutualBootstrap: the instance and a source bootstrap from each other.
            BootstrapFailed: the marker cannot be written or read.
        """
        self.running = True
        progress = self.progress
        progress.state = "waiting"
        progress.started_at = self._clock.time()
        progress.records = self._copied_at_start = self.marker.records
        delay = RETRY_MIN
        try:
            await self._identify()
            await self.save_marker()
            self.events.emit(
                "info", "replication", "bootstrap_started",
                sources=[format_inet_addr(h, p) for h, p in self.bootstrap.transport.addresses],
                topics=[t.name for t in self.bootstrap.topics],
                data_types=sorted(self.bootstrap.data_types), user=progress.user,
            )  # fmt: skip
            while True:
                for host, port in self.bootstrap.transport.addresses:
                    self._check_mutual()
                    if self._held_off(format_inet_addr(host, port)):
                        continue
                    self._switched = False
                    done = await self._attempt(host, port)
                    if not done and self._switched:
                        # another log than the interrupted copy's: from its start, now
                        done = await self._attempt(host, port)
                    if done:
                        await self._finish()
                        return
                    self._check_mutual()
                await self._pause(self._next_round(delay))
                delay = min(RETRY_MAX, delay * 2)
        except BootstrapFailed as exc:
            progress.state = "failed"
            progress.error = str(exc)
            self.events.emit("error", "replication", "bootstrap_failed", detail=str(exc))
            raise
        finally:
            self.running = False

    async def _identify(self) -> None:
        """With ``<Users>``: the user copied records are written as (module docstring, step
        1), and that it may write every topic the bootstrap names.

        Raises:
            BootstrapFailed: the credentials are no user's here, or that user may not
                write a named topic.
        """
        auth = self.auth
        if not auth.enabled:
            return
        while True:
            try:
                user = await authenticate_own(
                    auth, self.bootstrap.transport, label="<Bootstrap>'s credentials"
                )
                break
            except NotAccepting:  # the password-check pool is full: a moment
                await self._clock.sleep(RETRY_MIN)
            except AuthRefused as exc:
                raise BootstrapFailed(
                    "with <Users> configured, copied records are written as the user the "
                    "bootstrap logs on as, which must be a user of this instance too (as a "
                    f"replication link's user is): {exc.detail}"
                ) from None
        self.user = user
        self.progress.user = user.name
        refused = [
            t.name for t in self.bootstrap.topics
            if not t.is_regex and not auth.can_write(user, t.name)
        ]  # fmt: skip
        if refused:
            raise BootstrapFailed(
                f"user {user.name!r} of the bootstrap may not publish to "
                f"{', '.join(map(repr, refused))} here, and copied records are written as "
                f"that user: give {user.name!r} a <Write> entitlement for the copied topics, "
                "or leave these out of <Bootstrap>"
            )

    def _held_off(self, address: str) -> bool:
        """Whether ``address`` refused lately for a lasting reason (it is skipped)."""
        held = self._held.get(address)
        return held is not None and self._clock.monotonic() < held[0]

    def _next_round(self, delay: float) -> float:
        """How long to wait before the next round: ``delay``, or, when every source is
        held off after a lasting refusal, until the first of them may be tried again."""
        addresses = [format_inet_addr(h, p) for h, p in self.bootstrap.transport.addresses]
        if not all(self._held_off(a) for a in addresses):
            return delay
        soonest = min(self._held[a][0] for a in addresses)
        return max(delay, soonest - self._clock.monotonic())

    def _hold_off(self, address: str, error: LinkRefused) -> None:
        """A source refused for a lasting reason: hold it off, and say so once per
        distinct reason (as an error: an operator must change a configuration)."""
        detail = f"{address} refused the bootstrap: {error}"
        previous = self._held.get(address)
        self._held[address] = (self._clock.monotonic() + REFUSED_RETRY, detail)
        self.progress.error = f"{detail} (tried again every {REFUSED_RETRY:.0f} s)"
        if previous is None or previous[1] != detail:
            self.events.emit(
                "error", "replication", "bootstrap_source_refused", source=address,
                reason=error.reason, detail=error.detail, retry_seconds=REFUSED_RETRY,
            )  # fmt: skip

    # -- one source ----------------------------------------------------------------------

    async def _attempt(self, host: str, port: int) -> bool:
        """Copy from one source; whether the copy completed."""
        address = format_inet_addr(host, port)
        try:
            tls = await self._tls_context()
            transport = await self._connector(host, port, tls, self.config.link_timeout)
        except LinkTlsFailed as exc:
            self._tls_failed(address, str(exc))
            return False
        except (OSError, LinkLost) as exc:
            self.progress.error = f"{address}: {exc}"
            return False
        try:
            return await self._session(transport, address)
        finally:
            with contextlib.suppress(Exception):
                await transport.close(1000, "bootstrap ended")

    async def _session(self, transport: Dialed, address: str) -> bool:
        cfg = self.config
        creds = self.bootstrap.transport
        protocol = BootstrapProtocol(Role.REQUESTER)
        writer = LinkWriter(protocol.data_to_send, transport)
        marker = self.marker
        protocol.request(
            Bootstrap(
                PROTOCOL_VERSION, cfg.name, cfg.group, creds.user, creds.secret,
                [(t.name, t.is_regex) for t in self.bootstrap.topics],
                sorted(self.bootstrap.data_types),
                marker.copied_upto + 1 if marker.copied_upto else 0,
                marker.sow_done, creds.compression,
            )
        )  # fmt: skip
        copy = _Copy(self, address)
        try:
            await writer.write()
            while True:
                try:
                    data = await transport.recv()
                except LinkLost as exc:
                    protocol.connection_lost(LinkRefused(str(exc)))
                    data = b""
                protocol.receive_data(data)
                for event in protocol.events_received():
                    if isinstance(event, Offered):
                        copy.offered(event.offer)
                    elif isinstance(event, DataReceived):
                        await copy.data(event.data)
                    elif isinstance(event, PhaseDone):
                        await copy.sow_done()
                    elif isinstance(event, Finished):
                        await copy.finished(event.last_seq)
                        return True
                    elif isinstance(event, SourceBusy):
                        self._busy(event.busy.name, event.busy.waiting_on)
                    elif isinstance(event, LinkClosed):
                        if event.by_peer and isinstance(event.error, _LASTING):
                            self._hold_off(address, event.error)
                            return False
                        if event.by_peer and isinstance(event.error, SourceDamaged):
                            # a repair there may take long: the next sources go first
                            self._held[address] = (
                                self._clock.monotonic() + DAMAGED_RETRY,
                                f"{address} refused the bootstrap: {event.error}",
                            )
                        if event.error.reason != "bootstrapping":
                            self.progress.error = f"{address}: {event.error}"
                            self.events.emit(
                                "warning", "replication", "bootstrap_interrupted",
                                source=address, reason=event.error.reason,
                                detail=event.error.detail, records=self.progress.records,
                            )  # fmt: skip
                        return False
                await writer.write()
        except (LinkLost, RecordRefused) as exc:
            self.progress.error = f"{address}: {exc}"
            self.events.emit(
                "warning", "replication", "bootstrap_interrupted", source=address,
                reason=exc.reason if isinstance(exc, RecordRefused) else "link lost",
                detail=str(exc), records=self.progress.records,
            )  # fmt: skip
            return False
        except BootstrapFailed:
            # what was copied stays copied: the restarted instance resumes after it
            with contextlib.suppress(BootstrapFailed):
                await copy.keep()
            raise
        finally:
            copy.close()

    def _busy(self, name: str, waiting_on: list[str]) -> None:
        progress = self.progress
        if name not in progress.waiting_on:
            progress.waiting_on.append(name)
        self.events.emit(
            "warning", "replication", "bootstrap_source_busy", source=name,
            waiting_on=waiting_on, detail=f"{name!r} is bootstrapping itself",
        )  # fmt: skip
        if self.config.name in waiting_on:
            self._mutual = name

    def _check_mutual(self) -> None:
        other = self._mutual
        if other is None:
            return
        me = self.config.name
        raise MutualBootstrap(
            f"mutual bootstrap: {me!r} and {other!r} are both empty and each is configured "
            f"to bootstrap from the other, so neither can ever finish. Fix: remove "
            f"<Bootstrap> from one of them (or point it at an instance that has the data), "
            f"start that one first, then restart the other"
        )

    async def _pause(self, delay: float) -> None:
        self._wake.clear()
        self.progress.retry_at = self._clock.time() + delay
        try:
            await sleep_or_wake(self._clock, delay, self._wake)
        finally:
            self.progress.retry_at = None

    async def _tls_context(self) -> ssl.SSLContext | None:
        creds = self.bootstrap.transport
        if not creds.tls:
            return None
        try:
            return await asyncio.to_thread(
                load_dial_context, creds.ca_certificate, creds.certificate, creds.private_key
            )
        except TlsError as exc:
            raise LinkTlsFailed(f"TLS files: {exc}") from exc

    def _tls_failed(self, address: str, detail: str) -> None:
        """A TLS failure (a source's certificate this instance does not trust, a source
        without TLS, unreadable TLS files) is an error the operator must fix, not a source
        that is down: it goes to the event log once per distinct reason (the attempts go
        on: a fixed CA file or a renewed certificate is read again on the next one)."""
        self.progress.error = f"{address}: {detail}"
        if detail != self._tls_reported:
            self._tls_reported = detail
            self.events.emit(
                "error", "replication", "bootstrap_tls_failed", source=address, detail=detail
            )

    # -- progress and marker ---------------------------------------------------------------

    async def save_marker(self) -> None:
        try:
            await asyncio.to_thread(state_file.save, self.path, self.marker.encode())
        except OSError as exc:
            raise BootstrapFailed(f"cannot write the bootstrap marker {self.path}: {exc}") from exc
        self._last_marker = self._clock.monotonic()

    async def marker_due(self) -> None:
        if self._clock.monotonic() - self._last_marker >= MARKER_EVERY:
            await self.save_marker()

    def report(self, *, force: bool = False) -> None:
        """Refresh rate and ETA; an event every PROGRESS_EVERY seconds (or ``force``)."""
        progress = self.progress
        now = self._clock.time()
        started = progress.started_at or now
        elapsed = max(now - started, 1e-6)
        progress.rate = (progress.records - self._copied_at_start) / elapsed
        left = max(0, progress.total_records - progress.records)
        progress.eta_seconds = round(left / progress.rate, 1) if progress.rate > 0 else None
        mono = self._clock.monotonic()
        if force or mono - self._last_event >= PROGRESS_EVERY:
            self._last_event = mono
            self.events.emit(
                "info", "replication", "bootstrap_progress", source=progress.source,
                phase=progress.phase, records=progress.records, bytes=progress.bytes,
                total_records=progress.total_records, rate=round(progress.rate, 1),
                eta_seconds=progress.eta_seconds,
            )  # fmt: skip

    async def _finish(self) -> None:
        await asyncio.to_thread(_remove, self.path)
        progress = self.progress
        progress.state = "done"
        progress.phase = ""
        progress.eta_seconds = 0.0
        progress.finished_at = self._clock.time()
        progress.error = None
        self.report(force=True)
        self.events.emit(
            "info", "replication", "bootstrap_done", source=progress.source,
            records=progress.records, bytes=progress.bytes, last_seq=self.txlog.last_seq,
            seconds=round(progress.finished_at - (progress.started_at or 0.0), 2),
        )  # fmt: skip


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


class _Copy:
    """One session's records into the pipeline, and the marker following durability."""

    def __init__(self, boot: Bootstrapper, address: str) -> None:
        self._boot = boot
        self._address = address
        self._origin: Origin | None = None
        self._hop: tuple[str, ...] = ()
        self._pending: deque[tuple[int, int, int]] = deque()  # (local seq, upto, records)
        self._decompressor = zstandard.ZstdDecompressor()
        self._replies = FailureReplies()

    def offered(self, offer: Offer) -> None:
        """The source accepted: progress totals, and the marker names it.

        Raises:
            LinkLost: the marker's position is in another log than this source's: it is
                reset, and the next attempt asks from the start.
        """
        boot = self._boot
        name = offer.name
        marker = boot.marker
        if marker.copied_upto and (marker.source, marker.log_id) != (name, offer.log_id):
            old = f"{marker.source!r} (log {marker.log_id or '?'})"
            marker.copied_upto = 0
            boot._switched = True
            raise LinkLost(
                f"the interrupted copy came from {old}, this source is {name!r} (log "
                f"{offer.log_id}): its log is copied from the start (what is here already "
                "is dropped by bookmark)"
            )
        self._hop = (format_hop(name, offer.group),)
        # the bootstrap's user here: its Write entitlements apply to every copied record
        self._origin = Origin(kind="replication", name=name, user=boot.user,
                              replies=self._replies, traffic=Traffic())  # fmt: skip
        progress = boot.progress
        progress.state = "copying"
        progress.source = name
        progress.error = None
        first, last, sow = offer.first_seq, offer.last_seq, offer.sow_records
        progress.total_records = progress.records + max(0, last - first + 1) + sow
        progress.total_bytes = progress.bytes + offer.log_bytes
        progress.phase = "sow" if sow and not boot.marker.sow_done else "txlog"
        marker.source = name
        marker.log_id = offer.log_id
        boot.events.emit(
            "info", "replication", "bootstrap_copying", source=name, address=self._address,
            first_seq=first, last_seq=last, sow_records=sow,
        )  # fmt: skip

    async def data(self, data: Data) -> None:
        boot = self._boot
        txlog = boot.txlog
        if data.count:
            try:
                if data.compressed:
                    runs = await asyncio.to_thread(self._inflate, data)
                else:
                    runs = decode_runs(data.payload, data.count)
            except (ReplicationProtocolError, zstandard.ZstdError) as exc:
                raise LinkLost(f"a data batch is malformed: {exc}") from exc
            if boot.progress.phase == "sow":
                self._check_sow(runs)
            self._publish(runs)
        boot.progress.records += data.count
        boot.progress.bytes += len(data.payload)
        if boot.progress.phase == "txlog":
            self._pending.append((txlog.last_seq, data.upto, data.count))
        self._durable(txlog.durable_seq)
        if txlog.last_seq - txlog.durable_seq > UNDURABLE_LIMIT:
            await txlog.wait_durable(txlog.last_seq)
            self._durable(txlog.durable_seq)
        await boot.marker_due()
        boot.report()

    def _check_sow(self, runs: list[Run]) -> None:
        """SOW records need a local SOW definition (else they would be plain messages)."""
        config = self._boot.config
        for run in runs:
            if config.sow_topic(run.topic) is None:
                raise BootstrapFailed(
                    f"the source sends SOW records of {run.topic!r}, which has no SOW "
                    f"definition here; add a SOW/Topic for {run.topic!r} (with the source's "
                    "Key) and restart"
                )

    def _inflate(self, data: Data) -> list[Run]:
        raw = self._decompressor.decompress(data.payload, max_output_size=1 << 30)
        return decode_runs(raw, data.count)

    def _publish(self, runs: list[Run]) -> None:
        origin = self._origin
        if origin is None:
            raise LinkLost("data before the offer")
        for run in runs:
            self._boot.pipeline.publish(
                origin,
                PublishRun(
                    topic=run.topic, pub_hash=run.pub_hash, pub_seqs=[*run.pub_seqs],
                    bodies=run.bodies, acks=[], corr_ids=run.corr_ids, sow_keys=run.sow_keys,
                    kind=RecordKind(run.kind), path=run.path + self._hop,
                ),
            )  # fmt: skip
            if self._replies.failures:
                self._record_refused(run.topic, self._replies.failures[0])

    def _record_refused(self, topic: str, failure: ProtocolFailure) -> None:
        """This instance refused a copied record: a full log is waited out (the copy is
        tried again from the marker); anything else would refuse it again on every try,
        and skipping it would lose it, so the bootstrap stops with the fix.

        Raises:
            RecordRefused: the log is full (the attempt ends; the next one resumes).
            BootstrapFailed: any other refusal.
        """
        if isinstance(failure, TxlogFull):
            raise RecordRefused(f"a copied record of {topic!r} waits: {failure.detail}")
        boot = self._boot
        resume = (
            "; the copy stops here and keeps what it copied: fix it and restart this "
            "instance, and the copy resumes"
        )
        if isinstance(failure, NotEntitled):
            user = boot.user.name if boot.user is not None else None
            raise BootstrapFailed(
                f"user {user!r} of the bootstrap may not publish to {topic!r} here, and "
                f"copied records are written as that user: give {user!r} a <Write> "
                f"entitlement for the copied topics, or leave {topic!r} out of "
                f"<Bootstrap>{resume}"
            )
        detail = f": {failure.detail}" if failure.detail else ""
        raise BootstrapFailed(
            f"this instance refused a copied record of {topic!r} ({failure.reason}"
            f"{detail}): its configuration of {topic!r} cannot take what the source "
            f"sends{resume}"
        )

    def _durable(self, durable: int) -> None:
        marker = self._boot.marker
        pending = self._pending
        while pending and pending[0][0] <= durable:
            _, upto, count = pending.popleft()
            marker.copied_upto = max(marker.copied_upto, upto)
            marker.records += count

    async def sow_done(self) -> None:
        boot = self._boot
        txlog = boot.txlog
        await txlog.wait_durable(txlog.last_seq)
        boot.marker.sow_done = True
        boot.marker.records = boot.progress.records
        await boot.save_marker()
        boot.progress.phase = "txlog"

    async def finished(self, last_seq: int) -> None:
        boot = self._boot
        txlog = boot.txlog
        await txlog.wait_durable(txlog.last_seq)
        self._durable(txlog.durable_seq)
        boot.marker.copied_upto = max(boot.marker.copied_upto, last_seq)
        await boot.save_marker()

    async def keep(self) -> None:
        """The copy stops: the marker records what is durable of it."""
        txlog = self._boot.txlog
        await txlog.wait_durable(txlog.last_seq)
        self._durable(txlog.durable_seq)
        await self._boot.save_marker()

    def close(self) -> None:
        self._pending.clear()
