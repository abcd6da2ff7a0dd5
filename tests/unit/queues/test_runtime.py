"""A replicated queue's runtime (server/queues/stage.py ``QueueRuntime``): replicated
records and messages meeting in either order."""

from __future__ import annotations

from server.bookmarks import format_bookmark
from server.clock import VirtualClock
from server.config.model import QueueConfig
from server.queues.ownership import Grant
from server.queues.records import encode_ack_bookmarks, encode_transfers
from server.queues.stage import QueueRuntime
from server.txlog.record import RecordKind


def _runtime(instance: str = "c") -> QueueRuntime:
    return QueueRuntime.build(
        QueueConfig(name="work", underlying="work-in"), VirtualClock(), instance, replicated=True
    )


def test_a_message_acked_elsewhere_before_it_arrived_does_not_enter() -> None:
    """Regression: the ack of a replicated queue's message that reached this copy before
    the message (links are ordered per pair only) left the message in the state machine
    for ever, owned by nobody, never delivered, pinning the log."""
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
