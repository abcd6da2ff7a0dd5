"""Bookmark values: every form, the errors, and round trips (hypothesis)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import (
    MAX_LIST_ITEMS,
    BookmarkList,
    BookmarkPoint,
    BookmarkSpec,
    Endpoint,
    Epoch,
    Now,
    Range,
    TimePoint,
    format_bookmark,
    format_bookmarks,
    format_spec,
    format_time_bookmark,
    format_timestamp_us,
    parse_bookmark,
    pub_hash,
    spec_kind,
)
from spool.server.protocol.errors import InvalidBookmark


def us(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
    moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000


# -- pub_hash ----------------------------------------------------------------------


def test_pub_hash_is_blake2b_64_big_endian() -> None:
    digest = hashlib.blake2b(b"orders-feed", digest_size=8).digest()
    assert pub_hash("orders-feed") == int.from_bytes(digest, "big")


def test_pub_hash_is_stable_and_never_reserved() -> None:
    assert pub_hash("a") == pub_hash("a")
    assert pub_hash("a") != pub_hash("b")
    assert all(pub_hash(f"client-{i}") >= 2 for i in range(200))
    assert pub_hash("é") == pub_hash("é")  # non-ASCII names hash their UTF-8


@given(
    st.lists(st.tuples(st.integers(1, 2**64 - 1), st.integers(0, 2**63)), max_size=30),
    st.booleans(),
)
def test_format_bookmarks_is_format_bookmark_of_each(
    pairs: list[tuple[int, int]], one_publisher: bool
) -> None:
    """A run's bookmarks in one pass, whether its messages have one publisher (its hash
    formatted once) or several."""
    hashes = [pairs[0][0]] * len(pairs) if one_publisher and pairs else [h for h, _ in pairs]
    seqs = [s for _, s in pairs]
    assert format_bookmarks(hashes, seqs) == [
        format_bookmark(h, s) for h, s in zip(hashes, seqs, strict=True)
    ]


def test_format_bookmarks_needs_as_many_hashes_as_sequences() -> None:
    with pytest.raises(ValueError, match="as many"):
        format_bookmarks([1, 2], [1])


def test_format_bookmark() -> None:
    assert format_bookmark(12345, 7) == "12345|7|"


# -- single points -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", Epoch()),
        ("0|1|", Now()),
        ("0|1", Now()),
        ("  0 ", Epoch()),
        ("12345|7|", BookmarkPoint(12345, 7)),
        ("12345|7", BookmarkPoint(12345, 7)),
        ("0012345|0|", BookmarkPoint(12345, 0)),
        (f"{2**64 - 1}|{2**64 - 1}|", BookmarkPoint(2**64 - 1, 2**64 - 1)),
        ("20261122T051752", TimePoint(us(2026, 11, 22, 5, 17, 52))),
        ("20261122T051752Z", TimePoint(us(2026, 11, 22, 5, 17, 52))),
        ("20261122T051752.5Z", TimePoint(us(2026, 11, 22, 5, 17, 52) + 500_000)),
        ("20261122T051752.000123", TimePoint(us(2026, 11, 22, 5, 17, 52) + 123)),
        ("19600101T000000Z", TimePoint(us(1960, 1, 1, 0, 0, 0))),
    ],
)
def test_points(text: str, value: BookmarkSpec) -> None:
    assert parse_bookmark(text) == value


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("recent", "client's bookmark store"),
        ("abc", "expected"),
        ("1|5|", "reserved"),
        ("0|0|", "reserved"),
        ("0|2|", "reserved"),
        (f"{2**64}|1|", "64-bit"),
        (f"5|{2**64}|", "64-bit"),
        ("1" * 21 + "|1|", "expected"),
        ("-5|1|", "expected"),
        ("5|+1|", "expected"),
        ("5||", "expected"),
        ("5|1|2|", "expected"),
        ("٣|1|", "expected"),  # non-ASCII digits
        ("20261322T000000", "not a valid moment"),
        ("20260230T000000", "not a valid moment"),
        ("20260101T246000", "not a valid moment"),
        ("00000101T000000", "not a valid moment"),
        ("20260101T000000.1234567", "expected"),
        ("20260101 000000", "expected"),
        ("2026-01-01T00:00:00Z", "range"),
        ("20260101T000000+01", "expected"),
    ],
)
def test_invalid_points(text: str, detail: str) -> None:
    with pytest.raises(InvalidBookmark) as info:
        parse_bookmark(text)
    assert detail in info.value.detail
    assert info.value.reason == "invalid bookmark"


def test_not_a_string() -> None:
    with pytest.raises(InvalidBookmark):
        parse_bookmark(0)  # type: ignore[arg-type]


# -- lists and ranges -----------------------------------------------------------------


def test_list() -> None:
    assert parse_bookmark("5|1|, 6|2|,7|3") == BookmarkList(
        (BookmarkPoint(5, 1), BookmarkPoint(6, 2), BookmarkPoint(7, 3))
    )


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("5|1|,", "empty"),
        (",5|1|", "empty"),
        ("5|1|,,6|1|", "empty"),
        ("5|1|,0", "only PUBHASH|PUBSEQ|"),
        ("5|1|,0|1|", "only PUBHASH|PUBSEQ|"),
        ("5|1|,20260101T000000", "only PUBHASH|PUBSEQ|"),
    ],
)
def test_invalid_lists(text: str, detail: str) -> None:
    with pytest.raises(InvalidBookmark) as info:
        parse_bookmark(text)
    assert detail in info.value.detail


def test_list_size_is_bounded() -> None:
    text = ",".join(f"{i + 2}|1|" for i in range(MAX_LIST_ITEMS + 1))
    with pytest.raises(InvalidBookmark, match="at most"):
        parse_bookmark(text)


def test_ranges() -> None:
    t1, t2 = us(2026, 1, 1, 0, 0, 0), us(2026, 1, 2, 0, 0, 0)
    assert parse_bookmark("[20260101T000000:20260102T000000Z]") == Range(
        TimePoint(t1), True, TimePoint(t2), True
    )
    assert parse_bookmark("(5|1|:6|2|)") == Range(
        BookmarkPoint(5, 1), False, BookmarkPoint(6, 2), False
    )
    assert parse_bookmark("[0:5|1|,6|2|)") == Range(
        Epoch(), True, BookmarkList((BookmarkPoint(5, 1), BookmarkPoint(6, 2))), False
    )
    assert parse_bookmark("( 5|1|,6|2| : 0|1| ]") == Range(
        BookmarkList((BookmarkPoint(5, 1), BookmarkPoint(6, 2))), False, Now(), True
    )
    assert parse_bookmark("[0|1|:20260101T000000]") == Range(Now(), True, TimePoint(t1), True)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("[5|1|:6|1|", "must end"),
        ("5|1|:6|1|]", "must start"),
        ("5|1|:6|1|", "[start:end]"),
        ("[5|1|]", "exactly one ':'"),
        ("[5|1|:6|1|:7|1|]", "exactly one ':'"),
        ("[:6|1|]", "both"),
        ("[5|1|:]", "both"),
        ("[5|1|:0]", "cannot end at EPOCH"),
        ("[20260102T000000:20260101T000000]", "ends before it starts"),
        ("[[5|1|:6|1|]:7|1|]", "exactly one ':'"),
        ("[x:6|1|]", "expected"),
    ],
)
def test_invalid_ranges(text: str, detail: str) -> None:
    with pytest.raises(InvalidBookmark) as info:
        parse_bookmark(text)
    assert detail in info.value.detail


def test_spec_kind() -> None:
    assert [
        spec_kind(parse_bookmark(t))
        for t in ("0", "0|1|", "5|1|", "20260101T000000", "5|1|,6|1|", "[0:0|1|]")
    ] == ["epoch", "now", "bookmark", "time", "list", "range"]


# -- timestamps --------------------------------------------------------------------------


def test_format_timestamp_us() -> None:
    assert (
        format_timestamp_us(us(2026, 11, 22, 5, 17, 52) + 123456) == "2026-11-22T05:17:52.123456Z"
    )
    assert format_timestamp_us(0) == "1970-01-01T00:00:00.000000Z"
    assert format_timestamp_us(-1) == "1969-12-31T23:59:59.999999Z"


def test_format_time_bookmark() -> None:
    assert format_time_bookmark(us(2026, 11, 22, 5, 17, 52) + 42) == "20261122T051752.000042Z"


# -- properties ------------------------------------------------------------------------

EPOCH_DT = datetime(1970, 1, 1, tzinfo=UTC)
MIN_US = us(1, 1, 1, 0, 0, 0)
MAX_US = us(9999, 12, 31, 23, 59, 59) + 999_999

hashes = st.integers(min_value=2, max_value=2**64 - 1)
seqs = st.integers(min_value=0, max_value=2**64 - 1)
bookmarks = st.builds(BookmarkPoint, hashes, seqs)
times = st.builds(TimePoint, st.integers(min_value=MIN_US, max_value=MAX_US))
lists = st.builds(BookmarkList, st.lists(bookmarks, min_size=2, max_size=5).map(tuple))
starts: st.SearchStrategy[Endpoint] = st.one_of(
    st.just(Epoch()), st.just(Now()), bookmarks, times, lists
)
ends: st.SearchStrategy[Endpoint] = st.one_of(st.just(Now()), bookmarks, times, lists)


def _valid_range(r: Range) -> bool:
    if isinstance(r.start, TimePoint) and isinstance(r.end, TimePoint):
        return r.start.timestamp_us <= r.end.timestamp_us
    return True


ranges = st.builds(Range, starts, st.booleans(), ends, st.booleans()).filter(_valid_range)
specs: st.SearchStrategy[BookmarkSpec] = st.one_of(starts, ranges)


@settings(max_examples=300)
@given(specs)
def test_format_parse_round_trip(spec: BookmarkSpec) -> None:
    assert parse_bookmark(format_spec(spec)) == spec


@settings(max_examples=200)
@given(st.integers(min_value=MIN_US, max_value=MAX_US))
def test_timestamp_formats_agree(value: int) -> None:
    iso = format_timestamp_us(value)
    assert datetime.fromisoformat(iso) == EPOCH_DT + timedelta(microseconds=value)
    assert parse_bookmark(format_time_bookmark(value)) == TimePoint(value)


_alphabet = st.sampled_from(list("0123456789|,:[]()TZ. -xé\x00"))


@settings(max_examples=500)
@given(st.one_of(st.text(), st.text(alphabet=_alphabet, max_size=40)))
def test_garbage_is_invalid_bookmark_or_a_value(text: str) -> None:
    try:
        spec = parse_bookmark(text)
    except InvalidBookmark:
        return
    assert parse_bookmark(format_spec(spec)) == spec
