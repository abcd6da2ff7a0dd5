"""The queue checkpoint (server/queues/checkpoint.py): a replay from a queue's checkpoint
gives the queue a replay of the whole log gives, for replicated queues whose acks,
grants and transfer requests may arrive before their messages, with the same transfer
counters; and the file's codec refuses what it did not write."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import format_bookmark
from spool.server.clock import VirtualClock
from spool.server.config.model import QueueConfig
from spool.server.queues.checkpoint import (
    Checkpoint,
    CheckpointError,
    LastRecord,
    decode,
    encode,
    fingerprint,
)
from spool.server.queues.machine import ACKED
from spool.server.queues.ownership import Grant, Request, Wire
from spool.server.queues.records import encode_ack_bookmarks, encode_transfers
from spool.server.queues.stage import QueueRuntime, QueueStage
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind

ACK = int(RecordKind.QUEUE_ACK)
TRANSFER = int(RecordKind.QUEUE_TRANSFER)
#: publisher hash -> the instance it publishes on
PUBLISHERS = {1: "a", 2: "b"}
PER_PUBLISHER = 6

#: one record of this copy's log: ("msg", pub, n), or (who, kind, body): "in" for a
#: record received from another instance, "own" for one this instance logged
Rec = tuple[object, ...]


def _runtime(target: int, initial: str | None) -> QueueRuntime:
    cfg = QueueConfig(name="work", underlying="work-in", target_queue_depth=target,
                      kind="GroupLocalQueue" if initial else "Queue",
                      initial_owner=initial)  # fmt: skip
    return QueueRuntime.build(cfg, VirtualClock(), "a", replicated=True)


def _apply(q: QueueRuntime, seq: int, rec: Rec) -> None:
    """One record, as the publish stage takes it live."""
    if rec[0] == "msg":
        pub, n = rec[1], rec[2]
        assert isinstance(pub, int) and isinstance(n, int)
        q.admit("work-in", [b"{}"], seq, [seq], [pub], [n], PUBLISHERS[pub])
    else:
        who, kind, body = rec
        assert who == "in" and isinstance(kind, int) and isinstance(body, bytes)
        q.receive(kind, body, seq, seq=seq)


def _record(seq: int, rec: Rec) -> Record:
    """``rec`` as the log holds it (a message of publisher 2 came from instance b; a
    record received from another instance has its path)."""
    if rec[0] == "msg":
        pub, n = rec[1], rec[2]
        assert isinstance(pub, int) and isinstance(n, int)
        path = () if PUBLISHERS[pub] == "a" else (PUBLISHERS[pub],)
        return Record(seq, seq, pub, n, "work-in", "json", RecordKind.PUBLISH, path, 0, b"{}")
    who, kind, body = rec
    assert isinstance(kind, int) and isinstance(body, bytes)
    path = () if who == "own" else ("b",)
    return Record(seq, seq, 99, seq, "work", "json", RecordKind(kind), path, 0, body)


#: a checkpoint: (seq, last record, transfer counters, publisher positions then)
Taken = tuple[int, int, tuple[int, int], dict[int, int]]
WHOLE_LOG: Taken = (1, 0, (0, 0), {})


def _replay(log: list[Rec], target: int, initial: str | None, checkpoint: Taken) -> QueueRuntime:
    """A restart: the publish stage recovers the queue from the log, taking the records
    from the checkpoint's seq on, with the counters and publisher positions it kept
    through its last record (:data:`WHOLE_LOG`: the whole log)."""
    q = _runtime(target, initial)
    q.resume(*checkpoint)
    stage = QueueStage([q], lambda _: None)
    if log:
        stage.recover(RecordBatch.from_records([_record(i, r) for i, r in enumerate(log, 1)]))
    stage.recovered()
    _top_up(q, log)
    return q


def _top_up(q: QueueRuntime, log: list[Rec]) -> None:
    """A bounded queue's refills after start-up (the service's): the window reads the log
    from its cursor until it is full or the log ends. Replays from different points may
    stop their windows at different places; topped up, they hold the same messages."""
    window = q.window
    while window is not None and window.cursor:
        cursor = window.cursor
        q.activate([_record(i, log[i - 1]) for i in range(cursor, len(log) + 1)], len(log))
        if window.cursor == cursor:
            return


def _state(q: QueueRuntime) -> dict[str, tuple[str, int]]:
    own = q.ownership
    assert own is not None
    out: dict[str, tuple[str, int]] = {}
    for m in q.machine.messages():
        view = own.view(m.bookmark)
        assert view is not None
        out[m.bookmark] = (view.owner, view.epoch)
    return out


def _answers(q: QueueRuntime, now: int) -> list[Wire]:
    """The transfer requests the instance answers at its next pass (it holds them:
    asked before the message came, or read back at start-up)."""
    assert q.ownership is not None
    return sorted(q.ownership.answer(now) + q.outgoing, key=repr)


_msg = st.tuples(st.just("msg"), st.sampled_from(sorted(PUBLISHERS)))
#: mostly at epoch 0, where the message's first owner grants it
_request = st.tuples(st.just("request"), st.sampled_from(sorted(PUBLISHERS)),
                     st.integers(1, PER_PUBLISHER), st.sampled_from(["b", "c"]),
                     st.sampled_from([0, 0, 0, 1, 2]))  # fmt: skip
op = st.one_of(
    _msg, _msg,
    st.tuples(st.just("ack_elsewhere"), st.sampled_from(sorted(PUBLISHERS)),
              st.integers(1, PER_PUBLISHER)),
    st.tuples(st.just("grant"), st.sampled_from(sorted(PUBLISHERS)),
              st.integers(1, PER_PUBLISHER), st.sampled_from(["a", "b", "c"]),
              st.integers(1, 3), st.booleans()),
    _request, _request,
    st.just(("answer",)),
    st.tuples(st.just("ack_here"), st.integers(0, 10)),
    st.just(("checkpoint",)),
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(ops=st.lists(op, max_size=45), target=st.sampled_from([0, 0, 2]),
       initial=st.sampled_from([None, "a"]))  # fmt: skip
# a request that crossed its message's ack, replayed without the message: the checkpoint's
# publisher positions say the message left, so no grant for it once the publisher's later
# messages reach the log of a bounded queue
@example(ops=[("msg", 1), ("msg", 2), ("ack_elsewhere", 1, 1), ("ack_here", 0),
              ("request", 2, 1, "b", 0)], target=2, initial="a")  # fmt: skip
def test_a_replay_from_the_checkpoint_gives_the_queue_a_full_replay_gives(
    ops: list[tuple[object, ...]], target: int, initial: str | None
) -> None:
    """Live operation writes a log (what it receives, and what it decides: the answers
    to transfer requests); at each checkpoint the seq and the transfer counters are
    taken (as the service takes them). A restart replays the whole log, or only from a
    checkpoint: both give the same messages with the same owners, the same transfer
    counters as the live instance (counted once per grant record, whichever checkpoint
    the restart starts from), and the same requests to answer, now and after the rest of
    the traffic (the messages still to come, with the changes already received for
    them: a request that came before its message is answered once it is here)."""
    log: list[Rec] = []
    live = _runtime(target, initial)
    sent = dict.fromkeys(PUBLISHERS, 0)
    checkpoints: list[Taken] = []

    def log_own(changes: list[Wire]) -> None:
        """The service's end of the turn: the instance's own changes to the log."""
        if changes:
            log.append(("own", TRANSFER, encode_transfers(changes)))
            live.logged(changes)

    def record(rec: Rec) -> None:
        log.append(rec)
        _apply(live, len(log), rec)
        changes, live.outgoing = live.outgoing, []
        log_own(changes)

    def checkpoint() -> None:
        end = len(log)
        counts = (live.transferred_in, live.transferred_out)
        assert live.ownership is not None
        seen = live.ownership.seen()
        checkpoints.append((live.checkpoint_seq(live.hold_from(end), end), end, counts, seen))

    for o in ops:
        # the log pin never passes what a checkpoint taken now needs (retention would
        # take records a restart reads)
        now = len(log)
        pinned = live.pin_from(now)
        assert pinned <= live.checkpoint_seq(live.hold_from(now), now)
        if o[0] == "msg":
            pub = o[1]
            assert isinstance(pub, int)
            if sent[pub] < PER_PUBLISHER:
                sent[pub] += 1
                record(("msg", pub, sent[pub]))
        elif o[0] == "ack_elsewhere":
            record(("in", ACK, encode_ack_bookmarks([format_bookmark(o[1], o[2])])))  # type: ignore[arg-type]
        elif o[0] == "grant":
            bm = format_bookmark(o[1], o[2])  # type: ignore[arg-type]
            grant = Grant(bm, o[3], o[4], proxied=o[5])  # type: ignore[arg-type]
            record(("in", TRANSFER, encode_transfers([grant])))
        elif o[0] == "request":
            bm = format_bookmark(o[1], o[2])  # type: ignore[arg-type]
            request = Request(bm, o[3], "a", o[4])  # type: ignore[arg-type]
            record(("in", TRANSFER, encode_transfers([request])))
        elif o[0] == "answer":
            assert live.ownership is not None
            log_own(live.ownership.answer(len(log)))
        elif o[0] == "ack_here":
            mine = [m for m in live.machine.messages()
                    if live.ownership is not None and live.ownership.can_deliver(m.bookmark)]  # fmt: skip
            if mine:
                m = mine[o[1] % len(mine)]  # type: ignore[operator]
                # the service: the machine removes it, the ownership forgets it, the ack
                # is logged (read back at recovery)
                live.machine.drop([m.bookmark], ACKED)
                assert live.ownership is not None
                live.ownership.acked_many([m.bookmark])
                log.append(("own", ACK, encode_ack_bookmarks([m.bookmark])))
        else:
            checkpoint()
    checkpoint()
    counts = (live.transferred_in, live.transferred_out)
    full = _replay(log, target, initial, WHOLE_LOG)
    assert (full.transferred_in, full.transferred_out) == counts
    rest = [("msg", pub, n) for pub in PUBLISHERS for n in range(sent[pub] + 1, PER_PUBLISHER + 1)]
    now = len(log) + 1
    answers = _answers(_replay(log, target, initial, WHOLE_LOG), now)
    for cp in checkpoints:
        start, written_at, _, _ = cp
        assert 1 <= start <= written_at + 1
        part = _replay(log, target, initial, cp)
        assert _state(part) == _state(full), cp
        assert (part.transferred_in, part.transferred_out) == counts, cp
        assert _answers(part, now) == answers, cp
    # the checkpoint taken last, then the traffic still to come; then each answers the
    # requests it holds (as the live instance would)
    part = _replay(log, target, initial, checkpoints[-1])
    for i, rec in enumerate(rest, len(log) + 1):
        for q in (full, part, live):
            _apply(q, i, rec)
    for q in (full, part, live):
        _top_up(q, log + rest)  # (the live one's refills after its acks too)
    assert _state(part) == _state(full) == _state(live)
    end = len(log) + len(rest) + 1
    assert _answers(part, end) == _answers(full, end) == _answers(live, end)


def test_the_file_round_trips_and_refuses_what_it_did_not_write() -> None:
    cp = Checkpoint(LastRecord(120, 77, 9, 1_700_000_000_000_000), {"work": 100, "local": 7},
                    {"work": "f" * 32, "local": "e" * 32}, {"work": (3, 5), "local": (0, 0)},
                    {"work": {77: 9, (1 << 64) - 1: 2}})  # fmt: skip
    back = decode(encode(cp))
    assert back == cp and back.start_of("work", "f" * 32) == 100
    assert back.start_of("work", "0" * 32) == 0 and back.start_of("other", "f" * 32) == 0
    entry = '"fingerprint": "x", "transferred": [0, 0], "seen": []'
    q5 = '"q": {"seq": 5, "fingerprint": "x", "transferred": [0, 0], '
    for bad in (
        b"",
        b"not json",
        b'{"version": 4}',
        # the versions before the transfer counters and before the publisher positions:
        # read the whole log once
        b'{"version": 1, "last": [10, 0, 0, 0], "queues": {"q": {"seq": 5, "fingerprint": "x"}}}',
        b'{"version": 2, "last": [10, 0, 0, 0], "queues": {"q": {"seq": 5, "fingerprint": "x", '
        b'"transferred": [0, 0]}}}',
        b'{"version": 3, "last": [1, 2, 3], "queues": {}}',
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {"q": {"seq": 12, %s}}}' % entry.encode(),
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {"q": {"seq": 0, %s}}}' % entry.encode(),
        b'{"version": 3, "last": [10, 0, 0, -1], "queues": {}}',
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {"q": {"seq": 5, "fingerprint": "x"}}}',
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {"q": {"seq": 5, "fingerprint": "x", '
        b'"transferred": [1, -1], "seen": []}}}',
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {"q": {"seq": 5, "fingerprint": "x", '
        b'"transferred": [1], "seen": []}}}',
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {%s"seen": {}}}}' % q5.encode(),
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {%s"seen": [[1, 0]]}}}' % q5.encode(),
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {%s"seen": [[-1, 2]]}}}' % q5.encode(),
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {%s"seen": [[1, 2, 3]]}}}' % q5.encode(),
        b'{"version": 3, "last": [10, 0, 0, 0], "queues": {%s"seen": [[1, "2"]]}}}' % q5.encode(),
    ):
        with pytest.raises(CheckpointError):
            decode(bad)


def test_the_fingerprint_follows_what_decides_which_messages_enter() -> None:
    base = QueueConfig(name="work", underlying="work-in")
    same = fingerprint(base, False)
    assert fingerprint(QueueConfig(name="work", underlying="work-in", lease_period=1.0),
                       False) == same  # fmt: skip
    for other in (
        fingerprint(QueueConfig(name="work", underlying="other"), False),
        fingerprint(QueueConfig(name="work", underlying="work-in", filter="/a = 1"), False),
        fingerprint(QueueConfig(name="work", underlying="work-in", kind="LocalQueue"), False),
        fingerprint(base, True),
    ):
        assert other != same
