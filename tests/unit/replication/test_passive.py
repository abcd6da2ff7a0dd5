"""Passive destinations and one connection per pair: a destination without an address
waits for its peer to dial in and runs back over that connection; two instances that
list each other end up on one connection (the lower Name's). Sync and async, downgrade and
upgrade, and resync work over a connection the peer dialed.

Brokers of one process on a virtual clock, linked by in-memory pipes
(tests/support/fabric.py): ``fabric.dials`` records who dialed whom.
"""

from __future__ import annotations

from pathlib import Path

from spool.server.bookmarks import pub_hash
from tests.support.fabric import A, B, drive, fabric_of, persisted, publish, records, scenario, xml
from tests.support.replication import destination


def _passive(name: str, **kw: object) -> str:
    """A destination without an address (the tests' helper writes the list given)."""
    return destination(name, [], **kw)  # type: ignore[arg-type]


def _mine(rows: list[tuple[int, int, bytes, tuple[str, ...]]], client: str) -> list[int]:
    return [s for h, s, _b, _p in rows if h == pub_hash(client)]


@scenario
async def test_a_passive_destination_runs_back_over_the_connection_its_peer_dials(
    tmp_path: Path,
) -> None:
    configs = {
        "a": xml(tmp_path, "a", _passive("b")),
        "b": xml(tmp_path, "b", destination("a", [A]), inbound=False),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        to_b = a.broker.replication.destinations["b"]
        to_a = b.broker.replication.destinations["a"]
        await drive(clock, lambda: to_b.connected and to_a.connected)
        assert to_b.via == "incoming" and to_a.via == "dialed"
        assert {source for source, _ in fabric.dials} == {"b"}  # a never dials
        info = {d["name"]: d for d in a.broker.replication.info()["destinations"]}["b"]
        assert info["passive"] and info["via"] == "incoming" and info["address"] is None
        assert info["addresses"] == [] and info["incoming_from"]
        # both ways: each side's publishes reach the other, persisted acks wait for it
        pa, pb = await a.logon("pa"), await b.logon("pb")
        publish(pa, "orders", range(1, 21))
        publish(pb, "orders", range(1, 31))
        await drive(clock, lambda: persisted(pa) == 20 and persisted(pb) == 30)
        for h_ in (a, b):
            got = await records(h_)
            assert _mine(got, "pa") == list(range(1, 21)) and _mine(got, "pb") == list(range(1, 31))
        # b, which has no amps-replication transport, receives a's link back
        assert "a" in b.broker.replication.inbound
        assert b.broker.replication.inbound["a"].channel == 1


@scenario
async def test_a_passive_destination_waits_and_says_so(tmp_path: Path) -> None:
    configs = {"a": xml(tmp_path, "a", _passive("b"))}
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        link = h["a"].broker.replication.destinations["b"]
        await drive(clock, lambda: link.status == "waiting")
        for _ in range(100):
            await clock.advance(0.05)
        assert link.status == "waiting" and not link.connected
        assert "passive: waiting for 'b' to dial this instance" in (link.last_error or "")


@scenario
async def test_two_instances_that_list_each_other_end_on_one_connection(tmp_path: Path) -> None:
    """Both dial at first; b (the later Name) moves to a's connection and stays there."""
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B])),
        "b": xml(tmp_path, "b", destination("a", [A])),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        to_b = a.broker.replication.destinations["b"]
        to_a = b.broker.replication.destinations["a"]
        await drive(clock, lambda: to_b.connected and to_a.connected and to_a.via == "incoming")
        assert to_b.via == "dialed"
        dials = len(fabric.dials)
        pa, pb = await a.logon("pa"), await b.logon("pb")
        publish(pa, "orders", range(1, 11))
        publish(pb, "orders", range(1, 11))
        await drive(clock, lambda: persisted(pa) == 10 and persisted(pb) == 10)
        for _ in range(100):
            await clock.advance(0.05)
        assert len(fabric.dials) == dials  # nobody dials again: one connection carries both
        assert to_a.via == "incoming" and to_a.connected
        # the inbound link a sees from b is the second conversation of a's own connection
        assert a.broker.replication.inbound["b"].channel == 1


@scenario
async def test_sync_downgrade_upgrade_and_resync_over_the_peer_s_connection(
    tmp_path: Path,
) -> None:
    configs = {
        "a": xml(tmp_path, "a", _passive("b")),
        "b": xml(tmp_path, "b", destination("a", [A])),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        repl = a.broker.replication
        to_b = repl.destinations["b"]
        await drive(
            clock, lambda: to_b.connected and b.broker.replication.destinations["a"].connected
        )
        # b sees the sync type a's link back has (the sync notice travels back too)
        await drive(clock, lambda: b.broker.replication.inbound["a"].sync_type == "sync")
        pa = await a.logon("pa")
        publish(pa, "orders", range(1, 11))
        await drive(clock, lambda: persisted(pa) == 10)
        # b gone: the connection goes, a's link back with it; acks wait (sync)
        fabric.cut(A)
        await drive(clock, lambda: not to_b.connected)
        publish(pa, "orders", range(11, 21))
        await a.commit()
        for _ in range(50):
            await clock.advance(0.01)
        assert persisted(pa) == 10
        repl.downgrade("b")
        await a.settle()
        assert persisted(pa) == 20
        repl.upgrade("b")
        fabric.heal(A)
        # b dials again: a runs back over the new connection, resyncs what b lacks
        await drive(clock, lambda: to_b.connected and to_b.sync.effective == "sync")
        await drive(clock, lambda: to_b.messages_behind() == 0)
        assert _mine(await records(b), "pa") == list(range(1, 21))
        await drive(clock, lambda: b.broker.replication.inbound["a"].sync_type == "sync")
