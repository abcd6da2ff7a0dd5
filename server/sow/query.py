"""SOW queries over a snapshot, a slice at a time (sans-I/O).

A query (``sow``, the first part of ``sow_and_subscribe``, a ``sow_delete`` by filter)
runs over a *snapshot*: lists of immutable records taken in one step on the loop, so the
result is the state of one instant however long it takes to send. The work that grows
with the SOW (filtering, reading sort fields, sorting) is done :data:`CHUNK` records per
:meth:`QueryRun.step`, and the caller yields to the event loop between steps: a query of a
million records never holds the loop for more than a few milliseconds at a time.

Ordering (``orderby``: ``/path [ASC|DESC]``, comma-separated): each slice's matches are
sorted on their own as they are found, and :meth:`QueryRun.results` merges the sorted
slices lazily, so the sort is spread over the steps and the merge over the sending. Values
of different types never compare with each other: numbers sort before strings, strings
before booleans, booleans before objects and arrays (compared as JSON text), and a record
without the field (or with ``null``) sorts last; ``DESC`` is the exact reverse. Ties keep
the store's order (the order keys were first stored), which is also the order of a query
without ``orderby``.
"""

from __future__ import annotations

import heapq
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, overload

import orjson

from spool.server.bookmarks import format_timestamp_us
from spool.server.expr import Filter
from spool.server.ports import SowRecord
from spool.server.protocol.errors import InvalidMessage

__all__ = [
    "CHUNK",
    "MAX_BATCH",
    "OrderField",
    "QueryRun",
    "Source",
    "parse_key_list",
    "parse_orderby",
]

#: records filtered (and their sort fields read) per step
CHUNK: Final = 2048
#: the largest ``bs`` accepted (records per frame)
MAX_BATCH: Final = 10_000
_ORDER_ITEM: Final = re.compile(r"\s*((?:/[^/,\s]+)+)(?:\s+(ASC|DESC|asc|desc))?\s*")


@dataclass(frozen=True, slots=True)
class OrderField:
    """One ``orderby`` item: a JSON path (as steps) and its direction."""

    path: str
    steps: tuple[str, ...]
    desc: bool


@dataclass(frozen=True, slots=True)
class Source:
    """The snapshot of one topic a query runs over."""

    topic: str
    literal: bytes
    records: list[SowRecord]


def parse_orderby(text: str) -> tuple[OrderField, ...]:
    """``/a DESC, /b`` -> fields.

    Raises:
        InvalidMessage: not a comma list of ``/path`` with an optional ``ASC``/``DESC``.
    """
    fields: list[OrderField] = []
    for item in text.split(","):
        match = _ORDER_ITEM.fullmatch(item)
        if match is None:
            raise InvalidMessage(
                f"orderby item {item.strip()[:80]!r}: expected /path with an optional ASC or DESC"
            )
        path, direction = match.group(1), (match.group(2) or "ASC").upper()
        fields.append(OrderField(path, tuple(path.strip("/").split("/")), direction == "DESC"))
    return tuple(fields)


