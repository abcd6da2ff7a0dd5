"""The client's parts keep to their side: the session state does no I/O, the transport
knows no protocol. (pyproject's import-linter contract covers the package as a whole; this
covers the split inside it.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import spool.server.client

PACKAGE = Path(spool.server.client.__file__).parent


def imported(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", ["errors", "events", "state"])
def test_the_session_state_imports_no_io(module: str) -> None:
    io = {n for n in imported(module) if n.split(".")[0] in {"asyncio", "socket", "websockets"}}
    assert io == set()
    parts = {n for n in imported(module) if n.startswith("spool.server.client.")}
    assert parts <= {"spool.server.client.errors", "spool.server.client.events"}


def test_the_transport_knows_no_protocol() -> None:
    """The transport speaks websocket (its sans-I/O codec), never Spool's protocol."""
    assert {n for n in imported("connection") if n.startswith("spool.server")} == {
        "spool.server.client.websocket"
    }


def test_the_websocket_codec_does_no_io() -> None:
    io = {n for n in imported("websocket") if n.split(".")[0] in {"asyncio", "socket", "ssl"}}
    assert io == set()
    assert {n for n in imported("websocket") if n.startswith("spool.server")} == set()
