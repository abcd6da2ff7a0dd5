"""Transaction-log record values (the codec that writes and reads them lives beside them).

A :class:`Record` is one entry of the journal: a message as the instance recorded it. The
local ``seq`` is this instance's order (delivery order); ``(pub_hash, pub_seq)`` is the
bookmark, the same on every replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from spool.server.bookmarks import format_bookmark

#: ``Record.flags`` bit: the record was appended below its publisher's highest sequence,
#: filling a gap (server/txlog/publishers/gaps.py): a message that reached this instance late, by
#: another replication route. Its publisher's sequences no longer increase along the log
#: there, so the bookmark index files it under :func:`index_key` instead, which keeps the
#: publisher's own ranges increasing (lookups try both).
FLAG_LATE: Final = 0x0001
#: what a late record's publisher id is combined with to give its index key
_LATE_SALT: Final = 0x9E3779B97F4A7C15
#: ``Record.flags`` bit of a :attr:`RecordKind.LOST` placeholder whose records are not
#: waited for any more: an operator released its fence (the loss is accepted) or they
#: reached the log again elsewhere. Readers pass over such a placeholder; one without the
#: bit stands for records that are damaged and fenced (server/txlog/damage/fences.py).
FLAG_RELEASED: Final = 0x0002
#: the bookmark-index key the placeholders of fenced records are indexed under, with their
#: own seq as their sequence: a journal's index then says where its fences are without a
#: record being read (its publisher summary, its ranges)
LOST_KEY: Final = 0x4C4F53545245434F
#: the bookmark-index key :attr:`RecordKind.DUE` records are indexed under, with their own
#: seq as their sequence (as placeholders are under :data:`LOST_KEY`): a due record
#: repeats the bookmark of its :attr:`RecordKind.SCHEDULED` record, written when it fell
#: due, so under its publisher's key it would break the rule that a publisher's
#: sequences increase along the log
DUE_KEY: Final = 0x4455455245435244


def is_publisher_key(key: int) -> bool:
    """Whether an index key stands for a publisher (its own key or its late key), rather
    than for records filed under their seq: fence placeholders (:data:`LOST_KEY`) and due
    records (:data:`DUE_KEY`). Whatever reads index keys as publishers (their highest
    sequences, their gaps, what a fence lacks of them) skips the others."""
    return key != LOST_KEY and key != DUE_KEY


def late_key(pub_hash: int) -> int:
    """The bookmark-index key of a publisher's late records."""
    return pub_hash ^ _LATE_SALT


def index_key(pub_hash: int, flags: int) -> int:
    """The publisher id a record is indexed under (its own, or :func:`late_key`)."""
    return pub_hash ^ _LATE_SALT if flags & FLAG_LATE else pub_hash


def publisher_of(key: int) -> tuple[int, int]:
    """The two publishers an index key may stand for: itself, and the publisher whose
    late key it is (an index range does not say which; one of them never published)."""
    return key, key ^ _LATE_SALT


#: separates a SOW key from the message's lifetime in a record's SOW key field
SOW_FIELD_SEPARATOR: Final = "\x1e"
#: separates a scheduled record's due time from the SOW key field it would have had
SCHEDULE_SEPARATOR: Final = "\x1d"


class RecordKind(IntEnum):
    """What a record stands for. Values are stored on disk: never renumber."""

    PUBLISH = 1
    DELTA_PUBLISH = 2
    SOW_DELETE = 3
    QUEUE_ACK = 4
    QUEUE_TRANSFER = 5
    #: a placeholder for one local seq whose record is damaged or missing: the seq stays
    #: taken, and a repair writes the record back in its place (server/txlog/damage/fences.py);
    #: never replicated, never delivered
    LOST = 6
    #: a message published for delivery at a due time: recorded (and acknowledged) at
    #: once, never delivered itself; its SOW key field starts with the due time
    #: (:func:`schedule_field`)
    SCHEDULED = 7
    #: that message at its due time: a copy with the same bookmark, written by each
    #: instance that holds the scheduled record, and what is delivered; never replicated,
    #: indexed under :data:`DUE_KEY`
    DUE = 8


