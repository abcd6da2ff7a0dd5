"""Message data over REST: every route is in docs/security.md's table, and none shows a
restricted user what the websocket would refuse them (a real ``spool serve`` with users).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute

from spool.server.client import Client
from spool.server.config import load_config
from spool.server.protocol import errors
from spool.web.app import create_app
from tests.support.roster import bearer
from tests.support.server import ROOT, SpoolProcess, config_xml, sow_topic

ALICE_TOKEN = "alice-token-0123456789"
OPS_TOKEN = "ops-token-0123456789abc"
SECRET = "SECRET-KEY-42"
USERS = (
    f"<User><Name>ops</Name><Token>{OPS_TOKEN}</Token><Admin>true</Admin>"
    "<Read>.*</Read><Write>.*</Write></User>"
    f"<User><Name>alice</Name><Token>{ALICE_TOKEN}</Token>"
    "<Read>^public\\.</Read><Write>^public\\.</Write></User>"
)
QUEUE = (
    "<Queue><Name>secret.work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>secret.work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod></Queue>"
)
ALICE = bearer(ALICE_TOKEN)
OPS = bearer(OPS_TOKEN)


def _security_table() -> dict[str, tuple[str, str]]:
    """docs/security.md's table of routes: route -> (shows message data, check)."""
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("## Message data over REST", 1)[1].split("\n## ", 1)[0]
    table: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        for route in re.findall(r"`([^`]+)`", cells[0]):
            table[route] = (cells[1], cells[2])
    return table


def _paths(routes: list[BaseRoute]) -> set[str]:
    out: set[str] = set()
    for route in routes:
        if isinstance(route, Route | WebSocketRoute | Mount):
            out.add(route.path)
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    work = tmp_path_factory.mktemp("rest-entitlements")
    sow = sow_topic("secret.sow", "/id") + sow_topic("public.sow", "/id") + QUEUE
    proc = SpoolProcess(work, config_xml(work / "data", users=USERS, sow=sow))
    proc.start()
    try:
        asyncio.run(_publish(proc))
        yield proc
    finally:
        proc.stop()


async def _publish(server: SpoolProcess) -> None:
    async with Client(server.ws_url, "ops-feed", user_id="ops", password=OPS_TOKEN) as ops:
        ops.publish("secret.sow", {"id": SECRET, "v": 1})
        ops.publish("public.sow", {"id": "public-1", "v": 2})
        ops.publish("secret.work-in", {"job": SECRET})
        await ops.flush()


def test_every_route_of_the_application_is_in_the_security_table(
    server: SpoolProcess,
) -> None:
    """A new route fails here until docs/security.md says whether it shows message data."""
    app = create_app(load_config(server.config_path), console_log=False)
    routes = _paths(app.routes)
    table = _security_table()
    assert routes - set(table) == set(), "routes missing from docs/security.md's table"
    assert set(table) - routes == set(), "rows of docs/security.md's table with no route"


def test_the_issue_key_listing_is_refused_to_a_user_not_entitled(server: SpoolProcess) -> None:
    with httpx.Client(base_url=server.http_url, timeout=30.0) as http:
        r = http.get("/api/sow/secret.sow", headers=ALICE)
        assert r.status_code == 403, r.text
        assert SECRET not in r.text
        assert "alice" in r.json()["detail"] and "secret.sow" in r.json()["detail"]
        # the same check before the lookup: no way to learn which topics exist
        assert http.get("/api/sow/secret.nope", headers=ALICE).status_code == 403
        # what she may read she gets; an entitled admin gets the secret topic
        r = http.get("/api/sow/public.sow", headers=ALICE)
        assert r.status_code == 200 and r.json()["keys"] == ["public-1"]
        r = http.get("/api/sow/secret.sow", headers=OPS)
        assert r.status_code == 200 and r.json()["keys"] == [SECRET]
        # lists leave out what she may not read
        topics = {t["topic"] for t in http.get("/api/sow", headers=ALICE).json()["topics"]}
        assert topics == {"public.sow"}
        assert http.get("/api/queues/secret.work", headers=ALICE).status_code == 403
        assert http.get("/api/queues", headers=ALICE).json()["queues"] == []
        assert http.get("/api/queues/secret.work", headers=OPS).status_code == 200


def test_the_websocket_refuses_her_the_same_topic(server: SpoolProcess) -> None:
    async def scenario() -> None:
        async with Client(server.ws_url, "alice-ws", user_id="alice", password=ALICE_TOKEN) as c:
            with pytest.raises(errors.NotEntitled):
                await c.sow("secret.sow")

    asyncio.run(scenario())


def _concrete(route: str) -> str:
    values = {"topic:path": "secret.sow", "name": "secret.work", "client": "ops-feed",
              "sub_id": "s", "id": "1", "owner": "o", "dest": "d"}  # fmt: skip
    return re.sub(r"\{([^}]+)\}", lambda m: values.get(m.group(1), "x"), route)


def test_no_route_shows_the_secret_to_a_restricted_user(server: SpoolProcess) -> None:
    """Every GET route of the table, as alice, with the path parameters naming the
    secret topic and queue: no answer contains the secret key."""
    table = _security_table()
    seen: dict[str, int] = {}
    with httpx.Client(base_url=server.http_url, timeout=30.0) as http:
        for route, (data, _) in sorted(table.items()):
            if route in ("/amps/json", "/replication", "/live/events", "/logout"):
                continue  # websockets, an endless event stream, a POST
            if route.startswith("/static"):
                continue
            r = http.get(_concrete(route), headers=ALICE)
            seen[route] = r.status_code
            assert SECRET not in r.text, route
            if data.startswith("yes"):
                assert r.status_code == 403, (route, r.status_code, r.text[:200])
    # the walk did reach the answers that hold data for an entitled user
    assert seen["/api/sow"] == 200 and seen["/api/events"] == 200


def test_no_event_of_the_server_quotes_a_body_or_a_key() -> None:
    """Events are readable by every authenticated user: none may carry a body or a value
    taken from one (a bookmark, which names a message, may: a stuck queue message's)."""
    import ast

    forbidden = {"body", "bodies", "data", "key", "keys", "sow_key", "value"}
    offenders = []
    for path in sorted((ROOT / "server").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "emit"
            ):
                names = {kw.arg for kw in node.keywords if kw.arg} & forbidden
                if names:
                    offenders.append(f"{Path(path).relative_to(ROOT)}:{node.lineno} {names}")
    assert offenders == []
