"""The query commands: ``sow`` and ``sow_and_subscribe`` / ``sow_and_delta_subscribe``.

``sow`` answers with the records of a SOW topic (or of every SOW topic a regex matches)
that pass the filter, shaped by ``top_n``, ``orderby`` and ``bs``, optionally restricted to
the keys of a ``k`` list, between ``group_begin`` and ``group_end`` (server/sow/streaming.py).
With ``bm`` it is a *historical* query: the state as of that bookmark or moment, computed
from the transaction log (server/sow/history.py).

``sow_and_subscribe`` is atomic: the snapshot is taken and the subscription registered in
the same step on the event loop, so every later change reaches the subscriber exactly once,
after its ``group_end`` (they wait in its ``pending`` list while the snapshot is sent).
With ``bm`` the live part is a bookmark replay that starts right after the point the
snapshot was computed for, so again nothing is lost or doubled.

A connection's query results are sent one after the other, never interleaved (a second
query waits for the first's ``group_end``); each is paced to the client's reading.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Final

import orjson

from spool.server.bookmarks import (
    BookmarkPoint,
    BookmarkSpec,
    Epoch,
    Now,
    TimePoint,
    lookup_points,
    parse_bookmark,
)
from spool.server.clock import Clock, time_us
from spool.server.expr import Filter, compile_filter
from spool.server.ports import Entitlements, SowRecord
from spool.server.protocol.commands import Command
from spool.server.protocol.errors import (
    BadFilter,
    BookmarkNotFound,
    InvalidBookmark,
    InvalidMessage,
    InvalidOptions,
    InvalidTopic,
    NotEntitled,
    ProtocolFailure,
    SubIdInUse,
)
from spool.server.protocol.options import SubscribeOptions
from spool.server.protocol.topic import compile_topic, is_regex_topic
from spool.server.regex import Regex
from spool.server.session import Session
from spool.server.sow.conflate import SowConflation
from spool.server.sow.history import state_at
from spool.server.sow.memory import MemoryStore
from spool.server.sow.query import (
    MAX_BATCH,
    OrderField,
    QueryRun,
    Source,
    parse_key_list,
    parse_orderby,
)
from spool.server.sow.registry import SowTopics
from spool.server.sow.streaming import StreamSpec, stream_query
from spool.server.sow.subscribers import SowDelivery, SowSubscriber
from spool.server.stats.source import EventSink
from spool.server.subscription import SessionSubscription
from spool.server.subscriptions import SubscriptionService
from spool.server.txlog import TransactionLog
from spool.server.wire import topic_json

__all__ = ["SowQueries"]

#: options a query (``sow``) takes
_QUERY_OPTIONS: Final = ("no_sowkey", "timestamp", "top_n", "select")
#: options that only a bookmark replay has (refused on a SOW subscription without ``bm``)
_REPLAY_ONLY: Final = (
    ("rate", "a replay pace"),
    ("pause", "a paused replay"),
    ("resume", "resuming a replay"),
    ("fully_durable", "a replay's durability"),
    ("bookmark_not_found", "what an unknown bookmark means"),
)


def _given(options: SubscribeOptions, name: str) -> bool:
    value = getattr(options, name)
    return value not in (None, False, (), "now")


class SowQueries:
    """``sow`` and ``sow_and_subscribe``. Owned by the event loop.

    Args:
        topics: rules and stores.
        delivery: the SOW subscriptions.
        subscriptions: bookmark subscriptions (the live part of a historical
            ``sow_and_subscribe``).
        txlog: the transaction log (historical queries), or None.
        entitlements: read entitlements.
        events: unexpected failures of a query.
        clock: filters' time functions, conflation, "the future" of a historical query.
    """

    def __init__(
        self,
        topics: SowTopics,
        delivery: SowDelivery,
        subscriptions: SubscriptionService,
        txlog: TransactionLog | None,
        entitlements: Entitlements,
        events: EventSink,
        clock: Clock,
    ) -> None:
        self._topics = topics
        self._delivery = delivery
        self._subscriptions = subscriptions
        self._txlog = txlog
        self._auth = entitlements
        self._events = events
        self._clock = clock
        #: each connection's query streams, in order (a result never interleaves another)
        self._last: dict[Session, asyncio.Task[None]] = {}
        self._tasks: dict[Session, set[asyncio.Task[None]]] = {}
        #: the snapshot stream of a sow_and_subscribe, by subscription
        self._streams: dict[SessionSubscription, asyncio.Task[None]] = {}

    # -- shared checks ------------------------------------------------------------------

    def filter_of(self, cmd: Command) -> Filter | None:
        if not cmd.filter:
            return None
        try:
            return compile_filter(cmd.filter, clock=self._clock)
        except BadFilter:
            raise
        except Exception as exc:  # the compiler must never crash a session
            raise BadFilter(f"cannot compile filter: {exc}") from exc

    def targets(self, session: Session, topic: str) -> tuple[Regex | None, Callable[[str], bool]]:
        """The regex of a regex topic (None for a name) and the test of the topics a
        query of ``topic`` reads: SOW topics the session may read.

        Raises:
            InvalidTopic: a topic by name that is not a SOW topic.
            NotEntitled: a topic by name the user may not read.
        """
        auth = self._auth
        user = session.user
        if is_regex_topic(topic):
            pattern = compile_topic(topic)
            topics = self._topics

            def wanted(t: str) -> bool:
                return (
                    pattern.test(t)
                    and topics.rule(t) is not None
                    and (not auth.enabled or auth.can_read(user, t))
                )

            return pattern, wanted
        if self._topics.rule(topic) is None:
            raise InvalidTopic(f"{topic!r} is not a SOW topic")
        if auth.enabled and not auth.can_read(user, topic):
            raise NotEntitled(f"user {session.user_name!r} may not read {topic!r}")
        return None, lambda t: t == topic

    def _sources(
        self,
        topic: str,
        pattern: Regex | None,
        wanted: Callable[[str], bool],
        keys: list[str] | None = None,
    ) -> list[Source]:
        """The snapshot: the current records of the targeted topics (one step)."""
        if pattern is None:
            store = self._topics.store(topic)
            stores = [store] if store is not None else []
        else:
            stores = [s for s in self._topics.matching(pattern) if wanted(s.topic)]
        return [_source(s, keys) for s in stores]

    @staticmethod
    def _shape(
        cmd: Command, options: SubscribeOptions
    ) -> tuple[tuple[OrderField, ...], int | None, int | None]:
        """``orderby``, ``top_n`` (header or option) and ``bs`` of a query.

        Raises:
            InvalidMessage: a malformed value, or two different ``top_n``.
        """
        if cmd.field("max_msgs") is not None:
            raise InvalidMessage("'max_msgs' is for queue subscriptions, not SOW queries")
        text = cmd.field("orderby")
        if text is not None and not isinstance(text, str):
            raise InvalidMessage("'orderby' must be a string")
        order = parse_orderby(text) if text else ()
        top_n = cmd.field("top_n")
        if top_n is not None and top_n <= 0:
            raise InvalidMessage("'top_n' must be a positive integer")
        if options.top_n is not None:
            if top_n is not None and top_n != options.top_n:
                raise InvalidMessage(
                    f"'top_n' is {top_n} in the header and {options.top_n} in the options"
                )
            top_n = options.top_n
        bs = cmd.field("bs")
        if bs is not None and not 1 <= bs <= MAX_BATCH:
            raise InvalidMessage(f"'bs' must be between 1 and {MAX_BATCH} records per batch")
        return order, top_n, bs

    # -- sow ----------------------------------------------------------------------------

    def sow(self, session: Session, cmd: Command) -> None:
        """``sow``: a query now, or a historical one (``bm``)."""
        topic = cmd.topic
        assert topic is not None
        options = cmd.opts.subscribe()
        for name in (
            "live",
            "fully_durable",
            "rate",
            "pause",
            "resume",
            "replace",
            "oof",
            "conflation",
            "max_backlog",
            "bookmark_not_found",
        ):
            if _given(options, name):
                raise InvalidOptions(
                    f"'{name}' is not an option of a sow query "
                    f"(it takes {', '.join(_QUERY_OPTIONS)})"
                )
        pattern, wanted = self.targets(session, topic)
        flt = self.filter_of(cmd)
        self._subscriptions.quotas.admit_query(session, self.pending)
        order, top_n, bs = self._shape(cmd, options)
        k = cmd.field("k")
        keys = parse_key_list(k) if k else None
        if keys is not None and pattern is not None:
            raise InvalidMessage("'k' names records of one topic, not of a regular expression")
        qid = cmd.query_id or cmd.cid or ""
        spec = StreamSpec(
            orjson.dumps(qid),
            None,
            bs,
            not options.no_sowkey,
            options.timestamp,
            cmd.cid,
            cmd.acks,
            options.select,
        )
        bookmark = parse_bookmark(cmd.bookmark) if cmd.bookmark else None
        if bookmark is None or isinstance(bookmark, Now):
            run = QueryRun(self._sources(topic, pattern, wanted, keys), flt, order, top_n)
            if "processed" in cmd.acks:
                session.ack("processed", cmd.cid, qid=qid or None)
            self._stream(session, cmd, lambda: self._send(session, run, spec))
            return
        self._check_history(topic, pattern, bookmark)

        async def historical() -> None:
            sources = await self._history(topic, pattern, wanted, bookmark, keys)
            if "processed" in cmd.acks:
                session.ack("processed", cmd.cid, qid=qid or None)
            await self._send(session, QueryRun(sources, flt, order, top_n), spec)

        self._stream(session, cmd, historical)

    async def _send(self, session: Session, run: QueryRun, spec: StreamSpec) -> None:
        await stream_query(session, run, spec)

    # -- sow_and_subscribe ---------------------------------------------------------------

    def sow_and_subscribe(self, session: Session, cmd: Command) -> Awaitable[None] | None:
        """``sow_and_subscribe`` and ``sow_and_delta_subscribe``: the snapshot, then every
        later change; with ``bm`` the snapshot as of that point, then the log after it."""
        topic = cmd.topic
        assert topic is not None and session.name is not None
        delta = cmd.name == "sow_and_delta_subscribe"
        options = cmd.opts.subscribe()
        sub_id = cmd.sub_id or cmd.cid
        if not sub_id or "," in sub_id:
            raise InvalidMessage(f"{cmd.name} needs one sub_id (or a cid to use as one)")
        if options.pause or options.resume:
            raise InvalidOptions(f"'pause' and 'resume' are not options of {cmd.name}")
        existing = session.subs.get(sub_id)
        if existing is not None and not options.replace:
            raise SubIdInUse(f"sub_id {sub_id!r} is already in use on this connection")
        pattern, wanted = self.targets(session, topic)
        flt = self.filter_of(cmd)
        quotas = self._subscriptions.quotas
        quotas.admit_subscription(session, existing)
        quotas.admit_query(session, self.pending)
        order, top_n, bs = self._shape(cmd, options)
        if cmd.field("k") is not None:
            raise InvalidMessage(f"'k' selects records of a sow query, not of {cmd.name}")
        qid = cmd.query_id or sub_id
        spec = StreamSpec(
            orjson.dumps(qid),
            orjson.dumps(sub_id),
            bs,
            not options.no_sowkey,
            options.timestamp,
            cmd.cid,
            cmd.acks,
            options.select,
        )
        if cmd.bookmark:
            return self._historical_subscribe(
                session, cmd, options, delta, pattern, wanted, flt, order, top_n, spec
            )
        check_sow_options(options, snapshot=True)
        if existing is not None:
            self.replace(session, sub_id)
        sub = new_subscription(session, cmd, sub_id, topic, pattern, flt, options)
        ss = self.subscriber(session, sub, options, delta, pending=True)
        # one step: the snapshot, and every later change held back for after it
        self._delivery.add(ss)
        session.subs.add(sub)
        run = QueryRun(self._sources(topic, pattern, wanted), flt, order, top_n)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid, sub_id=sub_id)

        async def snapshot_then_live() -> None:
            on_sent = _holder(ss)
            if await stream_query(session, run, spec, on_sent, sub.progress):
                await self.go_live(ss)

        self._stream(session, cmd, snapshot_then_live, sub)
        return None

    def subscriber(
        self,
        session: Session,
        sub: SessionSubscription,
        options: SubscribeOptions,
        delta: bool,
        *,
        pending: bool,
    ) -> SowSubscriber:
        """A SOW subscriber for ``sub`` (held back when ``pending``)."""
        delivery = self._delivery
        ss = SowSubscriber(
            sub=sub,
            session=session,
            delta=delta,
            oof=options.oof,
            send_key=not options.no_sowkey,
            held={} if options.oof or delta else None,
            pending=[] if pending else None,
        )
        if options.conflation is not None:
            ss.conflation = SowConflation(
                options.conflation,
                self._clock,
                lambda topic, literal, changes, reason: delivery.send(
                    ss, topic, literal, changes, reason
                ),
            )
        return ss

    async def go_live(self, ss: SowSubscriber) -> None:
        """Send what was held back during the snapshot, in order, then deliver live."""
        delivery = self._delivery
        out = ss.sub.outbound
        while ss.pending:
            items = ss.pending
            ss.pending = []
            ss.pending_bytes = 0
            for topic, literal, changes, reason in items:
                if ss.conflation is not None:
                    ss.conflation.add(topic, literal, changes, reason)
                else:
                    delivery.send(ss, topic, literal, changes, reason)
                if not out.has_room():
                    await out.wait_room()
                if out.closed or ss.pending is None:
                    return
        ss.pending = None

    def _historical_subscribe(
        self,
        session: Session,
        cmd: Command,
        options: SubscribeOptions,
        delta: bool,
        pattern: Regex | None,
        wanted: Callable[[str], bool],
        flt: Filter | None,
        order: tuple[OrderField, ...],
        top_n: int | None,
        spec: StreamSpec,
    ) -> Awaitable[None]:
        """``sow_and_subscribe`` with ``bm``: a bookmark subscription made paused (its
        lookups resolved off the loop first), the snapshot as of the seq before its start,
        then the subscription resumed."""
        txlog = self._txlog
        topic = cmd.topic
        assert topic is not None and session.name is not None
        if delta:
            raise InvalidOptions(
                "sow_and_delta_subscribe cannot take a bookmark: deltas come from the stored "
                "records, a bookmark replay delivers the log"
            )
        if txlog is None:
            raise InvalidTopic("no transaction log is configured on this instance")
        if pattern is None and not self._topics.recorded(topic):
            raise InvalidTopic(f"topic {topic!r} is not recorded in the transaction log")
        bookmark = parse_bookmark(cmd.bookmark or "")
        # the live part: the subscription service's replay, top_n being the query's
        replay_options = dataclasses.replace(options, top_n=None)
        replay_cmd = dataclasses.replace(cmd, name="subscribe", options=replay_options.to_text())
        sub_id = cmd.sub_id or cmd.cid or ""

        async def open_then_stream() -> None:
            bookmarks, times = lookup_points(bookmark)
            located = await txlog.locate_all(bookmarks, times) if bookmarks or times else None
            if session.closed:
                return
            start = self._subscriptions.subscribe_paused(session, replay_cmd, located, cmd.name)

            async def snapshot_then_resume() -> None:
                upto = start - 1
                sources: list[Source] = []
                if upto >= txlog.first_seq:
                    await txlog.wait_durable(upto)
                    asof = await self._time_of(txlog, upto)
                    stores = await state_at(
                        txlog, upto, asof, self._topics.rule, self._topics.spec, wanted
                    )
                    sources = [_source(stores[t], None) for t in sorted(stores)]
                sub = session.subs.get(sub_id)
                sent = await stream_query(
                    session,
                    QueryRun(sources, flt, order, top_n),
                    spec,
                    progress=sub.progress if sub is not None else None,
                )
                if sent and session.subs.get(sub_id) is not None:
                    self._subscriptions.resume(session, [sub_id])

            self._stream(session, cmd, snapshot_then_resume)

        return open_then_stream()

    # -- historical state -----------------------------------------------------------------

    def _check_history(self, topic: str, pattern: Regex | None, bookmark: BookmarkSpec) -> None:
        if not isinstance(bookmark, Epoch | BookmarkPoint | TimePoint):
            raise InvalidBookmark(
                "a historical sow takes one bookmark or one moment (not a list or a range)"
            )
        if self._txlog is None:
            raise InvalidTopic("no transaction log is configured on this instance")
        if pattern is None and not self._topics.recorded(topic):
            raise InvalidTopic(f"topic {topic!r} is not recorded in the transaction log")
        if isinstance(bookmark, TimePoint) and bookmark.timestamp_us > time_us(self._clock):
            raise InvalidBookmark("a historical query cannot look into the future")

    async def _history(
        self,
        topic: str,
        pattern: Regex | None,
        wanted: Callable[[str], bool],
        bookmark: BookmarkSpec,
        keys: list[str] | None,
    ) -> list[Source]:
        """The records as of ``bookmark``, computed from the log."""
        txlog = self._txlog
        assert txlog is not None
        if isinstance(bookmark, Epoch):
            return []
        if isinstance(bookmark, BookmarkPoint):
            # the state as it was delivered: a delayed message counts from its due record
            seq = await txlog.locate_bookmark(bookmark.pub_hash, bookmark.pub_seq, delivered=True)
            if seq is None:
                raise BookmarkNotFound(f"bookmark {bookmark} is not in this instance's log")
            await txlog.wait_durable(seq)
            asof = await self._time_of(txlog, seq)
        else:
            assert isinstance(bookmark, TimePoint)
            asof = bookmark.timestamp_us
            seq = await txlog.locate_time(asof) - 1
            await txlog.wait_durable(seq)

        def wanted_recorded(t: str) -> bool:
            return wanted(t) and self._topics.recorded(t)

        stores = await state_at(
            txlog, seq, asof, self._topics.rule, self._topics.spec, wanted_recorded
        )
        return [_source(stores[t], keys) for t in sorted(stores)]

    @staticmethod
    async def _time_of(txlog: TransactionLog, seq: int) -> int:
        """The timestamp of record ``seq`` (0 before the first)."""
        if seq < txlog.first_seq:
            return 0
        batch = await txlog.read_view(seq, max_count=1, upto_seq=seq)
        return batch.timestamp_us(0) if len(batch) else 0

    # -- streams ------------------------------------------------------------------------

    def _stream(
        self,
        session: Session,
        cmd: Command,
        work: Callable[[], Awaitable[None]],
        sub: SessionSubscription | None = None,
    ) -> None:
        """Run ``work`` after this connection's earlier streams; failures become acks."""
        prev = self._last.get(session)

        async def run() -> None:
            if prev is not None and not prev.done():
                await asyncio.wait([prev])
            if session.closed:
                return
            try:
                await work()
            except ProtocolFailure as exc:
                session.fail(cmd.cid, exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a defect must not wedge the connection
                self._events.emit(
                    "error",
                    "sow",
                    "query_failed",
                    client=session.name,
                    command=cmd.name,
                    error=repr(exc),
                )
                session.fail(cmd.cid, InvalidMessage(f"{cmd.name} failed: {exc}"))

        task = asyncio.get_running_loop().create_task(run())
        self._last[session] = task
        tasks = self._tasks.setdefault(session, set())
        tasks.add(task)
        if sub is not None:
            self._streams[sub] = task

        def done(t: asyncio.Task[None]) -> None:
            tasks.discard(t)
            if self._last.get(session) is t:
                del self._last[session]
            if not tasks:
                self._tasks.pop(session, None)
            if sub is not None and self._streams.get(sub) is t:
                del self._streams[sub]

        task.add_done_callback(done)

    def pending(self, session: Session) -> int:
        """Queries of ``session`` queued or streaming (the pending-query quota's count)."""
        return len(self._tasks.get(session, ()))

    def replace(self, session: Session, sub_id: str) -> None:
        """End subscription ``sub_id`` (whoever's) before a ``replace`` makes a new one."""
        sub = session.subs.get(sub_id)
        if sub is None:
            return
        if self.drop(sub):
            session.subs.remove(sub_id, "replaced")
        else:
            self._subscriptions.drop(session, sub_id)

    def drop(self, sub: SessionSubscription) -> bool:
        """End a SOW subscription (its snapshot stream too); False when ``sub`` is not one."""
        stream = self._streams.pop(sub, None)
        if stream is not None:
            stream.cancel()
        return self._delivery.remove(sub) is not None

    def drop_all(self, session: Session) -> None:
        """The connection closed: its streams stop, its SOW subscriptions end."""
        for task in self._tasks.pop(session, set()):
            task.cancel()
        self._last.pop(session, None)
        for sub in list(session.subs.values()):
            self.drop(sub)

    async def close(self) -> None:
        """Stop every stream (shutdown)."""
        tasks = [t for ts in self._tasks.values() for t in ts]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def check_sow_options(options: SubscribeOptions, *, snapshot: bool) -> None:
    """Options a SOW subscription without ``bm`` cannot honour (never accepted and
    ignored).

    Raises:
        InvalidOptions: naming the option.
    """
    for name, what in _REPLAY_ONLY:
        if _given(options, name):
            raise InvalidOptions(f"'{name}' ({what}) needs a bookmark subscription")
    if options.conflation_key:
        raise InvalidOptions(
            "a SOW subscription conflates by SOW key: 'conflation_key' is "
            "for bookmark subscriptions"
        )
    if options.max_backlog is not None:
        raise InvalidOptions("max_backlog is for queue subscriptions")
    if options.top_n is not None and not snapshot:
        raise InvalidOptions("'top_n' shapes a query: use sow_and_subscribe")


def new_subscription(
    session: Session,
    cmd: Command,
    sub_id: str,
    topic: str,
    pattern: Regex | None,
    flt: Filter | None,
    options: SubscribeOptions,
) -> SessionSubscription:
    """The :class:`SessionSubscription` value of a SOW subscription."""
    assert session.name is not None
    return SessionSubscription(
        outbound=session,
        client=session.name,
        user=session.user,
        sub_id=sub_id,
        topic=topic,
        pattern=pattern,
        filter=flt,
        filter_text=cmd.filter,
        options=options,
        cid=cmd.cid,
        acks=cmd.acks,
        sid_bytes=orjson.dumps(sub_id),
        kind="sow",
        command=cmd.name,
    )


def _source(store: MemoryStore, keys: list[str] | None) -> Source:
    if keys is None:
        records = store.records()
    else:
        records = [r for k in keys if (r := store.get(k)) is not None]
    return Source(store.topic, topic_json(store.topic), records)


def _holder(ss: SowSubscriber) -> Callable[[Source, SowRecord], None] | None:
    """What records a snapshot sends mean to a subscriber that tracks what it holds."""
    if ss.held is None:
        return None

    def sent(src: Source, rec: SowRecord) -> None:
        ss.holds(src.topic).add(rec.key)  # type: ignore[union-attr]

    return sent
