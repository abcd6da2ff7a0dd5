"""A queue as an operator browses it: pages in log order with a cursor, the oldest
waiting message and lease, and why each message is not being delivered
(server/queues/browse.py, the machine's read-only views)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.bookmarks import format_bookmark
from spool.server.clock import VirtualClock
from spool.server.config.model import QueueConfig
from spool.server.queues.browse import browse, why_waiting
from spool.server.queues.machine import Consumer, QueuedMessage, QueueMachine, QueuePolicy
from spool.server.queues.ownership import Request
from spool.server.queues.records import encode_transfers
from spool.server.queues.stage import QueueRuntime
from spool.server.txlog.format.record import RecordKind

LEASE_US = 30_000_000


def _msg(seq: int, ts: int = 0, **kw: object) -> QueuedMessage:
    return QueuedMessage(seq, format_bookmark(1, seq), "work-in", b'{"n":%d}' % seq, ts, **kw)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 60),
    gone=st.sets(st.integers(1, 60)),
    after=st.integers(0, 70),
    limit=st.integers(1, 10),
    scan=st.integers(1, 80),
)
def test_pages_follow_log_order_from_the_cursor(
    n: int, gone: set[int], after: int, limit: int, scan: int
) -> None:
    """``page_after`` against a plain list of the messages left: the page is the next
    ``limit`` after the cursor, and following ``next_after`` visits every message once."""
    m = QueueMachine("work", QueuePolicy())
    m.add_many(_msg(s) for s in range(1, n + 1))
    m.remove_where(lambda x: x.seq in gone)
    left = [s for s in range(1, n + 1) if s not in gone]
    page, nxt = m.page_after(after, limit, scan)
    seqs = [x.seq for x in page]
    assert seqs == [s for s in left if s > after][: len(seqs)]
    assert len(seqs) <= limit
    if nxt == 0:
        assert seqs == [s for s in left if s > after][:limit]
    # walking every page from the start visits each message once, in order
    seen: list[int] = []
    cursor = 0
    for _ in range(200):
        page, cursor = m.page_after(cursor, limit, scan)
        seen.extend(x.seq for x in page)
        if cursor == 0:
            break
    assert seen == left


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "dispatch", "ack", "tick", "cancel"]), st.integers(0, 5)),
        max_size=60,
    )
)
def test_oldest_waiting_and_oldest_lease_against_a_scan(ops: list[tuple[str, int]]) -> None:
    """The views that avoid a walk of the queue give what a walk gives."""
    m = QueueMachine("work", QueuePolicy(lease_period_us=LEASE_US, max_backlog=3))
    c = Consumer("c/1", backlog=3)
    m.subscribe(c)
    seq = now = 0
    for op, k in ops:
        now += 1_000_000
        if op == "add":
            for _ in range(k + 1):
                seq += 1
                m.add(_msg(seq, now))
        elif op == "dispatch":
            m.dispatch(now, limit=k + 1)
        elif op == "ack" and c.leased:
            m.ack(c, [x.bookmark for x in list(c.leased.values())[: k + 1]])
        elif op == "cancel" and c.leased:
            m.cancel(c, [next(iter(c.leased.values())).bookmark])
        elif op == "tick":
            m.tick(now + k * 10_000_000)
        every = list(m.messages())
        waiting = [x for x in every if x.holder is None]
        expect = min(waiting, key=lambda x: x.seq) if waiting else None
        assert m.oldest_waiting() is expect
        starts = [x.lease_until_us - LEASE_US for x in every if x.holder is not None]
        assert m.oldest_lease_us() == min(starts, default=0)


def _queue(replicated: bool = False, **kw: object) -> QueueRuntime:
    cfg = QueueConfig(name="work", underlying="work-in", **kw)  # type: ignore[arg-type]
    return QueueRuntime.build(cfg, VirtualClock(), "a", replicated=replicated)


def test_reasons_for_a_local_queue() -> None:
    q = _queue(barrier="/b = 1", max_backlog=1)
    q.admit("work-in", [b'{"k":1}', b'{"b":1}', b'{"k":2}'], 1, [0, 0, 0], [1] * 3, [1, 2, 3])
    m1, m2, m3 = q.machine.messages()
    assert why_waiting(q, m1).reason == "no_consumer"
    picky = Consumer("c/1", backlog=1, accepts=lambda x: x.body == b'{"k":2}')
    q.machine.subscribe(picky)
    assert why_waiting(q, m1).reason == "no_consumer_matches"
    assert why_waiting(q, m2).reason == "barrier"
    assert why_waiting(q, m3).reason == "ready"
    q.machine.dispatch(1)
    assert why_waiting(q, m3).reason == "leased" and "c/1" in why_waiting(q, m3).detail
    assert why_waiting(q, m1).reason == "consumers_full"


def test_reasons_for_a_message_owned_elsewhere() -> None:
    q = _queue(replicated=True)
    own = q.ownership
    assert own is not None
    bm = format_bookmark(9, 1)
    q.admit("work-in", [b"{}"], 1, [0], [9], [1], "b")  # published on b: b owns it
    (m,) = q.machine.messages()
    q.machine.subscribe(Consumer("c/1", backlog=5))
    why = why_waiting(q, m)
    assert why.reason == "owned_elsewhere" and "not requested" in why.detail
    asked = own.want(5_000_000, 5, 100_000)
    assert asked == [Request(bm, "a", "b", 0)]
    why = why_waiting(q, m)
    assert why.reason == "owned_elsewhere" and why.since_us == 5_000_000
    own.owner_offline("b", True)
    assert why_waiting(q, m).reason == "owner_offline"


def test_a_request_granted_here_shows_who_it_went_to() -> None:
    q = _queue(replicated=True)
    q.admit("work-in", [b"{}"], 1, [0], [9], [1], "a")
    (m,) = q.machine.messages()
    q.receive(int(RecordKind.QUEUE_TRANSFER), encode_transfers([Request(m.bookmark, "b", "a", 0)]))
    page = browse(q, 0, 10, 1_000_000)
    (row,) = page.messages
    assert row["owner"] == "b" and row["epoch"] == 1 and row["reason"] == "owned_elsewhere"


def test_a_page_shows_the_fields_of_a_message() -> None:
    q = _queue()
    q.admit("work-in", [b'{"n":1}', b"x" * 1000], 1, [1_000_000, 2_000_000], [1, 1], [1, 2])
    c = Consumer("c/1", backlog=1)
    q.machine.subscribe(c)
    q.machine.dispatch(3_000_000)
    page = browse(q, 0, 1, 4_000_000).to_dict()
    (row,) = page["messages"]  # type: ignore[misc]
    assert row["bookmark"] == format_bookmark(1, 1) and row["lease_holder"] == "c/1"
    assert row["deliveries"] == 1 and row["age"] == 3.0 and row["owner"] == "a"
    assert row["lease_expires_in"] == 299.0 and row["data"] == '{"n":1}'
    assert page["next_after"] == 1 and page["depth"] == 2
    last = browse(q, 1, 10, 4_000_000).to_dict()
    (row,) = last["messages"]  # type: ignore[misc]
    assert row["truncated"] is True and len(row["data"]) == 256  # type: ignore[arg-type]
    assert last["next_after"] is None
