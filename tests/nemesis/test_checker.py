"""The checker against hand-made histories and logs: each anomaly category is reported
when, and only when, its violation is there (a clean run stays clean)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import broker_pub_hash, pub_hash
from spool.server.queues import deadletter
from spool.server.queues.deadletter import DeadLetter, Redrive
from tests.nemesis.checker import HeldOrders, check, held_orders
from tests.nemesis.cluster import TOPIC_DELAY, TOPIC_PUB, TOPIC_QDEAD, TOPIC_QIN, TOPIC_SOW
from tests.nemesis.history import Event
from tests.nemesis.journals import (
    DUE,
    PUBLISH,
    QUEUE_TRANSFER,
    SCHEDULED,
    InstanceLog,
    LogRecord,
)

NAMES = ("a", "b", "c")


class Story:
    """A history being written, one event at a time (``mono`` grows by one each)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, type_: str, process: str, f: str, value: Any, node: str | None = "a") -> Event:
        e = Event(type_, 0.0, float(len(self.events)), process, f, value, node)
        self.events.append(e)
        return e

    def publish(self, process: str, topic: str, first: int, last: int, acked: int) -> None:
        self.add("invoke", process, "publish", {"topic": topic, "first": first, "last": last})
        if acked:
            self.add("ok", process, "publish", {"upto": acked})


def rec(seq: int, publisher: str, pub_seq: int, topic: str = TOPIC_PUB, **kw: Any) -> LogRecord:
    return LogRecord(
        seq, pub_hash(publisher), pub_seq, topic, kw.get("kind", PUBLISH),
        kw.get("path", ()), False, kw.get("body"),
    )  # fmt: skip


def logs_of(records: list[LogRecord], **overrides: list[LogRecord]) -> dict[str, InstanceLog]:
    return {n: InstanceLog(n, overrides.get(n, list(records))) for n in NAMES}


def categories(story: Story, logs: dict[str, InstanceLog]) -> dict[str, int]:
    return dict(check(story.events, logs).counts())


def test_a_clean_history_has_no_anomaly() -> None:
    s = Story()
    s.publish("pub-1", TOPIC_PUB, 1, 10, 10)
    s.add("ok", "ha-sub-1", "recv", {"msgs": [[pub_hash("pub-1"), n] for n in range(1, 11)]})
    records = [rec(i, "pub-1", i) for i in range(1, 11)]
    assert categories(s, logs_of(records)) == {}


def test_a_lost_acknowledged_tail_is_postfix_on_that_instance_only() -> None:
    s = Story()
    s.publish("pub-1", TOPIC_PUB, 1, 10, 10)
    full = [rec(i, "pub-1", i) for i in range(1, 11)]
    v = check(s.events, logs_of(full, c=full[:8]))
    [a] = v.anomalies
    assert (a.category, a.sub, a.instance, a.count) == ("lost", "postfix", "c", 2)
    assert "9-10" in a.detail
    assert any(e["f"] == "publish" and e["type"] == "ok" for e in a.slice)


def test_lost_records_are_split_into_prefix_middle_and_postfix() -> None:
    s = Story()
    s.publish("pub-1", TOPIC_PUB, 1, 10, 10)
    kept = [rec(i, "pub-1", i) for i in (3, 4, 6, 7)]
    full = [rec(i, "pub-1", i) for i in range(1, 11)]
    v = check(s.events, logs_of(full, b=kept))
    subs = {a.sub: a.count for a in v.anomalies if a.category == "lost"}
    assert subs == {"prefix": 2, "middle": 1, "postfix": 3}


def test_an_unacknowledged_message_may_be_missing() -> None:
    s = Story()
    s.publish("pub-1", TOPIC_PUB, 1, 10, 8)
    records = [rec(i, "pub-1", i) for i in range(1, 9)]
    assert categories(s, logs_of(records)) == {}


def test_duplicates_and_records_never_sent_are_reported() -> None:
    s = Story()
    s.publish("pub-1", TOPIC_PUB, 1, 3, 3)
    records = [rec(1, "pub-1", 1), rec(2, "pub-1", 2), rec(3, "pub-1", 2), rec(4, "pub-1", 3),
               rec(5, "pub-1", 9), rec(6, "stranger", 1)]  # fmt: skip
    got = categories(s, logs_of(records))
    assert got == {"duplicated": 3, "unexpected": 6}


