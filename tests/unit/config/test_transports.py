"""The <Transports> section, and the one shared web address."""

from __future__ import annotations

import pytest

from server.config import (
    TransportConfig,
)
from tests.unit.config.helpers import (
    assert_refused,
    doc,
    parse,
)

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
    (
        "unknown in Transport",
        "<Transports><Transport><Name>w</Name><Type>websocket</Type>\n<Protocol>amps</Protocol>"
        "</Transport></Transports>",
        "/SpoolConfig/Transports/Transport/Protocol",
        4,
        "unknown element <Protocol> in <Transport>",
    ),
    (
        "bad boolean",
        "<Transports><Transport><Name>w</Name><Type>websocket</Type>\n"
        "<PerMessageDeflate>maybe</PerMessageDeflate></Transport></Transports>",
        "/SpoolConfig/Transports/Transport/PerMessageDeflate",
        4,
        "'maybe' is not a boolean (use true/false, yes/no or 1/0)",
    ),
    (
        "transport type",
        "<Transports><Transport><Name>w</Name>\n<Type>tcp</Type></Transport></Transports>",
        "/SpoolConfig/Transports/Transport/Type",
        4,
        "'tcp' is not a valid transport Type (allowed: websocket)",
    ),
    (
        "transport without Type",
        "<Transports>\n<Transport><Name>w</Name></Transport></Transports>",
        "/SpoolConfig/Transports/Transport",
        4,
        "<Transport> needs a <Type>",
    ),
    (
        "transport message type",
        "<Transports><Transport><Name>w</Name><Type>websocket</Type>\n"
        "<MessageType>fix</MessageType></Transport></Transports>",
        "/SpoolConfig/Transports/Transport/MessageType",
        4,
        "'fix' is not a valid MessageType (allowed: json)",
    ),
    # Replication does not exist in this version: nothing serves /replication, so the
    # transport is refused rather than listed as a listener with no route behind it.
    (
        "replication transport",
        "<Transports><Transport><Name>r</Name>\n<Type>amps-replication</Type></Transport>"
        "</Transports>",
        "/SpoolConfig/Transports/Transport/Type",
        4,
        "Type amps-replication is not supported yet (replication between instances is not "
        "available in this version of Spool",
    ),
    (
        "replication transport beside a websocket",
        "<Transports>\n<Transport><Name>websocket-json</Name><Type>websocket</Type></Transport>\n"
        "<Transport><Name>amps-replication</Name><Type>amps-replication</Type>\n"
        "<InetAddr>127.0.0.1:9007</InetAddr></Transport>\n</Transports>",
        "/SpoolConfig/Transports/Transport[2]/Type",
        5,
        "Type amps-replication is not supported yet",
    ),
    (
        "duplicate transport name",
        "<Transports>\n<Transport><Name>w</Name><Type>websocket</Type></Transport>\n"
        "<Transport><Name>w</Name><Type>websocket</Type></Transport>\n</Transports>",
        "/SpoolConfig/Transports/Transport[2]",
        5,
        "duplicate transport name 'w' (first at line 4)",
    ),
    (
        "two websocket transports",
        "<Transports>\n<Transport><Name>a</Name><Type>websocket</Type></Transport>\n"
        "<Transport><Name>b</Name><Type>websocket</Type></Transport>\n</Transports>",
        "/SpoolConfig/Transports/Transport[2]",
        5,
        "only one websocket transport for MessageType json in this version",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


def test_shared_address_is_inherited_where_omitted() -> None:
    transport = (
        "<Transports><Transport><Name>ws</Name><Type>websocket</Type>{}</Transport></Transports>"
    )
    cfg = parse(doc(transport.format("<InetAddr>9300</InetAddr>")))
    assert (cfg.admin.host, cfg.admin.port) == ("127.0.0.1", 9300)
    cfg = parse(doc("<Admin><InetAddr>[::1]:9400</InetAddr></Admin>" + transport.format("")))
    assert [(t.host, t.port) for t in cfg.transports] == [("::1", 9400)]


def test_admin_address_moves_the_implicit_transport() -> None:
    cfg = parse(doc("<Admin><InetAddr>localhost:0</InetAddr></Admin>"))
    assert cfg.transports == (TransportConfig("websocket-json", "websocket", "localhost", 0),)


def test_empty_transports_means_no_listener() -> None:
    assert parse(doc("<Transports/>")).transports == ()


def test_equal_addresses_in_different_spellings_agree() -> None:
    body = (
        "<Admin><InetAddr>[0:0::1]:9007</InetAddr></Admin><Transports><Transport><Name>w</Name>"
        "<Type>websocket</Type><InetAddr>[::1]:9007</InetAddr></Transport></Transports>"
    )
    assert parse(doc(body)).admin.host == "::1"
