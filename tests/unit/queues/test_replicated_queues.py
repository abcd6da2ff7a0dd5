"""Replicated queues on two in-process brokers over the memory fabric (virtual clock):
ownership gates deliveries, acks and transfers replicate, a transfer is granted once,
proxied transfer takes over from an offline owner (with the documented duplicate risk)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from spool.server.clock import VirtualClock
from tests.support.engine import EngineHarness, FakeClient
from tests.support.fabric import A, B, drive, fabric_of, scenario, xml
from tests.support.replication import MemoryFabric, destination

QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog></Queue>"
)


#: the action modules switch proxied transfer like the REST switch
PROXIED_ACTIONS = "".join(
    f"<Action><Name>{verb}</Name><On><Module>amps-action-on-admin</Module></On>"
    f"<Do><Module>amps-action-do-{verb}-proxied-transfer</Module>"
    "<Options><Queue>work</Queue></Options></Do></Action>"
    for verb in ("enable", "disable")
)


def _configs(tmp_path: Path, actions: str = "") -> dict[str, str]:
    return {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), sow=QUEUE),
        "b": xml(
            tmp_path, "b", destination("a", [A], passthrough=(".*",)), sow=QUEUE, actions=actions
        ),
    }


async def _linked(clock: VirtualClock, h: dict[str, EngineHarness]) -> None:
    for x, y in (("a", "b"), ("b", "a")):
        repl = h[x].broker.replication
        assert repl is not None
        await drive(clock, lambda r=repl, d=y: r.destinations[d].connected)


async def _cut_off_a(
    fabric: MemoryFabric, clock: VirtualClock, h: dict[str, EngineHarness], *, both: bool = True
) -> None:
    """Partition a from b (a's link to b, and with ``both`` b's to a too), until b has
    seen a's inbound link go."""
    fabric.cut(B, source="a")
    if both:
        fabric.cut(A, source="b")
    repl_b = h["b"].broker.replication
    assert repl_b is not None
    await drive(clock, lambda: "a" not in repl_b.inbound)


def _pub(client: FakeClient, origin: str, ns: range) -> None:
    client.send(
        *[({"c": "publish", "t": "work-in"}, orjson.dumps({"o": origin, "n": n})) for n in ns]
    )


