"""Replication between brokers of one process, on one virtual clock, over in-memory pipes.

Everything but the network is real: each broker's transaction log, group commits (their
fsyncs in threads), publish pipeline, subscriptions and the replication links. The pipes
are tests/support/replication.py's; a partition is ``fabric.cut(address)``.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.bookmarks import pub_hash
from spool.server.clock import VirtualClock
from spool.server.replication import protocol as link_protocol
from spool.server.replication.errors import ReconnectRequested, SyncChangeRefused
from spool.server.replication.outbound import marker_wait
from spool.server.replication.routing import Route
from spool.server.replication.transport import LinkLost
from tests.support.engine import EngineHarness
from tests.support.fabric import (
    A,
    B,
    C,
    drive,
    fabric_of,
    persisted,
    publish,
    records,
    scenario,
    xml,
)
from tests.support.replication import MemoryFabric, destination


@scenario
async def test_a_sync_pair_replicates_both_ways_and_acks_wait_for_the_other_side(
    tmp_path: Path,
) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B])),
        "b": xml(tmp_path, "b", destination("a", [A])),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        await drive(clock, lambda: a.broker.replication.destinations["b"].connected)
        await drive(clock, lambda: b.broker.replication.destinations["a"].connected)
        sub = await b.logon("sub")
        sub.send(({"c": "subscribe", "t": "orders", "sub_id": "s"}, b""))
        pa = await a.logon("pub-a")
        pb = await b.logon("pub-b")
        publish(pa, "orders", range(1, 51))
        publish(pb, "orders", range(1, 31))
        await drive(clock, lambda: persisted(pa) == 50 and persisted(pb) == 30)
        # the persisted acks came only once the other side had the records durably
        for far in (a, b):
            got = await records(far)
            assert len(got) == 80
            assert len(set((h_, s) for h_, s, _, _ in got)) == 80
        got_b = await records(b)
        from_a = [r for r in got_b if r[0] == pub_hash("pub-a")]
        assert [r[1] for r in from_a] == list(range(1, 51))  # A's order
        assert all(r[3] == ("a",) for r in from_a)  # the path says where it came from
        assert all(r[3] == () for r in got_b if r[0] == pub_hash("pub-b"))
        # subscribers on B receive A's messages too
        await drive(clock, lambda: len(sub.deliveries("s")) == 80)
        # each side's horizon covers everything
        assert a.broker.replication.horizon.seq == a.last_seq
        assert b.broker.replication.horizon.seq == b.last_seq
        del fabric


@scenario
async def test_a_downgrade_releases_the_acks_that_wait_for_a_down_destination(
    tmp_path: Path,
) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], exclude="replicate")),
        "b": xml(tmp_path, "b"),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        repl = a.broker.replication
        assert repl is not None
        await drive(clock, lambda: repl.destinations["b"].connected)
        pub = await a.logon("pub")
        publish(pub, "orders", range(1, 11))
        await drive(clock, lambda: persisted(pub) == 10)
        fabric.cut(B)
        await drive(clock, lambda: not repl.destinations["b"].connected)
        publish(pub, "orders", range(11, 21))
        await a.commit()
        for _ in range(50):  # durable here, but B is down: the acks stall
            await clock.advance(0.01)
        assert a.durable_seq == a.last_seq
        assert persisted(pub) == 10
        repl.downgrade("b")  # released at once, in the same loop turn
        await a.settle()
        assert persisted(pub) == 20
        assert repl.destinations["b"].sync.effective == "async"
        publish(pub, "orders", range(21, 26))
        await drive(clock, lambda: persisted(pub) == 25)  # async: no wait for B
        # B comes back, catches up; an upgrade completes once it has caught up
        fabric.heal(B)
        repl.upgrade("b")
        assert repl.destinations["b"].sync.effective == "upgrading"
        await drive(clock, lambda: repl.destinations["b"].sync.effective == "sync")
        assert len(await records(b)) == 25
        # and acks wait for it again
        fabric.cut(B)
        await drive(clock, lambda: not repl.destinations["b"].connected)
        publish(pub, "orders", range(26, 31))
        await a.commit()
        for _ in range(50):
            await clock.advance(0.01)
        assert persisted(pub) == 25
        fabric.heal(B)
        await drive(clock, lambda: persisted(pub) == 30)


@scenario
async def test_the_floor_refuses_a_downgrade_and_names_the_setting(tmp_path: Path) -> None:
    configs = {
        "a": xml(
            tmp_path, "a", destination("b", [B], exclude="replicate"),
            tuning="<MinimumSyncDestinations>1</MinimumSyncDestinations>",
        ),
        "b": xml(tmp_path, "b"),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (_fabric, _clock, h):
        repl = h["a"].broker.replication
        assert repl is not None
        with pytest.raises(SyncChangeRefused, match="MinimumSyncDestinations"):
            repl.downgrade("b")
        assert repl.destinations["b"].sync.effective == "sync"


@scenario
async def test_a_late_copy_from_one_route_is_kept_and_a_second_copy_dropped(
    tmp_path: Path,
) -> None:
    """The failover case of de-duplication across sources (docs/replication.md).

    P publishes 1..99 at A (replicated to B and C, and passed through B to C). A is cut
    off, P publishes 100 there (A acks it: its links are async), then fails over to B and
    publishes 101: C receives B's 101 before A's 100. When A comes back, its 100 fills
    the gap at B and at C; B's copy of 100, passed through to C, is a duplicate there.
    """
    async_all = {"sync": False, "exclude": "replicate"}
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], **async_all),  # type: ignore[arg-type]
                  destination("c", [C], **async_all)),  # type: ignore[arg-type]
        "b": xml(tmp_path, "b", destination("c", [C], passthrough=(".*",), **async_all)),  # type: ignore[arg-type]
        "c": xml(tmp_path, "c"),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b, c = h["a"], h["b"], h["c"]
        sub = await c.logon("watcher")
        sub.send(({"c": "subscribe", "t": "orders", "sub_id": "w"}, b""))
        p_at_a = await a.logon("P")
        publish(p_at_a, "orders", range(1, 100))
        p = pub_hash("P")

        async def seqs_of(h_: EngineHarness) -> list[int]:
            return [s for ph, s, _, _ in await records(h_) if ph == p]

        for x in (b, c):
            await drive(clock, lambda x=x: x.broker.txlog.durable_seq >= 99)  # type: ignore[misc]
        await drive(clock, lambda: persisted(p_at_a) == 99)
        fabric.cut(B, source="a")
        fabric.cut(C, source="a")
        publish(p_at_a, "orders", range(100, 101))
        await drive(clock, lambda: persisted(p_at_a) == 100)
        # P fails over to B (A lost its connection) and goes on from its last ack
        p_at_b = await b.logon("P")
        publish(p_at_b, "orders", range(101, 102))
        await drive(clock, lambda: persisted(p_at_b) == 101)
        await drive(clock, lambda: c.broker.txlog.durable_seq >= 100)
        assert await seqs_of(c) == [*range(1, 100), 101]
        assert c.broker.txlog.publishers.missing(p, 100)
        # A comes back: its 100 reaches B and C late, and B passes it on to C too
        fabric.heal(B, source="a")
        fabric.heal(C, source="a")
        await drive(clock, lambda: not c.broker.txlog.publishers.missing(p, 100))
        await drive(clock, lambda: not b.broker.txlog.publishers.missing(p, 100))
        await drive(clock, lambda: b.broker.replication.destinations["c"].messages_behind() == 0)
        for x in (b, c):
            got = await seqs_of(x)
            assert sorted(got) == list(range(1, 102)), x.config.name
            assert len(got) == 101  # exactly once each
        await drive(clock, lambda: len(sub.deliveries("w")) == 101)
        delivered = [orjson_n(body) for _, body in sub.deliveries("w")]
        # in C's log order: the late 100 after 101 (docs/protocol.md "Bookmarks")
        assert delivered == await seqs_of(c) == [*range(1, 100), 101, 100]


def orjson_n(body: bytes) -> int:
    return int(orjson.loads(body)["n"])


@scenario
async def test_a_group_mismatch_refuses_the_link_with_both_names(tmp_path: Path) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], group="nyc", exclude="replicate")),
        "b": xml(tmp_path, "b", group="ldn"),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        link = h["a"].broker.replication.destinations["b"]
        await drive(clock, lambda: link.last_error and "group mismatch" in link.last_error)
        assert "'nyc'" in link.last_error and "'ldn'" in link.last_error
        assert not link.connected
        events = [e for e in h["b"].broker.events.recent() if e["event"] == "inbound_refused"]
        assert events and events[-1]["reason"] == "group mismatch"


@scenario
async def test_a_peer_of_another_protocol_version_is_refused_with_both_versions(
    tmp_path: Path,
) -> None:
    """Each version added messages or record kinds an older instance does not know: the
    hello refuses the link up front instead of it breaking mid-stream (the source here
    speaks version 3, which carries no scheduled records)."""
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], exclude="replicate")),
        "b": xml(tmp_path, "b"),
    }
    with mock.patch.object(link_protocol, "PROTOCOL_VERSION", 3):
        async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
            link = h["a"].broker.replication.destinations["b"]
            await drive(clock, lambda: link.last_error and "protocol version" in link.last_error)
            assert "protocol version 3, this instance speaks 4" in link.last_error
            assert not link.connected


@scenario
async def test_a_validation_failure_is_logged_with_its_fix_on_both_sides(tmp_path: Path) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], topics=(("orders", None),))),
        "b": xml(tmp_path, "b", topics=("trades",)),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        link = h["a"].broker.replication.destinations["b"]
        await drive(clock, lambda: link.validation_failures)
        checks = {f.split("]")[0].lstrip("[") for f in link.validation_failures}
        assert checks == {"txlog", "replicate"}
        logged = [e for e in h["a"].broker.events.recent() if e["event"] == "validation_failed"]
        assert {e["check"] for e in logged} >= {"txlog", "replicate"}
        assert any("add <Topic><Name>orders</Name>" in e["fix"] for e in logged)
        # the destination hears why (its inbound link was refused by the source)
        await drive(
            clock,
            lambda: any(
                e["event"] == "inbound_closed_by_source" and "[txlog]" in e["detail"]
                for e in h["b"].broker.events.recent()
            ),
        )
        assert not link.connected


@scenario
async def test_a_restarted_destination_resyncs_from_what_it_lacks(tmp_path: Path) -> None:
    one_way = {"exclude": "replicate"}
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], sync=False, **one_way)),  # type: ignore[arg-type]
        "b": xml(tmp_path, "b"),
    }
    fabric = MemoryFabric()
    clock = VirtualClock()
    a = EngineHarness(tmp_path / "a", configs["a"], clock=clock, connector=fabric.connector("a"))
    b = EngineHarness(tmp_path / "b", configs["b"], clock=clock, connector=fabric.connector("b"))
    fabric.register(A, a.broker)
    fabric.register(B, b.broker)
    await a.__aenter__()
    await b.__aenter__()
    try:
        pub = await a.logon("pub")
        publish(pub, "orders", range(1, 201))
        link = a.broker.replication.destinations["b"]
        await drive(clock, lambda: link.acked >= 200)
        await b.__aexit__(None, None, None)  # B stops
        await drive(clock, lambda: not link.connected)
        publish(pub, "orders", range(201, 401))
        await drive(clock, lambda: persisted(pub) == 400)
        b = EngineHarness(
            tmp_path / "b", configs["b"], clock=clock, connector=fabric.connector("b")
        )
        fabric.register(B, b.broker)
        await b.__aenter__()
        await drive(clock, lambda: link.connected and link.acked >= a.last_seq)
        got = [s for ph, s, _, _ in await records(b) if ph == pub_hash("pub")]
        assert got == list(range(1, 401))
        # the resync started after what B had acknowledged: nothing was sent twice
        assert link.msgs_out == 400
    finally:
        await b.__aexit__(None, None, None)
        await a.__aexit__(None, None, None)
        await fabric.close()


@scenario
async def test_the_logon_ack_says_whether_failover_is_safe(tmp_path: Path) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], exclude="replicate"),
                  destination("c", [C], sync=False, exclude="replicate")),
        "b": xml(tmp_path, "b"),
        "c": xml(tmp_path, "c"),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a = h["a"]

        async def logon_ack(name: str) -> dict[str, object]:
            client = a.connect()
            client.send(({"c": "logon", "cid": "l", "client_name": name}, b""))
            await drive(clock, lambda: client.acks("processed"))
            return client.acks("processed")[0]

        ack = await logon_ack("x")
        assert (ack["failover"], ack["async_links"]) == ("unsafe", "c")
        repl = a.broker.replication
        repl.downgrade("b")
        ack = await logon_ack("y")
        assert (ack["failover"], ack["async_links"]) == ("unsafe", "b,c")
        # an instance whose links all hold acks says safe
        b_ack = h["b"].connect()
        b_ack.send(({"c": "logon", "cid": "l", "client_name": "z"}, b""))
        await drive(clock, lambda: b_ack.acks("processed"))
        assert b_ack.acks("processed")[0]["failover"] == "unsafe"  # b has no destination


@scenario
async def test_passthrough_and_filters_route_a_chain(tmp_path: Path) -> None:
    """A -> B -> C: without passthrough C gets only B's own publishes; a filtered block
    sends only matching messages."""
    one_way = {"exclude": "replicate,replicate_filter,cascade"}
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], **one_way)),  # type: ignore[arg-type]
        "b": xml(tmp_path, "b", destination("c", [C], topics=(("orders", "/n &lt; 5"),),
                                             passthrough=(), **one_way)),  # type: ignore[arg-type]
        "c": xml(tmp_path, "c"),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a, b, c = h["a"], h["b"], h["c"]
        pa = await a.logon("pa")
        pb = await b.logon("pb")
        publish(pa, "orders", range(1, 11))
        publish(pb, "orders", range(1, 11))
        await drive(clock, lambda: persisted(pa) == 10 and persisted(pb) == 10)
        await drive(clock, lambda: c.broker.replication.inbound.get("b") is not None)
        link = b.broker.replication.destinations["c"]
        await drive(clock, lambda: link.messages_behind() == 0)
        got = await records(c)
        assert [(ph, s) for ph, s, _, _ in got] == [(pub_hash("pb"), s) for s in range(1, 5)]
        assert all(path == ("b",) for _, _, _, path in got)


class _FailingOnce(Route):
    """A route whose first decision raises (an unexpected error inside the pump)."""

    __slots__ = ("failed",)

    def select(self, *args: object, **kwargs: object) -> list[int]:  # type: ignore[override]
        if not getattr(self, "failed", False):
            self.failed = True
            raise RuntimeError("injected")
        return super().select(*args, **kwargs)  # type: ignore[arg-type]


@scenario
async def test_the_pump_survives_a_link_closed_under_it_and_an_unexpected_error(
    tmp_path: Path,
) -> None:
    """A batch sent on a protocol the session has just closed (the peer refused the link
    while the pump held records) must not kill the pump: otherwise the link reconnects and
    shows streaming, but nothing more is sent.

    Nor may ``_send`` return without sending: the pump would read the same batch again at
    once, forever, never yielding, and hang the instance's loop. ``_send`` raises LinkLost
    and the pump waits for the link task."""
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], sync=False, exclude="replicate")),
        "b": xml(tmp_path, "b"),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        link = a.broker.replication.destinations["b"]
        await drive(clock, lambda: link.connected)
        pub = await a.logon("pub")
        publish(pub, "orders", range(1, 11))
        await drive(clock, lambda: link.acked >= 10)
        # the protocol closes under a connected stream: a send must not raise
        stream = link._stream
        assert stream is not None
        stream.protocol.refuse(ReconnectRequested("test"))
        txlog = a.broker.txlog
        assert txlog is not None
        batch = await txlog.read_view(1, max_count=10)
        unacked = len(link._unacked)
        with pytest.raises(LinkLost):
            await link._send(stream, batch)  # nothing sent
        assert len(link._unacked) == unacked  # and nothing awaits an ack
        # records arrive while the stream is dead: the pump must keep yielding
        publish(pub, "orders", range(11, 16))
        await stream.writer.write()  # the refusal reaches b, which closes: a reconnects
        await drive(clock, lambda: link.connected and link._stream is not stream)
        await drive(clock, lambda: link.acked >= a.last_seq)
        # an unexpected error in the pump is reported, the link drops and comes back
        link.route = _FailingOnce(link.config)
        publish(pub, "orders", range(16, 21))
        await drive(clock, lambda: link.acked >= a.last_seq)
        assert any(e["event"] == "pump_failed" for e in a.broker.events.recent())
        got = [s for ph, s, _, _ in await records(b) if ph == pub_hash("pub")]
        assert got == list(range(1, 21))
        del fabric


@given(
    last_sent=st.floats(min_value=0.0, max_value=1e7, allow_nan=False),
    gap=st.floats(min_value=0.0, max_value=0.2, allow_nan=False),
)
def test_an_idle_marker_wait_always_moves_time(last_sent: float, gap: float) -> None:
    """A wait of ``MARKER_INTERVAL - (now - last_sent)`` is not enough: a remainder like
    1.4e-17 (now 0.15, last sent 0.1) is absorbed by ``now + wait``, so on the virtual clock
    the pump would wake at the same instant forever and the marker never go out."""
    now = last_sent + gap
    wait = marker_wait(now, last_sent)
    assert wait >= 0.0
    if wait:
        assert now + wait > now  # sleeping really moves time
    assert marker_wait(0.15, 0.1) == 0.0


@scenario
async def test_the_pump_waits_while_a_lost_link_is_being_cleared_instead_of_spinning(
    tmp_path: Path,
) -> None:
    """A source's link protocol can close (its reader saw the connection go) before the
    dial loop's session has run to clear the stream. With durable records to send, a pump
    that read, packed, saw the link was not streaming, and returned without awaiting
    anything would read again at once: the session would never get the loop back and the
    instance would hang. Here the protocol is closed under a session that never notices
    (the pipe stays up); a pump that does not yield hangs in the first ``drive``."""
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], exclude="replicate")),
        "b": xml(tmp_path, "b"),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a, b = h["a"], h["b"]
        link = a.broker.replication.destinations["b"]
        await drive(clock, lambda: link.connected)
        pa = await a.logon("pub-a")
        publish(pa, "orders", range(1, 11), acks="processed")
        await drive(clock, lambda: link.acked >= 10)
        stream = link._stream
        assert stream is not None
        stream.protocol.connection_lost(link_protocol.LinkRefused("connection lost"))
        publish(pa, "orders", range(11, 21), acks="processed")
        await drive(clock, lambda: a.broker.txlog is not None and a.broker.txlog.durable_seq >= 20)
        # the loop is alive (drive returned); an operator's reconnect clears the link
        link.reconnect()
        await drive(clock, lambda: link.connected and link.acked >= 20)
        assert len(await records(b)) == 20
        del fabric
