"""The fabric page's peers and CSP (web/fabric.py): exactly the configured origins."""

from __future__ import annotations

from spool.server.config import parse_config
from spool.web.fabric import fabric_csp, fabric_peer_origins
from spool.web.headers import CSP

XML = """<SpoolConfig><Name>a</Name>
<Admin><AllowedOrigins>https://ops.example.com http://127.0.0.1:9107</AllowedOrigins></Admin>
<Transports><Transport><Name>r</Name><Type>amps-replication</Type></Transport></Transports>
<TransactionLog><Topic><Name>md</Name></Topic></TransactionLog>
<Replication>
<Destination><Name>b</Name><SyncType>sync</SyncType><Topic><Name>md</Name></Topic>
<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9107</InetAddr>
<InetAddr>127.0.0.1:9108</InetAddr></Transport></Destination>
</Replication></SpoolConfig>"""


def test_destinations_then_allowed_origins_without_repeats() -> None:
    config = parse_config(XML)
    assert fabric_peer_origins(config) == [
        "http://127.0.0.1:9107", "http://127.0.0.1:9108", "https://ops.example.com",
    ]  # fmt: skip
    csp = fabric_csp(config)
    assert (
        "connect-src 'self' http://127.0.0.1:9107 http://127.0.0.1:9108 https://ops.example.com"
        in csp
    )
    # nothing else loosens
    assert (
        csp.replace(" http://127.0.0.1:9107 http://127.0.0.1:9108 https://ops.example.com", "")
        == CSP
    )


def test_an_instance_without_peers_keeps_the_dashboard_csp() -> None:
    config = parse_config(
        "<SpoolConfig><Name>a</Name><TransactionLog><Topic><Name>md</Name></Topic>"
        "</TransactionLog></SpoolConfig>"
    )
    assert fabric_peer_origins(config) == []
    assert fabric_csp(config) == CSP
