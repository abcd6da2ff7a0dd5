"""Bootstrap as in-process scenarios on the virtual clock: brokers of one process linked
by in-memory pipes (tests/support/fabric.py), no sockets, no processes."""

from __future__ import annotations

from pathlib import Path

from server.bookmarks import pub_hash
from server.clock import VirtualClock
from tests.support.engine import EngineHarness
from tests.support.fabric import A, B, drive, persisted, publish, records, scenario, xml
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
