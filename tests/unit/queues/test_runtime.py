"""A replicated queue's runtime (server/queues/stage.py ``QueueRuntime``): replicated
records and messages meeting in either order."""

from __future__ import annotations

from spool.server.bookmarks import format_bookmark
from spool.server.clock import VirtualClock
from spool.server.config.model import QueueConfig
from spool.server.queues.ownership import Grant, Ownership, Request
from spool.server.queues.records import encode_ack_bookmarks, encode_transfers
from spool.server.queues.stage import QueueRuntime
from spool.server.txlog.format.record import RecordKind


def _runtime(instance: str = "c") -> QueueRuntime:
    return QueueRuntime.build(
        QueueConfig(name="work", underlying="work-in"), VirtualClock(), instance, replicated=True
    )


def test_a_message_acked_elsewhere_before_it_arrived_does_not_enter() -> None:
    """The ack of a replicated queue's message can reach this copy before the message
    (links are ordered per pair only); the message must not then stay in the state
    machine for ever, owned by nobody, never delivered, pinning the log."""
    q = QueueRuntime.build(
        QueueConfig(name="work", underlying="work-in"), VirtualClock(), "c", replicated=True
    )
    bm = format_bookmark(7, 3)
    q.receive(int(RecordKind.QUEUE_ACK), encode_ack_bookmarks([bm]))
    assert q.admit("work-in", [b"{}"], 1, [0], [7], [3], "a") == 0
    assert q.machine.depth == 0 and q.ownership is not None and q.ownership.early() == 0
    # the next message of that publisher enters as usual
    assert q.admit("work-in", [b"{}"], 2, [0], [7], [4], "a") == 1


def test_a_grant_before_its_message_is_applied_when_it_arrives_and_dropped_once_passed() -> None:
    q = _runtime()
    own = q.ownership
    assert own is not None
    q.receive(
        int(RecordKind.QUEUE_TRANSFER), encode_transfers([Grant(format_bookmark(7, 3), "c", 1)])
    )
    q.receive(
        int(RecordKind.QUEUE_TRANSFER), encode_transfers([Grant(format_bookmark(7, 9), "c", 1)])
    )
    assert own.early() == 2
    q.admit("work-in", [b"{}"], 1, [0], [7], [3], "a")
    assert own.can_deliver(format_bookmark(7, 3)) and own.early() == 1
    # publisher 7 moved past 9 on this copy (9 was filtered out, or came and went)
    q.admit("work-in", [b"{}"], 2, [0], [7], [10], "a")
    assert own.early() == 0


def _transfer(q: QueueRuntime, *changes: Grant | Request, mine: bool = False) -> None:
    q.receive(int(RecordKind.QUEUE_TRANSFER), encode_transfers(list(changes)), mine=mine)


def test_transfers_are_counted_once_per_grant_record_out_where_made_in_where_they_go() -> None:
    """Each grant record of this copy's log counts once: a grant this instance made (or
    a hand-back) out, a proxied takeover it made in; a grant to it in; a takeover of a
    message it owns out; any other grant nothing (it moves a message between others)."""
    q = _runtime("a")
    for n in (1, 2, 3):
        q.admit("work-in", [b"{}"], n, [0], [7], [n], "a")
    m1, m2, m3 = (format_bookmark(7, n) for n in (1, 2, 3))
    q.logged([Grant(m1, "b", 1), Request(m2, "a", "b", 0)])  # granted away (a request: none)
    assert (q.transferred_in, q.transferred_out) == (0, 1)
    _transfer(q, Grant(m1, "a", 2))  # b granted it back
    assert (q.transferred_in, q.transferred_out) == (1, 1)
    _transfer(q, Grant(m2, "c", 1, proxied=True))  # c took a's message over by proxy
    assert (q.transferred_in, q.transferred_out) == (1, 2)
    _transfer(q, Grant(m2, "b", 2))  # between others
    _transfer(q, Grant(m3, "a", 1, proxied=True), mine=True)  # its own takeover, read back
    assert (q.transferred_in, q.transferred_out) == (2, 2)
    # a takeover of a message this copy does not see owned here moves nothing of its own
    _transfer(q, Grant(m2, "c", 3, proxied=True))
    assert (q.transferred_in, q.transferred_out) == (2, 2)


def test_a_replay_counts_only_the_grants_after_the_checkpoints_last_record() -> None:
    q = _runtime("a")
    q.resume(1, counted_through=5, transferred=(4, 6), seen={})
    bm = format_bookmark(7, 1)
    body = encode_transfers([Grant(bm, "a", 1)])
    q.receive(int(RecordKind.QUEUE_TRANSFER), body, replay=True, seq=5)
    assert (q.transferred_in, q.transferred_out) == (4, 6)  # counted in the checkpoint
    q.receive(int(RecordKind.QUEUE_TRANSFER), body, replay=True, seq=6)
    assert (q.transferred_in, q.transferred_out) == (5, 6)


def _group_local_on_a() -> tuple[QueueRuntime, Ownership]:
    """Instance a's copy of a replicated group-local queue whose InitialOwner is a."""
    q = QueueRuntime.build(
        QueueConfig(name="work", kind="GroupLocalQueue", underlying="work-in", initial_owner="a"),
        VirtualClock(), "a", replicated=True,
    )  # fmt: skip
    assert q.ownership is not None
    return q, q.ownership


