"""Redrive: a queue's dead letters sent back to be worked again (docs/queues.md
"Redrive").

The dead letters are read from the dead-letter topic's SOW records (a redrive needs the
topic to be a keyed SOW topic: it marks each letter it sends back, and the mark must
replace the letter). For each letter that matches, up to a limit, in store order:

1. its original body is published again, as the broker, to the target (the topic it was
   first published to, or another one), with the original bookmark as its correlation
   id (``x``): the lineage a consumer sees;
2. the letter is published again to the dead-letter topic with ``redriven`` (the new
   message's topic and bookmark, when, by whom): the SOW record now says it was sent
   back, and a later redrive passes it over. A copy with ``redriven`` removes nothing
   from the queue (server/queues/stage.py).

A crash between 1 and 2 leaves the letter unmarked, so a later redrive sends it again: a
redrive is at least once, and the correlation id lets a consumer see the repeat. One
redrive of a queue runs at a time. The reading yields to the event loop every
:data:`_CHUNK` records, so a large dead-letter topic does not stall the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from spool.server.bookmarks import format_bookmark, format_timestamp_us
from spool.server.clock import Clock, time_us
from spool.server.config.model import REDRIVE_MAX, QueueConfig
from spool.server.expr import Filter, MessageView
from spool.server.ports import SowRecord
from spool.server.protocol.errors import ProtocolFailure
from spool.server.queues import deadletter
from spool.server.queues.deadletter import DeadLetter, Redrive
from spool.server.queues.errors import QueueError
from spool.server.stats.source import EventSink
from spool.server.txlog import TransactionLog

__all__ = ["PREVIEW", "RedriveFailed", "RedriveRefused", "Redriven", "Redriver", "letter_dict",
           "select"]  # fmt: skip

#: records read between two yields to the event loop
_CHUNK: Final = 512
#: bytes of a dead letter's message a listing shows
PREVIEW: Final = 256

#: publishes bodies (with correlation ids) to a topic as the broker, in this turn:
#: returns why the pipeline refused
Publish = Callable[[str, Sequence[bytes], Sequence[str]], ProtocolFailure | None]


class RedriveRefused(QueueError):
    """A redrive that cannot run as asked (the admin surface answers 409)."""


class RedriveFailed(QueueError):
    """The log refused a message of a redrive partway (the admin surface answers 503):
    what was sent back before it is kept and marked."""


@dataclass(frozen=True, slots=True)
class Redriven:
    """What a redrive did.

    Attributes:
        queue: the queue.
        matched: dead letters that matched (at most the limit).
        sent: (the original bookmark, the new message's topic and bookmark) per letter
            sent back, in order.
    """

    queue: str
    matched: int
    sent: list[tuple[str, str, str]]

    def to_dict(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "redriven": len(self.sent),
            "messages": [
                {"original": original, "topic": topic, "bookmark": bookmark}
                for original, topic, bookmark in self.sent
            ],
        }


class Redriver:
    """The redrives of an instance's queues.

    Args:
        txlog: the transaction log (the new messages' bookmarks; their durability).
        publish: publishes as the broker (server/brokerpublish.py ``publish_now``).
        recorded: whether the transaction log records a topic.
        events: the event log.
        clock: the redrive time.
    """

    def __init__(
        self,
        txlog: TransactionLog,
        publish: Publish,
        recorded: Callable[[str], bool],
        events: EventSink,
        clock: Clock,
    ) -> None:
        self._txlog = txlog
        self._publish = publish
        self._recorded = recorded
        self._events = events
        self._clock = clock
        self._running: dict[str, asyncio.Lock] = {}

    async def redrive(
        self,
        queue: QueueConfig,
        records: Sequence[SowRecord],
        *,
        matches: Filter | None,
        limit: int,
        target: str | None,
        may_write: Callable[[str], bool],
        by: str = "",
    ) -> Redriven:
        """Send back up to ``limit`` of ``queue``'s dead letters among ``records`` (its
        dead-letter topic's SOW records) that ``matches``, to ``target`` (None: each to
        its own original topic).

        Raises:
            RedriveRefused: a target the log does not record, or the user may not
                publish to (``may_write``).
            RedriveFailed: the log refused a message partway.
        """
        dead = queue.dead_letter
        if dead is None:  # pragma: no cover - the caller checks
            raise RedriveRefused(f"queue {queue.name!r} has no <DeadLetter>")
        if not 1 <= limit <= REDRIVE_MAX:
            raise RedriveRefused(
                f"a redrive sends back 1 to {REDRIVE_MAX} dead letters, not {limit}"
            )
        lock = self._running.setdefault(queue.name, asyncio.Lock())
        async with lock:
            chosen = await select(queue.name, dead.topic, records, matches, limit)
            for topic in sorted({target or letter.topic for letter, _ in chosen}):
                if not self._recorded(topic):
                    raise RedriveRefused(
                        f"the transaction log does not record {topic!r}: a redriven message "
                        "must be recorded (it may be lost otherwise)"
                    )
                if not may_write(topic):
                    raise RedriveRefused(f"this user may not publish to {topic!r}")
            sent: list[tuple[str, str, str]] = []
            try:
                for topic, group in _runs(chosen, target):
                    sent.extend(self._send(dead.topic, topic, group, by))
            finally:
                if sent:
                    await self._txlog.wait_durable(self._txlog.last_seq)
                    self._events.emit(
                        "info", "queue", "dead_letters_redriven", queue=queue.name,
                        dead_letter_topic=dead.topic, redriven=len(sent), by=by or None,
                    )  # fmt: skip
            return Redriven(queue.name, len(chosen), sent)

    def _send(
        self, dead_topic: str, topic: str, group: list[tuple[DeadLetter, bytes]], by: str
    ) -> list[tuple[str, str, str]]:
        """One run of letters to one topic: published there, then marked."""
        txlog = self._txlog
        own = txlog.own_pub_hash
        before = txlog.publisher_last(own)
        failure = self._publish(
            topic, [body for _, body in group], [letter.bookmark for letter, _ in group]
        )
        after = txlog.publisher_last(own)
        if failure is not None or after - before != len(group):
            why = failure.reason if failure is not None else "not all were recorded"
            raise RedriveFailed(f"the log refused the redrive to {topic!r}: {why}")
        now = time_us(self._clock)
        marked: list[bytes] = []
        sent: list[tuple[str, str, str]] = []
        for i, (letter, body) in enumerate(group):
            bookmark = format_bookmark(own, before + 1 + i)
            mark = Redrive(topic=topic, bookmark=bookmark, at_us=now, by=by)
            marked.append(deadletter.encode(replace(letter, redriven=mark), body))
            sent.append((letter.bookmark, topic, bookmark))
        failure = self._publish(dead_topic, marked, [""] * len(marked))
        if failure is not None:
            raise RedriveFailed(
                f"sent back {len(group)} message(s) to {topic!r} but could not mark their "
                f"dead letters: {failure.reason} (a later redrive sends them again)"
            )
        return sent


async def select(
    queue: str,
    dead_topic: str,
    records: Sequence[SowRecord],
    matches: Filter | None,
    limit: int,
    *,
    redriven: bool = False,
) -> list[tuple[DeadLetter, bytes]]:
    """The first ``limit`` dead letters of ``queue`` among ``records`` that were not sent
    back yet (``redriven``: those too) and that ``matches`` (read as the dead letter,
    envelope and all), in store order."""
    out: list[tuple[DeadLetter, bytes]] = []
    for start in range(0, len(records), _CHUNK):
        for rec in records[start : start + _CHUNK]:
            found = deadletter.decode(rec.body)
            if found is None:
                continue
            letter, body = found
            if letter.queue != queue or (letter.redriven is not None and not redriven):
                continue
            if matches is not None and not matches.matches(
                MessageView(dead_topic, rec.body, bookmark=format_bookmark(rec.pub_hash,
                                                                           rec.pub_seq))
            ):  # fmt: skip
                continue
            out.append((letter, body))
            if len(out) >= limit:
                return out
        await asyncio.sleep(0)
    return out


def letter_dict(letter: DeadLetter, body: bytes, preview: int) -> dict[str, object]:
    """A dead letter as ``GET /api/queues/{name}/dead_letters`` lists it: what happened,
    and the first ``preview`` bytes of its message."""
    mark = letter.redriven
    return {
        "bookmark": letter.bookmark, "topic": letter.topic, "reason": letter.reason,
        "deliveries": letter.deliveries, "cancels": letter.cancels,
        "consumer": letter.consumer, "instance": letter.instance,
        "enqueued": format_timestamp_us(letter.enqueued_us),
        "dead_lettered": format_timestamp_us(letter.dead_lettered_us),
        "detail": letter.detail,
        "redriven": None if mark is None else {
            "topic": mark.topic, "bookmark": mark.bookmark,
            "at": format_timestamp_us(mark.at_us), "by": mark.by,
        },
        "data": body[:preview].decode("utf-8", "replace"), "truncated": len(body) > preview,
    }  # fmt: skip


def _runs(
    chosen: list[tuple[DeadLetter, bytes]], target: str | None
) -> list[tuple[str, list[tuple[DeadLetter, bytes]]]]:
    """The letters in runs of one target topic, in order."""
    runs: list[tuple[str, list[tuple[DeadLetter, bytes]]]] = []
    for letter, body in chosen:
        topic = target or letter.topic
        if runs and runs[-1][0] == topic:
            runs[-1][1].append((letter, body))
        else:
            runs.append((topic, [(letter, body)]))
    return runs