def parse_key_list(text: str) -> list[str]:
    """A ``k`` header naming records: comma-separated keys, blanks ignored, order kept.

    Raises:
        InvalidMessage: no key at all.
    """
    keys = list(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    if not keys:
        raise InvalidMessage("'k' names no key")
    return keys


class _Rev:
    """Reverses the order of the value it wraps (a ``DESC`` field)."""

    __slots__ = ("v",)

    def __init__(self, v: object) -> None:
        self.v = v

    def __lt__(self, other: _Rev) -> bool:
        return other.v < self.v  # type: ignore[operator, no-any-return]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Rev) and self.v == other.v

    __hash__ = None  # type: ignore[assignment]


def _sortable(value: object) -> tuple[int, object]:
    """A value in the cross-type order of the module docstring."""
    t = type(value)
    if t is int or t is float:
        return (0, value)
    if t is str:
        return (1, value)
    if t is bool:
        return (2, value)
    if value is None:
        return (4, 0)
    return (3, orjson.dumps(value))


def _walk(doc: object, steps: tuple[str, ...]) -> object:
    for step in steps:
        if type(doc) is not dict:
            return None
        doc = doc.get(step)
    return doc


class _Same(Sequence[str]):
    """``n`` times the same topic, for :meth:`Filter.select` (no list per slice)."""

    __slots__ = ("_n", "_topic")

    def __init__(self, topic: str, n: int) -> None:
        self._topic = topic
        self._n = n

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return [self._topic] * len(range(*i.indices(self._n)))
        return self._topic

    def __len__(self) -> int:
        return self._n


#: one match: (sort key..., position) then the source index and the record
_Match = tuple[tuple[object, ...], int, SowRecord]


class QueryRun:
    """One query over a snapshot, done :data:`CHUNK` records per :meth:`step`.

    Args:
        sources: the snapshot, one per topic.
        flt: the content filter, or None for every record.
        order: ``orderby`` fields (empty: the store's order).
        top_n: return at most this many (all matches are still counted).
    """

    def __init__(
        self,
        sources: Sequence[Source],
        flt: Filter | None,
        order: tuple[OrderField, ...] = (),
        top_n: int | None = None,
    ) -> None:
        self.sources = list(sources)
        self._filter = flt
        self._order = order
        self.top_n = top_n
        #: records that matched the filter (counted over the whole snapshot)
        self.matches = 0
        self._src = 0
        self._pos = 0
        self._seen = 0
        #: sorted slices of matches (with ``orderby``), or the matches in order (without)
        self._runs: list[list[_Match]] = []
        #: without orderby: the matches, a list per slice (source index, records)
        self._plain: list[tuple[int, list[SowRecord]]] = []
        self.done = not any(s.records for s in self.sources)

    def step(self) -> bool:
        """Filter the next slice; True once the whole snapshot is done."""
        if self.done:
            return True
        src = self.sources[self._src]
        records = src.records
        lo = self._pos
        hi = min(lo + CHUNK, len(records))
        chunk = records[lo:hi]
        flt = self._filter
        if flt is None:
            picked: Sequence[int] = range(len(chunk))
        else:
            picked = flt.select(
                _Same(src.topic, len(chunk)),
                [r.body for r in chunk],
                range(len(chunk)),
                lambda i: chunk[i].bookmark,
                lambda i: format_timestamp_us(chunk[i].timestamp_us),
            )
        self.matches += len(picked)
        if self._order:
            run = [self._keyed(chunk[i], self._seen + i) for i in picked]
            run.sort(key=_first_two)
            if run:
                self._runs.append(run)
        else:
            taken = chunk if flt is None else [chunk[i] for i in picked]
            if taken:
                self._plain.append((self._src, taken))
        self._seen += len(chunk)
        self._pos = hi
        if hi >= len(records):
            self._src += 1
            self._pos = 0
            while self._src < len(self.sources) and not self.sources[self._src].records:
                self._src += 1
            if self._src >= len(self.sources):
                self.done = True
        return self.done

    def run_all(self) -> None:
        """Every step at once (small snapshots, tests)."""
        while not self.step():
            pass

    def _keyed(self, rec: SowRecord, position: int) -> _Match:
        try:
            doc: object = orjson.loads(rec.body)
        except orjson.JSONDecodeError:
            doc = None
        values: list[object] = []
        for f in self._order:
            v = _sortable(_walk(doc, f.steps))
            values.append(_Rev(v) if f.desc else v)
        values.append(position)
        return (tuple(values), self._src, rec)

    @property
    def returned(self) -> int:
        """How many records :meth:`results` gives (``top_n`` applied)."""
        return self.matches if self.top_n is None else min(self.matches, self.top_n)

    def results(self) -> Iterator[tuple[Source, SowRecord]]:
        """The matches in order (after the last :meth:`step`), ``top_n`` applied."""
        for src, records in self.batches(CHUNK):
            for rec in records:
                yield src, rec

    def batches(self, size: int) -> Iterator[tuple[Source, list[SowRecord]]]:
        """The matches in order, ``top_n`` applied, as lists of at most ``size`` records
        of one source (a query result is encoded a batch at a time)."""
        sources = self.sources
        left = self.returned
        if self._order:
            merged = heapq.merge(*self._runs, key=_first_two)
            batch: list[SowRecord] = []
            current = -1
            for _, s, rec in itertools.islice(merged, left):
                if s != current or len(batch) >= size:
                    if batch:
                        yield sources[current], batch
                    batch = []
                    current = s
                batch.append(rec)
            if batch:
                yield sources[current], batch
            return
        pending: list[SowRecord] = []
        current = -1
        for s, records in self._plain:
            if s != current and pending:
                yield sources[current], pending
                pending = []
            current = s
            lo = 0
            while lo < len(records) and left > 0:
                take = min(size - len(pending), left, len(records) - lo)
                pending.extend(records[lo : lo + take])
                lo += take
                left -= take
                if len(pending) >= size:
                    yield sources[s], pending
                    pending = []
            if left <= 0:
                break
        if pending:
            yield sources[current], pending


def _first_two(m: _Match) -> tuple[object, ...]:
    """The sort key of a match (its values and position: unique, so ties never reach
    the record)."""
    return m[0]
