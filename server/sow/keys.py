"""SOW keys: what makes two messages "the same record" of a SOW topic (sans-I/O).

A topic with ``<Key>`` paths derives a record's key from the values at those paths of its
JSON body, in order; a topic without any takes the publisher's ``k`` header, and without
one a digest of the body (the body is its own identity: publishing it twice stores it
once). The rules, written down in docs/sow.md "Keys":

- a key value must be a string, a number or a boolean; a missing field, ``null``, an
  object or an array refuses the message (``invalid message``);
- one path: the value's text (a string as it is, a number or boolean as JSON writes it);
  several paths: their texts joined by ``|``, with ``\\`` and ``|`` inside strings
  escaped by a backslash, so different tuples never give the same key;
- control characters in a key are written ``\\u00XX``: a key never contains one, which is
  what lets a log record carry a message's lifetime after its key
  (:func:`spool.server.txlog.format.record.sow_key_field`);
- a ``k`` header on a topic with ``<Key>`` paths must equal the key the body gives.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

import orjson

from spool.server.protocol.errors import InvalidMessage

__all__ = ["MAX_KEY_CHARS", "KeySpec", "check_given_key"]

#: longest key accepted (the log's key field holds 65,535 bytes; keys are for people too)
MAX_KEY_CHARS: Final = 4096
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPE_MULTI: Final = re.compile(r"[\x00-\x1f\x7f\\|]")

Scalar = str | int | float | bool


def _escape_control(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in "\\|":
        return "\\" + ch
    return f"\\u{ord(ch):04x}"


def _text(value: Scalar) -> str:
    if type(value) is str:
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    return orjson.dumps(value).decode()


def check_given_key(key: str, topic: str) -> str:
    """A ``k`` header as a key: not empty, not too long, no control character.

    Raises:
        InvalidMessage: the key cannot be one.
    """
    if not key:
        raise InvalidMessage(f"an empty SOW key ('k') for topic {topic!r}")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidMessage(f"a SOW key longer than {MAX_KEY_CHARS} characters")
    if _CONTROL.search(key) is not None:
        raise InvalidMessage("a SOW key ('k') cannot contain control characters")
    return key


class KeySpec:
    """How one SOW topic's records get their keys.

    Args:
        topic_rule: the rule's name, for messages.
        paths: the ``<Key>`` paths (``/a/b``); empty for topics keyed by ``k`` or digest.
    """

    __slots__ = ("_multi", "_single", "_steps", "paths", "topic_rule")

    def __init__(self, topic_rule: str, paths: tuple[str, ...]) -> None:
        self.topic_rule = topic_rule
        self.paths = paths
        self._steps: tuple[tuple[str, ...], ...] = tuple(
            tuple(p.strip("/").split("/")) for p in paths
        )
        self._multi = len(paths) > 1
        # the usual case, one top-level field: a dict lookup instead of a walk
        self._single = self._steps[0][0] if len(paths) == 1 and len(self._steps[0]) == 1 else None

    @property
    def steps(self) -> tuple[tuple[str, ...], ...]:
        """The key paths as steps (``("order", "id")`` for ``/order/id``)."""
        return self._steps

    @property
    def derived(self) -> bool:
        """Whether keys come from the body's fields (``<Key>`` paths configured)."""
        return bool(self.paths)

    def key(self, topic: str, body: bytes, given: str | None) -> str:
        """The key of a message published to ``topic`` with ``k`` = ``given``.

        Raises:
            InvalidMessage: the body does not give a key (not a JSON object, a key field
                missing or not a scalar), or ``given`` contradicts it.
        """
        if not self.paths:
            if given:
                return check_given_key(given, topic)
            return hashlib.blake2b(body, digest_size=16).hexdigest()
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise InvalidMessage(
                f"the body of a message to SOW topic {topic!r} is not JSON (its key is "
                f"read from {', '.join(self.paths)})"
            ) from None
        if type(doc) is not dict:
            raise InvalidMessage(f"the body of a message to SOW topic {topic!r} is not an object")
        key = self.key_of(topic, doc)
        if given and given != key:
            raise InvalidMessage(
                f"'k' {given[:80]!r} contradicts the key {key[:80]!r} that "
                f"{', '.join(self.paths)} give"
            )
        return key

    def try_key(self, topic: str, body: bytes) -> str | None:
        """The key the body gives, or None when it gives none (recovery, re-keying)."""
        try:
            return self.key(topic, body, None)
        except InvalidMessage:
            return None

    def key_of(self, topic: str, doc: dict[str, object]) -> str:
        """The key of a parsed body (see :meth:`key`)."""
        single = self._single
        if single is not None:
            value = doc.get(single)
            if isinstance(value, str):
                if len(value) <= MAX_KEY_CHARS and value.isprintable():
                    return value  # the common case: nothing to escape
            elif type(value) is int:
                return str(value)  # what JSON writes for it
            return self._finish(topic, [self._scalar(topic, 0, value)])
        parts = [
            self._scalar(topic, i, self._walk(doc, steps)) for i, steps in enumerate(self._steps)
        ]
        return self._finish(topic, parts)

    @staticmethod
    def _walk(doc: object, steps: tuple[str, ...]) -> object:
        value = doc
        for step in steps:
            if type(value) is not dict:
                return None
            value = value.get(step)
        return value

    def _scalar(self, topic: str, i: int, value: object) -> str:
        if value is None:
            raise InvalidMessage(
                f"a message to SOW topic {topic!r} has no value at {self.paths[i]} (a key field)"
            )
        if type(value) not in (str, int, float, bool):
            raise InvalidMessage(
                f"the key field {self.paths[i]} of a message to SOW topic {topic!r} is "
                f"{type(value).__name__}, not a string, number or boolean"
            )
        return _text(value)  # type: ignore[arg-type]

    def _finish(self, topic: str, parts: list[str]) -> str:
        if self._multi:
            key = "|".join(_ESCAPE_MULTI.sub(_escape_control, p) for p in parts)
        else:
            key = _CONTROL.sub(_escape_control, parts[0])
        if len(key) > MAX_KEY_CHARS:
            raise InvalidMessage(
                f"the key of a message to SOW topic {topic!r} is longer than {MAX_KEY_CHARS} characters"
            )
        return key
