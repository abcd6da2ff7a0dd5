"""Routing: topic blocks and filters, passthrough over the arrival group, loop protection,
and the resync skip of what the destination holds; the record kinds a link, a bootstrap
and a repair send."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.config import DestinationConfig, ReplicationTopic, ReplicationTransport
from spool.server.config.model import QueueConfig
from spool.server.replication import frames
from spool.server.replication.bootsource import _choose
from spool.server.replication.collisions import differing_origins
from spool.server.replication.frames import Repair, RepairFence
from spool.server.replication.hops import format_hop, on_path, parse_hop
from spool.server.replication.repairsource import RepairPlan
from spool.server.replication.routing import REPLICATED_KINDS, Route, held_by
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind, schedule_field


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


def test_a_destination_that_lost_its_log_gets_back_what_it_sent_and_lacks() -> None:
    """Returning (a resync to a log the source did not know): records on whose path the
    destination is go back when its holdings lack them - and only then - whatever the
    passthrough; outside a resync, loop protection stands."""
    route = Route(_dest(ReplicationTopic(".*", is_regex=True)))  # no passthrough
    batch = _batch(
        ("t", b"{}", ("c@gc",)), ("t", b"{}", ("c@gc",)), ("t", b"{}", ("b@gb",)), ("t", b"{}", ())
    )  # publisher 7, seqs 1..4: 1 and 2 came from c, 3 from b
    held = held_by({7: (1, [])})  # c kept seq 1 only
    assert route.select(batch, "c", held, returning=True) == [1, 3]
    assert route.select(batch, "c", held) == [3]
    assert route.select(batch, "c", None, returning=True) == [3]


def test_resync_skips_what_the_destination_holds() -> None:
    route = Route(_dest(ReplicationTopic(".*", is_regex=True)))
    batch = _batch(*[("t", b"{}", ())] * 6)  # publisher 7, seqs 1..6
    held = held_by({7: (4, [(2, 3)])})
    assert route.select(batch, "c", held) == [1, 2, 4, 5]


def test_resync_sends_what_the_destination_holds_from_another_origin() -> None:
    """The destination got publisher 7's 1..2 from this instance ``a`` and 3..4 from ``x``:
    this instance's 3 and 4 (published here) are sent again so it compares them."""
    route = Route(_dest(ReplicationTopic(".*", is_regex=True), passthrough=(".*",)))
    batch = _batch(*[("t", b"{}", ())] * 6)
    held = held_by({7: (4, [])}, {7: [(1, "a"), (3, "x")]}, "a")
    assert route.select(batch, "c", held) == [2, 3, 4, 5]
    # records that came here from x: 1 and 2 differ from the destination's (from a)
    relayed = _batch(*[("t", b"{}", ("x",))] * 4)
    assert route.select(relayed, "c", held) == [0, 1]


def test_differing_origins_finds_the_first_sequence_held_from_elsewhere() -> None:
    mine = {7: [(1, "a"), (10, "b")], 8: [(1, "a")], 9: [(1, "a")]}
    theirs = {7: [(1, "a"), (5, "z")], 8: [(1, "a")], 9: [(1, "q")], 10: [(1, "q")]}
    holdings = {7: (20, []), 8: (20, []), 9: (3, []), 10: (5, [])}
    assert differing_origins(mine, theirs, holdings) == {7: 5, 9: 1}
    # nothing held past the first difference: nothing to compare
    assert differing_origins(mine, theirs, {7: (4, []), 9: (0, [])}) == {}


def _mixed(*rows: tuple[RecordKind, int, tuple[str, ...]]) -> RecordBatch:
    """Records of topic ``orders``: (kind, publisher, path); seqs count per record."""
    return RecordBatch.from_records(
        [
            Record(i + 1, 0, pub, i + 1 if pub else 0, "orders", "json", kind, path, 0,
                   b"" if kind == RecordKind.SOW_DELETE else b'{"qty":0}', sow_key="1")
            for i, (kind, pub, path) in enumerate(rows)
        ]
    )  # fmt: skip


def test_sow_deletes_with_an_identity_go_and_expirations_stay() -> None:
    """A sow_delete's SOW_DELETE record (the instance's publisher identity) goes like a
    message, in a batch of its own or among messages; an expiration (pub_hash 0) stays on
    the instance that logged it."""
    pub, delete, delta = RecordKind.PUBLISH, RecordKind.SOW_DELETE, RecordKind.DELTA_PUBLISH
    batch = _mixed((pub, 7, ()), (delete, 9, ()), (delete, 0, ()), (delta, 7, ()))
    route = Route(_dest(ReplicationTopic(".*", is_regex=True)))
    assert route.select(batch, "c") == [0, 1, 3]
    assert route.select(_mixed((delete, 9, ())), "c") == [0]
    assert route.select(_mixed((delete, 0, ())), "c") == []
    # other topics' blocks do not take it
    assert Route(_dest(ReplicationTopic("trades"))).select(_mixed((delete, 9, ())), "c") == []


