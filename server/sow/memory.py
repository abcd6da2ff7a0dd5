"""The memory backend of :class:`~spool.server.ports.TopicStore`: a dict of immutable records.

Also the in-memory half of the persistent backend (server/sow/filestore.py extends it),
and the scratch store a historical query rebuilds from the transaction log. Records are
kept in the order their keys were first stored (a ``dict`` keeps insertion order), which is
the order of an unsorted query.

A publish to a SOW topic builds a record and a change per message: both are named tuples
built with ``tuple.__new__`` directly (:func:`new_record`, :func:`new_change`), and a run
of publishes is stored by one :meth:`MemoryStore.put_run` call.
"""

from __future__ import annotations

from collections.abc import Sequence

from spool.server.ports import Change, SowRecord

__all__ = ["MemoryStore", "new_change", "new_record"]


def new_record(
    key: str,
    body: bytes,
    seq: int,
    timestamp_us: int,
    pub_hash: int,
    pub_seq: int,
    expires_us: int,
    version: int,
) -> SowRecord:
    """A :class:`SowRecord` (fields in declaration order)."""
    return _new_tuple(SowRecord, (key, body, seq, timestamp_us, pub_hash, pub_seq, expires_us,
                                  version))  # fmt: skip


def new_change(key: str, old: SowRecord | None, new: SowRecord | None) -> Change:
    """A :class:`Change`."""
    return _new_tuple(Change, (key, old, new))


_new_tuple = tuple.__new__


def _zeros(n: int) -> list[int]:
    return [0] * n


class MemoryStore:
    """A topic's records in memory (the ``transient`` durability). Owned by the loop.

    Args:
        topic: the topic whose records it keeps.
    """

    def __init__(self, topic: str) -> None:
        self._topic = topic
        self._records: dict[str, SowRecord] = {}
        self._version = 0
        self._bytes = 0

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def version(self) -> int:
        return self._version

    @property
    def body_bytes(self) -> int:
        return self._bytes

    def put(
        self,
        key: str,
        body: bytes,
        *,
        seq: int = 0,
        timestamp_us: int = 0,
        pub_hash: int = 0,
        pub_seq: int = 0,
        expires_us: int = 0,
    ) -> Change:
        self._version = version = self._version + 1
        rec = new_record(key, body, seq, timestamp_us, pub_hash, pub_seq, expires_us, version)
        records = self._records
        old = records.get(key)
        records[key] = rec
        self._bytes += len(body) - (len(old.body) if old is not None else 0)
        self._changed(old, rec, seq)
        return new_change(key, old, rec)

    def put_run(
        self,
        keys: Sequence[str],
        bodies: Sequence[bytes],
        *,
        seqs: Sequence[int],
        timestamp_us: int,
        pub_hash: int,
        pub_seqs: Sequence[int],
        expires: Sequence[int] | None,
        changes: bool,
    ) -> list[Change]:
        records = self._records
        get = records.get
        make = _new_tuple
        out: list[Change] = []
        keep = out.append
        version = self._version
        grown = 0
        news: list[SowRecord] = []
        add = news.append
        ts = timestamp_us
        ph = pub_hash
        for key, body, seq, ps, exp in zip(
            keys, bodies, seqs, pub_seqs, expires if expires is not None else _zeros(len(keys)),
            strict=True,
        ):  # fmt: skip
            version += 1
            rec = make(SowRecord, (key, body, seq, ts, ph, ps, exp, version))
            old = get(key)
            records[key] = rec
            add(rec)
            if old is None:
                grown += len(body)
            else:
                grown += len(body) - len(old[1])
            if changes:
                keep(make(Change, (key, old, rec)))
        self._version = version
        self._bytes += grown
        self._changed_run(news)
        return out

    def delete(self, key: str, *, seq: int = 0) -> Change | None:
        old = self._records.pop(key, None)
        if old is None:
            return None
        self._version += 1
        self._bytes -= len(old.body)
        self._changed(old, None, seq)
        return new_change(key, old, None)

    def get(self, key: str) -> SowRecord | None:
        return self._records.get(key)

    def records(self) -> list[SowRecord]:
        return list(self._records.values())

    def keys(self) -> list[str]:
        """Every key, in store order."""
        return list(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key: object) -> bool:
        return key in self._records

    def _changed(self, old: SowRecord | None, new: SowRecord | None, seq: int) -> None:
        """Hook for the persistent backend: ``old`` became ``new`` (None: deleted by the
        log record ``seq``); nothing to do in memory."""

    def _changed_run(self, news: list[SowRecord]) -> None:
        """Hook for the persistent backend: a run of puts (nothing to do in memory)."""

    def _load(self, rec: SowRecord) -> None:
        """Take a record read back from a file, as it was (no change to write)."""
        records = self._records
        old = records.get(rec.key)
        records[rec.key] = rec
        self._bytes += len(rec.body) - (len(old.body) if old is not None else 0)
        if rec.version > self._version:
            self._version = rec.version
