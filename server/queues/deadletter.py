"""Dead letters: a message a queue gave up on, as the broker publishes it. No I/O.

A dead letter's body is a JSON object with two members (docs/queues.md "Dead letters")::

    {"dead_letter": {"queue": "work", "topic": "work-in", "bookmark": "H|S|", ...},
     "message": <the original body, byte for byte>}

``dead_letter`` says what happened to the message (:class:`DeadLetter`); ``message`` is
the body as it was published, spliced in unchanged when it is a JSON value, so filters,
SOW keys and queues over the dead-letter topic reach into it with ``/message/...``. A body
that is not JSON is kept lossless as ``message_base64`` instead.

:func:`decode` reads an envelope back (redrive, and the start-up rebuild of a queue,
which takes a dead letter as the removal of its message); it never raises: a body that
is not an envelope is ``None``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import orjson

from spool.server.bookmarks import format_timestamp_us

__all__ = ["DeadLetter", "Redrive", "decode", "encode"]

#: how a dead letter's body starts: what :func:`decode` checks before parsing anything
PREFIX: Final = b'{"dead_letter":'
#: what joins the head and the original body in an envelope
_MEMBER: Final = b',"message":'


@dataclass(frozen=True, slots=True)
class Redrive:
    """Where a dead letter was sent back to (``POST /api/queues/NAME/redrive``).

    Attributes:
        topic: the topic its message was published to again.
        bookmark: the bookmark of that new message.
        at_us: when.
        by: who asked ("" when not known).
    """

    topic: str
    bookmark: str
    at_us: int
    by: str = ""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What happened to a message that left its queue as a dead letter.

    Attributes:
        queue: the queue that gave up on it.
        topic: the topic it was published to.
        bookmark: its bookmark (``H|S|``): the same on every instance.
        seq: its local seq on the instance that gave it up (``instance``).
        instance: the instance that gave it up.
        reason: ``max_deliveries``, ``max_cancels``, ``expired`` or ``rejected``.
        deliveries: how many times it was delivered.
        cancels: how many times a consumer gave it back.
        consumer: the subscription that held it last (``client/sub_id``; "" when none did).
        enqueued_us: when it was recorded (microseconds since the Unix epoch).
        dead_lettered_us: when it left the queue.
        detail: the consumer's reason for a ``reject`` ("" when none was given).
        redriven: where its message was sent back to (None: not yet). A dead letter that
            says so is a later copy of the first, published to mark it: it removes
            nothing from the queue.
    """

    queue: str
    topic: str
    bookmark: str
    seq: int
    instance: str
    reason: str
    deliveries: int
    cancels: int
    consumer: str
    enqueued_us: int
    dead_lettered_us: int
    detail: str = ""
    redriven: Redrive | None = None


def encode(letter: DeadLetter, body: bytes) -> bytes:
    """The dead letter's body: the envelope around the original ``body``."""
    head = orjson.dumps(
        {
            "queue": letter.queue,
            "topic": letter.topic,
            "bookmark": letter.bookmark,
            "seq": letter.seq,
            "instance": letter.instance,
            "reason": letter.reason,
            "deliveries": letter.deliveries,
            "cancels": letter.cancels,
            "consumer": letter.consumer,
            "enqueued": format_timestamp_us(letter.enqueued_us),
            "dead_lettered": format_timestamp_us(letter.dead_lettered_us),
            "detail": letter.detail,
            **_redrive_json(letter.redriven),
        }
    )
    if _is_json(body):
        return PREFIX + head + _MEMBER + body + b"}"
    return PREFIX + head + b',"message_base64":"' + base64.b64encode(body) + b'"}'


def decode(body: bytes) -> tuple[DeadLetter, bytes] | None:
    """The dead letter and the original body of an envelope (None: not one)."""
    if not body.startswith(PREFIX):
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    head = doc.get("dead_letter")
    letter = _letter(head)
    if letter is None:
        return None
    if "message" in doc:
        return letter, _message(body, head, doc["message"])
    encoded = doc.get("message_base64")
    if not isinstance(encoded, str):
        return None
    try:
        return letter, base64.b64decode(encoded, validate=True)
    except ValueError:
        return None


def _letter(head: object) -> DeadLetter | None:
    if not isinstance(head, dict):
        return None
    text = ("queue", "topic", "bookmark", "instance", "reason", "consumer", "detail")
    counts = ("seq", "deliveries", "cancels")
    if not all(isinstance(head.get(k), str) for k in text):
        return None
    if not all(type(head.get(k)) is int and head[k] >= 0 for k in counts):
        return None
    enqueued = _time(head.get("enqueued"))
    gone = _time(head.get("dead_lettered"))
    if enqueued is None or gone is None:
        return None
    redriven = None
    if "redriven" in head:
        redriven = _redrive(head["redriven"])
        if redriven is None:
            return None
    return DeadLetter(
        queue=head["queue"], topic=head["topic"], bookmark=head["bookmark"], seq=head["seq"],
        instance=head["instance"], reason=head["reason"], deliveries=head["deliveries"],
        cancels=head["cancels"], consumer=head["consumer"], enqueued_us=enqueued,
        dead_lettered_us=gone, detail=head["detail"], redriven=redriven,
    )  # fmt: skip


def _redrive_json(redrive: Redrive | None) -> dict[str, object]:
    if redrive is None:
        return {}
    return {
        "redriven": {
            "topic": redrive.topic,
            "bookmark": redrive.bookmark,
            "at": format_timestamp_us(redrive.at_us),
            "by": redrive.by,
        }
    }


def _redrive(value: object) -> Redrive | None:
    if not isinstance(value, dict):
        return None
    topic, bookmark, by = value.get("topic"), value.get("bookmark"), value.get("by")
    at = _time(value.get("at"))
    if not isinstance(topic, str) or not isinstance(bookmark, str) or not isinstance(by, str):
        return None
    if at is None:
        return None
    return Redrive(topic, bookmark, at, by)


def _time(value: object) -> int | None:
    """Microseconds since the Unix epoch of an ISO-8601 UTC time (None: not one)."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    delta = moment.astimezone(UTC) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _is_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True


def _message(body: bytes, head: object, parsed: object) -> bytes:
    """The original body inside envelope ``body``, byte for byte: what follows the head
    as :func:`encode` wrote it (``head`` encoded again gives the same bytes, so the
    message is found without parsing it a second time), up to the closing brace. An
    envelope with another layout gives the parsed value re-encoded."""
    written = orjson.dumps(head)
    end = len(PREFIX) + len(written)
    if body[len(PREFIX) : end] == written and body[end : end + len(_MEMBER)] == _MEMBER:
        return body[end + len(_MEMBER) : -1]
    return orjson.dumps(parsed)
