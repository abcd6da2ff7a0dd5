"""The transaction log applied to SOW stores: recovery at start, and historical queries.

The log is the truth of every SOW topic it records: a ``PUBLISH`` or ``DELTA_PUBLISH``
record (the merged message) is a put, a ``SOW_DELETE`` record (a ``sow_delete`` or an
expiration) a delete. :class:`LogApplier` applies batches of the log to stores; it serves
two callers:

- start-up (server/sow/stage.py ``recover``): transient stores of recorded topics, and
  the part of a persistent store's history its file does not hold;
- a historical query (``sow`` with ``bm``): :func:`state_at` replays the log from its
  start up to the requested point into scratch stores. The state "as of" a bookmark
  includes that message; as of a moment, every record made before it (a replay from the
  same moment starts with the first record at or after it, so a ``sow_and_subscribe``
  with a ``bm`` neither misses nor repeats a message). A record whose lifetime had run
  out at that point is not in the state, whether or not its expiration was logged yet.

Keys: a record carries its key in the log (:func:`~spool.server.txlog.format.record.sow_key_field`);
for a topic with ``<Key>`` paths the key is derived from the body again under the
configuration in force, so a change of Key paths re-keys the history instead of mixing
two key schemes. A record whose body gives no key under the current paths is skipped and
counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from spool.server.config import SowTopicConfig
from spool.server.protocol.errors import BookmarkNotFound
from spool.server.sow.expiry import ExpiryIndex
from spool.server.sow.filestore import FileStore
from spool.server.sow.keys import KeySpec
from spool.server.sow.memory import MemoryStore
from spool.server.txlog import TransactionLog
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import (
    MESSAGE_KINDS,
    Record,
    RecordKind,
    split_sow_key_field,
)

__all__ = ["LogApplier", "applied_state", "put_key", "record_key", "state_at"]

#: log records read per batch
_BATCH: Final = 4096
_DELETE: Final = int(RecordKind.SOW_DELETE)


@dataclass(slots=True)
class ApplyCounts:
    """What a :class:`LogApplier` did."""

    puts: int = 0
    deletes: int = 0
    skipped: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)


class LogApplier:
    """Applies log batches to the stores of SOW topics.

    Args:
        rule_of: the SOW rule of a topic (None: not a SOW topic).
        spec_of: the key spec of a rule.
        store_of: the store a topic's records go to (made when needed).
        expiry_of: the expiry index of a topic, when deadlines must be tracked.
    """

    def __init__(
        self,
        rule_of: Callable[[str], SowTopicConfig | None],
        spec_of: Callable[[SowTopicConfig], KeySpec],
        store_of: Callable[[str, SowTopicConfig], MemoryStore],
        expiry_of: Callable[[str], ExpiryIndex | None] | None = None,
    ) -> None:
        self._rule_of = rule_of
        self._spec_of = spec_of
        self._store_of = store_of
        self._expiry_of = expiry_of
        self._topics: dict[str, tuple[SowTopicConfig, MemoryStore] | None] = {}
        self.counts = ApplyCounts()

    def _target(self, topic: str) -> tuple[SowTopicConfig, MemoryStore] | None:
        if topic in self._topics:
            return self._topics[topic]
        rule = self._rule_of(topic)
        target = (rule, self._store_of(topic, rule)) if rule is not None else None
        self._topics[topic] = target
        return target

    def apply(self, batch: RecordBatch) -> None:
        """Apply the records of SOW topics in ``batch`` (in log order)."""
        topics = batch.topics
        first = batch.first_seq
        counts = self.counts
        prev = ""
        target: tuple[SowTopicConfig, MemoryStore] | None = None
        for i in range(len(topics)):
            topic = topics[i]
            if topic is not prev and topic != prev:
                prev = topic
                target = self._target(topic)
            if target is None:
                continue
            rule, store = target
            seq = first + i
            if isinstance(store, FileStore) and seq <= store.file_seq:
                continue  # the file holds it already
            rec = batch.record(i)
            kind = int(rec.kind)
            if kind == _DELETE:
                key = split_sow_key_field(rec.sow_key)[0]
                if store.delete(key, seq=seq) is not None:
                    counts.deletes += 1
                continue
            if kind not in MESSAGE_KINDS:
                continue
            keyed = put_key(rule, self._spec_of(rule), topic, rec)
            if keyed is None:
                counts.skipped += 1
                continue
            key, expires = keyed
            ch = store.put(
                key,
                rec.body,
                seq=seq,
                timestamp_us=rec.timestamp_us,
                pub_hash=rec.pub_hash,
                pub_seq=rec.pub_seq,
                expires_us=expires,
            )
            counts.puts += 1
            counts.by_topic[topic] = counts.by_topic.get(topic, 0) + 1
            if expires and self._expiry_of is not None and ch.new is not None:
                index = self._expiry_of(topic)
                if index is not None:
                    index.add(ch.new)


def put_key(rule: SowTopicConfig, spec: KeySpec, topic: str, rec: Record) -> tuple[str, int] | None:
    """The key a ``PUBLISH`` / ``DELTA_PUBLISH`` record of a SOW topic is stored under,
    and when it expires (wall-clock µs, 0: never), as the log is read: a key the body
    gives is derived again under the key paths in force. None when the body gives none."""
    key, expiration = split_sow_key_field(rec.sow_key)
    if spec.derived or not key:
        derived = spec.try_key(topic, rec.body)
        if derived is None:
            return None
        key = derived
    ts = rec.timestamp_us
    if expiration is not None:
        return key, ts + expiration * 1_000_000 if expiration else 0
    return key, ts + int(rule.expiration * 1_000_000) if rule.expiration else 0


def record_key(
    rule: SowTopicConfig, spec: KeySpec, topic: str, rec: Record
) -> tuple[str, int] | None:
    """The key a record of a SOW topic changes, and the put's expiry (0 for a delete);
    None for a record that changes no key (another kind, or a body without its key)."""
    kind = int(rec.kind)
    if kind == _DELETE:
        return split_sow_key_field(rec.sow_key)[0], 0
    if kind not in MESSAGE_KINDS:
        return None
    return put_key(rule, spec, topic, rec)


async def applied_state(
    txlog: TransactionLog,
    applier: LogApplier,
    from_seq: int,
    upto_seq: int,
) -> None:
    """Read the log from ``from_seq`` to ``upto_seq`` (durable records) into ``applier``,
    yielding to the loop between batches."""
    seq = max(from_seq, txlog.first_seq)
    while seq <= upto_seq:
        batch = await txlog.read_view(seq, max_count=_BATCH, upto_seq=upto_seq)
        if not len(batch):
            break
        applier.apply(batch)
        seq = batch.last_seq + 1
        await asyncio.sleep(0)


async def state_at(
    txlog: TransactionLog,
    upto_seq: int,
    asof_us: int,
    rule_of: Callable[[str], SowTopicConfig | None],
    spec_of: Callable[[SowTopicConfig], KeySpec],
    wanted: Callable[[str], bool],
) -> dict[str, MemoryStore]:
    """The SOW topics ``wanted`` accepts, as of log sequence ``upto_seq`` (inclusive),
    with records expired at ``asof_us`` left out. The log must still hold its beginning.

    Raises:
        BookmarkNotFound: the log's oldest journals were removed: the history before
            them is gone and no state computed without it would be true.
    """
    if txlog.first_seq > 1:
        raise BookmarkNotFound(
            f"the transaction log starts at seq {txlog.first_seq} (older journals were "
            "removed): the history a historical query needs is gone"
        )
    stores: dict[str, MemoryStore] = {}

    def store_of(topic: str, rule: SowTopicConfig) -> MemoryStore:
        store = stores.get(topic)
        if store is None:
            store = stores[topic] = MemoryStore(topic)
        return store

    def rule_if_wanted(topic: str) -> SowTopicConfig | None:
        return rule_of(topic) if wanted(topic) else None

    applier = LogApplier(rule_if_wanted, spec_of, store_of)
    await applied_state(txlog, applier, 1, upto_seq)
    for store in stores.values():
        for rec in store.records():
            if rec.expires_us and rec.expires_us <= asof_us:
                store.delete(rec.key)
    return stores
