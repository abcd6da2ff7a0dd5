"""The broker addresses the client commands take (server/cli.py ``broker_url``): every
reasonable form maps to one websocket URL, anything else is one line of usage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spool.server.cli import UsageError, broker_url


@pytest.mark.parametrize(
    ("given_", "url"),
    [
        ("ws://127.0.0.1:9007/amps/json", "ws://127.0.0.1:9007/amps/json"),
        ("wss://broker.example:443/amps/json", "wss://broker.example:443/amps/json"),
        ("ws://127.0.0.1:9007", "ws://127.0.0.1:9007/amps/json"),
        ("ws://127.0.0.1:9007/", "ws://127.0.0.1:9007/amps/json"),
        ("http://127.0.0.1:9107", "ws://127.0.0.1:9107/amps/json"),
        ("http://127.0.0.1:9107/", "ws://127.0.0.1:9107/amps/json"),
        ("HTTPS://broker.example", "wss://broker.example/amps/json"),
        ("https://broker.example/amps/json", "wss://broker.example/amps/json"),
        ("127.0.0.1:9107", "ws://127.0.0.1:9107/amps/json"),
        (" localhost:9007 ", "ws://localhost:9007/amps/json"),
        ("[::1]:9007", "ws://[::1]:9007/amps/json"),
        ("broker:9007/amps/json", "ws://broker:9007/amps/json"),
        ("ws://h:1/amps/json?x=1#frag", "ws://h:1/amps/json?x=1"),
    ],
)
def test_each_reasonable_form_is_one_websocket_url(given_: str, url: str) -> None:
    assert broker_url(given_) == url


@pytest.mark.parametrize(
    "given_",
    [
        "orders",  # the topic where the URL goes: no host and port
        "localhost",
        "/tmp/broker",
        "ftp://127.0.0.1:9007",
        "tcp://127.0.0.1:9007",
        "ws://",
        "http://127.0.0.1:99999",
        "127.0.0.1:port",
        "",
    ],
)
def test_anything_else_is_one_line_naming_the_forms(given_: str) -> None:
    with pytest.raises(UsageError) as info:
        broker_url(given_)
    text = str(info.value)
    assert "\n" not in text and "ws://HOST:PORT/amps/json" in text and "HOST:PORT" in text


@given(
    st.sampled_from(["ws", "wss"]),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    st.integers(1, 65535),
    st.from_regex(r"/[a-z0-9/._-]{1,30}", fullmatch=True),
)
def test_a_websocket_url_with_a_path_is_taken_as_it_is(
    scheme: str, host: str, port: int, path: str
) -> None:
    url = f"{scheme}://{host}:{port}{path}"
    assert broker_url(url) == url
