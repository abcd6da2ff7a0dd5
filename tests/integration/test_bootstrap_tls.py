"""Bootstrap over TLS between real `spool serve` processes.

The source ``a`` serves its ``amps-replication`` transport (the shared listener) with a
certificate from a throwaway CA. ``b``, empty, bootstraps from it with ``<TLS>true</TLS>``
and that CA: it copies the log and a SOW topic over ``wss://`` and then serves. ``c``,
empty too, trusts another CA: its bootstrap cannot verify ``a``'s certificate, says so in
its event log and ``GET /api/bootstrap``, and ``c`` never serves.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import Client, client_context
from tests.support.certs import TestCA
from tests.support.replication import bootstrap_xml, free_ports, read_log, replication_xml
from tests.support.server import SpoolProcess, sow_topic
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow]

MESSAGES = 3000
SOW = sow_topic("orders", "/id")


def _get(proc: SpoolProcess, path: str, ca: Path | None = None) -> Any:
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=str(ca)) if ca is not None else True
    )
    response = httpx.get(f"{proc.http_url}{path}", timeout=10, verify=verify)
    response.raise_for_status()
    return response.json()


async def _fill(url: str, ca: Path) -> None:
    """MESSAGES on md (persisted), and 40 orders, id 0..9 updated once more."""
    async with Client(url, "pub-a", ssl=client_context(cafile=ca)) as pub:
        for s in range(1, MESSAGES + 1):
            pub.publish("md", b'{"n":%d}' % s, seq=s, persisted=True)
        await pub.wait_persisted(MESSAGES, timeout=60)
        for i in range(40):
            pub.publish("orders", b'{"id":%d,"v":1}' % i)
        for i in range(10):
            pub.publish("orders", b'{"id":%d,"v":2}' % i)
        await pub.publish_acked("orders", b'{"id":99,"v":1}')


async def _sow(url: str, ca: Path | None) -> dict[str, bytes]:
    ctx = client_context(cafile=ca) if ca is not None else None
    async with Client(url, "sow-q", ssl=ctx) as q:
        return {m.key or "": m.data for m in (await q.sow("orders")).records}


def test_a_bootstrap_over_tls_copies_and_an_untrusted_source_is_a_clear_error(
    tmp_path: Path,
) -> None:
    ca = TestCA(tmp_path / "pki", "ca")
    other = TestCA(tmp_path / "pki", "other")
    server = ca.issue_server("server")
    port_a, port_b, port_c = free_ports(3)
    a_addr = [("127.0.0.1", port_a)]
    listener = (
        f"<Certificate>{server.cert_path}</Certificate><PrivateKey>{server.key_path}</PrivateKey>"
    )
    a = SpoolProcess(
        tmp_path / "a",
        replication_xml(tmp_path / "a" / "data", "a", port=port_a, topics=("md", "orders"),
                        sow=SOW, replication_extra=listener),
        tls=True,
    )  # fmt: skip

    def requester(name: str, port: int, trusted: Path) -> SpoolProcess:
        boot = bootstrap_xml(
            ["md", "orders"], a_addr, "txlog,sow",
            transport_extra=f"<TLS>true</TLS><CACertificate>{trusted}</CACertificate>",
        )  # fmt: skip
        xml = replication_xml(tmp_path / name / "data", name, port=port, topics=("md", "orders"),
                              sow=SOW, bootstrap=boot)  # fmt: skip
        return SpoolProcess(tmp_path / name, xml)

    b = requester("b", port_b, ca.cert_path)
    c = requester("c", port_c, other.cert_path)
    try:
        a.start()
        asyncio.run(_fill(a.ws_url, ca.cert_path))
        source_sow = asyncio.run(_sow(a.ws_url, ca.cert_path))
        assert len(source_sow) == 41 and b'"v":2' in source_sow["0"]
        b.start()
        c.start()

        wait_until(lambda: _get(b, "/api/bootstrap")["state"] == "done", 60, message="b copied")
        boot = _get(b, "/api/bootstrap")
        assert boot["source"] == "a" and boot["error"] is None
        wait_until(lambda: httpx.get(f"{b.http_url}/readyz").status_code == 200, 20)
        assert asyncio.run(_sow(b.ws_url, None)) == source_sow
        # the copy went over TLS: a saw a TLS connection serve it
        served = [e for e in _get(a, "/api/events?limit=1000", ca.cert_path)["events"]
                  if e["event"] == "bootstrap_served"]  # fmt: skip
        assert served, "a never served the copy"

        wait_until(lambda: _get(c, "/api/bootstrap")["error"], 30, message="c's TLS failure")
        boot = _get(c, "/api/bootstrap")
        assert boot["state"] == "waiting" and boot["records"] == 0
        assert "certificate does not verify" in str(boot["error"])
        assert "<CACertificate>" in str(boot["error"])
        tls_events = [e for e in _get(c, "/api/events?limit=1000")["events"]
                      if e["event"] == "bootstrap_tls_failed"]  # fmt: skip
        assert len(tls_events) == 1, "reported once per distinct reason"
        assert "certificate does not verify" in str(tls_events[0]["detail"])
        assert httpx.get(f"{c.http_url}/readyz").status_code == 503

        async def logon() -> None:
            async with Client(c.ws_url, "early") as client:
                await client.publish_acked("md", b"{}")

        with pytest.raises(Exception):  # noqa: B017 - refused before the upgrade
            asyncio.run(logon())
    finally:
        for proc in (c, b, a):
            proc.stop()
    log = asyncio.run(read_log(b))
    copied = [s for h, s, body, _ in log if h == pub_hash("pub-a") and body.startswith(b'{"n"')]
    assert sorted(copied) == list(range(1, MESSAGES + 1))
    assert len(copied) == MESSAGES
    assert asyncio.run(read_log(c)) == []