def test_a_filter_does_not_hold_back_a_delete() -> None:
    """The destination may hold a version of the record that matched the filter: the
    delete goes wherever a block takes its topic (the message that does not match stays)."""
    filtered = Route(_dest(ReplicationTopic("orders", filter="/qty > 0")))
    batch = _mixed((RecordKind.PUBLISH, 7, ()), (RecordKind.SOW_DELETE, 9, ()))
    assert filtered.select(batch, "c") == [1]


def test_a_delete_follows_the_path_and_resync_rules() -> None:
    delete = RecordKind.SOW_DELETE
    looped = Route(_dest(ReplicationTopic(".*", is_regex=True), passthrough=(".*",)))
    batch = _mixed((delete, 9, ("c@gc",)), (delete, 9, ("a@ga",)))
    assert looped.select(batch, "c") == [1]
    assert Route(_dest(ReplicationTopic(".*", is_regex=True))).select(batch, "c") == []
    twice = _mixed((delete, 9, ()), (delete, 9, ()))
    assert looped.select(twice, "c", held_by({9: (1, [])})) == [1]


def test_queue_events_go_where_the_queue_name_goes() -> None:
    """A replicated queue's QUEUE_ACK / QUEUE_TRANSFER records (logged on the queue's
    name, with the broker's identity) go to a destination a block of takes the queue's
    name, not to one that takes only its underlying topic (an archive copy without the
    queue); a local queue's ack (no identity) never goes; no block Filter holds them back;
    loop protection applies."""
    ack, transfer = RecordKind.QUEUE_ACK, RecordKind.QUEUE_TRANSFER

    def events(*rows: tuple[RecordKind, int, tuple[str, ...]]) -> RecordBatch:
        return RecordBatch.from_records(
            [
                Record(i + 1, 0, pub, i + 1 if pub else 0, "work", "json", kind, path, 0, b"x|1|")
                for i, (kind, pub, path) in enumerate(rows)
            ]
        )

    work = QueueConfig(name="work", underlying="orders")
    batch = events((ack, 9, ()), (transfer, 9, ()), (ack, 0, ()), (transfer, 9, ("c",)))
    archive = Route(_dest(ReplicationTopic("orders", filter="/qty > 0")), [work])
    assert archive.select(batch, "c") == []
    assert Route(_dest(ReplicationTopic("trades")), [work]).select(batch, "c") == []
    assert Route(_dest(ReplicationTopic("work")), [work]).select(batch, "c") == [0, 1]
    everything = Route(_dest(ReplicationTopic(".*", is_regex=True)), [work])
    assert everything.select(batch, "c") == [0, 1]
    # an instance without the queue configured sends none of a stray record
    assert Route(_dest(ReplicationTopic(".*", is_regex=True))).select(batch, "c") == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["orders", "md.ibm", "trades", "vip"]),
            st.sampled_from([b'{"qty":1}', b'{"qty":0}']),
            st.sampled_from([(), (), ("a@ga",)]),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(
        [
            (ReplicationTopic(".*", is_regex=True),),
            (ReplicationTopic("orders"), ReplicationTopic("^md", is_regex=True)),
            (ReplicationTopic("orders", filter="/qty > 0"),),
            (ReplicationTopic("orders", filter="/qty > 0"), ReplicationTopic("orders")),
            (ReplicationTopic("none"),),
        ]
    ),
)
def test_the_per_topic_decision_agrees_with_the_per_record_rules(
    rows: list[tuple[str, bytes, tuple[str, ...]]], topics: tuple[ReplicationTopic, ...]
) -> None:
    """A batch of messages without paths is decided per distinct topic; a ``held``
    predicate that holds nothing forces the per-record rules: both choose the same."""
    route = Route(_dest(*topics, passthrough=(".*",)))
    batch = _batch(*rows)
    assert route.select(batch, "c") == route.select(batch, "c", lambda _h, _s, _p: False)


SCHEDULED, DUE, PUBLISH = RecordKind.SCHEDULED, RecordKind.DUE, RecordKind.PUBLISH


def _delayed(
    *rows: tuple[RecordKind, int, bytes, tuple[str, ...]], topic: str = "orders"
) -> RecordBatch:
    """Records of publisher 7: (kind, pub_seq, body, path). A scheduled record's SOW key
    field holds its due time; a due record repeats its bookmark without it."""
    return RecordBatch.from_records(
        [
            Record(i + 1, 0, 7, pub_seq, topic, "json", kind, path, 0, body,
                   sow_key=schedule_field(1_000 + pub_seq, "") if kind == SCHEDULED else "")
            for i, (kind, pub_seq, body, path) in enumerate(rows)
        ]
    )  # fmt: skip


