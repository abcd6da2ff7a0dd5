"""The SOW of an instance: its commands, its start and stop, its admin surface.

:class:`SowService` composes the parts (docs/sow.md has the map) and is what the broker
sees of the SOW:

- its publish stage (:attr:`SowService.stage`, server/sow/stage.py);
- its command handlers: ``sow``, ``sow_and_subscribe``, ``sow_and_delta_subscribe``,
  ``sow_delete``, ``delta_publish``, and the SOW subscriptions: the command table
  (server/commandtable.py) routes a ``subscribe`` to a SOW topic by name (or a
  ``delta_subscribe`` to one or to a regex) without a bookmark to :meth:`subscribe`
  (server/sow/subscribers.py); anything else goes to the subscription service, which
  refuses the SOW-only options with the reason. :meth:`end` ends a SOW subscription
  (``unsubscribe``, or a ``replace`` by a plain or bookmark subscription once that one
  is accepted: the subscription service calls it then, through the ends the command
  table gives it);
- start-up in two steps around the log's recovery (:meth:`open`, then
  :meth:`recovered`), and :meth:`close`;
- the admin reads and the compaction action (server/operations.py exposes them).

Without any ``SOW/Topic`` in the configuration every SOW command is refused with
``invalid topic`` and subscriptions behave exactly as they would without this module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from spool.server.clock import Clock, time_us
from spool.server.config import Config
from spool.server.happenings import Happenings
from spool.server.ports import Entitlements, PublishRun
from spool.server.protocol.commands import Command
from spool.server.protocol.errors import (
    InvalidMessage,
    InvalidOptions,
    InvalidTopic,
    SubIdInUse,
)
from spool.server.protocol.topic import is_regex_topic
from spool.server.publishing import PublishPipeline, publish_due, refuse_options
from spool.server.session import Session
from spool.server.sow.admin import SowCompaction, SowKeys, SowTopicInfo, compaction_info, topic_info
from spool.server.sow.deleting import SowDeletes
from spool.server.sow.errors import SowTopicNotFound
from spool.server.sow.expirer import Expirer
from spool.server.sow.filestore import FileStore, LoadReport
from spool.server.sow.memory import MemoryStore
from spool.server.sow.querying import SowQueries, check_sow_options, new_subscription
from spool.server.sow.registry import SowTopics
from spool.server.sow.stage import SowStage
from spool.server.sow.subscribers import SowDelivery
from spool.server.stats.source import EventSink
from spool.server.subscription import SessionSubscription
from spool.server.subscriptions import SubscriptionService
from spool.server.txlog import TransactionLog
from spool.server.txlog.format.record import RecordKind
from spool.server.txlog.retention.pins import Pin
from spool.server.wire import topic_json

__all__ = ["SowService"]


class SowService:
    """The SOW: stage, commands, lifecycle, admin. Owned by the event loop.

    Args:
        config: the ``SOW`` rules, the data directory, the client buffer limit.
        txlog: the transaction log, or None.
        subscriptions: the subscription service (plain and bookmark subscriptions).
        entitlements: who may read and write which topic.
        events: the event log.
        clock: record times, expirations, conflation, compaction times.
        happenings: told of records removed and updated in topics a sink watches (the
            message-driven actions' SOW triggers; None: no one).
    """

    def __init__(
        self,
        config: Config,
        txlog: TransactionLog | None,
        subscriptions: SubscriptionService,
        entitlements: Entitlements,
        events: EventSink,
        clock: Clock,
        happenings: Happenings | None = None,
    ) -> None:
        self._config = config
        self._txlog = txlog
        self._subscriptions = subscriptions
        self._auth = entitlements
        self._events = events
        self._clock = clock
        self.topics = SowTopics(config, subscriptions.records, clock, events)
        self.delivery = SowDelivery(
            self._key_steps, entitlements, config.tuning.slow_client_buffer_limit, events
        )
        self.deletes = SowDeletes(
            self.topics, self.delivery, txlog, entitlements, events, clock, happenings
        )
        self.expirer = Expirer(self.topics, self.deletes, clock, events)
        self.stage = SowStage(self.topics, self.delivery, clock, self.expirer.deadline, happenings)
        self.queries = SowQueries(
            self.topics, self.delivery, subscriptions, txlog, entitlements, events, clock
        )
        self._pipeline: PublishPipeline | None = None
        self._pins: dict[str, Pin] = {}
        self.topics.on_new_store = self._follow

    def attach(self, pipeline: PublishPipeline) -> None:
        """The publish pipeline ``delta_publish`` goes through (it holds this stage)."""
        self._pipeline = pipeline

    def _key_steps(self, topic: str) -> tuple[tuple[str, ...], ...]:
        rule = self.topics.rule(topic)
        return self.topics.spec(rule).steps if rule is not None else ()

    # -- start and stop -----------------------------------------------------------------

    async def open(self) -> list[LoadReport]:
        """Start-up, before the log is read: load the files of persistent topics."""
        reports = await self.topics.open()
        for report in reports:
            level = "info" if report.status in ("created", "loaded") else "warning"
            self._events.emit(level, "sow", "sow_file_" + report.status, **report.to_dict())
        return reports

    def recovered(self) -> None:
        """Start-up, after the log was read into the stores: report, hold the log for the
        files that still need it, start expiring."""
        txlog = self._txlog
        counts = self.stage.applier.counts
        for topic, pin in self._pins.items():
            store = self.topics.store(topic)
            if isinstance(store, FileStore):
                pin.move(store.file_seq + 1)  # the file is loaded: hold only what it lacks
        for store in self.topics:
            recorded = self.topics.recorded(store.topic)
            fields: dict[str, object] = {
                "topic": store.topic,
                "records": len(store),
                "replayed": counts.by_topic.get(store.topic, 0),
            }
            level = "info"
            if isinstance(store, FileStore):
                fields["file_seq"] = store.file_seq
            if recorded and txlog is not None:
                first = txlog.first_seq
                start = store.file_seq + 1 if isinstance(store, FileStore) else 1
                if start < first:
                    # journals the store needed were removed: what they held is lost
                    level = "warning"
                    fields["lost_from_seq"] = start
                    fields["lost_to_seq"] = first - 1
            self._events.emit(level, "sow", "sow_recovered", **fields)
        if counts.skipped:
            self._events.emit("warning", "sow", "sow_records_without_key", skipped=counts.skipped)
        self.expirer.start()

    def _follow(self, store: MemoryStore) -> None:
        """Hold the log from where a persistent store's file ends, as long as it needs it."""
        txlog = self._txlog
        if txlog is None or not isinstance(store, FileStore) or not store.recorded:
            return
        pin = txlog.pin(f"sow:{store.topic}", store.file_seq + 1)
        self._pins[store.topic] = pin
        store.on_written = lambda seq: pin.move(seq + 1)

    async def close(self) -> None:
        """Shutdown, before the log closes: stop queries and expirations."""
        await self.queries.close()
        await self.expirer.stop()

    async def close_files(self) -> None:
        """Shutdown, after the log's last commit: write what it covers, close the files."""
        await self.topics.close()
        for pin in self._pins.values():
            pin.release()
        self._pins.clear()

    # -- subscriptions ------------------------------------------------------------------

    def subscribe(self, session: Session, cmd: Command) -> None:
        """``subscribe`` / ``delta_subscribe`` of a SOW topic by name (a
        ``delta_subscribe`` of a regex too), without a bookmark: a SOW subscription (the
        command table routes a ``pause`` / ``resume`` of existing subscriptions to the
        subscription service instead)."""
        topic = cmd.topic or ""
        delta = cmd.name == "delta_subscribe"
        options = cmd.opts.subscribe()
        sub_id = cmd.sub_id or cmd.cid
        if not sub_id:
            raise InvalidMessage("subscribe needs a sub_id (or a cid to use as one)")
        if "," in sub_id:
            raise InvalidMessage("a sub_id cannot contain ',' (lists only with pause/resume)")
        check_sow_options(options, snapshot=False)
        existing = session.subs.get(sub_id)
        if existing is not None and not options.replace:
            raise SubIdInUse(f"sub_id {sub_id!r} is already in use on this connection")
        self._subscriptions.quotas.admit_subscription(session, existing)
        pattern, _ = self.queries.targets(session, topic)
        flt = self.queries.filter_of(cmd)
        if existing is not None:
            self.queries.replace(session, sub_id)
        sub = new_subscription(session, cmd, sub_id, topic, pattern, flt, options)
        self.delivery.add(self.queries.subscriber(session, sub, options, delta, pending=False))
        session.subs.add(sub)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid, sub_id=sub_id)
        return None

    def end(self, sub: SessionSubscription) -> None:
        """A SOW subscription ends (``unsubscribe``, an accepted replace); any other is
        left alone (the subscription service forgets it)."""
        self.queries.drop(sub)

    def drop_all(self, session: Session) -> None:
        """The connection closed (before the subscription service forgets its subs)."""
        self.queries.drop_all(session)

    # -- the other commands -------------------------------------------------------------

    def sow(self, session: Session, cmd: Command) -> None:
        self.queries.sow(session, cmd)

    def sow_and_subscribe(self, session: Session, cmd: Command) -> Awaitable[None] | None:
        return self.queries.sow_and_subscribe(session, cmd)

    def sow_delete(self, session: Session, cmd: Command) -> Awaitable[None] | None:
        return self.deletes.sow_delete(session, cmd)

    def delta_publish(self, session: Session, cmd: Command) -> None:
        """``delta_publish``: through the publish pipeline as a run of one, logged as a
        ``DELTA_PUBLISH`` record once the stage merged it. Its options are a publish's,
        checked first, as a ``publish`` checks them before its topic."""
        try:
            publish_due(cmd, time_us(self._clock), delta=True)
        except InvalidOptions as exc:
            refuse_options(session, cmd, exc)
            return
        topic = cmd.topic or ""
        if is_regex_topic(topic) or self.topics.rule(topic) is None:
            raise InvalidTopic(f"delta_publish needs a SOW topic; {topic!r} keeps no records")
        origin = session.origin
        assert origin is not None and self._pipeline is not None
        kinds = cmd.acks - {"received"}  # sent by the dispatcher
        self._pipeline.publish(
            origin,
            PublishRun.one(
                topic,
                session.pub_hash,
                cmd.seq,
                cmd.body,
                acks=kinds,
                cid=cmd.cid,
                corr_id=cmd.field("x") or "",
                sow_key=cmd.field("k") or "",
                expiration=cmd.field("e"),
                kind=RecordKind.DELTA_PUBLISH,
                publisher_name=origin.name,
            ),
        )

    # -- admin --------------------------------------------------------------------------

    def topic_infos(self) -> list[SowTopicInfo]:
        """Every SOW topic with a store, in topic order."""
        return [self._info(store) for store in sorted(self.topics, key=lambda s: s.topic)]

    def topic_info(self, topic: str) -> SowTopicInfo:
        """One SOW topic.

        Raises:
            SowTopicNotFound: no store of that topic.
        """
        return self._info(self._store(topic))

    def keys(self, topic: str, *, after: str | None = None, limit: int = 1000) -> SowKeys:
        """A page of ``topic``'s keys in store order, from the key after ``after``."""
        store = self._store(topic)
        keys = store.keys()
        start = 0
        if after is not None:
            try:
                start = keys.index(after) + 1
            except ValueError:
                start = len(keys)
        page = keys[start : start + limit]
        more = start + limit < len(keys)
        return SowKeys(
            topic=topic,
            records=len(keys),
            keys=page,
            next_after=page[-1] if more and page else None,
        )

    async def compact(self, topic: str) -> SowCompaction:
        """Compact a persistent topic's file now.

        Raises:
            SowTopicNotFound: no store of that topic.
            InvalidTopic: the topic is transient (it has no file).
            OSError: the file could not be rewritten (the old one is kept).
        """
        store = self._store(topic)
        if not isinstance(store, FileStore):
            raise InvalidTopic(f"{topic!r} is a transient SOW topic: it has no file to compact")
        return compaction_info(await store.compact())

    def _store(self, topic: str) -> MemoryStore:
        store = self.topics.store(topic)
        if store is None:
            raise SowTopicNotFound(topic)
        return store

    def _info(self, store: MemoryStore) -> SowTopicInfo:
        rule = self.topics.rule(store.topic)
        assert rule is not None
        subscribers = len(self.delivery.router.match(store.topic))
        return topic_info(store, rule, self.topics.recorded(store.topic), subscribers)

    def revoke_entitlements(self) -> int:
        """Entitlements changed: SOW subscribers that may no longer read records they hold
        get ``oof`` notices with reason ``entitlement``. Returns how many were sent."""
        return self.delivery.revoke(topic_json)

    async def flush(self) -> None:
        """Tests and tools: every file write that is ready has been done."""
        await asyncio.gather(
            *(s.flush() for s in self.topics if isinstance(s, FileStore)), return_exceptions=True
        )
