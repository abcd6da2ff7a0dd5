"""Serving a bootstrap: copy this instance's state to an empty instance that asks (and,
on the same conversation, a repair: server/replication/repairsource.py).

The ``/replication`` endpoint (web/replication.py) hands a connection whose first message
is ``bootstrap`` (not ``hello``) to :meth:`BootstrapSource.serve`. The conversation is the
sans-I/O :class:`~spool.server.replication.bootproto.BootstrapProtocol`; this adapter:

1. authenticates the requester exactly like a link's source (server/replication/linkauth.py)
   and checks that its user may read every topic it asks for by name;
2. answers ``busy`` while this instance is bootstrapping itself, naming the instances its
   own bootstrap found bootstrapping: the requester finding its own name there knows the
   two wait on each other (a mutual bootstrap) and stops, instead of waiting forever;
3. offers the log's range (from the requested ``start``, resuming an interrupted copy, up
   to the durable end now) and the SOW records to come, for the requester's progress/ETA;
4. SOW phase (``DataType`` sow): the records of the SOW topics asked for that the log no
   longer holds (their seq is before the log's first, or the log does not record the
   topic), with their publisher bookmarks; the log phase brings the rest;
5. log phase (``DataType`` txlog): every record of the topics asked for whose kind a link
   replicates (server/replication/routing.py ``REPLICATED_KINDS``) but an unidentified
   ``SOW_DELETE`` (an expiration): a delayed message's ``SCHEDULED`` record too, so the
   requester delivers the pending ones when they fall due, never its ``DUE`` record (each
   instance writes its own); **including records that came from the requester** (loop
   protection is a link's rule, not a copy's: an instance rebuilt empty must get back
   what it once published), as runs of a link's ``data`` messages. Writes wait for the
   socket (TCP backpressure): a slow requester slows the read of the log, nothing piles
   up here.

Reading is in the log's batches (off the loop: ``read_view`` does its I/O in a thread).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

import zstandard

from spool.server.auth import UserAuthenticator
from spool.server.clock import Clock
from spool.server.config import Config, UserConfig
from spool.server.logons import LogonGuard
from spool.server.peer import Peer
from spool.server.ports import SowRecord
from spool.server.replication.bootproto import BootstrapProtocol, BootstrapRequested, Role
from spool.server.replication.errors import (
    BootstrapNotAllowed,
    LinkRefused,
    NotEntitledToReplicate,
    SourceDamaged,
)
from spool.server.replication.frames import Bootstrap, Offer, RecordsWriter, Repair
from spool.server.replication.linkauth import authenticate_peer
from spool.server.replication.packing import pack_runs
from spool.server.replication.repairsource import plan_repair, send_repair
from spool.server.replication.routing import REPLICATED_KINDS
from spool.server.replication.transport import LinkLost, LinkTransport, LinkWriter
from spool.server.sow.memory import MemoryStore
from spool.server.stats.source import EventSink
from spool.server.txlog import FencedRecords, RecordKind, TransactionLog
from spool.server.txlog.format.batch import RecordBatch

__all__ = ["BootstrapBusy", "BootstrapSource", "SourceContext"]

#: records and bytes per log read (and so per data message)
BATCH_RECORDS: Final = 4096
BATCH_BYTES: Final = 1 << 20
_DELETE: Final = int(RecordKind.SOW_DELETE)
_PUBLISH: Final = int(RecordKind.PUBLISH)


@dataclass(frozen=True, slots=True)
class BootstrapBusy:
    """This instance is bootstrapping: who its own bootstrap found bootstrapping too."""

    waiting_on: list[str]


@dataclass(slots=True)
class SourceContext:
    """What serving a bootstrap needs from the instance."""

    config: Config
    txlog: TransactionLog
    auth: UserAuthenticator
    logons: LogonGuard | None
    clock: Clock
    events: EventSink
    log_id: Callable[[], str]
    sow_stores: Callable[[], Iterable[MemoryStore]]
    busy: Callable[[str], BootstrapBusy | None]


class _Topics:
    """The topics a request names (exact names and regexes), matched with a cache."""

    def __init__(self, topics: list[tuple[str, bool]]) -> None:
        self._exact = {name for name, regex in topics if not regex}
        self._patterns = [re.compile(name) for name, regex in topics if regex]
        self._cache: dict[str, bool] = {}

    def __call__(self, topic: str) -> bool:
        hit = self._cache.get(topic)
        if hit is None:
            hit = topic in self._exact or any(p.search(topic) for p in self._patterns)
            if len(self._cache) < 10_000:
                self._cache[topic] = hit
        return hit


class BootstrapSource:
    """One bootstrap served to one requester. Owned by the event loop.

    Args:
        ctx: the instance's parts.
        transport: the accepted websocket.
        peer: the far end as the listener saw it.
    """

    def __init__(self, ctx: SourceContext, transport: LinkTransport, peer: Peer) -> None:
        self._ctx = ctx
        self._transport = transport
        self._peer = peer
        self.protocol = BootstrapProtocol(Role.SOURCE)
        self._writer = LinkWriter(self.protocol.data_to_send, transport)
        self._task: asyncio.Task[None] | None = None
        self.requester = ""
        self.records_out = 0

    def receive(self, data: bytes) -> None:
        """Bytes from the requester (its request; nothing else is expected)."""
        self.protocol.receive_data(data)
        for event in self.protocol.events_received():
            if isinstance(event, BootstrapRequested) and self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._serve(event.request))
        if self._task is None:
            self._writer.write_soon()

    def lost(self) -> None:
        """The websocket went away: stop copying."""
        self.protocol.connection_lost(LinkRefused("connection lost"))
        if self._task is not None:
            self._task.cancel()

    async def wait(self) -> None:
        """Until the copy ended (or never started)."""
        if self._task is not None:
            await asyncio.wait({self._task})

    async def _serve(self, request: Bootstrap | Repair) -> None:
        ctx = self._ctx
        self.requester = request.name
        try:
            user = await self._check(request)
            if isinstance(request, Repair):
                await self._repair(request, user)
                return
            busy = ctx.busy(request.name)
            if busy is not None:
                self.protocol.busy(ctx.config.name, busy.waiting_on)
                await self._writer.write()
                return
            await self._copy(request, user)
        except LinkRefused as exc:
            ctx.events.emit(
                "warning", "replication", "bootstrap_refused", requester=request.name,
                remote=self._transport.remote, reason=exc.reason, detail=exc.detail,
            )  # fmt: skip
            self.protocol.refuse(exc)
        except LinkLost as exc:
            ctx.events.emit(
                "warning", "replication", "bootstrap_serve_lost", requester=request.name,
                records=self.records_out, detail=str(exc),
            )  # fmt: skip
            return
        finally:
            if self._writer.error is None:
                try:
                    await self._writer.write()
                except LinkLost:
                    pass
                await self._transport.close(1000, "bootstrap ended")

    async def _check(self, request: Bootstrap | Repair) -> UserConfig | None:
        ctx = self._ctx
        if request.name == ctx.config.name:
            raise BootstrapNotAllowed(
                f"the requester calls itself {request.name!r}, this instance's own Name"
            )
        user: UserConfig | None = None
        if ctx.auth.enabled:
            user = await authenticate_peer(
                ctx.auth, ctx.logons, self._peer, name=request.name, user=request.user,
                secret=request.secret,
            )  # fmt: skip
            if isinstance(request, Repair):
                return user  # what it may read is checked record by record
            for name, regex in request.topics:
                if not regex and not ctx.auth.can_read(user, name):
                    raise NotEntitledToReplicate(
                        f"user {user.name!r} of the bootstrap of {request.name!r} may not "
                        f"read {name!r}; give it a <Read> entitlement for the copied topics"
                    )
        return user

    async def _copy(self, request: Bootstrap, user: UserConfig | None) -> None:
        ctx = self._ctx
        txlog = ctx.txlog
        takes = _Topics(request.topics)
        can_read = self._reader(user)
        first = txlog.first_seq
        last = txlog.durable_seq
        start = max(request.start, first, 1)
        sow_records: list[tuple[str, list[SowRecord]]] = []
        if "sow" in request.data_types and not request.sow_done:
            for store in ctx.sow_stores():
                topic = store.topic
                if not takes(topic) or not can_read(topic):
                    continue
                log_config = ctx.config.transaction_log
                logged = log_config is not None and log_config.records(topic)
                kept = [r for r in store.records() if not logged or r.seq < first or r.seq == 0]
                if kept:
                    sow_records.append((topic, kept))
        log_bytes = sum(j.data_bytes for j in txlog.journals() if j.last_seq >= start and j.records)
        self.protocol.offer(
            Offer(
                name=ctx.config.name, group=ctx.config.group, log_id=ctx.log_id(),
                first_seq=start, last_seq=last, log_bytes=log_bytes,
                sow_records=sum(len(records) for _, records in sow_records),
            )
        )  # fmt: skip
        await self._writer.write()
        ctx.events.emit(
            "info", "replication", "bootstrap_serving", requester=request.name,
            start=start, last_seq=last, sow_records=sum(len(r) for _, r in sow_records),
        )  # fmt: skip
        compressor = zstandard.ZstdCompressor(level=1) if request.compression else None
        if self.protocol.phase == "sow":
            for topic, records in sow_records:
                await self._send_sow(topic, records, compressor)
            self.protocol.done(0)
            await self._writer.write()
        if self.protocol.phase == "txlog":
            await self._send_log(start, last, takes, can_read, compressor)
            self.protocol.done(last)
            await self._writer.write()
        ctx.events.emit(
            "info", "replication", "bootstrap_served", requester=request.name,
            records=self.records_out, last_seq=last,
        )  # fmt: skip

    async def _repair(self, request: Repair, user: UserConfig | None) -> None:
        """Send the records a repair asks for (server/replication/repairsource.py)."""
        ctx = self._ctx
        txlog = ctx.txlog
        plan = await plan_repair(txlog, request)
        log_bytes = sum(
            j.data_bytes
            for j in txlog.journals()
            if j.records and j.last_seq >= plan.start and j.first_seq <= plan.end
        )
        self.protocol.offer(
            Offer(
                name=ctx.config.name, group=ctx.config.group, log_id=ctx.log_id(),
                first_seq=plan.start, last_seq=plan.end, log_bytes=log_bytes, sow_records=0,
            )
        )  # fmt: skip
        await self._writer.write()
        ctx.events.emit(
            "info", "replication", "repair_serving", requester=request.name,
            fences=len(request.fences), start=plan.start, end=plan.end,
        )  # fmt: skip
        compressor = zstandard.ZstdCompressor(level=1) if request.compression else None

        async def send(upto: int, writer: RecordsWriter) -> None:
            await self._send(upto, writer, compressor)

        sent = await send_repair(txlog, plan, self._reader(user), send)
        self.protocol.done(plan.end)
        await self._writer.write()
        ctx.events.emit(
            "info", "replication", "repair_served", requester=request.name, records=sent,
        )  # fmt: skip

    def _reader(self, user: UserConfig | None) -> Callable[[str], bool]:
        auth = self._ctx.auth
        if not auth.enabled:
            return lambda _topic: True
        cache: dict[str, bool] = {}

        def can_read(topic: str) -> bool:
            hit = cache.get(topic)
            if hit is None:
                hit = cache[topic] = auth.can_read(user, topic)
            return hit

        return can_read

    async def _send(self, upto: int, writer: RecordsWriter, compressor: object) -> None:
        payload = writer.payload()
        if isinstance(compressor, zstandard.ZstdCompressor):
            payload = await asyncio.to_thread(compressor.compress, payload)
        self.protocol.send_data(upto, writer.count, payload, compressed=compressor is not None)
        self.records_out += writer.count
        await self._writer.write()

    async def _send_sow(self, topic: str, records: list[SowRecord], compressor: object) -> None:
        """A SOW topic's records, grouped by publisher (a run shares one)."""
        raw = topic.encode()
        for i in range(0, len(records), BATCH_RECORDS):
            chunk = sorted(records[i : i + BATCH_RECORDS], key=lambda r: (r.pub_hash, r.pub_seq))
            writer = RecordsWriter()
            start = 0
            while start < len(chunk):
                pub = chunk[start].pub_hash
                end = start
                while end < len(chunk) and chunk[end].pub_hash == pub:
                    end += 1
                run = chunk[start:end]
                writer.add_run(
                    raw, pub, _PUBLISH, (), [r.seq for r in run],
                    [r.timestamp_us for r in run], [r.pub_seq for r in run],
                    [r.body for r in run], None, [r.key.encode() for r in run],
                )  # fmt: skip
                start = end
            await self._send(0, writer, compressor)

    async def _send_log(
        self,
        start: int,
        last: int,
        takes: Callable[[str], bool],
        can_read: Callable[[str], bool],
        compressor: object,
    ) -> None:
        txlog = self._ctx.txlog
        pos = start
        topic_bytes: dict[str, bytes] = {}
        while pos <= last:
            try:
                batch = await txlog.read_view(
                    pos, max_count=BATCH_RECORDS, max_bytes=BATCH_BYTES, upto_seq=last
                )
            except FencedRecords as exc:
                # never an incomplete copy: the requester tries another source or waits
                # for this log's repair
                raise SourceDamaged(
                    f"{self._ctx.config.name!r} holds damaged records (local seqs "
                    f"{exc.first_seq}..{exc.last_seq}, {exc.reason}) waiting for a repair"
                ) from exc
            if not len(batch):
                break
            chosen = _choose(batch, takes, can_read)
            writer = pack_runs(batch, chosen, topic_bytes) if chosen else RecordsWriter()
            await self._send(batch.last_seq, writer, compressor)
            pos = batch.last_seq + 1


def _choose(
    batch: RecordBatch, takes: Callable[[str], bool], can_read: Callable[[str], bool]
) -> list[int]:
    """The records of a batch a bootstrap copies (module docstring, 5.)."""
    topics, hashes = batch.topics, batch.pub_hashes
    kinds = batch.kinds()
    only = next(iter(kinds)) if len(kinds) == 1 else None
    out = []
    for i, topic in enumerate(topics):
        kind = only if only is not None else batch.kind(i)
        if kind not in REPLICATED_KINDS or (kind == _DELETE and not hashes[i]):
            continue
        if takes(topic) and can_read(topic):
            out.append(i)
    return out
