"""The replay loop: one task reading the log and feeding one or more members.

The cursor owns the only await points of a replay (reading, waiting for the limit,
pacing sleeps, the sink's back-pressure) and the task they run in (:meth:`ReplayCursor.start`
with ``on_error``, or ``await run()``); everything it decides per record is delegated to the
pure layers below it (plan, pacing, conflation, member). :func:`resume_together` builds a
group that waits for the strictest limit of its members. The engine's subscription
service (server/subscriptions.py) starts one cursor per bookmark subscription and merges
them only through :func:`resume_together`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence

from spool.server.clock import SYSTEM_CLOCK, TIME_EPSILON, Clock, time_us
from spool.server.ports import Outbound
from spool.server.protocol.errors import SubIdNotFound
from spool.server.replay.errors import ReplayGapError
from spool.server.replay.member import ReplayMember
from spool.server.replay.ports import DurableLimit, LowestLimit, ReadLimit, ReplaySource
from spool.server.txlog.format.record import Record

log = logging.getLogger(__name__)


class ReplayCursor:
    """One loop reading the log from the lowest member position and feeding its members.

    Run it either in its own task (``start()``; failures go to ``on_error``) or in a task
    of the caller's (``await run()``; failures propagate). ``pause()`` / ``resume()`` /
    ``close()`` are synchronous; ``close()`` makes the loop end at its next await (and
    cancels the task ``start()`` created); ``await wait_closed()`` waits for the end. The
    loop also ends by itself once every member has finished (range end, ``top_n``) or left.

    Each pass: read a batch up to the limit (and the members' range ends), hand it to the
    members (a group gets it record by record, so interleaving across members is log
    order), drain each outbox through its pacer to its sink. At the limit: tell new
    arrivals ``caught_up``, then wait for the next durable record, waking early for clock
    deadlines: conflation windows, future range ends and position acks (every
    ``position_interval`` seconds after catch-up, ``sink.position(bm)`` of the latest
    durable record the member has passed, when it changed since the previous one).

    Members can move between cursors at any time (:meth:`take_member`,
    :meth:`add_member`): records are handed over to a member's sink before its
    ``deliver()`` is awaited, so a move (or a cancellation) in the middle of a delivery
    never makes another cursor deliver them again. Pausing takes effect after the delivery
    in progress; positions stay in the members.
    """

    def __init__(
        self,
        source: ReplaySource,
        members: Iterable[ReplayMember] = (),
        *,
        clock: Clock = SYSTEM_CLOCK,
        limit: ReadLimit | None = None,
        position_interval: float = 1.0,
        batch_count: int = 1000,
        batch_bytes: int = 1 << 20,
        on_error: Callable[[ReplayCursor, Exception], None] | None = None,
        paced: Outbound | None = None,
    ) -> None:
        self.source = source
        self.paced = paced
        self.clock = clock
        self.limit: ReadLimit = limit if limit is not None else DurableLimit(source)
        self.position_interval = position_interval
        self.batch_count = batch_count
        self.batch_bytes = batch_bytes
        self.on_error = on_error
        self.error: Exception | None = None
        self._members: list[ReplayMember] = []
        self._task: asyncio.Task[None] | None = None
        self._own_task = False
        self._closed = False
        self._ended = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._timer_due = 0.0
        self._waiting: asyncio.Future[None] | None = None
        self._woken = False
        self._pause_requested = False
        self._interrupted = False
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._parked = asyncio.Event()
        self._mark: Record | None = None
        self._undurable: deque[Record] = deque(maxlen=65536)
        for member in members:
            self.add_member(member)

    # -- state --

    @property
    def members(self) -> tuple[ReplayMember, ...]:
        """The members still being fed, in delivery order."""
        return tuple(m for m in self._members if not m.finished and m.owner is self)

    @property
    def paused(self) -> bool:
        return self._pause_requested

    @property
    def running(self) -> bool:
        return self._task is not None and not self._ended.is_set()

    @property
    def done(self) -> bool:
        """Closed, or the loop ended (all members finished or left, or it failed)."""
        return self._closed or self._ended.is_set()

    def member(self, sub_id: str) -> ReplayMember:
        for m in self.members:
            if m.sub_id == sub_id:
                return m
        raise SubIdNotFound(sub_id)

    # -- membership --

    def add_member(self, member: ReplayMember) -> None:
        """Feed ``member`` from its own position too (it may come from another cursor)."""
        member.owner = self
        self._members.append(member)
        self._interrupted = True
        self._wake()

    def take_member(self, sub_id: str) -> ReplayMember:
        """Stop feeding a member and return it, position intact (safe at any time)."""
        member = self.member(sub_id)
        member.owner = None
        self._members.remove(member)
        self._interrupted = True
        self._wake()
        return member

    def take_members(self) -> list[ReplayMember]:
        """:meth:`take_member` for every member."""
        return [self.take_member(m.sub_id) for m in self.members]

    def remove(self, sub_id: str) -> bool:
        """Drop one member (unsubscribe) without telling its sink; False if not here."""
        for m in self.members:
            if m.sub_id == sub_id:
                self.take_member(sub_id).drop()
                return True
        return False

    # -- control --

    def start(self, *, paused: bool = False) -> None:
        """Run the loop in a new task (paused: it waits for :meth:`resume` first)."""
        self._claim()
        if paused:
            self.pause()
        self._own_task = True
        self._task = asyncio.get_running_loop().create_task(
            self._run_reporting(), name=f"replay:{','.join(m.sub_id for m in self._members)}"
        )

    async def run(self) -> None:
        """Run the loop in the calling task until it ends; failures propagate.

        Raises:
            ReplayGapError: the source returned records out of order.
            Exception: whatever the source or a sink raised.
        """
        self._claim()
        self._task = asyncio.current_task()
        await self._serve()

    def pause(self) -> None:
        """Stop reading at the next safe point; positions are kept."""
        self._pause_requested = True
        self._interrupted = True
        self._resumed.clear()
        self._wake()

    def resume(self) -> None:
        """Continue from the kept positions."""
        self._pause_requested = False
        self._resumed.set()

    async def park(self) -> None:
        """Pause and return once the loop stands still (or has ended)."""
        self.pause()
        if not self.running:
            return
        parked = asyncio.ensure_future(self._parked.wait())
        ended = asyncio.ensure_future(self._ended.wait())
        try:
            await asyncio.wait({parked, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            parked.cancel()
            ended.cancel()

    def close(self) -> None:
        """End the loop at its next await (cancelling the task :meth:`start` made)."""
        self._closed = True
        self._interrupted = True
        self._resumed.set()
        self._wake()
        if self._own_task and self._task is not None and not self._task.done():
            self._task.cancel()

    async def wait_closed(self) -> None:
        """Wait until the loop has ended (by itself, by :meth:`close`, or by failing)."""
        if self._task is not None:
            await self._ended.wait()

    # -- the loop --

    def _claim(self) -> None:
        if self._task is not None or self._closed:
            raise RuntimeError("a replay cursor runs once")

    async def _run_reporting(self) -> None:
        try:
            await self._serve()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = exc
            if self.on_error is not None:
                self.on_error(self, exc)
            else:
                log.exception(
                    "replay cursor %s failed", self._task.get_name() if self._task else ""
                )

    async def _serve(self) -> None:
        try:
            await self._loop()
        finally:
            self._parked.clear()
            self._ended.set()
            if self._timer is not None:
                self._timer.cancel()

    async def _loop(self) -> None:
        while not self._closed:
            if self._pause_requested:
                self._parked.set()
                await self._resumed.wait()
                self._parked.clear()
                continue
            self._interrupted = False
            members = self._active()
            if not members:
                return
            self._tick(members)
            if not await self._drain_all(members):
                continue
            members = self._active()
            if not members:
                return
            if await self._step(members):
                continue
            await self._idle(members)

    def _active(self) -> list[ReplayMember]:
        members = self._members
        if any(m.finished or m.owner is not self for m in members):
            members = [m for m in members if not m.finished and m.owner is self]
            self._members = members
        return members

    async def _step(self, members: list[ReplayMember]) -> bool:
        """Read and feed one batch; False when there is nothing to read (at the limit).

        With a ``paced`` connection the read is pulled by its outbound buffer: it waits
        for the connection's turn (one paced reader at a time), then for room in its
        buffer, reads at most half a piece (an eighth of the buffer's limit) and keeps the
        turn until that batch is queued. However many replays a connection runs, what they
        hold in memory is one batch plus the buffer, read or not by the client.
        """
        paced = self.paced
        if paced is None:
            return await self._read_and_feed(members, self.batch_bytes)
        async with paced.paced_turn:
            if not paced.has_room():
                await self._interruptible(paced.wait_room())
            if self._interrupted or paced.closed:
                return True
            # an eighth of the limit: a batch is held twice while it is decoded (the bytes
            # read and the bodies cut from them)
            return await self._read_and_feed(
                members, min(self.batch_bytes, max(1, paced.piece_bytes // 2))
            )

    async def _read_and_feed(self, members: list[ReplayMember], max_bytes: int) -> bool:
        first = self.source.first_seq
        read_from = min(m.next_seq for m in members)
        if read_from < first:
            # Retention removed records nobody had read: nothing to deliver there.
            for m in members:
                m.next_seq = max(m.next_seq, first)
            read_from = first
        limit_seq = self.limit.seq
        if read_from > limit_seq:
            return False
        limit = limit_seq
        bounds = [m.stop_bound for m in members]
        if all(b is not None for b in bounds):
            limit = min(limit, max(b for b in bounds if b is not None))
        if read_from > limit:
            # Every member has reached its range end: the next tick finishes them.
            await asyncio.sleep(0)
            return True
        # One read for every cursor: a lone member hands the columnar batch to its sink
        # whole (no Record per message); a group walks it record by record, which builds
        # the records it needs for log-order interleaving.
        batch = await self.source.read_view(
            read_from,
            max_count=self.batch_count,
            max_bytes=max_bytes,
            upto_seq=limit,
        )
        if not batch and read_from > self.source.durable_seq:
            # A limit ahead of disk (``live``) over a log that serves durable records
            # only: the records exist but are not readable until the next group commit.
            await self._interruptible(self.source.wait_durable(read_from))
            return True
        self._check_batch(batch, read_from, limit, members)
        self._note_durable(batch)
        if len(members) == 1:
            members[0].ingest(batch)
            await self._drain(members[0])
        else:
            for rec in batch:
                one = (rec,)
                for m in members:
                    m.ingest(one)
                    if not await self._drain(m):
                        return True
        # One turn of the loop per batch: a read from the log's memory tail and a sink
        # with room never suspend, so without it a replay would read and encode the
        # whole tail (200,000 records of 100 bytes in the benchmark: 60-470 ms) before
        # the connection's writer, or any other task of the instance, got a turn.
        await asyncio.sleep(0)
        return True

    def _check_batch(
        self, batch: Sequence[Record], read_from: int, limit: int, members: list[ReplayMember]
    ) -> None:
        if not batch:
            raise ReplayGapError(f"the log returned nothing from {read_from} up to {limit}")
        head = batch[0].seq
        if head != read_from:
            if head > read_from and read_from < self.source.first_seq:
                for m in members:
                    m.next_seq = max(m.next_seq, head)
            else:
                raise ReplayGapError(f"asked for seq {read_from}, the log returned {head}")
        if batch[-1].seq - head + 1 != len(batch) or batch[-1].seq > limit:
            raise ReplayGapError(f"the log returned a non-contiguous batch from {head}")

    async def _drain_all(self, members: list[ReplayMember]) -> bool:
        for m in members:
            if not await self._drain(m):
                return False
        return True

    async def _drain(self, m: ReplayMember) -> bool:
        """Deliver m's outbox; False if interrupted (pause, close, membership) first."""
        clock = self.clock
        while m.has_output and not m.finished:
            if self._interrupted or m.owner is not self:
                return False
            records, start = m.output()
            count = len(records) - start
            pacer = m.pacer
            if pacer is not None:
                count, wait = pacer.take(records, start, clock.monotonic())
                if count == 0:
                    await self._interruptible(clock.sleep(wait))
                    continue
            if m.remaining is not None:
                count = min(count, m.remaining)
            end = start + count
            chunk = records if start == 0 and end == len(records) else records[start:end]
            m.hand_over(count)
            # Cancelled inside deliver(), the chunk counts as sent: a sink sends before it
            # waits for room, so delivering it again would duplicate it.
            delivered = count
            try:
                delivered = await m.sink.deliver(chunk)
            finally:
                if pacer is not None:
                    pacer.charge(records, start, count, delivered)
                m.account(delivered)
            if m.remaining is not None and m.remaining <= 0:
                m.finish()
        if m.stopping and not m.finished and not m.has_output:
            m.finish()
        return True

    async def _idle(self, members: list[ReplayMember]) -> None:
        """At the limit: announce catch-up, then wait for data or a deadline."""
        mono = self.clock.monotonic()
        for m in members:
            if not m.caught_up:
                m.caught_up = True
                m.next_position_at = mono + self.position_interval
                if not m.ranged:
                    m.sink.caught_up()
        delay = self._next_delay(members)
        if delay is not None and delay <= 0:
            return
        if delay is not None:
            self._arm_timer(delay)
        read_from = min(m.next_seq for m in members)
        await self._interruptible(self.limit.wait(read_from))

    # -- time-driven work --

    def _tick(self, members: list[ReplayMember]) -> None:
        """Close due conflation windows, settle passed range ends, send due position acks."""
        now_us = time_us(self.clock)
        mono = self.clock.monotonic()
        limit = self.limit.seq
        self._refresh_mark()
        for m in members:
            m.tick(now_us, self.source, m.next_seq > limit)
            position = self._position_for(m)
            if position is not None and mono + TIME_EPSILON >= m.next_position_at:
                m.sink.position(position)
                m.last_position = position
                m.next_position_at = mono + self.position_interval

    def _next_delay(self, members: list[ReplayMember]) -> float | None:
        now_us = time_us(self.clock)
        mono = self.clock.monotonic()
        limit = self.limit.seq
        delays: list[float] = []
        for m in members:
            deadline = m.deadline_us(m.next_seq > limit)
            if deadline is not None:
                delays.append((deadline - now_us) / 1e6)
            if self._position_for(m) is not None:
                delays.append(m.next_position_at - mono)
            elif self._undurable and m.caught_up and not m.finished:
                # A live cursor read records not on disk yet: look again later for a
                # durable position to ack (the limit it waits on ignores durability).
                wait = m.next_position_at - mono
                delays.append(wait if wait > 0 else self.position_interval)
        return min(delays) if delays else None

    def _position_for(self, m: ReplayMember) -> str | None:
        """The position ack m is owed now, if any: caught up, holding nothing back, and the
        latest durable record it has passed differs from the last one acked."""
        mark = self._mark
        if mark is None or not m.caught_up or m.finished or m.holding or mark.seq >= m.next_seq:
            return None
        position = mark.bookmark
        return None if position == m.last_position else position

    def _note_durable(self, batch: Sequence[Record]) -> None:
        """Track the newest durable record read (a ``live`` cursor reads ahead of disk)."""
        durable = self.source.durable_seq
        if batch[-1].seq <= durable:
            self._mark = batch[-1]
            self._undurable.clear()
            return
        for rec in batch:
            if rec.seq <= durable:
                self._mark = rec
            else:
                self._undurable.append(rec)

    def _refresh_mark(self) -> None:
        durable = self.source.durable_seq
        pending = self._undurable
        while pending and pending[0].seq <= durable:
            self._mark = pending.popleft()

    # -- waiting --

    def _arm_timer(self, delay: float) -> None:
        """Wake the idle wait after ``delay`` seconds of the injected clock (one timer task
        per cursor, replaced only when an earlier deadline comes up)."""
        due = self.clock.monotonic() + delay
        timer = self._timer
        if timer is not None and not timer.done() and self._timer_due <= due + TIME_EPSILON:
            return
        if timer is not None:
            timer.cancel()
        self._timer_due = due
        self._timer = asyncio.get_running_loop().create_task(self._fire_after(delay))

    async def _fire_after(self, delay: float) -> None:
        await self.clock.sleep(delay)
        self._wake()

    def _wake(self) -> None:
        waiting = self._waiting
        if waiting is not None and not waiting.done():
            self._woken = True
            waiting.cancel()

    async def _interruptible(self, awaitable: Awaitable[None]) -> None:
        """Await ``awaitable`` unless :meth:`_wake` cuts it short (then just return)."""
        waiting = asyncio.ensure_future(awaitable)
        self._waiting = waiting
        self._woken = False
        try:
            await waiting
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not (self._woken and current is not None and current.cancelling() == 0):
                raise
        finally:
            self._waiting = None
            self._woken = False


def resume_together(cursors: Sequence[ReplayCursor]) -> ReplayCursor:
    """Paused subscriptions resumed as one group, so their messages interleave in log order.

    Every member of ``cursors`` moves (each at its own position) into one new cursor, which
    reads from the lowest position; the old cursors are closed. The new cursor has the
    first cursor's settings, and waits for the strictest durability its members asked for.
    It is returned not started: ``start()`` it or ``await run()`` it.
    """
    if not cursors:
        raise ValueError("resume_together() needs at least one cursor")
    first = cursors[0]
    if any(c.source is not first.source or c.clock is not first.clock for c in cursors):
        raise ValueError("cursors to resume together must share the source and the clock")
    members: list[ReplayMember] = []
    limits: list[ReadLimit] = []
    for cursor in cursors:
        members.extend(cursor.take_members())
        if all(h is not cursor.limit for h in limits):
            limits.append(cursor.limit)
        cursor.close()
    return ReplayCursor(
        first.source,
        members,
        clock=first.clock,
        limit=limits[0] if len(limits) == 1 else LowestLimit(limits),
        position_interval=first.position_interval,
        batch_count=first.batch_count,
        batch_bytes=first.batch_bytes,
        on_error=first.on_error,
        paced=first.paced,
    )
