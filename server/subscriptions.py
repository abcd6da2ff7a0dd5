"""Subscriptions: subscribe, unsubscribe, replace, pause and resume.

A live (non-bookmark) subscription goes into the :class:`~spool.server.router.Router` and gets
messages from the fan-out stage as they are published; after a burst its connection could
not take, it catches up from the log for a while (server/spills.py) and ending it stops
that read too. A bookmark subscription gets a
replay cursor over the transaction log (server/replay) for its whole life: replay, then
live, with no gap or duplicate at the cut-over. Its cursor runs in its own task and
reports failures back here (``on_error``), which become failure acks.

Paused bookmark subscriptions resumed together share one cursor so that their messages
reach the client in log order (:func:`spool.server.replay.resume_together`); that cursor waits
for the *strictest* durability its members asked for, so resuming a ``fully_durable``
subscription with a persisted one never delivers the former's records early. ``live``
subscriptions deliver before the group commit and therefore cannot be paused or resumed
(docs/protocol.md refuses ``pause``/``resume`` with ``live``; the admin API refuses the same).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from spool.server.bookmarks import BookmarkSpec, lookup_points, parse_bookmark, spec_kind
from spool.server.clock import Clock
from spool.server.config import Config
from spool.server.expr import Filter, compile_filter
from spool.server.ports import DurabilityHorizon, Entitlements, Outbound
from spool.server.protocol.commands import Command
from spool.server.protocol.errors import (
    BadFilter,
    InvalidMessage,
    InvalidOptions,
    InvalidTopic,
    NotEntitled,
    ProtocolFailure,
    SubIdInUse,
    SubIdNotFound,
)
from spool.server.protocol.options import SubscribeOptions
from spool.server.protocol.topic import compile_topic, is_regex_topic
from spool.server.quotas import Quotas
from spool.server.replay import (
    FunctionLimit,
    ReadLimit,
    ReplayCursor,
    ReplayMember,
    ReplaySource,
    build_member,
    resume_together,
)
from spool.server.replay.sink import BookmarkSink
from spool.server.replay.sources import AppendedSource
from spool.server.router import Router
from spool.server.session import Session
from spool.server.spills import Spills
from spool.server.stats.source import EventSink
from spool.server.subscription import SessionSubscription
from spool.server.txlog import TransactionLog
from spool.server.txlog.log import Located

#: records a replay cursor reads per batch: large reads, since each file read is one hop
#: to a thread and back
_BATCH_COUNT = 4096
_BATCH_BYTES = 2 << 20

#: subscribe options this service cannot honour, with the reason (a subscription to a SOW
#: topic by name, without a bookmark, is server/sow's and never gets here)
_UNAVAILABLE = (
    ("oof", "out-of-focus notices need a subscription to a SOW topic by name, without a bookmark "
            "(they come from the stored records, a replay delivers the log)"),
    ("no_sowkey", "SOW keys are sent on subscriptions to a SOW topic by name, without a bookmark"),
    ("max_backlog", "max_backlog is for queue subscriptions (a subscription to a queue by name)"),
)  # fmt: skip


@dataclass(slots=True, eq=False)
class _Replay:
    """The runtime of one bookmark subscription: its cursor (maybe shared) and sink."""

    cursor: ReplayCursor
    sink: BookmarkSink


class SubscriptionService:
    """Every subscription of an instance. Owned by the event loop.

    Args:
        config: tuning (position-ack interval) and the transaction log's topic rules.
        router: the index of live subscriptions.
        txlog: the transaction log, or None (no bookmark subscriptions).
        horizon: the durability horizon ``fully_durable`` subscriptions wait for.
        entitlements: read entitlements.
        events: the event log.
        clock: replay pacing, conflation, position acks, filters' time functions.
        spills: the catch-up reads of live subscriptions (None without a log).
    """

    def __init__(
        self,
        config: Config,
        router: Router,
        txlog: TransactionLog | None,
        horizon: DurabilityHorizon | None,
        entitlements: Entitlements,
        events: EventSink,
        clock: Clock,
        spills: Spills | None = None,
        *,
        quotas: Quotas | None = None,
    ) -> None:
        self._config = config
        #: the subscription, replay and query quotas (SOW and queue subscriptions too)
        self.quotas = quotas if quotas is not None else Quotas(config.tuning, lambda user: ())
        self._router = router
        self._spills = spills
        self._txlog = txlog
        self._horizon = horizon
        self._auth = entitlements
        self._events = events
        self._clock = clock
        self._replays: dict[SessionSubscription, _Replay] = {}
        #: how the other services end a subscription of theirs that a ``replace`` takes
        #: over (each leaves any other alone); the command table sets them
        self.ends: tuple[Callable[[SessionSubscription], None], ...] = ()

    def records(self, topic: str) -> bool:
        """Whether the transaction log records ``topic``."""
        tl = self._config.transaction_log
        return tl is not None and tl.records(topic)

    # -- subscribe ------------------------------------------------------------------------

    def subscribe(self, session: Session, cmd: Command) -> Awaitable[None] | None:
        """``subscribe`` / ``delta_subscribe``: now, or after the log lookups its bookmark
        needs were resolved in a thread (the returned awaitable).

        A bookmark or time that is no longer in memory (an older journal, a compressed
        one) costs a file read or a chunk decompression to locate; planning the replay
        stays synchronous and never reads a file on the loop.
        """
        txlog = self._txlog
        if txlog is not None and cmd.bookmark:
            try:
                bookmarks, times = lookup_points(parse_bookmark(cmd.bookmark))
            except ProtocolFailure:
                bookmarks, times = [], []  # the subscribe reports it
            if (bookmarks or times) and txlog.lookups_need_io(bookmarks, times):
                return self._subscribe_located(session, cmd, txlog, bookmarks, times)
        self._subscribe(session, cmd, None)
        return None

    async def _subscribe_located(
        self,
        session: Session,
        cmd: Command,
        txlog: TransactionLog,
        bookmarks: list[tuple[int, int]],
        times: list[int],
    ) -> None:
        located: Located | None = None
        try:
            located = await txlog.locate_all(bookmarks, times)
        except Exception as exc:  # planning repeats the lookup and reports what is wrong
            self._events.emit(
                "warning", "session", "lookup_failed", client=session.name, error=repr(exc)
            )
        if not session.closed:
            self._subscribe(session, cmd, located)

    def subscribe_paused(
        self, session: Session, cmd: Command, located: Located | None, command: str
    ) -> int:
        """A bookmark subscription made paused, for the live part of a ``sow_and_subscribe``
        with a ``bm`` (server/sow): its snapshot is computed up to the seq before the one
        returned (where the replay starts), sent, and then the subscription is resumed.

        ``located`` holds the lookups its bookmark needs (``TransactionLog.locate_all``);
        ``command`` is the client's (``cmd`` is the ``subscribe`` standing in for it).
        """
        start = self._subscribe(session, cmd, located, paused=True, command=command)
        assert start is not None  # a bookmark subscription has a start
        return start

    def drop(self, session: Session, sub_id: str) -> None:
        """End subscription ``sub_id`` of ``session``, whatever its kind (:attr:`ends`),
        for a ``replace``. Every subscribing handler calls this once the new subscription
        passed all its checks, so a refused replace leaves the old one as it was."""
        sub = session.subs.remove(sub_id, "replaced")
        if sub is None:
            return
        for end in self.ends:
            end(sub)
        self._drop(sub)

    def _subscribe(
        self,
        session: Session,
        cmd: Command,
        located: Located | None,
        *,
        paused: bool = False,
        command: str | None = None,
    ) -> int | None:
        """Make the subscription; returns where its replay starts (None: a live one).
        ``command``: the client's command when ``cmd`` stands in for it."""
        topic = cmd.topic
        assert topic is not None and session.name is not None
        sub_id = cmd.sub_id or cmd.cid
        if not sub_id:
            raise InvalidMessage("subscribe needs a sub_id (or a cid to use as one)")
        options = cmd.opts.subscribe()
        if self.pauses_or_resumes(session, cmd):
            self._pause_resume_command(session, cmd, sub_id, options)
            return None
        if "," in sub_id:
            raise InvalidMessage("a sub_id cannot contain ',' (lists only with pause/resume)")
        _check_available(options)
        existing = session.subs.get(sub_id)
        if existing is not None and not options.replace:
            raise SubIdInUse(f"sub_id {sub_id!r} is already in use on this connection")
        self.quotas.admit_subscription(session, existing)
        if cmd.bookmark:
            self.quotas.admit_replay(session, existing)
        pattern = compile_topic(topic) if is_regex_topic(topic) else None
        if self._auth.enabled and pattern is None and not self._auth.can_read(session.user, topic):
            raise NotEntitled(f"user {session.user_name!r} may not read {topic!r}")
        flt: Filter | None = None
        if cmd.filter:
            try:
                flt = compile_filter(cmd.filter, clock=self._clock)
            except BadFilter:
                raise
            except Exception as exc:  # the compiler must never crash a session
                raise BadFilter(f"cannot compile filter: {exc}") from exc
        spec: BookmarkSpec | None = None
        if cmd.bookmark:
            spec = parse_bookmark(cmd.bookmark)
            if self._txlog is None:
                raise InvalidTopic("no transaction log is configured on this instance")
            if pattern is None and not self.records(topic):
                raise InvalidTopic(f"topic {topic!r} is not recorded in the transaction log")
        else:
            _check_live_options(options)
        sub = SessionSubscription(
            outbound=session,
            client=session.name,
            user=session.user,
            sub_id=sub_id,
            topic=topic,
            pattern=pattern,
            filter=flt,
            filter_text=cmd.filter,
            options=options,
            bookmark=cmd.bookmark if spec is not None else None,
            bookmark_kind=spec_kind(spec) if spec is not None else "none",
            cid=cmd.cid,
            acks=cmd.acks,
            sid_bytes=orjson.dumps(sub_id),
            kind="bookmark" if spec is not None else "live",
            command=command or cmd.name,
        )
        # a bookmark that is not found (``bookmark_not_found=fail``) is refused here,
        # before a replace ends the subscription this one takes over
        planned = None if spec is None else self._plan_replay(sub, spec, options, located)
        if existing is not None:
            self.drop(session, sub_id)
        start: int | None = None
        if planned is None:
            self._router.add(sub)
        else:
            start = self._start_replay(sub, planned, options, paused=paused)
        session.subs.add(sub)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid, sub_id=sub_id)
        return start

    def _plan_replay(
        self,
        sub: SessionSubscription,
        spec: BookmarkSpec,
        options: SubscribeOptions,
        located: Located | None,
    ) -> tuple[BookmarkSink, ReplayMember]:
        """The replay of a bookmark subscription, planned (nothing started or held yet).

        Raises:
            BookmarkNotFound: under ``bookmark_not_found=fail``.
        """
        txlog = self._txlog
        assert txlog is not None
        sink = BookmarkSink(sub, self._auth)
        # with conflation the filter must run before records are conflated
        accept = sink.accepts if options.conflation else None
        planning: ReplaySource = txlog if located is None else txlog.with_lookups(located)
        return sink, build_member(sink, spec, options, planning, accept=accept)

    def _start_replay(
        self,
        sub: SessionSubscription,
        planned: tuple[BookmarkSink, ReplayMember],
        options: SubscribeOptions,
        *,
        paused: bool = False,
    ) -> int:
        """Start the replay cursor of a bookmark subscription (:meth:`_plan_replay`);
        returns its first seq."""
        txlog = self._txlog
        assert txlog is not None
        sink, member = planned
        # hold the journals this replay still needs (journal removal answers 409)
        sink.pin = txlog.pin(f"replay:{sub.client}:{sub.sub_id}", member.next_seq)
        start = member.next_seq
        cursor = self._new_cursor(options, member, sub.outbound)
        self._replays[sub] = _Replay(cursor, sink)
        pause = options.pause or paused
        sub.progress.state = "paused" if pause else "replaying"
        cursor.start(paused=pause)
        return start

    def _new_cursor(
        self, options: SubscribeOptions, member: ReplayMember, outbound: Outbound
    ) -> ReplayCursor:
        """A cursor over the log as ``options`` see it (appended, durable or fully durable),
        its reads pulled by ``outbound``'s buffer (server/replay/cursor.py)."""
        txlog = self._txlog
        assert txlog is not None
        source: ReplaySource = txlog
        limit: ReadLimit | None = None  # the cursor's default: the local fsync
        match options.durability:
            case "live":
                # deliver records as soon as they are appended, before the group commit
                source = AppendedSource(txlog)
                limit = FunctionLimit(lambda: txlog.last_seq, txlog.wait_appended)
            case "fully_durable":
                limit = self._horizon
            case "persisted":
                pass
        return ReplayCursor(
            source,
            (member,),
            clock=self._clock,
            limit=limit,
            position_interval=self._config.tuning.persisted_ack_interval,
            batch_count=_BATCH_COUNT,
            batch_bytes=_BATCH_BYTES,
            on_error=self._replay_failed,
            paced=outbound,
        )

    def _replay_failed(self, cursor: ReplayCursor, exc: Exception) -> None:
        """A cursor's loop failed: tell each of its subscribers (they stay subscribed)."""
        for sub, replay in list(self._replays.items()):
            if replay.cursor is not cursor:
                continue
            if isinstance(exc, ProtocolFailure):
                sub.outbound.fail(sub.cid, exc)
                continue
            self._events.emit(
                "error", "replay", "replay_failed",
                client=sub.client, sub_id=sub.sub_id, error=repr(exc),
            )  # fmt: skip
            sub.outbound.fail(sub.cid, InvalidMessage(f"replay failed: {exc}"))

    # -- unsubscribe --------------------------------------------------------------------

    @staticmethod
    def unsubscribe_targets(session: Session, cmd: Command) -> list[str]:
        """The sub ids an ``unsubscribe`` names (a comma list or ``all``), each existing.

        Raises:
            InvalidMessage: no ``sub_id``.
            SubIdNotFound: a named subscription does not exist on this connection.
        """
        ids = (cmd.sub_id or "").strip()
        if not ids:
            raise InvalidMessage("unsubscribe needs sub_id (a comma list or 'all')")
        if ids == "all":
            return list(session.subs)
        targets = [i.strip() for i in ids.split(",") if i.strip()]
        missing = [i for i in targets if i not in session.subs]
        if missing:
            raise SubIdNotFound(f"no subscription {missing[0]!r} on this connection")
        return targets

    def unsubscribe(self, session: Session, cmd: Command) -> None:
        """``unsubscribe`` with a sub id list or ``all``."""
        for sub_id in self.unsubscribe_targets(session, cmd):
            sub = session.subs.remove(sub_id, "unsubscribe")
            if sub is not None:  # None: named twice in the list
                self._drop(sub)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid)

    def drop_all(self, session: Session) -> None:
        """The connection closed: end every subscription it had."""
        for sub in session.subs.clear("disconnect"):
            self._drop(sub)

    def _drop(self, sub: SessionSubscription) -> None:
        replay = self._replays.pop(sub, None)
        if replay is None:
            self._router.remove(sub)
            if self._spills is not None:
                self._spills.cancel(sub)
            return
        if replay.sink.pin is not None:
            replay.sink.pin.release()
            replay.sink.pin = None
        cursor = replay.cursor
        cursor.remove(sub.sub_id)
        if not cursor.members:
            cursor.close()

    # -- pause / resume -----------------------------------------------------------------

    @staticmethod
    def pauses_or_resumes(session: Session, cmd: Command) -> bool:
        """Whether ``cmd``, a subscribe with valid options and a sub id, pauses or
        resumes subscriptions rather than making one: ``resume``, or ``pause`` naming
        only existing subscriptions of ``session`` (a comma list of sub ids)."""
        options = cmd.opts.parsed
        sub_id = cmd.sub_id or cmd.cid
        if options is None or not sub_id:
            return False
        return options.resume or (
            options.pause and all(i.strip() in session.subs for i in sub_id.split(","))
        )

    def pause_or_resume(self, session: Session, cmd: Command) -> None:
        """A subscribe that :meth:`pauses_or_resumes` (to any topic: the command table
        routes those of a SOW topic here, :meth:`subscribe` takes the others)."""
        sub_id = cmd.sub_id or cmd.cid
        assert sub_id and self.pauses_or_resumes(session, cmd)
        self._pause_resume_command(session, cmd, sub_id, cmd.opts.subscribe())

    def _pause_resume_command(
        self, session: Session, cmd: Command, sub_ids: str, options: SubscribeOptions
    ) -> None:
        """``subscribe`` with ``pause``/``resume`` naming existing subscriptions."""
        ids = [i.strip() for i in sub_ids.split(",") if i.strip()]
        if options.resume:
            self.resume(session, ids)
        else:
            self.pause(session, ids)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid, sub_id=sub_ids)

    def _replay_of(self, session: Session, sub_id: str) -> tuple[SessionSubscription, _Replay]:
        sub = session.subs.get(sub_id)
        replay = self._replays.get(sub) if sub is not None else None
        if sub is None or replay is None:
            raise SubIdNotFound(f"no bookmark subscription {sub_id!r} for {session.name!r}")
        if sub.options.live:
            raise InvalidOptions(
                f"subscription {sub_id!r} was made with 'live': it cannot be paused or resumed"
            )
        return sub, replay

    def pause(self, session: Session, sub_ids: list[str]) -> None:
        """Pause bookmark subscriptions (positions are kept; resume continues there)."""
        found = [self._replay_of(session, i) for i in sub_ids]
        for sub, replay in found:
            cursor = replay.cursor
            if len(cursor.members) > 1:
                # it shares a cursor since a resume-together: give it its own, paused
                member = cursor.take_member(sub.sub_id)
                own = self._new_cursor(sub.options, member, sub.outbound)
                replay.cursor = own
                own.start(paused=True)
            else:
                cursor.pause()
            sub.progress.state = "paused"
            self._events.emit(
                "info", "subscription", "paused", client=session.name, sub_id=sub.sub_id
            )

    def resume(self, session: Session, sub_ids: list[str]) -> None:
        """Resume bookmark subscriptions; several resumed at once share one cursor, which
        waits for the strictest durability among them."""
        found = [self._replay_of(session, i) for i in sub_ids]
        cursors: list[ReplayCursor] = []
        for _, replay in found:
            if replay.cursor not in cursors:
                cursors.append(replay.cursor)
        if len(cursors) > 1:
            merged = resume_together(cursors)
            for replay in self._replays.values():
                if replay.cursor in cursors:
                    replay.cursor = merged
            merged.start()
            cursor = merged
        else:
            cursor = cursors[0]
        for sub, _ in found:
            sub.progress.state = "replaying"
            # announce the next catch-up again (the state turns "live" there)
            cursor.member(sub.sub_id).caught_up = False
        cursor.resume()
        self._events.emit("info", "subscription", "resumed", client=session.name, sub_ids=sub_ids)

    # -- views --------------------------------------------------------------------------


def _check_available(options: SubscribeOptions) -> None:
    """Refuse options whose subsystem does not exist yet (never accept and ignore)."""
    for name, why in _UNAVAILABLE:
        if getattr(options, name):
            raise InvalidOptions(f"'{name}': {why}")


def _check_live_options(options: SubscribeOptions) -> None:
    """Options that only a bookmark subscription (a replay cursor) can honour."""
    for name, given in (
        ("rate", options.rate is not None),
        ("pause", options.pause),
        ("resume", options.resume),
        ("top_n", options.top_n is not None),
        ("conflation", options.conflation is not None),
        ("fully_durable", options.fully_durable),
    ):
        if given:
            raise InvalidOptions(f"'{name}' needs a bookmark subscription")
