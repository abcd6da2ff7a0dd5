"""The ``NAME.clients.ack`` cache: each publisher's last sequence, as of a log position.

De-duplication across restarts needs, for every publisher that ever wrote, the highest
``pub_seq`` stored and the local seq of that message. The journals are the truth; this
file saves reading them and remembers publishers whose journals were removed since.
Deleting it loses nothing the journals still hold: recovery rebuilds the table from the
index summaries (publishers seen only in removed journals are then forgotten, and their
next publish is accepted whatever its sequence).

Layout (little-endian)::

    0   8  magic        b"SPOOLACK"
    8   2  version      1
    10  6  reserved
    16  8  covered_seq  the table reflects every record up to this seq
    24  8  count        entries that follow
    32  24 x count      pub_hash u64, pub_seq u64, seq u64   (sorted by pub_hash)
    end 4  crc32c       CRC-32C of every byte before it

It is rewritten whole (temp file + rename) when a journal rolls and at close. At open,
recovery turns it back into the table with :func:`rebuild_publishers`. No I/O here: the
callers read and write the file.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Final, Literal, Protocol

import google_crc32c

from spool.server.txlog.format.record import is_publisher_key
from spool.server.txlog.index.answers import PublisherSummary

__all__ = [
    "ClientsAckUse",
    "PublisherIndex",
    "encode_clients_ack",
    "highest_in_fences",
    "parse_clients_ack",
    "rebuild_publishers",
]

MAGIC: Final = b"SPOOLACK"
VERSION: Final = 1
_HEAD: Final = struct.Struct("<8sH6xQQ")  # 32
_ENTRY: Final = struct.Struct("<QQQ")  # 24


def encode_clients_ack(covered_seq: int, table: dict[int, tuple[int, int]]) -> bytes:
    """Serialize ``{pub_hash: (pub_seq, seq)}`` as of ``covered_seq``."""
    parts = [_HEAD.pack(MAGIC, VERSION, covered_seq, len(table))]
    parts.extend(_ENTRY.pack(h, ps, seq) for h, (ps, seq) in sorted(table.items()))
    body = b"".join(parts)
    return body + struct.pack("<I", google_crc32c.value(body))


def parse_clients_ack(data: bytes) -> tuple[int, dict[int, tuple[int, int]]] | None:
    """``(covered_seq, table)`` of an intact file, else None."""
    if len(data) < _HEAD.size + 4:
        return None
    magic, version, covered, count = _HEAD.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION or len(data) != _HEAD.size + count * _ENTRY.size + 4:
        return None
    if google_crc32c.value(data[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
        return None
    body = data[_HEAD.size : len(data) - 4]
    return covered, {h: (ps, seq) for h, ps, seq in _ENTRY.iter_unpack(body)}


#: how recovery used ``clients.ack``: as it was, completed from indexes, or not at all
ClientsAckUse = Literal["used", "partial", "rebuilt"]


class PublisherIndex(Protocol):
    """What :func:`rebuild_publishers` needs of a journal's index (either form has it)."""

    @property
    def last_seq(self) -> int: ...

    def publishers(self) -> Iterator[PublisherSummary]: ...


def rebuild_publishers(
    data: bytes | None,
    indexes: Sequence[PublisherIndex],
    fenced: Callable[[int], bool] | None = None,
) -> tuple[dict[int, tuple[int, int]], ClientsAckUse]:
    """The publisher table of a recovered log.

    ``clients.ack`` is trimmed to the log (entries for seqs recovery cut, or that are
    fenced now, are dropped) and completed from the publisher summaries of the journals it
    does not cover; a missing or damaged file, or an entry dropped for a fence, means every
    journal's summaries are read (a fenced record is not held: its publisher's highest is
    what the log still holds of it).

    Args:
        data: the bytes of ``clients.ack``, None when it could not be read.
        indexes: the recovered journals' indexes, oldest first.
        fenced: whether a seq is fenced (server/txlog/damage/fences.py).

    Returns:
        ``(pub_hash -> (pub_seq, seq), how the file was used)``.
    """
    last_seq = indexes[-1].last_seq if indexes else 0
    parsed = parse_clients_ack(data) if data is not None else None
    table: dict[int, tuple[int, int]] = {}
    todo: Sequence[PublisherIndex]
    state: ClientsAckUse
    if parsed is None:
        state = "rebuilt"
        todo = indexes
    else:
        covered, saved = parsed
        table = {
            h: v
            for h, v in saved.items()
            if v[1] <= last_seq and (fenced is None or not fenced(v[1]))
        }
        dropped = len(table) < sum(1 for v in saved.values() if v[1] <= last_seq)
        if dropped or covered > last_seq:
            state = "partial"
            todo = indexes
        else:
            todo = [index for index in indexes if index.last_seq > covered]
            state = "used" if not todo else "partial"
    for index in todo:
        for p in index.publishers():
            if not is_publisher_key(p.pub_hash):
                continue  # fenced records' placeholders, due records: no new message
            cur = table.get(p.pub_hash)
            if cur is None or p.last_seq > cur[1]:
                table[p.pub_hash] = (p.max_pub_seq, p.last_seq)
    return table, state


def highest_in_fences(data: bytes | None, fenced: Callable[[int], bool]) -> dict[int, int]:
    """The publishers whose last record ``clients.ack`` names is fenced now: ``pub_hash ->
    pub_seq``. The table leaves them at what the log still holds; this says how far their
    records went, so a fence that lacks their names can ask for them (those past the last
    one the log holds and up to this are in a fence: server/txlog/damage/fenceplan.py)."""
    parsed = parse_clients_ack(data) if data is not None else None
    if parsed is None:
        return {}
    return {h: ps for h, (ps, seq) in parsed[1].items() if fenced(seq)}
