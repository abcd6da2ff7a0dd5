"""Routing: topic blocks and filters, passthrough over the arrival group, loop protection,
and the resync skip of what the destination holds."""

from __future__ import annotations

from server.config import DestinationConfig, ReplicationTopic, ReplicationTransport
from server.replication.hops import format_hop, on_path, parse_hop
from server.replication.routing import Route, held_by
from server.txlog.batch import RecordBatch
from server.txlog.record import Record, RecordKind


def _dest(*topics: ReplicationTopic, passthrough: tuple[str, ...] = ()) -> DestinationConfig:
    return DestinationConfig(
        "c", "gc", True, topics, passthrough, ReplicationTransport((("h", 1),))
    )


def _batch(*rows: tuple[str, bytes, tuple[str, ...]]) -> RecordBatch:
    records = [
        Record(i + 1, 0, 7, i + 1, topic, "json", RecordKind.PUBLISH, path, 0, body)
        for i, (topic, body, path) in enumerate(rows)
    ]
    return RecordBatch.from_records(records)


def test_hops_round_trip_and_loop_check() -> None:
    assert format_hop("a", "a") == "a" and format_hop("a", "g") == "a@g"
    assert parse_hop("a@g").group == "g" and parse_hop("a").group == "a"
    assert on_path(("a@g", "b"), "a") and on_path(("a@g", "b"), "b")
    assert not on_path(("ab@g",), "a")


def test_topic_blocks_and_filters() -> None:
    route = Route(
        _dest(
            ReplicationTopic("orders", filter="/qty > 0"),
            ReplicationTopic("^md", is_regex=True),
            ReplicationTopic("orders", filter="/vip = true"),
        )
    )
    batch = _batch(
        ("orders", b'{"qty":1}', ()),
        ("orders", b'{"qty":0}', ()),
        ("orders", b'{"qty":0,"vip":true}', ()),
        ("trades", b"{}", ()),
        ("md.ibm", b"{}", ()),
    )
    assert route.select(batch, "c") == [0, 2, 4]


def test_passthrough_is_matched_against_the_group_the_message_arrived_from() -> None:
    topics = (ReplicationTopic(".*", is_regex=True),)
    batch = _batch(
        ("t", b"{}", ()),  # published here: always
        ("t", b"{}", ("a@ga",)),  # arrived from a (group ga)
        ("t", b"{}", ("a@ga", "b@gb")),  # arrived from b (group gb), via a
    )
    assert Route(_dest(*topics)).select(batch, "c") == [0]
    assert Route(_dest(*topics, passthrough=("^gb$",))).select(batch, "c") == [0, 2]
    assert Route(_dest(*topics, passthrough=("^ga$",))).select(batch, "c") == [0, 1]


def test_never_to_an_instance_already_on_the_path() -> None:
    route = Route(_dest(ReplicationTopic(".*", is_regex=True), passthrough=(".*",)))
    batch = _batch(("t", b"{}", ("c@gc", "b@gb")), ("t", b"{}", ("a@ga",)))
    assert route.select(batch, "c") == [1]
    assert route.select(batch, "a") == [0]


def test_resync_skips_what_the_destination_holds() -> None:
    route = Route(_dest(ReplicationTopic(".*", is_regex=True)))
    batch = _batch(*[("t", b"{}", ())] * 6)  # publisher 7, seqs 1..6
    held = held_by({7: (4, [(2, 3)])})
    assert route.select(batch, "c", held) == [1, 2, 4, 5]


def test_only_messages_go_not_sow_deletes() -> None:
    """PUBLISH and DELTA_PUBLISH records go; a SOW_DELETE (no publisher identity: it could
    not be de-duplicated on a resync) does not, in a batch of its own or among messages."""
    kinds = (RecordKind.PUBLISH, RecordKind.SOW_DELETE, RecordKind.DELTA_PUBLISH)
    records = [
        Record(i + 1, 0, 7 if k != RecordKind.SOW_DELETE else 0, i + 1, "orders", "json", k,
               (), 0, b"{}" if k != RecordKind.SOW_DELETE else b"", sow_key="1")
        for i, k in enumerate(kinds)
    ]  # fmt: skip
    route = Route(_dest(ReplicationTopic(".*", is_regex=True)))
    assert route.select(RecordBatch.from_records(records), "c") == [0, 2]
    assert route.select(RecordBatch.from_records(records[1:2]), "c") == []
    filtered = Route(_dest(ReplicationTopic("orders", filter="/qty > 0")))
    assert filtered.select(RecordBatch.from_records(records[1:2]), "c") == []