def test_a_request_before_its_message_is_held_then_answered_at_the_next_pass() -> None:
    """A group-local queue's owner is asked for a message published elsewhere before the
    message reached it: the request waits here (and keeps its record in what a restart
    reads), and the first pass after the message came grants it."""
    q, own = _group_local_on_a()
    bm = format_bookmark(7, 1)
    _transfer(q, Request(bm, "b", "a", 0))
    assert own.requests_waiting() == 1 and own.is_early(bm) and q.outgoing == []
    assert own.answer(1) == []
    q.admit("work-in", [b"{}"], 2, [0], [7], [1], "c")
    assert own.can_deliver(bm) and own.requests_waiting() == 1 and not own.is_early(bm)
    assert own.answer(2) == [Grant(bm, "b", 1)] and own.requests_waiting() == 0
    # one whose message can no longer come (passed here), or that an ack superseded, is
    # not kept
    _transfer(q, Request(format_bookmark(7, 1), "c", "a", 1))
    q.receive(int(RecordKind.QUEUE_ACK), encode_ack_bookmarks([format_bookmark(7, 2)]))
    _transfer(q, Request(format_bookmark(7, 2), "b", "a", 0))
    _transfer(q, Request(format_bookmark(7, 3), "b", "a", 0))
    assert own.requests_waiting() == 1
    q.admit("work-in", [b"{}"], 3, [0], [8], [1], "c")  # another publisher: nothing
    assert own.requests_waiting() == 1
    q.receive(int(RecordKind.QUEUE_ACK), encode_ack_bookmarks([format_bookmark(7, 3)]))
    assert own.requests_waiting() == 0  # (the ack itself waits for its message)


def test_a_request_before_its_message_read_back_is_answered_by_the_running_instance() -> None:
    q, own = _group_local_on_a()
    bm = format_bookmark(7, 1)
    q.receive(int(RecordKind.QUEUE_TRANSFER), encode_transfers([Request(bm, "b", "a", 0)]),
              replay=True, seq=1)  # fmt: skip
    q.admit("work-in", [b"{}"], 2, [0], [7], [1], "c")
    assert q.outgoing == [] and own.can_deliver(bm)  # replaying decides nothing
    assert own.answer(3) == [Grant(bm, "b", 1)]


def test_a_bounded_queues_request_before_its_message_is_granted_once_it_is_in_the_log() -> None:
    """The message may stay inactive (the window is full): it is granted as an inactive
    message once it reached this copy's log, at the next pass."""
    q = QueueRuntime.build(
        QueueConfig(name="work", kind="GroupLocalQueue", underlying="work-in", initial_owner="a",
                    target_queue_depth=1),
        VirtualClock(), "a", replicated=True,
    )  # fmt: skip
    own = q.ownership
    assert own is not None
    q.admit("work-in", [b"{}"], 1, [0], [8], [1], "c")  # fills the window
    bm = format_bookmark(7, 1)
    _transfer(q, Request(bm, "b", "a", 0))
    assert own.requests_waiting() == 1 and own.answer(1) == []
    q.admit("work-in", [b"{}"], 2, [0], [7], [1], "c")  # inactive
    assert q.machine.get(bm) is None and own.is_early(bm)
    assert own.answer(2) == [Grant(bm, "b", 1)] and own.requests_waiting() == 0


def test_a_message_that_comes_back_from_a_lost_range_is_held_new_work_is_not() -> None:
    """While a resync hold is on (server/queues/hold.py), a message that arrives by
    replication with a time before the start-up may come back with its ack behind it:
    held. One published here, or after the start-up, goes."""
    from spool.server.ports import AppendedRun, Origin
    from spool.server.queues.machine import Consumer
    from spool.server.queues.stage import QueueStage

    q = QueueRuntime.build(  # every message owned here, wherever published
        QueueConfig(name="work", underlying="work-in", initial_owner="a"), VirtualClock(), "a",
        replicated=True,
    )  # fmt: skip
    stage = QueueStage([q], lambda _q: None)
    q.held_before_us = 1_000

    def run(seq: int, at: int, path: tuple[str, ...]) -> AppendedRun:
        return AppendedRun(
            topic="work-in", topic_literal=b'"work-in"', origin=Origin("replication", "b", None, None),
            pub_hash=7, pub_seqs=[seq], bodies=[b"{}"], first_seq=seq, timestamp_us=at,
            corr_ids=None, sow_keys=None, kind=RecordKind.PUBLISH, publisher_name="",
            path=path,
        )  # fmt: skip

    stage.appended(run(1, 999, ("a",)))  # back from a's lost tail
    stage.appended(run(2, 1_000, ("b",)))  # published at b after a started
    stage.appended(run(3, 10, ()))  # published here (after the start-up, whatever its time)
    q.machine.subscribe(Consumer("c", 10))
    assert [d.message.seq for d in q.machine.dispatch(0)] == [2, 3]
    assert q.machine.held() == 1
    q.machine.release_hold()
    assert [d.message.seq for d in q.machine.dispatch(0)] == [1]
