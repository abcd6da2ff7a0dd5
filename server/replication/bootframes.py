"""The bootstrap's messages (docs/bootstrap.md), beside the link's in frames.py.

A bootstrap is a conversation on the same ``/replication`` endpoint as a link, in the same
framing (server/replication/frames.py: u32 length, u8 type, payload); it differs from a
link by its first message, ``bootstrap`` instead of ``hello``::

    bootstrapping instance                      source
    bootstrap (name, group, credentials,  --->  authenticate
               topics, data types, start)
                                         <---   offer (log range, sizes)  | busy | refuse
                                         <---   data (SOW records) ... done (sow)
                                         <---   data (log records) ... done (txlog)

A *repair* is the same conversation with a ``repair`` request first: an instance whose
log holds fenced (damaged) records asks a peer for exactly those records (their bookmark
intervals and time windows), whoever published them; the peer answers with an offer (the
part of its log it reads for them), the records in ``data`` messages, and ``done``::

    repairing instance                          peer
    repair (name, group, credentials,     --->  authenticate
            fences: id, records,
            bookmark intervals, window)
                                         <---   offer (log range to read) | refuse
                                         <---   data (the records found) ... done (txlog)

The control messages are JSON objects; records travel in the link's ``data`` messages.
This module holds only the JSON messages (dataclasses, their fields, and their parsing
from a decoded JSON object), so that frames.py stays one codec of one size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from spool.server.replication.errors import ReplicationProtocolError
from spool.server.replication.jsonfields import int_field, str_field

__all__ = [
    "BOOTSTRAP",
    "BOOT_TYPES",
    "BUSY",
    "DONE",
    "OFFER",
    "REPAIR",
    "BootMessage",
    "Bootstrap",
    "Busy",
    "Done",
    "Offer",
    "Repair",
    "RepairFence",
    "boot_fields",
    "parse_boot",
]

#: message types (frames.MessageType takes them over)
BOOTSTRAP: Final = 7
OFFER: Final = 8
DONE: Final = 9
BUSY: Final = 10
REPAIR: Final = 15
#: type -> name used in errors
BOOT_TYPES: Final = {
    BOOTSTRAP: "bootstrap",
    OFFER: "offer",
    DONE: "done",
    BUSY: "busy",
    REPAIR: "repair",
}
#: most fences one repair request names
MAX_REPAIR_FENCES: Final = 1024
#: most bookmark intervals one fence names
MAX_FENCE_INTERVALS: Final = 4096


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """Bootstrapping instance -> source, first (instead of a hello): copy me your state.

    Attributes:
        version: the protocol version.
        name, group: the bootstrapping instance's.
        user, secret: its credentials on the source (as a hello's; never logged).
        topics: ``(name, is_regex)`` of the topics to copy.
        data_types: ``txlog`` and/or ``sow``.
        start: the first seq of the source's log still to copy (resuming: past what an
            interrupted bootstrap made durable; 0 on a first attempt).
        sow_done: the SOW phase already finished (an interrupted bootstrap resuming).
        compression: ``zstd`` when the source should compress its data messages.
    """

    version: int
    name: str
    group: str
    user: str | None
    secret: str | None = field(repr=False)
    topics: list[tuple[str, bool]]
    data_types: list[str]
    start: int
    sow_done: bool
    compression: str | None


@dataclass(frozen=True, slots=True)
class RepairFence:
    """One fenced range of the requester: what it lost, as far as it can tell.

    Attributes:
        first_seq: its first local seq on the requester (an id for progress only).
        records: how many records it held.
        intervals: ``(pub_hash, first, last)`` bookmark intervals its records lie in.
        window: ``(t_lo, t_hi)`` times (µs) of the requester's intact records around it
            (``t_hi`` None: none after it): the peer reads its log around that time.
    """

    first_seq: int
    records: int
    intervals: list[tuple[int, int, int]]
    window: tuple[int, int | None]


@dataclass(frozen=True, slots=True)
class Repair:
    """Repairing instance -> peer, first (instead of a hello): send me these records.

    Attributes:
        version: the protocol version.
        name, group: the requester's.
        user, secret: its credentials on the peer (as a hello's; never logged).
        fences: the fenced ranges to find records for.
        compression: ``zstd`` when the peer should compress its data messages.
    """

    version: int
    name: str
    group: str
    user: str | None
    secret: str | None = field(repr=False)
    fences: list[RepairFence]
    compression: str | None


@dataclass(frozen=True, slots=True)
class Offer:
    """Source -> bootstrapping instance: accepted; what is coming (for progress and ETA).

    Attributes:
        name, group, log_id: the source's.
        first_seq, last_seq: its log's retained range when the copy began (the copy goes
            up to ``last_seq``; live replication brings what follows).
        log_bytes: the bytes of that range (an estimate for the ETA).
        sow_records: how many SOW records the SOW phase sends (0 when not asked).
    """

    name: str
    group: str
    log_id: str
    first_seq: int
    last_seq: int
    log_bytes: int
    sow_records: int


@dataclass(frozen=True, slots=True)
class Done:
    """Source -> bootstrapping instance: everything was sent.

    Attributes:
        last_seq: the last seq of the source's log the copy covered.
        phase: ``sow`` (the SOW phase ended; the log follows) or ``txlog`` (all done).
    """

    phase: str
    last_seq: int


@dataclass(frozen=True, slots=True)
class Busy:
    """Source -> bootstrapping instance: the source is bootstrapping itself (try later).

    Attributes:
        name: the source's Name.
        waiting_on: the instances the source's own bootstrap was told are bootstrapping
            too: the requester finding its own name there is a mutual bootstrap.
    """

    name: str
    waiting_on: list[str]


BootMessage = Bootstrap | Offer | Done | Busy | Repair


def boot_fields(message: BootMessage) -> tuple[int, dict[str, object]]:
    """The type and JSON object of a bootstrap message."""
    if isinstance(message, Bootstrap):
        return (
            BOOTSTRAP,
            {
                "version": message.version,
                "name": message.name,
                "group": message.group,
                "user": message.user,
                "secret": message.secret,
                "topics": [[name, regex] for name, regex in message.topics],
                "data_types": message.data_types,
                "start": message.start,
                "sow_done": message.sow_done,
                "compression": message.compression,
            },
        )
    if isinstance(message, Repair):
        return (
            REPAIR,
            {
                "version": message.version,
                "name": message.name,
                "group": message.group,
                "user": message.user,
                "secret": message.secret,
                "fences": [
                    {
                        "first_seq": f.first_seq,
                        "records": f.records,
                        "intervals": [list(i) for i in f.intervals],
                        "window": list(f.window),
                    }
                    for f in message.fences
                ],
                "compression": message.compression,
            },
        )
    if isinstance(message, Offer):
        return (
            OFFER,
            {
                "name": message.name,
                "group": message.group,
                "log_id": message.log_id,
                "first_seq": message.first_seq,
                "last_seq": message.last_seq,
                "log_bytes": message.log_bytes,
                "sow_records": message.sow_records,
            },
        )
    if isinstance(message, Done):
        return DONE, {"phase": message.phase, "last_seq": message.last_seq}
    return BUSY, {"name": message.name, "waiting_on": message.waiting_on}


def _names(obj: dict[str, object], key: str, what: str) -> list[str]:
    value = obj.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ReplicationProtocolError(f"{what} needs a list of strings {key!r}")
    return [str(v) for v in value]


def _topics(value: object) -> list[tuple[str, bool]]:
    if not isinstance(value, list) or not value:
        raise ReplicationProtocolError("bootstrap needs a non-empty list 'topics'")
    out: list[tuple[str, bool]] = []
    for entry in value:
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not isinstance(entry[0], str)
            or not isinstance(entry[1], bool)
        ):
            raise ReplicationProtocolError("a bootstrap topic is [name, is_regex]")
        out.append((entry[0], entry[1]))
    return out


def _fences(value: object) -> list[RepairFence]:
    if not isinstance(value, list) or not value or len(value) > MAX_REPAIR_FENCES:
        raise ReplicationProtocolError(
            f"repair needs a list 'fences' of 1 to {MAX_REPAIR_FENCES} fenced ranges"
        )
    out = []
    for entry in value:
        if not isinstance(entry, dict):
            raise ReplicationProtocolError("a repair fence is an object")
        intervals = entry.get("intervals")
        if not isinstance(intervals, list) or len(intervals) > MAX_FENCE_INTERVALS:
            raise ReplicationProtocolError("a repair fence needs a list 'intervals'")
        ivs: list[tuple[int, int, int]] = []
        for iv in intervals:
            if (
                not isinstance(iv, list)
                or len(iv) != 3
                or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in iv)
                or iv[1] > iv[2]
            ):
                raise ReplicationProtocolError("a bookmark interval is [pub_hash, first, last]")
            ivs.append((iv[0], iv[1], iv[2]))
        window = entry.get("window")
        if (
            not isinstance(window, list)
            or len(window) != 2
            or not isinstance(window[0], int)
            or not (window[1] is None or isinstance(window[1], int))
        ):
            raise ReplicationProtocolError("a repair fence needs a 'window' [t_lo, t_hi|null]")
        first = int_field(entry, "first_seq", "repair fence")
        records = int_field(entry, "records", "repair fence")
        out.append(RepairFence(first, records, ivs, (window[0], window[1])))
    return out


def parse_boot(base: int, obj: dict[str, object]) -> BootMessage:
    """The JSON messages of a bootstrap and of a repair (docs/bootstrap.md,
    docs/replication.md "Repair")."""
    if base == REPAIR:
        compression = str_field(obj, "compression", "repair", optional=True)
        if compression not in (None, "zstd"):
            raise ReplicationProtocolError(f"unknown compression {compression!r}")
        return Repair(
            version=int_field(obj, "version", "repair"),
            name=str_field(obj, "name", "repair") or "",
            group=str_field(obj, "group", "repair") or "",
            user=str_field(obj, "user", "repair", optional=True),
            secret=str_field(obj, "secret", "repair", optional=True),
            fences=_fences(obj.get("fences")),
            compression=compression,
        )
    if base == BOOTSTRAP:
        compression = str_field(obj, "compression", "bootstrap", optional=True)
        if compression not in (None, "zstd"):
            raise ReplicationProtocolError(f"unknown compression {compression!r}")
        data_types = _names(obj, "data_types", "bootstrap")
        if not data_types or not set(data_types) <= {"txlog", "sow"}:
            raise ReplicationProtocolError(f"bootstrap data_types {data_types} (txlog, sow)")
        sow_done = obj.get("sow_done")
        if not isinstance(sow_done, bool):
            raise ReplicationProtocolError("bootstrap needs a boolean 'sow_done'")
        return Bootstrap(
            version=int_field(obj, "version", "bootstrap"),
            name=str_field(obj, "name", "bootstrap") or "",
            group=str_field(obj, "group", "bootstrap") or "",
            user=str_field(obj, "user", "bootstrap", optional=True),
            secret=str_field(obj, "secret", "bootstrap", optional=True),
            topics=_topics(obj.get("topics")),
            data_types=data_types,
            start=int_field(obj, "start", "bootstrap"),
            sow_done=sow_done,
            compression=compression,
        )
    if base == OFFER:
        return Offer(
            name=str_field(obj, "name", "offer") or "",
            group=str_field(obj, "group", "offer") or "",
            log_id=str_field(obj, "log_id", "offer") or "",
            first_seq=int_field(obj, "first_seq", "offer"),
            last_seq=int_field(obj, "last_seq", "offer"),
            log_bytes=int_field(obj, "log_bytes", "offer"),
            sow_records=int_field(obj, "sow_records", "offer"),
        )
    if base == DONE:
        phase = str_field(obj, "phase", "done")
        if phase not in ("sow", "txlog"):
            raise ReplicationProtocolError(f"done phase {phase!r} (sow, txlog)")
        return Done(phase, int_field(obj, "last_seq", "done"))
    return Busy(str_field(obj, "name", "busy") or "", _names(obj, "waiting_on", "busy"))
