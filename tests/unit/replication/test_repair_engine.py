"""Repair as in-process scenarios on the virtual clock: a sync pair linked by in-memory
pipes (tests/support/fabric.py); one broker restarted on damaged files gets its records
back from the other, with their identity and the path they had."""

from __future__ import annotations

from pathlib import Path

import orjson
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


def test_an_instance_wiped_and_started_empty_gets_its_own_records_back(tmp_path: Path) -> None:
    import asyncio

    asyncio.run(_wiped(tmp_path))


async def _wiped(tmp_path: Path) -> None:
    """A's files are deleted and A starts empty, without a bootstrap: B's link resyncs it
    from its (empty) holdings, and gives back also the records A published itself (A is
    on their path at B: loop protection alone would keep them from A for ever)."""
    import shutil

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
        for n in ("a", "b"):
            publish(pubs[n], "orders", range(1, 31))
            await drive(clock, lambda n=n: persisted(pubs[n]) == 30)
        await drive(clock, lambda: all(_caught_up(h) for h in hs.values()))
        want = {(h, s, body) for h, s, body, _ in await records(hs["a"])}
        assert len(want) == 60
        await hs["a"].__aexit__(None, None, None)
        shutil.rmtree(tmp_path / "a" / "data")
        again = EngineHarness(tmp_path / "a", configs["a"], clock=clock,
                              connector=fabric.connector("a"))  # fmt: skip
        fabric.register(A, again.broker)
        await again.__aenter__()
        link = hs["b"].broker.replication.destinations["a"]  # type: ignore[union-attr]
        link.reconnect()
        await drive(clock, lambda: link.connected and link.acked >= hs["b"].last_seq, timeout=60)
        got = [(h, s, body) for h, s, body, _ in await records(again)]
        assert sorted(got) == sorted(want) and len(got) == len(want)
    finally:
        if again is not None:
            await again.__aexit__(None, None, None)
        await hs["b"].__aexit__(None, None, None)
        await fabric.close()


@pytest.mark.parametrize("last_publisher", ["a", "b"])
def test_a_torn_tail_nothing_vouches_for_is_sent_again_by_the_sources(
    tmp_path: Path, last_publisher: str
) -> None:
    import asyncio

    asyncio.run(_unvouched(tmp_path, last_publisher))


async def _unvouched(tmp_path: Path, last_publisher: str) -> None:
    """A's last record is torn and no file of A says it was durable (no clients.ack, no
    index, no replication positions): A cuts it and keeps no fence; its welcome says when
    it lost records, and B's link resyncs from then on, ignoring what A acknowledged and
    that A is on the record's path."""
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
        publish(pubs[other], "orders", range(1, 21))
        await drive(clock, lambda: persisted(pubs[other]) == 20)
        publish(pubs[last_publisher], "orders", range(1, 21))
        await drive(clock, lambda: persisted(pubs[last_publisher]) == 20)
        await drive(clock, lambda: all(_caught_up(h) for h in hs.values()))
        want = sorted((h, s, body) for h, s, body, _ in await records(hs["a"]))
        await hs["a"].__aexit__(None, None, None)
        data = tmp_path / "a" / "data"
        torn = zero_end_of_last_record(journals(data / "journal", "a")[-1])
        for path in [*data.glob("journal/*.index"), *data.glob("journal/*.clients.ack")]:
            path.unlink()
        # the log keeps its identity; what its destination acknowledged is forgotten
        (state,) = data.glob("replication/*.replication.json")
        saved = orjson.loads(state.read_bytes())
        for dest in saved["destinations"].values():
            dest["acked"] = 0
        state.write_bytes(orjson.dumps(saved))
        again = EngineHarness(tmp_path / "a", configs["a"], clock=clock,
                              connector=fabric.connector("a"))  # fmt: skip
        fabric.register(A, again.broker)
        await again.__aenter__()
        await drive(clock, lambda: again is not None and again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None and txlog.fences == [] and txlog.lost_since_us
        # b's link to a (reconnecting on its own) brings the record back
        await drive(clock, lambda: txlog.holds(torn.pub_hash, torn.pub_seq))
        await drive(clock, lambda: txlog.durable_seq == txlog.last_seq)
        got = sorted((h, s, body) for h, s, body, _ in await records(again))
        assert got == want
    finally:
        if again is not None:
            await again.__aexit__(None, None, None)
        await hs["b"].__aexit__(None, None, None)
        await fabric.close()


REPL = "repl-token-for-repair-tests-0123456"
PUB = "pub-token-for-repair-tests-01234567"


@pytest.mark.parametrize("repl_writes", [".*", "^audit$"])
def test_with_users_records_come_back_only_as_a_user_here_who_may_write_them(
    tmp_path: Path, repl_writes: str
) -> None:
    import asyncio

    asyncio.run(_as_user(tmp_path, repl_writes))


async def _as_user(tmp_path: Path, repl_writes: str) -> None:
    """With <Users>, repaired records are written as the user of A that A's destination
    credentials log on as: written back when that user may write their topic, else the
    fence stays and names the user, the topic and the fix."""
    fabric, clock = MemoryFabric(), VirtualClock()

    def users(write: str) -> str:
        return (
            f"<User><Name>pub</Name><Token>{PUB}</Token><Write>.*</Write></User>"
            f"<User><Name>repl</Name><Token>{REPL}</Token><Read>.*</Read>"
            f"<Write>{write}</Write></User>"
        )

    creds = {"user": "repl", "secret": REPL, "exclude": "replicate"}
    config = xml(
        tmp_path, "a", destination("b", [B], **creds),  # type: ignore[arg-type]
        users=users(repl_writes), tuning="<JournalRepairWait>2s</JournalRepairWait>",
    )  # fmt: skip
    hb = EngineHarness(tmp_path / "b", xml(tmp_path, "b", users=users(".*")), clock=clock,
                       connector=fabric.connector("b"))  # fmt: skip
    ha = EngineHarness(tmp_path / "a", config, clock=clock, connector=fabric.connector("a"))
    fabric.register(A, ha.broker)
    fabric.register(B, hb.broker)
    await hb.__aenter__()
    await ha.__aenter__()
    again: EngineHarness | None = None
    try:
        pub = await ha.logon("pub-a", user_id="pub", pw=PUB)
        publish(pub, "orders", range(1, 21))
        await drive(clock, lambda: persisted(pub) == 20)
        await drive(clock, lambda: _caught_up(ha))
        await ha.__aexit__(None, None, None)
        torn = zero_end_of_last_record(journals(tmp_path / "a" / "data" / "journal", "a")[-1])
        again = EngineHarness(tmp_path / "a", config, clock=clock, connector=fabric.connector("a"))
        fabric.register(A, again.broker)
        await again.__aenter__()
        await drive(clock, lambda: again is not None and again.broker.ready)
        txlog = again.broker.txlog
        assert txlog is not None
        if repl_writes == ".*":
            assert txlog.fences == [] and txlog.holds(torn.pub_hash, torn.pub_seq)
            return
        (fence,) = txlog.fences
        assert fence.first_seq == torn.seq
        assert "user 'repl'" in fence.repair and "'orders'" in fence.repair, fence.repair
        assert "<Write>" in fence.repair
        assert not txlog.holds(torn.pub_hash, torn.pub_seq)
    finally:
        if again is not None:
            await again.__aexit__(None, None, None)
        await hb.__aexit__(None, None, None)
        await fabric.close()