def test_every_kind_a_destination_is_sent_is_one_the_link_protocol_carries() -> None:
    assert int(SCHEDULED) in REPLICATED_KINDS
    assert REPLICATED_KINDS <= frames._KINDS
    assert REPLICATED_KINDS.isdisjoint({int(DUE), int(RecordKind.LOST)})


def test_a_scheduled_record_goes_as_a_publish_with_the_filter_on_its_body() -> None:
    """The block's Filter reads the body as published (the due time is in the SOW key
    field, not the body); the due record, the copy this instance delivered, never goes,
    whatever its body."""
    batch = _delayed(
        (SCHEDULED, 1, b'{"qty":1}', ()),
        (SCHEDULED, 2, b'{"qty":0}', ()),
        (DUE, 1, b'{"qty":1}', ()),
        (PUBLISH, 3, b'{"qty":1}', ()),
        (DUE, 2, b'{"qty":0}', ()),
    )
    filtered = Route(_dest(ReplicationTopic("orders", filter="/qty > 0")))
    assert filtered.select(batch, "c") == [0, 3]
    everything = Route(_dest(ReplicationTopic(".*", is_regex=True)))
    assert everything.select(batch, "c") == [0, 1, 3]
    assert Route(_dest(ReplicationTopic("trades"))).select(batch, "c") == []
    # a batch of due records alone, or of scheduled records alone
    dues = _delayed((DUE, 1, b'{"qty":1}', ()), (DUE, 2, b'{"qty":1}', ()))
    assert everything.select(dues, "c") == []
    assert filtered.select(dues, "c") == []
    scheduled = _delayed((SCHEDULED, 1, b'{"qty":1}', ()), (SCHEDULED, 2, b'{"qty":0}', ()))
    assert everything.select(scheduled, "c") == [0, 1]
    assert filtered.select(scheduled, "c") == [0]


def test_a_scheduled_record_follows_the_path_passthrough_and_resync_rules() -> None:
    body = b'{"qty":1}'
    batch = _delayed(
        (SCHEDULED, 1, body, ("c@gc",)),  # came from the destination: loop protection
        (SCHEDULED, 2, body, ("a@ga",)),  # came from a, group ga
        (SCHEDULED, 3, body, ()),  # published here
        (DUE, 3, body, ()),
    )
    topics = (ReplicationTopic(".*", is_regex=True),)
    assert Route(_dest(*topics, passthrough=(".*",))).select(batch, "c") == [1, 2]
    assert Route(_dest(*topics, passthrough=("^gb$",))).select(batch, "c") == [2]
    # resync: what the destination holds is skipped; a destination that lost its log
    # gets back the one it sent and lacks, never the due record
    held = held_by({7: (2, [])})
    assert Route(_dest(*topics, passthrough=(".*",))).select(batch, "c", held) == [2]
    lacks = held_by({})
    returning = Route(_dest(*topics, passthrough=(".*",)))
    assert returning.select(batch, "c", lacks, returning=True) == [0, 1, 2]


def test_a_bootstrap_copies_scheduled_records_and_never_due_ones() -> None:
    """The empty instance delivers the pending delayed messages itself when they fall
    due; it writes its own due records. Loop protection is no rule of a copy."""
    batch = _delayed(
        (SCHEDULED, 1, b"{}", ("c@gc",)),
        (DUE, 1, b"{}", ("c@gc",)),
        (PUBLISH, 2, b"{}", ()),
        (SCHEDULED, 3, b"{}", ()),
        (DUE, 3, b"{}", ()),
    )
    assert _choose(batch, lambda t: t == "orders", lambda _t: True) == [0, 2, 3]
    assert _choose(batch, lambda t: t == "trades", lambda _t: True) == []
    assert _choose(batch, lambda _t: True, lambda _t: False) == []
    dues = _delayed((DUE, 1, b"{}", ()), (DUE, 3, b"{}", ()))
    assert _choose(dues, lambda _t: True, lambda _t: True) == []


def test_a_repair_sends_a_scheduled_record_it_holds_and_never_a_due_one() -> None:
    """The requester lost both records of bookmark 7:1 (and 7:3): the peer holds the
    scheduled record as it was published and sends it; the due record is local to the
    log that wrote it, so it is not sent even though it has the bookmark asked for."""
    request = Repair(1, "a", "g", None, None, [RepairFence(5, 4, [(7, 1, 3)], (0, None))], None)
    plan = RepairPlan(request, 1, 10)
    batch = _delayed(
        (SCHEDULED, 1, b"{}", ("a@g",)),
        (DUE, 1, b"{}", ("a@g",)),
        (SCHEDULED, 3, b"{}", ()),
        (DUE, 3, b"{}", ()),
        (SCHEDULED, 4, b"{}", ()),  # not asked for
    )
    assert plan.choose(batch, lambda _t: True) == [0, 2]
    assert plan.choose(batch, lambda _t: False) == []