def test_a_record_of_an_instance_stored_twice_is_duplicated() -> None:
    s = Story()
    ack = LogRecord(1, broker_pub_hash("b"), 7, "nem.q", 4, ("b",), False, None)
    again = LogRecord(2, broker_pub_hash("b"), 7, "nem.q", 4, ("b",), False, None)
    v = check(s.events, logs_of([ack], a=[ack, again]))
    [a] = v.anomalies
    assert (a.category, a.instance) == ("duplicated", "a")


def test_a_record_held_by_some_copies_only_is_divergent() -> None:
    s = Story()
    broker = LogRecord(1, broker_pub_hash("a"), 7, "nem.q", 5, ("a",), False, None)
    v = check(s.events, logs_of([broker], c=[]))
    [a] = v.anomalies
    assert (a.category, a.instance) == ("divergent", "c")
    assert "held by {'a,b': 1}" in a.detail


def test_a_subscriber_that_misses_repeats_or_reorders_is_caught() -> None:
    s = Story()
    s.publish("pub-1", TOPIC_PUB, 1, 4, 4)
    h = pub_hash("pub-1")
    records = [rec(i, "pub-1", i) for i in range(1, 5)]
    s.add("ok", "ha-sub-1", "recv", {"msgs": [[h, 1], [h, 3], [h, 2], [h, 3]]})
    got = categories(s, logs_of(records))
    assert got == {"sub-duplicated": 1, "sub-missing": 1, "sub-order": 1}


def test_a_late_record_in_a_log_makes_its_order_valid() -> None:
    s = Story()
    s.publish("pub-1", TOPIC_PUB, 1, 4, 4)
    h = pub_hash("pub-1")
    # b got 2 late, after 3 and 4; the subscriber read 3 there, then 2, then 4
    late_on_b = [rec(1, "pub-1", 1), rec(2, "pub-1", 3), rec(3, "pub-1", 4), rec(4, "pub-1", 2)]
    s.add("ok", "ha-sub-1", "recv", {"msgs": [[h, 1], [h, 3], [h, 2], [h, 4]]}, node="b")
    full = [rec(i, "pub-1", i) for i in range(1, 5)]
    assert categories(s, logs_of(full, b=late_on_b)) == {}


def test_a_queue_message_delivered_after_its_confirmed_ack_is_caught() -> None:
    s = Story()
    s.publish("qpub", TOPIC_QIN, 1, 2, 2)
    for n in (1, 2):
        s.add("invoke", "qc-a", "process", {"bm": f"x|{n}|", "n": n, "dc": 1})
        s.add("invoke", "qc-a", "ack", {"bm": f"x|{n}|", "n": n})
        s.add("ok", "qc-a", "ack", {"bm": f"x|{n}|", "n": n})
    s.add("invoke", "qc-b", "process", {"bm": "x|2|", "n": 2, "dc": 1}, node="b")
    records = [rec(1, "qpub", 1, TOPIC_QIN), rec(2, "qpub", 2, TOPIC_QIN)]
    v = check(s.events, logs_of(records))
    [a] = v.anomalies
    assert a.category == "queue-after-ack" and "n=2" in a.detail


def test_a_message_published_on_two_instances_may_be_delivered_by_both() -> None:
    """The publisher failed over from a to b with message 2 unconfirmed: a's copy may be
    delivered after b's ack (a note); a delivery on c, which holds only a replicated
    copy, may not."""
    s = Story()
    s.add("invoke", "qpub", "publish", {"topic": TOPIC_QIN, "first": 1, "last": 2})
    s.add("ok", "qpub", "publish", {"upto": 1})
    s.add("invoke", "qpub", "publish", {"topic": TOPIC_QIN, "first": 2, "last": 2}, node="b")
    s.add("ok", "qpub", "publish", {"upto": 2}, node="b")
    for n, node in ((1, "a"), (2, "b")):
        q = f"qc-{node}"
        s.add("invoke", q, "process", {"bm": f"x|{n}|", "n": n, "dc": 1}, node=node)
        s.add("invoke", q, "ack", {"bm": f"x|{n}|", "n": n}, node=node)
        s.add("ok", q, "ack", {"bm": f"x|{n}|", "n": n}, node=node)
    s.add("invoke", "qc-a", "process", {"bm": "x|2|", "n": 2, "dc": 1})
    records = [rec(1, "qpub", 1, TOPIC_QIN), rec(2, "qpub", 2, TOPIC_QIN)]
    v = check(s.events, logs_of(records))
    assert v.anomalies == []
    assert (
        v.notes[
            "queue messages published on two instances, delivered after an ack of the other copy"
        ]
        == 1
    )
    s.add("invoke", "qc-c", "process", {"bm": "x|2|", "n": 2, "dc": 2}, node="c")
    [a] = check(s.events, logs_of(records)).anomalies
    assert a.category == "queue-after-ack" and "n=2" in a.detail


