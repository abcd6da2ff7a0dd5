"""The <Transports> section, and the one shared web address."""

from __future__ import annotations

import pytest

from spool.server.config import (
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
        "'tcp' is not a valid transport Type (allowed: websocket, amps-replication)",
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
    # The replication endpoint records what it receives: it needs the log.
    (
        "replication transport without a log",
        "<Transports>\n<Transport><Name>r</Name><Type>amps-replication</Type></Transport>"
        "</Transports>",
        "/SpoolConfig/Transports/Transport",
        4,
        "an amps-replication transport needs a <TransactionLog>",
    ),
    (
        "replication transport with a message type",
        "<Transports><Transport><Name>r</Name><Type>amps-replication</Type>\n"
        "<MessageType>json</MessageType></Transport></Transports>",
        "/SpoolConfig/Transports/Transport/MessageType",
        4,
        "<MessageType> does not apply to an amps-replication transport",
    ),
    (
        "two replication transports",
        "<Transports>\n<Transport><Name>r1</Name><Type>amps-replication</Type></Transport>\n"
        "<Transport><Name>r2</Name><Type>amps-replication</Type></Transport>\n</Transports>",
        "/SpoolConfig/Transports/Transport[2]",
        5,
        "only one amps-replication transport (the HTTP server has one /replication endpoint)",
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
