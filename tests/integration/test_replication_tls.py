"""Replication over TLS between two ``spool serve`` processes.

B serves TLS (mutual TLS optional) and maps the client certificate of A to a user; A dials
B three times: with the right CA and its certificate (the link streams, persisted acks
wait for it), with a CA that did not sign B's certificate, and in plain text. The two
wrong ones are link errors on A's admin API and in its event log, and never carry data.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import Client
from tests.support.certs import TestCA
from tests.support.replication import destination, free_ports, read_log, replication_xml
from tests.support.server import SpoolProcess
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow]

TOKEN = "ops-token-for-replication-tls-0123"


def test_a_mutual_tls_link_streams_and_a_bad_certificate_is_a_link_error(
    tmp_path: Path,
) -> None:
    ca = TestCA(tmp_path / "pki", "ca")
    other = TestCA(tmp_path / "pki", "other")
    server = ca.issue_server("server")
    client = ca.issue_client("spool-a")
    port_a, port_b = free_ports(2)
    b_addr = [("127.0.0.1", port_b)]
    good = (
        f"<TLS>true</TLS><CACertificate>{ca.cert_path}</CACertificate>"
        f"<Certificate>{client.cert_path}</Certificate><PrivateKey>{client.key_path}</PrivateKey>"
    )
    untrusted = f"<TLS>true</TLS><CACertificate>{other.cert_path}</CACertificate>"
    a_xml = replication_xml(
        tmp_path / "a" / "data", "a", port=port_a,
        destinations=[
            destination("b", b_addr, exclude="replicate", transport_extra=good),
            destination("b2", b_addr, group="b", sync=False, exclude="replicate",
                        transport_extra=untrusted),
            destination("b3", b_addr, group="b", sync=False, exclude="replicate"),
        ],
    )  # fmt: skip
    users = (
        f"<User><Name>ops</Name><Token>{TOKEN}</Token><Admin>true</Admin></User>"
        f"<User><Name>repl</Name><CertificateSubject>{client.subject}</CertificateSubject>"
        "<Write>.*</Write></User>"
    )
    listener = (
        f"<Certificate>{server.cert_path}</Certificate><PrivateKey>{server.key_path}</PrivateKey>"
        f"<CACertificate>{ca.cert_path}</CACertificate><ClientAuth>optional</ClientAuth>"
    )
    b_xml = replication_xml(
        tmp_path / "b" / "data", "b", port=port_b, users=users, admin_extra=listener
    )
    a = SpoolProcess(tmp_path / "a", a_xml)
    b = SpoolProcess(tmp_path / "b", b_xml, tls=True)
    verify = ssl.create_default_context(cafile=str(ca.cert_path))
    auth = {"Authorization": f"Bearer {TOKEN}"}

    def dest(name: str) -> dict[str, object]:
        info = httpx.get(f"{a.http_url}/api/replication", timeout=10).json()
        found: dict[str, object] = next(d for d in info["destinations"] if d["name"] == name)
        return found

    async def publish() -> None:
        async with Client(a.ws_url, "pub") as pub:
            for s in range(1, 201):
                pub.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            # b is sync: these acks mean b holds the records durably
            await pub.wait_persisted(200, timeout=30)

    try:
        b.start()
        a.start()
        wait_until(lambda: dest("b")["connected"], 30, message="the TLS link to b")
        asyncio.run(publish())
        good_link = dest("b")
        assert good_link["tls"] is True and good_link["client_certificate"] is True
        wait_until(lambda: dest("b2")["last_error"], 30, message="b2's TLS failure")
        wait_until(lambda: dest("b3")["last_error"], 30, message="b3's failure")
        b2, b3 = dest("b2"), dest("b3")
        assert not b2["connected"] and not b3["connected"]
        assert "certificate does not verify" in str(b2["last_error"])
        assert "<CACertificate>" in str(b2["last_error"])
        assert "set <TLS>true</TLS>" in str(b3["last_error"])
        events = [e["event"] for e in b2["events"]]  # type: ignore[union-attr]
        assert "tls_failed" in events
        assert b2["msgs_out"] == 0 and b3["msgs_out"] == 0
        with httpx.Client(base_url=b.http_url, verify=verify, headers=auth) as http:
            incoming = http.get("/api/replication").json()["incoming"]
            assert [i["name"] for i in incoming] == ["a"]
            assert incoming[0]["user"] == "repl"
            assert incoming[0]["tls"] in ("TLSv1.2", "TLSv1.3")
            assert incoming[0]["certificate_subject"] == client.subject
            logons = http.get("/api/logons").json()
            assert logons["succeeded"]["replication"] >= 1
    finally:
        a.stop()
        b.stop()
    records = asyncio.run(read_log(b))
    mine = [seq for h, seq, _, path in records if h == pub_hash("pub") and path == ("a",)]
    assert mine == list(range(1, 201))
