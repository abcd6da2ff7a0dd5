"""``TargetQueueDepth`` on replicated queues: two in-process brokers over the memory
fabric (virtual clock, real log files). Consumers on both process each message once with
neither copy above its target; a window full of messages whose owner went offline does
not starve this instance's own messages behind them; with proxied transfer on, messages
of an offline owner are taken over as they are activated, the window still bounded."""

from __future__ import annotations

from pathlib import Path

from spool.server.clock import VirtualClock
from tests.support.engine import EngineHarness
from tests.support.fabric import A, B, drive, fabric_of, scenario, xml
from tests.support.replication import MemoryFabric, destination
from tests.unit.queues.test_replicated_queues import Worker, _linked, _pub

TARGET = 5
QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    f"<MaxPerSubscriptionBacklog>5</MaxPerSubscriptionBacklog>"
    f"<TargetQueueDepth>{TARGET}</TargetQueueDepth></Queue>"
)


def _configs(tmp_path: Path) -> dict[str, str]:
    return {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",)), sow=QUEUE),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",)), sow=QUEUE),
    }


def _depth(h: EngineHarness) -> int:
    return h.broker.queues.info("work").depth


async def _b_offline_for_a(fabric: MemoryFabric, clock: VirtualClock,
                           h: dict[str, EngineHarness]) -> None:  # fmt: skip
    """b's link into a breaks: a sees b offline (its next timer tick). The two instances
    share one connection (a's, the earlier Name: docs/replication.md "Passive
    destinations"), which carries b's link back: the cut is of both ways."""
    fabric.cut(A, source="b")
    fabric.cut(B, source="a")
    repl = h["a"].broker.replication
    assert repl is not None
    await drive(clock, lambda: "b" not in repl.inbound)
    await clock.advance(0.1)  # two ticks of a's timer: b is marked offline
    await drive(clock, lambda: True)


@scenario
async def test_consumers_on_both_bounded_copies_process_each_message_once(
    tmp_path: Path,
) -> None:
    async with fabric_of(tmp_path, _configs(tmp_path)) as (_fabric, clock, h):
        await _linked(clock, h)
        wa = Worker(await h["a"].logon("wa"))
        wb = Worker(await h["b"].logon("wb"))
        _pub(await h["a"].logon("pa"), "a", range(40))
        _pub(await h["b"].logon("pb"), "b", range(40))
        deepest = {"a": 0, "b": 0}
        inactive_seen = {"a": 0, "b": 0}

        def done() -> bool:
            for name in ("a", "b"):
                info = h[name].broker.queues.info("work")
                deepest[name] = max(deepest[name], info.depth)
                inactive_seen[name] = max(inactive_seen[name], info.inactive)
            wa.step()
            wb.step()
            # inactive too: a message acked on the other instance stays inactive here
            # until that ack arrives (or the refill meets it and skips it)
            return len(wa.processed) + len(wb.processed) >= 80 and all(
                (i.depth, i.inactive) == (0, 0)
                for i in (h[n].broker.queues.info("work") for n in ("a", "b"))
            )

        await drive(clock, done)
        everything = wa.processed + wb.processed
        assert sorted(everything) == sorted(
            [("a", n) for n in range(40)] + [("b", n) for n in range(40)]
        )  # each once, none lost
        assert deepest["a"] <= TARGET and deepest["b"] <= TARGET
        assert inactive_seen["a"] > 0 and inactive_seen["b"] > 0  # the windows did bound
        for name in ("a", "b"):
            info = h[name].broker.queues.info("work")
            assert (info.inactive, info.deferred_acks) == (0, 0)


@scenario
async def test_an_offline_owners_messages_do_not_starve_local_ones(tmp_path: Path) -> None:
    async with fabric_of(tmp_path, _configs(tmp_path)) as (fabric, clock, h):
        await _linked(clock, h)
        _pub(await h["b"].logon("pb"), "b", range(10))
        await drive(clock, lambda: h["a"].broker.queues.info("work").inactive == 10 - TARGET)
        assert _depth(h["a"]) == TARGET  # a's window is full of messages b owns
        await _b_offline_for_a(fabric, clock, h)
        _pub(await h["a"].logon("pa"), "a", range(4))
        wa = Worker(await h["a"].logon("wa"))

        def local_done() -> bool:
            wa.step()
            return len(wa.processed) == 4

        await drive(clock, local_done)
        # b's messages are not counted while b is offline: a read past them to its own
        assert sorted(wa.processed) == [("a", n) for n in range(4)]
        info = h["a"].broker.queues.info("work")
        assert (info.depth, info.inactive, info.owned) == (10, 0, 0)
        # b is away for good: proxied transfer on a delivers b's messages too
        assert h["a"].broker.queues.set_proxied_transfer("work", True, "ops") == 10

        def all_done() -> bool:
            wa.step()
            return len(wa.processed) == 14

        await drive(clock, all_done)
        assert sorted(wa.processed) == sorted(
            [("a", n) for n in range(4)] + [("b", n) for n in range(10)]
        )


