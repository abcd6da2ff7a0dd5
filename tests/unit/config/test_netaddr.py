"""InetAddr: HOST:PORT parsing and formatting, the loopback test, and how a bad address in
a file is reported."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.config import (
    InetAddrError,
    OriginError,
    WebOrigin,
    format_inet_addr,
    is_loopback,
    parse_host_header,
    parse_inet_addr,
    parse_origin,
)
from tests.unit.config.helpers import (
    assert_refused,
)

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
    (
        "address without port",
        "<Admin><InetAddr>localhost</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "'localhost' has no port (expected HOST:PORT)",
    ),
    (
        "IPv6 without brackets",
        "<Admin><InetAddr>::1:9007</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "an IPv6 address needs brackets, e.g. [::1]:9007",
    ),
    (
        "port out of range",
        "<Admin><InetAddr>127.0.0.1:70000</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "port 70000 is out of range",
    ),
    (
        "bad host",
        "<Admin><InetAddr>bad_host:1</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "'bad_host' is neither an IP address nor a valid host name",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9007", ("127.0.0.1", 9007)),
        ("9007", ("127.0.0.1", 9007)),
        (" 0 ", ("127.0.0.1", 0)),
        ("[::1]:80", ("::1", 80)),
        ("[0:0::1]:80", ("::1", 80)),
        ("Spool.Example.COM:443", ("spool.example.com", 443)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
    ],
)
def test_parse_inet_addr(text: str, expected: tuple[str, int]) -> None:
    assert parse_inet_addr(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("host", "has no port"),
        (":80", "has no host"),
        ("h:x", "is not a number"),
        ("h:-1", "is not a number"),
        ("[::1]", "is not [IPv6]:PORT"),
        ("[127.0.0.1]:80", "is not an IPv6 address"),
        ("::1:80", "needs brackets"),
        ("1.2.3:80", "is not a valid IPv4 address"),
        ("-bad-:80", "neither an IP address nor a valid host name"),
        ("h:99999", "out of range"),
    ],
)
def test_parse_inet_addr_refuses(text: str, fragment: str) -> None:
    with pytest.raises(InetAddrError, match=re.escape(fragment)):
        parse_inet_addr(text)


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        st.ip_addresses().map(str),
        st.from_regex(r"[a-z][a-z0-9]{0,10}(\.[a-z]{2,5})?", fullmatch=True),
    ),
    st.integers(min_value=0, max_value=65535),
)
def test_inet_addr_round_trip(host: str, port: int) -> None:
    parsed = parse_inet_addr(format_inet_addr(host, port))
    assert parsed == (host, port)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("localhost", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("spool.example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# -- web origins ----------------------------------------------------------------------

_HOSTS = st.one_of(
    st.ip_addresses().map(str),
    st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9](\.[a-z]{2,5}){0,2}", fullmatch=True),
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["http", "https"]), _HOSTS, st.integers(min_value=1, max_value=65535))
def test_a_web_origin_round_trips_and_its_spellings_are_equal(
    scheme: str, host: str, port: int
) -> None:
    origin = WebOrigin(scheme, str(ipaddress.ip_address(host)) if _is_ip(host) else host, port)
    text = str(origin)
    assert parse_origin(text) == origin
    shown = f"[{host}]" if ":" in host else host
    for spelling in (
        f"{scheme.upper()}://{shown.upper()}:{port}",
        f"{scheme}://{shown}:{port}/",
        f" {scheme}://{shown}:{port} ",
    ):
        assert parse_origin(spelling) == origin
    # the host header of a request to that origin names the same origin
    assert parse_host_header(text.split("://", 1)[1], scheme) == origin
    assert (
        parse_host_header(text.split("://", 1)[1], "wss" if scheme == "https" else "ws") == origin
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("http://127.0.0.1:9007", WebOrigin("http", "127.0.0.1", 9007)),
        ("https://ops.example.com", WebOrigin("https", "ops.example.com", 443)),
        ("https://ops.example.com:443", WebOrigin("https", "ops.example.com", 443)),
        ("http://ops.example.com:443", WebOrigin("http", "ops.example.com", 443)),
        ("http://[::1]:80", WebOrigin("http", "::1", 80)),
        ("http://xn--bcher-kva.example", WebOrigin("http", "xn--bcher-kva.example", 80)),
    ],
)
def test_parse_origin(text: str, origin: WebOrigin) -> None:
    assert parse_origin(text) == origin


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("null", "sandboxed and local pages"),
        ("*", "would match pages of any site"),
        ("https://a.example/path", "is not scheme://host[:port]"),
        ("https://a.example?x", "is not scheme://host[:port]"),
        ("https://user@a.example", "is not scheme://host[:port]"),
        ("file://", "is http or https, not 'file'"),
        ("chrome-extension://abcdef", "is http or https"),
        ("a.example", "is not scheme://host[:port]"),
        ("http://", "has no host"),
        ("http://a.example:0", "not a number in 1..65535"),
        ("http://a.example:65536", "not a number in 1..65535"),
        ("http://::1", "needs brackets"),
        ("http://[127.0.0.1]", "is not an IPv6 address"),
        ("http://bad_host", "neither an IP address nor a valid host name"),
        ("http://bücher.example", "neither an IP address nor a valid host name"),
    ],
)
def test_parse_origin_refuses(text: str, fragment: str) -> None:
    with pytest.raises(OriginError, match=re.escape(fragment)):
        parse_origin(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_parse_origin_takes_anything_and_raises_only_origin_error(text: str) -> None:
    try:
        origin = parse_origin(text)
    except OriginError:
        return
    assert parse_origin(str(origin)) == origin
