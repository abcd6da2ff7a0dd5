"""The XML itself and the root: malformed documents, unknown, repeated and unsupported
elements, attributes; ConfigError's text."""

from __future__ import annotations

import pytest

from spool.server.config import (
    ConfigError,
)
from spool.server.protocol.errors import SpoolError
from tests.unit.config.helpers import (
    assert_refused,
    doc,
    parse,
)

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
    (
        "unknown element",
        "<Logging/>",
        "/SpoolConfig/Logging",
        3,
        "unknown element <Logging> in <SpoolConfig> (allowed: Actions, Admin, Bootstrap, DataDirectory, "
        "EventTopics, Group, Name, Replication, SOW, TransactionLog, Transports, Tuning, Users)",
    ),
    (
        "case-sensitive name",
        "<group>g</group>",
        "/SpoolConfig/group",
        3,
        "element names are case-sensitive, did you mean <Group>?",
    ),
    ("typo", "<Transprots/>", "/SpoolConfig/Transprots", 3, "did you mean <Transports>?"),
    (
        "duplicate Name",
        "<Name>u</Name>",
        "/SpoolConfig/Name[2]",
        3,
        "<Name> may appear only once in <SpoolConfig> (first at line 2)",
    ),
    (
        "duplicate Interval",
        "<Admin>\n<Interval>2s</Interval>\n<Interval>3s</Interval>\n</Admin>",
        "/SpoolConfig/Admin/Interval[2]",
        5,
        "<Interval> may appear only once in <Admin> (first at line 4)",
    ),
    (
        "SOW Queue without a log",
        "<SOW>\n<Queue><Name>q</Name></Queue>\n</SOW>",
        "/SpoolConfig/SOW/Queue",
        4,
        "a queue keeps its messages in the transaction log",
    ),
    (
        "Replication without a log",
        "\n<Replication/>",
        "/SpoolConfig/Replication",
        4,
        "<Replication> needs a <TransactionLog>",
    ),
    (
        "Bootstrap without a Topic",
        "<Bootstrap>x</Bootstrap>",
        "/SpoolConfig/Bootstrap",
        3,
        "<Bootstrap> holds elements, not text",
    ),
    (
        "an Action without a Name",
        "<Actions><Action/></Actions>",
        "/SpoolConfig/Actions/Action",
        3,
        "<Action> needs a <Name>",
    ),
    (
        "attribute",
        '<Admin mode="x"/>',
        "/SpoolConfig/Admin",
        3,
        "attributes are not used in Spool's configuration (found mode)",
    ),
    (
        "text in a container",
        "<Admin>\nhello\n</Admin>",
        "/SpoolConfig/Admin",
        3,
        "<Admin> holds elements, not text",
    ),
    (
        "children in a value",
        "<Group>\n<X/></Group>",
        "/SpoolConfig/Group/X",
        4,
        "<Group> takes a value, not child elements (found <X>)",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


# (id, whole document, path, line, fragment)
DOCUMENT_ERRORS: list[tuple[str, str, str, int, str]] = [
    (
        "wrong root",
        "<Foo><Name>x</Name></Foo>",
        "/Foo",
        1,
        "the root element must be <SpoolConfig> (or <AMPSConfig>), not <Foo>",
    ),
    (
        "no Name",
        "<SpoolConfig>\n<Group>g</Group>\n</SpoolConfig>",
        "/SpoolConfig",
        1,
        "<SpoolConfig> needs a <Name>",
    ),
    (
        "mismatched tag",
        "<SpoolConfig>\n<Name>x</Name>\n<Admin>\n</SpoolConfig>",
        "/SpoolConfig/Admin",
        4,
        "malformed XML: mismatched tag",
    ),
    ("empty file", "", "", 1, "malformed XML: no element found"),
    (
        "doctype",
        '<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY a "b">]>\n<SpoolConfig/>',
        "",
        2,
        "a DOCTYPE is not allowed in a configuration file",
    ),
    (
        "processing instruction",
        "<SpoolConfig>\n<Name>x</Name>\n<?foo bar?>\n</SpoolConfig>",
        "/SpoolConfig",
        3,
        "processing instruction <?foo?> is not allowed",
    ),
    (
        "AMPSConfig paths",
        "<AMPSConfig>\n<Name>x</Name>\n<Bogus/>\n</AMPSConfig>",
        "/AMPSConfig/Bogus",
        3,
        "unknown element <Bogus> in <AMPSConfig>",
    ),
    (
        "bad instance name",
        "<SpoolConfig>\n<Name>../etc</Name>\n</SpoolConfig>",
        "/SpoolConfig/Name",
        2,
        "'../etc' is not a valid instance name",
    ),
    (
        "two roots",
        "<SpoolConfig><Name>x</Name></SpoolConfig>\n<SpoolConfig/>",
        "",
        2,
        "malformed XML: junk after document element",
    ),
]


@pytest.mark.parametrize(
    ("text", "path", "line", "fragment"),
    [case[1:] for case in DOCUMENT_ERRORS],
    ids=[case[0] for case in DOCUMENT_ERRORS],
)
def test_document_errors(text: str, path: str, line: int, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(text)
    err = info.value
    assert (err.path, err.line) == (path, line), err.message
    assert fragment in err.message


def test_unencodable_text_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse(doc("<Group>g\ud800</Group>"))
    assert (info.value.path, info.value.line) == ("", 3)
    assert info.value.message == "the text has an unencodable character (column 9)"


def test_config_error_is_a_spool_error_with_readable_str() -> None:
    err = ConfigError("/SpoolConfig/TransactionLog/FlushInterval", 12, "too long")
    assert isinstance(err, SpoolError)
    assert (
        str(err) == "config error at /SpoolConfig/TransactionLog/FlushInterval (line 12): too long"
    )
    assert str(ConfigError("/SpoolConfig/Admin/InetAddr", None, "m")) == (
        "config error at /SpoolConfig/Admin/InetAddr: m"
    )
    assert str(ConfigError("", 3, "m")) == "config error at line 3: m"
    assert str(ConfigError("", None, "m")) == "config error: m"


def test_amps_root_is_the_same_thing() -> None:
    assert parse(doc("<Group>g</Group>", root="AMPSConfig")) == parse(doc("<Group>g</Group>"))
