"""Removing SOW records: the ``sow_delete`` command, deletes without a session, expirations.

A removal is recorded in the transaction log as a ``SOW_DELETE`` record per key (for a
topic the log records), then applied to the store, then told to the subscribers that hold
the record (``oof`` with reason ``deleted`` or ``expired``). The log record comes first:
when the log refuses (``txlog full``), nothing is removed that the log does not know of.

``sow_delete`` takes exactly one of: a filter (``f``), a list of keys (``k``), or a message
(the body: the record with the same key goes). A filter runs over a snapshot a slice at a
time (server/sow/query.py); the removal itself is one step at the end, and a record that
changed meanwhile goes only if its new state still matches. The ``stats`` ack carries
``matches`` and ``records_deleted``. :meth:`SowDeletes.delete_matching` is the same delete
by filter or keys for a caller without a connection (an action): one code path selects and
removes for both; only the acks are the command's alone.

Identity (docs/sow.md "Deletes and replication"): a ``sow_delete``'s records carry the
instance's own publisher identity (its log's ``own_pub_hash``: one per log the instance
had, server/txlog/publishers/incarnation.py; shared with the messages the instance publishes itself
and its queue records) and the next sequences of that publisher, so each has a bookmark:
replication sends them like publishes and a destination de-duplicates them on a resync.
The sequence is the log's (``publisher_last`` + 1), so it survives restarts with the log.
An expiration is logged without identity (``pub_hash`` 0): every instance expires records
from its own ``<SOW>`` configuration, and such records are never replicated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Final

from spool.server.bookmarks import format_timestamp_us
from spool.server.clock import Clock, time_us
from spool.server.config import SowTopicConfig
from spool.server.expr import Filter, MessageView, compile_filter
from spool.server.happenings import Happenings
from spool.server.ports import Change, Entitlements, SowRecord, SowRemovalHappening
from spool.server.protocol.commands import Command
from spool.server.protocol.errors import (
    BadFilter,
    InvalidMessage,
    InvalidTopic,
    NotEntitled,
    ProtocolFailure,
    TxlogFull,
)
from spool.server.protocol.topic import is_regex_topic
from spool.server.session import Session
from spool.server.sow.memory import MemoryStore
from spool.server.sow.query import QueryRun, Source, parse_key_list
from spool.server.sow.registry import SowTopics
from spool.server.sow.subscribers import DELETED, EXPIRED, SowDelivery
from spool.server.stats.source import EventSink
from spool.server.txlog import TransactionLog
from spool.server.txlog.format.record import RecordKind
from spool.server.wire import topic_json

__all__ = ["SowDeletes"]

_SOW_DELETE: Final = RecordKind.SOW_DELETE


class SowDeletes:
    """``sow_delete``, deletes without a session, and the removal of expired records.
    Owned by the event loop.

    Args:
        topics: rules and stores.
        delivery: the SOW subscriptions (they hear of what leaves).
        txlog: where removals of recorded topics are logged, or None.
        entitlements: write entitlements (removing is writing).
        events: log refusals of an expiration.
        clock: filters' time functions.
        happenings: told of the records removed from a topic a sink watches (None: no one).
    """

    def __init__(
        self,
        topics: SowTopics,
        delivery: SowDelivery,
        txlog: TransactionLog | None,
        entitlements: Entitlements,
        events: EventSink,
        clock: Clock,
        happenings: Happenings | None = None,
    ) -> None:
        self._topics = topics
        self._delivery = delivery
        self._happenings = happenings
        self._txlog = txlog
        self._auth = entitlements
        self._events = events
        self._clock = clock

    # -- the command --------------------------------------------------------------------

    def sow_delete(self, session: Session, cmd: Command) -> Awaitable[None] | None:
        """``sow_delete``: now (keys, a message) or after a filter ran (the awaitable)."""
        topic = cmd.topic or ""
        rule = self._rule(topic)
        auth = self._auth
        if auth.enabled and not auth.can_write(session.user, topic):
            raise NotEntitled(f"user {session.user_name!r} may not delete from {topic!r}")
        k = cmd.field("k")
        given = [
            name
            for name, present in (
                ("a filter", bool(cmd.filter)),
                ("keys ('k')", bool(k)),
                ("a message", bool(cmd.body)),
            )
            if present
        ]
        if len(given) != 1:
            raise InvalidMessage(
                "sow_delete takes exactly one of a filter, keys ('k') or a message"
                + (f" (got {' and '.join(given)})" if given else "")
            )
        store = self._topics.store(topic)
        if cmd.filter:
            return self._by_filter(session, cmd, store, self._compile(cmd.filter))
        keys = parse_key_list(k) if k else [self._topics.spec(rule).key(topic, cmd.body, None)]
        records = _stored(store, keys)
        self._finish(session, cmd, store, records, len(records))
        return None

    async def _by_filter(
        self, session: Session, cmd: Command, store: MemoryStore | None, flt: Filter
    ) -> None:
        records, matches = await self._matching(store, flt)
        self._finish(session, cmd, store, records, matches)

    def _finish(
        self,
        session: Session,
        cmd: Command,
        store: MemoryStore | None,
        records: list[SowRecord],
        matches: int,
    ) -> None:
        deleted = 0
        failure: ProtocolFailure | None = None
        if store is not None and records:
            deleted, failure = self.remove(store, records, DELETED, by=session.name)
        if failure is not None:
            session.fail(cmd.cid, failure)
        elif "processed" in cmd.acks:
            session.ack("processed", cmd.cid)
        if "stats" in cmd.acks:
            session.ack("stats", cmd.cid, matches=matches, records_deleted=deleted)
        if "completed" in cmd.acks and failure is None:
            session.ack("completed", cmd.cid)

    # -- without a session ----------------------------------------------------------------

    async def delete_matching(
        self,
        topic: str,
        *,
        filter: str | None = None,
        keys: Sequence[str] | None = None,
        by: str,
    ) -> int:
        """Delete the records of ``topic`` that ``filter`` matches, or those of ``keys``,
        as a ``sow_delete`` does, for a caller without a connection (an action): the same
        topic checks and filter compilation, the same snapshot-then-recheck selection, the
        same removal (logged under the instance's identity when the topic is recorded, so
        it replicates; applied; ``oof`` ``deleted`` to the subscribers that held the
        records). There is no ack to send and no user: the broker's own deletes are
        trusted, as its own publishes are. ``by`` names the caller where a refusal is
        reported.

        Returns:
            How many records were removed.

        Raises:
            InvalidTopic: a regex topic, or a topic that is not a SOW topic.
            InvalidMessage: not exactly one of ``filter`` and ``keys``, or no key in it.
            BadFilter: the filter does not compile.
            ProtocolFailure: the log refused the removal part way (``txlog full``): the
                records before the refusal were removed, the others kept; a ``warning``
                ``sow/delete_refused`` event says how many went.
        """
        self._rule(topic)
        if (filter is None) == (keys is None):
            raise InvalidMessage("a SOW delete takes exactly one of a filter or keys")
        store = self._topics.store(topic)
        if filter is not None:
            records, _ = await self._matching(store, self._compile(filter))
        else:
            assert keys is not None
            wanted = list(dict.fromkeys(k.strip() for k in keys if k.strip()))
            if not wanted:
                raise InvalidMessage("a SOW delete by keys names no key")
            records = _stored(store, wanted)
        if store is None or not records:
            return 0
        deleted, failure = self.remove(store, records, DELETED, by=by)
        if failure is not None:
            self._events.emit(
                "warning", "sow", "delete_refused", topic=topic, by=by, deleted=deleted,
                error=str(failure),
            )  # fmt: skip
            raise failure
        return deleted

    # -- shared by both -----------------------------------------------------------------

    def _rule(self, topic: str) -> SowTopicConfig:
        """The SOW rule of ``topic``; a regex or a topic that keeps no records is refused."""
        if not topic or is_regex_topic(topic):
            raise InvalidTopic("sow_delete takes one SOW topic by name")
        rule = self._topics.rule(topic)
        if rule is None:
            raise InvalidTopic(f"{topic!r} is not a SOW topic")
        return rule

    def _compile(self, text: str) -> Filter:
        """A delete's filter, or ``bad filter`` with why it does not compile."""
        try:
            return compile_filter(text, clock=self._clock)
        except BadFilter:
            raise
        except Exception as exc:
            raise BadFilter(f"cannot compile filter: {exc}") from exc

    async def _matching(
        self, store: MemoryStore | None, flt: Filter
    ) -> tuple[list[SowRecord], int]:
        """The records of ``store`` ``flt`` matches, and how many matched: the filter runs
        over a snapshot a slice at a time (the loop runs between slices), then each match
        is taken as it is now, and one that changed meanwhile only if it still matches."""
        if store is None:
            return [], 0
        run = QueryRun([Source(store.topic, b"", store.records())], flt)
        while not run.step():
            await asyncio.sleep(0)
        view_topic = store.topic
        matched: list[SowRecord] = []
        for _, rec in run.results():
            current = store.get(rec.key)
            if current is None:
                continue
            if current.version != rec.version and not flt.matches(
                MessageView(
                    view_topic,
                    current.body,
                    bookmark=current.bookmark,
                    timestamp=format_timestamp_us(current.timestamp_us),
                )
            ):
                continue
            matched.append(current)
        return matched, run.matches

    # -- removal ------------------------------------------------------------------------

    def remove(
        self, store: MemoryStore, records: list[SowRecord], reason: str, *, by: str | None = None
    ) -> tuple[int, ProtocolFailure | None]:
        """Remove ``records`` (each only if it is still the stored one): logged first,
        then applied, then told to subscribers, then to the happenings bus when a sink
        watches the topic (``by``: who deleted them, when known).

        A removal for ``reason`` ``deleted`` (the command) is logged with the instance's
        publisher identity, so it replicates; any other (``expired``) without.

        Returns:
            How many were removed, and the log's refusal when it stopped accepting part
            way (the records before it were removed, the others kept).
        """
        topic = store.topic
        live = [
            r for r in records if (cur := store.get(r.key)) is not None and cur.version == r.version
        ]
        if not live:
            return 0, None
        txlog = self._txlog
        pub = txlog.own_pub_hash if txlog is not None and reason == DELETED else 0
        seqs, refusal = self._log(topic, [r.key for r in live], pub)
        changes: list[Change] = []
        for rec, seq in zip(live, seqs, strict=False):
            ch = store.delete(rec.key, seq=seq)
            if ch is not None:
                changes.append(ch)
        if changes:
            self._delivery.changed(topic, topic_json(topic), changes, reason)
            happenings = self._happenings
            if (
                happenings is not None
                and happenings.sow_removals
                and happenings.sow_interest("sow_removals", topic)
            ):
                happenings.emit(SowRemovalHappening(
                    time_us(self._clock), topic, "expired" if reason == EXPIRED else "deleted",
                    tuple(c.old for c in changes if c.old is not None), "local", by,
                ))  # fmt: skip
        return len(changes), refusal

    def _log(
        self, topic: str, keys: list[str], pub: int
    ) -> tuple[list[int], ProtocolFailure | None]:
        """Append a ``SOW_DELETE`` record per key (recorded topics), as publisher ``pub``
        (0: no identity) with its next sequences; their seqs (0: not logged), and the
        log's refusal if it stopped accepting part way."""
        txlog = self._txlog
        if txlog is None or not self._topics.recorded(topic):
            return [0] * len(keys), None
        n = len(keys)
        first = txlog.publisher_last(pub) + 1 if pub else 0
        pub_seqs = list(range(first, first + n)) if pub else [0] * n
        done = txlog.append_many(topic=topic, message_type="json", pub_hash=pub,
                                 pub_seqs=pub_seqs, bodies=[b""] * n, sow_keys=keys,
                                 kind=_SOW_DELETE)  # fmt: skip
        seqs = list(range(txlog.last_seq - done + 1, txlog.last_seq + 1))
        if done == n:
            return seqs, None
        try:  # the log refused key ``done``: append() of it says why, or takes it
            rec = txlog.append(topic=topic, message_type="json", pub_hash=pub,
                               pub_seq=pub_seqs[done], body=b"", kind=_SOW_DELETE,
                               sow_key=keys[done])  # fmt: skip
        except ProtocolFailure as exc:
            return seqs, exc
        except Exception as exc:
            return seqs, TxlogFull(f"transaction log cannot accept writes: {exc}")
        seqs.append(rec.seq)
        more, refusal = self._log(topic, keys[done + 1 :], pub)
        return seqs + more, refusal


def _stored(store: MemoryStore | None, keys: list[str]) -> list[SowRecord]:
    """The records ``store`` holds under ``keys``, in their order (absent keys left out)."""
    if store is None:
        return []
    return [r for key in keys if (r := store.get(key)) is not None]
