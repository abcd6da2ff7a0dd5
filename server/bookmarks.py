"""Bookmark values: parse and format EPOCH, NOW, bookmarks, timestamps, lists and ranges.

A subscriber names where a replay starts (and, for a range, where it ends) with the ``bm``
header (docs/protocol.md "Bookmarks"). This module turns that text into value types and back;
it does no I/O and knows nothing about the transaction log (``server/replay/plan.py``
resolves the values against the log: ``plan_replay``, ``resolve_start``).

Grammar (whitespace around the whole value and around list items is ignored)::

    spec      = point | list | range
    point     = "0"                          EPOCH: the start of the log
              | "0|1|"                       NOW: only messages recorded from now on
              | HASH "|" SEQ "|"             a bookmark (the trailing "|" may be omitted)
              | YYYYmmdd "T" HHMMSS ["." 1-6 digits] ["Z"]     a moment, always UTC
    list      = bookmark ("," bookmark)+     start at the oldest one found in the log
    range     = ("[" | "(") endpoint ":" endpoint ("]" | ")")
    endpoint  = point | list                 (EPOCH may start a range, never end one)

``[`` / ``]`` include the endpoint, ``(`` / ``)`` exclude it. Lists hold bookmarks only:
they are what a client's bookmark store sends (one position per publisher).

Publisher ids 0 and 1 are reserved: ``0`` is EPOCH and ``0|1|`` is NOW, so :func:`pub_hash`
never returns them and a bookmark naming them any other way is invalid.

Every malformed value raises :class:`~spool.server.protocol.errors.InvalidBookmark` with a detail
saying what was wrong; nothing else escapes :func:`parse_bookmark`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Final, Literal, TypeAlias

from spool.server.protocol.errors import InvalidBookmark

EPOCH_TEXT: Final = "0"
NOW_TEXT: Final = "0|1|"

#: Publisher ids below this are reserved for EPOCH / NOW.
FIRST_PUB_HASH: Final = 2
MAX_PUB_HASH: Final = (1 << 64) - 1
MAX_PUB_SEQ: Final = (1 << 64) - 1

#: Bounds that keep a hostile ``bm`` header cheap to reject.
MAX_BOOKMARK_TEXT: Final = 1 << 20
MAX_LIST_ITEMS: Final = 10_000

_BOOKMARK_RE: Final = re.compile(r"([0-9]{1,20})\|([0-9]{1,20})\|?")
_TIME_RE: Final = re.compile(
    r"([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})(?:\.([0-9]{1,6}))?Z?"
)
#: how :func:`parse_moment_us` (and a bookmark) writes a moment
MOMENT_FORM: Final = "YYYYmmddTHHMMSS[.ffffff][Z] (UTC)"
_UNIX_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US: Final = timedelta(microseconds=1)
_FORMS: Final = "expected 0, 0|1|, PUBHASH|PUBSEQ|, YYYYmmddTHHMMSS[Z], a comma list or a range"


def pub_hash(client_name: str) -> int:
    """The stable 64-bit publisher id of a client name (the first half of a bookmark).

    BLAKE2b with an 8-byte digest, read big-endian: the same on every instance, every
    platform and every Python version, so a bookmark means the same message everywhere.
    Results 0 and 1 are shifted up by 2 because those ids are reserved (``0`` is EPOCH,
    ``0|1|`` is NOW); the shift makes two of 2**64 names share an id with names hashing
    to 2 and 3, which is as harmless as any other 64-bit collision.
    """
    value = int.from_bytes(hashlib.blake2b(client_name.encode(), digest_size=8).digest(), "big")
    return value + FIRST_PUB_HASH if value < FIRST_PUB_HASH else value


#: An instance's own publisher identity is
#: ``pub_hash(BROKER_PUBLISHER_PREFIX + name + "#" + incarnation)``: the messages it
#: publishes itself (actions), the ``sow_delete`` removals and queue records it logs.
BROKER_PUBLISHER_PREFIX: Final = "spool-broker:"


def broker_pub_hash(instance: str, incarnation: str = "") -> int:
    """The publisher id of instance ``instance`` itself, in the incarnation of its log
    ``incarnation`` (server/txlog/publishers/incarnation.py): one id per log of an instance, so its
    records (numbered by that log) have bookmarks every other instance de-duplicates on,
    and a log that starts over never numbers a record under a bookmark an earlier log of
    the instance used. ``incarnation`` empty: the name alone (instance names hold no
    ``#``, so the two forms never meet)."""
    suffix = "#" + incarnation if incarnation else ""
    return pub_hash(BROKER_PUBLISHER_PREFIX + instance + suffix)


#: A derived message's publisher identity (a message an action publishes because of another
#: message) is ``pub_hash(DERIVED_PUBLISHER_PREFIX + action + "/" + step + "#" + source)``.
DERIVED_PUBLISHER_PREFIX: Final = "spool-action:"
#: The beginnings of client names a logon refuses (server/clients.py): nobody publishes
#: under the broker's own identity or a derived one, so no client's sequence can make the
#: de-duplication drop the broker's messages, or take one a derived message needs.
RESERVED_CLIENT_PREFIXES: Final = (BROKER_PUBLISHER_PREFIX, DERIVED_PUBLISHER_PREFIX)


def derived_pub_hash(
    action: str, step: int, source_pub_hash: int, *, unrecorded: bool = False
) -> int:
    """The publisher id of what step ``step`` of action ``action`` publishes because of
    messages of publisher ``source_pub_hash``.

    A derived message takes its source's ``pub_seq``, so this publisher's sequences rise as
    its source's do, and a second run over the same source (a catch-up after a restart, a
    failover, two instances running the action) repeats a bookmark the log holds: the
    publish pipeline drops it as a duplicate, and there is one derived message per source.
    The source's id is part of the name because two sources number from 1 alike, the step
    because one action may publish twice per message. The prefix keeps the id apart from
    every client's (a logon refuses the prefix: :data:`RESERVED_CLIENT_PREFIXES`) and from
    the broker's own (:func:`broker_pub_hash`).

    A source without a bookmark (published to a topic the log does not record) has no
    sequence to lend: what is derived from it is numbered on from the log's highest for
    the id, under an id of its own (``unrecorded``, the name ends ``~``) so the two
    numberings of one source publisher never meet."""
    suffix = "~" if unrecorded else ""
    return pub_hash(f"{DERIVED_PUBLISHER_PREFIX}{action}/{step}#{source_pub_hash}{suffix}")


def format_bookmark(pub_hash: int, pub_seq: int) -> str:
    """The wire bookmark ``PUBHASH|PUBSEQ|`` (decimal)."""
    return f"{pub_hash}|{pub_seq}|"


def format_bookmarks(pub_hashes: Sequence[int], pub_seqs: Sequence[int]) -> list[str]:
    """:func:`format_bookmark` of each pair, in one pass (a run of publishes: a call per
    message was a visible part of a queue's admission). A run from one publisher (the
    usual case) formats its hash once: the hash's digits were half the cost."""
    if len(pub_hashes) != len(pub_seqs):
        raise ValueError("as many publisher hashes as sequences are needed")
    if pub_hashes and pub_hashes.count(pub_hashes[0]) == len(pub_hashes):
        head = f"{pub_hashes[0]}|"
        return [f"{head}{s}|" for s in pub_seqs]
    return [f"{h}|{s}|" for h, s in zip(pub_hashes, pub_seqs, strict=True)]


#: what kind of bookmark a subscription gave (admin listings)
SpecKind = Literal["epoch", "now", "bookmark", "time", "list", "range"]


# -- value types ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Epoch:
    """``0``: from the first record still in the log."""


@dataclass(frozen=True, slots=True)
class Now:
    """``0|1|``: only records made durable after the subscription."""


@dataclass(frozen=True, slots=True)
class BookmarkPoint:
    """One message, named by its publisher id and the publisher's sequence number."""

    pub_hash: int
    pub_seq: int

    def __str__(self) -> str:
        return format_bookmark(self.pub_hash, self.pub_seq)


@dataclass(frozen=True, slots=True)
class TimePoint:
    """A moment (microseconds since the Unix epoch, UTC)."""

    timestamp_us: int


@dataclass(frozen=True, slots=True)
class BookmarkList:
    """Several bookmarks (at least two; one bookmark alone parses as a :class:`BookmarkPoint`).

    As a start it means the oldest one found in the log; as a range end, the newest.
    """

    points: tuple[BookmarkPoint, ...]


Point: TypeAlias = Epoch | Now | BookmarkPoint | TimePoint
Endpoint: TypeAlias = Point | BookmarkList


@dataclass(frozen=True, slots=True)
class Range:
    """``[``/``(`` start ``:`` end ``]``/``)``: a bounded replay.

    Attributes:
        start: where delivery begins (never a range).
        start_inclusive: ``[`` delivers the start message itself, ``(`` begins after it.
        end: where delivery ends (never EPOCH).
        end_inclusive: ``]`` delivers the end message itself, ``)`` stops before it.
    """

    start: Endpoint
    start_inclusive: bool
    end: Endpoint
    end_inclusive: bool


BookmarkSpec: TypeAlias = Endpoint | Range


def lookup_points(spec: BookmarkSpec) -> tuple[list[tuple[int, int]], list[int]]:
    """The log lookups planning ``spec`` makes: ``(pub_hash, pub_seq)`` bookmarks and
    timestamps (µs), from both ends of a range."""
    bookmarks: list[tuple[int, int]] = []
    times: list[int] = []
    # (endpoint, the microsecond its time is looked up at): a range's start is looked up
    # one past an exclusive time, its end one past an inclusive time (the first record
    # *after* the end: server/replay/plan.py)
    ends: tuple[tuple[Endpoint, int], ...]
    if isinstance(spec, Range):
        ends = ((spec.start, 0 if spec.start_inclusive else 1),
                (spec.end, 1 if spec.end_inclusive else 0))  # fmt: skip
    else:
        ends = ((spec, 0),)
    for end, past in ends:
        if isinstance(end, BookmarkPoint):
            bookmarks.append((end.pub_hash, end.pub_seq))
        elif isinstance(end, BookmarkList):
            bookmarks.extend((p.pub_hash, p.pub_seq) for p in end.points)
        elif isinstance(end, TimePoint):
            times.append(end.timestamp_us + past)
    return bookmarks, times


def spec_kind(spec: BookmarkSpec) -> SpecKind:
    """A one-word kind for admin listings: epoch, now, bookmark, time, list or range."""
    match spec:
        case Epoch():
            return "epoch"
        case Now():
            return "now"
        case BookmarkPoint():
            return "bookmark"
        case TimePoint():
            return "time"
        case BookmarkList():
            return "list"
        case Range():
            return "range"
    raise TypeError(f"not a bookmark spec: {spec!r}")


# -- timestamps -----------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _second_prefix(seconds: int) -> str:
    """``YYYY-mm-ddTHH:MM:SS`` of a whole second; cached because records arrive in runs
    sharing the same second and formatting a datetime costs more than the lookup."""
    d = _UNIX_EPOCH + timedelta(seconds=seconds)
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"


def format_timestamp_us(timestamp_us: int) -> str:
    """The ``ts`` header value: ISO-8601 UTC with microseconds, e.g.
    ``2026-11-22T05:17:52.123456Z``."""
    seconds, micros = divmod(timestamp_us, 1_000_000)
    return f"{_second_prefix(seconds)}.{micros:06d}Z"


def format_time_bookmark(timestamp_us: int) -> str:
    """A moment as a bookmark value: ``YYYYmmddTHHMMSS.ffffffZ``."""
    seconds, micros = divmod(timestamp_us, 1_000_000)
    d = _UNIX_EPOCH + timedelta(seconds=seconds)
    return (
        f"{d.year:04d}{d.month:02d}{d.day:02d}T{d.hour:02d}{d.minute:02d}{d.second:02d}"
        f".{micros:06d}Z"
    )


def parse_moment_us(text: str) -> int:
    """Microseconds since the Unix epoch of a moment written as a bookmark writes one,
    ``YYYYmmddTHHMMSS[.f{1,6}][Z]``, always UTC (the ``Z`` may be left out).

    Public so that other grammars naming a moment (a publish's ``deliver_at``,
    server/protocol/options.py) read exactly the bookmarks' form.

    Raises:
        ValueError: ``text`` is not of that form, or names no date and time of the
            calendar (a 30 February, hour 24); the message says which, without ``text``.
    """
    match = _TIME_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"expected a moment {MOMENT_FORM}")
    try:
        return _moment_us(match)
    except ValueError as exc:
        raise ValueError(f"no such moment: {exc}") from exc


