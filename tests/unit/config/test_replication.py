"""The <Replication> section, the amps-replication transport and their cross-checks."""

from __future__ import annotations

import pytest

from spool.server.config import (
    DestinationConfig,
    ReplicationConfig,
    ReplicationTopic,
    ReplicationTransport,
)
from tests.unit.config.helpers import TOKEN, assert_refused, doc, parse

TXLOG = "<TransactionLog><Topic><Name>orders</Name></Topic><Topic><Name>^md</Name></Topic></TransactionLog>"


def repl(*lines: str) -> str:
    """A TransactionLog (line 3) then <Replication> whose first inner line is file line 5."""
    return "\n".join([TXLOG, "<Replication>", *lines, "</Replication>"])


def dest(*inner: str, name: str = "b", sync: str = "sync") -> str:
    transport = (
        "<Transport><Type>amps-replication</Type><InetAddr>127.0.0.1:9107</InetAddr></Transport>"
    )
    body = "".join(inner)
    if "<Topic>" not in body:
        body += "<Topic><Name>orders</Name></Topic>"
    if "<Transport>" not in body:
        body += transport
    return f"<Destination><Name>{name}</Name><SyncType>{sync}</SyncType>{body}</Destination>"


def test_a_destination_with_everything() -> None:
    cfg = parse(
        doc(
            repl(
                "<AckInterval>5ms</AckInterval>",
                dest(
                    "<Group>g1</Group><PassThrough>^nyc</PassThrough><PassThrough>^ldn</PassThrough>",
                    "<Topic><Name>^md</Name><Filter>/px > 1</Filter>"
                    "<ExcludeValidation>txlog, cascade</ExcludeValidation></Topic>",
                    "<Topic><Name>orders</Name></Topic>",
                    "<Transport><Name>to-b</Name><Type>amps-replication</Type>"
                    "<InetAddr>127.0.0.1:9107</InetAddr><InetAddr>[::1]:9207</InetAddr>"
                    "<Compression>zstd</Compression><User>repl</User><Token>${RT}</Token></Transport>",
                ),
                dest(name="c", sync="async"),
            )
        ),
        env={"RT": TOKEN},
    )
    assert cfg.replication == ReplicationConfig(
        destinations=(
            DestinationConfig(
                name="b",
                group="g1",
                sync=True,
                topics=(
                    ReplicationTopic(
                        "^md",
                        is_regex=True,
                        filter="/px > 1",
                        exclude_validation=frozenset({"txlog", "cascade"}),
                    ),
                    ReplicationTopic("orders"),
                ),
                passthrough=("^nyc", "^ldn"),
                transport=ReplicationTransport(
                    (("127.0.0.1", 9107), ("::1", 9207)), "zstd", "repl", TOKEN
                ),
            ),
            DestinationConfig(
                name="c",
                group="c",  # the Group defaults to the Name
                sync=False,
                topics=(ReplicationTopic("orders"),),
                passthrough=(".*",),  # no <PassThrough>: every group
                transport=ReplicationTransport((("127.0.0.1", 9107),)),
            ),
        ),
        ack_interval=0.005,
    )
    b = cfg.replication.destinations[0]
    assert b.topics[0].matches("md.ibm") and not b.topics[0].matches("orders")
    assert b.topics[1].matches("orders") and not b.topics[1].matches("orders2")
    assert TOKEN not in repr(cfg.replication)  # secrets stay out of repr
    assert b.sync_type == "sync" and cfg.replication.destination("c") is not None


def test_an_empty_passthrough_passes_no_group_on() -> None:
    cfg = parse(doc(repl(dest("<PassThrough/>"), dest("<PassThrough></PassThrough>", name="c"))))
    assert cfg.replication is not None
    assert [d.passthrough for d in cfg.replication.destinations] == [(), ()]


