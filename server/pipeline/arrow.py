"""The source's schema, and scanner columns as Arrow record batches.

One definition of the rows the ``spool`` format gives (docs/pipeline.md has the table):
:data:`SPARK_SCHEMA` (a DDL string Spark parses) and :data:`ARROW_SCHEMA`, which must be
exactly what Spark derives from it (a test compares them), because Spark refuses record
batches whose schema differs in any detail.

Publisher ids and sequences are unsigned 64-bit in the journal; Spark has no unsigned
long, so they are ``DECIMAL(20,0)`` (exact; ``publisher_id = 123`` works in SQL). Bodies
come twice: ``data`` as bytes, ``data_text`` as UTF-8 text (NULL when the body is not
valid UTF-8). ``damage`` is NULL on every record; with ``mode`` PERMISSIVE each damaged
span of a journal is one extra row whose ``damage`` says what was lost (as Spark's JSON
and CSV readers put malformed input in a corrupt-record column).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spool.server.pipeline.scanner import Columns, Damage

__all__ = ["ARROW_SCHEMA", "COLUMNS", "SPARK_SCHEMA", "damage_batch", "records_batch"]

_TEXT = StringType()
_ULONG = DecimalType(20, 0)
#: the rows of the source, as Spark sees them
SPARK_SCHEMA: Final = StructType(
    [
        StructField("seq", LongType(), nullable=False),
        StructField("bookmark", _TEXT),
        StructField("publisher_id", _ULONG),
        StructField("publisher_seq", _ULONG),
        StructField("timestamp", TimestampType()),
        StructField("topic", _TEXT),
        StructField("message_type", _TEXT),
        StructField("kind", _TEXT),
        StructField("path", ArrayType(_TEXT, containsNull=False)),
        StructField("flags", IntegerType()),
        StructField("corr_id", _TEXT),
        StructField("sow_key", _TEXT),
        StructField("data", BinaryType()),
        StructField("data_text", _TEXT),
        StructField("journal", LongType()),
        StructField("offset", LongType()),
        StructField(
            "damage",
            StructType(
                [
                    StructField("reason", _TEXT, nullable=False),
                    StructField("bytes", LongType(), nullable=False),
                    StructField("records", LongType()),
                ]
            ),
        ),
    ]
)

_DEC: Final = pa.decimal128(20, 0)
_DAMAGE: Final = pa.struct(
    [
        pa.field("reason", pa.string(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("records", pa.int64()),
    ]
)
ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("bookmark", pa.string()),
        pa.field("publisher_id", _DEC),
        pa.field("publisher_seq", _DEC),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("topic", pa.string()),
        pa.field("message_type", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("path", pa.list_(pa.field("element", pa.string(), nullable=False))),
        pa.field("flags", pa.int32()),
        pa.field("corr_id", pa.string()),
        pa.field("sow_key", pa.string()),
        pa.field("data", pa.binary()),
        pa.field("data_text", pa.string()),
        pa.field("journal", pa.int64()),
        pa.field("offset", pa.int64()),
        pa.field("damage", _DAMAGE),
    ]
)
COLUMNS: Final = tuple(ARROW_SCHEMA.names)


def _u64(values: list[int]) -> pa.Array:
    return pa.array(values, pa.uint64()).cast(_DEC)


def text_of(data: pa.Array) -> pa.Array:
    """Bodies as UTF-8 strings; NULL for a body that is not valid UTF-8.

    The whole column is validated and converted in C; only a column holding an invalid
    body falls back to checking bodies one by one.
    """
    try:
        return data.cast(pa.string())
    except pa.ArrowInvalid:
        out: list[str | None] = []
        for body in data.to_pylist():
            try:
                out.append(body.decode() if body is not None else None)
            except UnicodeDecodeError:
                out.append(None)
        return pa.array(out, pa.string())


def records_batch(cols: Columns) -> pa.RecordBatch:
    """The kept records of a scan as a batch of :data:`ARROW_SCHEMA`."""
    n = len(cols.seqs)
    data = pa.array(cols.bodies, pa.binary())
    bookmarks = [f"{h}|{s}|" for h, s in zip(cols.hashes, cols.pseqs, strict=True)]
    arrays = [
        pa.array(cols.seqs, pa.int64()),
        pa.array(bookmarks, pa.string()),
        _u64(cols.hashes),
        _u64(cols.pseqs),
        pa.array(cols.times, pa.timestamp("us", tz="UTC")),
        pa.array(cols.topics, pa.string()),
        pa.array(cols.mtypes, pa.string()),
        pa.array(cols.kinds, pa.string()),
        pa.array(cols.paths, ARROW_SCHEMA.field("path").type),
        pa.array(cols.flags, pa.int32()),
        pa.array(cols.corr_ids, pa.string()),
        pa.array(cols.sow_keys, pa.string()),
        data,
        text_of(data),
        pa.array([cols.journal] * n, pa.int64()),
        pa.array(cols.offsets, pa.int64()),
        pa.nulls(n, _DAMAGE),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def damage_batch(d: Damage) -> pa.RecordBatch:
    """One damaged span as a row: ``seq`` is the first seq lost, ``damage`` says the rest."""
    row: dict[str, object] = {name: None for name in COLUMNS}
    row.update(
        seq=d.first_seq,
        journal=d.journal,
        offset=d.offset,
        damage={"reason": d.reason, "bytes": d.nbytes, "records": d.records},
    )
    return pa.RecordBatch.from_pylist([row], schema=ARROW_SCHEMA)
