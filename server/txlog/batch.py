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

from collections.abc import Iterator, Sequence
from typing import overload

import google_crc32c

from server.txlog.codec import (
    CRC_RESIDUE,
    FORMAT,
    HEADER,
    HEADER_SIZE,
    MIN_RECORD,
    build_record,
    check_at,
    decode_text,
)
from server.txlog.errors import CorruptRecord
from server.txlog.record import Record

__all__ = ["RecordBatch", "decode_batch"]

# positions in a record header tuple (codec.HEADER)
_LEN, _SEQ, _TS, _PH, _PS = 0, 4, 5, 6, 7


class RecordBatch(Sequence[Record]):
    """Consecutive records of one log, in order.

    Attributes:
        topics: the records' topics.
        bodies: their bodies, byte for byte.
        nbytes: their encoded size in the journal.
    """

    __slots__ = ("_buf", "_first", "_hdrs", "_offs", "_records", "bodies", "nbytes", "topics")

    def __init__(
        self,
        first_seq: int,
        headers: list[tuple[int, ...]],
        topics: list[str],
        bodies: list[bytes],
        nbytes: int,
        *,
        buf: bytes = b"",
        start: int = 0,
        records: list[Record | None] | None = None,
    ) -> None:
        self._first = first_seq
        self._hdrs = headers
        self.topics = topics
        self.bodies = bodies
        self.nbytes = nbytes
        self._buf = buf
        self._offs: list[int] | int = start  # the first offset until record() needs them all
        self._records: list[Record | None] | None = records

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> RecordBatch:
        """A batch over records already built."""
        headers: list[tuple[int, ...]] = [
            (0, FORMAT, r.kind, r.flags, r.seq, r.timestamp_us, r.pub_hash, r.pub_seq)
            for r in records
        ]
        first = records[0].seq if records else 0
        return cls(
            first, headers, [r.topic for r in records], [r.body for r in records], 0,
            records=list(records),
        )  # fmt: skip

    @classmethod
    def empty(cls) -> RecordBatch:
        """A batch with no records."""
        return cls(0, [], [], [], 0)

    def __len__(self) -> int:
        return len(self._hdrs)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return [self.record(i) for i in range(*index.indices(len(self._hdrs)))]
        return self.record(index)

    def __iter__(self) -> Iterator[Record]:
        for i in range(len(self._hdrs)):
            yield self.record(i)

    def record(self, i: int) -> Record:
        """The i-th record as a :class:`Record` (built once, then kept)."""
        if i < 0:
            i += len(self._hdrs)
        records = self._records
        if records is None:
            records = self._records = [None] * len(self._hdrs)
        rec = records[i]
        if rec is None:
            offs = self._offs
            if isinstance(offs, int):
                pos = offs
                offs = []
                for h in self._hdrs:
                    offs.append(pos)
                    pos += h[_LEN]
                self._offs = offs
            rec = build_record(self._buf, offs[i], self._hdrs[i])
            records[i] = rec
        return rec

    @property
    def headers(self) -> list[tuple[int, ...]]:
        """The records' checked header tuples (``codec.HEADER`` fields, in order)."""
        return self._hdrs

    def has_corr_ids(self) -> bool:
        """Whether any record of the batch carries a correlation id."""
        return any(h[11] for h in self._hdrs)

    def kinds(self) -> set[int]:
        """The distinct record kinds in the batch (without building records)."""
        return {h[2] for h in self._hdrs}

    def corr_id(self, i: int) -> str:
        """The i-th record's correlation id ("" without building a record when absent)."""
        if not self._hdrs[i][11]:
            return ""
        return self.record(i).corr_id

    @property
    def seqs(self) -> range:
        """The records' local sequences (contiguous)."""
        return range(self._first, self._first + len(self._hdrs))

    @property
    def timestamps_us(self) -> list[int]:
        """The records' times."""
        return [h[_TS] for h in self._hdrs]

    @property
    def pub_hashes(self) -> list[int]:
        """The records' publisher ids."""
        return [h[_PH] for h in self._hdrs]

    @property
    def pub_seqs(self) -> list[int]:
        """The records' publisher sequences."""
        return [h[_PS] for h in self._hdrs]

    def timestamp_us(self, i: int) -> int:
        """Time of the i-th record."""
        return self._hdrs[i][_TS]

    def bookmark(self, i: int) -> str:
        """The wire bookmark ``PUBHASH|PUBSEQ|`` of the i-th record."""
        h = self._hdrs[i]
        return f"{h[_PH]}|{h[_PS]}|"

    @property
    def first_seq(self) -> int:
        """Seq of the first record (0 when empty)."""
        return self._first if self._hdrs else 0

    @property
    def last_seq(self) -> int:
        """Seq of the last record (0 when empty)."""
        return self._first + len(self._hdrs) - 1 if self._hdrs else 0

    def __repr__(self) -> str:
        return f"RecordBatch(seqs {self.first_seq}..{self.last_seq}, {len(self)} records)"


def decode_batch(
    buf: bytes,
    pos: int,
    end: int,
    expect_seq: int,
    *,
    max_count: int = 1000,
    max_bytes: int = 1 << 20,
    upto_seq: int | None = None,
) -> tuple[RecordBatch, int]:
    """Decode consecutive records into a :class:`RecordBatch`.

    Same contract as :func:`server.txlog.codec.decode_records` (limits, checks, a zero
    length or an incomplete last record ending the batch), but no Record is built.

    Raises:
        CorruptRecord: a complete record fails its checks.
    """
    start = pos
    hdrs: list[tuple[int, ...]] = []
    topics: list[str] = []
    bodies: list[bytes] = []
    stop_seq = upto_seq if upto_seq is not None else 1 << 64
    if max_count < stop_seq - expect_seq + 1:
        stop_seq = expect_seq + max_count - 1
    seq = expect_seq
    unpack = HEADER.unpack_from
    crc = google_crc32c.value
    text = decode_text
    add_hdr, add_topic, add_body = hdrs.append, topics.append, bodies.append
    startswith = buf.startswith
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
        if length < MIN_RECORD or h[1] != FORMAT or crc(buf[pos : pos + length]) != CRC_RESIDUE:
            check_at(buf, pos, end)  # raises with the precise reason
        if h[_SEQ] != seq:
            raise CorruptRecord(pos, "sequence gap")
        tl = h[8]
        if h[10] or h[11] or h[12]:
            rec = build_record(buf, pos, h)
            add_topic(rec.topic)
            add_body(rec.body)
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
        add_hdr(h)
        pos += length
        seq += 1
    return RecordBatch(expect_seq, hdrs, topics, bodies, pos - start, buf=buf, start=start), pos
