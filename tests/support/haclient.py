"""Helpers of the HA client's process tests: brokers on a fixed port (so a restarted broker
is found at the same URI, as a client's server list expects), and reading a log back."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support.server import SpoolProcess, config_xml

_ANY_PORT = "<InetAddr>127.0.0.1:0</InetAddr>"


def free_port() -> int:
    """A port nobody listens on now (the kernel's choice for an ephemeral bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fixed_port_server(workdir: Path, port: int | None = None, **config_kw: object) -> SpoolProcess:
    """A broker whose websocket listener keeps ``port`` across restarts."""
    xml = config_xml(workdir / "data", **config_kw)  # type: ignore[arg-type]
    assert _ANY_PORT in xml
    # the admin API and the websocket listener share one address (docs/configuration.md)
    xml = xml.replace(_ANY_PORT, f"<InetAddr>127.0.0.1:{port or free_port()}</InetAddr>")
    return SpoolProcess(workdir, xml)