def _moment_us(match: re.Match[str]) -> int:
    """:func:`parse_moment_us` of a match of ``_TIME_RE``; ValueError for no such moment."""
    year, month, day, hour, minute, second, fraction = match.groups()
    moment = datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC
    )
    micros = int(fraction.ljust(6, "0")) if fraction else 0
    return (moment - _UNIX_EPOCH) // _ONE_US + micros


def _parse_time(match: re.Match[str], text: str) -> TimePoint:
    try:
        return TimePoint(_moment_us(match))
    except ValueError as exc:
        raise InvalidBookmark(f"{text!r} is not a valid moment: {exc}") from exc


# -- parsing --------------------------------------------------------------------------


def _parse_bookmark_point(match: re.Match[str], text: str) -> Now | BookmarkPoint:
    hash_value, seq_value = int(match.group(1)), int(match.group(2))
    if hash_value < FIRST_PUB_HASH:
        if hash_value == 0 and seq_value == 1:
            return Now()
        raise InvalidBookmark(
            f"{text!r}: publisher ids 0 and 1 are reserved (0 is EPOCH, 0|1| is NOW)"
        )
    if hash_value > MAX_PUB_HASH or seq_value > MAX_PUB_SEQ:
        raise InvalidBookmark(f"{text!r}: publisher id and sequence are 64-bit numbers")
    return BookmarkPoint(hash_value, seq_value)


