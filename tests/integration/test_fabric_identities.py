"""A fabric that does not trade data for availability, with real ``spool serve`` processes
on loopback: one client name on two instances, two instances with one Name, what a chain
of three passes on and the warning when it does not, a link back over a TLS connection.

Each test starts its instances on ports chosen before they start, publishes with the
Python client, reads the admin API, and reads the transaction logs once the processes
stopped.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from spool.server.bookmarks import pub_hash
from spool.server.client import Client
from spool.server.protocol.errors import NameInUseElsewhere
from tests.support.certs import TestCA
from tests.support.replication import (
    Cluster,
    destination,
    free_ports,
    read_log,
    replication_xml,
)
from tests.support.server import SpoolProcess
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow]

PER_CLIENT = 5_000


def _events(cluster: Cluster, name: str, category: str) -> list[dict[str, Any]]:
    answer = cluster.api(name, f"/api/events?category={category}&limit=1000")
    events: list[dict[str, Any]] = answer.get("events", answer)
    return events


async def _publish_all(url: str, tag: str) -> dict[str, Any]:
    """Log on as ``twin`` and publish 1..PER_CLIENT with persisted acks; what happened."""
    client = Client(url, "twin")
    try:
        info = await client.connect(timeout=20)
    except NameInUseElsewhere as exc:
        return {"refused": exc.reason, "detail": exc.detail}
    try:
        first = info.last_seq + 1
        for n in range(1, PER_CLIENT + 1, 500):
            client.publish_many(
                "orders", [orjson.dumps({"n": i, "by": tag}) for i in range(n, n + 500)],
                persisted=True,
            )  # fmt: skip
        last = first + PER_CLIENT - 1
        await client.wait_persisted(last, timeout=120)
        return {"first": first, "last": last}
    finally:
        await client.close()


def test_one_client_name_on_two_instances_at_once(tmp_path: Path) -> None:
    """Two plain clients called ``twin`` log on at once, one to each of two instances that
    replicate sync both ways: one is refused with ``name in use elsewhere`` naming where the
    name is in use, the other publishes its 5,000, and every message acked to it is in both
    logs, with its own body; the refusing instance's event log says which name collided
    where."""
    cluster = Cluster.both_ways(tmp_path)
    cluster.start()
    try:
        wait_until(lambda: cluster.destination("a", "b")["connected"], 30)
        wait_until(lambda: cluster.destination("b", "a")["connected"], 30)

        async def both() -> list[dict[str, Any]]:
            return await asyncio.gather(
                _publish_all(cluster.procs["a"].ws_url, "a"),
                _publish_all(cluster.procs["b"].ws_url, "b"),
            )

        outcome = dict(zip("ab", asyncio.run(both()), strict=True))
        refused = [k for k, o in outcome.items() if "refused" in o]
        assert len(refused) == 1, outcome
        (loser,) = refused
        winner = "b" if loser == "a" else "a"
        assert outcome[loser]["refused"] == "name in use elsewhere"
        assert outcome[loser]["detail"] in (
            f"client name 'twin' is logged on at instance '{winner}'",
            f"client name 'twin' is logging on at instance '{winner}'",
        )
        said = [e for e in _events(cluster, loser, "session")
                if e["event"] == "name_in_use_elsewhere"]  # fmt: skip
        assert said and said[-1]["client"] == "twin" and f"'{winner}'" in said[-1]["detail"]
        conflicts = cluster.replication(loser)["conflicts"]
        assert [(c["kind"], c["name"]) for c in conflicts] == [("client_name", "twin")]
        wait_until(lambda: cluster.caught_up("a") and cluster.caught_up("b"), 30)
    finally:
        cluster.stop()
    acked = range(outcome[winner]["first"], outcome[winner]["last"] + 1)
    for name in "ab":
        records = asyncio.run(read_log(cluster.procs[name]))
        mine = {s: orjson.loads(body) for h, s, body, _ in records if h == pub_hash("twin")}
        assert sorted(mine) == list(acked), name
        assert all(body["by"] == winner for body in mine.values()), name


def test_two_instances_with_one_name_the_second_link_is_refused_visibly(tmp_path: Path) -> None:
    """B and C both call themselves ``b`` and both replicate to A: A keeps the first link,
    refuses the second every time it dials (an event, the REST conflicts, an alert), and
    the refused one shows why on its own admin API."""
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    to_a = destination("a", [cluster.address("a")], exclude="replicate")
    cluster.add("a")
    cluster.add("b", destinations=[to_a])
    cluster.procs["c"] = SpoolProcess(
        tmp_path / "c",
        replication_xml(cluster.data_dir("c"), "b", port=cluster.port["c"], destinations=[to_a]),
    )
    cluster.start()
    try:

        def refusals() -> list[dict[str, Any]]:
            return [e for e in _events(cluster, "a", "replication")
                    if e["event"] == "duplicate_instance_name"]  # fmt: skip

        wait_until(lambda: len(refusals()) >= 2, 30, message="a refuses the second 'b'")
        up = [k for k in "bc" if cluster.destination(k, "a")["connected"]]
        assert len(up) == 1, up
        (down,) = {"b", "c"} - set(up)
        error = cluster.destination(down, "a")["last_error"]
        assert "name conflict" in error and "two instances share the Name" in error
        incoming = cluster.replication("a")["incoming"]
        assert [i["name"] for i in incoming] == ["b"]
        (conflict,) = cluster.replication("a")["conflicts"]
        assert conflict["kind"] == "instance_name" and conflict["name"] == "b"
        assert conflict["count"] >= 2
        alerts = cluster.api("a", "/api/instance")["alerts"]
        assert [al["id"] for al in alerts] == ["replication-conflict-instance-name"]
        # the link that stays is never swapped for the newcomer
        kept = incoming[0]["connected_since"]
        wait_until(lambda: len(refusals()) >= 4, 30)
        assert cluster.replication("a")["incoming"][0]["connected_since"] == kept
    finally:
        cluster.stop()


def _chain(tmp_path: Path, passthrough: tuple[str, ...] | None) -> Cluster:
    one_way = "replicate,replicate_filter,cascade"
    cluster = Cluster(tmp_path, ["a", "b", "c"])
    cluster.add("a", destinations=[destination("b", [cluster.address("b")], exclude=one_way)])
    cluster.add("b", destinations=[destination("c", [cluster.address("c")], exclude=one_way,
                                               sync=False, passthrough=passthrough)])  # fmt: skip
    cluster.add("c")
    return cluster


@pytest.mark.parametrize("passthrough", [None, ()], ids=["default", "none"])
def test_a_chain_s_route_trace_tells_what_reaches_the_end(
    tmp_path: Path, passthrough: tuple[str, ...] | None
) -> None:
    """A -> B -> C: with B's default PassThrough, A's route trace reaches C over a sync
    then an async hop and A's messages are in C's log; with an empty one, B warns at
    start-up that C does not get what arrives by replication, A's trace stops at B with
    that reason, and C's log holds none of A's messages."""
    cluster = _chain(tmp_path, passthrough)
    cluster.start()
    try:
        wait_until(lambda: cluster.destination("a", "b")["connected"], 30)
        wait_until(lambda: cluster.destination("b", "c")["connected"], 30)

        def trace_to_c() -> dict[str, Any] | None:
            """a's trace, once it knows b's configuration (through b's fabric view)."""
            trace: dict[str, Any] = cluster.api("a", "/api/fabric/route?topic=orders")
            ends = [r["instance"] for r in trace["reached"]] + [
                u["target"] for u in trace["not_reached"]
            ]
            return trace if "c" in ends else None

        wait_until(lambda: trace_to_c() is not None, 30, message="a traces orders to c")
        trace = trace_to_c()
        assert trace is not None
        warned = [e for e in _events(cluster, "b", "replication")
                  if e["event"] == "destination_drops"]  # fmt: skip
        drops = cluster.destination("b", "c")["drops"]

        async def publish() -> None:
            async with Client(cluster.procs["a"].ws_url, "pa") as pub:
                for s in range(1, 101):
                    pub.publish("orders", b'{"n":%d}' % s, persisted=True)
                await pub.wait_persisted(100, timeout=30)

        asyncio.run(publish())
        wait_until(lambda: cluster.caught_up("a") and cluster.caught_up("b"), 30)
    finally:
        cluster.stop()
    at_c = [s for h, s, _, _ in asyncio.run(read_log(cluster.procs["c"])) if h == pub_hash("pa")]
    reached = [r["instance"] for r in trace["reached"]]
    if passthrough is None:
        assert reached == ["b", "c"]
        hops = [(h["source"], h["target"], h["sync_type"]) for h in trace["routes"][1]["hops"]]
        assert hops == [("a", "b", "sync"), ("b", "c", "async")]
        assert trace["not_reached"] == [] and warned == [] and drops["summary"] == []
        assert at_c == list(range(1, 101))
    else:
        assert reached == ["b"]
        (stop,) = trace["not_reached"]
        assert (stop["source"], stop["target"]) == ("b", "c")
        assert "empty PassThrough" in stop["reason"]
        (warning,) = warned
        assert warning["destination"] == "c" and "empty PassThrough" in warning["detail"]
        assert drops["groups"] == []
        assert at_c == []


def test_a_passive_destination_runs_back_over_a_tls_connection(tmp_path: Path) -> None:
    """A serves TLS and has B as a passive destination; B dials A over TLS (verifying A's
    certificate): A's link back rides that connection, so messages go both ways over the
    one TLS connection B opened, and persisted acks on each side wait for the other."""
    ca = TestCA(tmp_path / "pki", "ca")
    server = ca.issue_server("server")
    port_a, port_b = free_ports(2)
    token = "ops-token-for-passive-tls-0123456"
    users = (
        f"<User><Name>ops</Name><Token>{token}</Token><Admin>true</Admin>"
        "<Read>.*</Read><Write>.*</Write></User>"
        f"<User><Name>repl</Name><Token>repl-token-passive-tls-012345</Token>"
        "<Write>.*</Write></User>"
    )
    listener = (
        f"<Certificate>{server.cert_path}</Certificate><PrivateKey>{server.key_path}</PrivateKey>"
    )
    repl = {"user": "repl", "secret": "repl-token-passive-tls-012345"}
    a_xml = replication_xml(
        tmp_path / "a" / "data", "a", port=port_a, users=users, admin_extra=listener,
        destinations=[destination("b", [], **repl)],  # type: ignore[arg-type]
    )  # fmt: skip
    b_xml = replication_xml(
        tmp_path / "b" / "data", "b", port=port_b, users=users, inbound=False,
        destinations=[destination("a", [("127.0.0.1", port_a)], **repl,  # type: ignore[arg-type]
                                  transport_extra=f"<TLS>true</TLS><CACertificate>"
                                  f"{ca.cert_path}</CACertificate>")],
    )  # fmt: skip
    a = SpoolProcess(tmp_path / "a", a_xml, tls=True)
    b = SpoolProcess(tmp_path / "b", b_xml)
    auth = {"Authorization": f"Bearer {token}"}
    trust = ssl.create_default_context(cafile=str(ca.cert_path))

    def dest(proc: SpoolProcess, name: str) -> dict[str, Any]:
        info = httpx.get(f"{proc.http_url}/api/replication", headers=auth, timeout=10,
                         verify=trust).json()  # fmt: skip
        found: dict[str, Any] = next(d for d in info["destinations"] if d["name"] == name)
        return found

    async def publish(proc: SpoolProcess, name: str) -> None:
        async with Client(proc.ws_url, name, user_id="ops", password=token,
                          ssl=trust if proc is a else None) as pub:  # fmt: skip
            for s in range(1, 201):
                pub.publish("orders", b'{"n":%d}' % s, seq=s, persisted=True)
            await pub.wait_persisted(200, timeout=30)  # the other side holds them

    a.start()
    b.start()
    try:
        wait_until(lambda: dest(a, "b")["connected"] and dest(b, "a")["connected"], 30)
        to_b = dest(a, "b")
        assert to_b["passive"] and to_b["via"] == "incoming" and to_b["address"] is None
        assert dest(b, "a")["via"] == "dialed" and dest(b, "a")["tls"]

        async def both() -> None:
            await asyncio.gather(publish(a, "pa"), publish(b, "pb"))

        asyncio.run(both())
    finally:
        a.stop()
        b.stop()
    for proc in (a, b):
        records = asyncio.run(read_log(proc))
        for name in ("pa", "pb"):
            assert sorted(s for h, s, _, _ in records if h == pub_hash(name)) == list(
                range(1, 201)
            ), (proc, name)
