"""Repair: the records this instance's log holds fenced, brought back from its peers.

A fence (server/txlog/damage/fences.py) holds the local seqs of records this log lost (bytes
that failed their checks, a journal missing from the middle, durable records of a torn
tail) with the bookmark intervals they lie in and the time window around them. The
:class:`Repairer` asks each destination of ``<Replication>`` in order, over its own
transport and credentials (server/replication/repairsource.py serves the request), for
every record whose bookmark lies in those intervals, and writes them back in place of
their placeholders under the same local seqs (``TransactionLog.fill_fence``, one journal
rewrite), as the user the link logs on as. A fence is written only when the records of
one attempt make it up exactly; otherwise it stays and says what was found where: nothing
is invented or renumbered. It runs at start-up (up to ``Tuning/JournalRepairWait``), then
in the background while fences remain, and at once when asked. Event loop only; the log's
reads and writes run in its worker threads. See docs/replication.md "Repair: damaged
records brought back from the peers".
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

import zstandard

from spool.server.alerts import Alert
from spool.server.auth import UserAuthenticator
from spool.server.clock import Clock, sleep_or_wake
from spool.server.config import Config, DestinationConfig, UserConfig, format_inet_addr
from spool.server.replication.bootproto import BootstrapProtocol, Finished, Offered, Role
from spool.server.replication.errors import AuthRefused, LinkRefused, ReplicationProtocolError
from spool.server.replication.frames import (
    PROTOCOL_VERSION,
    Data,
    Offer,
    Repair,
    RepairFence,
    Run,
    decode_runs,
)
from spool.server.replication.hops import format_hop, parse_hop
from spool.server.replication.linkauth import authenticate_own
from spool.server.replication.protocol import DataReceived, LinkClosed
from spool.server.replication.transport import (
    Connector,
    Dialed,
    LinkLost,
    LinkTlsFailed,
    LinkWriter,
)
from spool.server.stats.source import EventSink
from spool.server.tls.context import load_dial_context
from spool.server.tls.errors import TlsError
from spool.server.txlog import Record, RecordKind, TransactionLog
from spool.server.txlog.damage.fences import Fence
from spool.server.txlog.format.record import publisher_of

__all__ = ["RETRY_MAX", "RepairProgress", "Repairer", "merge_in_time_order"]

#: seconds between repair attempts while fences remain: the first, then doubling
RETRY_MIN: Final = 1.0
RETRY_MAX: Final = 30.0
#: the message type records are recorded with (as the publish path records them)
_MESSAGE_TYPE: Final = "json"


@dataclass(slots=True)
class RepairProgress:
    """What the repair is doing (the admin API's ``repair``, the dashboard).

    Attributes:
        state: ``idle`` (nothing fenced), ``repairing`` (asking a peer now), ``waiting``
            (fences remain: the next attempt is due at ``next_attempt``).
        peer: the peer asked now (or last), ``NAME at HOST:PORT``.
        fences: fenced ranges left.
        records_wanted: local seqs those fences hold.
        records_received: records the current (or last) attempt received for them.
        bytes_received: their bytes.
        scanned / to_scan: how far the peer has read the part of its log it searches.
        rate: bytes a second the peer has read (this attempt).
        eta_seconds: time left for this attempt (None: not known).
        records_repaired: records written back since the instance started.
        fences_repaired: fences written back since the instance started.
        attempts: attempts made since the instance started.
        next_attempt: when the next attempt starts (wall time, seconds).
        last_error: why the last attempt found nothing, or failed.
    """

    state: str = "idle"
    peer: str | None = None
    fences: int = 0
    records_wanted: int = 0
    records_received: int = 0
    bytes_received: int = 0
    scanned: int = 0
    to_scan: int = 0
    rate: float = 0.0
    eta_seconds: float | None = None
    records_repaired: int = 0
    fences_repaired: int = 0
    attempts: int = 0
    next_attempt: float | None = None
    last_error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "peer": self.peer,
            "fences": self.fences,
            "records_wanted": self.records_wanted,
            "records_received": self.records_received,
            "bytes_received": self.bytes_received,
            "scanned": self.scanned,
            "to_scan": self.to_scan,
            "rate": round(self.rate, 1),
            "eta_seconds": self.eta_seconds,
            "records_repaired": self.records_repaired,
            "fences_repaired": self.fences_repaired,
            "attempts": self.attempts,
            "next_attempt": self.next_attempt,
            "last_error": self.last_error,
        }


@dataclass(slots=True)
class _Wanted:
    """One fence as a repair attempt sees it: what it lacks, what came for it (from
    every peer asked so far in the attempt)."""

    fence: Fence
    intervals: list[tuple[int, int, int]]
    got: dict[tuple[int, int], Record] = field(default_factory=dict)
    #: bookmarks of the records received that went out from this instance (its name on
    #: the peer's path: they were in this log)
    from_here: set[tuple[int, int]] = field(default_factory=set)
    #: per record received, the peer that sent it (its place in :attr:`peers`)
    sent_by: dict[tuple[int, int], int] = field(default_factory=dict)
    #: the peers that sent records for it, in the order they were asked, and the user of
    #: this instance each one's records are written as (with ``<Users>``)
    peers: list[str] = field(default_factory=list)
    users: list[UserConfig | None] = field(default_factory=list)

    def takes(self, pub_hash: int, pub_seq: int) -> bool:
        return any(h == pub_hash and lo <= pub_seq <= hi for h, lo, hi in self.intervals)


class Repairer:
    """This instance's repair of its fenced records (module docstring).

    Args:
        config: the instance's configuration (its destinations are the peers asked).
        txlog: its log.
        clock: time for retries and progress.
        events: the event log.
        connector: how to dial a peer (the replication links' own).
        auth: this instance's users (with ``<Users>``, whose records are written back).
    """

    def __init__(
        self,
        config: Config,
        txlog: TransactionLog,
        clock: Clock,
        events: EventSink,
        connector: Connector,
        auth: UserAuthenticator,
    ) -> None:
        self._config = config
        self._auth = auth
        self._txlog = txlog
        self._clock = clock
        self._events = events
        self._connector = connector
        self.progress = RepairProgress()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._began = 0.0
        self._since = 0.0

    @property
    def peers(self) -> list[DestinationConfig]:
        repl = self._config.replication
        return list(repl.destinations) if repl is not None else []

    # -- life -------------------------------------------------------------------------

    def start(self) -> None:
        """Repair in the background while fences remain (module docstring, 4)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="spool-repair")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def request(self) -> None:
        """Attempt a repair now (an operator asked, or a fence was just made)."""
        self._wake.set()

    def alerts(self) -> list[Alert]:
        """A banner while a repair runs: from whom, how far, how long still."""
        progress = self.progress
        if progress.state != "repairing":
            return []
        eta = f", about {progress.eta_seconds:.0f}s left" if progress.eta_seconds else ""
        share = f"{progress.scanned * 100 // progress.to_scan}%" if progress.to_scan else "0%"
        return [
            {
                "id": "txlog-repairing",
                "level": "warning",
                "title": "Repairing damaged records",
                "message": (
                    f"asking {progress.peer} for {progress.records_wanted} fenced records "
                    f"({progress.fences} range{'' if progress.fences == 1 else 's'}): "
                    f"{progress.records_received} received, {progress.bytes_received:,} "
                    f"bytes, {share} of its log searched{eta}."
                ),
                "since": datetime.fromtimestamp(self._since, UTC)
                .isoformat(timespec="seconds")
                .replace("+00:00", "Z"),
            }
        ]

    async def repair_at_start(self, timeout: float) -> bool:
        """Attempt repairs until nothing is fenced or ``timeout`` seconds passed (the
        instance is not ready meanwhile). Returns whether nothing is fenced any more."""
        loop = asyncio.get_running_loop()
        deadline = self._clock.monotonic() + timeout
        delay = RETRY_MIN
        while self._txlog.fences:
            await self.attempt()
            if not self._txlog.fences:
                break
            left = deadline - self._clock.monotonic()
            if left <= 0:
                break
            sleeper = loop.create_task(self._clock.sleep(min(delay, left)))
            try:
                await sleeper
            finally:
                sleeper.cancel()
            delay = min(RETRY_MAX, delay * 2)
        return not self._txlog.fences

    async def _run(self) -> None:
        delay = RETRY_MIN
        while True:
            if self._txlog.fences:
                repaired = await self.attempt()
                delay = RETRY_MIN if repaired else min(RETRY_MAX, delay * 2)
            else:
                delay = RETRY_MAX
            if self._txlog.fences:
                self.progress.state = "waiting"
                self.progress.next_attempt = self._clock.time() + delay
            await sleep_or_wake(self._clock, delay, self._wake)
            self._wake.clear()

    # -- one attempt ------------------------------------------------------------------

    async def attempt(self) -> bool:
        """Ask the peers, in order, until nothing is fenced; returns whether a fence was
        written back."""
        async with self._lock:
            progress = self.progress
            progress.attempts += 1
            progress.next_attempt = None
            before = progress.fences_repaired
            written = progress.records_repaired
            found: dict[int, list[str]] = {}
            #: per fence (by its first seq), what the peers asked so far sent for it
            wanted: dict[int, _Wanted] = {}
            answered: tuple[str, Offer] | None = None
            for dest in self.peers:
                for host, port in dest.transport.addresses:
                    fences = self._txlog.fences
                    if not fences:
                        break
                    address = format_inet_addr(host, port)
                    progress.peer = f"{dest.name} at {address}"
                    try:
                        answered = await self._ask(dest, host, port, fences, wanted, found)
                    except (OSError, LinkLost, LinkTlsFailed, TlsError) as exc:
                        progress.last_error = f"{dest.name} at {address}: {exc}"
                        continue
                    except LinkRefused as exc:
                        progress.last_error = f"{dest.name} at {address}: {exc}"
                    break  # one address of a destination answered: the next destination
            if answered is not None:
                # what the peers found of a fence they cannot make up goes in now
                peer, offer = answered
                self._apportion(list(wanted.values()))
                for w in wanted.values():
                    if not w.fence.exact and any(f is w.fence for f in self._txlog.fences):
                        await self._write(w, peer, offer, found, partial=True)
            for fence in self._txlog.fences:
                said = found.get(fence.first_seq)
                fence.repair = (
                    "; ".join(said) if said else f"no peer answered ({progress.last_error})"
                )
            left = self._txlog.fences
            progress.fences = len(left)
            progress.records_wanted = sum(f.records for f in left)
            progress.state = "waiting" if left else "idle"
            if left and progress.fences_repaired == before:
                self._events.emit(
                    "error", "txlog", "repair_incomplete", fences=len(left),
                    detail="; ".join(f"seqs {f.first_seq}..{f.last_seq}: {f.repair}" for f in left),
                )  # fmt: skip
            return progress.fences_repaired > before or progress.records_repaired > written

    async def _ask(
        self,
        dest: DestinationConfig,
        host: str,
        port: int,
        fences: list[Fence],
        wanted: dict[int, _Wanted],
        found: dict[int, list[str]],
    ) -> tuple[str, Offer]:
        """One peer: ask for every fence's records, write back the fences they make up
        with what the peers asked before in this attempt sent. Returns the peer's name
        and offer."""
        progress = self.progress
        progress.state = "repairing"
        self._since = self._clock.time()
        progress.records_received = progress.bytes_received = 0
        progress.scanned = progress.to_scan = 0
        progress.rate = 0.0
        progress.eta_seconds = None
        progress.fences = len(fences)
        progress.records_wanted = sum(f.records for f in fences)
        asked: list[_Wanted] = []
        for f in fences:
            w = wanted.get(f.first_seq)
            if w is None or w.fence is not f:
                w = wanted[f.first_seq] = _Wanted(f, _asked(f))
            asked.append(w)
        user = await self._identify(dest)
        tls = await self._tls_context(dest)
        transport = await self._connector(host, port, tls, self._config.link_timeout)
        try:
            peer, offer = await self._receive(dest, transport, asked, user)
        finally:
            with contextlib.suppress(Exception):
                await transport.close(1000, "repair ended")
        self._apportion(asked)
        for w in asked:
            await self._write(w, peer, offer, found)
        return peer, offer

    def _apportion(self, asked: list[_Wanted]) -> None:
        """Share the records found among neighbouring inexact fences (:func:`_runs_of`)
        that still stand (one written back already takes nothing more)."""
        fences = self._txlog.fences
        standing = [w for w in asked if any(f is w.fence for f in fences)]
        for run in _runs_of(standing):
            _share(run, lambda r: not self._txlog.holds(r.pub_hash, r.pub_seq))

    async def _identify(self, dest: DestinationConfig) -> UserConfig | None:
        """With ``<Users>``: the user of this instance that ``dest``'s credentials log on
        as, whom the records it gives back are written as (module docstring, 3).

        Raises:
            AuthRefused: those credentials are no user's here.
            NotAccepting: the password-check pool is full (the next attempt asks again).
        """
        if not self._auth.enabled:
            return None
        label = f"the credentials of destination {dest.name!r}"
        try:
            return await authenticate_own(self._auth, dest.transport, label=label)
        except AuthRefused as exc:
            raise AuthRefused(
                "with <Users> configured, repaired records are written as the user a "
                "destination's credentials log on as, which must be a user of this instance "
                f"too: {exc.detail}"
            ) from None

    async def _receive(
        self,
        dest: DestinationConfig,
        transport: Dialed,
        wanted: list[_Wanted],
        user: UserConfig | None,
    ) -> tuple[str, Offer]:
        """The conversation with one peer; the records it sends, sorted to their fences.

        Returns:
            The peer's name and its offer.

        Raises:
            LinkRefused: the peer refused, or the conversation broke.
            LinkLost: the connection went away.
        """
        cfg = self._config
        creds = dest.transport
        protocol = BootstrapProtocol(Role.REQUESTER)
        writer = LinkWriter(protocol.data_to_send, transport)
        protocol.request(
            Repair(
                PROTOCOL_VERSION, cfg.name, cfg.group, creds.user, creds.secret,
                [
                    RepairFence(w.fence.first_seq, w.fence.records, w.intervals, w.fence.window)
                    for w in wanted
                ],
                creds.compression,
            )
        )  # fmt: skip
        await writer.write()
        decompressor = zstandard.ZstdDecompressor()
        offer: Offer | None = None
        self._began = self._clock.monotonic()
        while True:
            try:
                data = await transport.recv()
            except LinkLost as exc:
                protocol.connection_lost(LinkRefused(str(exc)))
                data = b""
            protocol.receive_data(data)
            for event in protocol.events_received():
                if isinstance(event, Offered):
                    offer = event.offer
                    self.progress.to_scan = max(0, offer.last_seq - offer.first_seq + 1)
                elif isinstance(event, DataReceived):
                    assert offer is not None
                    runs = await _runs(event.data, decompressor)
                    self._sort(runs, wanted, offer, user)
                    self.progress.bytes_received += len(event.data.payload)
                    self._advance(event.data.upto, offer)
                elif isinstance(event, Finished):
                    assert offer is not None
                    return offer.name, offer
                elif isinstance(event, LinkClosed):
                    raise event.error
            await writer.write()

    def _sort(
        self, runs: list[Run], wanted: list[_Wanted], offer: Offer, user: UserConfig | None
    ) -> None:
        """Each record received to the fence whose intervals take it (the first one), unless
        a peer asked before sent it already."""
        me = self._config.name
        hop = format_hop(offer.name, offer.group)
        for run in runs:
            path = _path_here(run.path, me, hop)
            here = len(path) <= len(run.path)  # this instance's name was on it
            for i, pub_seq in enumerate(run.pub_seqs):
                for w in wanted:
                    if w.takes(run.pub_hash, pub_seq):
                        key = (run.pub_hash, pub_seq)
                        if key not in w.got:
                            if here:
                                w.from_here.add(key)
                            if not w.peers or w.peers[-1] != offer.name:
                                w.peers.append(offer.name)
                                w.users.append(user)
                            w.sent_by[key] = len(w.peers) - 1
                            w.got[key] = Record(
                                run.source_seqs[i], run.timestamps_us[i], run.pub_hash,
                                pub_seq, run.topic, _MESSAGE_TYPE, RecordKind(run.kind), path,
                                0, run.bodies[i],
                                run.corr_ids[i] if run.corr_ids else "",
                                run.sow_keys[i] if run.sow_keys else "",
                            )  # fmt: skip
                            self.progress.records_received += 1
                        break

    def _advance(self, upto: int, offer: Offer) -> None:
        progress = self.progress
        progress.scanned = max(0, min(upto, offer.last_seq) - offer.first_seq + 1)
        elapsed = max(self._clock.monotonic() - self._began, 1e-6)
        done = progress.scanned / progress.to_scan if progress.to_scan else 1.0
        progress.rate = offer.log_bytes * done / elapsed
        progress.eta_seconds = round(elapsed * (1 - done) / done, 1) if done > 0 else None

    async def _write(
        self,
        w: _Wanted,
        peer: str,
        offer: Offer,
        found: dict[int, list[str]],
        *,
        partial: bool = False,
    ) -> None:
        """Write one fence back when the records received (from every peer asked so far)
        make it up and the user each peer's records are written as may write them (module
        docstring, 3); otherwise say what was found. ``partial`` (an inexact fence, every
        peer of the attempt asked): the records found that are fewer than its seqs go in
        its first seqs, and the rest stays fenced."""
        fence = w.fence
        txlog = self._txlog
        records = [r for r in w.got.values() if not txlog.holds(r.pub_hash, r.pub_seq)]
        for i, user in enumerate(w.users):
            if user is None:
                continue
            refused = sorted({
                r.topic for r in records
                if w.sent_by[(r.pub_hash, r.pub_seq)] == i
                and not self._auth.can_write(user, r.topic)
            })  # fmt: skip
            if refused:
                found.setdefault(fence.first_seq, []).append(
                    f"{w.peers[i]}: user {user.name!r} (whom repaired records are written as) "
                    f"may not publish to {', '.join(map(repr, refused))} here: give it a "
                    "<Write> entitlement for them"
                )
                return
        held = len(w.got) - len(records)
        if fence.exact:
            elsewhere = _held_elsewhere(txlog, fence) - {(r.pub_hash, r.pub_seq) for r in records}
            released = len(elsewhere)
        else:
            released = 0
            if len(records) > fence.records:
                records = _narrowed(records, w.from_here, fence.records)
        if len({w.sent_by[(r.pub_hash, r.pub_seq)] for r in records}) > 1:
            records = merge_in_time_order(records, w.sent_by)
        else:
            records.sort(key=lambda r: r.seq)  # the peer's log order
        label = ", ".join(w.peers) if w.peers else peer
        kept = 0
        if len(records) + released != fence.records:
            note = _shortfall(label, w, records, held)
            if not (partial and not fence.exact and 0 < len(records) < fence.records):
                found.setdefault(fence.first_seq, []).append(note)
                return
            kept = fence.records - len(records)
            found.setdefault(fence.first_seq + len(records), []).append(
                f"{note}; those found are written back, the other {kept} seqs stay fenced"
            )
        try:
            await txlog.fill_fence(fence.first_seq, records, released=released, kept=kept)
        except (OSError, ValueError) as exc:
            found.setdefault(fence.first_seq, []).append(f"{peer}: not written: {exc}")
            self._events.emit(
                "error", "txlog", "repair_failed", first_seq=fence.first_seq,
                last_seq=fence.last_seq, peer=peer, error=str(exc),
            )  # fmt: skip
            return
        progress = self.progress
        progress.records_repaired += len(records)
        if not kept:
            progress.fences_repaired += 1
        self._events.emit(
            "info" if not kept else "warning", "txlog", "repaired", first_seq=fence.first_seq,
            last_seq=fence.last_seq, records=len(records), released=released, kept=kept,
            peer=peer, peer_log=offer.log_id, peers=list(w.peers),
        )  # fmt: skip

    async def _tls_context(self, dest: DestinationConfig) -> ssl.SSLContext | None:
        transport = dest.transport
        if not transport.tls:
            return None
        try:
            return await asyncio.to_thread(
                load_dial_context,
                transport.ca_certificate,
                transport.certificate,
                transport.private_key,
            )
        except TlsError as exc:
            raise LinkTlsFailed(f"TLS files: {exc}") from exc


def _runs_of(wanted: list[_Wanted]) -> list[list[_Wanted]]:
    """The runs of two or more inexact fences whose seqs follow one another.

    Fences next to each other are one stretch of the log that was lost in parts (a
    journal missing beside the placeholders of an earlier loss); the intervals of each
    come from the journals around the whole stretch, so every one of them asks for the
    records of all. A record goes to the first fence that asks for it (:meth:`_sort`),
    which may then hold more records than seqs while the next holds none: a run's
    records are shared out along it (:func:`_share`).
    """
    runs: list[list[_Wanted]] = []
    current: list[_Wanted] = []
    for w in sorted(wanted, key=lambda w: w.fence.first_seq):
        if current and not w.fence.exact and current[-1].fence.last_seq + 1 == w.fence.first_seq:
            current.append(w)
            continue
        if len(current) > 1:
            runs.append(current)
        current = [] if w.fence.exact else [w]
    if len(current) > 1:
        runs.append(current)
    return runs


def _share(run: list[_Wanted], lacked: Callable[[Record], bool]) -> None:
    """Share the records found for a run of neighbouring fences out along it: in the
    order they had (one peer's log order, or :func:`merge_in_time_order` across peers),
    each fence takes the next records its intervals take, up to its seqs. Only when
    they are no more than the run's seqs (narrowed to those that went out from this
    instance, as :func:`_narrowed` does for one fence): with more, which of them were
    here is not known, and they stay where they are (nothing is written).

    Args:
        run: the fences of the run, in seq order.
        lacked: whether the log lacks a record (those it holds are left alone).
    """
    peers: list[str] = []
    owner: dict[tuple[int, int], _Wanted] = {}
    for w in run:
        for key in w.got:
            owner[key] = w
        for name in w.peers:
            if name not in peers:
                peers.append(name)
    records = [w.got[key] for key, w in owner.items() if lacked(w.got[key])]
    capacity = sum(w.fence.records for w in run)
    if len(records) > capacity:
        records = _narrowed(records, {k for w in run for k in w.from_here}, capacity)
        if len(records) > capacity:
            return
    by_peer = {key: peers.index(w.peers[w.sent_by[key]]) for key, w in owner.items()}
    if len(set(by_peer.values())) > 1:
        records = merge_in_time_order(records, by_peer)
    else:
        records.sort(key=lambda r: r.seq)
    i, room = 0, run[0].fence.records
    for r in records:
        key = (r.pub_hash, r.pub_seq)
        while i < len(run) and (room == 0 or not run[i].takes(*key)):
            i += 1
            room = run[i].fence.records if i < len(run) else 0
        if i == len(run):
            return  # the rest cannot go in order: they stay where they are
        _move(key, owner[key], run[i])
        room -= 1


def _move(key: tuple[int, int], src: _Wanted, dst: _Wanted) -> None:
    """A record found for ``src`` belongs to ``dst``: moved with who sent it."""
    if src is dst:
        return
    sender = src.sent_by.pop(key)
    peer, user = src.peers[sender], src.users[sender]
    if peer not in dst.peers:
        dst.peers.append(peer)
        dst.users.append(user)
    dst.sent_by[key] = dst.peers.index(peer)
    dst.got[key] = src.got.pop(key)
    if key in src.from_here:
        src.from_here.discard(key)
        dst.from_here.add(key)


def _narrowed(records: list[Record], from_here: set[tuple[int, int]], wanted: int) -> list[Record]:
    """An inexact fence's records when the peer holds more in its intervals than it has
    seqs (its intervals over-approximate: records of topics this instance does not take,
    or not here yet): those that went out from this instance were in its log, so when
    they alone are as many as the fence's seqs, they are its records. Otherwise the
    records are left as found (too many: nothing is written)."""
    mine = [r for r in records if (r.pub_hash, r.pub_seq) in from_here]
    return mine if len(mine) == wanted else records


def merge_in_time_order(records: list[Record], sent_by: dict[tuple[int, int], int]) -> list[Record]:
    """Records several peers sent, in one order: by time (each peer's own order where
    times are equal), then each publisher's records put in the places its records took,
    in sequence order, so a replay meets every publisher's sequences in order."""
    order = sorted(records, key=lambda r: (r.timestamp_us, sent_by[(r.pub_hash, r.pub_seq)], r.seq))
    by_publisher: dict[int, list[Record]] = {}
    for r in order:
        by_publisher.setdefault(r.pub_hash, []).append(r)
    ranked = {pub: iter(sorted(rs, key=lambda r: r.pub_seq)) for pub, rs in by_publisher.items()}
    return [next(ranked[r.pub_hash]) for r in order]


#: most missing ranges a fence's repair note lists
_LISTED: Final = 8


def _shortfall(peer: str, w: _Wanted, records: list[Record], held: int) -> str:
    """What a peer's answer lacked for a fence (its ``repair`` note): how many found,
    and, when too few, which bookmarks of its intervals no record came for."""
    fence = w.fence
    note = f"{peer}: {len(records)} of {fence.records} records found" + (
        f" ({held} held here already)" if held else ""
    )
    if len(records) > fence.records:
        return note + (
            ": more records in its intervals than it has seqs, and the ones that went out "
            "from this instance do not tell which were here"
        )
    got = set(w.got)  # found (held here too): not missing
    missing: list[str] = []
    total = 0
    for key, lo, hi in fence.identities:
        pubs = publisher_of(key)
        seqs = sorted({s for p, s in got if p in pubs and lo <= s <= hi})
        prev = lo - 1
        for s in [*seqs, hi + 1]:
            if s > prev + 1:
                total += s - prev - 1
                if len(missing) < _LISTED:
                    first, last = prev + 1, s - 1
                    missing.append(f"{key}|{first}" + (f"..{last}" if last > first else ""))
            prev = s
    if not missing:
        return note
    listed = ", ".join(missing) + (
        ", ..." if total > len(missing) and len(missing) == _LISTED else ""
    )
    if fence.exact:
        return f"{note}; missing ({total}, as pub_hash|pub_seqs): {listed}"
    return (
        f"{note}; not found ({total} sequences of its intervals, as pub_hash|pub_seqs; "
        f"the intervals may hold sequences never here: at most "
        f"{fence.records - len(records)} were): {listed}"
    )


def _asked(fence: Fence) -> list[tuple[int, int, int]]:
    """A fence's intervals as asked: each index key as itself and as the publisher it may
    be the late key of."""
    out = []
    for key, lo, hi in fence.identities:
        for pub in publisher_of(key):
            out.append((pub, lo, hi))
    return out


def _held_elsewhere(txlog: TransactionLog, fence: Fence) -> set[tuple[int, int]]:
    """The bookmarks of an exact fence that reached the log again elsewhere meanwhile (a
    publisher's resend, another route): their placeholders are released, not filled."""
    out = set()
    for key, lo, hi in fence.identities:
        for s in range(lo, hi + 1):
            for pub in publisher_of(key):
                if txlog.holds(pub, s):
                    out.add((pub, s))
                    break
    return out


def _path_here(path: Sequence[str], me: str, hop: str) -> tuple[str, ...]:
    """The path a record had on this instance, from the peer's copy's (module docstring,
    3)."""
    for i, entry in enumerate(path):
        if parse_hop(entry).name == me:
            return tuple(path[:i])
    return (*path, hop)


async def _runs(data: Data, decompressor: zstandard.ZstdDecompressor) -> list[Run]:
    """The runs of a data message (decompressed in a thread)."""
    try:
        if data.compressed:
            raw = await asyncio.to_thread(
                decompressor.decompress, data.payload, max_output_size=1 << 30
            )
            return decode_runs(raw, data.count)
        return decode_runs(data.payload, data.count)
    except (ReplicationProtocolError, zstandard.ZstdError) as exc:
        raise LinkRefused(f"a repair data message is malformed: {exc}") from exc