def _parse_point(text: str) -> Point:
    if text == EPOCH_TEXT:
        return Epoch()
    match = _BOOKMARK_RE.fullmatch(text)
    if match is not None:
        return _parse_bookmark_point(match, text)
    match = _TIME_RE.fullmatch(text)
    if match is not None:
        return _parse_time(match, text)
    if not text:
        raise InvalidBookmark("empty bookmark")
    if text.lower() == "recent":
        raise InvalidBookmark(
            "'recent' is resolved by the client's bookmark store; send the bookmark itself"
        )
    raise InvalidBookmark(f"{text[:80]!r}: {_FORMS}")


def _parse_endpoint(text: str) -> Endpoint:
    if "," not in text:
        return _parse_point(text)
    items = text.split(",")
    if len(items) > MAX_LIST_ITEMS:
        raise InvalidBookmark(f"a bookmark list holds at most {MAX_LIST_ITEMS} bookmarks")
    points: list[BookmarkPoint] = []
    for item in items:
        point = _parse_point(item.strip())
        if not isinstance(point, BookmarkPoint):
            raise InvalidBookmark(
                f"{item.strip()[:80]!r}: a list holds only PUBHASH|PUBSEQ| bookmarks"
            )
        points.append(point)
    return BookmarkList(tuple(points))


