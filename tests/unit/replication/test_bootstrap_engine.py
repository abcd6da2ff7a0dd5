"""Bootstrap as in-process scenarios on the virtual clock: brokers of one process linked
by in-memory pipes (tests/support/fabric.py), no sockets, no processes."""

from __future__ import annotations

from pathlib import Path

from spool.server.bookmarks import pub_hash
from spool.server.clock import VirtualClock
from spool.server.replication.bootstrap import Marker, marker_path
from spool.server.replication.state import load, save, state_path
from tests.support.damage import flip_byte, journals, records_of
from tests.support.engine import EngineHarness
from tests.support.fabric import A, B, drive, persisted, publish, records, scenario, xml
from tests.support.repair import Publisher, Scene, caught_up
from tests.support.replication import MemoryFabric, bootstrap_xml, destination


@scenario
async def test_an_empty_broker_copies_then_the_source_link_resyncs_without_a_gap(
    tmp_path: Path,
) -> None:
    fabric, clock = MemoryFabric(), VirtualClock()
    a = EngineHarness(tmp_path / "a", xml(tmp_path, "a", destination("b", [B], sync=False, exclude="replicate")),
                      clock=clock, connector=fabric.connector("a"))  # fmt: skip
    fabric.register(A, a.broker)
    await a.__aenter__()
    b: EngineHarness | None = None
    try:
        pub = await a.logon("pub-a")
        publish(pub, "orders", range(1, 301))
        await drive(clock, lambda: persisted(pub) == 300)
        b = EngineHarness(
            tmp_path / "b", xml(tmp_path, "b", bootstrap=bootstrap_xml(["orders"], [A])),
            clock=clock, connector=fabric.connector("b"),
        )  # fmt: skip
        fabric.register(B, b.broker)
        await b.__aenter__()
        boot = b.broker.bootstrapper
        assert boot is not None
        await drive(clock, lambda: b is not None and b.broker.ready)
        assert boot.progress.state == "done" and boot.progress.records == 300
        # live: a's link to b resyncs from b's holdings; nothing sent twice
        publish(pub, "orders", range(301, 351))
        await drive(clock, lambda: persisted(pub) == 350)
        link = a.broker.replication.destinations["b"]
        link.reconnect()  # skip the dial back-off the bootstrap's wait built up
        await drive(clock, lambda: link.acked >= a.last_seq)
        mine = [s for h, s, _, _ in await records(b) if h == pub_hash("pub-a")]
        assert mine == list(range(1, 351))
    finally:
        if b is not None:
            await b.__aexit__(None, None, None)
        await a.__aexit__(None, None, None)
        await fabric.close()


@scenario
async def test_two_empty_brokers_bootstrapping_from_each_other_both_fail(tmp_path: Path) -> None:
    fabric, clock = MemoryFabric(), VirtualClock()
    hs = {}
    for name, me, other in (("a", A, B), ("b", B, A)):
        h = EngineHarness(tmp_path / name,
                          xml(tmp_path, name, bootstrap=bootstrap_xml(["orders"], [other])),
                          clock=clock, connector=fabric.connector(name))  # fmt: skip
        fabric.register(me, h.broker)
        hs[name] = h
    for h in hs.values():
        await h.__aenter__()
    try:
        boots = [h.broker.bootstrapper for h in hs.values()]
        await drive(
            clock, lambda: all(x is not None and x.progress.state == "failed" for x in boots)
        )
        for x in boots:
            assert x is not None and "mutual bootstrap" in str(x.progress.error)
        assert not any(h.broker.ready for h in hs.values())
    finally:
        for h in hs.values():
            await h.__aexit__(None, None, None)
        await fabric.close()


@scenario
async def test_a_source_with_damage_no_peer_repairs_gives_way_to_the_next(
    tmp_path: Path,
) -> None:
    """c resumes a copy from a that was interrupted (its marker names a's log), with b as
    the next source. a holds a fenced range that nothing can repair (it has no
    destination to ask): it serves the copy up to the fence, then refuses. b's log is
    another, so the copy starts over there at once, and a is not asked again while b
    copies: asking a again from its start would only reach the fence once more."""

    def config(name: str, *dests: str, bootstrap: str = "") -> str:
        return xml(
            tmp_path, name, *dests, journal_size="1MB", bootstrap=bootstrap,
            txlog_extra="<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
            tuning="<JournalRepairWait>0s</JournalRepairWait>",
        )  # fmt: skip

    scene = Scene(tmp_path, {
        "a": config("a"),
        "b": config("b", destination("a", [A], sync=False, exclude="replicate")),
        "c": config("c", bootstrap=bootstrap_xml(["orders"], [A, B])),
    })  # fmt: skip
    clock, hs = scene.clock, scene.hs
    try:
        await scene.start("a", "b")
        pub = await hs["b"].logon("pub")
        # about 3 MB: a's first journals are finished ones
        await Publisher(hs["b"], pub).send("orders", [b'{"pad":"%s"}' % (b"x" * 1000)] * 3000)
        await drive(clock, lambda: caught_up(hs["b"]))
        await scene.stop("a")
        # the last block of the second journal, a finished one (found at open): the copy
        # gets well past the start of a's log before it meets the fence
        second = journals(tmp_path / "a" / "data" / "journal", "a")[1]
        hit = records_of(second)[-1]
        flip_byte(second, hit.offset + hit.length // 2)
        await scene.start("a")
        await drive(clock, lambda: hs["a"].broker.ready)
        assert hs["a"].broker.txlog is not None and hs["a"].broker.txlog.fences
        a_state, _ = load(state_path(tmp_path / "a" / "data", "a"))
        assert a_state is not None
        interrupted = Marker(copied_upto=100, source="a", records=100, log_id=a_state.log_id)
        save(marker_path(tmp_path / "c" / "data", "c"), interrupted.encode())
        c = await scene.start("c")
        await drive(clock, lambda: c.broker.ready)
        boot = c.broker.bootstrapper
        assert boot is not None and boot.progress.state == "done"
        assert boot.progress.source == "b"
        mine = sorted(s for h, s, _, _ in await records(c) if h == pub_hash("pub"))
        assert mine == list(range(1, 3001))
        events = c.broker.events.recent(1000)
        refused = [e for e in events if e["event"] == "bootstrap_interrupted"]
        assert any(e["reason"] == "source damaged" for e in refused)
        copying = [e["source"] for e in events if e["event"] == "bootstrap_copying"]
        assert copying == ["a", "b"], copying
    finally:
        await scene.close()
