"""Logons on the in-process engine: the throttle refuses without running scrypt and says
``retry_after``, at exact virtual times; a mapped client certificate is the credential;
a flood of password checks does not hold up the journal's fsync."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from spool.server.passwords import hash_password
from spool.server.peer import Peer
from tests.support.engine import EngineHarness, FakeClient, FakeTransport, scenario

PASSWORD = "engine password"
TOKEN = "engine-token-0123456789"
HASH = hash_password(PASSWORD)
USERS = (
    f"<User><Name>ops</Name><PasswordHash>{HASH}</PasswordHash><Token>{TOKEN}</Token>"
    "<Read>.*</Read><Write>.*</Write></User>"
    "<User><Name>alice</Name><CertificateSubject>CN=alice,O=Spool Tests</CertificateSubject>"
    "<Read>^alice/</Read><Write>^alice/</Write></User>"
)
TUNING = (
    "<LogonFailuresPerAddress>3</LogonFailuresPerAddress>"
    "<LogonFailuresPerUser>5</LogonFailuresPerUser>"
    "<LogonFailureWindow>60s</LogonFailureWindow>"
)


def connect_from(h: EngineHarness, peer: Peer) -> FakeClient:
    transport = FakeTransport(peer.address)
    return FakeClient(h.broker.connect(transport, peer=peer), transport)


async def logon(h: EngineHarness, client: FakeClient, **fields: Any) -> dict[str, Any]:
    """Send a logon and wait (real time: scrypt runs on the pool's thread) for its ack."""
    client.send(({"c": "logon", "cid": "l", "a": "processed", **fields}, b""))
    await h.until(lambda: client.acks())
    return client.acks()[0]


@scenario
async def test_throttle_refuses_without_scrypt_and_lifts_on_the_clock(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, users=USERS, tuning=TUNING) as h:
        pool = h.broker.auth.pool
        here = Peer("10.0.0.7", 4000)
        for i in range(3):
            ack = await logon(h, connect_from(h, here), client_name=f"g{i}", user_id="ops", pw="x")
            assert (ack["status"], ack["reason"]) == ("failure", "auth failure")
            assert "retry_after" not in ack
        assert pool.checks == 3
        for i in range(10):
            c = connect_from(h, here)
            ack = await logon(h, c, client_name=f"r{i}", user_id="ops", pw=PASSWORD)
            assert (ack["status"], ack["reason"], ack["retry_after"]) == (
                "failure",
                "auth failure",
                60,
            )
            assert "too many failed logons" in ack["detail"]
            await h.settle()
            assert c.closed and c.transport.close_reason == "auth failure"
        assert pool.checks == 3  # nothing was checked for the refused ones
        # another address logs on at once (ops has 3 failures < 5)
        ok = await logon(h, connect_from(h, Peer("10.0.0.8", 4000)), client_name="ok",
                         user_id="ops", pw=PASSWORD)  # fmt: skip
        assert ok["status"] == "success"
        # the window slides on the injected clock: 60 s after the failures they are gone
        await h.clock.advance(59)
        ack = await logon(h, connect_from(h, here), client_name="early", user_id="ops", pw=PASSWORD)
        assert ack["retry_after"] == 1
        await h.clock.advance(1)
        ack = await logon(h, connect_from(h, here), client_name="later", user_id="ops", pw=PASSWORD)
        assert ack["status"] == "success"
        counters = h.broker.metrics.security()
        assert counters["logon_failures"]["websocket"] == 3
        assert counters["logon_refused"]["websocket"] == 11
        assert counters["logon_succeeded"]["websocket"] == 2
        throttled = [e for e in h.broker.events.recent(500) if e["event"] == "logon_throttled"]
        assert len(throttled) == 1  # once per refusal episode, not once per attempt


@scenario
async def test_per_user_limit_across_addresses(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, users=USERS, tuning=TUNING) as h:
        for i in range(5):
            c = connect_from(h, Peer(f"10.0.1.{i}", 4000))
            assert (await logon(h, c, client_name=f"g{i}", user_id="ops", pw="no"))[
                "status"
            ] == "failure"
        ack = await logon(h, connect_from(h, Peer("10.0.2.1", 1)), client_name="x", user_id="ops",
                          pw=PASSWORD)  # fmt: skip
        assert ack["retry_after"] == 60
        # a token logon without a name is per address only
        ack = await logon(h, connect_from(h, Peer("10.0.2.1", 2)), client_name="y", pw=TOKEN)
        assert ack["status"] == "success"


@scenario
async def test_a_mapped_client_certificate_is_the_credential(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path, users=USERS, tuning=TUNING) as h:
        alice = Peer("10.0.0.9", 1, "TLSv1.3", "CN=alice,O=Spool Tests")
        ack = await logon(h, connect_from(h, alice), client_name="alice-app")
        assert ack["status"] == "success"
        assert h.broker.clients.by_name["alice-app"].user_name == "alice"
        assert h.broker.auth.pool.checks == 0  # no password, no scrypt
        ack = await logon(h, connect_from(h, alice), client_name="a2", user_id="ops")
        assert ack["reason"] == "auth failure" and "belongs to user 'alice'" in ack["detail"]
        # a password must belong to the certificate's user
        ack = await logon(h, connect_from(h, alice), client_name="a3", user_id="ops", pw=PASSWORD)
        assert ack["reason"] == "auth failure"
        # an unmapped subject is not a credential by itself
        bob = Peer("10.0.0.10", 1, "TLSv1.3", "CN=bob,O=Spool Tests")
        assert (await logon(h, connect_from(h, bob), client_name="b"))["reason"] == "auth failure"
        ack = await logon(h, connect_from(h, bob), client_name="b2", user_id="ops", pw=PASSWORD)
        assert ack["status"] == "success"
        connected = [e for e in h.broker.events.recent(500) if e["event"] == "connected"]
        assert connected[0]["certificate"] == "CN=alice,O=Spool Tests"
        assert connected[0]["tls"] == "TLSv1.3"


@scenario
async def test_a_page_of_another_origin_cannot_log_on_with_the_browsers_certificate(
    tmp_path: Path,
) -> None:
    """A browser presents its client certificate by itself, like a cookie: a page of a
    foreign origin (web/origins.py) must bring a password or token of its own."""
    async with EngineHarness(tmp_path, users=USERS, tuning=TUNING) as h:
        alice = Peer("127.0.0.1", 1, "TLSv1.3", "CN=alice,O=Spool Tests")
        page = connect_from(h, alice)
        page.session.web_origin = "https://evil.example"
        page.session.foreign_origin = True
        ack = await logon(h, page, client_name="from-a-page")
        assert (ack["status"], ack["reason"]) == ("failure", "auth failure")
        assert "https://evil.example must log on with a password or token" in ack["detail"]
        await h.settle()
        assert page.closed and page.session.close_cause == "logon_failed"
        assert h.broker.auth.pool.checks == 0
        # with a token of its own it may (from a browser without that certificate: a
        # password must belong to the certificate's user)
        page = connect_from(h, Peer("127.0.0.1", 2))
        page.session.foreign_origin = True
        ack = await logon(h, page, client_name="from-a-page", user_id="ops", pw=TOKEN)
        assert ack["status"] == "success"


@scenario
async def test_a_flood_of_password_checks_does_not_hold_up_fsync(tmp_path: Path) -> None:
    """30 logons wait for the one password thread (about 30 scrypt times in all); a
    persisted publish sent after them is durable long before most are answered, because
    the fsync runs on other threads than the password checks."""
    async with EngineHarness(tmp_path, users=USERS, tuning="", flush_interval="1ms") as h:
        pub = connect_from(h, Peer("10.9.9.9", 1))
        assert (await logon(h, pub, client_name="pub", pw=TOKEN))["status"] == "success"
        pub.skip = len(pub.received())
        flood = [connect_from(h, Peer(f"10.8.{i}.1", 1)) for i in range(30)]
        started = time.monotonic()
        for i, c in enumerate(flood):
            c.send(({"c": "logon", "cid": "l", "client_name": f"f{i}", "user_id": f"u{i}",
                     "pw": "wrong"}, b""))  # fmt: skip
        await h.settle()
        assert h.broker.auth.pool.pending == 30
        pub.send(({"c": "publish", "t": "orders", "s": 1, "a": "persisted"}, b"{}"))
        await h.commit()
        await h.until(lambda: pub.acks("persisted"))
        durable_after = time.monotonic() - started
        answered = sum(1 for c in flood if c.acks())
        assert answered < 15, (answered, durable_after)
        await h.until(lambda: all(c.acks() for c in flood), timeout=60)
        all_answered = time.monotonic() - started
        assert h.broker.auth.pool.checks == 30
        print(
            f"\n30 queued password checks: persisted ack after {durable_after * 1000:.0f} ms "
            f"({answered} logons answered by then); all logons answered after "
            f"{all_answered * 1000:.0f} ms"
        )
