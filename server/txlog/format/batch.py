"""A batch of records decoded in bulk: the hot fields now, :class:`Record` objects on demand.

Replaying to websockets needs, per message, the topic (routing, filters), the body and the
bookmark. Building a frozen dataclass per record costs more than all of that together, so
a replay batch keeps each record's checked header tuple, topic and body, and builds a
:class:`Record` only when one is indexed. The batch is still a ``Sequence[Record]``, so
code that just iterates records works unchanged; fast paths use the columns::

    for i in range(len(batch)):
        send(batch.topics[i], batch.bodies[i], batch.bookmark(i))

Sans-I/O like the codec: it decodes bytes it is given.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from typing import Final, overload

import google_crc32c

from spool.server import speedups
from spool.server.bookmarks import format_bookmark
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.codec import (
    CRC_RESIDUE,
    FORMAT,
    HEADER,
    HEADER_SIZE,
    MIN_RECORD,
    Special,
    build_record,
    check_at,
    decode_text,
    special_fields,
)
from spool.server.txlog.format.record import Record

__all__ = ["RecordBatch", "decode_batch", "decode_batch_py"]

# positions in a record header tuple (codec.HEADER)
_LEN, _KIND, _SEQ, _TS, _PH, _PS = 0, 2, 4, 5, 6, 7
_U32 = struct.Struct("<I")
#: byte offset of the kind in a record header (codec.HEADER: u32 length, u8, u8 kind)
_KIND_AT: Final = struct.calcsize(HEADER.format[:3])


class RecordBatch(Sequence[Record]):
    """Consecutive records of one log, in order.

    The per-record facts replay needs are kept as columns of plain ints (time, publisher
    id, publisher sequence) rather than one header tuple per record: ints and bytes are
    not tracked by the cycle collector, tuples are, and a replay that allocates millions
    of tracked objects pays for collector passes over them (which can cost as much as the
    decoding itself). Of a record with a path, correlation id or SOW key the batch keeps
    those three fields (:data:`~spool.server.txlog.format.codec.Special`): a replicating instance reads
    every record that came from elsewhere (each has a path) back only to route it, and
    building each one's :class:`Record` for that would be a large share of its pump.
    Every record is built on demand from the buffer.

    Attributes:
        topics: the records' topics.
        bodies: their bodies, byte for byte.
        timestamps_us: their times (do not modify).
        pub_hashes: their publisher ids (do not modify).
        pub_seqs: their publisher sequences (do not modify).
        nbytes: their encoded size in the journal.
    """

    __slots__ = (
        "_buf", "_first", "_kind_col", "_kinds", "_last_off", "_offs", "_records", "_special",
        "bodies",
        "nbytes",
        "pub_hashes", "pub_seqs", "timestamps_us", "topics",
    )  # fmt: skip

    def __init__(
        self,
        first_seq: int,
        topics: list[str],
        bodies: list[bytes],
        timestamps_us: list[int],
        pub_hashes: list[int],
        pub_seqs: list[int],
        nbytes: int,
        *,
        kinds: set[int] | None = None,
        special: dict[int, Special] | None = None,
        buf: bytes = b"",
        start: int = 0,
        last_off: int = -1,
        records: list[Record | None] | None = None,
        kind_col: bytes | bytearray | None = None,
    ) -> None:
        self._first = first_seq
        self._last_off = last_off  # offset of the last record in buf (-1: unknown)
        self.topics = topics
        self.bodies = bodies
        self.timestamps_us = timestamps_us
        self.pub_hashes = pub_hashes
        self.pub_seqs = pub_seqs
        self.nbytes = nbytes
        self._kinds = kinds if kinds is not None else set()
        #: index -> (path, correlation id, SOW key) of the records that have one of them
        self._special = special if special is not None else {}
        self._buf = buf
        self._offs: list[int] | int = start  # the first offset until record() needs them all
        self._records: list[Record | None] | None = records
        #: each record's kind, a byte a record (the compiled decoder's; None: read from
        #: the buffer when asked)
        self._kind_col = kind_col

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> RecordBatch:
        """A batch over records already built."""
        first = records[0].seq if records else 0
        special = {
            i: (r.path, r.corr_id, r.sow_key)
            for i, r in enumerate(records)
            if r.path or r.corr_id or r.sow_key
        }
        return cls(
            first, [r.topic for r in records], [r.body for r in records],
            [r.timestamp_us for r in records], [r.pub_hash for r in records],
            [r.pub_seq for r in records], 0, kinds={int(r.kind) for r in records},
            special=special, records=list(records),
        )  # fmt: skip

    @classmethod
    def empty(cls) -> RecordBatch:
        """A batch with no records."""
        return cls(0, [], [], [], [], [], 0)

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return [self.record(i) for i in range(*index.indices(len(self.bodies)))]
        return self.record(index)

    def __iter__(self) -> Iterator[Record]:
        for i in range(len(self.bodies)):
            yield self.record(i)

    def record(self, i: int) -> Record:
        """The i-th record as a :class:`Record` (built once, then kept)."""
        n = len(self.bodies)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        records = self._records
        if records is None:
            records = self._records = [None] * n
        rec = records[i]
        if rec is None:
            offs = self._offs
            if isinstance(offs, int) and (i == 0 or (i == n - 1 and self._last_off >= 0)):
                # the first and last records (what cursors look at) need no walk
                off = offs if i == 0 else self._last_off
            else:
                off = self._offsets()[i]
            rec = records[i] = build_record(self._buf, off, HEADER.unpack_from(self._buf, off))
        return rec

    def _offsets(self) -> list[int]:
        """Every record's offset in the buffer (walked once, on first need)."""
        offs = self._offs
        if isinstance(offs, int):
            pos = offs
            offs = []
            unpack = _U32.unpack_from
            buf = self._buf
            for _ in range(len(self.bodies)):
                offs.append(pos)
                pos += unpack(buf, pos)[0]
            self._offs = offs
        return offs

    def path(self, i: int) -> tuple[str, ...]:
        """The i-th record's replication path (``()`` without building a record when it
        has none)."""
        spec = self._special.get(i if i >= 0 else i + len(self.bodies))
        return spec[0] if spec is not None else ()

    def sow_key(self, i: int) -> str:
        """The i-th record's SOW key field ("" without building a record when absent)."""
        spec = self._special.get(i if i >= 0 else i + len(self.bodies))
        return spec[2] if spec is not None else ""

    def kind(self, i: int) -> int:
        """The i-th record's kind, without building a record: a batch of several kinds
        (a replicated queue's messages and its acks) is routed record by record, and
        building each record only to read one header byte cost more than the routing."""
        kinds = self._kinds
        if len(kinds) == 1:
            return next(iter(kinds))
        col = self._kind_col
        if col is not None:
            return col[i]
        if i < 0:
            i += len(self.bodies)
        rec = self._records[i] if self._records is not None else None
        if rec is not None or not self._buf:
            return int((rec or self.record(i)).kind)
        return self._buf[self._offsets()[i] + _KIND_AT]

    @property
    def plain(self) -> bool:
        """No record of the batch has a path, a correlation id or a SOW key."""
        return not self._special

    def has_corr_ids(self) -> bool:
        """Whether any record of the batch carries a correlation id."""
        return any(spec[1] for spec in self._special.values())

    def kinds(self) -> set[int]:
        """The distinct record kinds in the batch (without building records)."""
        return self._kinds

    def corr_id(self, i: int) -> str:
        """The i-th record's correlation id ("" without building a record when absent)."""
        spec = self._special.get(i if i >= 0 else i + len(self.bodies))
        return spec[1] if spec is not None else ""

    @property
    def seqs(self) -> range:
        """The records' local sequences (contiguous)."""
        return range(self._first, self._first + len(self.bodies))

    def timestamp_us(self, i: int) -> int:
        """Time of the i-th record."""
        return self.timestamps_us[i]

    def bookmark(self, i: int) -> str:
        """The wire bookmark ``PUBHASH|PUBSEQ|`` of the i-th record."""
        return format_bookmark(self.pub_hashes[i], self.pub_seqs[i])

    @property
    def first_seq(self) -> int:
        """Seq of the first record (0 when empty)."""
        return self._first if self.bodies else 0

    @property
    def last_seq(self) -> int:
        """Seq of the last record (0 when empty)."""
        return self._first + len(self.bodies) - 1 if self.bodies else 0

    def __repr__(self) -> str:
        return f"RecordBatch(seqs {self.first_seq}..{self.last_seq}, {len(self)} records)"


