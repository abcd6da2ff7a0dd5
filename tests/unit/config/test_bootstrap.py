"""The <Bootstrap> section and its prerequisites (docs/configuration.md; docs/bootstrap.md)."""

from __future__ import annotations

import pytest

from spool.server.config import BootstrapConfig, ReplicationTopic, ReplicationTransport
from tests.unit.config.helpers import assert_refused, doc, parse

TRANSPORTS = (
    "<Transports><Transport><Name>ws</Name><Type>websocket</Type></Transport>"
    "<Transport><Name>repl</Name><Type>amps-replication</Type></Transport></Transports>"
)
TXLOG = "<TransactionLog><Topic><Name>orders</Name></Topic><Topic><Name>^md</Name></Topic></TransactionLog>"
SOW = "<SOW><Topic><Name>orders</Name><Key>/id</Key></Topic></SOW>"
SOURCE = "<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9107</InetAddr></Transport>"


def boot(*inner: str) -> str:
    """Transports (line 3), the log (4), SOW (5), then <Bootstrap> on line 6."""
    return "\n".join([TRANSPORTS, TXLOG, SOW, "<Bootstrap>" + "".join(inner) + "</Bootstrap>"])


def test_a_bootstrap_with_everything() -> None:
    cfg = parse(
        doc(
            boot(
                "<Topic><Name>orders</Name><MessageType>json</MessageType></Topic>",
                "<Topic><Name>^md</Name></Topic>",
                "<DataType>txlog,sow</DataType>",
                "<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9107</InetAddr>"
                "<InetAddr>127.0.0.1:9207</InetAddr><User>repl</User><Password>pw</Password>"
                "</Transport>",
            )
        )
    )
    assert cfg.bootstrap == BootstrapConfig(
        topics=(ReplicationTopic("orders"), ReplicationTopic("^md", is_regex=True)),
        data_types=frozenset({"txlog", "sow"}),
        transport=ReplicationTransport(
            addresses=(("127.0.0.1", 9107), ("127.0.0.1", 9207)), user="repl", secret="pw"
        ),
    )
    assert cfg.bootstrap.takes("orders") and cfg.bootstrap.takes("mdx")
    assert not cfg.bootstrap.takes("other")


def test_txlog_and_sow_may_name_plain_topics() -> None:
    cfg = parse(doc(boot("<Topic><Name>mdx</Name></Topic><DataType>txlog,sow</DataType>", SOURCE)))
    assert cfg.bootstrap is not None and cfg.bootstrap.data_types == {"txlog", "sow"}


def test_data_type_defaults_to_txlog() -> None:
    cfg = parse(doc(boot("<Topic><Name>orders</Name></Topic>", SOURCE)))
    assert cfg.bootstrap is not None
    assert cfg.bootstrap.data_types == frozenset({"txlog"})


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [
        (boot(SOURCE), "/SpoolConfig/Bootstrap", 6, "needs at least one <Topic>"),
        (
            boot("<Topic><Name>orders</Name><Filter>/a = 1</Filter></Topic>", SOURCE),
            "/SpoolConfig/Bootstrap/Topic/Filter",
            6,
            "unknown element <Filter>",
        ),
        (
            boot("<Topic><Name>orders</Name></Topic><DataType>journal</DataType>", SOURCE),
            "/SpoolConfig/Bootstrap/DataType",
            6,
            "'journal' is not a bootstrap DataType",
        ),
        (
            boot("<Topic><Name>orders</Name></Topic><DataType>sow,sow</DataType>", SOURCE),
            "/SpoolConfig/Bootstrap/DataType",
            6,
            "given twice",
        ),
        (
            boot("<Topic><Name>orders</Name></Topic>"),
            "/SpoolConfig/Bootstrap",
            6,
            "<Bootstrap> needs a <Transport>",
        ),
        (
            boot(
                "<Topic><Name>orders</Name></Topic>",
                "<Transport><Type>amps-replication</Type></Transport>",
            ),
            "/SpoolConfig/Bootstrap/Transport",
            6,
            "needs at least one <InetAddr>",
        ),
        (
            boot("<Topic><Name>other</Name></Topic>", SOURCE),
            "/SpoolConfig/Bootstrap/Topic",
            6,
            "'other' is not recorded by this instance's transaction log",
        ),
        (
            boot(
                "<Topic><Name>^md</Name></Topic><Topic><Name>orders</Name></Topic>"
                "<Topic><Name>mdx</Name></Topic><DataType>sow</DataType>",
                SOURCE,
            ),
            "/SpoolConfig/Bootstrap/Topic[3]",
            6,
            "'mdx' has no local SOW definition",
        ),
        (
            f"<Bootstrap><Topic><Name>a</Name></Topic>{SOURCE}</Bootstrap>",
            "/SpoolConfig/Bootstrap",
            3,
            "<Bootstrap> needs a <TransactionLog>",
        ),
        (
            "\n".join(
                [TXLOG, f"<Bootstrap><Topic><Name>orders</Name></Topic>{SOURCE}</Bootstrap>"]
            ),
            "/SpoolConfig/Bootstrap",
            4,
            "needs an amps-replication transport",
        ),
    ],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)