class Worker:
    """A consumer that acks everything it gets; remembers what it processed."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self.seen = 0
        self.processed: list[tuple[str, int]] = []
        client.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=5"}, b""))

    def step(self) -> None:
        new = self.client.deliveries("q")[self.seen :]
        self.seen += len(new)
        if not new:
            return
        bms: list[str] = []
        for header, body in new:
            doc: dict[str, Any] = orjson.loads(body)
            self.processed.append((doc["o"], doc["n"]))
            bms.append(str(header["bm"]))
        self.client.send(({"c": "sow_delete", "t": "work", "bm": ",".join(bms)}, b""))


def _depth(h: EngineHarness) -> int:
    return h.broker.queues.info("work").depth


@scenario
async def test_consumers_on_both_process_each_message_once(tmp_path: Path) -> None:
    async with fabric_of(tmp_path, _configs(tmp_path)) as (_fabric, clock, h):
        await _linked(clock, h)
        wa = Worker(await h["a"].logon("wa"))
        wb = Worker(await h["b"].logon("wb"))
        _pub(await h["a"].logon("pa"), "a", range(40))
        _pub(await h["b"].logon("pb"), "b", range(40))

        def done() -> bool:
            wa.step()
            wb.step()
            return (
                len(wa.processed) + len(wb.processed) >= 80
                and _depth(h["a"]) == 0
                and _depth(h["b"]) == 0
            )

        await drive(clock, done)
        everything = wa.processed + wb.processed
        assert sorted(everything) == sorted(
            [("a", n) for n in range(40)] + [("b", n) for n in range(40)]
        )  # each once, none lost
        # each instance delivered its own messages (an owner serves its local consumer)
        assert {o for o, _ in wa.processed} == {"a"}
        assert {o for o, _ in wb.processed} == {"b"}


@scenario
async def test_a_message_owned_elsewhere_is_transferred_once(tmp_path: Path) -> None:
    """... and the transfer counters come back as they were after a restart, though the
    queue checkpoint starts the replay past every transfer (it reads nothing of them)."""
    async with fabric_of(tmp_path, _configs(tmp_path)) as (_fabric, clock, h):
        await _linked(clock, h)
        wb = Worker(await h["b"].logon("wb"))
        _pub(await h["a"].logon("pa"), "a", range(12))

        def done() -> bool:
            wb.step()
            return _depth(h["a"]) == 0 and _depth(h["b"]) == 0 and len(wb.processed) >= 12

        await drive(clock, done)
        assert sorted(wb.processed) == [("a", n) for n in range(12)]
        ia, ib = h["a"].broker.queues.info("work"), h["b"].broker.queues.info("work")
        assert (ia.transferred_out, ib.transferred_in) == (12, 12)
        assert ia.removed == {"elsewhere": 12}
        ends = {n: x.broker.txlog.last_seq for n, x in h.items() if x.broker.txlog}
    async with fabric_of(tmp_path, _configs(tmp_path)) as (_fabric, clock, h):
        for name, x in h.items():
            (event,) = [e for e in x.broker.events.recent() if e["event"] == "queue_recovered"]
            assert event["from_seq"] > ends[name]  # the checkpoint: nothing replayed
        ia, ib = h["a"].broker.queues.info("work"), h["b"].broker.queues.info("work")
        assert (ia.transferred_in, ia.transferred_out) == (0, 12)
        assert (ib.transferred_in, ib.transferred_out) == (12, 0)


@scenario
async def test_proxied_transfer_takes_over_from_an_offline_owner(tmp_path: Path) -> None:
    async with fabric_of(tmp_path, _configs(tmp_path, PROXIED_ACTIONS)) as (fabric, clock, h):
        await _linked(clock, h)
        wa = Worker(await h["a"].logon("wa"))
        _pub(await h["a"].logon("pa"), "a", range(10))
        # a delivers its own messages; its consumer takes 5 (backlog) and never acks
        await drive(clock, lambda: len(wa.client.deliveries("q")) == 5 and _depth(h["b"]) == 10)
        # a goes away (its link into b and b's into it break)
        await _cut_off_a(fabric, clock, h)
        wb = Worker(await h["b"].logon("wb"))
        await clock.advance(1.0)
        await drive(clock, lambda: True)
        assert wb.client.deliveries("q") == []  # owned by a: stuck without proxied transfer
        taken = h["b"].broker.queues.set_proxied_transfer("work", True, "ops")
        assert taken == 10

        def all_processed() -> bool:
            wb.step()
            return len(wb.processed) == 10

        await drive(clock, all_processed)
        # the documented duplicate risk: the 5 a delivered before it went offline are
        # delivered again by b
        assert sorted(wb.processed) == [("a", n) for n in range(10)]
        dup = {n for _, n in wb.processed} & {
            orjson.loads(b)["n"] for _, b in wa.client.deliveries("q")
        }
        assert len(dup) == 5
        info = h["b"].broker.queues.info("work")
        assert info.proxied_transfer and info.depth == 0
        # a comes back: b's grants and acks reach it, its copy converges (nothing lost)
        fabric.heal(B, source="a")
        fabric.heal(A, source="b")
        task = asyncio.ensure_future(h["b"].broker.actions.run_admin("disable", {}, "ops"))
        await drive(clock, task.done)
        assert task.result().steps[0].status == "ok"
        await drive(clock, lambda: _depth(h["a"]) == 0)
        assert not h["b"].broker.queues.info("work").proxied_transfer
        assert h["a"].broker.queues.info("work").removed == {"elsewhere": 10}


@scenario
async def test_the_enable_action_takes_over_and_says_how_many(tmp_path: Path) -> None:
    async with fabric_of(tmp_path, _configs(tmp_path, PROXIED_ACTIONS)) as (fabric, clock, h):
        await _linked(clock, h)
        _pub(await h["a"].logon("pa"), "a", range(3))
        await drive(clock, lambda: _depth(h["b"]) == 3)
        await _cut_off_a(fabric, clock, h, both=False)
        task = asyncio.ensure_future(h["b"].broker.actions.run_admin("enable", {}, "ops"))
        await drive(clock, task.done)
        step = task.result().steps[0]
        assert step.status == "ok" and "3 message(s) of offline owners taken over" in step.message
        assert h["b"].broker.queues.info("work").owned == 3


def _events(h: EngineHarness, name: str) -> list[dict[str, Any]]:
    return [e for e in h.broker.events.recent(500) if e.get("event") == name]


@scenario
async def test_a_proxied_takeover_is_handed_back_when_the_owner_returns(tmp_path: Path) -> None:
    async with fabric_of(tmp_path, _configs(tmp_path)) as (fabric, clock, h):
        await _linked(clock, h)
        _pub(await h["a"].logon("pa"), "a", range(10))
        await drive(clock, lambda: _depth(h["b"]) == 10)
        await _cut_off_a(fabric, clock, h)
        assert h["b"].broker.queues.set_proxied_transfer("work", True, "ops") == 10
        # b's consumer processes 3, and holds 5 more when a comes back (backlog 5)
        cb = await h["b"].logon("cb")
        cb.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=5"}, b""))
        await drive(clock, lambda: len(cb.deliveries("q")) == 5)
        first = [str(hd["bm"]) for hd, _ in cb.deliveries("q")]
        cb.send(({"c": "sow_delete", "t": "work", "bm": ",".join(first[:3])}, b""))
        await drive(clock, lambda: len(cb.deliveries("q")) == 8)
        held = [str(hd["bm"]) for hd, _ in cb.deliveries("q")][3:]
        fabric.heal(B, source="a")
        fabric.heal(A, source="b")
        # what b took and has not out (2) goes back to a at once; a's copy converges
        await drive(clock, lambda: h["a"].broker.queues.info("work").owned == 2)
        await drive(clock, lambda: _depth(h["a"]) == 7)
        ib = h["b"].broker.queues.info("work")
        assert (ib.depth, ib.owned, ib.leased) == (7, 5, 5)
        assert _events(h["b"], "proxied_transfer_handed_back")[-1]["messages"] == 2
        # a's consumer gets the two handed back, and nothing b's consumer holds
        wa = Worker(await h["a"].logon("wa"))

        def two_processed() -> bool:
            wa.step()
            return len(wa.processed) == 2

        await drive(clock, two_processed)
        # b's consumer acks one, cancels the rest: those four go back to a as well
        cb.send(({"c": "sow_delete", "t": "work", "bm": held[0]}, b""))
        cb.send(({"c": "sow_delete", "t": "work", "bm": ",".join(held[1:]), "o": "cancel"}, b""))

        def drained() -> bool:
            wa.step()
            return _depth(h["a"]) == 0 and _depth(h["b"]) == 0

        await drive(clock, drained)
        processed_on_b = {orjson.loads(body)["n"] for hd, body in cb.deliveries("q")
                          if str(hd["bm"]) in first[:3] + held[:1]}  # fmt: skip
        processed_on_a = [n for _, n in wa.processed]
        # each message processed exactly once (a delivered nothing before it went away)
        assert sorted([*processed_on_b, *processed_on_a]) == list(range(10))
        assert len(processed_on_a) == 6
        ia, ib = h["a"].broker.queues.info("work"), h["b"].broker.queues.info("work")
        assert ib.owned == 0 and ia.owned == 0
        assert ib.transferred_out == 6 and ia.transferred_in == 6
        assert not [e for e in h["a"].broker.events.recent(500)
                    if e.get("event") == "queue_early_changes_dropped"]  # fmt: skip


@scenario
async def test_a_tick_does_not_walk_messages_owned_elsewhere(tmp_path: Path) -> None:
    """Messages owned by another instance are parked out of the ready heap, so the 50 ms
    tick and the dispatch it triggers cost what is due, not the depth (regression of the
    O(depth) tick; tests/bench/bench_queue_tick.py measures it); a message this instance
    comes to own is offered again."""
    async with fabric_of(tmp_path, _configs(tmp_path)) as (fabric, clock, h):
        await _linked(clock, h)
        _pub(await h["a"].logon("pa"), "a", range(200))
        await drive(clock, lambda: _depth(h["b"]) == 200)
        await _cut_off_a(fabric, clock, h)
        cb = await h["b"].logon("cb")
        cb.send(({"c": "subscribe", "t": "work", "sub_id": "q", "o": "max_backlog=5"}, b""))
        machine = h["b"].broker.queues.queues["work"].machine
        await drive(clock, lambda: machine.parked == 200)
        await clock.advance(0.5)  # ten ticks: nothing offered, nothing delivered
        await drive(clock, lambda: True)
        assert machine.ready == 200 and cb.deliveries("q") == []
        assert h["b"].broker.queues.set_proxied_transfer("work", True, "ops") == 200
        await drive(clock, lambda: len(cb.deliveries("q")) == 5)
        assert machine.parked == 0
