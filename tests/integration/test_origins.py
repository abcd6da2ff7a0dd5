"""Against real servers: a web page of another origin cannot use the broker (websocket:
closed with 1008 and the fix before anything is read without users, a logon that needs a
password or token with users; REST: no action with the no-users trust or the cookie),
while the broker's own pages, ``Admin/AllowedOrigins`` and non-browser clients work."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close
from websockets.typing import Origin

from tests.support.server import SpoolProcess, config_xml

TOKEN = "origins-token-0123456789"
USERS = f"<User><Name>ops</Name><Token>{TOKEN}</Token><Admin>true</Admin></User>"
ALLOWED = "http://tools.example:8080"
ENABLE = "/api/transports/websocket-json/enable"  # an idempotent action


@contextlib.contextmanager
def serving(workdir: Path, xml: str) -> Iterator[SpoolProcess]:
    proc = SpoolProcess(workdir, xml).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    """No users (loopback trust), one allowed origin."""
    work = tmp_path_factory.mktemp("origins-local")
    xml = config_xml(work / "data", admin_extra=f"<AllowedOrigins>{ALLOWED}</AllowedOrigins>")
    with serving(work, xml) as proc:
        yield proc


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    work = tmp_path_factory.mktemp("origins-users")
    with serving(work, config_xml(work / "data", users=USERS)) as proc:
        yield proc


async def logon(url: str, origin: str | None, name: str, **fields: Any) -> dict[str, Any]:
    """Connect with that Origin (None: none, as non-browser clients) and log on."""
    kwargs: dict[str, Any] = {"origin": Origin(origin)} if origin is not None else {}
    async with connect(url, compression=None, **kwargs) as ws:
        await ws.send(
            orjson.dumps(
                {"c": "logon", "cid": "l", "client_name": name, "a": "processed", **fields}
            )
        )
        ack: dict[str, Any] = orjson.loads(
            (await asyncio.wait_for(ws.recv(), 10)).split(b"}", 1)[0] + b"}"
        )
        return ack


def refused(url: str, origin: str) -> Close:
    """Connect as a page of ``origin``, send a logon, and return the close that ends it."""

    async def attempt() -> Close:
        async with connect(url, compression=None, origin=Origin(origin)) as ws:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(orjson.dumps({"c": "logon", "cid": "l", "client_name": "x"}))
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), 10)
            assert info.value.rcvd is not None
            return info.value.rcvd

    return asyncio.run(attempt())


@pytest.mark.parametrize(
    "origin",
    ["http://evil.example", "null", "https://127.0.0.1:1", "http://localhost:3000"],
)
def test_without_users_a_foreign_page_is_closed_with_the_fix_before_anything_is_read(
    local: SpoolProcess, origin: str
) -> None:
    """Closed with 1008 at once, with a reason a browser shows the page (the status of a
    refused upgrade it hides from scripts)."""
    close = refused(local.ws_url, origin)
    assert close.code == 1008
    assert (
        close.reason == f"origin {origin} may not use this broker: add it to Admin/AllowedOrigins"
    )
    # nothing was served: the logon was not read, the refusal is in the event log
    clients = httpx.get(f"{local.http_url}/api/clients").json()["clients"]
    assert [c for c in clients if c["name"] == "x"] == []
    assert any(
        line.get("event") == "origin_refused" and line.get("origin") == origin
        for line in _events(local)
    )


def test_a_long_refused_origin_still_fits_a_close_frame(local: SpoolProcess) -> None:
    origin = "http://" + "a" * 200 + ".example"
    close = refused(local.ws_url, origin)
    assert close.code == 1008 and len(close.reason.encode()) <= 123
    assert close.reason.endswith("add it to Admin/AllowedOrigins")


def _events(proc: SpoolProcess) -> list[dict[str, Any]]:
    r = httpx.get(f"{proc.http_url}/api/events", params={"category": "session"})
    events: list[dict[str, Any]] = r.json()["events"]
    return events


def test_without_users_the_brokers_own_page_an_allowed_one_and_programs_are_served(
    local: SpoolProcess,
) -> None:
    own = f"http://127.0.0.1:{local.port}"
    for origin, name in ((own, "own"), (ALLOWED, "allowed"), (None, "program")):
        ack = asyncio.run(logon(local.ws_url, origin, name))
        assert ack["status"] == "success", (origin, ack)


def test_the_admin_api_shows_which_page_a_browser_client_came_from(local: SpoolProcess) -> None:
    own = f"http://127.0.0.1:{local.port}"

    async def scenario() -> dict[str, Any]:
        async with connect(local.ws_url, compression=None, origin=Origin(own)) as ws:
            await ws.send(b'{"c":"logon","cid":"l","client_name":"page","a":"processed"}')
            await ws.recv()
            async with httpx.AsyncClient() as http:
                r = await http.get(f"{local.http_url}/api/clients/page")
                info: dict[str, Any] = r.json()
                return info

    assert asyncio.run(scenario())["origin"] == own


def test_with_users_a_foreign_page_must_log_on_with_a_password_or_token(
    secured: SpoolProcess,
) -> None:
    evil = "http://evil.example"
    ack = asyncio.run(logon(secured.ws_url, evil, "page", user_id="ops"))
    assert (ack["status"], ack["reason"]) == ("failure", "auth failure")
    assert evil in ack["detail"] and "password or token" in ack["detail"]
    ack = asyncio.run(logon(secured.ws_url, evil, "page", user_id="ops", pw=TOKEN))
    assert ack["status"] == "success"


def test_rest_actions_honour_allowed_origins_with_cors(local: SpoolProcess) -> None:
    with httpx.Client(base_url=local.http_url) as http:
        foreign = http.post(ENABLE, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        assert "access-control-allow-origin" not in foreign.headers
        # the allowed page's browser asks first (JSON body: a preflight), then posts
        preflight = http.options(
            ENABLE,
            headers={
                "Origin": ALLOWED,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == ALLOWED
        allowed = http.post(
            ENABLE, headers={"Origin": ALLOWED, "Sec-Fetch-Site": "cross-site"}, json={}
        )
        assert allowed.status_code == 200, allowed.text
        assert allowed.headers["access-control-allow-origin"] == ALLOWED
        read = http.get("/api/instance", headers={"Origin": ALLOWED})
        assert read.headers["access-control-allow-origin"] == ALLOWED
        # a foreign page cannot even read an answer (no CORS header for it)
        other = http.get("/api/instance", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def test_the_client_modules_are_served_to_pages_of_any_origin(local: SpoolProcess) -> None:
    """Public code, no data: a page elsewhere may import the client from the broker.
    The dashboard's scripts and the API keep their origin rules."""
    origin = {"Origin": "http://evil.example"}
    for module in ("spool-client.js", "spool-ha.js", "spool-ha-stores.js"):
        got = httpx.get(f"{local.http_url}/static/{module}", headers=origin)
        assert got.status_code == 200
        assert got.headers["access-control-allow-origin"] == "*"
        assert "access-control-allow-credentials" not in got.headers
    allowed = httpx.get(f"{local.http_url}/static/spool-client.js", headers={"Origin": ALLOWED})
    assert allowed.headers["access-control-allow-origin"] == "*"
    for path in ("/static/js/query.js", "/api/instance"):
        other = httpx.get(f"{local.http_url}{path}", headers=origin)
        assert "access-control-allow-origin" not in other.headers, path
