"""Publishers that share an identity, found on the replicated stream; the same message
sent again (another route, an HA publisher's resend) is not one.

Brokers of one process on a virtual clock, linked by in-memory pipes
(tests/support/fabric.py).
"""

from __future__ import annotations

from pathlib import Path

from spool.server.bookmarks import pub_hash
from tests.support.fabric import (
    A,
    B,
    C,
    drive,
    fabric_of,
    linked,
    pair,
    persisted,
    records,
    scenario,
    xml,
)
from tests.support.replication import destination


def _publish(client: object, seqs: range, tag: str) -> None:
    client.send(*[  # type: ignore[attr-defined]
        ({"c": "publish", "t": "orders", "s": s, "a": "persisted"}, b'{"n":%d,"by":"%s"}' % (s, tag.encode()))
        for s in seqs
    ])  # fmt: skip


@scenario
async def test_one_name_on_both_sides_of_a_partition_is_found_when_it_heals(
    tmp_path: Path,
) -> None:
    async with fabric_of(tmp_path, pair(tmp_path)) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        ra, rb = a.broker.replication, b.broker.replication
        await linked(clock, h)
        fabric.cut(A)
        fabric.cut(B)
        await drive(clock, lambda: not ra.destinations["b"].connected
                    and not rb.destinations["a"].connected)  # fmt: skip
        # neither can ask the other: both logons are granted
        pa, pb = await a.logon("pub"), await b.logon("pub")
        for r in (ra, rb):  # persisted acks wait for the sync peer: downgrade while apart
            r.downgrade("b" if r is ra else "a")
        _publish(pa, range(1, 21), "a")
        _publish(pb, range(1, 21), "b")
        await drive(clock, lambda: persisted(pa) == 20 and persisted(pb) == 20)
        fabric.heal(A)
        fabric.heal(B)

        def found(r: object) -> list[dict[str, object]]:
            return [c for c in r.info()["conflicts"] if c["kind"] == "publisher"]  # type: ignore[attr-defined]

        await drive(clock, lambda: found(ra) and found(rb) and found(ra)[0]["count"] == 20
                    and found(rb)[0]["count"] == 20)  # fmt: skip
        for here, other, r, broker in (("a", "b", ra, a.broker), ("b", "a", rb, b.broker)):
            (conflict,) = found(r)
            assert conflict["name"] == "pub"
            assert f"through '{here}' (here)" in conflict["detail"]
            assert f"with another message, through '{other}'" in conflict["detail"]
            (event,) = [e for e in broker.events.recent() if e["event"] == "publisher_collision"]
            assert event["publisher"] == "pub" and event["level"] == "error"
            assert (
                event["held_from"] == f"'{here}' (here)" and event["dropped_from"] == f"'{other}'"
            )
            assert any(al["id"] == "replication-conflict-publisher"
                       for al in broker.operations.alerts())  # fmt: skip
            # one read confirmed it; the other 19 were counted without reading
            assert r.info()["identity_checks"]["checked"] == 1
        # each log holds its own publisher's twenty and none of the other's
        for h_ in (a, b):
            mine = [body for ph, _s, body, _p in await records(h_) if ph == pub_hash("pub")]
            assert len(mine) == 20


@scenario
async def test_an_ha_publisher_resending_after_failover_is_no_collision(tmp_path: Path) -> None:
    """The same messages published again through the other instance: checked, equal."""
    async with fabric_of(tmp_path, pair(tmp_path)) as (_fabric, clock, h):
        a, b = h["a"], h["b"]
        ra, rb = a.broker.replication, b.broker.replication
        await linked(clock, h)
        pa = await a.logon("pub")
        _publish(pa, range(1, 11), "x")
        await drive(clock, lambda: persisted(pa) == 10)
        pa.session.close_soon("failover")
        await a.until(lambda: not a.broker.clients.holds("pub"))
        pb = await b.logon("pub")
        _publish(pb, range(6, 13), "x")  # 6..10 again (unacked to it), then 11, 12
        await drive(clock, lambda: persisted(pb) == 12)
        await drive(clock, lambda: rb.info()["identity_checks"]["checked"] == 5)
        for r in (ra, rb):
            assert r.info()["conflicts"] == []
            assert r.info()["identity_checks"]["collisions"] == 0


@scenario
async def test_copies_by_other_routes_are_not_even_checked(tmp_path: Path) -> None:
    """A full mesh passing every group through: each message reaches each instance by two
    routes; the copy has the same origin, so nothing is read."""
    configs = {
        name: xml(tmp_path, name, *(destination(o, [addr]) for o, addr in peers))
        for name, peers in (("a", (("b", B), ("c", C))), ("b", (("a", A), ("c", C))),
                            ("c", (("a", A), ("b", B))))
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        reps = {k: h[k].broker.replication for k in "abc"}
        await drive(clock, lambda: all(d.connected for r in reps.values()
                                       for d in r.destinations.values()))  # fmt: skip
        pa = await h["a"].logon("pub")
        _publish(pa, range(1, 51), "a")
        await drive(clock, lambda: persisted(pa) == 50)
        for k in "bc":
            await drive(clock, lambda k=k: reps["a"].destinations[k].messages_behind() == 0)
        # b and c each got everything from a, and again from each other (dropped as
        # duplicates of the same origin)
        await drive(clock, lambda: reps["b"].destinations["c"].msgs_out >= 50
                    and reps["c"].destinations["b"].msgs_out >= 50)  # fmt: skip
        for k in "bc":
            assert len([r for r in await records(h[k]) if r[0] == pub_hash("pub")]) == 50
        for k in "abc":
            assert reps[k].info()["identity_checks"] == {
                "checked": 0,
                "collisions": 0,
                "unchecked": 0,
            }
            assert reps[k].info()["conflicts"] == []
