"""The XML configuration loader: every refusal with its exact path and line, and what loads."""

from __future__ import annotations

import base64
import dataclasses
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.config import (
    EXPLICIT_ARCHIVE_DIRECTORY,
    EXPLICIT_JOURNAL_DIRECTORY,
    EXPLICIT_STATS_FILE,
    AdminConfig,
    Config,
    ConfigError,
    InetAddrError,
    TopicRule,
    TransactionLogConfig,
    TransportConfig,
    TuningConfig,
    UserConfig,
    default_config,
    format_inet_addr,
    is_loopback,
    is_regex_topic,
    load_config,
    parse_config,
    parse_inet_addr,
    render_default_xml,
    with_overrides,
)
from server.protocol.errors import SpoolError

MB = 1024 * 1024
SALT = base64.b64encode(bytes(range(16))).decode()
DIGEST = base64.b64encode(bytes(range(100, 132))).decode()
HASH = f"scrypt$16384$8$1${SALT}${DIGEST}"
TOKEN = "tok-SECRET-0123456789abcdef"
TOKEN2 = "tok-OTHER-0123456789abcdef"
USERS = f"<Users><User><Name>ops</Name><Token>{TOKEN}</Token></User></Users>"
BASE = Path("/srv/spool")


def doc(body: str, root: str = "SpoolConfig") -> str:
    """A file whose body starts on line 3 (line 1 the root, line 2 the Name)."""
    return f"<{root}>\n<Name>t</Name>\n{body}\n</{root}>\n"


def parse(text: str, env: dict[str, str] | None = None) -> Config:
    return parse_config(text, base_dir=BASE, env=env if env is not None else {})


def txlog(*lines: str) -> str:
    """A TransactionLog whose first inner line is the body's line 2 (file line 4)."""
    return "\n".join(
        ["<TransactionLog>", *lines, "<Topic><Name>a</Name></Topic>", "</TransactionLog>"]
    )


