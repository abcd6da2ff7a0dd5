"""Client commands and server acks (docs/protocol.md "Commands from a client", "Acks"), sans-I/O.

:func:`decode_command` turns a decoded :class:`~spool.server.protocol.frame.Message` into a typed
:class:`Command`, validating every header field's type once, so the engine never has to
guess; it reads the options (``o``) once too, into :class:`CommandOptions`.
:func:`encode_ack` builds ack messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

import orjson

from spool.server import speedups
from spool.server.protocol.errors import InvalidCommand, InvalidMessage, InvalidOptions
from spool.server.protocol.frame import Message
from spool.server.protocol.options import (
    DEFAULT_OPTIONS,
    PublishOptions,
    SubscribeOptions,
    parse_publish_options,
    parse_subscribe_options,
    split_items,
)

CommandName = Literal[
    "logon",
    "publish",
    "delta_publish",
    "subscribe",
    "delta_subscribe",
    "sow",
    "sow_and_subscribe",
    "sow_and_delta_subscribe",
    "sow_delete",
    "unsubscribe",
    "heartbeat",
    "flush",
]

COMMANDS: Final[frozenset[str]] = frozenset(get_args(CommandName))

ACK_KINDS: Final[frozenset[str]] = frozenset(
    {"received", "processed", "persisted", "completed", "stats"}
)

#: commands that need a topic
_NEEDS_TOPIC: Final[frozenset[str]] = frozenset(
    {
        "publish",
        "delta_publish",
        "subscribe",
        "delta_subscribe",
        "sow",
        "sow_and_subscribe",
        "sow_and_delta_subscribe",
        "sow_delete",
    }
)

_STR_FIELDS: Final = (
    "t",
    "sub_id",
    "qid",
    "bm",
    "o",
    "f",
    "client_name",
    "user_id",
    "pw",
    "version",
    "k",
    "x",
    "orderby",
)
_INT_FIELDS: Final = ("s", "bs", "top_n", "max_msgs", "e")


_STR, _INT, _SECONDS = 1, 2, 3
_FIELD_KINDS: Final[dict[str, int]] = {
    **dict.fromkeys(_STR_FIELDS, _STR),
    **dict.fromkeys(_INT_FIELDS, _INT),
    "hb": _SECONDS,
}
_ACK_CACHE: dict[str, frozenset[str]] = {}


def _parse_acks(text: str, cid: str | None) -> frozenset[str]:
    """The ack kinds of an ``a`` field (cached: clients send the same few strings)."""
    acks = _ACK_CACHE.get(text)
    if acks is not None:
        return acks
    parts = frozenset(p.strip() for p in text.split(",") if p.strip())
    unknown = parts - ACK_KINDS
    if unknown:
        raise CommandError(f"unknown ack type {sorted(unknown)[0]!r}", cid)
    if len(_ACK_CACHE) < 256:
        _ACK_CACHE[text] = parts
    return parts


class CommandError(InvalidMessage):
    """A message whose header is well-formed JSON but not a valid command.

    Attributes:
        cid: the command id, when present, so the failure ack can name the command.
    """

    def __init__(self, detail: str, cid: str | None) -> None:
        super().__init__(detail)
        self.cid = cid


class UnknownCommand(InvalidCommand):
    """The ``c`` field names no command of the protocol."""

    def __init__(self, detail: str, cid: str | None) -> None:
        super().__init__(detail)
        self.cid = cid


@dataclass(frozen=True, slots=True)
class CommandOptions:
    """A command's options (``o``), read once by :func:`decode_command`.

    The text is a comma-separated list of ``name`` or ``name=value`` items; commas inside
    ``[...]`` stay in their item (``conflation_key=[/a,/b]``) and empty items are ignored
    (docs/protocol.md "Subscribe options"). Reading never fails: text that is not valid
    subscribe options keeps why (:attr:`problem`), and :meth:`subscribe` raises it when a
    handler asks for them, so every handler keeps its own order of checks. Options with
    a grammar of their own (``o=cancel`` of a queue's ``sow_delete``) are read from
    :attr:`items` and :attr:`names`, never by searching the text; a publish's by
    :meth:`publish`.

    Attributes:
        text: the ``o`` header as received (None: not given).
        items: the items, stripped, in order.
        names: each item's name (the part before any ``=``, stripped).
        parsed: the subscribe options (server/protocol/options.py), None when the text
            is not valid subscribe options.
        problem: why it is not ("" when it is), the ``invalid options`` detail.
    """

    text: str | None
    items: tuple[str, ...]
    names: frozenset[str]
    parsed: SubscribeOptions | None
    problem: str

    def subscribe(self) -> SubscribeOptions:
        """The subscribe options (``subscribe``, ``sow``, ``sow_and_subscribe``, ...).

        Raises:
            InvalidOptions: the text is not valid subscribe options.
        """
        if self.parsed is None:
            raise InvalidOptions(self.problem)
        return self.parsed

    def publish(self) -> PublishOptions:
        """The publish options (``publish``, ``delta_publish``; docs/protocol.md "Publish
        options"), read from :attr:`text` when asked: a publish with ``o`` is rare, and
        :attr:`parsed` holds what the text means to a subscribe.

        Raises:
            InvalidOptions: the text is not valid publish options.
        """
        return parse_publish_options(self.text)

    @property
    def replace(self) -> bool:
        """Valid subscribe options that name ``replace``."""
        return self.parsed is not None and self.parsed.replace


#: the options of a command without ``o``
NO_OPTIONS: Final = CommandOptions(None, (), frozenset(), DEFAULT_OPTIONS, "")


def read_options(text: str | None) -> CommandOptions:
    """Read an ``o`` header once (:class:`CommandOptions`); never raises."""
    if text is None:
        return NO_OPTIONS
    items = tuple(split_items(text, strict=False))
    names = frozenset(item.partition("=")[0].strip() for item in items)
    try:
        return CommandOptions(text, items, names, parse_subscribe_options(text), "")
    except InvalidOptions as exc:
        return CommandOptions(text, items, names, None, exc.detail)


@dataclass(slots=True)
class Command:
    """A validated client command. Absent optional fields are ``None``.

    ``options`` is the ``o`` header as received; ``opts`` is the same, read once
    (:class:`CommandOptions`): handlers use ``opts``.
    """

    name: str
    cid: str | None
    acks: frozenset[str]
    topic: str | None
    sub_id: str | None
    query_id: str | None
    bookmark: str | None
    options: str | None
    filter: str | None
    seq: int | None
    body: bytes
    header: dict[str, Any]
    opts: CommandOptions

    def field(self, key: str) -> Any:
        """Any other header field, as received (already type-checked where known)."""
        return self.header.get(key)


def _str_cid(header: dict[str, Any]) -> str | None:
    cid = header.get("cid")
    if cid is None:
        return None
    if isinstance(cid, str):
        return cid
    if isinstance(cid, int) and not isinstance(cid, bool):
        return str(cid)
    return None


def decode_command(msg: Message) -> Command:
    """Validate a message as a command.

    Raises:
        UnknownCommand: ``c`` is missing or names no command (``invalid command``).
        CommandError: a field has the wrong type or a required field is missing
            (``invalid message``).
    """
    h = msg.header
    cid = _str_cid(h)
    if "cid" in h and cid is None:
        raise CommandError("'cid' must be a string or an integer", None)
    name = h.get("c")
    if not isinstance(name, str) or name not in COMMANDS:
        raise UnknownCommand(f"unknown command {name!r}", cid)
    # walk the header's own keys (a publish has four or five) instead of every known field
    for key, value in h.items():
        kind = _FIELD_KINDS.get(key)
        if kind is None or value is None:
            continue
        if kind == _STR:
            if not isinstance(value, str):
                raise CommandError(f"'{key}' must be a string", cid)
        elif kind == _INT:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise CommandError(f"'{key}' must be a non-negative integer", cid)
        elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise CommandError("'hb' must be a non-negative number of seconds", cid)
    ack_field = h.get("a")
    acks: frozenset[str] = frozenset()
    if ack_field is not None:
        if not isinstance(ack_field, str):
            raise CommandError("'a' must be a comma-separated string", cid)
        acks = _parse_acks(ack_field, cid)
    topic = h.get("t")
    if name in _NEEDS_TOPIC and not topic:
        raise CommandError(f"'{name}' needs a topic 't'", cid)
    options = h.get("o")
    return Command(
        name=name,
        cid=cid,
        acks=acks,
        topic=topic,
        sub_id=h.get("sub_id"),
        query_id=h.get("qid"),
        bookmark=h.get("bm"),
        options=options,
        filter=h.get("f"),
        seq=h.get("s"),
        body=msg.body,
        header=h,
        opts=read_options(options),
    )


def encode_ack(
    kind: str,
    *,
    cid: str | None = None,
    status: str = "success",
    reason: str | None = None,
    **fields: Any,
) -> bytes:
    """One ack message (header only, ``l`` 0 so it can sit anywhere in a batched frame)."""
    header: dict[str, Any] = {"c": "ack", "a": kind}
    if cid is not None:
        header["cid"] = cid
    header["status"] = status
    if reason is not None:
        header["reason"] = reason
    for key, value in fields.items():
        if value is not None:
            header[key] = value
    header["l"] = 0
    return orjson.dumps(header)


@dataclass(slots=True)
class PublishScan:
    """A run of plain publishes to one topic, read straight off a frame's headers.

    Attributes:
        topic: their topic.
        seqs: per message, the ``s`` given, or None.
        bodies: per message, the body.
        acks: (index in the run, ack kinds, cid) of the messages that asked for acks.
        end: index (in the frame's message list) of the first message after the run.
    """

    topic: str
    seqs: list[int | None]
    bodies: list[bytes]
    acks: list[tuple[int, frozenset[str], str | None]]
    end: int


def take_publish_run_py(msgs: list[Message], start: int) -> PublishScan | None:
    """The run of *plain* publishes to one topic at ``msgs[start:]``, or None.

    The pure-Python implementation and the oracle of the compiled loop
    (``_commands_c.pyx``, :mod:`spool.server.speedups`); :func:`take_publish_run` is the one
    selected.

    The publish hot path: a publisher's frame usually holds many publishes to one topic,
    and :func:`decode_command` per message costs more than the rest of the publish.
    A publish is plain when its header holds only ``c``, ``t``, ``l``, ``s``, ``a`` (an
    ack string already validated once by :func:`decode_command`) and ``cid``, each of the
    type :func:`decode_command` requires; anything else (a correlation id, a SOW key, a
    bad field, an unknown ack string) ends the run before that message, and
    :func:`decode_command` then gives it its exact meaning or failure. The type rules
    are :func:`decode_command`'s: a message this function takes is one that
    :func:`decode_command` accepts as the same publish.
    """
    n = len(msgs)
    h = msgs[start].header
    if h.get("c") != "publish":
        return None
    topic = h.get("t")
    if type(topic) is not str or not topic:
        return None
    seqs: list[int | None] = []
    bodies: list[bytes] = []
    acks: list[tuple[int, frozenset[str], str | None]] = []
    j = start
    while j < n:
        msg = msgs[j]
        h = msg.header
        if h.get("c") != "publish" or h.get("t") != topic:
            break
        kinds: frozenset[str] | None = None
        cid: str | None = None
        s: int | None = None
        plain = True
        for key, value in h.items():
            if key == "c" or key == "t" or key == "l" or value is None:
                continue
            if key == "s":
                if type(value) is not int or value < 0:
                    plain = False
                    break
                s = value
            elif key == "a":
                if type(value) is not str:
                    plain = False
                    break
                kinds = _ACK_CACHE.get(value)
                if kinds is None:
                    plain = False
                    break
            elif key == "cid":
                if type(value) is str:
                    cid = value
                elif type(value) is int:
                    cid = str(value)
                else:
                    plain = False
                    break
            else:
                plain = False
                break
        if not plain:
            break
        if kinds:
            acks.append((j - start, kinds, cid))
        seqs.append(s)
        bodies.append(msg.body)
        j += 1
    if j == start:
        return None
    return PublishScan(topic, seqs, bodies, acks, j)


def _take_publish_run_c(msgs: list[Message], start: int) -> PublishScan | None:
    """:func:`take_publish_run_py` with its loop compiled."""
    scan = _scan_c(msgs, start, _ACK_CACHE, PublishScan)
    assert scan is None or type(scan) is PublishScan
    return scan


try:
    from spool.server.protocol._commands_c import take_publish_run as _scan_c
except ImportError:  # not built: speedups.status() says why
    _scan_c = None  # type: ignore[assignment]

take_publish_run: Callable[[list[Message], int], PublishScan | None] = (
    _take_publish_run_c if speedups.ENABLED and _scan_c is not None else take_publish_run_py
)
