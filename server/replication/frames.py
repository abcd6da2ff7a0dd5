"""The replication wire format: messages as bytes and back, with no I/O.

A link is a byte stream (carried in websocket messages, but any framing of the stream is
the same stream: a websocket message may hold several protocol messages, or part of one).
Each protocol message is::

    u32 length   bytes that follow (type byte + payload), at most MAX_MESSAGE
    u8  type     MessageType, with COMPRESSED (0x80) set on a zstd-compressed DATA
    ...          payload

Control messages (``hello``, ``welcome``, ``refuse``, ``stream``) carry a JSON object;
``ack`` a u64; ``data`` a binary batch of records::

    u64 upto     the source has examined its log up to this local seq (acks name it)
    u32 count    records that follow
    records      (zstd-compressed as a whole when the type has COMPRESSED)

    record (little-endian):
    u64 source_seq  i64 timestamp_us  u64 pub_hash  u64 pub_seq  u8 kind  u8 path_count
    u16 topic_len   u16 corr_len      u16 key_len   u32 body_len
    topic, path (each entry: u8 length + UTF-8), correlation id, SOW key, body

Records go as the source's log holds them (its seq and time, the publisher's bookmark,
the path so far); the receiver appends the sender to the path and records them in its own
log with its own seq and time.

Errors: anything malformed raises :class:`~server.replication.errors.ReplicationProtocolError`
with what was wrong; the protocol object (server/replication/protocol.py) turns it into a
refusal and closes the link.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

import orjson

from server.replication.errors import ReplicationProtocolError
from server.txlog.record import RecordKind

__all__ = [
    "COMPRESSED",
    "MAX_MESSAGE",
    "PROTOCOL_VERSION",
    "Ack",
    "Data",
    "FrameParser",
    "Hello",
    "Holdings",
    "Message",
    "MessageType",
    "Records",
    "RecordsWriter",
    "Refuse",
    "Stream",
    "Welcome",
    "decode_records",
    "encode",
]

PROTOCOL_VERSION: Final = 1
#: largest message accepted (a batch is far smaller; a single huge record is not)
MAX_MESSAGE: Final = 64 << 20
#: type bit of a DATA message whose records are zstd-compressed
COMPRESSED: Final = 0x80

_PREFIX: Final = struct.Struct("<IB")
_U64: Final = struct.Struct("<Q")
_DATA_HEAD: Final = struct.Struct("<QI")
_RECORD: Final = struct.Struct("<QqQQBBHHHI")
_KINDS: Final = frozenset(int(k) for k in RecordKind)


class MessageType(IntEnum):
    HELLO = 1
    WELCOME = 2
    REFUSE = 3
    STREAM = 4
    DATA = 5
    ACK = 6


#: what a destination holds per publisher: pub_hash -> (highest, gap intervals)
Holdings = dict[int, tuple[int, list[tuple[int, int]]]]


@dataclass(frozen=True, slots=True)
class Hello:
    """Source -> destination, first: who is connecting and what it expects.

    Attributes:
        version: the protocol version.
        name: the source instance's Name.
        group: the source instance's Group.
        destination: the source's name for this destination.
        expect_group: the Group the source's configuration says the destination has.
        user: the user to log on as (destination with ``<Users>``), or None.
        secret: the user's password or token (never logged).
        compression: ``zstd`` when the source will compress its data messages.
        validation: the source's configuration summary (server/replication/validation.py).
    """

    version: int
    name: str
    group: str
    destination: str
    expect_group: str
    user: str | None
    secret: str | None = field(repr=False)
    compression: str | None
    validation: dict[str, object]


@dataclass(frozen=True, slots=True)
class Welcome:
    """Destination -> source: accepted; what it holds and how it is configured.

    Attributes:
        version: the protocol version.
        name: the destination instance's Name.
        group: its Group.
        log_id: the identity of its transaction log (changes when the log starts over).
        holdings: what it holds per publisher (the resync starts from what it lacks).
        validation: its configuration summary.
    """

    version: int
    name: str
    group: str
    log_id: str
    holdings: Holdings
    validation: dict[str, object]


@dataclass(frozen=True, slots=True)
class Refuse:
    """Either side: the link cannot go on (a reason string and an operator's detail)."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Stream:
    """Source -> destination: validation passed; records follow from ``start``.

    Attributes:
        start: the first local seq the source reads (the resync point).
        source_last: the source's last durable seq when the stream began.
    """

    start: int
    source_last: int


@dataclass(frozen=True, slots=True)
class Data:
    """Source -> destination: records, and how far the source examined its log.

    Attributes:
        upto: every record of the source's log up to this seq was examined (sent or not
            for this destination); acking ``upto`` covers them all.
        count: how many records ``payload`` holds.
        payload: the encoded records (:func:`decode_records`), compressed or not.
        compressed: ``payload`` is zstd-compressed.
    """

    upto: int
    count: int
    payload: bytes
    compressed: bool = False


@dataclass(frozen=True, slots=True)
class Ack:
    """Destination -> source: everything up to ``position`` is durable here."""

    position: int


Message = Hello | Welcome | Refuse | Stream | Data | Ack


# -- encoding ---------------------------------------------------------------------------


def _frame(kind: int, payload: bytes) -> bytes:
    if len(payload) + 1 > MAX_MESSAGE:
        raise ReplicationProtocolError(
            f"message of {len(payload) + 1} bytes exceeds the limit of {MAX_MESSAGE}"
        )
    return _PREFIX.pack(len(payload) + 1, kind) + payload


def _json(kind: MessageType, obj: dict[str, object]) -> bytes:
    return _frame(kind, orjson.dumps(obj))


def encode(message: Message) -> bytes:
    """The bytes of one message."""
    if isinstance(message, Data):
        kind = MessageType.DATA | (COMPRESSED if message.compressed else 0)
        return _frame(kind, _DATA_HEAD.pack(message.upto, message.count) + message.payload)
    if isinstance(message, Ack):
        return _frame(MessageType.ACK, _U64.pack(message.position))
    if isinstance(message, Hello):
        return _json(
            MessageType.HELLO,
            {
                "version": message.version,
                "name": message.name,
                "group": message.group,
                "destination": message.destination,
                "expect_group": message.expect_group,
                "user": message.user,
                "secret": message.secret,
                "compression": message.compression,
                "validation": message.validation,
            },
        )
    if isinstance(message, Welcome):
        return _json(
            MessageType.WELCOME,
            {
                "version": message.version,
                "name": message.name,
                "group": message.group,
                "log_id": message.log_id,
                "holdings": [[h, last, gaps] for h, (last, gaps) in message.holdings.items()],
                "validation": message.validation,
            },
        )
    if isinstance(message, Refuse):
        return _json(MessageType.REFUSE, {"reason": message.reason, "detail": message.detail})
    return _json(MessageType.STREAM, {"start": message.start, "source_last": message.source_last})


class RecordsWriter:
    """Records encoded one by one into a ``data`` payload (the source's hot path)."""

    __slots__ = ("_parts", "count", "nbytes")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.count = 0
        self.nbytes = 0

    def add(
        self,
        source_seq: int,
        timestamp_us: int,
        pub_hash: int,
        pub_seq: int,
        kind: int,
        topic: bytes,
        path: tuple[str, ...],
        corr_id: bytes,
        sow_key: bytes,
        body: bytes,
    ) -> None:
        """Add one record (``topic``, ``corr_id`` and ``sow_key`` already UTF-8)."""
        parts = self._parts
        parts.append(
            _RECORD.pack(
                source_seq, timestamp_us, pub_hash, pub_seq, kind, len(path), len(topic),
                len(corr_id), len(sow_key), len(body),
            )
        )  # fmt: skip
        parts.append(topic)
        size = _RECORD.size + len(topic) + len(corr_id) + len(sow_key) + len(body)
        for entry in path:
            raw = entry.encode()
            parts.append(bytes((len(raw),)) + raw)
            size += 1 + len(raw)
        if corr_id:
            parts.append(corr_id)
        if sow_key:
            parts.append(sow_key)
        parts.append(body)
        self.count += 1
        self.nbytes += size

    def payload(self) -> bytes:
        """The records added so far, joined."""
        return b"".join(self._parts)


@dataclass(slots=True)
class Records:
    """Decoded records of a ``data`` message, as columns."""

    source_seqs: list[int] = field(default_factory=list)
    timestamps_us: list[int] = field(default_factory=list)
    pub_hashes: list[int] = field(default_factory=list)
    pub_seqs: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    paths: list[tuple[str, ...]] = field(default_factory=list)
    corr_ids: list[str] = field(default_factory=list)
    sow_keys: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.bodies)


