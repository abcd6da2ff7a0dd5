"""The replication wire format: messages as bytes and back, with no I/O.

A link is a byte stream of length-prefixed messages (``u32 length``, ``u8 type``,
payload), so any framing of the stream by websocket messages is the same stream. Control
messages carry a JSON object, ``ack`` a u64, ``data`` a binary batch of records laid out
by column in *runs* (consecutive records of one topic, publisher, kind and path), so both
sides handle a run with a few calls into C rather than Python code per field; a batch may
be zstd-compressed as a whole. Anything malformed raises
:class:`~spool.server.replication.errors.ReplicationProtocolError` with what was wrong;
the protocol object (server/replication/protocol.py) turns it into a refusal and closes
the link. See docs/replication.md "Wire format" for every field.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

import orjson

from spool.server import speedups
from spool.server.replication.bootframes import (
    BOOT_TYPES,
    BOOTSTRAP,
    BUSY,
    DONE,
    OFFER,
    REPAIR,
    BootMessage,
    Bootstrap,
    Busy,
    Done,
    Offer,
    Repair,
    RepairFence,
    boot_fields,
    parse_boot,
)
from spool.server.replication.errors import ReplicationProtocolError
from spool.server.replication.jsonfields import int_field, str_field
from spool.server.replication.peerframes import (
    CLAIM,
    CLAIMED,
    FABRIC,
    PEER_TYPES,
    Claim,
    Claimed,
    FabricEntry,
    FabricView,
    PeerMessage,
    parse_peer,
    peer_fields,
)
from spool.server.txlog.format.record import RecordKind, split_schedule_field

__all__ = [
    "CHANNEL",
    "COMPRESSED",
    "MAX_MESSAGE",
    "PROTOCOL_VERSION",
    "AckFrame",
    "Bootstrap",
    "Busy",
    "Claim",
    "Claimed",
    "Data",
    "Done",
    "FabricEntry",
    "FabricView",
    "FrameParser",
    "Hello",
    "Holdings",
    "Message",
    "MessageType",
    "Offer",
    "Origins",
    "PeerMessage",
    "RecordsWriter",
    "Refuse",
    "Repair",
    "RepairFence",
    "Run",
    "Stream",
    "SyncNotice",
    "Welcome",
    "decode_runs",
    "decode_runs_py",
    "encode",
    "first_type",
]

#: 2 since a source tells its destination the link's effective sync type (``SyncNotice``)
#: and an empty instance may ask for a bootstrap; 3 since the hello and the welcome carry
#: the instance's identity (two instances with one Name are told apart); 4 since a data
#: run may carry scheduled records (delayed delivery). A peer of another version would
#: misread or drop the link mid-stream on a message or a record kind it does not know, so
#: the hello refuses it up front with both versions instead
PROTOCOL_VERSION: Final = 4
#: largest message accepted (a batch is far smaller; a single huge record is not)
MAX_MESSAGE: Final = 64 << 20
#: type bit of a DATA message whose records are zstd-compressed
COMPRESSED: Final = 0x80
#: type bit of a message of a connection's second conversation: the link its accepting
#: end runs back over it (docs/replication.md "Passive destinations")
CHANNEL: Final = 0x40

_PREFIX: Final = struct.Struct("<IB")
_U64: Final = struct.Struct("<Q")
_U16: Final = struct.Struct("<H")
_DATA_HEAD: Final = struct.Struct("<QI")
#: a run: count, pub_hash, kind, flags, topic length, path entries
_RUN: Final = struct.Struct("<IQBBHB")
#: a record of a run: source seq, timestamp, publisher seq, body length
_FIXED: Final = struct.Struct("<QqQI")
_HAS_CORR: Final = 1
_HAS_KEYS: Final = 2
#: kinds a data run may carry: not a LOST placeholder or a DUE record, which are local to
#: the log that wrote them (each instance writes its own due records from its own clock).
#: A SCHEDULED record goes as any message (its receiver stores it and delivers it when it
#: falls due); its run carries the SOW key fields, each starting with the due time
#: (:func:`~spool.server.txlog.format.record.schedule_field`)
_KINDS: Final = frozenset(int(k) for k in RecordKind) - {
    int(RecordKind.LOST),
    int(RecordKind.DUE),
}
_SCHEDULED: Final = int(RecordKind.SCHEDULED)


class MessageType(IntEnum):
    HELLO = 1
    WELCOME = 2
    REFUSE = 3
    STREAM = 4
    DATA = 5
    ACK = 6
    BOOTSTRAP = BOOTSTRAP
    OFFER = OFFER
    DONE = DONE
    BUSY = BUSY
    SYNC = 11
    FABRIC = FABRIC
    CLAIM = CLAIM
    CLAIMED = CLAIMED
    REPAIR = REPAIR


#: what a destination holds per publisher: pub_hash -> (highest, gap intervals)
Holdings = dict[int, tuple[int, list[tuple[int, int]]]]
#: where a destination's records of each publisher came from, as far as it knows:
#: pub_hash -> [(first pub_seq, origin instance as a path entry), ...] in order
Origins = dict[int, list[tuple[int, str]]]


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
        instance_id: the source instance's identity (random, kept in its data directory):
            two instances that share a Name have different ones.
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
    instance_id: str = ""


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
        instance_id: its identity (as the hello's).
        origins: where its held records came from, per publisher (a resync sends a held
            record again when it was published through another instance, so the
            destination can tell two publishers sharing an identity apart:
            server/replication/collisions.py).
        lost_since: when its log lost records it cannot name (a torn tail cut at its
            last start, µs; None: none): the resync then also covers what the source
            recorded from a little before that time, ignoring the acknowledged position.
    """

    version: int
    name: str
    group: str
    log_id: str
    holdings: Holdings
    validation: dict[str, object]
    instance_id: str = ""
    origins: Origins = field(default_factory=dict)
    lost_since: int | None = None


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
class AckFrame:
    """Destination -> source: everything up to ``position`` is durable here."""

    position: int