def decode_batch_py(
    buf: bytes,
    pos: int,
    end: int,
    expect_seq: int,
    *,
    max_count: int = 1000,
    max_bytes: int = 1 << 20,
    upto_seq: int | None = None,
    trusted: tuple[int, int] = (0, 0),
) -> tuple[RecordBatch, int]:
    """Decode consecutive records into a :class:`RecordBatch`.

    Same contract as :func:`spool.server.txlog.format.codec.decode_records` (limits, checks, a zero
    length or an incomplete last record ending the batch), but no Record is built.
    Records lying wholly inside ``trusted`` (positions in ``buf`` already verified, by
    index-block CRCs or because the bytes never left memory) skip their own CRC; every
    other check still applies.

    This is the pure-Python implementation and the oracle of the compiled one
    (``_batch_c.pyx``, :mod:`spool.server.speedups`); :func:`decode_batch` is the one selected.

    Raises:
        CorruptRecord: a complete record fails its checks.
    """
    start = pos
    topics: list[str] = []
    bodies: list[bytes] = []
    times: list[int] = []
    hashes: list[int] = []
    pseqs: list[int] = []
    kinds: set[int] = set()
    special: dict[int, Special] = {}
    prev_kind = -1
    last_off = -1
    stop_seq = upto_seq if upto_seq is not None else 1 << 64
    if max_count < stop_seq - expect_seq + 1:
        stop_seq = expect_seq + max_count - 1
    seq = expect_seq
    unpack = HEADER.unpack_from
    crc = google_crc32c.value
    text = decode_text
    add_topic, add_body = topics.append, bodies.append
    add_time, add_hash, add_pseq = times.append, hashes.append, pseqs.append
    startswith = buf.startswith
    t_start, t_stop = trusted
    prev_tl = -1
    prev_tb = b""
    prev_topic = ""
    while pos < end and seq <= stop_seq and pos - start < max_bytes:
        if end - pos < HEADER_SIZE:
            break
        h = unpack(buf, pos)
        length = h[0]
        if length == 0 or (length >= MIN_RECORD and pos + length > end):
            break  # end of data, or incomplete: the caller decides
        if (
            length < MIN_RECORD
            or h[1] != FORMAT
            or (
                (pos < t_start or pos + length > t_stop)
                and crc(buf[pos : pos + length]) != CRC_RESIDUE
            )
        ):
            check_at(buf, pos, end)  # raises with the precise reason
        if h[_SEQ] != seq:
            raise CorruptRecord(pos, "sequence gap")
        tl = h[8]
        if h[10] or h[11] or h[12]:
            topic, body, spec = special_fields(buf, pos, h)
            special[seq - expect_seq] = spec
            add_topic(topic)
            add_body(body)
        else:
            if MIN_RECORD + tl + h[9] + h[13] != length:
                raise CorruptRecord(pos, "length mismatch")
            p = pos + HEADER_SIZE
            if tl == prev_tl and startswith(prev_tb, p):
                add_topic(prev_topic)  # runs of one topic: no slice, no decode
            else:
                prev_tb = buf[p : p + tl]
                try:
                    prev_topic = text(prev_tb)
                except UnicodeDecodeError:
                    raise CorruptRecord(pos, "bad utf-8") from None
                prev_tl = tl
                add_topic(prev_topic)
            p += tl + h[9]
            add_body(buf[p : p + h[13]])
        if h[_KIND] != prev_kind:
            prev_kind = h[_KIND]
            kinds.add(prev_kind)
        add_time(h[_TS])
        add_hash(h[_PH])
        add_pseq(h[_PS])
        last_off = pos
        pos += length
        seq += 1
    batch = RecordBatch(
        expect_seq, topics, bodies, times, hashes, pseqs, pos - start, kinds=kinds,
        special=special, buf=buf, start=start, last_off=last_off,
    )  # fmt: skip
    return batch, pos


