"""A batch of records decoded in bulk: columns now, :class:`Record` objects on demand.

Replaying to websockets needs, per message, the topic (routing, filters), the body and the
bookmark. Building a frozen dataclass per record costs more than all of that together, so
a replay batch keeps the hot fields as plain lists (``seqs``, ``topics``, ``bodies``...) and
builds a :class:`Record` only when one is indexed. The batch is still a
``Sequence[Record]``, so code that just iterates records works unchanged.

Sans-I/O like the codec: it decodes bytes it is given.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import google_crc32c

from server.txlog.codec import (
    CRC_RESIDUE,
    CRC_SIZE,
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


class RecordBatch(Sequence[Record]):
    """Consecutive records of one log, in order.

    Attributes:
        seqs: local sequences (contiguous).
        timestamps_us: record times.
        pub_hashes: publisher ids.
        pub_seqs: publisher sequences.
        topics: topics.
        bodies: bodies, byte for byte.
        nbytes: encoded size of the records in the journal.
    """

    __slots__ = (
        "_buf",
        "_offs",
        "_records",
        "bodies",
        "nbytes",
        "pub_hashes",
        "pub_seqs",
        "seqs",
        "timestamps_us",
        "topics",
    )

    def __init__(
        self,
        seqs: list[int],
        timestamps_us: list[int],
        pub_hashes: list[int],
        pub_seqs: list[int],
        topics: list[str],
        bodies: list[bytes],
        nbytes: int,
        *,
        records: list[Record | None] | None = None,
        buf: bytes = b"",
        offsets: list[int] | None = None,
    ) -> None:
        self.seqs = seqs
        self.timestamps_us = timestamps_us
        self.pub_hashes = pub_hashes
        self.pub_seqs = pub_seqs
        self.topics = topics
        self.bodies = bodies
        self.nbytes = nbytes
        self._records: list[Record | None] = records if records is not None else [None] * len(seqs)
        self._buf = buf
        self._offs = offsets if offsets is not None else []

    @classmethod
    def from_records(cls, records: Sequence[Record], nbytes: int = 0) -> RecordBatch:
        """A batch over records already in memory (the log's tail cache)."""
        recs: list[Record | None] = list(records)
        return cls(
            [r.seq for r in records],
            [r.timestamp_us for r in records],
            [r.pub_hash for r in records],
            [r.pub_seq for r in records],
            [r.topic for r in records],
            [r.body for r in records],
            nbytes,
            records=recs,
        )

    @classmethod
    def empty(cls) -> RecordBatch:
        """A batch with no records."""
        return cls([], [], [], [], [], [], 0)

    def __len__(self) -> int:
        return len(self.seqs)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        if isinstance(index, slice):
            return [self.record(i) for i in range(*index.indices(len(self.seqs)))]
        return self.record(index)

    def __iter__(self) -> Iterator[Record]:
        for i in range(len(self.seqs)):
            yield self.record(i)

    def record(self, i: int) -> Record:
        """The i-th record as a :class:`Record` (built once, then kept)."""
        rec = self._records[i]
        if rec is None:
            pos = self._offs[i]
            rec = build_record(self._buf, pos, HEADER.unpack_from(self._buf, pos))
            self._records[i] = rec
        return rec

    def bookmark(self, i: int) -> str:
        """The wire bookmark ``PUBHASH|PUBSEQ|`` of the i-th record."""
        return f"{self.pub_hashes[i]}|{self.pub_seqs[i]}|"

    @property
    def first_seq(self) -> int:
        """Seq of the first record (0 when empty)."""
        return self.seqs[0] if self.seqs else 0

    @property
    def last_seq(self) -> int:
        """Seq of the last record (0 when empty)."""
        return self.seqs[-1] if self.seqs else 0

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

    Same contract as :func:`server.txlog.codec.decode_records` (limits, checks, an
    incomplete last record left for the next read), but only the columns are built.

    Raises:
        CorruptRecord: a complete record fails its checks.
    """
    seqs: list[int] = []
    tss: list[int] = []
    phs: list[int] = []
    pss: list[int] = []
    topics: list[str] = []
    bodies: list[bytes] = []
    offs: list[int] = []
    records: list[Record | None] = []
    last = upto_seq if upto_seq is not None else 1 << 64
    seq = expect_seq
    taken = 0
    unpack = HEADER.unpack_from
    crc = google_crc32c.value
    text = decode_text
    while pos < end and len(seqs) < max_count and taken < max_bytes and seq <= last:
        if end - pos < HEADER_SIZE:
            break
        h = unpack(buf, pos)
        length, fmt, _kind, _flags, rseq, ts, ph, ps, tl, ml, pc, cl, sl, bl = h
        if length == 0 or (length >= MIN_RECORD and pos + length > end):
            break  # end of data, or incomplete: the caller decides
        if length < MIN_RECORD or fmt != FORMAT or crc(buf[pos : pos + length]) != CRC_RESIDUE:
            check_at(buf, pos, end)  # raises with the precise reason
        if rseq != seq:
            raise CorruptRecord(pos, "sequence gap")
        if pc or cl or sl:
            rec = build_record(buf, pos, h)
            topics.append(rec.topic)
            bodies.append(rec.body)
            records.append(rec)
        else:
            if HEADER_SIZE + tl + ml + bl + CRC_SIZE != length:
                raise CorruptRecord(pos, "length mismatch")
            p = pos + HEADER_SIZE
            try:
                topics.append(text(buf[p : p + tl]))
            except UnicodeDecodeError:
                raise CorruptRecord(pos, "bad utf-8") from None
            p += tl + ml
            bodies.append(buf[p : p + bl])
            records.append(None)
        seqs.append(seq)
        tss.append(ts)
        phs.append(ph)
        pss.append(ps)
        offs.append(pos)
        pos += length
        taken += length
        seq += 1
    batch = RecordBatch(
        seqs, tss, phs, pss, topics, bodies, taken, records=records, buf=buf, offsets=offs
    )
    return batch, pos