@dataclass(frozen=True, slots=True)
class SyncNotice:
    """Source -> destination: the link's effective sync type (``sync``, ``async``,
    ``upgrading``), when the stream starts and whenever an operator or an action changes
    it, so the destination's admin API shows it too."""

    effective: str


Message = (
    Hello
    | Welcome
    | Refuse
    | Stream
    | Data
    | AckFrame
    | SyncNotice
    | Bootstrap
    | Offer
    | Done
    | Busy
    | PeerMessage
    | Repair
)


# -- encoding ---------------------------------------------------------------------------


def _frame(kind: int, payload: bytes) -> bytes:
    if len(payload) + 1 > MAX_MESSAGE:
        raise ReplicationProtocolError(
            f"message of {len(payload) + 1} bytes exceeds the limit of {MAX_MESSAGE}"
        )
    return _PREFIX.pack(len(payload) + 1, kind) + payload


def encode(message: Message, channel: int = 0) -> bytes:
    """The bytes of one message (``channel`` 1: a message of the second conversation a
    connection carries, :data:`CHANNEL` set on its type)."""
    kind, payload = _encoded(message)
    return _frame(kind | CHANNEL if channel else kind, payload)


def _encoded(message: Message) -> tuple[int, bytes]:
    """A message's type and payload."""
    if isinstance(message, Data):
        kind = MessageType.DATA | (COMPRESSED if message.compressed else 0)
        return kind, _DATA_HEAD.pack(message.upto, message.count) + message.payload
    if isinstance(message, AckFrame):
        return MessageType.ACK, _U64.pack(message.position)
    if isinstance(message, Hello):
        return MessageType.HELLO, orjson.dumps(
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
                "instance_id": message.instance_id,
            }
        )
    if isinstance(message, Welcome):
        return MessageType.WELCOME, orjson.dumps(
            {
                "version": message.version,
                "name": message.name,
                "group": message.group,
                "log_id": message.log_id,
                "holdings": [[h, last, gaps] for h, (last, gaps) in message.holdings.items()],
                "validation": message.validation,
                "instance_id": message.instance_id,
                "origins": [[h, [[f, o] for f, o in segs]] for h, segs in message.origins.items()],
                "lost_since": message.lost_since,
            }
        )
    if isinstance(message, Refuse):
        return MessageType.REFUSE, orjson.dumps(
            {"reason": message.reason, "detail": message.detail}
        )
    if isinstance(message, SyncNotice):
        return MessageType.SYNC, orjson.dumps({"effective": message.effective})
    if isinstance(message, BootMessage):
        kind, obj = boot_fields(message)
        return kind, orjson.dumps(obj)
    if isinstance(message, PeerMessage):
        kind, obj = peer_fields(message)
        return kind, orjson.dumps(obj)
    return MessageType.STREAM, orjson.dumps(
        {"start": message.start, "source_last": message.source_last}
    )