#: The record kinds delivered as messages, wherever the log is read or a stage decides by
#: kind: live subscribers, bookmark replays and catch-up reads, SOW stores (the record
#: puts its key), queues (it enters them), on-publish actions. A :attr:`RecordKind.DUE`
#: record is one, at its own position in the log; its :attr:`RecordKind.SCHEDULED`
#: record is not (nor are deletes, a queue's events and placeholders). Plain ints, so
#: that a batch's kinds (``RecordBatch.kinds()``) and a record's compare alike. Every
#: such reader takes its kinds from here: a new kind that is a message is added here
#: once.
MESSAGE_KINDS: Final[frozenset[int]] = frozenset(
    {int(RecordKind.PUBLISH), int(RecordKind.DELTA_PUBLISH), int(RecordKind.DUE)}
)


@dataclass(frozen=True, slots=True)
class Record:
    """One journal entry.

    Attributes:
        seq: local sequence, 1-based, contiguous within an instance's log.
        timestamp_us: server time the record was appended (microseconds since the Unix epoch).
        pub_hash: 64-bit publisher id (hash of the publishing client's name).
        pub_seq: the publisher's sequence number.
        topic: topic name.
        message_type: e.g. ``json``.
        kind: see :class:`RecordKind`.
        path: instance names the message travelled through (replication), origin first.
        flags: bit flags: :data:`FLAG_LATE`; the others are reserved.
        body: the message body, byte for byte as published.
        corr_id: the publisher's correlation id (``x``), passed through untouched.
        sow_key: the SOW key field: for a record of a SOW topic its key, followed by
            :data:`SOW_FIELD_SEPARATOR` and its lifetime in seconds when the message gave
            one (``e``); see :func:`sow_key_field` and :func:`split_sow_key_field`. A
            :attr:`RecordKind.SCHEDULED` record's holds its due time before that field
            (:func:`schedule_field`).
    """

    seq: int
    timestamp_us: int
    pub_hash: int
    pub_seq: int
    topic: str
    message_type: str
    kind: RecordKind
    path: tuple[str, ...]
    flags: int
    body: bytes
    corr_id: str = ""
    sow_key: str = ""

    @property
    def bookmark(self) -> str:
        """The wire bookmark ``PUBHASH|PUBSEQ|`` (docs/protocol.md)."""
        return format_bookmark(self.pub_hash, self.pub_seq)


def sow_key_field(key: str, expiration: int | None = None) -> str:
    """The SOW key field of a record: the key, and the message's ``e`` when it had one.

    The record format has no field of its own for a message's lifetime, and a SOW record
    must keep it for the transaction log to stay the truth (a store rebuilt from the log
    expires the record when it would have expired). A key never contains the separator:
    the SOW refuses keys with control characters.
    """
    if expiration is None:
        return key
    return f"{key}{SOW_FIELD_SEPARATOR}{expiration}"


def split_sow_key_field(field: str) -> tuple[str, int | None]:
    """``(key, expiration seconds or None)`` of a SOW key field (:func:`sow_key_field`)."""
    key, sep, rest = field.partition(SOW_FIELD_SEPARATOR)
    if not sep or not rest.isdigit():
        return (field, None) if not sep else (key, None)
    return key, int(rest)


def schedule_field(due_us: int, field: str) -> str:
    """The SOW key field of a :attr:`RecordKind.SCHEDULED` record: its due time
    (microseconds since the Unix epoch) and the field the message would have had
    otherwise (:func:`sow_key_field`; empty for a topic without a SOW).

    The record format has no field of its own for a due time; the body stays the body,
    so whatever reads it (filters, SOW keys) reads it unchanged. The due time is a plain
    decimal number, so it never contains the separator.

    Raises:
        ValueError: ``due_us`` is negative.
    """
    if due_us < 0:
        raise ValueError(f"a due time cannot be negative: {due_us}")
    return f"{due_us}{SCHEDULE_SEPARATOR}{field}"


def split_schedule_field(field: str) -> tuple[int, str]:
    """``(due_us, the SOW key field)`` of a :attr:`RecordKind.SCHEDULED` record's field:
    the inverse of :func:`schedule_field`, and only of it.

    Raises:
        ValueError: ``field`` is not one :func:`schedule_field` writes: no separator, or
            not a due time before it (digits only, no sign and no leading zero).
    """
    due, sep, rest = field.partition(SCHEDULE_SEPARATOR)
    if not sep or not due.isascii() or not due.isdigit() or (len(due) > 1 and due[0] == "0"):
        raise ValueError(f"not the field of a scheduled record: {field[:40]!r}")
    return int(due), rest