def _decode_batch_c(
    buf: bytes,
    pos: int,
    end: int,
    expect_seq: int,
    *,
    max_count: int = 1000,
    max_bytes: int = 1 << 20,
    upto_seq: int | None = None,
    trusted: tuple[int, int] = (0, 0),
) -> tuple[RecordBatch, int]:
    """:func:`decode_batch_py` with its loop compiled (``_batch_c.decode_columns``)."""
    cols = None
    assert _decode_columns is not None  # selected only when it was built
    if type(buf) is bytes and 0 <= max_count < _BIG and 0 <= max_bytes < _BIG:
        cols = _decode_columns(buf, pos, end, expect_seq, max_count, max_bytes, upto_seq, *trusted)
    if cols is None:  # bounds the compiled loop leaves to the Python one
        return decode_batch_py(
            buf, pos, end, expect_seq, max_count=max_count, max_bytes=max_bytes,
            upto_seq=upto_seq, trusted=trusted,
        )  # fmt: skip
    topics, bodies, times, hashes, pseqs, kinds, special, last_off, stop, kind_col = cols
    batch = RecordBatch(
        expect_seq, topics, bodies, times, hashes, pseqs, stop - pos, kinds=kinds,
        special=special, buf=buf, start=pos, last_off=last_off, kind_col=kind_col,
    )  # fmt: skip
    return batch, stop


_BIG: Final = 1 << 62

try:
    from spool.server.txlog.format._batch_c import decode_columns as _decode_columns
except ImportError:  # not built: speedups.status() says why
    _decode_columns = None  # type: ignore[assignment]

decode_batch = (
    _decode_batch_c if speedups.ENABLED and _decode_columns is not None else decode_batch_py
)