# (id, body, path, line, fragment of the message)
BODY_ERRORS: list[tuple[str, str, str, int, str]] = [
    # structure
    (
        "unknown element",
        "<Logging/>",
        "/SpoolConfig/Logging",
        3,
        "unknown element <Logging> in <SpoolConfig> (allowed: Admin, DataDirectory, Group, Name, "
        "TransactionLog, Transports, Tuning, Users)",
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
    ("SOW", "<SOW>\n<Topic/>\n</SOW>", "/SpoolConfig/SOW", 3, "<SOW> is not supported yet"),
    (
        "Replication",
        "\n<Replication/>",
        "/SpoolConfig/Replication",
        4,
        "<Replication> is not supported yet",
    ),
    (
        "Bootstrap",
        "<Bootstrap>x</Bootstrap>",
        "/SpoolConfig/Bootstrap",
        3,
        "<Bootstrap> is not supported yet",
    ),
    (
        "Actions",
        "<Actions><Action/></Actions>",
        "/SpoolConfig/Actions",
        3,
        "<Actions> is not supported yet",
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
    (
        "unsafe group",
        "<Group>a/b</Group>",
        "/SpoolConfig/Group",
        3,
        "'a/b' is not a valid group name",
    ),
    ("hidden group", "<Group>.g</Group>", "/SpoolConfig/Group", 3, "not starting with . or -"),
    ("empty value", "<Group></Group>", "/SpoolConfig/Group", 3, "<Group> must not be empty"),
    (
        "unknown variable",
        "<Group>${NOPE}</Group>",
        "/SpoolConfig/Group",
        3,
        "environment variable NOPE is not set (used as ${NOPE})",
    ),
    (
        "malformed variable",
        "<Group>${1x}</Group>",
        "/SpoolConfig/Group",
        3,
        "malformed ${...} reference",
    ),
    (
        "unterminated variable",
        "<Group>${X</Group>",
        "/SpoolConfig/Group",
        3,
        "malformed ${...} reference",
    ),
    (
        "unknown in Tuning",
        "<Tuning>\n<Foo>1</Foo>\n</Tuning>",
        "/SpoolConfig/Tuning/Foo",
        4,
        "unknown element <Foo> in <Tuning>",
    ),
    (
        "unknown in Transport",
        "<Transports><Transport><Name>w</Name><Type>websocket</Type>\n<Protocol>amps</Protocol>"
        "</Transport></Transports>",
        "/SpoolConfig/Transports/Transport/Protocol",
        4,
        "unknown element <Protocol> in <Transport>",
    ),
    # units and ranges
    (
        "FlushInterval too long",
        txlog("<FlushInterval>200ms</FlushInterval>"),
        "/SpoolConfig/TransactionLog/FlushInterval",
        4,
        "FlushInterval must be between 30us and 100ms, got 200ms",
    ),
    (
        "FlushInterval too short",
        txlog("<FlushInterval>10us</FlushInterval>"),
        "/SpoolConfig/TransactionLog/FlushInterval",
        4,
        "got 10us",
    ),
    (
        "FlushInterval bad unit",
        txlog("<FlushInterval>1 parsec</FlushInterval>"),
        "/SpoolConfig/TransactionLog/FlushInterval",
        4,
        "'1 parsec' is not a valid duration: unknown unit 'parsec'",
    ),
    (
        "Admin Interval",
        "<Admin>\n<Interval>500ms</Interval>\n</Admin>",
        "/SpoolConfig/Admin/Interval",
        4,
        "Interval must be between 1s and 1d, got 500ms",
    ),
    (
        "negative prealloc",
        txlog("<PreallocatedJournalFiles>-1</PreallocatedJournalFiles>"),
        "/SpoolConfig/TransactionLog/PreallocatedJournalFiles",
        4,
        "'-1' is not a whole number",
    ),
    (
        "too many prealloc",
        txlog("<PreallocatedJournalFiles>101</PreallocatedJournalFiles>"),
        "/SpoolConfig/TransactionLog/PreallocatedJournalFiles",
        4,
        "PreallocatedJournalFiles must be between 0 and 100, got 101",
    ),
    (
        "small JournalSize",
        txlog("<JournalSize>512KB</JournalSize>"),
        "/SpoolConfig/TransactionLog/JournalSize",
        4,
        "JournalSize must be between 1MB and 1TB, got 512KB",
    ),
    (
        "JournalSize bad unit",
        txlog("<JournalSize>64XB</JournalSize>"),
        "/SpoolConfig/TransactionLog/JournalSize",
        4,
        "'64XB' is not a valid size: unknown unit 'XB'",
    ),
    (
        "MaxSize below the journals",
        txlog("<MaxSize>100MB</MaxSize>"),
        "/SpoolConfig/TransactionLog/MaxSize",
        4,
        "MaxSize (100MB) is smaller than the active and preallocated journals",
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
        "bad MetricsPublic",
        "<Admin><MetricsPublic>on</MetricsPublic></Admin>",
        "/SpoolConfig/Admin/MetricsPublic",
        3,
        "'on' is not a boolean",
    ),
    (
        "StatsRetention below Interval",
        "<Admin><Interval>1m</Interval>\n<StatsRetention>30s</StatsRetention></Admin>",
        "/SpoolConfig/Admin/StatsRetention",
        4,
        "StatsRetention (30s) is shorter than the sampling Interval (1m)",
    ),
    (
        "HeartbeatDefault",
        "<Tuning>\n<HeartbeatDefault>500ms</HeartbeatDefault>\n</Tuning>",
        "/SpoolConfig/Tuning/HeartbeatDefault",
        4,
        "HeartbeatDefault must be between 1s and 1h (or 0), got 500ms",
    ),
    (
        "MinimumSyncDestinations",
        "<Tuning><MinimumSyncDestinations>x</MinimumSyncDestinations></Tuning>",
        "/SpoolConfig/Tuning/MinimumSyncDestinations",
        3,
        "'x' is not a whole number",
    ),
    (
        "MaxMessageSize over the client buffer",
        "<Transports><Transport><Name>w</Name><Type>websocket</Type>\n"
        "<MaxMessageSize>32MB</MaxMessageSize></Transport></Transports>\n"
        "<Tuning><SlowClientBufferLimit>16MB</SlowClientBufferLimit></Tuning>",
        "/SpoolConfig/Transports/Transport/MaxMessageSize",
        4,
        "MaxMessageSize of transport 'w' (32MB) exceeds Tuning/SlowClientBufferLimit (16MB)",
    ),
    (
        "client buffer under the implicit transport",
        "<Tuning>\n<SlowClientBufferLimit>1MB</SlowClientBufferLimit></Tuning>",
        "/SpoolConfig/Tuning/SlowClientBufferLimit",
        4,
        "smaller than the MaxMessageSize (16MB) of the implicit 'websocket-json' transport",
    ),
    # transports and addresses
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
    (
        "message type on replication",
        "<Transports><Transport><Name>r</Name><Type>amps-replication</Type>\n"
        "<MessageType>json</MessageType></Transport></Transports>",
        "/SpoolConfig/Transports/Transport/MessageType",
        4,
        "MessageType does not apply to an amps-replication transport",
    ),
    (
        "duplicate transport name",
        "<Transports>\n<Transport><Name>w</Name><Type>websocket</Type></Transport>\n"
        "<Transport><Name>w</Name><Type>amps-replication</Type></Transport>\n</Transports>",
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
    (
        "addresses differ",
        "<Admin><InetAddr>127.0.0.1:9007</InetAddr></Admin>\n<Transports><Transport><Name>w</Name>"
        "<Type>websocket</Type>\n<InetAddr>127.0.0.1:9008</InetAddr></Transport></Transports>",
        "/SpoolConfig/Transports/Transport/InetAddr",
        5,
        "all transports and Admin must share one InetAddr in this version",
    ),
    (
        "admin off loopback",
        "<Admin>\n<InetAddr>0.0.0.0:9007</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        4,
        "binding a non-loopback address requires <Users> (authentication)",
    ),
    (
        "transport off loopback",
        "<Transports><Transport><Name>w</Name><Type>websocket</Type>\n"
        "<InetAddr>[::]:9007</InetAddr></Transport></Transports>",
        "/SpoolConfig/Transports/Transport/InetAddr",
        4,
        "binding a non-loopback address requires <Users> (authentication); [::]:9007",
    ),
    (
        "hostname off loopback",
        "<Admin><InetAddr>spool.example.com:9007</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "binding a non-loopback address requires <Users>",
    ),
    (
        "address without port",
        "<Admin><InetAddr>localhost</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "'localhost' has no port (expected HOST:PORT)",
    ),
    (
        "IPv6 without brackets",
        "<Admin><InetAddr>::1:9007</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "an IPv6 address needs brackets, e.g. [::1]:9007",
    ),
    (
        "port out of range",
        "<Admin><InetAddr>127.0.0.1:70000</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "port 70000 is out of range",
    ),
    (
        "bad host",
        "<Admin><InetAddr>bad_host:1</InetAddr></Admin>",
        "/SpoolConfig/Admin/InetAddr",
        3,
        "'bad_host' is neither an IP address nor a valid host name",
    ),
    (
        "token auth without users",
        "<Admin>\n<Authentication>token</Authentication>\n</Admin>",
        "/SpoolConfig/Admin/Authentication",
        4,
        "Authentication token requires <Users>",
    ),
    (
        "no auth with users",
        f"<Admin><Authentication>none</Authentication></Admin>\n{USERS}",
        "/SpoolConfig/Admin/Authentication",
        3,
        "Authentication none contradicts <Users>",
    ),
    (
        "unknown auth",
        "<Admin><Authentication>basic</Authentication></Admin>",
        "/SpoolConfig/Admin/Authentication",
        3,
        "'basic' is not a valid Authentication (allowed: none, token)",
    ),
    # transaction log topics
    (
        "bad topic regex",
        "<TransactionLog>\n<Topic><Name>^(orders</Name></Topic>\n</TransactionLog>",
        "/SpoolConfig/TransactionLog/Topic/Name",
        4,
        "'^(orders' is not a valid regular expression: missing ), unterminated subpattern",
    ),
    (
        "topic message type",
        "<TransactionLog>\n<Topic><Name>a</Name>\n<MessageType>xml</MessageType></Topic>\n</TransactionLog>",
        "/SpoolConfig/TransactionLog/Topic/MessageType",
        5,
        "'xml' is not a valid MessageType",
    ),
    (
        "duplicate topic",
        "<TransactionLog>\n<Topic><Name>a</Name></Topic>\n<Topic><Name>a</Name></Topic>\n</TransactionLog>",
        "/SpoolConfig/TransactionLog/Topic[2]",
        5,
        "duplicate Topic 'a' (first at line 4)",
    ),
    (
        "topic without name",
        "<TransactionLog>\n<Topic></Topic>\n</TransactionLog>",
        "/SpoolConfig/TransactionLog/Topic",
        4,
        "<Topic> needs a <Name>",
    ),
    (
        "no topics",
        "<TransactionLog>\n<JournalSize>1MB</JournalSize>\n</TransactionLog>",
        "/SpoolConfig/TransactionLog",
        3,
        "<TransactionLog> needs at least one <Topic>",
    ),
    (
        "archive is the journal",
        txlog(
            "<JournalDirectory>/j</JournalDirectory>",
            "<JournalArchiveDirectory>/j</JournalArchiveDirectory>",
        ),
        "/SpoolConfig/TransactionLog/JournalArchiveDirectory",
        5,
        "JournalArchiveDirectory must differ from JournalDirectory",
    ),
    (
        "journal is the default archive",
        "<DataDirectory>/d</DataDirectory>\n"
        + txlog("<JournalDirectory>/d/archive</JournalDirectory>"),
        "/SpoolConfig/TransactionLog/JournalDirectory",
        5,
        "JournalDirectory must differ from JournalArchiveDirectory",
    ),
    # users
    ("empty Users", "<Users>\n</Users>", "/SpoolConfig/Users", 3, "<Users> is empty"),
    (
        "user without credentials",
        "<Users>\n<User><Name>u</Name><Admin>true</Admin></User>\n</Users>",
        "/SpoolConfig/Users/User",
        4,
        "user 'u' needs a <PasswordHash> or a <Token> (or both)",
    ),
    (
        "hash shape",
        "<Users><User><Name>u</Name>\n<PasswordHash>md5$abc</PasswordHash></User></Users>",
        "/SpoolConfig/Users/User/PasswordHash",
        4,
        "PasswordHash must have the form scrypt$N$r$p$salt_b64$hash_b64",
    ),
    (
        "hash N",
        f"<Users><User><Name>u</Name>\n<PasswordHash>scrypt$1000$8$1${SALT}${DIGEST}"
        "</PasswordHash></User></Users>",
        "/SpoolConfig/Users/User/PasswordHash",
        4,
        "N must be a power of two >= 2",
    ),
    (
        "hash base64",
        "<Users><User><Name>u</Name>\n<PasswordHash>scrypt$16384$8$1$!!!$"
        f"{DIGEST}</PasswordHash></User></Users>",
        "/SpoolConfig/Users/User/PasswordHash",
        4,
        "the salt is not base64",
    ),
    (
        "short token",
        "<Users><User><Name>u</Name>\n<Token>abc</Token></User></Users>",
        "/SpoolConfig/Users/User/Token",
        4,
        "the Token is too short: at least 16 characters",
    ),
    (
        "token with a space",
        "<Users><User><Name>u</Name>\n<Token>${T}</Token></User></Users>",
        "/SpoolConfig/Users/User/Token",
        4,
        "the Token must be printable ASCII without spaces",
    ),
    (
        "duplicate user",
        f"<Users>\n<User><Name>u</Name><Token>{TOKEN}</Token></User>\n"
        f"<User><Name>u</Name><Token>{TOKEN2}</Token></User>\n</Users>",
        "/SpoolConfig/Users/User[2]",
        5,
        "duplicate user 'u' (first at line 4)",
    ),
    (
        "duplicate token",
        f"<Users>\n<User><Name>u</Name><Token>{TOKEN}</Token></User>\n"
        f"<User><Name>v</Name>\n<Token>{TOKEN}</Token></User>\n</Users>",
        "/SpoolConfig/Users/User[2]/Token",
        6,
        "user 'v' has the same Token as user 'u'; tokens identify users and must be unique",
    ),
    (
        "bad Read regex",
        f"<Users><User><Name>u</Name><Token>{TOKEN}</Token>\n<Read>^a$</Read>\n<Read>[</Read>"
        "</User></Users>",
        "/SpoolConfig/Users/User/Read[2]",
        5,
        "'[' is not a valid regular expression",
    ),
    (
        "bad Write regex",
        f"<Users><User><Name>u</Name><Token>{TOKEN}</Token>\n<Write>*x</Write></User></Users>",
        "/SpoolConfig/Users/User/Write",
        4,
        "'*x' is not a valid regular expression",
    ),
    (
        "bad user name",
        f"<Users><User>\n<Name>a b</Name><Token>{TOKEN}</Token></User></Users>",
        "/SpoolConfig/Users/User/Name",
        4,
        "'a b' is not a valid user name",
    ),
    (
        "bad Admin flag",
        f"<Users><User><Name>u</Name><Token>{TOKEN}</Token>\n<Admin>sure</Admin></User></Users>",
        "/SpoolConfig/Users/User/Admin",
        4,
        "'sure' is not a boolean",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in BODY_ERRORS],
    ids=[case[0] for case in BODY_ERRORS],
)
def test_body_errors(body: str, path: str, line: int, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(doc(body), env={"T": "has a space in it, sixteen+"})
    err = info.value
    assert (err.path, err.line) == (path, line), err.message
    assert fragment in err.message
    assert str(err) == f"config error at {path} (line {line}): {err.message}"
    assert err.source == "<string>"
    # Secrets never reach a message, whatever went wrong.
    for secret in (TOKEN, TOKEN2, HASH, SALT, DIGEST):
        assert secret not in str(err)


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


# --------------------------------------------------------------------------- what loads

CONFIG_MD_EXAMPLE = """\
<SpoolConfig>                     <!-- <AMPSConfig> is accepted as the same root -->
  <Name>spool-a</Name>            <!-- unique in a replication fabric; prefixes its files -->
  <Group>nyc-1</Group>            <!-- defaults to Name -->
  <DataDirectory>./data</DataDirectory>

  <Admin>                         <!-- REST admin + dashboard + /metrics on the web port -->
    <InetAddr>127.0.0.1:9007</InetAddr>
    <FileName>./data/stats.db</FileName>   <!-- SQLite stats database -->
    <Interval>10s</Interval>               <!-- sampling interval, min 1s -->
    <Authentication>token</Authentication> <!-- see Users -->
  </Admin>

  <Transports>
    <Transport><Name>websocket-json</Name><Type>websocket</Type>
      <InetAddr>127.0.0.1:9007</InetAddr><MessageType>json</MessageType>
      <PerMessageDeflate>false</PerMessageDeflate><MaxMessageSize>16MB</MaxMessageSize></Transport>
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type>
      <InetAddr>127.0.0.1:9007</InetAddr></Transport>   <!-- served at /replication -->
  </Transports>

  <TransactionLog>
    <JournalDirectory>./data/journal</JournalDirectory>
    <JournalArchiveDirectory>./data/archive</JournalArchiveDirectory>
    <PreallocatedJournalFiles>2</PreallocatedJournalFiles>
    <JournalSize>64MB</JournalSize>
    <FlushInterval>1ms</FlushInterval>      <!-- group-commit window, 30us..100ms -->
    <Topic><Name>orders</Name><MessageType>json</MessageType></Topic>
    <Topic><Name>^/audit/</Name><MessageType>json</MessageType></Topic>  <!-- regex -->
  </TransactionLog>

  <Tuning><MinimumSyncDestinations>1</MinimumSyncDestinations>
    <SlowClientBufferLimit>64MB</SlowClientBufferLimit></Tuning>

  <Users>                          <!-- authentication + entitlements -->
    <User><Name>ops</Name><PasswordHash>${OPS_HASH}</PasswordHash><Admin>true</Admin></User>
    <User><Name>feed</Name><Token>${FEED_TOKEN}</Token>
      <Read>^orders$</Read><Write>^orders$</Write></User>
  </Users>
</SpoolConfig>
"""


def test_config_md_example_loads(tmp_path: Path) -> None:
    file = tmp_path / "etc" / "spool-a.xml"
    file.parent.mkdir()
    file.write_text(CONFIG_MD_EXAMPLE)
    cfg = load_config(file, env={"OPS_HASH": HASH, "FEED_TOKEN": TOKEN})
    here = file.parent
    assert cfg == Config(
        name="spool-a",
        group="nyc-1",
        data_directory=here / "data",
        admin=AdminConfig(
            host="127.0.0.1",
            port=9007,
            stats_file=here / "data" / "stats.db",
            interval=10.0,
            authentication="token",
        ),
        transports=(
            TransportConfig("websocket-json", "websocket", "127.0.0.1", 9007),
            TransportConfig("amps-replication", "amps-replication", "127.0.0.1", 9007),
        ),
        transaction_log=TransactionLogConfig(
            journal_directory=here / "data" / "journal",
            archive_directory=here / "data" / "archive",
            preallocated_files=2,
            journal_size=64 * MB,
            flush_interval=0.001,
            topics=(TopicRule("orders"), TopicRule("^/audit/", is_regex=True)),
        ),
        tuning=TuningConfig(minimum_sync_destinations=1, slow_client_buffer_limit=64 * MB),
        users=(
            UserConfig("ops", password_hash=HASH, admin=True),
            UserConfig("feed", token=TOKEN, read=("^orders$",), write=("^orders$",)),
        ),
        source_path=file,
        explicit_paths=frozenset(
            {EXPLICIT_JOURNAL_DIRECTORY, EXPLICIT_ARCHIVE_DIRECTORY, EXPLICIT_STATS_FILE}
        ),
    )
    assert cfg.auth_enabled
    assert TOKEN not in repr(cfg) and HASH not in repr(cfg)


def test_minimal_file_takes_the_defaults() -> None:
    cfg = parse("<SpoolConfig><Name>solo</Name></SpoolConfig>")
    assert cfg.name == cfg.group == "solo"
    assert cfg.data_directory == BASE / "data"
    assert cfg.admin == AdminConfig(stats_file=BASE / "data" / "stats.db")
    assert cfg.transports == (TransportConfig("websocket-json", "websocket", "127.0.0.1", 9007),)
    assert cfg.transaction_log is None  # no <TransactionLog>, no transaction log
    assert cfg.tuning == TuningConfig()
    assert cfg.users == () and not cfg.auth_enabled
    assert cfg.source_path is None and cfg.explicit_paths == frozenset()


def test_amps_root_is_the_same_thing() -> None:
    assert parse(doc("<Group>g</Group>", root="AMPSConfig")) == parse(doc("<Group>g</Group>"))


def test_transaction_log_defaults_follow_the_data_directory() -> None:
    cfg = parse(doc("<DataDirectory>/var/lib/spool</DataDirectory>\n" + txlog()))
    log = cfg.transaction_log
    assert log is not None
    assert log.journal_directory == Path("/var/lib/spool/journal")
    assert log.archive_directory == Path("/var/lib/spool/archive")
    assert cfg.admin.stats_file == Path("/var/lib/spool/stats.db")
    assert (log.preallocated_files, log.journal_size, log.flush_interval, log.max_size) == (
        2,
        64 * MB,
        0.001,
        0,
    )


def test_relative_paths_resolve_against_the_file(tmp_path: Path) -> None:
    file = tmp_path / "conf" / "a.xml"
    file.parent.mkdir()
    file.write_text(
        doc(
            "<DataDirectory>../state</DataDirectory>\n<Admin><FileName>stats/s.db</FileName></Admin>\n"
            + txlog("<JournalDirectory>/abs/j</JournalDirectory>")
        )
    )
    cfg = load_config(str(file), env={})
    assert cfg.data_directory == file.parent / "../state"
    assert cfg.admin.stats_file == file.parent / "stats/s.db"
    assert cfg.transaction_log is not None
    assert cfg.transaction_log.journal_directory == Path("/abs/j")
    assert cfg.transaction_log.archive_directory == file.parent / "../state/archive"


def test_load_config_reports_an_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.xml"
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    assert info.value.path == "" and info.value.line is None
    assert str(info.value) == f"config error: cannot read {missing}: No such file or directory"


def test_load_config_honours_the_declared_encoding(tmp_path: Path) -> None:
    file = tmp_path / "latin.xml"
    text = '<?xml version="1.0" encoding="ISO-8859-1"?>\n' + doc(
        "<TransactionLog><Topic><Name>caf\u00e9</Name></Topic></TransactionLog>"
    )
    file.write_bytes(text.encode("latin-1"))
    cfg = load_config(file, env={})
    assert cfg.transaction_log is not None
    assert cfg.transaction_log.topics == (TopicRule("caf\u00e9"),)
    # parse_config takes text that is already decoded: the declaration is not reapplied.
    again = parse(text)
    assert again.transaction_log is not None
    assert again.transaction_log.topics == cfg.transaction_log.topics


def test_error_source_is_the_file_name(tmp_path: Path) -> None:
    file = tmp_path / "bad.xml"
    file.write_text(doc("<Bogus/>"))
    with pytest.raises(ConfigError) as info:
        load_config(file, env={})
    assert info.value.source == str(file)


def test_everything_optional_can_be_set() -> None:
    body = f"""<Admin>
<InetAddr>[::1]:9100</InetAddr>
<Interval>30s</Interval>
<StatsRetention>2d</StatsRetention>
<MetricsPublic>yes</MetricsPublic>
</Admin>
<Transports><Transport><Name>ws</Name><Type>websocket</Type><PerMessageDeflate>TRUE</PerMessageDeflate>
<MaxMessageSize>1MB</MaxMessageSize><Enabled>no</Enabled></Transport></Transports>
{
        txlog(
            "<PreallocatedJournalFiles>0</PreallocatedJournalFiles>",
            "<JournalSize>1MB</JournalSize>",
            "<FlushInterval>30us</FlushInterval>",
            "<MaxSize>1GB</MaxSize>",
        )
    }
<Tuning><MinimumSyncDestinations>0</MinimumSyncDestinations>
<SlowClientBufferLimit>2MB</SlowClientBufferLimit><HeartbeatDefault>30s</HeartbeatDefault>
<PersistedAckInterval>250ms</PersistedAckInterval></Tuning>
<Users><User><Name>x@y</Name><PasswordHash>{HASH}</PasswordHash><Token>{TOKEN}</Token>
<Admin>1</Admin><Read>a</Read><Read>b</Read><Write>c</Write></User></Users>"""
    cfg = parse(doc(body))
    assert cfg.admin == AdminConfig(
        host="::1",
        port=9100,
        stats_file=BASE / "data" / "stats.db",
        interval=30.0,
        authentication="token",
        stats_retention=2 * 86400.0,
        metrics_public=True,
    )
    assert cfg.transports == (
        TransportConfig("ws", "websocket", "::1", 9100, "json", True, MB, enabled=False),
    )
    assert cfg.transports[0].address == "[::1]:9100"
    log = cfg.transaction_log
    assert log is not None
    assert (log.preallocated_files, log.journal_size, log.flush_interval, log.max_size) == (
        0,
        MB,
        30e-6,
        1024 * MB,
    )
    assert cfg.tuning == TuningConfig(0, 2 * MB, 30.0, 0.25)
    assert cfg.users == (UserConfig("x@y", HASH, TOKEN, admin=True, read=("a", "b"), write=("c",)),)


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("true", True),
        ("True", True),
        ("YES", True),
        ("1", True),
        ("false", False),
        ("No", False),
        ("0", False),
        (" FALSE ", False),
    ],
)
def test_booleans(word: str, value: bool) -> None:
    body = f"<Admin><MetricsPublic>{word}</MetricsPublic></Admin>"
    assert parse(doc(body)).admin.metrics_public is value


def test_shared_address_is_inherited_where_omitted() -> None:
    body = (
        "<Transports><Transport><Name>ws</Name><Type>websocket</Type>"
        "<InetAddr>9300</InetAddr></Transport>"
        "<Transport><Name>repl</Name><Type>amps-replication</Type></Transport></Transports>"
    )
    cfg = parse(doc(body))
    assert (cfg.admin.host, cfg.admin.port) == ("127.0.0.1", 9300)
    assert [(t.host, t.port) for t in cfg.transports] == [("127.0.0.1", 9300)] * 2


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


def test_users_allow_any_address_and_imply_token_auth() -> None:
    cfg = parse(doc(f"<Admin><InetAddr>0.0.0.0:9007</InetAddr></Admin>\n{USERS}"))
    assert cfg.admin.authentication == "token"
    assert cfg.transports[0].host == "0.0.0.0"
    assert cfg.users[0].token == TOKEN


def test_env_expansion() -> None:
    body = (
        "<DataDirectory>${ROOT}/data-${NAME}</DataDirectory>\n"
        "<TransactionLog><Topic><Name>$${literal}</Name></Topic>"
        "<Topic><Name>a$b</Name></Topic></TransactionLog>\n"
        "<Users><User><Name>${NAME}</Name><Token> ${TOK} </Token></User></Users>"
    )
    cfg = parse(doc(body), env={"ROOT": "/x", "NAME": "feed", "TOK": TOKEN})
    assert cfg.data_directory == Path("/x/data-feed")
    assert cfg.transaction_log is not None
    assert [t.name for t in cfg.transaction_log.topics] == ["${literal}", "a$b"]
    assert cfg.users[0].name == "feed" and cfg.users[0].token == TOKEN


def test_env_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOOL_TEST_GROUP", "from-env")
    cfg = parse_config(doc("<Group>${SPOOL_TEST_GROUP}</Group>"), base_dir=BASE)
    assert cfg.group == "from-env"


def test_parse_config_defaults_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = parse_config(doc(""), env={})
    assert cfg.data_directory == Path(os.getcwd()) / "data"
    assert cfg.data_directory.is_absolute()


# --------------------------------------------------------------------------- records()


def test_records_exact_and_regex_topics() -> None:
    log = TransactionLogConfig(
        Path("/j"),
        Path("/a"),
        topics=(TopicRule("orders"), TopicRule("^/audit/", is_regex=True)),
    )
    assert log.records("orders")
    assert not log.records("orders2")  # exact names are exact
    assert log.records("/audit/x") and log.records("/audit/")
    assert not log.records("x/audit/")
    assert not log.records("")


def test_regex_rules_use_search() -> None:
    log = TransactionLogConfig(Path("/j"), Path("/a"), topics=(TopicRule("eu", is_regex=True),))
    assert log.records("orders-eu-1")
    assert not log.records("us")


def test_a_dot_alone_is_an_exact_name() -> None:
    body = (
        "<TransactionLog><Topic><Name>orders.eu</Name></Topic>"
        "<Topic><Name>^fx\\.</Name></Topic></TransactionLog>"
    )
    cfg = parse(doc(body))
    log = cfg.transaction_log
    assert log is not None
    assert [rule.is_regex for rule in log.topics] == [False, True]
    assert log.records("orders.eu") and not log.records("ordersXeu")
    assert log.records("fx.eur") and not log.records("fxXeur")


def test_records_everything_in_the_default() -> None:
    log = default_config().transaction_log
    assert log is not None
    assert all(log.records(topic) for topic in ["a", "", "/x/y", "orders.eu"])


def test_no_rules_record_nothing() -> None:
    assert not TransactionLogConfig(Path("/j"), Path("/a")).records("a")


def test_matchers_are_shared_and_excluded_from_equality() -> None:
    rules = (TopicRule("^a", is_regex=True),)
    one = TransactionLogConfig(Path("/j"), Path("/a"), topics=rules)
    two = dataclasses.replace(one, journal_size=2 * MB)
    assert one._matcher is two._matcher
    assert one == TransactionLogConfig(Path("/j"), Path("/a"), topics=rules)
    assert hash(one) == hash(TransactionLogConfig(Path("/j"), Path("/a"), topics=rules))
    assert "_matcher" not in repr(one)


@pytest.mark.parametrize(
    ("name", "regex"),
    [
        ("orders", False),
        ("/a/b-c_d", False),
        ("a.b", False),
        ("^x", True),
        ("x$", True),
        ("a*", True),
        ("a+", True),
        ("a?", True),
        ("a{2}", True),
        ("[ab]", True),
        ("a|b", True),
        ("(a)", True),
        ("a\\d", True),
    ],
)
def test_is_regex_topic(name: str, regex: bool) -> None:
    assert is_regex_topic(name) is regex


# --------------------------------------------------------------------------- defaults


def test_default_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = default_config()
    here = Path(os.getcwd())
    assert cfg == Config(
        name="spool",
        group="spool",
        data_directory=here / "data",
        admin=AdminConfig(stats_file=here / "data" / "stats.db"),
        transports=(TransportConfig("websocket-json", "websocket", "127.0.0.1", 9007),),
        transaction_log=TransactionLogConfig(
            here / "data" / "journal",
            here / "data" / "archive",
            topics=(TopicRule(".*", "json", is_regex=True),),
        ),
    )


def test_default_config_with_arguments(tmp_path: Path) -> None:
    cfg = default_config(data_dir=tmp_path / "d", listen=("::1", 0))
    assert cfg.data_directory == tmp_path / "d"
    assert cfg.admin.stats_file == tmp_path / "d" / "stats.db"
    assert (cfg.admin.host, cfg.admin.port) == ("::1", 0)
    assert (cfg.transports[0].host, cfg.transports[0].port) == ("::1", 0)


def test_default_config_refuses_a_public_address_without_users() -> None:
    with pytest.raises(ConfigError) as info:
        default_config(listen=("0.0.0.0", 9007))
    assert info.value.path == "/SpoolConfig/Admin/InetAddr"
    assert info.value.line is None
    assert info.value.message.startswith(
        "binding a non-loopback address requires <Users> (authentication)"
    )


def test_default_config_refuses_a_bad_listen() -> None:
    with pytest.raises(ConfigError) as info:
        default_config(listen=("127.0.0.1", 65536))
    assert info.value.path == "/SpoolConfig/Admin/InetAddr"
    assert "out of range" in info.value.message


def test_rendered_default_parses_to_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_config(render_default_xml(), env={}) == default_config()
    # Loaded from a file, relative paths follow the file instead; only that differs.
    file = tmp_path / "sub" / "spool.xml"
    file.parent.mkdir()
    file.write_text(render_default_xml())
    loaded = load_config(file, env={})
    assert loaded == dataclasses.replace(
        with_overrides(default_config(), data_dir=file.parent / "data"), source_path=file
    )


def test_documented_default_is_the_rendered_default() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    text = docs.read_text(encoding="utf-8")
    block = text.split("<!-- BEGIN DEFAULT", 1)[1].split("<!-- END DEFAULT -->", 1)[0]
    xml = block.split("```xml\n", 1)[1].rsplit("```", 1)[0]
    assert xml == render_default_xml()


# --------------------------------------------------------------------------- overrides


def test_listen_override_moves_admin_and_transports() -> None:
    cfg = parse(
        doc(
            f"{USERS}\n<Transports><Transport><Name>r</Name><Type>amps-replication</Type>"
            "</Transport><Transport><Name>w</Name><Type>websocket</Type></Transport>"
            "</Transports>"
        )
    )
    moved = with_overrides(cfg, listen=("0.0.0.0", 9500))
    assert (moved.admin.host, moved.admin.port) == ("0.0.0.0", 9500)
    assert {(t.host, t.port) for t in moved.transports} == {("0.0.0.0", 9500)}
    assert [t.name for t in moved.transports] == ["r", "w"]


def test_listen_override_keeps_the_loopback_rule() -> None:
    with pytest.raises(ConfigError) as info:
        with_overrides(default_config(), listen=("10.1.2.3", 9007))
    assert info.value.path == "/SpoolConfig/Admin/InetAddr"
    assert "binding a non-loopback address requires <Users>" in info.value.message
    assert with_overrides(default_config(), listen=("localhost", 1)).admin.host == "localhost"


def test_data_dir_override_moves_only_derived_paths() -> None:
    cfg = parse(
        doc(
            "<Admin><FileName>/stats/s.db</FileName></Admin>\n"
            + txlog("<JournalDirectory>/fast/journal</JournalDirectory>")
        )
    )
    moved = with_overrides(cfg, data_dir=Path("/new"))
    assert moved.data_directory == Path("/new")
    assert moved.admin.stats_file == Path("/stats/s.db")
    assert moved.transaction_log is not None
    assert moved.transaction_log.journal_directory == Path("/fast/journal")
    assert moved.transaction_log.archive_directory == Path("/new/archive")
    assert moved.explicit_paths == cfg.explicit_paths


def test_data_dir_override_of_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    moved = with_overrides(default_config(), data_dir=Path("rel"))
    assert moved == default_config(data_dir=tmp_path / "rel")


def test_data_dir_override_cannot_merge_journal_and_archive() -> None:
    cfg = parse(doc(txlog("<JournalDirectory>/n/archive</JournalDirectory>")))
    with pytest.raises(ConfigError) as info:
        with_overrides(cfg, data_dir=Path("/n"))
    assert info.value.path == "/SpoolConfig/DataDirectory"


def test_no_overrides_is_identity() -> None:
    cfg = default_config()
    assert with_overrides(cfg) == cfg


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9007", ("127.0.0.1", 9007)),
        ("9007", ("127.0.0.1", 9007)),
        (" 0 ", ("127.0.0.1", 0)),
        ("[::1]:80", ("::1", 80)),
        ("[0:0::1]:80", ("::1", 80)),
        ("Spool.Example.COM:443", ("spool.example.com", 443)),
        ("0.0.0.0:1", ("0.0.0.0", 1)),
    ],
)
def test_parse_inet_addr(text: str, expected: tuple[str, int]) -> None:
    assert parse_inet_addr(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("host", "has no port"),
        (":80", "has no host"),
        ("h:x", "is not a number"),
        ("h:-1", "is not a number"),
        ("[::1]", "is not [IPv6]:PORT"),
        ("[127.0.0.1]:80", "is not an IPv6 address"),
        ("::1:80", "needs brackets"),
        ("1.2.3:80", "is not a valid IPv4 address"),
        ("-bad-:80", "neither an IP address nor a valid host name"),
        ("h:99999", "out of range"),
    ],
)
def test_parse_inet_addr_refuses(text: str, fragment: str) -> None:
    with pytest.raises(InetAddrError, match=re.escape(fragment)):
        parse_inet_addr(text)


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        st.ip_addresses().map(str),
        st.from_regex(r"[a-z][a-z0-9]{0,10}(\.[a-z]{2,5})?", fullmatch=True),
    ),
    st.integers(min_value=0, max_value=65535),
)
def test_inet_addr_round_trip(host: str, port: int) -> None:
    parsed = parse_inet_addr(format_inet_addr(host, port))
    assert parsed == (host, port)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("localhost", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("spool.example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(exclude_characters="$<&]\x00"), max_size=30))
def test_text_without_dollars_is_not_expanded(text: str) -> None:
    body = f"<TransactionLog><Topic><Name>x</Name></Topic></TransactionLog><Group>g{text}</Group>"
    try:
        cfg = parse(doc(body))
    except ConfigError as err:
        # Only the group-name rule (or XML itself) may object, never variable expansion.
        assert "variable" not in err.message and "${" not in err.message
    else:
        assert cfg.group == ("g" + text).strip()


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[A-Za-z0-9_.-]{1,20}", fullmatch=True))
def test_any_variable_value_is_substituted(value: str) -> None:
    cfg = parse(doc("<Group>g${V}</Group>"), env={"V": value})
    assert cfg.group == "g" + value
