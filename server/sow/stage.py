"""The SOW on the publish path: a stage of server/publishing.py.

For a run of publishes to a SOW topic:

- ``prepare`` (before the append): each message's key (server/sow/keys.py); a
  ``delta_publish`` merged into the stored record (server/sow/delta.py), so the merged
  message is what the log records, as a ``DELTA_PUBLISH`` record, and what subscribers
  receive; the key (and the message's ``e``) become the record's SOW key field. A message
  without its key is refused alone (``invalid message``) and the rest of the run goes on.
- ``appended`` (after the append, in publish order): the records go into the topic's
  store, their deadlines into its expiry index, and the changes, with each record's state
  before and after, to the SOW subscriptions (server/sow/subscribers.py). Per message
  only what must be: the store's put; the run is one call, one subscriber lookup, one
  encoding pass per subscriber. When a sink of the happenings bus watches the topic's
  updates (an oof trigger of an action), the changes go to it too, as one
  ``SowChangeHappening``; for any other topic that costs a flag check and, with such a
  sink, one remembered answer.
- a replicated ``sow_delete`` (a run of kind ``SOW_DELETE`` from a replication link,
  server/replication/inbound.py): ``prepare`` takes each record's key from its SOW key
  field, the pipeline de-duplicates and logs it like a publish, and ``appended`` removes
  the keys from the store and tells the subscribers that held them (``oof`` reason
  ``deleted``), as a local ``sow_delete`` does (server/sow/deleting.py), and the
  happenings bus of the records removed (``source`` ``replicated``) when a sink watches.
- ``durable`` (the log's group commit): persistent stores write what it covers.
- ``recover`` (start-up): the log rebuilds transient stores of recorded topics and the
  part of a persistent store's history its file lacks (server/sow/history.py).
- ``refold`` (while running): records a repair wrote back where that rebuild went past a
  fence (server/sow/refold.py).
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from spool.server.clock import Clock, time_us
from spool.server.happenings import Happenings
from spool.server.ports import (
    AppendedRun,
    Change,
    Outbound,
    PublishRun,
    Refusals,
    SowChangeHappening,
    SowRemovalHappening,
)
from spool.server.protocol.errors import InvalidMessage, ProtocolFailure
from spool.server.sow.delta import merge
from spool.server.sow.filestore import FileStore
from spool.server.sow.history import LogApplier
from spool.server.sow.memory import MemoryStore
from spool.server.sow.refold import SowRefold
from spool.server.sow.registry import SowTopics
from spool.server.sow.subscribers import DELETED, SowDelivery
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import (
    MESSAGE_KINDS,
    SOW_FIELD_SEPARATOR,
    RecordKind,
    sow_key_field,
    split_sow_key_field,
)

__all__ = ["SowStage"]

_DELTA = RecordKind.DELTA_PUBLISH
_DELETE = RecordKind.SOW_DELETE


class SowStage:
    """The SOW's publish stage (preparing, appended, durable, recovering).

    Args:
        topics: rules, specs and stores.
        delivery: the SOW subscriptions.
        clock: the time of records of topics the log does not record.
        on_deadline: told of each new expiry deadline (wall-clock microseconds).
    """

    def __init__(
        self,
        topics: SowTopics,
        delivery: SowDelivery,
        clock: Clock,
        on_deadline: Callable[[int], None],
        happenings: Happenings | None = None,
    ) -> None:
        self._topics = topics
        self._delivery = delivery
        self._happenings = happenings
        self._clock = clock
        self._on_deadline = on_deadline
        self.applier = LogApplier(topics.rule, topics.spec, topics.store_for, topics.expiry.get)

    def applies_to(self, topic: str) -> bool:
        return self._topics.rule(topic) is not None

    # -- before the append --------------------------------------------------------------

    def prepare(self, run: PublishRun) -> Refusals | None:
        if run.kind == _DELETE:
            return self._prepare_deletes(run)
        topics = self._topics
        topic = run.topic
        rule = topics.rule(topic)
        assert rule is not None  # applies_to said so
        spec = topics.spec(rule)
        bodies = run.bodies
        given = run.sow_keys
        expirations = run.expirations
        delta = run.kind == _DELTA
        # a key the body gives is derived again when the log is read: only a key that
        # came from k (or a digest) and a message's lifetime are logged
        log_key = not spec.derived
        store = topics.store(topic)
        merged: dict[str, bytes] = {}
        keys: list[str] = []
        fields: list[str] = []
        logged = False
        refusals: Refusals | None = None
        key_of = spec.key
        for i, body in enumerate(bodies):
            try:
                key = key_of(topic, body, given[i] if given else None)
                if delta:
                    bodies[i] = self._merge(topic, store, key, body, merged)
            except ProtocolFailure as exc:
                if refusals is None:
                    refusals = []
                refusals.append((i, exc))
                keys.append("")
                fields.append("")
                continue
            keys.append(key)
            e = expirations[i] if expirations else None
            if e is not None:
                fields.append(sow_key_field(key, e))
                logged = True
            elif log_key:
                fields.append(key)
                logged = True
            else:
                fields.append("")
        run.keys = keys
        run.sow_keys = fields if logged else None
        return refusals

    @staticmethod
    def _prepare_deletes(run: PublishRun) -> Refusals | None:
        """A replicated ``sow_delete`` run: each record's key is its SOW key field (a
        removal has no body to derive one from); a record without one is refused."""
        fields = run.sow_keys or [""] * len(run.bodies)
        keys = [split_sow_key_field(field)[0] for field in fields]
        run.keys = keys
        refusals: Refusals = [
            (i, InvalidMessage(f"a sow_delete record of {run.topic!r} carries no key"))
            for i, key in enumerate(keys)
            if not key
        ]
        return refusals or None

    @staticmethod
    def _merge(
        topic: str, store: MemoryStore | None, key: str, update: bytes, merged: dict[str, bytes]
    ) -> bytes:
        """The record a delta makes of the stored one (earlier deltas of the same run
        included); the delta itself when nothing is stored under its key."""
        stored = merged.get(key)
        if stored is None and store is not None:
            rec = store.get(key)
            stored = rec.body if rec is not None else None
        if stored is None:
            merged[key] = update
            return update
        try:
            old = orjson.loads(stored)
            new = orjson.loads(update)
        except orjson.JSONDecodeError:
            old = new = None
        if type(old) is not dict or type(new) is not dict:
            raise InvalidMessage(
                f"delta_publish to {topic!r}: the update and the stored record must both be "
                "JSON objects"
            )
        body = orjson.dumps(merge(old, new))
        merged[key] = body
        return body

    # -- after the append ------------------------------------------------------------------

    def reaches(self, topic: str, peer: Outbound) -> bool:
        """Whether a SOW subscription of ``peer`` takes ``topic``."""
        return any(sub.outbound is peer for sub in self._delivery.router.match(topic))

    def appended(self, run: AppendedRun) -> None:
        if run.kind == _DELETE:
            self._deleted(run)
            return
        if run.kind not in MESSAGE_KINDS:
            return  # a delayed message's scheduled record: its due record puts the key
        topics = self._topics
        topic = run.topic
        rule = topics.rule(topic)
        assert rule is not None
        store = topics.store_for(topic, rule)
        keys = run.keys
        assert keys is not None  # set by prepare
        n = len(keys)
        ts = run.timestamp_us if run.timestamp_us is not None else time_us(self._clock)
        first = run.first_seq
        seqs = range(first, first + n) if first else [0] * n
        topic_life = int(rule.expiration * 1_000_000)
        expires: list[int] | None = [ts + topic_life] * n if topic_life else None
        fields = run.sow_keys
        if fields is not None:
            for i, field in enumerate(fields):
                if SOW_FIELD_SEPARATOR in field:
                    if expires is None:
                        expires = [0] * n
                    life = int(field.rpartition(SOW_FIELD_SEPARATOR)[2])
                    expires[i] = ts + life * 1_000_000 if life else 0
        wanted = bool(self._delivery.router.match(topic))
        happenings = self._happenings
        watched = (
            happenings is not None
            and happenings.sow_changes
            and happenings.sow_interest("sow_changes", topic)
        )
        changes = store.put_run(
            keys, run.bodies, seqs=seqs, timestamp_us=ts, pub_hash=run.pub_hash,
            pub_seqs=run.pub_seqs, expires=expires,
            changes=wanted or expires is not None or watched,
        )  # fmt: skip
        if expires is not None:
            index = topics.expiry[topic]
            earliest = 0
            for ch in changes:
                new = ch.new
                if new is not None and new.expires_us:
                    index.add(new)
                    if not earliest or new.expires_us < earliest:
                        earliest = new.expires_us
            if earliest:
                self._on_deadline(earliest)
        if wanted:
            self._delivery.changed(topic, run.topic_literal, changes)
        if watched and changes:
            assert happenings is not None
            happenings.emit(SowChangeHappening(
                ts, topic, tuple(changes), "replicated" if run.path else "local",
            ))  # fmt: skip

    def _deleted(self, run: AppendedRun) -> None:
        """A replicated ``sow_delete`` run, logged: remove its keys (each with its log
        seq, as a persistent store records it) and tell the subscribers that held them."""
        topic = run.topic
        store = self._topics.store(topic)
        keys = run.keys
        assert keys is not None  # set by prepare
        if store is None:
            return  # nothing stored in this topic here: nothing to remove
        first = run.first_seq
        changes: list[Change] = []
        for i, key in enumerate(keys):
            ch = store.delete(key, seq=first + i if first else 0)
            if ch is not None:
                changes.append(ch)
        if changes:
            self._delivery.changed(topic, run.topic_literal, changes, DELETED)
            happenings = self._happenings
            if (
                happenings is not None
                and happenings.sow_removals
                and happenings.sow_interest("sow_removals", topic)
            ):
                happenings.emit(SowRemovalHappening(
                    time_us(self._clock), topic, "deleted",
                    tuple(c.old for c in changes if c.old is not None),
                    "replicated" if run.path else "local",
                ))  # fmt: skip

    # -- durability and recovery --------------------------------------------------------

    def durable(self, seq: int) -> None:
        self._topics.durable(seq)

    def recover(self, batch: RecordBatch) -> None:
        self.applier.apply(batch)

    def refold(self) -> SowRefold:
        """Records a repair wrote back where the start-up rebuild went past a fence
        (server/sow/refold.py)."""
        return SowRefold(self._topics, self._delivery, self._on_deadline)

    def recover_from(self) -> int:
        """1 when a transient store of a recorded topic (or a regex rule, whose topics
        are only known from the log) needs the whole log; otherwise just after the
        oldest persistent file's last sequence."""
        topics = self._topics
        if any(rule.is_regex for rule in topics.rules):
            return 1
        needed: list[int] = []
        for store in topics:
            if not topics.recorded(store.topic):
                continue
            needed.append(store.file_seq + 1 if isinstance(store, FileStore) else 1)
        return min(needed, default=1 << 62)