def _parse_range(text: str) -> Range:
    if text[-1] not in "])":
        raise InvalidBookmark(f"range {text[:80]!r} must end with ']' or ')'")
    inner = text[1:-1]
    if inner.count(":") != 1:
        raise InvalidBookmark(f"range {text[:80]!r} needs exactly one ':' between its ends")
    start_text, end_text = (part.strip() for part in inner.split(":"))
    if not start_text or not end_text:
        raise InvalidBookmark(f"range {text[:80]!r} needs both a start and an end")
    start, end = _parse_endpoint(start_text), _parse_endpoint(end_text)
    if isinstance(end, Epoch):
        raise InvalidBookmark("a range cannot end at EPOCH")
    if (
        isinstance(start, TimePoint)
        and isinstance(end, TimePoint)
        and start.timestamp_us > end.timestamp_us
    ):
        raise InvalidBookmark(f"range {text[:80]!r} ends before it starts")
    return Range(start, text[0] == "[", end, text[-1] == "]")


def parse_bookmark(text: str) -> BookmarkSpec:
    """Parse a ``bm`` header value.

    Raises:
        InvalidBookmark: the value matches none of the forms (the detail says why).
    """
    if not isinstance(text, str):
        raise InvalidBookmark("a bookmark is a string")
    if len(text) > MAX_BOOKMARK_TEXT:
        raise InvalidBookmark(f"bookmark value longer than {MAX_BOOKMARK_TEXT} characters")
    text = text.strip()
    if not text:
        raise InvalidBookmark("empty bookmark")
    if text[0] in "[(":
        return _parse_range(text)
    if text[-1] in "])":
        raise InvalidBookmark(f"range {text[:80]!r} must start with '[' or '('")
    if ":" in text:
        raise InvalidBookmark(f"{text[:80]!r}: a range is written [start:end]")
    return _parse_endpoint(text)


# -- formatting -----------------------------------------------------------------------


def _format_endpoint(value: Endpoint) -> str:
    match value:
        case Epoch():
            return EPOCH_TEXT
        case Now():
            return NOW_TEXT
        case BookmarkPoint(pub_hash=h, pub_seq=s):
            return format_bookmark(h, s)
        case TimePoint(timestamp_us=us):
            return format_time_bookmark(us)
        case BookmarkList(points=points):
            return ",".join(format_bookmark(p.pub_hash, p.pub_seq) for p in points)
    raise TypeError(f"not a bookmark endpoint: {value!r}")


def format_spec(spec: BookmarkSpec) -> str:
    """The canonical text of a spec; ``parse_bookmark(format_spec(s)) == s``."""
    if isinstance(spec, Range):
        return (
            ("[" if spec.start_inclusive else "(")
            + _format_endpoint(spec.start)
            + ":"
            + _format_endpoint(spec.end)
            + ("]" if spec.end_inclusive else ")")
        )
    return _format_endpoint(spec)
