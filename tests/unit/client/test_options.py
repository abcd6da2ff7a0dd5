"""The client options (:class:`ClientOptions`): their defaults, their checks, the two ways
to give them, and that :class:`Client` and :class:`HAClient` hand the same options to the
connection (over a websocket server on loopback)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from spool.server.client import (
    Client,
    ClientError,
    ClientOptions,
    DefaultServerChooser,
    HAClient,
    InvalidOption,
    client_context,
)
from spool.server.client.connection import ClientTransport, Handlers, connect_websocket
from spool.server.client.ha.chooser import StaticAuthenticator
from spool.server.client.options import ClientKeywords
from spool.server.protocol.frame import encode_message, parse_frame

DOCS = Path(__file__).resolve().parents[3] / "docs" / "python-client.md"

# -- the type ----------------------------------------------------------------------------


def test_the_defaults_are_the_documented_ones() -> None:
    # docs/python-client.md "Options" (the defaults the keyword arguments always had)
    o = ClientOptions()
    assert o.user_id is None and o.password is None
    assert o.heartbeat is None
    assert o.queue_size == 10_000
    assert o.max_size == 64 * 1024 * 1024
    assert o.connect_timeout == 10.0
    assert o.connector is connect_websocket
    assert o.ssl is None
    assert o.logon_options is None
    assert o.reused_seq == "warn"


def test_the_docs_table_lists_every_option() -> None:
    text = DOCS.read_text()
    section = text[text.index("## Options") :]
    section = section[: section.index("\n## ", 1)]
    documented = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
    assert documented == [f.name for f in dataclasses.fields(ClientOptions)]


def test_the_keywords_are_the_options() -> None:
    hints = typing.get_type_hints(ClientKeywords)
    fields = typing.get_type_hints(ClientOptions)
    assert hints == {f.name: fields[f.name] for f in dataclasses.fields(ClientOptions)}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("heartbeat", 0, "heartbeat must be > 0"),
        ("heartbeat", -1.0, "heartbeat must be > 0"),
        ("queue_size", -1, "queue_size must be >= 0"),
        ("max_size", 0, "max_size must be > 0"),
        ("connect_timeout", 0, "connect_timeout must be > 0"),
        ("connect_timeout", -5.0, "connect_timeout must be > 0"),
        ("connect_timeout", float("nan"), "connect_timeout must be > 0"),
        ("reused_seq", "sometimes", "reused_seq must be warn, refuse, allow"),
    ],
)
def test_a_value_out_of_range_is_refused_when_made(field: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidOption, match=message):
        ClientOptions(**{field: value})
    # the same check for the keyword arguments, and an InvalidOption is both kinds of error
    with pytest.raises(ValueError, match=message):
        Client("ws://127.0.0.1:1/amps/json", "c", **{field: value})
    with pytest.raises(ClientError, match=message):
        HAClient("c", chooser=DefaultServerChooser(["ws://x"]), **{field: value})


def test_options_are_frozen_and_keep_the_password_out_of_their_repr() -> None:
    o = ClientOptions(user_id="u", password="secret")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.queue_size = 5  # type: ignore[misc]
    assert "secret" not in repr(o)


def test_keywords_and_an_options_object_are_the_same_client() -> None:
    by_keywords = Client("ws://h/amps/json", "c", heartbeat=2.0, queue_size=5, user_id="u")
    by_object = Client(
        "ws://h/amps/json", "c", options=ClientOptions(heartbeat=2.0, queue_size=5, user_id="u")
    )
    assert by_keywords.options == by_object.options


def test_an_options_object_and_an_option_keyword_together_are_refused() -> None:
    with pytest.raises(InvalidOption, match="heartbeat: give options=ClientOptions"):
        Client("ws://h/amps/json", "c", options=ClientOptions(), heartbeat=1.0)
    chooser = DefaultServerChooser(["ws://h/amps/json"])
    with pytest.raises(InvalidOption, match="connect_timeout, queue_size: give options="):
        HAClient("c", chooser=chooser, options=ClientOptions(), queue_size=1, connect_timeout=1)


def test_the_ha_client_refuses_the_options_it_sets_itself() -> None:
    chooser = DefaultServerChooser(["ws://h/amps/json"])
    with pytest.raises(InvalidOption, match="password, user_id: the HA client sets"):
        HAClient("c", chooser=chooser, user_id="u", password="p")
    with pytest.raises(InvalidOption, match="logon_options, reused_seq: the HA client sets"):
        HAClient("c", chooser=chooser, options=ClientOptions(logon_options="x", reused_seq="allow"))


def test_a_tls_context_still_needs_a_wss_url() -> None:
    with pytest.raises(ClientError, match="needs a wss:// URL"):
        Client("ws://h/amps/json", "c", options=ClientOptions(ssl=client_context()))


# -- what reaches the connection ---------------------------------------------------------


class LogonServer:
    """A websocket server on loopback that acks every logon and keeps its header."""

    def __init__(self) -> None:
        self.logons: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.url = ""

    async def _handle(self, ws: ServerConnection) -> None:
        try:
            async for data in ws:
                raw = data if isinstance(data, bytes) else data.encode()
                for m in parse_frame(raw).messages:
                    if m.header.get("c") == "logon":
                        await self.logons.put(m.header)
                        ack = {"c": "ack", "a": "processed", "status": "success", "s": 0}
                        await ws.send(encode_message({**ack, "cid": m.header["cid"]}))
        except ConnectionClosed:
            pass

    async def logon(self) -> dict[str, Any]:
        return await asyncio.wait_for(self.logons.get(), 5)


class RecordingConnector:
    """The default connector, keeping what each connection was opened with."""

    def __init__(self) -> None:
        self.opened: list[dict[str, Any]] = []

    def __call__(
        self, url: str, handlers: Handlers, *, open_timeout: float, max_size: int | None,
        ssl: Any = None,
    ) -> Awaitable[ClientTransport]:  # fmt: skip
        self.opened.append({"open_timeout": open_timeout, "max_size": max_size, "ssl": ssl})
        return connect_websocket(
            url, handlers, open_timeout=open_timeout, max_size=max_size, ssl=ssl
        )


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(main(), 30)

    asyncio.run(bounded())


def test_client_and_ha_client_open_the_connection_with_the_same_options() -> None:
    async def main() -> None:
        server = LogonServer()
        async with serve(server._handle, "127.0.0.1", 0, compression=None) as ws_server:
            port = ws_server.sockets[0].getsockname()[1]
            url = f"ws://127.0.0.1:{port}/amps/json"
            shared: ClientKeywords = {
                "heartbeat": 30.0,
                "max_size": 1 << 20,
                "connect_timeout": 4.0,
                "queue_size": 7,
            }

            plain = RecordingConnector()
            opts = ClientOptions(connector=plain, user_id="u", password="p", **shared)
            client = Client(url, "plain", options=opts)
            await client.connect()
            plain_logon = await server.logon()
            await client.close()

            ha = RecordingConnector()
            ha_client = HAClient(
                "ha",
                chooser=DefaultServerChooser([url], authenticator=StaticAuthenticator("u", "p")),
                options=ClientOptions(connector=ha, **shared),
            )
            await ha_client.connect_and_logon()
            ha_logon = await server.logon()
            assert ha_client.client is not None
            ha_options = ha_client.client.options
            await ha_client.close()

        assert (
            plain.opened == ha.opened == [{"open_timeout": 4.0, "max_size": 1 << 20, "ssl": None}]
        )
        # every option the HA client does not set itself is the one it was given
        assert ha_options == dataclasses.replace(
            client.options, logon_options="failover,replicated", reused_seq="allow", connector=ha
        )
        same = ("user_id", "pw", "hb")
        assert {k: plain_logon.get(k) for k in same} == {k: ha_logon.get(k) for k in same}
        assert (plain_logon["user_id"], plain_logon["pw"], plain_logon["hb"]) == ("u", "p", 30)
        # what the HA client sets itself
        assert "o" not in plain_logon
        assert ha_logon["o"] == "failover,replicated"

    run(main)


def test_set_heartbeat_replaces_the_heartbeat_option() -> None:
    client = Client("ws://h/amps/json", "c", queue_size=3)
    client.set_heartbeat(1.5)
    assert client.options == ClientOptions(queue_size=3, heartbeat=1.5)
