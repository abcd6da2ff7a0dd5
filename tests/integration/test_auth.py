"""Authentication on a real server: no-users loopback mode, dashboard login sessions with
CSRF, bearer tokens from another address, login throttling, websocket logon."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from spool.server.client import SyncClient
from spool.server.passwords import hash_password
from tests.support.server import SpoolProcess, config_xml

ADMIN_TOKEN = "admin-token-abcdefghij"
VIEWER_TOKEN = "viewer-token-abcdefghij"
PASSWORD = "ops password 1"
ENABLE = "/api/transports/websocket-json/enable"  # an idempotent action
USERS = (
    f"<User><Name>ops</Name><Token>{ADMIN_TOKEN}</Token>"
    f"<PasswordHash>{hash_password(PASSWORD)}</PasswordHash><Admin>true</Admin></User>"
    f"<User><Name>viewer</Name><Token>{VIEWER_TOKEN}</Token><Read>.*</Read></User>"
)


@contextlib.contextmanager
def serving(workdir: Path, xml: str) -> Iterator[SpoolProcess]:
    proc = SpoolProcess(workdir, xml)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("secured")
    with serving(workdir, config_xml(workdir / "data", users=USERS)) as proc:
        yield proc


@pytest.fixture(scope="module")
def open_local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("open")
    with serving(workdir, config_xml(workdir / "data")) as proc:
        yield proc


def login(
    http: httpx.Client, port: int, user: str, password: str, next_path: str = "/"
) -> httpx.Response:
    page = http.get("/login", params={"next": next_path})
    assert page.status_code == 200, page.text
    token = http.cookies[f"spool_login_{port}"]
    assert token in page.text  # the form carries it
    return http.post(
        "/login",
        data={"username": user, "password": password, "csrf_token": token, "next": next_path},
    )


# -- no users: loopback only ---------------------------------------------------------------


def test_without_users_loopback_clients_are_admins(open_local: SpoolProcess) -> None:
    with httpx.Client(base_url=open_local.http_url) as http:
        assert http.get("/api/session").json() == {
            "user": None,
            "admin": True,
            "via": "local",
            "auth_enabled": False,
            "csrf_token": None,
        }
        r = http.post(ENABLE)
        assert r.status_code == 200
        same_origin = http.post(
            ENABLE,
            headers={"Origin": open_local.http_url},
        )
        assert same_origin.status_code == 200
        events = http.get("/api/events", params={"category": "admin"}).json()["events"]
        assert events[-1]["user"] == "local" and events[-1]["action"] == "transports.enable"
        assert http.get("/login").status_code == 303


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}],
)
def test_without_users_cross_site_posts_are_refused(
    open_local: SpoolProcess, headers: dict[str, str]
) -> None:
    with httpx.Client(base_url=open_local.http_url) as http:
        r = http.post(ENABLE, headers=headers)
        assert r.status_code == 403
        assert r.json() == {
            "error": "forbidden",
            "detail": "cross-origin request refused (the page's origin is not the broker's "
            "own nor in Admin/AllowedOrigins)",
        }


def test_without_users_a_foreign_host_name_is_refused(open_local: SpoolProcess) -> None:
    # DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1
    with httpx.Client(base_url=open_local.http_url) as http:
        r = http.get("/api/instance", headers={"Host": f"evil.example:{open_local.port}"})
        assert r.status_code == 403 and r.json()["error"] == "forbidden"
        ok = http.get("/api/instance", headers={"Host": f"localhost:{open_local.port}"})
        assert ok.status_code == 200


# -- dashboard sessions --------------------------------------------------------------------


def test_login_session_csrf_and_logout(secured: SpoolProcess) -> None:
    port = secured.port
    with httpx.Client(base_url=secured.http_url) as http:
        r = http.get("/clients")
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/clients"
        wrong = login(http, port, "ops", "not the password", "/clients")
        assert wrong.status_code == 200 and "Invalid user name or password" in wrong.text
        assert f"spool_session_{port}" not in http.cookies
        r = login(http, port, "ops", PASSWORD, "/clients")
        assert r.status_code == 303 and r.headers["location"] == "/clients"
        set_cookies = r.headers.get_list("set-cookie")
        session_cookie = next(c for c in set_cookies if c.startswith(f"spool_session_{port}="))
        assert "HttpOnly" in session_cookie and "SameSite=strict" in session_cookie
        assert http.get("/clients").status_code == 200

        me = http.get("/api/session").json()
        assert me["user"] == "ops" and me["via"] == "session" and me["admin"]
        csrf = me["csrf_token"]
        assert csrf and csrf == http.cookies[f"spool_csrf_{port}"]

        missing = http.post(ENABLE)
        assert missing.status_code == 403 and "CSRF" in missing.json()["detail"]
        forged = http.post(ENABLE, headers={"X-CSRF-Token": "x" * 43})
        assert forged.status_code == 403
        cross = http.post(
            ENABLE,
            headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"},
        )
        assert cross.status_code == 403
        ok = http.post(
            ENABLE,
            headers={"X-CSRF-Token": csrf, "Origin": secured.http_url},
        )
        assert ok.status_code == 200

        assert http.post("/logout").status_code == 403  # no CSRF token
        out = http.post("/logout", data={"csrf_token": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/login"
        # the old session id is dead on the server, not just forgotten by this client
        stale = httpx.get(
            f"{secured.http_url}/api/session",
            cookies={f"spool_session_{port}": session_cookie.split(";")[0].split("=", 1)[1]},
        )
        assert stale.status_code == 401
        assert http.get("/api/session").status_code == 401
    with httpx.Client(
        base_url=secured.http_url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    ) as admin:
        events = admin.get("/api/events", params={"category": "admin", "limit": 1000}).json()
        kinds = [(e["event"], e.get("user")) for e in events["events"]]
    assert ("login_failed", "ops") in kinds and ("login", "ops") in kinds
    assert ("logout", "ops") in kinds
    assert PASSWORD not in str(events)


def test_login_form_needs_its_csrf_token(secured: SpoolProcess) -> None:
    with httpx.Client(base_url=secured.http_url) as http:
        r = http.post(
            "/login",
            data={"username": "ops", "password": PASSWORD, "csrf_token": "guess", "next": "/"},
        )
        assert r.status_code == 403
        assert f"spool_session_{secured.port}" not in http.cookies


def test_open_redirects_are_refused(secured: SpoolProcess) -> None:
    with httpx.Client(base_url=secured.http_url) as http:
        r = login(http, secured.port, "ops", PASSWORD, "//evil.example/x")
        assert r.status_code == 303 and r.headers["location"] == "/"


def test_a_logged_in_non_admin_cannot_act(secured: SpoolProcess) -> None:
    with httpx.Client(base_url=secured.http_url) as http:
        # a token is accepted as the password of its user
        assert login(http, secured.port, "viewer", VIEWER_TOKEN).status_code == 303
        me = http.get("/api/session").json()
        assert me["user"] == "viewer" and not me["admin"]
        assert http.get("/api/clients").status_code == 200
        r = http.post(
            ENABLE,
            headers={"X-CSRF-Token": me["csrf_token"]},
        )
        assert r.status_code == 403 and "not an admin" in r.json()["detail"]


def test_failed_logins_are_throttled(tmp_path: Path) -> None:
    with (
        serving(tmp_path, config_xml(tmp_path / "data", users=USERS)) as proc,
        httpx.Client(base_url=proc.http_url) as http,
    ):
        for _ in range(10):
            assert login(http, proc.port, "ops", "wrong").status_code == 200
        r = login(http, proc.port, "ops", PASSWORD)
        assert r.status_code == 429
        assert 1 <= int(r.headers["retry-after"]) <= 300
        assert f"spool_session_{proc.port}" not in http.cookies


# -- bearer tokens from another address ----------------------------------------------------


def _non_loopback_ipv4() -> str | None:
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family.name == "AF_INET" and not ipaddress.ip_address(addr.address).is_loopback:
                return str(addr.address)
    return None


@pytest.mark.parametrize("public", [False, True])
def test_probes_from_another_address(tmp_path: Path, public: bool) -> None:
    address = _non_loopback_ipv4()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    xml = config_xml(
        tmp_path / "data",
        users=USERS,
        admin_extra="<AllowPlaintext>true</AllowPlaintext>"
        + ("<MetricsPublic>true</MetricsPublic>" if public else ""),
    )
    xml = xml.replace("127.0.0.1:0", "0.0.0.0:0")
    with (
        serving(tmp_path, xml) as proc,
        httpx.Client(base_url=f"http://{address}:{proc.port}") as http,
    ):
        for probe in ("/metrics", "/healthz", "/readyz"):
            r = http.get(probe)
            assert r.status_code == (200 if public else 401), probe
            with_token = http.get(probe, headers={"Authorization": f"Bearer {VIEWER_TOKEN}"})
            assert with_token.status_code == 200
        assert http.get("/api/instance").status_code == 401
        assert (
            http.get(
                "/api/instance", headers={"Authorization": f"Bearer {VIEWER_TOKEN}"}
            ).status_code
            == 200
        )
        assert http.get("/").status_code == 303
        # plain text off loopback (AllowPlaintext) is said: event log, every page, /metrics
        bearer = {"Authorization": f"Bearer {VIEWER_TOKEN}"}
        page = http.get("/", headers=bearer)
        assert page.status_code == 200 and 'id="plaintext-banner"' in page.text
        events = http.get("/api/events", params={"category": "instance"}, headers=bearer)
        plain = [e for e in events.json()["events"] if e["event"] == "plaintext_listener"]
        assert plain and plain[0]["level"] == "warning"
        assert "spool_plaintext_listener 1.0" in http.get("/metrics", headers=bearer).text
        assert http.get("/api/tls", headers=bearer).json()["plaintext_exposed"] is True


# -- websocket logon -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "secret", "accepted"),
    [
        ("ops", PASSWORD, True),
        ("ops", ADMIN_TOKEN, True),
        ("ops", "wrong", False),
        ("viewer", ADMIN_TOKEN, False),
        ("nobody", PASSWORD, False),
    ],
)
def test_websocket_logon_uses_the_same_users(
    secured: SpoolProcess, user: str, secret: str, accepted: bool
) -> None:
    client = SyncClient(secured.ws_url, f"logon-{user}-{accepted}", user_id=user, password=secret)
    try:
        if accepted:
            assert client.connect().client_name == f"logon-{user}-{accepted}"
        else:
            with pytest.raises(Exception, match="auth failure"):
                client.connect()
    finally:
        client.close()