def decode_records(payload: bytes, count: int) -> Records:
    """The records of an (uncompressed) ``data`` payload.

    Raises:
        ReplicationProtocolError: the bytes are not ``count`` well-formed records.
    """
    out = Records()
    pos = 0
    end = len(payload)
    unpack = _RECORD.unpack_from
    size = _RECORD.size
    topics: dict[bytes, str] = {}
    try:
        for _ in range(count):
            if end - pos < size:
                raise ReplicationProtocolError("a data message ends inside a record header")
            seq, ts, ph, ps, kind, npath, tl, cl, kl, bl = unpack(payload, pos)
            pos += size
            if kind not in _KINDS:
                raise ReplicationProtocolError(f"unknown record kind {kind}")
            raw_topic = payload[pos : pos + tl]
            topic = topics.get(raw_topic)
            if topic is None:
                topic = topics[raw_topic] = raw_topic.decode()
            pos += tl
            path: list[str] = []
            for _ in range(npath):
                n = payload[pos]
                path.append(payload[pos + 1 : pos + 1 + n].decode())
                pos += 1 + n
            corr = payload[pos : pos + cl].decode() if cl else ""
            pos += cl
            key = payload[pos : pos + kl].decode() if kl else ""
            pos += kl
            if pos + bl > end:
                raise ReplicationProtocolError("a data message ends inside a record body")
            out.source_seqs.append(seq)
            out.timestamps_us.append(ts)
            out.pub_hashes.append(ph)
            out.pub_seqs.append(ps)
            out.kinds.append(kind)
            out.topics.append(topic)
            out.paths.append(tuple(path))
            out.corr_ids.append(corr)
            out.sow_keys.append(key)
            out.bodies.append(payload[pos : pos + bl])
            pos += bl
    except (IndexError, UnicodeDecodeError) as exc:
        raise ReplicationProtocolError(f"malformed record in a data message: {exc}") from None
    if pos != end:
        raise ReplicationProtocolError(f"{end - pos} bytes follow the last record")
    return out


