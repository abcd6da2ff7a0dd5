"""The fabric as one instance sees it: itself, its destinations and its inbound links.

``GET /api/fabric`` (docs/admin-api.md) answers with :func:`fabric_graph`, and ``GET
/api/fabric/route`` with :func:`fabric_route` (where a topic goes): a graph of
instances (grouped by Group) and directed links, built from what the replication service
knows (its :class:`~spool.server.replication.service.ReplicationInfo`) - pure, so tested alone.

Each instance is reached by the fabric page (docs/dashboard.md) at its *admin URL*: Spool
serves the admin API on the same port as ``/replication``, so a destination's configured
address is its admin URL (``https`` when the link uses TLS). An inbound source's admin URL
is unknown here (it dials from an ephemeral port): the page learns it from an instance that
has the source as a destination, or the operator adds it.

A destination's link carries ``drops``: what it does not get, in sentences
(server/replication/topology.py; empty for an incoming link, whose source says it).

Link health: ``down`` (not connected), ``lagging`` (connected, more than
:data:`LAGGING_SECONDS` behind), ``ok``. An instance other than this one is ``up`` when a
link with it is connected, else ``unknown`` (this instance cannot tell it from a partition).
The page marks it ``down`` when its own call to it fails and no instance that answered
sees a link with it connected; with such a link it is ``unknown``, refusing the browser.
"""

from __future__ import annotations

from typing import Final, TypedDict

from spool.server.config import Config
from spool.server.replication.service import Replication, ReplicationInfo
from spool.server.replication.topology import RouteTrace, route_trace
from spool.server.replication.validation import parse_summary, summarize

__all__ = [
    "LAGGING_SECONDS",
    "FabricGraph",
    "FabricInstance",
    "FabricLink",
    "fabric_graph",
    "fabric_route",
]

#: a connected link further behind than this is ``lagging``
LAGGING_SECONDS: Final = 5.0


class FabricInstance(TypedDict):
    name: str
    group: str
    self: bool
    state: str
    admin_url: str | None


class FabricLink(TypedDict):
    id: str
    source: str
    target: str
    configured_sync_type: str | None
    effective_sync_type: str | None
    state: str
    status: str
    health: str
    messages_behind: int
    seconds_behind: float | None
    msgs_per_sec: float
    last_error: str | None
    reported_by: str
    drops: list[str]


class FabricGraph(TypedDict):
    name: str
    group: str
    instances: list[FabricInstance]
    links: list[FabricLink]


def _health(connected: bool, seconds_behind: float | None) -> str:
    if not connected:
        return "down"
    if seconds_behind is not None and seconds_behind > LAGGING_SECONDS:
        return "lagging"
    return "ok"


def fabric_graph(config: Config, info: ReplicationInfo | None) -> FabricGraph:
    """The graph this instance sees (``info`` None: it does not replicate)."""
    me = config.name
    instances: dict[str, FabricInstance] = {
        me: {"name": me, "group": config.group, "self": True, "state": "up", "admin_url": None}
    }
    links: list[FabricLink] = []
    if info is None:
        return {"name": me, "group": config.group, "instances": list(instances.values()),
                "links": links}  # fmt: skip
    tls_of = {
        d.name: d.transport.tls
        for d in (config.replication.destinations if config.replication else ())
    }
    for d in info["destinations"]:
        scheme = "https" if tls_of.get(d["name"]) else "http"
        # a passive destination has no address: the page learns its admin URL elsewhere
        url = f"{scheme}://{d['address'] or d['addresses'][0]}" if d["addresses"] else None
        peer = instances.setdefault(
            d["name"],
            {"name": d["name"], "group": d["group"], "self": False, "state": "unknown",
             "admin_url": url},
        )  # fmt: skip
        if d["connected"]:
            peer["state"] = "up"
        links.append(
            {
                "id": f"{me}->{d['name']}", "source": me, "target": d["name"],
                "configured_sync_type": d["configured_sync_type"],
                "effective_sync_type": d["effective_sync_type"],
                "state": "connected" if d["connected"] else "disconnected",
                "status": d["status"], "health": _health(d["connected"], d["seconds_behind"]),
                "messages_behind": d["messages_behind"], "seconds_behind": d["seconds_behind"],
                "msgs_per_sec": d["msgs_per_sec_out"], "last_error": d["last_error"],
                "reported_by": me, "drops": d["drops"]["summary"],
            }
        )  # fmt: skip
    for i in info["incoming"]:
        peer = instances.setdefault(
            i["name"],
            {"name": i["name"], "group": i["group"], "self": False, "state": "unknown",
             "admin_url": None},
        )  # fmt: skip
        if i["connected"]:
            peer["state"] = "up"
        links.append(
            {
                "id": f"{i['name']}->{me}", "source": i["name"], "target": me,
                "configured_sync_type": None, "effective_sync_type": i["sync_type"],
                "state": "connected" if i["connected"] else "disconnected",
                "status": i["status"], "health": _health(i["connected"], None),
                "messages_behind": i["messages_behind"], "seconds_behind": None,
                "msgs_per_sec": i["msgs_per_sec_in"], "last_error": i["last_error"],
                "reported_by": me, "drops": [],
            }
        )  # fmt: skip
    return {"name": me, "group": config.group, "instances": list(instances.values()),
            "links": links}  # fmt: skip


def fabric_route(config: Config, replication: Replication | None, topic: str) -> RouteTrace:
    """``GET /api/fabric/route``: where a message of ``topic`` published here goes
    (server/replication/topology.py); an instance that does not replicate sends it
    nowhere."""
    if replication is not None:
        return replication.route(topic)
    return route_trace({config.name: parse_summary(summarize(config))}, config.name, topic)
