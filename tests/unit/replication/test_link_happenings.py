"""The happenings of replication links, between two brokers on one virtual clock: a
sink of ``links`` hears a destination go and come back across a partition, on both
sides, with the link's state after each event."""

from __future__ import annotations

from pathlib import Path

from spool.server.ports import LinkHappening
from tests.support.fabric import B, drive, fabric_of, pair, scenario


@scenario
async def test_a_partition_is_told_on_both_sides_with_the_state_after_it(
    tmp_path: Path,
) -> None:
    async with fabric_of(tmp_path, pair(tmp_path)) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        on_a, on_b = a.sink("links"), b.sink("links")
        dest = a.broker.replication.destinations["b"]
        await drive(clock, lambda: dest.connected)
        del on_a.got[:], on_b.got[:]
        fabric.cut(B, source="a")
        await drive(clock, lambda: not dest.connected)
        fabric.heal(B, source="a")
        await drive(clock, lambda: dest.connected)
        out = [x for x in on_a.got if isinstance(x, LinkHappening) and x.direction == "out"]
        events = [(x.event, x.connected) for x in out]
        assert ("disconnected", False) in events and ("connected", True) in events
        assert events.index(("disconnected", False)) < events.index(("connected", True))
        told = out[-1]
        assert (told.link, told.remote, told.sync_type) == ("b", "b", "sync")
        assert 0 < told.time_us <= int(clock.time() * 1_000_000)
        # b heard its source a go and come back
        back = [(x.event, x.connected) for x in on_b.got
                if isinstance(x, LinkHappening) and x.direction == "in" and x.link == "a"]  # fmt: skip
        assert ("disconnected", False) in back and back[-1][1] is True
