"""Positions in an instance's log, as the ``spool`` format's options give them.

A position is a place between records, named like a Kafka offset: ``earliest``,
``latest``, a seq, a bookmark ``PUBHASH|PUBSEQ|`` (the place just after that record, as a
subscription from a bookmark starts after it), or a time (the place before the first
record at or after it). :func:`seq_at` gives the seq of the record just after a
position: the first to read when the position starts a range, the first not to read when
it ends one (so a bookmark that ends a range includes its record, and a position given as
both ends reads nothing).
"""

from __future__ import annotations

from collections.abc import Callable

from spool.server.bookmarks import BookmarkPoint, Epoch, Now, TimePoint, parse_bookmark
from spool.server.pipeline.catalog import Catalog
from spool.server.pipeline.errors import BadOption
from spool.server.protocol.errors import InvalidBookmark

__all__ = ["seq_at"]

_FORMS = "earliest, latest, a seq, a bookmark PUBHASH|PUBSEQ| or a time YYYYmmddTHHMMSS"


def seq_at(catalog: Catalog, text: str, option: str, latest: Callable[[], int]) -> int:
    """The seq of the first record after position ``text``: the first to read when it
    starts a range, the first not to read when it ends one. ``latest`` gives one past the
    last record that may be read now.

    Raises:
        BadOption: not a position (``option`` names it), or a bookmark no record of the
            log has.
    """
    value = text.strip()
    if value.lower() == "earliest":
        return catalog.first_seq
    if value.lower() == "latest":
        return latest()
    if value.isdigit():
        return max(1, int(value))
    try:
        spec = parse_bookmark(value)
    except InvalidBookmark as exc:
        raise BadOption(option, text, f"{_FORMS} ({exc})") from exc
    if isinstance(spec, Epoch):
        return catalog.first_seq
    if isinstance(spec, Now):
        return latest()
    if isinstance(spec, BookmarkPoint):
        seq = catalog.seq_for_bookmark(spec.pub_hash, spec.pub_seq)
        if seq is None:
            raise BadOption(option, text, "no record of these journals has this bookmark")
        return seq + 1
    if isinstance(spec, TimePoint):
        return catalog.seq_for_time(spec.timestamp_us)
    raise BadOption(option, text, _FORMS)
