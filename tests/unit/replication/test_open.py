"""``Replication.open``: the one dispatch of a ``/replication`` connection's first bytes
(the web endpoint and the in-memory fabric both use it). A bootstrap request is served
even by an instance that is bootstrapping itself; a link only by a ready one."""

from __future__ import annotations

from pathlib import Path

import pytest

from spool.server.clock import VirtualClock
from spool.server.peer import Peer
from spool.server.replication.bootsource import BootstrapSource
from spool.server.replication.errors import NotAccepting
from spool.server.replication.frames import PROTOCOL_VERSION, Bootstrap, Hello, encode
from spool.server.replication.inbound import InboundLink
from spool.server.replication.service import Replication
from tests.support.engine import EngineHarness
from tests.support.fabric import B, C, scenario, xml
from tests.support.replication import MemoryFabric, bootstrap_xml

HELLO = encode(Hello(PROTOCOL_VERSION, "a", "a", "b", "", None, None, None, {}))
BOOTSTRAP = encode(
    Bootstrap(PROTOCOL_VERSION, "c", "c", None, None, [("orders", False)], ["txlog"], 0,
              False, None)
)  # fmt: skip


class _Pipe:
    """A transport that keeps what is written to it."""

    remote = "127.0.0.1:40000"

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, data: bytes) -> None:
        self.sent.append(data)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        return None


def _open(replication: Replication, first: bytes) -> InboundLink | BootstrapSource:
    return replication.open(first, _Pipe(), Peer("127.0.0.1", 40000), list, None)


@scenario
async def test_a_bootstrapping_instance_serves_bootstrap_requests_but_refuses_links(
    tmp_path: Path,
) -> None:
    fabric, clock = MemoryFabric(), VirtualClock()
    # b bootstraps from an address nobody serves: it waits, not ready
    h = EngineHarness(tmp_path / "b", xml(tmp_path, "b", bootstrap=bootstrap_xml(["orders"], [C])),
                      clock=clock, connector=fabric.connector("b"))  # fmt: skip
    fabric.register(B, h.broker)
    await h.__aenter__()
    try:
        replication = h.broker.replication
        assert replication is not None and not h.broker.ready
        with pytest.raises(NotAccepting, match="not accepting replication"):
            _open(replication, HELLO)
        assert replication.inbound == {}
        copy = _open(replication, BOOTSTRAP)
        assert isinstance(copy, BootstrapSource)
        copy.lost()
        await copy.wait()
    finally:
        await h.__aexit__(None, None, None)
        await fabric.close()


@scenario
async def test_a_ready_instance_opens_a_link_for_a_hello(tmp_path: Path) -> None:
    async with EngineHarness(tmp_path / "b", xml(tmp_path, "b"), clock=VirtualClock()) as h:
        replication = h.broker.replication
        assert replication is not None and h.broker.ready
        link = _open(replication, HELLO)
        assert isinstance(link, InboundLink)
        link.lost()
        copy = _open(replication, BOOTSTRAP)
        assert isinstance(copy, BootstrapSource)
        copy.lost()
        await copy.wait()
