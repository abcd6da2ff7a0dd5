"""Bootstrap between real `spool serve` processes that have ``<Users>`` and entitlements.

The source ``a`` holds records of three topics: ``md``, ``orders`` (a SOW topic) and
``audit``. The requesters log on to ``a`` as ``repl``, which ``a`` lets read everything.
On the requesters, ``repl`` may write ``md`` and ``orders`` but not ``audit``: copied
records are written as the bootstrap's user, so

- ``b`` (copies ``md`` and ``orders``) bootstraps and serves, every record copied once;
- ``c`` (copies every topic, by a regular expression) reaches the first ``audit`` record
  and stops with one clear reason - not a copy restarting every few seconds - keeping what
  it copied; restarted with a ``<Write>`` entitlement for ``audit``, it resumes and ends
  with every record of ``a`` exactly once (nothing was skipped).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import Client
from spool.server.replication.bootstrap import Marker, marker_path
from tests.support.replication import (
    Cluster,
    bootstrap_xml,
    publish_resending,
    read_log,
)
from tests.support.server import SpoolProcess, sow_topic
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow]

OPS = "ops-token-bootstrap-users-0123456789"
PUB = "pub-token-bootstrap-users-0123456789"
REPL = "repl-token-bootstrap-users-012345678"
SOW = sow_topic("orders", "/id")
#: md spans several of the source's read batches, so a copy stopped at audit has a position
MD, AUDIT, ORDERS = 10_000, 300, 50


def users(repl_write: str) -> str:
    return (
        f"<User><Name>ops</Name><Token>{OPS}</Token><Admin>true</Admin>"
        "<Read>.*</Read></User>"
        f"<User><Name>pub</Name><Token>{PUB}</Token><Read>.*</Read><Write>.*</Write></User>"
        f"<User><Name>repl</Name><Token>{REPL}</Token><Read>.*</Read>"
        f"<Write>{repl_write}</Write></User>"
    )


def api(proc: SpoolProcess, path: str) -> Any:
    response = httpx.get(
        f"{proc.http_url}{path}", headers={"Authorization": f"Bearer {OPS}"}, timeout=10
    )
    response.raise_for_status()
    return response.json()


def stopped(proc: SpoolProcess) -> bool:
    return proc.proc is not None and proc.proc.poll() is not None


async def fill(url: str) -> None:
    """md 1..MD, then audit 1..AUDIT, then the orders (ids 0..ORDERS-1): a copy of every
    topic meets ``audit`` after the whole of ``md``."""
    await publish_resending([url], "pub-md", "md", range(1, MD + 1), user_id="pub", password=PUB)
    await publish_resending(
        [url], "pub-audit", "audit", range(1, AUDIT + 1), user_id="pub", password=PUB
    )
    async with Client(url, "pub-orders", user_id="pub", password=PUB) as client:
        for i in range(ORDERS):
            client.publish("orders", b'{"id":%d,"v":1}' % i)
        await client.publish_acked("orders", b'{"id":0,"v":2}')


async def sow_of(url: str) -> dict[str, bytes]:
    async with Client(url, "q", user_id="ops", password=OPS) as q:
        return {m.key or "": m.data for m in (await q.sow("orders")).records}


def test_copied_records_are_written_as_the_bootstraps_user(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    creds = f"<User>repl</User><Token>{REPL}</Token>"
    a = cluster.add("a", topics=("md", "orders", "audit"), sow=SOW, users=users(".*"))

    def requester(name: str, topics: list[str], repl_write: str) -> SpoolProcess:
        return cluster.add(
            name, topics=("md", "orders", "audit"), sow=SOW, users=users(repl_write),
            bootstrap=bootstrap_xml(topics, [cluster.address("a")], "txlog,sow",
                                    transport_extra=creds),
        )  # fmt: skip

    b = requester("b", ["md", "orders"], "^(md|orders)$")
    c = requester("c", [".*"], "^(md|orders)$")
    try:
        a.start()
        asyncio.run(fill(a.ws_url))
        source_sow = asyncio.run(sow_of(a.ws_url))
        assert len(source_sow) == ORDERS

        b.start()
        c.start()
        wait_until(lambda: api(b, "/api/bootstrap")["state"] == "done", 60, message="b copied")
        wait_until(lambda: httpx.get(f"{b.http_url}/readyz").status_code == 200, 20)
        assert api(b, "/api/bootstrap")["error"] is None
        assert asyncio.run(sow_of(b.ws_url)) == source_sow

        # c meets an audit record its bootstrap's user may not write: it stops, once
        wait_until(lambda: stopped(c), 60, message="c stops")
        text = c.log()
        assert "user 'repl' of the bootstrap may not publish to 'audit'" in text, text[-3000:]
        assert "<Write>" in text
        assert text.count("bootstrap_copying") == 1, "the copy was tried again"
        assert text.count("bootstrap_failed") == 1
        marker = Marker.load(marker_path(cluster.data_dir("c"), "c"))
        assert marker is not None and 0 < marker.copied_upto < MD, "where the copy stopped"
        partial = asyncio.run(read_log(c))
        assert not any(h == pub_hash("pub-audit") for h, _, _, _ in partial)
        kept = {s for h, s, _, _ in partial if h == pub_hash("pub-md")}
        assert kept >= set(range(1, marker.copied_upto + 1)), "the marker is ahead of the log"

        # the entitlement is fixed: the copy resumes and ends with every record
        c.stop()
        c = requester("c", [".*"], ".*")
        c.start()
        wait_until(lambda: api(c, "/api/bootstrap")["state"] == "done", 60, message="c copied")
        wait_until(lambda: httpx.get(f"{c.http_url}/readyz").status_code == 200, 20)
        assert asyncio.run(sow_of(c.ws_url)) == source_sow
    finally:
        cluster.stop()
    assert "bootstrap_resuming" in c.log()
    for proc, topics in ((b, ("md", "orders")), (c, ("md", "orders", "audit"))):
        log = asyncio.run(read_log(proc))
        counts = Counter((h, s) for h, s, _, _ in log)
        assert counts.most_common(1)[0][1] == 1, f"{proc.workdir.name}: a record copied twice"
        assert sorted(s for h, s, _, _ in log if h == pub_hash("pub-md")) == list(range(1, MD + 1))
        audit = sorted(s for h, s, _, _ in log if h == pub_hash("pub-audit"))
        assert audit == (list(range(1, AUDIT + 1)) if "audit" in topics else [])
        assert sum(h == pub_hash("pub-orders") for h, _, _, _ in log) == ORDERS + 1
