"""What a client is told about failing over: replicated acks and failover notices.

Brokers of one process on one virtual clock over in-memory pipes (tests/support/fabric.py).
A client asks for both at logon (``o=failover,replicated``, docs/protocol.md "Logon
options"); one that does not ask sees nothing new.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.support.engine import FakeClient
from tests.support.fabric import B, drive, fabric_of, persisted, publish, scenario, xml
from tests.support.replication import destination


def a_to_b(tmp_path: Path, *, sync: bool = True) -> dict[str, str]:
    """Configurations of A replicating to B (which replicates nothing back)."""
    dest = destination("b", [B], sync=sync, exclude="replicate")
    return {"a": xml(tmp_path, "a", dest), "b": xml(tmp_path, "b")}


def replicated(client: FakeClient) -> int:
    return max((int(h["s"]) for h in client.acks("replicated")), default=0)


def notices(client: FakeClient) -> list[dict[str, object]]:
    return [dict(h) for h in client.acks("failover")]


@scenario
async def test_replicated_acks_wait_for_an_async_destination_that_is_down(
    tmp_path: Path,
) -> None:
    async with fabric_of(tmp_path, a_to_b(tmp_path, sync=False)) as (fabric, clock, h):
        a = h["a"]
        repl = a.broker.replication
        assert repl is not None
        fabric.cut(B)  # B is down from the start
        pub = await a.logon("pub", o="replicated")
        plain = await a.logon("plain")
        publish(pub, "orders", range(1, 101))
        publish(plain, "orders", range(1, 11))
        # async: persisted as soon as it is on A's disk; not replicated while B is down
        await drive(clock, lambda: persisted(pub) == 100 and persisted(plain) == 10)
        for _ in range(50):
            await clock.advance(0.01)
        assert replicated(pub) == 0
        assert repl.horizon.replicated.seq == 0
        fabric.heal(B)
        await drive(clock, lambda: replicated(pub) == 100)
        # conflated, in order, never above what was persisted, each after its persisted ack
        seen = [(hd["a"], int(hd["s"])) for hd, _ in pub.received() if hd.get("c") == "ack"]
        reps = [s for kind, s in seen if kind == "replicated"]
        assert reps == sorted(reps) and reps[-1] == 100
        assert seen.index(("persisted", 100)) < seen.index(("replicated", 100))
        assert all(hd["bm"].endswith("|100|") for hd in pub.acks("replicated")[-1:])
        # a client that did not ask gets none, and its logon ack is what it always was
        assert plain.acks("replicated") == []
        # a duplicate is acked replicated too (its first copy is on B)
        publish(pub, "orders", range(100, 101))
        await drive(clock, lambda: len([s for s in pub.acks("persisted")]) >= 2
                    and pub.acks("replicated")[-1]["s"] == 100
                    and len(pub.acks("replicated")) >= 2)  # fmt: skip


@scenario
async def test_a_sync_destination_gives_replicated_acks_with_the_persisted_ones(
    tmp_path: Path,
) -> None:
    async with fabric_of(tmp_path, a_to_b(tmp_path)) as (_fabric, clock, h):
        a = h["a"]
        await drive(clock, lambda: a.broker.replication.destinations["b"].connected)
        pub = await a.logon("pub", o="replicated")
        publish(pub, "orders", range(1, 51))
        await drive(clock, lambda: replicated(pub) == 50)
        assert persisted(pub) == 50


@scenario
async def test_failover_notices_come_at_once_and_before_the_acks_a_downgrade_releases(
    tmp_path: Path,
) -> None:
    async with fabric_of(tmp_path, a_to_b(tmp_path)) as (fabric, clock, h):
        a = h["a"]
        repl = a.broker.replication
        assert repl is not None
        await drive(clock, lambda: repl.destinations["b"].connected)
        watcher = a.connect()
        watcher.send(({"c": "logon", "cid": "l", "client_name": "w",
                       "o": "failover,replicated"}, b""))  # fmt: skip
        await drive(clock, lambda: watcher.acks("processed"))
        logon = watcher.acks("processed")[0]
        assert (logon["failover"], logon["async_links"], logon["o"]) == (
            "safe",
            "",
            "failover,replicated",
        )
        plain = await a.logon("plain")
        # the link is lost: still safe (acks wait for B), but the client hears B is down
        fabric.cut(B)
        await drive(clock, lambda: notices(watcher))
        lost = notices(watcher)[-1]
        assert (lost["failover"], lost["down_links"]) == ("safe", "b")
        assert "disconnected" in str(lost["detail"])
        publish(watcher, "orders", range(1, 21))
        await a.commit()
        for _ in range(20):
            await clock.advance(0.01)
        assert persisted(watcher) == 0  # waiting for B
        repl.downgrade("b")
        await a.settle()
        kinds = [(hd["a"], hd.get("failover")) for hd, _ in watcher.received()
                 if hd.get("c") == "ack"]  # fmt: skip
        # the notice that failover is now unsafe comes before the persisted acks it releases
        assert kinds.index(("failover", "unsafe")) < kinds.index(("persisted", None))
        unsafe = notices(watcher)[-1]
        assert (unsafe["async_links"], unsafe["down_links"]) == ("b", "b")
        assert persisted(watcher) == 20 and replicated(watcher) == 0
        # back, upgraded: safe again once B caught up; the replicated acks follow
        fabric.heal(B)
        await drive(clock, lambda: repl.destinations["b"].connected)
        repl.upgrade("b")
        await drive(clock, lambda: notices(watcher)[-1]["failover"] == "safe")
        assert notices(watcher)[-1]["async_links"] == ""
        assert "upgraded" in str(notices(watcher)[-1]["detail"])
        await drive(clock, lambda: replicated(watcher) == 20)
        # the same state is never told twice; a client that did not ask is told nothing
        told = [(n["failover"], n["async_links"], n["down_links"]) for n in notices(watcher)]
        assert all(x != y for x, y in itertools.pairwise(told)), told
        assert plain.acks("failover") == []


@scenario
async def test_an_unknown_logon_option_is_refused_with_the_options_a_logon_takes(
    tmp_path: Path,
) -> None:
    configs = {"a": xml(tmp_path, "a")}
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        client = h["a"].connect()
        client.send(({"c": "logon", "cid": "l", "client_name": "x", "o": "failover,bogus"}, b""))
        await drive(clock, lambda: client.acks("processed"))
        ack = client.acks("processed")[0]
        assert (ack["status"], ack["reason"]) == ("failure", "invalid options")
        assert "'bogus'" in ack["detail"] and "failover, replicated" in ack["detail"]
