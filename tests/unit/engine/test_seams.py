"""The seams of the engine core, each with a test double on the other side."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.acks import DurableAcks, LocalHorizon
from spool.server.bookmarks import format_bookmark
from spool.server.clock import VirtualClock
from spool.server.expr import MessageView, compile_filter
from spool.server.fanout import FanOut
from spool.server.ports import AckValue, AppendedRun, Origin, PublishRun
from spool.server.protocol.commands import decode_command
from spool.server.protocol.errors import InvalidTopic, NotEntitled, ProtocolFailure, TxlogFull
from spool.server.protocol.frame import Message, parse_frame
from spool.server.protocol.options import parse_subscribe_options
from spool.server.publishing import PublishPipeline
from spool.server.router import Router
from spool.server.subscription import SessionSubscription
from spool.server.topics import TopicTable
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import Record, RecordKind
from spool.server.wire import encode_batch, encode_publish, encode_run, topic_json
from tests.support.engine import EngineHarness

#: the paced readers' turn of a peer that is never replayed to
_NO_TURN = asyncio.Lock()


class Peer:
    """An Outbound that records what it is sent."""

    def __init__(self) -> None:
        self.closed = False
        self.sent: list[bytes] = []
        self.counted = 0

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def send_messages(self, data: bytes, count: int) -> None:
        self.counted += count
        self.sent.append(data)

    def send_batch(self, data: bytes, count: int) -> None:
        self.send_messages(data, count)

    def ack(
        self,
        kind: str,
        cid: str | None,
        status: str = "success",
        reason: str | None = None,
        **fields: AckValue,
    ) -> None:
        self.sent.append(orjson.dumps({"a": kind, "cid": cid, "status": status, **fields}))

    def fail(self, cid: str | None, exc: ProtocolFailure, **fields: AckValue) -> None:
        self.sent.append(
            orjson.dumps({"a": "processed", "cid": cid, "reason": exc.reason, **fields})
        )

    def has_room(self) -> bool:
        return True

    @property
    def piece_bytes(self) -> int:
        return 64 * 1024

    async def wait_room(self) -> None:
        return None

    @property
    def paced_turn(self) -> asyncio.Lock:
        """Nothing is ever replayed here: a lock nobody waits for."""
        return _NO_TURN

    def live_fits(self, nbytes: int, *, readable: bool) -> bool:
        return True

    def overflow(self, nbytes: int) -> None:
        self.closed = True

    def messages(self) -> list[tuple[dict[str, object], bytes]]:
        out: list[tuple[dict[str, object], bytes]] = []
        for data in self.sent:
            if data.startswith(b'{"a"'):
                out.append((orjson.loads(data), b""))
            else:
                out.extend((m.header, m.body) for m in parse_frame(data).messages)
        return out


class Horizon:
    """A durability horizon moved by the test (e.g. local fsync and a sync replica)."""

    def __init__(self) -> None:
        self.seq = 0
        self.failure: ProtocolFailure | None = None
        self._listeners: list[Callable[[int], None]] = []
        self._failure_listeners: list[Callable[[ProtocolFailure | None], None]] = []

    async def wait(self, seq: int) -> None:
        raise AssertionError("not used here")

    def on_advance(self, callback: Callable[[int], None]) -> None:
        self._listeners.append(callback)

    def on_failure(self, callback: Callable[[ProtocolFailure | None], None]) -> None:
        self._failure_listeners.append(callback)

    def move(self, seq: int) -> None:
        self.seq = seq
        for cb in self._listeners:
            cb(seq)

    def fail(self, failure: ProtocolFailure | None) -> None:
        """The horizon stops being able to move (None: it can again)."""
        self.failure = failure
        for cb in self._failure_listeners:
            cb(failure)


# -- wire -------------------------------------------------------------------------------


@given(
    st.integers(min_value=2, max_value=2**64 - 1),
    st.lists(st.integers(min_value=1, max_value=2**63), min_size=1, max_size=5),
)
def test_run_encoder_bookmarks_are_format_bookmark(h: int, seqs: list[int]) -> None:
    bodies = [b'{"n":%d}' % i for i in range(len(seqs))]
    data = encode_run(topic_json("t"), b'"s"', bodies, range(len(seqs)), pub_hash=h, pub_seqs=seqs)
    msgs = parse_frame(data).messages
    assert [m.header["bm"] for m in msgs] == [format_bookmark(h, s) for s in seqs]
    assert [m.body for m in msgs] == bodies
    single = [encode_publish(topic_json("t"), b'"s"', b, format_bookmark(h, s)) for s, b in
              zip(seqs, bodies, strict=True)]  # fmt: skip
    assert data == b"".join(single)


def test_batch_and_run_encoders_agree_on_the_layout() -> None:
    recs = [
        Record(i, 1_700_000_000_000_000 + i, 7, i, "t", "json", RecordKind.PUBLISH, (), 0,
               b"{}", "x" if i == 2 else "", "")
        for i in (1, 2)
    ]  # fmt: skip
    batch = RecordBatch.from_records(recs)
    out = encode_batch(batch, range(2), b'"s"', topic_literal=topic_json("t"))
    run = encode_run(topic_json("t"), b'"s"', [b"{}", b"{}"], range(2), pub_hash=7,
                     pub_seqs=[1, 2], corr_ids=["", "x"])  # fmt: skip
    assert out == run
    assert [m.header.get("x") for m in parse_frame(out).messages] == [None, "x"]


# -- topics ---------------------------------------------------------------------------


def test_the_topic_table_is_bounded_and_forgets_the_least_recently_published() -> None:
    table = TopicTable(lambda t: t.startswith("rec"), limit=3)
    for name in ("a", "b", "rec.c"):
        table.admit(name)
    assert table.get("a") is not None  # a is now the most recently used
    table.admit("d")
    assert [t.name for t in table] == ["rec.c", "a", "d"]
    assert table.evicted == 1
    assert table.admit("rec.c").recorded and not table.admit("d").recorded
    with pytest.raises(InvalidTopic):
        table.admit("orders.*")


# -- acks on a durability horizon --------------------------------------------------------


def test_persisted_acks_wait_for_the_horizon_and_are_conflated() -> None:
    horizon = Horizon()
    last = [0]
    acks = DurableAcks(horizon, lambda: last[0], VirtualClock())
    peer = Peer()
    acks.expect_persisted(peer, 9, 1, 10)
    acks.expect_persisted(peer, 9, 3, 12)
    last[0] = 3
    acks.flush(peer, decode_command(Message({"c": "flush", "cid": "f"}, b"")))
    horizon.move(1)
    assert [m for m, _ in peer.messages()] == [
        {"a": "persisted", "cid": None, "status": "success", "s": 10, "bm": "9|10|"}
    ]
    horizon.move(3)
    got = [m for m, _ in peer.messages()][1:]
    assert got == [
        {"a": "persisted", "cid": None, "status": "success", "s": 12, "bm": "9|12|"},
        {"a": "processed", "cid": "f", "status": "success"},
    ]
    assert acks.last_persisted(peer) == 12
    assert acks.pending_peers == 0


def test_a_duplicate_is_acked_at_once_when_everything_is_durable() -> None:
    horizon = Horizon()
    acks = DurableAcks(horizon, lambda: 5, VirtualClock())
    horizon.move(5)
    peer = Peer()
    acks.expect_duplicate(peer, 9, 4)
    assert [m["s"] for m, _ in peer.messages()] == [4]


def test_a_horizon_that_cannot_move_fails_flushes_and_tells_persisted_waiters_once() -> None:
    """Nothing waits forever: a failing horizon fails every flush at once and sends one
    persisted failure per peer (its highest waiting s); the publishes stay pending, and
    when the horizon moves again their persisted acks go out after all."""
    horizon = Horizon()
    last = [0]
    acks = DurableAcks(horizon, lambda: last[0], VirtualClock())
    a, b, idle = Peer(), Peer(), Peer()
    acks.expect_persisted(a, 9, 1, 10)
    acks.expect_persisted(a, 9, 2, 11)
    acks.expect_persisted(b, 8, 3, 5)
    last[0] = 3
    acks.flush(a, decode_command(Message({"c": "flush", "cid": "f1"}, b"")))
    acks.flush(idle, decode_command(Message({"c": "flush", "cid": "f2"}, b"")))
    full = TxlogFull("journal write failed on x: [Errno 28] No space left on device")
    horizon.fail(full)
    assert [m for m, _ in a.messages()] == [
        {"a": "persisted", "cid": None, "status": "failure", "s": 11, "detail": full.detail},
        {"a": "processed", "cid": "f1", "reason": "txlog full"},
    ]
    assert [m for m, _ in b.messages()] == [
        {"a": "persisted", "cid": None, "status": "failure", "s": 5, "detail": full.detail}
    ]
    assert [m for m, _ in idle.messages()] == [
        {"a": "processed", "cid": "f2", "reason": "txlog full"}
    ]
    # while it cannot move, a flush or a duplicate fails at once; nothing is repeated
    acks.flush(b, decode_command(Message({"c": "flush", "cid": "f3"}, b"")))
    acks.expect_duplicate(idle, 7, 3)
    assert [m["cid"] for m, _ in b.messages()] == [None, "f3"]
    assert [(m["a"], m.get("status"), m.get("s")) for m, _ in idle.messages()][1:] == [
        ("persisted", "failure", 3)
    ]
    assert len(a.messages()) == 2
    # it moves again: what was waiting is persisted after all
    horizon.fail(None)
    horizon.move(3)
    assert [m for m, _ in a.messages()][2:] == [
        {"a": "persisted", "cid": None, "status": "success", "s": 11, "bm": "9|11|"}
    ]
    assert [m.get("s") for m, _ in b.messages()][2:] == [5]
    assert [m.get("s") for m, _ in idle.messages()][2:] == [3]
    assert acks.pending_peers == 0


# -- fan-out ------------------------------------------------------------------------------


def _sub(
    peer: Peer, sub_id: str, topic: str, flt: str | None = None, ts: bool = False
) -> SessionSubscription:
    return SessionSubscription(
        outbound=peer, client="c", user=None, sub_id=sub_id, topic=topic, pattern=None,
        filter=compile_filter(flt) if flt else None, filter_text=flt,
        options=parse_subscribe_options("timestamp" if ts else None),
        sid_bytes=orjson.dumps(sub_id),
    )  # fmt: skip


class _NoAuth:
    enabled = False

    def can_read(self, user: object, topic: str) -> bool:
        return True

    def can_write(self, user: object, topic: str) -> bool:
        return True


def _run(bodies: list[bytes]) -> AppendedRun:
    return AppendedRun(
        topic="t", topic_literal=topic_json("t"), origin=Origin("client", "p", None, None),
        pub_hash=5, pub_seqs=list(range(1, len(bodies) + 1)), bodies=bodies, first_seq=1,
        timestamp_us=1_700_000_000_000_000, corr_ids=None, sow_keys=None,
        kind=RecordKind.PUBLISH,
        publisher_name="p",
    )  # fmt: skip


def test_a_connection_gets_one_message_per_publish_naming_the_subscriptions_that_took_it() -> None:
    router = Router()
    one, two = Peer(), Peer()
    subs = (
        _sub(one, "even", "t", "/n % 2 = 0"),
        _sub(one, "big", "t", "/n > 2"),
        _sub(one, "all", "t"),
        _sub(two, "odd", "t", "/n % 2 = 1"),
    )
    for sub in subs:
        router.add(sub)
    parses = MessageView.parse_count()
    FanOut(router, _NoAuth(), VirtualClock()).appended(_run([b'{"n":%d}' % n for n in range(1, 5)]))
    assert MessageView.parse_count() - parses == 4  # once per message, whatever the filters
    assert [(m["sids"], b) for m, b in one.messages()] == [
        ("all", b'{"n":1}'),
        ("even,all", b'{"n":2}'),
        ("big,all", b'{"n":3}'),
        ("even,big,all", b'{"n":4}'),
    ]
    assert [b for _, b in two.messages()] == [b'{"n":1}', b'{"n":3}']
    assert (one.counted, two.counted) == (4, 2)
    # each subscription counts the messages it took, though a message names several
    assert [sub.progress.delivered for sub in subs] == [2, 2, 4, 2]


def test_the_fan_out_delivers_message_kinds_only_a_due_run_but_no_scheduled_one() -> None:
    router = Router()
    peer = Peer()
    router.add(_sub(peer, "all", "t"))
    fan = FanOut(router, _NoAuth(), VirtualClock())
    for kind in RecordKind:
        fan.appended(dataclasses.replace(_run([b'{"k":%d}' % kind]), kind=kind))
    assert [b for _, b in peer.messages()] == [
        b'{"k":%d}' % k for k in (RecordKind.PUBLISH, RecordKind.DELTA_PUBLISH, RecordKind.DUE)
    ]


class _Full(Peer):
    """A connection whose buffer takes no more: its live runs are refused."""

    def __init__(self) -> None:
        super().__init__()
        self.overflowed = 0

    def live_fits(self, nbytes: int, *, readable: bool) -> bool:
        return False

    def overflow(self, nbytes: int) -> None:
        self.overflowed += 1


def test_each_subscription_counts_the_live_messages_queued_to_it() -> None:
    router = Router()
    alone, pair, full = Peer(), Peer(), _Full()
    solo = _sub(alone, "solo", "a")
    first, second = _sub(pair, "x", "b"), _sub(pair, "y", "b")
    refused = _sub(full, "z", "c")
    for sub in (solo, first, second, refused):
        router.add(sub)
    fan = FanOut(router, _NoAuth(), VirtualClock())

    def run(topic: str, n: int) -> AppendedRun:
        return dataclasses.replace(_run([b"{}"] * n), topic=topic, topic_literal=topic_json(topic))

    for _ in range(3):
        fan.appended(run("a", 5))  # one plain subscription: the fast path
        fan.appended(run("b", 2))  # two of one connection: one message per publish
        fan.appended(run("c", 4))  # refused: nothing was delivered
    assert (solo.progress.delivered, first.progress.delivered) == (15, 6)
    assert (second.progress.delivered, refused.progress.delivered) == (6, 0)
    assert (alone.counted, pair.counted, full.overflowed) == (15, 6, 3)


# -- the pipeline's stages --------------------------------------------------------------


class RecordingStage:
    """A stage with every hook, recording its calls (SOW, queues, replication to come)."""

    def __init__(self, refuse: str | None = None) -> None:
        self.calls: list[tuple[str, object]] = []
        self.refuse = refuse

    def applies_to(self, topic: str) -> bool:
        return topic != "other"

    def prepare(self, run: PublishRun) -> None:
        self.calls.append(("prepare", list(run.bodies)))
        if run.topic == self.refuse:
            raise NotEntitled("refused by the stage")

    def appended(self, run: AppendedRun) -> None:
        self.calls.append(("appended", (run.first_seq, list(run.bodies))))

    def reaches(self, topic: str, peer: object) -> bool:
        return False

    def durable(self, seq: int) -> None:
        self.calls.append(("durable", seq))

    def recover(self, batch: RecordBatch) -> None:
        self.calls.append(("recover", list(batch.bodies)))

    def recover_from(self) -> int:
        return 1


def test_stages_see_runs_before_and_after_the_append_then_durability_and_recovery(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        async with EngineHarness(tmp_path) as h:
            stage = RecordingStage(refuse="no")
            txlog = h.broker.txlog
            assert txlog is not None
            p2 = PublishPipeline(
                TopicTable(lambda t: True), txlog, LocalHorizon(txlog), h.broker.acks,
                _NoAuth(), h.broker.events, stages=(stage,),
            )  # fmt: skip
            peer = Peer()
            origin = Origin("client", "p", None, peer)
            p2.publish(origin, PublishRun("t", 77, [None, None], [b"1", b"2"], []))
            p2.publish(origin, PublishRun("other", 77, [None], [b"3"], []))
            p2.publish(
                origin, PublishRun("no", 77, [None], [b"4"], [(0, frozenset({"processed"}), "x")])
            )
            assert stage.calls == [
                ("prepare", [b"1", b"2"]),
                ("appended", (1, [b"1", b"2"])),
                ("prepare", [b"4"]),
            ]
            assert [m["reason"] for m, _ in peer.messages()] == ["not entitled"]
            await h.commit()
            assert ("durable", 3) in stage.calls
            stage.calls.clear()
            assert await p2.recover(batch_count=2) == 3
            assert stage.calls == [("recover", [b"1", b"2"]), ("recover", [b"3"])]

    asyncio.run(body())
