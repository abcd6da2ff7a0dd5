"""Conflation on the replay timeline: the ``conflation`` and ``conflation_key`` options
(pure).

Windows open and close on the records' own timestamps while replaying and on the wall
clock once live, so the same :class:`Conflator` serves both and is tested with no clock.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Hashable, Sequence

import orjson

from spool.server.txlog.format.record import Record


@dataclasses.dataclass(slots=True, eq=False)
class _Window:
    key: Hashable
    first: Record
    last: Record
    close_us: int
    closed: bool = False

    def result(self) -> Record:
        """The last body, under the first message's bookmark and log position."""
        if self.first is self.last:
            return self.first
        return dataclasses.replace(
            self.last,
            seq=self.first.seq,
            pub_hash=self.first.pub_hash,
            pub_seq=self.first.pub_seq,
        )


class Conflator:
    """Conflation on the replay timeline (pure).

    The first record of a key opens a window ``[ts, ts + interval)`` on the records'
    timestamps; later records of that key inside it replace its body. When the timeline
    passes the window's end (a later record, or the wall clock once the cursor is live),
    it emits one record: the **last** body (and its ``ts``), carrying the **first**
    record's bookmark and seq, so a client's resume point never skips a message it has
    not seen. Output keeps log order of the first records: a record that conflates with
    nothing waits behind earlier open windows.

    The key is the topic plus the values at the ``conflation_key`` paths (``/a/b``, list
    indexes allowed) of the JSON body; without paths it is the topic plus the record's SOW
    key. A record whose key cannot be read (a missing field, a body that is not JSON, no
    SOW key) is delivered unconflated. ``accept`` (the subscription's topic and filter)
    runs before conflation, so a window only holds messages the subscriber wants.
    """

    def __init__(
        self,
        interval: float,
        keys: Sequence[str] = (),
        accept: Callable[[Record], bool] | None = None,
    ) -> None:
        self._interval_us = max(1, round(interval * 1_000_000))
        self._paths = tuple(tuple(p.strip("/").split("/")) for p in keys)
        self._accept = accept
        self._open: dict[Hashable, _Window] = {}
        self._queue: deque[_Window | Record] = deque()
        self._timeline_us: int | None = None

    @property
    def pending(self) -> int:
        """Windows and records held back."""
        return len(self._queue)

    @property
    def next_close_us(self) -> int | None:
        """When the oldest held window closes (the next moment output can appear)."""
        if self._queue:
            head = self._queue[0]
            if isinstance(head, _Window) and not head.closed:
                return head.close_us
        return None

    def push(self, rec: Record) -> list[Record]:
        """Take the next record of the timeline; return the records now ready."""
        ts = rec.timestamp_us
        if self._timeline_us is None or ts > self._timeline_us:
            self._timeline_us = ts
        if self._accept is None or self._accept(rec):
            key = self._key(rec)
            if key is None:
                self._queue.append(rec)
            else:
                window = self._open.get(key)
                if window is not None and ts < window.close_us:
                    window.last = rec
                else:
                    if window is not None:
                        window.closed = True
                    window = _Window(key, rec, rec, ts + self._interval_us)
                    self._open[key] = window
                    self._queue.append(window)
        return self._ready(self._timeline_us)

    def advance(self, now_us: int) -> list[Record]:
        """The timeline reached ``now_us`` with no record (a live cursor, idle)."""
        if self._timeline_us is None or now_us > self._timeline_us:
            self._timeline_us = now_us
        return self._ready(self._timeline_us)

    def flush(self) -> list[Record]:
        """Everything held, in order (the range ended)."""
        out = [e.result() if isinstance(e, _Window) else e for e in self._queue]
        self._queue.clear()
        self._open.clear()
        return out

    def _ready(self, now_us: int) -> list[Record]:
        out: list[Record] = []
        queue = self._queue
        while queue:
            head = queue[0]
            if isinstance(head, _Window):
                if not head.closed and head.close_us > now_us:
                    break
                if self._open.get(head.key) is head:
                    del self._open[head.key]
                out.append(head.result())
            else:
                out.append(head)
            queue.popleft()
        return out

    def _key(self, rec: Record) -> Hashable | None:
        if not self._paths:
            return (rec.topic, rec.sow_key) if rec.sow_key else None
        try:
            doc = orjson.loads(rec.body)
        except orjson.JSONDecodeError:
            return None
        values: list[bytes] = [rec.topic.encode()]
        for path in self._paths:
            value = doc
            for part in path:
                if isinstance(value, dict) and part in value:
                    value = value[part]
                elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                    value = value[int(part)]
                else:
                    return None
            values.append(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
        return tuple(values)