def pack_fixed_py(
    source_seqs: Sequence[int],
    timestamps_us: Sequence[int],
    pub_seqs: Sequence[int],
    bodies: Sequence[bytes],
) -> bytes:
    """The fixed part of a run's records, one ``_FIXED`` each (the pure-Python twin;
    ``_frames_c.pack_fixed`` writes the same bytes in one pass, :func:`pack_fixed` is
    the one selected)."""
    return b"".join(map(_FIXED.pack, source_seqs, timestamps_us, pub_seqs, map(len, bodies)))


def _pack_fixed_c(
    source_seqs: Sequence[int],
    timestamps_us: Sequence[int],
    pub_seqs: Sequence[int],
    bodies: Sequence[bytes],
) -> bytes:
    """:func:`pack_fixed_py` compiled; a value that does not fit its field goes to the
    Python twin, which raises as it always did."""
    assert _pack_fixed is not None
    out = _pack_fixed(source_seqs, timestamps_us, pub_seqs, bodies)
    if out is None:
        return pack_fixed_py(source_seqs, timestamps_us, pub_seqs, bodies)
    return out


class RecordsWriter:
    """Records encoded into a ``data`` payload, a run at a time (the source's hot path).

    A run is consecutive records of one topic, publisher, kind and path; its fixed
    per-record fields are packed by one ``map`` over the columns and its bodies joined,
    so the per-record work stays in C.
    """

    __slots__ = ("_parts", "count", "nbytes")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.count = 0
        self.nbytes = 0

    def add_run(
        self,
        topic: bytes,
        pub_hash: int,
        kind: int,
        path: tuple[str, ...],
        source_seqs: Sequence[int],
        timestamps_us: Sequence[int],
        pub_seqs: Sequence[int],
        bodies: Sequence[bytes],
        corr_ids: Sequence[bytes] | None = None,
        sow_keys: Sequence[bytes] | None = None,
    ) -> None:
        """Add a run (``topic``, correlation ids and SOW keys already UTF-8)."""
        n = len(bodies)
        flags = (_HAS_CORR if corr_ids else 0) | (_HAS_KEYS if sow_keys else 0)
        head = [_RUN.pack(n, pub_hash, kind, flags, len(topic), len(path)), topic]
        for entry in path:
            raw = entry.encode()
            head.append(bytes((len(raw),)))
            head.append(raw)
        parts = self._parts
        parts.extend(head)
        parts.append(pack_fixed(source_seqs, timestamps_us, pub_seqs, bodies))
        size = sum(map(len, head)) + n * _FIXED.size
        for column in (corr_ids, sow_keys):
            if column:
                joined = b"".join(column)
                parts.append(b"".join(map(_U16.pack, map(len, column))))
                parts.append(joined)
                size += n * _U16.size + len(joined)
        body = b"".join(bodies)
        parts.append(body)
        self.count += n
        self.nbytes += size + len(body)

    def payload(self) -> bytes:
        """The runs added so far, joined."""
        return b"".join(self._parts)


@dataclass(slots=True)
class Run:
    """Decoded records of one topic, publisher, kind and path (as the source grouped them).

    Attributes:
        topic, pub_hash, kind, path: what the run's records share.
        source_seqs: each record's seq in the source's log.
        timestamps_us: each record's time there.
        pub_seqs: each record's publisher sequence (its bookmark with ``pub_hash``).
        bodies: the bodies.
        corr_ids, sow_keys: per record, when any record has one.
    """

    topic: str
    pub_hash: int
    kind: int
    path: tuple[str, ...]
    source_seqs: list[int]
    timestamps_us: list[int]
    pub_seqs: list[int]
    bodies: list[bytes]
    corr_ids: list[str] | None = None
    sow_keys: list[str] | None = None

    def __len__(self) -> int:
        return len(self.bodies)


def _strings(payload: bytes, pos: int, n: int, what: str) -> tuple[list[str], int]:
    """``n`` u16 lengths then the strings (a column of correlation ids or SOW keys)."""
    end = pos + n * _U16.size
    if end > len(payload):
        raise ReplicationProtocolError(f"a data message ends inside the {what} lengths")
    lengths = [x for (x,) in _U16.iter_unpack(payload[pos:end])]
    out = []
    pos = end
    for length in lengths:
        out.append(payload[pos : pos + length].decode())
        pos += length
    if pos > len(payload):
        raise ReplicationProtocolError(f"a data message ends inside the {what}")
    return out, pos