@scenario
async def test_proxied_transfer_takes_over_inactive_messages_as_they_activate(
    tmp_path: Path,
) -> None:
    async with fabric_of(tmp_path, _configs(tmp_path)) as (fabric, clock, h):
        await _linked(clock, h)
        _pub(await h["b"].logon("pb"), "b", range(12))
        await drive(clock, lambda: h["a"].broker.queues.info("work").inactive == 12 - TARGET)
        assert h["a"].broker.queues.set_proxied_transfer("work", True, "ops") == 0  # b online
        await _b_offline_for_a(fabric, clock, h)
        info = h["a"].broker.queues.info("work")
        # the active ones were taken over when b went offline; the rest wait, counted
        assert (info.owned, info.depth, info.inactive) == (TARGET, TARGET, 12 - TARGET)
        wa = Worker(await h["a"].logon("wa"))
        deepest = 0

        def done() -> bool:
            nonlocal deepest
            deepest = max(deepest, _depth(h["a"]))
            wa.step()
            return len(wa.processed) == 12 and _depth(h["a"]) == 0

        await drive(clock, done)
        assert sorted(wa.processed) == [("b", n) for n in range(12)]
        assert deepest <= TARGET  # taken over at activation: owned here, counted
        assert h["a"].broker.queues.info("work").transferred_in == 12


@scenario
async def test_a_returning_owner_drops_what_was_processed_by_proxy_inactive_or_not(
    tmp_path: Path,
) -> None:
    """a's messages, taken over by b while a is away (the 5 active when a goes offline,
    the rest as b's window activates them) and all processed on b; a comes back: b's
    grants and acks reach a's bounded copy, whose active messages leave and whose
    inactive ones are skipped at activation — nothing left, nothing delivered on a (a
    consumer there before the grants arrive is the documented duplicate risk)."""
    async with fabric_of(tmp_path, _configs(tmp_path)) as (fabric, clock, h):
        await _linked(clock, h)
        _pub(await h["a"].logon("pa"), "a", range(12))
        await drive(clock, lambda: h["b"].broker.queues.info("work").inactive == 12 - TARGET)
        assert h["b"].broker.queues.set_proxied_transfer("work", True, "ops") == 0  # a online
        fabric.cut(B, source="a")
        fabric.cut(A, source="b")
        repl_b = h["b"].broker.replication
        assert repl_b is not None
        await drive(clock, lambda: "a" not in repl_b.inbound)
        await clock.advance(0.1)
        await drive(clock, lambda: h["b"].broker.queues.info("work").owned == TARGET)
        assert h["b"].broker.queues.info("work").inactive == 12 - TARGET
        wb = Worker(await h["b"].logon("wb"))

        def done_on_b() -> bool:
            wb.step()
            return len(wb.processed) == 12 and _depth(h["b"]) == 0

        await drive(clock, done_on_b)
        assert sorted(wb.processed) == [("a", n) for n in range(12)]
        assert h["b"].broker.queues.info("work").transferred_in == 12
        ia = h["a"].broker.queues.info("work")
        assert (ia.depth, ia.inactive) == (TARGET, 12 - TARGET)  # a knows nothing yet
        fabric.heal(B, source="a")
        fabric.heal(A, source="b")

        def a_converged() -> bool:
            i = h["a"].broker.queues.info("work")
            return (i.depth, i.inactive, i.deferred_acks) == (0, 0, 0)

        await drive(clock, a_converged)
        ia = h["a"].broker.queues.info("work")
        # the active ones left as acked elsewhere; an inactive one whose ack came before
        # its activation was never activated, one activated first left the same way (the
        # order of the two depends on when each reached a: at least the TARGET active ones)
        assert set(ia.removed) == {"elsewhere"} and TARGET <= ia.removed["elsewhere"] <= 12
        assert ia.owned == 0
        wa = Worker(await h["a"].logon("wa"))
        await clock.advance(1.0)
        await drive(clock, lambda: True)
        wa.step()
        assert wa.processed == []
