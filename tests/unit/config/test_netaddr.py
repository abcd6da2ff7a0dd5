"""InetAddr: HOST:PORT parsing and formatting, the loopback test, and how a bad address in
a file is reported."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.config import (
    InetAddrError,
    format_inet_addr,
    is_loopback,
    parse_inet_addr,
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