def _check_due_times(keys: list[str] | None) -> None:
    """Each record of a run of scheduled records carries its due time at the start of its
    SOW key field: one without would be taken for a message due at once."""
    if keys is None:
        raise ReplicationProtocolError("a run of scheduled records carries no SOW key fields")
    for key in keys:
        try:
            split_schedule_field(key)
        except ValueError as exc:
            raise ReplicationProtocolError(
                f"a scheduled record without a due time: {exc}"
            ) from None


def decode_runs_py(payload: bytes, count: int) -> list[Run]:
    """The runs of an (uncompressed) ``data`` payload (the pure-Python twin, and the
    specification: ``_frames_c.pyx`` gives the same runs, :func:`decode_runs` is the one
    selected).

    Raises:
        ReplicationProtocolError: the bytes are not ``count`` well-formed records.
    """
    runs: list[Run] = []
    pos = 0
    end = len(payload)
    got = 0
    try:
        while got < count:
            if end - pos < _RUN.size:
                raise ReplicationProtocolError("a data message ends inside a run header")
            n, pub_hash, kind, flags, tl, npath = _RUN.unpack_from(payload, pos)
            pos += _RUN.size
            if kind not in _KINDS:
                raise ReplicationProtocolError(f"unknown record kind {kind}")
            if n == 0 or got + n > count:
                raise ReplicationProtocolError(f"a run of {n} records in a batch of {count}")
            topic = payload[pos : pos + tl].decode()
            pos += tl
            path_entries: list[str] = []
            for _ in range(npath):
                size = payload[pos]
                path_entries.append(payload[pos + 1 : pos + 1 + size].decode())
                pos += 1 + size
            fixed_end = pos + n * _FIXED.size
            if fixed_end > end:
                raise ReplicationProtocolError("a data message ends inside a run's records")
            seqs, times, pub_seqs, lengths = zip(
                *_FIXED.iter_unpack(payload[pos:fixed_end]), strict=True
            )
            pos = fixed_end
            corrs = keys = None
            if flags & _HAS_CORR:
                corrs, pos = _strings(payload, pos, n, "correlation ids")
            if flags & _HAS_KEYS:
                keys, pos = _strings(payload, pos, n, "SOW keys")
            if kind == _SCHEDULED:
                _check_due_times(keys)
            bodies_end = pos + sum(lengths)
            if bodies_end > end:
                raise ReplicationProtocolError("a data message ends inside a record body")
            offsets = itertools.accumulate(lengths, initial=pos)
            bodies = [payload[a:b] for a, b in itertools.pairwise(offsets)]
            pos = bodies_end
            runs.append(
                Run(topic, pub_hash, kind, tuple(path_entries), list(seqs), list(times),
                    list(pub_seqs), bodies, corrs, keys)
            )  # fmt: skip
            got += n
    except (IndexError, UnicodeDecodeError, struct.error) as exc:
        raise ReplicationProtocolError(f"malformed record in a data message: {exc}") from None
    if pos != end:
        raise ReplicationProtocolError(f"{end - pos} bytes follow the last record")
    return runs


def _decode_runs_c(payload: bytes, count: int) -> list[Run]:
    """:func:`decode_runs_py` with its per-record loop compiled; a malformed payload goes
    to the Python twin, which raises the exact error."""
    assert _decode_run_fields is not None
    fields = _decode_run_fields(bytes(payload), count, _strings)
    if fields is None:
        return decode_runs_py(payload, count)
    return [Run(*f) for f in fields]


try:
    from spool.server.replication._frames_c import decode_run_fields as _decode_run_fields
    from spool.server.replication._frames_c import pack_fixed as _pack_fixed
except ImportError:  # not built: speedups.status() says why
    _decode_run_fields = None  # type: ignore[assignment]
    _pack_fixed = None  # type: ignore[assignment]

_compiled = speedups.ENABLED and _decode_run_fields is not None
decode_runs = _decode_runs_c if _compiled else decode_runs_py
pack_fixed = _pack_fixed_c if _compiled else pack_fixed_py


# -- parsing ----------------------------------------------------------------------------


