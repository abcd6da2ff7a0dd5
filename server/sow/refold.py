"""Records a repair wrote back, taken into the SOW while it runs.

A range the start-up rebuild went past (fenced: server/txlog/damage/fences.py) left the SOW
without its records. Once a repair writes them back, the log holds them again, and a
rebuild from the whole log would give every key the effect of **the last record of the
log that changes it** (a put stores its body, a delete removes it: every change to a
recorded topic's store is a record, expirations included). So the SOW is brought to that
state key by key, without rebuilding anything else:

- the repaired records are read in log order, and for each key the last one is kept;
- the records after the range, up to the log's end, are read; a key any of them changes
  is dropped: its live state is already the fold's (a later put, or a later delete,
  which a repaired put must not undo);
- the keys left are applied on the loop (:meth:`SowRefold.apply`), a bounded number at
  a time, each part with nothing appended since the last record read (server/publishing.py
  ``PublishPipeline.refold`` feeds :meth:`SowRefold.later` what live publishes appended
  between two parts): a put stores the record under its own log seq, a delete removes
  the key. A stored record with a seq at or past the repaired one is never replaced (a
  second guard: it is newer).

Subscribers hear of each change as of a live one (a publish; an ``oof`` with reason
``deleted``); records whose lifetime ran out meanwhile expire at once, as after a
restart. A persistent store writes the changes to its file at once (their log records
are durable).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from spool.server.config import SowTopicConfig
from spool.server.ports import Change
from spool.server.sow.history import record_key
from spool.server.sow.keys import KeySpec
from spool.server.sow.registry import SowTopics
from spool.server.sow.subscribers import DELETED, SowDelivery
from spool.server.txlog.format.record import Record, RecordKind
from spool.server.wire import topic_json

__all__ = ["SowRefold"]

_DELETE = int(RecordKind.SOW_DELETE)


class SowRefold:
    """The SOW's catch-up for one repaired range (:class:`~spool.server.ports.Refold`).

    Args:
        topics: rules, specs and stores.
        delivery: the SOW subscriptions (told of each change).
        on_deadline: told of each new expiry deadline (wall-clock microseconds).
    """

    def __init__(
        self, topics: SowTopics, delivery: SowDelivery, on_deadline: Callable[[int], None]
    ) -> None:
        self._topics = topics
        self._delivery = delivery
        self._on_deadline = on_deadline
        self._rules: dict[str, tuple[SowTopicConfig, KeySpec] | None] = {}
        #: per topic, per key: the last repaired record changing it, and its expiry
        self._last: dict[str, dict[str, tuple[Record, int]]] = {}

    def _rule(self, topic: str) -> tuple[SowTopicConfig, KeySpec] | None:
        if topic in self._rules:
            return self._rules[topic]
        topics = self._topics
        rule = topics.rule(topic)
        found = (rule, topics.spec(rule)) if rule is not None else None
        self._rules[topic] = found
        return found

    def repaired(self, records: Sequence[Record]) -> None:
        for rec in records:
            target = self._rule(rec.topic)
            if target is None:
                continue
            keyed = record_key(target[0], target[1], rec.topic, rec)
            if keyed is not None:
                self._last.setdefault(rec.topic, {})[keyed[0]] = (rec, keyed[1])

    def later(self, records: Sequence[Record]) -> None:
        last = self._last
        if not last:
            return
        for rec in records:
            keys = last.get(rec.topic)
            if not keys:
                continue
            target = self._rule(rec.topic)
            assert target is not None  # a repaired record of the topic was a SOW record
            keyed = record_key(target[0], target[1], rec.topic, rec)
            if keyed is not None:
                keys.pop(keyed[0], None)

    @property
    def done(self) -> bool:
        return not any(self._last.values())

    def apply(self, limit: int) -> int:
        topics = self._topics
        made = 0
        for topic, keys in self._last.items():
            if limit <= 0:
                break
            if not keys:
                continue
            part = list(itertools.islice(keys.items(), limit))
            for key, _ in part:
                del keys[key]
            limit -= len(part)
            target = self._rule(topic)
            assert target is not None
            store = topics.store_for(topic, target[0])
            index = topics.expiry.get(topic)
            puts: list[Change] = []
            deletes: list[Change] = []
            earliest = 0
            for key, (rec, expires) in part:
                current = store.get(key)
                if current is not None and current.seq >= rec.seq:
                    continue  # a later record stored it (not in the log read: a guard)
                if rec.kind == _DELETE:
                    if current is not None:
                        ch = store.delete(key, seq=rec.seq)
                        if ch is not None:
                            deletes.append(ch)
                    continue
                ch = store.put(
                    key, rec.body, seq=rec.seq, timestamp_us=rec.timestamp_us,
                    pub_hash=rec.pub_hash, pub_seq=rec.pub_seq, expires_us=expires,
                )  # fmt: skip
                puts.append(ch)
                if expires and index is not None and ch.new is not None:
                    index.add(ch.new)
                    earliest = expires if not earliest else min(earliest, expires)
            if earliest:
                self._on_deadline(earliest)
            literal = topic_json(topic)
            if puts:
                self._delivery.changed(topic, literal, puts)
            if deletes:
                self._delivery.changed(topic, literal, deletes, DELETED)
            made += len(puts) + len(deletes)
        return made
