"""How a destination with ``<Users>`` authenticates an incoming link.

A source logs on with a user and token (or password), checked behind the instance's logon
throttle like any logon (path ``replication``), or over mutual TLS with a client
certificate whose subject is a user's ``CertificateSubject``. The memory fabric hands the
destination a :class:`~spool.server.peer.Peer` as the TLS listener would (``fabric.peers``).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from spool.server.peer import Peer
from tests.support.fabric import B, drive, fabric_of, persisted, publish, records, scenario
from tests.support.fabric import xml as instance
from tests.support.replication import destination

SUBJECT = "CN=spool-a,O=Spool Tests"


def _users(token: str) -> str:
    return (
        f"<User><Name>repl</Name><Token>{token}</Token><Write>.*</Write></User>"
        f"<User><Name>mtls</Name><CertificateSubject>{SUBJECT}</CertificateSubject>"
        "<Write>.*</Write></User>"
    )


@scenario
async def test_wrong_credentials_are_counted_then_throttled_unchecked(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(24)
    configs = {
        "a": instance(
            tmp_path, "a",
            destination("b", [B], user="repl", secret="not-the-token-at-all", exclude="replicate"),
        ),
        "b": instance(
            tmp_path, "b", users=_users(token),
            tuning="<LogonFailuresPerAddress>2</LogonFailuresPerAddress>",
        ),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        link = h["a"].broker.replication.destinations["b"]
        logons = h["b"].broker.logons
        # two checked failures, then the address is refused without a check
        await drive(clock, lambda: logons.refused_count["replication"] >= 1, timeout=30)
        assert logons.failure_count["replication"] == 2
        assert logons.failure_count["websocket"] == 0
        assert not link.connected
        assert link.last_error is not None and "auth failure" in link.last_error
        assert "too many failed logons" in link.last_error
        refused = [e for e in h["b"].broker.events.recent() if e["event"] == "inbound_refused"]
        assert {e["reason"] for e in refused} == {"auth failure"}
        throttled = [e for e in h["b"].broker.events.recent() if e["event"] == "logon_throttled"]
        assert throttled and throttled[-1]["path"] == "replication"


@scenario
async def test_the_right_token_logs_the_link_on_as_its_user(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(24)
    configs = {
        "a": instance(
            tmp_path, "a", destination("b", [B], user="repl", secret=token, exclude="replicate")
        ),
        "b": instance(tmp_path, "b", users=_users(token)),
    }
    async with fabric_of(tmp_path, configs) as (_fabric, clock, h):
        a, b = h["a"], h["b"]
        await drive(clock, lambda: a.broker.replication.destinations["b"].connected)
        pub = await a.logon("pub")
        publish(pub, "orders", range(1, 21))
        await drive(clock, lambda: persisted(pub) == 20)
        assert len(await records(b)) == 20
        inbound = b.broker.replication.inbound["a"]
        assert inbound.user is not None and inbound.user.name == "repl"
        assert b.broker.logons.succeeded_count["replication"] == 1


@scenario
async def test_a_verified_client_certificate_is_the_credential(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(24)
    configs = {
        # a: no secret, its certificate's subject maps to user mtls
        "a": instance(tmp_path, "a", destination("b", [B], exclude="replicate")),
        # c: no secret and no certificate
        "c": instance(tmp_path, "c", destination("b", [B], exclude="replicate")),
        "b": instance(tmp_path, "b", users=_users(token)),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        fabric.peers["a"] = Peer("127.0.0.1", 50001, "TLSv1.3", SUBJECT)
        a, b, c = h["a"], h["b"], h["c"]
        link_a = a.broker.replication.destinations["b"]
        link_c = c.broker.replication.destinations["b"]
        await drive(clock, lambda: link_a.connected)
        pub = await a.logon("pub")
        publish(pub, "orders", range(1, 11))
        await drive(clock, lambda: persisted(pub) == 10)
        assert len(await records(b)) == 10
        inbound = b.broker.replication.inbound["a"]
        assert inbound.user is not None and inbound.user.name == "mtls"
        assert inbound.peer.client_subject == SUBJECT
        await drive(clock, lambda: link_c.last_error and "auth failure" in link_c.last_error)
        assert not link_c.connected
        assert "CertificateSubject" in (link_c.last_error or "")


@scenario
async def test_credentials_of_another_user_than_the_certificates_are_refused(
    tmp_path: Path,
) -> None:
    token = secrets.token_urlsafe(24)
    configs = {
        # the right token of user repl, over the certificate of user mtls
        "a": instance(
            tmp_path, "a", destination("b", [B], user="repl", secret=token, exclude="replicate")
        ),
        "b": instance(tmp_path, "b", users=_users(token)),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        fabric.peers["a"] = Peer("127.0.0.1", 50002, "TLSv1.3", SUBJECT)
        link = h["a"].broker.replication.destinations["b"]
        await drive(clock, lambda: link.last_error and "auth failure" in link.last_error)
        assert "do not belong to the client certificate's user" in (link.last_error or "")
        assert not link.connected
        assert h["b"].broker.logons.failure_count["replication"] >= 1