def test_a_destination_without_an_address_is_passive() -> None:
    cfg = parse(
        doc(repl(dest("<Transport><Type>amps-replication</Type><Compression>zstd</Compression>"
                      "<User>repl</User><Token>${RT}</Token></Transport>"))),
        env={"RT": TOKEN},
    )  # fmt: skip
    assert cfg.replication is not None
    (b,) = cfg.replication.destinations
    assert b.passive and b.transport.addresses == () and b.transport.compression == "zstd"
    assert b.transport.user == "repl"
    assert not parse(doc(repl(dest()))).replication.destinations[0].passive  # type: ignore[union-attr]


def test_minimum_sync_destinations_up_to_the_sync_ones() -> None:
    cfg = parse(
        doc(
            repl(dest(), dest(name="c"))
            + "\n<Tuning><MinimumSyncDestinations>2</MinimumSyncDestinations></Tuning>"
        )
    )
    assert cfg.tuning.minimum_sync_destinations == 2


# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
    (
        "no SyncType",
        repl("<Destination><Name>b</Name><Topic><Name>orders</Name></Topic></Destination>"),
        "/SpoolConfig/Replication/Destination",
        5,
        "<Destination> needs a <SyncType> (sync or async)",
    ),
    (
        "bad SyncType",
        repl(dest(sync="sometimes")),
        "/SpoolConfig/Replication/Destination/SyncType",
        5,
        "'sometimes' is not a valid SyncType (allowed: sync, async)",
    ),
    (
        "no Topic",
        repl(
            "<Destination><Name>b</Name><SyncType>sync</SyncType><Transport>"
            "<Type>amps-replication</Type><InetAddr>h:1</InetAddr></Transport></Destination>"
        ),
        "/SpoolConfig/Replication/Destination",
        5,
        "<Destination> needs at least one <Topic> (it would replicate nothing)",
    ),
    (
        "duplicate destination",
        repl(dest(), dest()),
        "/SpoolConfig/Replication/Destination[2]",
        6,
        "duplicate destination name 'b' (first at line 5)",
    ),
    (
        "destination named like the instance",
        repl(dest(name="t")),
        "/SpoolConfig/Replication/Destination/Name",
        5,
        "a destination cannot be this instance itself ('t')",
    ),
    (
        "bad filter",
        repl(dest("<Topic><Name>orders</Name><Filter>/qty >></Filter></Topic>")),
        "/SpoolConfig/Replication/Destination/Topic/Filter",
        5,
        "the Filter does not compile",
    ),
    (
        "bad passthrough regex",
        repl(dest("<PassThrough>(</PassThrough>")),
        "/SpoolConfig/Replication/Destination/PassThrough",
        5,
        "'(' is not a valid regular expression",
    ),
    (
        "an empty passthrough beside patterns",
        repl(dest("<PassThrough>^nyc</PassThrough><PassThrough/>")),
        "/SpoolConfig/Replication/Destination/PassThrough[2]",
        5,
        "an empty <PassThrough/> means no group passes through: it cannot be combined",
    ),
    (
        "unknown check",
        repl(
            dest(
                "<Topic><Name>orders</Name><ExcludeValidation>sow,nope</ExcludeValidation></Topic>"
            )
        ),
        "/SpoolConfig/Replication/Destination/Topic/ExcludeValidation",
        5,
        "unknown validation check 'nope'",
    ),
    (
        "queue cannot be excluded",
        repl(
            dest("<Topic><Name>orders</Name><ExcludeValidation>queue</ExcludeValidation></Topic>")
        ),
        "/SpoolConfig/Replication/Destination/Topic/ExcludeValidation",
        5,
        "the 'queue' check cannot be excluded",
    ),
    (
        "queue_underlying cannot be excluded",
        repl(
            dest(
                "<Topic><Name>orders</Name>"
                "<ExcludeValidation>queue_underlying</ExcludeValidation></Topic>"
            )
        ),
        "/SpoolConfig/Replication/Destination/Topic/ExcludeValidation",
        5,
        "the 'queue_underlying' check cannot be excluded",
    ),
    (
        "topic the log does not record",
        repl(dest("<Topic><Name>trades</Name></Topic>")),
        "/SpoolConfig/Replication/Destination/Topic",
        5,
        "destination 'b' replicates 'trades', which the transaction log does not record",
    ),
    (
        "a passive destination with TLS",
        repl(dest("<Transport><Type>amps-replication</Type><TLS>true</TLS></Transport>")),
        "/SpoolConfig/Replication/Destination/Transport/TLS",
        5,
        "a passive destination (no <InetAddr>) rides the connection its peer dials",
    ),
    (
        "websocket transport type",
        repl(dest("<Transport><Type>websocket</Type><InetAddr>h:1</InetAddr></Transport>")),
        "/SpoolConfig/Replication/Destination/Transport/Type",
        5,
        "'websocket' is not a valid replication transport Type (allowed: amps-replication)",
    ),
    (
        "address without a port",
        repl(dest("<Transport><Type>amps-replication</Type><InetAddr>h:0</InetAddr></Transport>")),
        "/SpoolConfig/Replication/Destination/Transport/InetAddr",
        5,
        "a destination's InetAddr needs a port",
    ),
    (
        "user without a secret",
        repl(
            dest(
                "<Transport><Type>amps-replication</Type><InetAddr>h:1</InetAddr>"
                "<User>r</User></Transport>"
            )
        ),
        "/SpoolConfig/Replication/Destination/Transport",
        5,
        "<User> 'r' needs a <Password> or a <Token>",
    ),
    (
        "password and token",
        repl(
            dest(
                "<Transport><Type>amps-replication</Type><InetAddr>h:1</InetAddr>"
                f"<User>r</User><Password>x</Password><Token>{TOKEN}</Token></Transport>"
            )
        ),
        "/SpoolConfig/Replication/Destination/Transport/Token",
        5,
        "a <Password> or a <Token>, not both",
    ),
    (
        "bad compression",
        repl(
            dest(
                "<Transport><Type>amps-replication</Type><InetAddr>h:1</InetAddr>"
                "<Compression>gzip</Compression></Transport>"
            )
        ),
        "/SpoolConfig/Replication/Destination/Transport/Compression",
        5,
        "'gzip' is not a valid Compression (allowed: zstd, none)",
    ),
    (
        "ack interval too long",
        repl("<AckInterval>2s</AckInterval>"),
        "/SpoolConfig/Replication/AckInterval",
        5,
        "AckInterval must be between",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


def test_more_than_64_sync_destinations_are_refused() -> None:
    body = repl(*(dest(name=f"d{i}") for i in range(65)))
    assert_refused(
        body,
        "/SpoolConfig/Replication/Destination[65]/SyncType",
        69,
        "at most 64 destinations can be sync",
    )


def test_the_inbound_transport_is_served_with_a_log() -> None:
    cfg = parse(
        doc(
            TXLOG + "\n<Transports><Transport><Name>w</Name><Type>websocket</Type></Transport>"
            "<Transport><Name>r</Name><Type>amps-replication</Type><Enabled>false</Enabled>"
            "</Transport></Transports>"
        )
    )
    inbound = cfg.replication_transport
    assert inbound is not None and inbound.name == "r" and not inbound.enabled
    assert cfg.replicates and cfg.replication is None
    assert not parse(doc(TXLOG)).replicates


def test_a_local_queue_named_by_a_destination_is_refused() -> None:
    """A LocalQueue is this instance's alone: a block naming it is refused where it is; its
    underlying topic, or a pattern that matches its name, is fine."""
    log = "<TransactionLog><Topic><Name>work-in</Name></Topic><Topic><Name>work</Name></Topic></TransactionLog>"
    sow = "<SOW><LocalQueue><Name>work</Name><UnderlyingTopic>work-in</UnderlyingTopic></LocalQueue></SOW>"
    named = "\n".join([log, "<Replication>", dest("<Topic><Name>work</Name></Topic>"),
                       "</Replication>", sow])  # fmt: skip
    assert_refused(named, "/SpoolConfig/Replication/Destination/Topic", 5,
                   "replicates 'work', a LocalQueue")  # fmt: skip
    for block in ("<Topic><Name>work-in</Name></Topic>", "<Topic><Name>^wo</Name></Topic>"):
        parse(doc("\n".join([log, "<Replication>", dest(block), "</Replication>", sow])))
