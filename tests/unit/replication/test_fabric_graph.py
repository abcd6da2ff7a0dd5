"""``GET /api/fabric``'s graph from what the replication service reports (pure)."""

from __future__ import annotations

from typing import Any

from spool.server.config import parse_config
from spool.server.replication.fabric import fabric_graph
from spool.server.replication.service import ReplicationInfo

XML = """<SpoolConfig><Name>a</Name><Group>nyc</Group>
<Transports><Transport><Name>r</Name><Type>amps-replication</Type></Transport></Transports>
<TransactionLog><Topic><Name>md</Name></Topic></TransactionLog>
<Replication>
<Destination><Name>b</Name><Group>nyc</Group><SyncType>sync</SyncType><Topic><Name>md</Name></Topic>
<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9107</InetAddr></Transport></Destination>
<Destination><Name>c</Name><Group>ldn</Group><SyncType>async</SyncType><Topic><Name>md</Name></Topic>
<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9207</InetAddr></Transport></Destination>
</Replication></SpoolConfig>"""


def _dest(name: str, group: str, connected: bool, behind: float, port: int) -> dict[str, Any]:
    return {
        "name": name, "group": group, "configured_sync_type": "sync",
        "effective_sync_type": "async", "connected": connected, "status": "streaming",
        "address": f"127.0.0.1:{port}" if connected else None,
        "addresses": [f"127.0.0.1:{port}"], "messages_behind": 3, "seconds_behind": behind,
        "msgs_per_sec_out": 10.0, "last_error": None,
        "drops": {"topics": [], "filtered": [], "groups": None,
                  "summary": ["'md' only where /px > 1"] if name == "c" else []},
    }  # fmt: skip


def test_destinations_and_sources_make_instances_and_directed_links() -> None:
    config = parse_config(XML)
    info: Any = {
        "name": "a", "group": "nyc", "minimum_sync_destinations": 0, "horizon": 0,
        "durable_seq": 0,
        "destinations": [_dest("b", "nyc", True, 0.2, 9107), _dest("c", "ldn", False, 0, 9207)],
        "incoming": [{"name": "z", "group": "tokyo", "sync_type": "async", "connected": True,
                      "status": "streaming",
                      "messages_behind": 0, "msgs_per_sec_in": 1.0, "last_error": None}],
    }  # fmt: skip
    replication: ReplicationInfo = info
    graph = fabric_graph(config, replication)
    by_name = {i["name"]: i for i in graph["instances"]}
    assert by_name["a"]["self"] and by_name["a"]["state"] == "up"
    assert by_name["b"] == {"name": "b", "group": "nyc", "self": False, "state": "up",
                            "admin_url": "http://127.0.0.1:9107"}  # fmt: skip
    assert by_name["c"]["state"] == "unknown" and by_name["c"]["group"] == "ldn"
    assert by_name["z"]["admin_url"] is None
    links = {link["id"]: link for link in graph["links"]}
    assert set(links) == {"a->b", "a->c", "z->a"}
    assert links["a->b"]["health"] == "ok" and links["a->b"]["effective_sync_type"] == "async"
    assert links["a->c"]["health"] == "down" and links["a->c"]["state"] == "disconnected"
    # what a destination does not get marks its link; an incoming link's source says it
    assert links["a->c"]["drops"] == ["'md' only where /px > 1"]
    assert links["a->b"]["drops"] == [] and links["z->a"]["drops"] == []
    # what the source last told a (its configured type is the source's to know)
    assert links["z->a"]["effective_sync_type"] == "async"
    assert links["z->a"]["configured_sync_type"] is None


def test_a_lagging_link_and_an_instance_without_replication() -> None:
    config = parse_config(XML)
    info: Any = {"name": "a", "group": "nyc", "minimum_sync_destinations": 0, "horizon": 0,
                 "durable_seq": 0, "destinations": [_dest("b", "nyc", True, 9.5, 9107)],
                 "incoming": []}  # fmt: skip
    (link,) = fabric_graph(config, info)["links"]
    assert link["health"] == "lagging"
    alone = fabric_graph(config, None)
    assert [i["name"] for i in alone["instances"]] == ["a"] and alone["links"] == []