def test_a_copy_granted_away_before_the_copies_met_may_be_delivered_by_its_owner() -> None:
    """As above, but a granted its copy of message 2 to c (its consumer went away) before
    b's copy reached them: c owns a copy and may deliver it after b's ack until that ack
    arrives (a note); a grant of another message to c changes nothing."""
    s = Story()
    s.add("invoke", "qpub", "publish", {"topic": TOPIC_QIN, "first": 1, "last": 2})
    s.add("ok", "qpub", "publish", {"upto": 1})
    s.add("invoke", "qpub", "publish", {"topic": TOPIC_QIN, "first": 2, "last": 2}, node="b")
    s.add("ok", "qpub", "publish", {"upto": 2}, node="b")
    for n, node in ((1, "a"), (2, "b")):
        q = f"qc-{node}"
        s.add("invoke", q, "process", {"bm": f"x|{n}|", "n": n, "dc": 1}, node=node)
        s.add("invoke", q, "ack", {"bm": f"x|{n}|", "n": n}, node=node)
        s.add("ok", q, "ack", {"bm": f"x|{n}|", "n": n}, node=node)
    s.add("invoke", "qc-c", "process", {"bm": "x|2|", "n": 2, "dc": 2}, node="c")
    published = [rec(1, "qpub", 1, TOPIC_QIN), rec(2, "qpub", 2, TOPIC_QIN)]

    def granted(n: int) -> LogRecord:
        body = orjson.dumps([["g", f"{pub_hash('qpub')}|{n}|", "c", 1, False]])
        return LogRecord(3, broker_pub_hash("a"), 1, "nem.q", QUEUE_TRANSFER, (), False, body)

    [a] = check(s.events, logs_of([*published, granted(1)])).anomalies
    assert a.category == "queue-after-ack" and "n=2" in a.detail
    v = check(s.events, logs_of([*published, granted(2)]))
    assert v.anomalies == []
    assert (
        v.notes[
            "queue messages published on two instances, delivered after an ack of the other copy"
        ]
        == 1
    )


def test_a_queue_message_nobody_acked_is_unprocessed() -> None:
    s = Story()
    s.publish("qpub", TOPIC_QIN, 1, 2, 2)
    s.add("invoke", "qc-a", "process", {"bm": "x|1|", "n": 1, "dc": 1})
    s.add("invoke", "qc-a", "ack", {"bm": "x|1|", "n": 1})
    s.add("invoke", "qc-a", "process", {"bm": "x|2|", "n": 2, "dc": 1})
    s.add("info", "qc-a", "die", {"bm": "x|2|", "n": 2})
    records = [rec(1, "qpub", 1, TOPIC_QIN), rec(2, "qpub", 2, TOPIC_QIN)]
    v = check(s.events, logs_of(records))
    [a] = v.anomalies
    assert a.category == "queue-unprocessed" and a.count == 1
    assert any(e["f"] == "die" for e in a.slice)


def _sow(seq: int, writer: str, n: int, key: str) -> LogRecord:
    body = orjson.dumps({"k": key, "w": writer, "n": n})
    return rec(seq, writer, n, TOPIC_SOW, body=body)


