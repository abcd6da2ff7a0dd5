"""Repair as in-process scenarios on the virtual clock: a sync pair linked by in-memory
pipes (tests/support/fabric.py); one broker restarted on damaged files gets its records
back from the other, with their identity and the path they had."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.bookmarks import pub_hash
from server.clock import VirtualClock
from tests.support.damage import journals, zero_end_of_last_record
from tests.support.engine import EngineHarness
from tests.support.fabric import A, B, drive, persisted, publish, records, xml
from tests.support.replication import MemoryFabric, destination


def _caught_up(h: EngineHarness) -> bool:
    repl = h.broker.replication
    assert repl is not None
    return all(d.acked >= h.last_seq for d in repl.destinations.values())


@pytest.mark.parametrize("last_publisher", ["a", "b"])
def test_a_torn_tail_comes_back_with_its_identity_and_path(
    tmp_path: Path, last_publisher: str
) -> None:
    import asyncio

    asyncio.run(_scenario(tmp_path, last_publisher))


async def _scenario(tmp_path: Path, last_publisher: str) -> None:
    fabric, clock = MemoryFabric(), VirtualClock()
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], passthrough=(".*",))),
        "b": xml(tmp_path, "b", destination("a", [A], passthrough=(".*",))),
    }
    hs = {n: EngineHarness(tmp_path / n, configs[n], clock=clock, connector=fabric.connector(n))
          for n in ("a", "b")}  # fmt: skip
    fabric.register(A, hs["a"].broker)
    fabric.register(B, hs["b"].broker)
    for h in hs.values():
        await h.__aenter__()
    again: EngineHarness | None = None
    try:
        pubs = {n: await hs[n].logon(f"pub-{n}") for n in ("a", "b")}
        other = "b" if last_publisher == "a" else "a"
        publish(pubs[other], "orders", range(1, 41))
        await drive(clock, lambda: persisted(pubs[other]) == 40)
        publish(pubs[last_publisher], "orders", range(1, 41))
        await drive(clock, lambda: persisted(pubs[last_publisher]) == 40)
        await drive(clock, lambda: all(_caught_up(h) for h in hs.values()))
        before = await records(hs["a"])
        await hs["a"].__aexit__(None, None, None)
        torn = zero_end_of_last_record(journals(tmp_path / "a" / "data" / "journal", "a")[-1])
        assert torn.pub_hash == pub_hash(f"pub-{last_publisher}")
        again = EngineHarness(tmp_path / "a", configs["a"], clock=clock,
                              connector=fabric.connector("a"))  # fmt: skip
        fabric.register(A, again.broker)
        await again.__aenter__()
        await drive(clock, lambda: again is not None and again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None and txlog.fences == []
        repairer = again.broker.repairer
        assert repairer is not None and repairer.progress.records_repaired == 1
        after = await records(again)
        # the same records, in the same order, with the same paths: the torn one came
        # back published here (no path) or from b (b on its path), not as b's copy
        assert after == before
        (back,) = [r for r in after if (r[0], r[1]) == (torn.pub_hash, torn.pub_seq)]
        assert back[3] == (() if last_publisher == "a" else ("b",))
    finally:
        if again is not None:
            await again.__aexit__(None, None, None)
        await hs["b"].__aexit__(None, None, None)
        await fabric.close()


def test_records_no_peer_holds_stay_fenced_until_an_operator_releases_them(
    tmp_path: Path,
) -> None:
    import asyncio

    asyncio.run(_unrepairable(tmp_path))


async def _unrepairable(tmp_path: Path) -> None:
    """A's last record is of a topic A does not replicate: b never had it. The fence stays
    and says what was found; released, readers pass over it and the seq stays taken."""
    fabric, clock = MemoryFabric(), VirtualClock()
    config = xml(
        tmp_path, "a",
        destination("b", [B], topics=(("orders", None),), exclude="replicate"),
        tuning="<JournalRepairWait>2s</JournalRepairWait>",
    )  # fmt: skip
    hb = EngineHarness(tmp_path / "b", xml(tmp_path, "b"), clock=clock,
                       connector=fabric.connector("b"))  # fmt: skip
    ha = EngineHarness(tmp_path / "a", config, clock=clock, connector=fabric.connector("a"))
    fabric.register(A, ha.broker)
    fabric.register(B, hb.broker)
    await hb.__aenter__()
    await ha.__aenter__()
    again: EngineHarness | None = None
    try:
        pub = await ha.logon("pub-a")
        publish(pub, "orders", range(1, 21))
        publish(pub, "local", range(21, 23))
        await drive(clock, lambda: persisted(pub) == 22)
        await drive(clock, lambda: _caught_up(ha))
        await ha.__aexit__(None, None, None)
        torn = zero_end_of_last_record(journals(tmp_path / "a" / "data" / "journal", "a")[-1])
        again = EngineHarness(tmp_path / "a", config, clock=clock, connector=fabric.connector("a"))
        fabric.register(A, again.broker)
        await again.__aenter__()
        await drive(clock, lambda: again is not None and again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None
        (fence,) = txlog.fences
        assert (fence.first_seq, fence.exact) == (torn.seq, True)
        assert "b: 0 of 1 records found" in fence.repair
        ops = again.broker.operations
        info = ops.transaction_log_info()
        assert info is not None and info["repair"] is not None
        assert info["repair"]["state"] in ("waiting", "repairing")  # it keeps asking
        assert "txlog-damaged" in [a["id"] for a in ops.alerts()]
        released = await ops.release_fence(torn.seq)
        assert released is not None and released["first_seq"] == torn.seq
        assert txlog.fences == []
        await drive(clock, lambda: ops.alerts() == [])
        # the message is gone (a released placeholder, no publisher, holds its seq)
        assert [s for h, s, _, _ in await records(again) if h] == list(range(1, 22))
        assert txlog.last_seq == torn.seq
    finally:
        if again is not None:
            await again.__aexit__(None, None, None)
        await hb.__aexit__(None, None, None)
        await fabric.close()
