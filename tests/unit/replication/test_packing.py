"""Packing the chosen records of a log batch into runs, and back (pack_runs + decode_runs)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.replication.frames import decode_runs
from spool.server.replication.inflight import InFlight
from spool.server.replication.packing import pack_runs
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind, schedule_field


def _record(
    seq: int, topic: str, pub: int, *, kind: RecordKind = RecordKind.PUBLISH,
    path: tuple[str, ...] = (), corr: str = "", key: str = "",
) -> Record:  # fmt: skip
    return Record(
        seq=seq, timestamp_us=1_000_000 + seq, pub_hash=pub, pub_seq=seq * 10, topic=topic,
        message_type="json", kind=kind, path=path, flags=0, body=b'{"n":%d}' % seq,
        corr_id=corr, sow_key=key,
    )  # fmt: skip


def _unpacked(
    batch: RecordBatch, chosen: list[int]
) -> tuple[list[tuple[object, ...]], list[tuple[int, int]]]:
    sent = InFlight()
    writer = pack_runs(batch, chosen, {}, sent)
    runs = decode_runs(writer.payload(), writer.count)
    flat: list[tuple[object, ...]] = [
        (run.topic, run.pub_hash, run.kind, run.path, seq, ts, pseq, body,
         run.corr_ids[i] if run.corr_ids else "", run.sow_keys[i] if run.sow_keys else "")
        for run in runs
        for i, (seq, ts, pseq, body) in enumerate(
            zip(run.source_seqs, run.timestamps_us, run.pub_seqs, run.bodies, strict=True)
        )
    ]  # fmt: skip
    return flat, sent.pairs()


def test_runs_break_on_topic_publisher_kind_and_path_and_keep_every_field() -> None:
    records = [
        _record(1, "orders", 7),
        _record(2, "orders", 7),
        _record(3, "orders", 8),  # another publisher
        _record(4, "trades", 8),  # another topic
        _record(5, "trades", 8, kind=RecordKind.SOW_DELETE),  # another kind
        _record(6, "trades", 8, path=("a",), corr="c6", key="k6"),  # another path
        _record(7, "trades", 8, path=("a",)),
    ]
    batch = RecordBatch.from_records(records)
    sent = InFlight()
    writer = pack_runs(batch, list(range(7)), {}, sent)
    runs = decode_runs(writer.payload(), writer.count)
    assert [len(r.bodies) for r in runs] == [2, 1, 1, 1, 2]
    assert [r.source_seqs for r in runs][-1] == [6, 7]
    assert runs[-1].path == ("a",) and runs[-2].kind == RecordKind.SOW_DELETE
    assert runs[-1].corr_ids == ["c6", ""] and runs[-1].sow_keys == ["k6", ""]
    assert runs[0].corr_ids is None and runs[0].sow_keys is None  # none had one
    assert sent.pairs() == [(r.seq, r.timestamp_us) for r in records]


def test_unchosen_records_split_nothing_and_are_not_sent() -> None:
    batch = RecordBatch.from_records([_record(s, "orders", 7) for s in range(1, 11)])
    flat, sent = _unpacked(batch, [0, 2, 3, 9])
    assert [row[4] for row in flat] == [1, 3, 4, 10]
    assert [s for s, _ in sent] == [1, 3, 4, 10]


def test_one_topic_and_publisher_is_one_run_and_a_gap_splits_nothing() -> None:
    records = [_record(s, "orders", 7) for s in range(1, 101)]
    batch = RecordBatch.from_records(records)
    sent = InFlight()
    runs = decode_runs(pack_runs(batch, list(range(100)), {}, sent).payload(), 100)
    assert len(runs) == 1 and runs[0].source_seqs == list(range(1, 101))
    assert sent.pairs() == [(r.seq, r.timestamp_us) for r in records]
    # the middle slice alone, then with a hole: still one run each, the right records
    runs = decode_runs(pack_runs(batch, list(range(10, 20)), {}).payload(), 10)
    assert [len(r) for r in runs] == [10] and runs[0].bodies == [r.body for r in records[10:20]]
    holed = [*range(10, 15), *range(16, 20)]
    runs = decode_runs(pack_runs(batch, holed, {}).payload(), 9)
    assert [len(r) for r in runs] == [9] and runs[0].source_seqs == [i + 1 for i in holed]


def test_a_run_of_scheduled_records_keeps_each_due_time() -> None:
    """A delayed message's scheduled record goes with its SOW key field (the due time in
    front), which a run of kind 7 must carry; a due record is never chosen (routing.py),
    and a run breaks on the kind as on any other."""
    sched = RecordKind.SCHEDULED
    records = [
        _record(1, "orders", 7, kind=sched, key=schedule_field(5_000_000, "k1\x1e60")),
        _record(2, "orders", 7, kind=sched, key=schedule_field(6_000_000, "")),
        _record(3, "orders", 7),
        _record(4, "orders", 7, kind=RecordKind.DUE),
    ]
    batch = RecordBatch.from_records(records)
    runs = decode_runs(pack_runs(batch, [0, 1, 2], {}).payload(), 3)
    assert [(r.kind, r.source_seqs) for r in runs] == [(sched, [1, 2]), (RecordKind.PUBLISH, [3])]
    assert runs[0].sow_keys == ["5000000\x1dk1\x1e60", "6000000\x1d"]
    assert runs[1].sow_keys is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "é"]),
            st.sampled_from([1, 2]),
            st.sampled_from([RecordKind.PUBLISH, RecordKind.SOW_DELETE, RecordKind.SCHEDULED]),
            st.sampled_from([(), ("x",), ("x", "y")]),
            st.sampled_from(["", "corr"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_every_chosen_record_comes_back_in_order(
    shapes: list[tuple[str, int, RecordKind, tuple[str, ...], str, bool]],
) -> None:
    records = [
        _record(i + 1, topic, pub, kind=kind, path=path, corr=corr,
                key=schedule_field(i, "") if kind == RecordKind.SCHEDULED else "")
        for i, (topic, pub, kind, path, corr, _) in enumerate(shapes)
    ]  # fmt: skip
    chosen = [i for i, shape in enumerate(shapes) if shape[5]] or [0]
    batch = RecordBatch.from_records(records)
    flat, _ = _unpacked(batch, chosen)
    want = [
        (r.topic, r.pub_hash, r.kind, r.path, r.seq, r.timestamp_us, r.pub_seq, r.body,
         r.corr_id, r.sow_key)
        for r in (records[i] for i in chosen)
    ]  # fmt: skip
    assert flat == want