def _obj(payload: bytes, what: str) -> dict[str, object]:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ReplicationProtocolError(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ReplicationProtocolError(f"{what} is not a JSON object")
    return obj


def _optional_int(obj: dict[str, object], key: str, what: str) -> int | None:
    """An integer that may be absent or null (a field a peer of an older build omits)."""
    if obj.get(key) is None:
        return None
    return int_field(obj, key, what)


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


def _origins(value: object) -> Origins:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise ReplicationProtocolError("welcome's 'origins' is a list")
    out: Origins = {}
    try:
        for h, segs in value:
            if not isinstance(h, int) or not isinstance(segs, list):
                raise ReplicationProtocolError("an origins entry is [pub_hash, segments]")
            out[h] = [(int(f), str(o)) for f, o in segs]
    except (TypeError, ValueError):
        raise ReplicationProtocolError(
            "an origins entry is [pub_hash, [[first, origin]...]]"
        ) from None
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
        return AckFrame(_U64.unpack(payload)[0])
    if base == MessageType.HELLO:
        obj = _obj(payload, "hello")
        compression = str_field(obj, "compression", "hello", optional=True)
        if compression not in (None, "zstd"):
            raise ReplicationProtocolError(f"unknown compression {compression!r}")
        return Hello(
            version=int_field(obj, "version", "hello"),
            name=str_field(obj, "name", "hello") or "",
            group=str_field(obj, "group", "hello") or "",
            destination=str_field(obj, "destination", "hello") or "",
            expect_group=str_field(obj, "expect_group", "hello") or "",
            user=str_field(obj, "user", "hello", optional=True),
            secret=str_field(obj, "secret", "hello", optional=True),
            compression=compression,
            validation=_dict(obj, "validation", "hello"),
            instance_id=str_field(obj, "instance_id", "hello", optional=True) or "",
        )
    if base == MessageType.WELCOME:
        obj = _obj(payload, "welcome")
        return Welcome(
            version=int_field(obj, "version", "welcome"),
            name=str_field(obj, "name", "welcome") or "",
            group=str_field(obj, "group", "welcome") or "",
            log_id=str_field(obj, "log_id", "welcome") or "",
            holdings=_holdings(obj.get("holdings")),
            validation=_dict(obj, "validation", "welcome"),
            instance_id=str_field(obj, "instance_id", "welcome", optional=True) or "",
            origins=_origins(obj.get("origins")),
            lost_since=_optional_int(obj, "lost_since", "welcome"),
        )
    if base == MessageType.REFUSE:
        obj = _obj(payload, "refuse")
        return Refuse(
            str_field(obj, "reason", "refuse") or "", str_field(obj, "detail", "refuse") or ""
        )
    if base == MessageType.STREAM:
        obj = _obj(payload, "stream")
        return Stream(int_field(obj, "start", "stream"), int_field(obj, "source_last", "stream"))
    if base == MessageType.SYNC:
        effective = str_field(_obj(payload, "sync"), "effective", "sync")
        if effective not in ("sync", "async", "upgrading"):
            raise ReplicationProtocolError(f"unknown sync type {effective!r}")
        return SyncNotice(effective)
    if base in BOOT_TYPES:
        return parse_boot(base, _obj(payload, BOOT_TYPES[base]))
    if base in PEER_TYPES:
        return parse_peer(base, _obj(payload, PEER_TYPES[base]))
    raise ReplicationProtocolError(f"unknown message type {base}")


def first_type(data: bytes) -> int | None:
    """The type of the first message of a stream's first bytes (None: not there yet);
    the ``/replication`` endpoint tells a bootstrap from a link by it."""
    if len(data) < _PREFIX.size:
        return None
    kind: int = _PREFIX.unpack_from(data)[1]
    return kind & ~COMPRESSED


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
        """Add received bytes; return every message now complete (a message of a second
        conversation is refused: :meth:`feed_channels` takes those)."""
        return [m for _, m in self._feed(data, channels=False)]

    def feed_channels(self, data: bytes) -> list[tuple[int, Message]]:
        """:meth:`feed` for a connection that may carry two conversations: each message
        with its channel (0, or 1 for :data:`CHANNEL`)."""
        return self._feed(data, channels=True)

    def _feed(self, data: bytes, *, channels: bool) -> list[tuple[int, Message]]:
        buf = self._buf
        if self._pos and self._pos == len(buf):
            buf.clear()
            self._pos = 0
        buf += data
        out: list[tuple[int, Message]] = []
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
            channel = 1 if channels and kind & CHANNEL else 0
            out.append((channel, _parse(kind & ~CHANNEL if channel else kind, payload)))
        if pos >= len(buf) // 2 and pos:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return out

    @property
    def buffered(self) -> int:
        """Bytes received that are not a complete message yet."""
        return len(self._buf) - self._pos