def test_a_sow_snapshot_must_equal_the_fold_of_its_log() -> None:
    s = Story()
    s.publish("sow-w-1", TOPIC_SOW, 1, 3, 3)
    records = [_sow(1, "sow-w-1", 1, "k1"), _sow(2, "sow-w-1", 2, "k2"),
               _sow(3, "sow-w-1", 3, "k1")]  # fmt: skip
    good = {"k1": ["sow-w-1", 3], "k2": ["sow-w-1", 2]}
    s.add("ok", "nemesis", "sow-snapshot", {"index": 1, "rows": good, "s1": 3, "s2": 3})
    assert categories(s, logs_of(records)) == {}
    stale = {"k1": ["sow-w-1", 1], "k2": ["sow-w-1", 2]}
    s.add("ok", "nemesis", "sow-snapshot", {"index": 2, "rows": stale, "s1": 3, "s2": 3}, "b")
    v = check(s.events, logs_of(records))
    [a] = v.anomalies
    assert (a.category, a.instance, a.count) == ("sow-fold", "b", 1)


def test_a_sow_read_of_a_value_never_written_is_unexpected() -> None:
    s = Story()
    s.publish("sow-w-1", TOPIC_SOW, 1, 2, 2)
    s.add("ok", "sow-reader", "sow-read", {"rows": {"k1": ["sow-w-1", 1], "k2": ["sow-w-1", 5]}})
    records = [_sow(1, "sow-w-1", 1, "k1"), _sow(2, "sow-w-1", 2, "k2")]
    assert categories(s, logs_of(records)) == {"sow-unexpected": 1}


def test_liveness_failures_and_stalls_in_the_nemesis_history_are_anomalies() -> None:
    s = Story()
    s.add("fail", "nemesis", "liveness", {"what": "queue drains: 2 never acked"}, None)
    s.add("info", "nemesis", "stalled", {"index": 3, "seconds": 120.0}, None)
    assert categories(s, logs_of([])) == {"liveness": 1, "stalled": 1}


def test_a_journal_recovery_would_cut_is_damage() -> None:
    logs = logs_of([])
    logs["b"].clean = False
    logs["b"].damage = ["b.0001.journal at 4096: crc mismatch"]
    assert categories(Story(), logs) == {"journal-damage": 1}


def test_a_late_order_held_only_by_a_wiped_log_is_valid_with_that_log() -> None:
    """b held pub-2's 3..4 (sent to it after a failover) before the late 1..2 its peers had
    acknowledged, and its subscriber read them in that order; b was then wiped and copied
    its log back from a peer, in sequence order. Only the wiped log shows the order."""
    s = Story()
    s.publish("pub-2", TOPIC_PUB, 1, 4, 4)
    h = pub_hash("pub-2")
    s.add("ok", "ha-sub-1", "recv", {"msgs": [[h, 3], [h, 4], [h, 1], [h, 2]]}, node="b")
    full = [rec(i, "pub-2", i) for i in range(1, 5)]
    wiped = [rec(1, "pub-2", 3), rec(2, "pub-2", 4), rec(3, "pub-2", 1), rec(4, "pub-2", 2)]
    v = check(s.events, logs_of(full))
    [a] = v.anomalies
    assert (a.category, a.count) == ("sub-order", 2)
    assert a.detail.endswith(f"first {h}|1| after {h}|4|")
    assert [m for e in a.slice for m in e["value"]["msgs"]] == [[h, 4], [h, 1]]
    assert check(s.events, logs_of(full), earlier=[held_orders(wiped)]).ok
    # a log that held 1 after 3 only does not make 2 after 4 valid
    partly = [rec(1, "pub-2", 3), rec(2, "pub-2", 1), rec(3, "pub-2", 4), rec(4, "pub-2", 2)]
    assert categories_with(s, logs_of(full), [held_orders(partly)]) == {"sub-order": 1}


def categories_with(
    story: Story, logs: dict[str, InstanceLog], earlier: list[HeldOrders]
) -> dict[str, int]:
    return dict(check(story.events, logs, earlier=earlier).counts())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pub-1", "pub-2"]), st.integers(1, 12)), max_size=40))
