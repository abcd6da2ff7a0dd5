"""The origin policy (web/origins.py): which pages are the broker's own, allowed or foreign."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.config import WebOrigin
from spool.web.origins import OriginPolicy

ALLOWED = ("https://ops.example.com", "http://localhost:3000")


@pytest.mark.parametrize(
    ("auth", "origin", "host", "scheme", "provenance"),
    [
        # not a browser page
        (False, None, "127.0.0.1:9007", "ws", "none"),
        (False, None, None, "ws", "none"),
        # the broker's own pages, plain and TLS, any spelling of the same origin
        (False, "http://127.0.0.1:9007", "127.0.0.1:9007", "ws", "own"),
        (False, "http://127.0.0.1:9007", "127.0.0.1:9007", "http", "own"),
        (False, "https://127.0.0.1:9443", "127.0.0.1:9443", "wss", "own"),
        (False, "http://localhost:9007", "LOCALHOST:9007", "ws", "own"),
        (False, "http://[::1]:9007", "[::1]:9007", "ws", "own"),
        (False, "http://dash.localhost:9007", "dash.localhost:9007", "ws", "own"),
        (True, "https://spool.example.com", "spool.example.com", "wss", "own"),
        (True, "https://spool.example.com", "spool.example.com:443", "wss", "own"),
        # the same host over the other scheme, or another port, is another origin
        (False, "https://127.0.0.1:9007", "127.0.0.1:9007", "ws", "foreign"),
        (False, "http://127.0.0.1:9007", "127.0.0.1:9007", "wss", "foreign"),
        (False, "http://127.0.0.1:8080", "127.0.0.1:9007", "ws", "foreign"),
        (False, "http://localhost:9007", "127.0.0.1:9007", "ws", "foreign"),
        # a page whose own name was rebound to 127.0.0.1: without users it is not "own"
        (False, "http://evil.example:9007", "evil.example:9007", "ws", "foreign"),
        (True, "http://evil.example:9007", "evil.example:9007", "ws", "own"),
        # anything else
        (False, "http://evil.example", "127.0.0.1:9007", "ws", "foreign"),
        (False, "null", "127.0.0.1:9007", "ws", "foreign"),
        (False, "http://127.0.0.1:9007", None, "ws", "foreign"),
        (False, "http://127.0.0.1:9007", "bad host!", "ws", "foreign"),
        (False, "not an origin", "127.0.0.1:9007", "ws", "foreign"),
        # listed
        (False, "https://ops.example.com", "127.0.0.1:9007", "ws", "allowed"),
        (False, "HTTPS://OPS.example.com:443", "127.0.0.1:9007", "http", "allowed"),
        (False, "http://localhost:3000", "127.0.0.1:9007", "ws", "allowed"),
        (False, "https://localhost:3000", "127.0.0.1:9007", "ws", "foreign"),
    ],
)
def test_verdicts(
    auth: bool, origin: str | None, host: str | None, scheme: str, provenance: str
) -> None:
    verdict = OriginPolicy(ALLOWED, auth_enabled=auth).verdict(origin, host, scheme)
    assert verdict.provenance == provenance
    assert verdict.origin == origin
    assert verdict.trusted is (provenance != "foreign")


_ORIGINS = st.builds(
    WebOrigin,
    st.sampled_from(["http", "https"]),
    st.sampled_from(["127.0.0.1", "localhost", "a.example", "b.example", "::1"]),
    st.sampled_from([80, 443, 3000, 9007]),
)


@settings(max_examples=300, deadline=None)
@given(
    allowed=st.lists(_ORIGINS, max_size=3),
    page=_ORIGINS,
    served=_ORIGINS,
    auth=st.booleans(),
    tls=st.booleans(),
)
def test_a_page_is_trusted_exactly_when_listed_or_the_servers_own(
    allowed: list[WebOrigin], page: WebOrigin, served: WebOrigin, auth: bool, tls: bool
) -> None:
    """The model: listed, or the origin the request was addressed to (scheme of the
    connection, Host), and without users only on a loopback name."""
    policy = OriginPolicy([str(o) for o in allowed], auth_enabled=auth)
    host = (
        f"[{served.host}]:{served.port}" if ":" in served.host else f"{served.host}:{served.port}"
    )
    scheme = ("wss" if tls else "ws") if served.scheme == "https" else "ws"
    addressed = WebOrigin("https" if scheme == "wss" else "http", served.host, served.port)
    loopback = served.host in ("127.0.0.1", "localhost", "::1")
    own = page == addressed and (auth or loopback)
    verdict = policy.verdict(str(page), host, scheme)
    assert verdict.trusted is (page in allowed or own)
    if page in allowed:
        assert verdict.provenance == "allowed"
