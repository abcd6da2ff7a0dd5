"""What a job reads: an instance's journals, optionally from one position to another.

``--from`` and ``--to`` take a bookmark (``PUBHASH|PUBSEQ|``) or a time
(``YYYYmmddTHHMMSS[.ffffff][Z]``, UTC), like ``spool journal`` and bookmark
subscriptions. They are positions in the log, resolved on the driver through the
indexes (one block read each): ``--from`` is the record with that bookmark, or the first
record (in log order) at or after that time; ``--to`` is the record with that bookmark,
or the last record before the first one recorded after that time. Both are inclusive and
become a seq range, which the source prunes by index block. With a clock that never went
backwards, a time range is exactly "recorded between these times".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from spool.server.bookmarks import BookmarkPoint, TimePoint, parse_bookmark
from spool.server.pipeline.catalog import Catalog
from spool.server.pipeline.errors import BadOption
from spool.server.pipeline.predicate import MAX_SEQ
from spool.server.protocol.errors import InvalidBookmark

__all__ = ["Scope"]


@dataclass(frozen=True, slots=True)
class Scope:
    """The journals of one instance and a seq range in them.

    Attributes:
        journal_dir, archive_dir, name: as the source's options.
        seq_lo, seq_hi: inclusive.
        journals: journal files found.
        blocks: index blocks over all journals.
    """

    journal_dir: Path
    archive_dir: Path | None
    name: str
    seq_lo: int = 0
    seq_hi: int = MAX_SEQ
    journals: int = 0

    @classmethod
    def resolve(
        cls,
        journal_dir: Path,
        archive_dir: Path | None = None,
        name: str | None = None,
        start: str | None = None,
        end: str | None = None,
    ) -> Scope:
        """Find the journals and turn ``start`` / ``end`` into seqs (on the driver).

        Raises:
            JournalDirectoryNotFound, NoJournals, AmbiguousInstance, UnreadableJournal:
                from the catalog.
            BadOption: a position that does not parse or is not in the log.
        """
        with Catalog.open(journal_dir, archive_dir, name) as catalog:
            lo = _position(catalog, start, "--from", first=True) if start else 0
            hi = _position(catalog, end, "--to", first=False) if end else MAX_SEQ
            return cls(journal_dir, archive_dir, catalog.instance, lo, hi, len(catalog.journals))

    def load(self, spark: SparkSession, mode: str = "PERMISSIVE") -> DataFrame:
        """The source over these journals, restricted to the seq range (pushed down)."""
        reader = spark.read.format("spool").option("name", self.name).option("mode", mode)
        if self.archive_dir is not None:
            reader = reader.option("archive", str(self.archive_dir))
        df = reader.load(str(self.journal_dir))
        if self.seq_lo > 0:
            df = df.where(df.seq >= self.seq_lo)
        if self.seq_hi < MAX_SEQ:
            df = df.where(df.seq <= self.seq_hi)
        return df


def _position(catalog: Catalog, text: str, flag: str, *, first: bool) -> int:
    try:
        spec = parse_bookmark(text)
    except InvalidBookmark as exc:
        raise BadOption(
            flag, text, f"a bookmark PUBHASH|PUBSEQ| or a time YYYYmmddTHHMMSS ({exc})"
        ) from exc
    if isinstance(spec, BookmarkPoint):
        seq = catalog.seq_for_bookmark(spec.pub_hash, spec.pub_seq)
        if seq is None:
            raise BadOption(flag, text, "no record of these journals has this bookmark")
        return seq
    if isinstance(spec, TimePoint):
        if first:
            return catalog.seq_for_time(spec.timestamp_us)
        return catalog.seq_for_time(spec.timestamp_us + 1) - 1
    raise BadOption(flag, text, "a bookmark PUBHASH|PUBSEQ| or a time YYYYmmddTHHMMSS")
