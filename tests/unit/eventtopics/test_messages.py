"""The event topics' messages: every field of its topic in each (null when it does not
apply), the head, text cut to its bound, no secret and no bookmark."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from spool.server.bookmarks import format_timestamp_us
from spool.server.eventtopics.messages import (
    CLIENTS,
    FIELDS,
    LINKS,
    MAX_FILTER,
    MAX_TEXT,
    SOW_STATS,
    SUBSCRIPTIONS,
    encode,
    encode_sow_stats,
    topic_of,
)
from spool.server.ports import ClientHappening, LinkHappening, SubscriptionHappening
from spool.server.sow.admin import SowTopicInfo

TEXT = st.text(max_size=1500)
MAYBE = st.none() | TEXT
TIMES = st.integers(0, 4_000_000_000_000_000)
CLIENT = st.builds(
    ClientHappening, event=st.sampled_from(["connected", "logged_on", "logon_failed",
                                            "disconnected"]),
    time_us=TIMES, connection=st.integers(1, 10**9), client=MAYBE, user=MAYBE, remote=TEXT,
    transport=TEXT, tls=MAYBE, certificate=MAYBE, version=MAYBE, options=MAYBE,
    reason=MAYBE, cause=MAYBE, msgs_in=st.none() | st.integers(0, 10**12),
    msgs_out=st.none() | st.integers(0, 10**12), subscriptions=st.none() | st.integers(0, 99),
)  # fmt: skip
SUBSCRIPTION = st.builds(
    SubscriptionHappening, event=st.sampled_from(["added", "removed", "queried"]),
    time_us=TIMES, connection=st.integers(1, 10**9), client=TEXT, user=MAYBE, sub_id=TEXT,
    command=st.sampled_from(["subscribe", "sow", "sow_and_subscribe"]),
    kind=st.sampled_from(["live", "bookmark", "sow", "queue", "query"]), topic=TEXT,
    filter=st.none() | st.text(max_size=5000), options=TEXT,
    bookmark_kind=st.sampled_from(["none", "epoch", "now"]),
    reason=st.sampled_from([None, "unsubscribe", "replaced", "disconnect"]),
)  # fmt: skip
LINK = st.builds(
    LinkHappening, event=st.sampled_from(["connected", "disconnected", "downgraded"]),
    time_us=TIMES, direction=st.sampled_from(["out", "in"]), link=TEXT, remote=MAYBE,
    connected=st.booleans(), sync_type=st.sampled_from([None, "sync", "async"]), detail=TEXT,
)  # fmt: skip


def _bounded(doc: dict[str, Any]) -> bool:
    limit = {"filter": MAX_FILTER}
    return all(
        len(v) <= limit.get(k, MAX_TEXT)
        for k, v in doc.items()
        if isinstance(v, str) and k not in ("remote", "transport", "time")
    )


@given(happening=CLIENT | SUBSCRIPTION | LINK)
def test_each_message_has_exactly_its_topics_fields_and_stays_bounded(happening: Any) -> None:
    topic = topic_of(happening)
    doc = orjson.loads(encode(happening, "spool-a", "nyc"))
    assert tuple(doc) == FIELDS[topic]
    assert (doc["instance"], doc["group"], doc["time_us"], doc["event"]) == (
        "spool-a", "nyc", happening.time_us, happening.event,
    )  # fmt: skip
    assert doc["time"] == format_timestamp_us(happening.time_us)
    assert _bounded(doc)
    if topic == SUBSCRIPTIONS:
        flt = happening.filter
        assert doc["filter_truncated"] is (flt is not None and len(flt) > MAX_FILTER)
        assert doc["filter"] == (flt[:MAX_FILTER] if flt is not None else None)


def test_the_topic_of_each_family() -> None:
    assert topic_of(ClientHappening("connected", 1, 1, None, None, "r", "t")) == CLIENTS
    assert topic_of(LinkHappening("connected", 1, "out", "b", None, True, None, "")) == LINKS


def test_a_sow_sample_has_the_admin_view_but_the_file() -> None:
    info = SowTopicInfo(
        topic="orders", rule="orders", durability="persistent", recorded=True, records=3,
        bytes=120, key_paths=["/id"], expiration=0.0, subscribers=1,
        file="/secret/place/orders.sow", file_bytes=4096, file_seq=7, unwritten=0,
        last_compaction=None, write_error=None,
    )  # fmt: skip
    doc = orjson.loads(encode_sow_stats(info, "spool-a", "nyc", 5_000_000))
    assert tuple(doc) == FIELDS[SOW_STATS]
    assert (doc["event"], doc["topic"], doc["records"], doc["key_paths"]) == (
        "sample", "orders", 3, ["/id"],
    )  # fmt: skip
    assert "/secret/place" not in orjson.dumps(doc).decode()