def test_held_orders_name_exactly_the_higher_sequences_a_log_held_before(
    order: list[tuple[str, int]],
) -> None:
    """Oracle: every pair of records of one publisher, compared by position."""
    records = [rec(i, p, s) for i, (p, s) in enumerate(order, 1)]
    records.insert(len(records) // 2, rec(0, "pub-1", 5, TOPIC_QIN))  # another topic: ignored
    held = held_orders(records)
    expected: dict[tuple[int, int], set[int]] = {}
    for i, (p, s) in enumerate(order):
        before = {t for q, t in order[:i] if q == p and t > s}
        if before or any(q == p and t >= s for q, t in order[:i]):
            expected.setdefault((pub_hash(p), s), set()).update(before)
    got = {key: {t for lo, hi in ivs for t in range(lo, hi + 1)} for key, ivs in held.items()}
    assert got == expected
    for ivs in held.values():
        assert all(lo <= hi for lo, hi in ivs)


def test_a_confirmed_reject_needs_its_dead_letter_in_a_log() -> None:
    s = Story()
    s.publish("qpub", TOPIC_QIN, 1, 2, 2)
    bms = {n: f"{pub_hash('qpub')}|{n}|" for n in (1, 2)}
    for n in (1, 2):
        s.add("invoke", "qc-a", "process", {"bm": bms[n], "n": n, "dc": 1})
        s.add("invoke", "qc-a", "ack", {"bm": bms[n], "n": n, "reject": True})
        s.add("ok", "qc-a", "ack", {"bm": bms[n], "n": n, "reject": True})
    broker = broker_pub_hash("a")

    def letter(n: int, seq: int, redriven: Redrive | None = None) -> LogRecord:
        body = deadletter.encode(
            DeadLetter("nem.q", TOPIC_QIN, bms[n], n, "a", "rejected", 1, 0, "qc-a/q", 0, 0,
                       redriven=redriven),
            b'{"n":%d}' % n,
        )  # fmt: skip
        return LogRecord(seq, broker, seq, TOPIC_QDEAD, PUBLISH, (), False, body)

    queued = [rec(1, "qpub", 1, TOPIC_QIN), rec(2, "qpub", 2, TOPIC_QIN)]
    ack = LogRecord(9, broker, 9, "nem.q", 4, (), False, None)  # the queue's own records
    assert categories(s, logs_of([*queued, letter(1, 3), letter(2, 4), ack])) == {}
    # 2's dead letter is nowhere (a mark of a redrive does not count as one)
    marked = letter(2, 4, Redrive(TOPIC_QIN, "1|1|", 0))
    v = check(s.events, logs_of([*queued, letter(1, 3), marked, ack]))
    [a] = v.anomalies
    assert a.category == "dead-letter-lost" and "n=2" in a.detail


# -- delayed delivery: dpub publishes nem.delay with deliver_at, dsub subscribes ----------

DUE_AT = 1000.0  # message n is due at DUE_AT + n (epoch seconds)


def delayed_story(count: int = 3) -> Story:
    s = Story()
    dues = [DUE_AT + n for n in range(1, count + 1)]
    s.add("invoke", "dpub", "publish",
          {"topic": TOPIC_DELAY, "first": 1, "last": count, "due": dues}, node="c")  # fmt: skip
    s.add("ok", "dpub", "publish", {"upto": count}, node="c")
    return s


def delayed_records(count: int = 3, *, due: bool = True) -> list[LogRecord]:
    """Each message's scheduled record, then (``due``) its due record."""
    out = [rec(n, "dpub", n, TOPIC_DELAY, kind=SCHEDULED) for n in range(1, count + 1)]
    if due:
        out += [rec(count + n, "dpub", n, TOPIC_DELAY, kind=DUE) for n in range(1, count + 1)]
    return out


def received(s: Story, *late: tuple[int, float], node: str = "a") -> None:
    """dsub took message n at its due time plus the lateness given (seconds)."""
    h = pub_hash("dpub")
    s.add("ok", "dsub", "recv", {"msgs": [[h, n, DUE_AT + n + by] for n, by in late]}, node)


def test_delayed_messages_received_once_at_their_due_time_are_clean() -> None:
    s = delayed_story()
    # in due order, which is not the publisher's (no sub-order for dsub)
    received(s, (2, 0.01), (1, 0.2), (3, 1.5))
    v = check(s.events, logs_of(delayed_records()))
    assert v.anomalies == []
    assert v.delayed["distinct received"] == 3
    assert v.delayed["due records"] == {"a": 3, "b": 3, "c": 3}
    assert v.delayed["lateness ms"] == {
        "min": 10.0, "p50": 200.0, "p90": 1500.0, "p99": 1500.0, "max": 1500.0
    }  # fmt: skip
    assert v.delayed["early tolerance s"] == 0.05


def test_a_delayed_message_never_received_or_received_twice_fails() -> None:
    s = delayed_story()
    received(s, (1, 0.1), (3, 0.1))
    assert categories(s, logs_of(delayed_records())) == {"sub-missing": 1}
    received(s, (2, 0.1), (3, 0.1), node="b")  # the HA client let a replay's copy through
    assert categories(s, logs_of(delayed_records())) == {"sub-duplicated": 1}


def test_a_delayed_message_lost_from_a_log_is_lost() -> None:
    s = delayed_story()
    received(s, (1, 0.1), (2, 0.1), (3, 0.1))
    full = delayed_records()
    without = [r for r in full if r.pub_seq != 2]
    v = check(s.events, logs_of(full, b=without))
    [a] = v.anomalies
    assert (a.category, a.sub, a.instance) == ("lost", "middle", "b")


def test_a_delayed_message_received_early_beyond_the_tolerance_fails() -> None:
    s = delayed_story()
    received(s, (1, 0.1), (2, -0.04), (3, -0.5))
    v = check(s.events, logs_of(delayed_records()))
    [a] = v.anomalies
    assert (a.category, a.count, a.process) == ("delay-early", 1, "dsub")
    assert f"{pub_hash('dpub')}|3|" in a.detail and "0.500 s early" in a.detail
    assert [m[1] for e in a.slice if e["f"] == "recv" for m in e["value"]["msgs"]] == [3]
    assert v.delayed["early beyond it"] == 1


def test_an_early_delivery_within_a_forward_clock_jump_passes() -> None:
    """An instance whose clock is 30 s ahead writes due records up to 30 s early: the
    tolerance covers it while such a jump overlaps the message's send-to-receipt span,
    not for a jump back, nor for one that ended before the message was sent."""
    s = Story()
    jump = {"index": 4, "kind": "clock-jump", "shape": "one", "targets": ["a"],
            "duration": 5.0, "params": {"offset_s": 30}}  # fmt: skip
    s.add("info", "nemesis", "start", jump, None)
    s.add("info", "nemesis", "end", {"index": 4, "kind": "clock-jump"}, None)
    for _ in range(3):  # past the time the instance may still run on the offset
        s.add("info", "nemesis", "quiet", {"index": 5, "duration": 5.0}, None)
    story = delayed_story()
    s.events += [Event(e.type, e.wall, float(len(s.events) + i), e.process, e.f, e.value, e.node)
                 for i, e in enumerate(story.events)]  # fmt: skip
    received(s, (1, 0.1), (2, 0.1), (3, -4.0))
    [a] = check(s.events, logs_of(delayed_records())).anomalies
    assert a.category == "delay-early"  # the jump ended before the send
    s.add("info", "nemesis", "start", {**jump, "index": 6, "params": {"offset_s": -300}}, None)
    received(s, (3, -4.0))
    assert categories(s, logs_of(delayed_records())) == {"delay-early": 2, "sub-duplicated": 1}
    s.add("info", "nemesis", "start", {**jump, "index": 7}, None)  # healed at the end
    received(s, (3, -4.0))
    v = check(s.events, logs_of(delayed_records()))
    assert dict(v.counts()) == {"delay-early": 2, "sub-duplicated": 1}
    assert v.delayed["early within the clock tolerance"] == 1
    assert v.delayed["early tolerance s"] == 30.05
    # received 31 s early: beyond even that jump
    received(s, (3, -31.0))
    assert check(s.events, logs_of(delayed_records())).delayed["early beyond it"] == 3


def test_a_delayed_message_that_never_fell_due_on_an_instance_fails() -> None:
    s = delayed_story()
    received(s, (1, 0.1), (2, 0.1), (3, 0.1))
    full = delayed_records()
    no_due = [r for r in full if not (r.kind == DUE and r.pub_seq == 3)]
    twice = [*full, rec(99, "dpub", 1, TOPIC_DELAY, kind=DUE)]
    v = check(s.events, logs_of(full, b=no_due, c=twice))
    got = {(a.category, a.instance, a.count) for a in v.anomalies}
    assert got == {("delay-undelivered", "b", 1), ("duplicated", "c", 1)}