# -- parsing ----------------------------------------------------------------------------


def _obj(payload: bytes, what: str) -> dict[str, object]:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ReplicationProtocolError(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ReplicationProtocolError(f"{what} is not a JSON object")
    return obj


def _str(obj: dict[str, object], key: str, what: str, *, optional: bool = False) -> str | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ReplicationProtocolError(f"{what} needs a string {key!r}")
    return value


def _int(obj: dict[str, object], key: str, what: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ReplicationProtocolError(f"{what} needs a non-negative integer {key!r}")
    return value


def _dict(obj: dict[str, object], key: str, what: str) -> dict[str, object]:
    value = obj.get(key)
    if not isinstance(value, dict):
        raise ReplicationProtocolError(f"{what} needs an object {key!r}")
    return value


def _holdings(value: object) -> Holdings:
    if not isinstance(value, list):
        raise ReplicationProtocolError("welcome needs a list 'holdings'")
    out: Holdings = {}
    try:
        for h, last, gaps in value:
            if not isinstance(h, int) or not isinstance(last, int) or not isinstance(gaps, list):
                raise ReplicationProtocolError("a holdings entry is [pub_hash, highest, gaps]")
            intervals = [(int(lo), int(hi)) for lo, hi in gaps]
            out[h] = (last, intervals)
    except (TypeError, ValueError):
        raise ReplicationProtocolError("a holdings entry is [pub_hash, highest, gaps]") from None
    return out


def _parse(kind: int, payload: bytes) -> Message:
    base = kind & ~COMPRESSED
    if kind & COMPRESSED and base != MessageType.DATA:
        raise ReplicationProtocolError(f"message type {base} cannot be compressed")
    if base == MessageType.DATA:
        if len(payload) < _DATA_HEAD.size:
            raise ReplicationProtocolError("a data message is shorter than its header")
        upto, count = _DATA_HEAD.unpack_from(payload)
        return Data(upto, count, payload[_DATA_HEAD.size :], bool(kind & COMPRESSED))
    if base == MessageType.ACK:
        if len(payload) != _U64.size:
            raise ReplicationProtocolError("an ack is a u64 position")
        return Ack(_U64.unpack(payload)[0])
    if base == MessageType.HELLO:
        obj = _obj(payload, "hello")
        compression = _str(obj, "compression", "hello", optional=True)
        if compression not in (None, "zstd"):
            raise ReplicationProtocolError(f"unknown compression {compression!r}")
        return Hello(
            version=_int(obj, "version", "hello"),
            name=_str(obj, "name", "hello") or "",
            group=_str(obj, "group", "hello") or "",
            destination=_str(obj, "destination", "hello") or "",
            expect_group=_str(obj, "expect_group", "hello") or "",
            user=_str(obj, "user", "hello", optional=True),
            secret=_str(obj, "secret", "hello", optional=True),
            compression=compression,
            validation=_dict(obj, "validation", "hello"),
        )
    if base == MessageType.WELCOME:
        obj = _obj(payload, "welcome")
        return Welcome(
            version=_int(obj, "version", "welcome"),
            name=_str(obj, "name", "welcome") or "",
            group=_str(obj, "group", "welcome") or "",
            log_id=_str(obj, "log_id", "welcome") or "",
            holdings=_holdings(obj.get("holdings")),
            validation=_dict(obj, "validation", "welcome"),
        )
    if base == MessageType.REFUSE:
        obj = _obj(payload, "refuse")
        return Refuse(_str(obj, "reason", "refuse") or "", _str(obj, "detail", "refuse") or "")
    if base == MessageType.STREAM:
        obj = _obj(payload, "stream")
        return Stream(_int(obj, "start", "stream"), _int(obj, "source_last", "stream"))
    raise ReplicationProtocolError(f"unknown message type {base}")


class FrameParser:
    """Bytes in (any split), messages out, in order.

    Raises ReplicationProtocolError on the first malformed message; after that the
    parser is spent (the link is closed).
    """

    __slots__ = ("_buf", "_pos")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> list[Message]:
        """Add received bytes; return every message now complete."""
        buf = self._buf
        if self._pos and self._pos == len(buf):
            buf.clear()
            self._pos = 0
        buf += data
        out: list[Message] = []
        pos = self._pos
        end = len(buf)
        while end - pos >= _PREFIX.size:
            length, kind = _PREFIX.unpack_from(buf, pos)
            if length < 1 or length > MAX_MESSAGE:
                raise ReplicationProtocolError(f"message length {length} is out of range")
            if end - pos - 4 < length:
                break
            payload = bytes(buf[pos + _PREFIX.size : pos + 4 + length])
            pos += 4 + length
            out.append(_parse(kind, payload))
        if pos >= len(buf) // 2 and pos:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return out

    @property
    def buffered(self) -> int:
        """Bytes received that are not a complete message yet."""
        return len(self._buf) - self._pos
