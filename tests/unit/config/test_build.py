"""Whole files: what loads (an example shaped like docs/configuration.md's, the minimal file,
every optional element), from where, and the contradictions between sections."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spool.server.config import (
    EXPLICIT_ARCHIVE_DIRECTORY,
    EXPLICIT_JOURNAL_DIRECTORY,
    EXPLICIT_STATS_FILE,
    AdminConfig,
    Config,
    ConfigError,
    DestinationConfig,
    ReplicationTopic,
    ReplicationTransport,
    TopicRule,
    TransactionLogConfig,
    TransportConfig,
    TuningConfig,
    UserConfig,
    load_config,
    parse_config,
)
from tests.unit.config.helpers import (
    BASE,
    HASH,
    MB,
    TOKEN,
    TOKEN2,
    USERS,
    assert_refused,
    doc,
    parse,
    txlog,
)

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
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
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


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


# What the example holds for replication: the inbound transport, the floor of sync
# destinations and (not in the example above) the <Replication> section.
REPLICATION_TRANSPORT = """\
    <Transport><Name>amps-replication</Name><Type>amps-replication</Type>
      <InetAddr>127.0.0.1:9007</InetAddr></Transport>   <!-- served at /replication -->
"""
MINIMUM_SYNC = "<MinimumSyncDestinations>1</MinimumSyncDestinations>"
REPLICATION_SECTION = """\
  <Replication>
    <Destination>
      <Name>spool-b</Name><Group>nyc-1</Group><SyncType>sync</SyncType>
      <PassThrough>.*</PassThrough>
      <Topic><Name>orders</Name><MessageType>json</MessageType>
        <Filter>/qty > 0</Filter><ExcludeValidation>replicate,cascade</ExcludeValidation></Topic>
      <Transport><Type>amps-replication</Type>
        <InetAddr>127.0.0.1:9107</InetAddr><InetAddr>127.0.0.1:9207</InetAddr>
        <Compression>zstd</Compression></Transport>
    </Destination>
  </Replication>
"""
EXAMPLE_ENV = {"OPS_HASH": HASH, "FEED_TOKEN": TOKEN}


def test_config_md_example_with_its_replication_section() -> None:
    assert REPLICATION_TRANSPORT in CONFIG_MD_EXAMPLE and MINIMUM_SYNC in CONFIG_MD_EXAMPLE
    # a floor of one sync destination with none configured could never allow a downgrade
    with pytest.raises(ConfigError) as info:
        parse(CONFIG_MD_EXAMPLE, env=EXAMPLE_ENV)
    assert (info.value.path, info.value.line) == ("/SpoolConfig/Tuning/MinimumSyncDestinations", 31)
    assert "only 0 destinations are configured sync" in info.value.message
    text = CONFIG_MD_EXAMPLE.replace("  <Tuning>", REPLICATION_SECTION + "\n  <Tuning>")
    cfg = parse(text, env=EXAMPLE_ENV)
    assert cfg.replication_transport is not None
    assert cfg.replication_transport.type == "amps-replication"
    assert cfg.tuning.minimum_sync_destinations == 1
    assert cfg.replication is not None and cfg.replicates
    (dest,) = cfg.replication.destinations
    assert dest == DestinationConfig(
        name="spool-b",
        group="nyc-1",
        sync=True,
        topics=(
            ReplicationTopic(
                "orders", filter="/qty > 0", exclude_validation=frozenset({"replicate", "cascade"})
            ),
        ),
        passthrough=(".*",),
        transport=ReplicationTransport(
            (("127.0.0.1", 9107), ("127.0.0.1", 9207)), compression="zstd"
        ),
    )


def test_the_documented_file_loads() -> None:
    """docs/configuration.md "A file with every section" says its file loads as it is."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    section = page.split("\n## A file with every section\n", 1)[1]
    xml = section.split("```xml\n", 1)[1].split("```", 1)[0]
    cfg = parse(xml, env={"OPS_HASH": HASH, "FEED_TOKEN": TOKEN, "REPL_TOKEN": TOKEN2})
    assert cfg.name == "spool-a" and cfg.replicates
    assert cfg.replication is not None and [d.name for d in cfg.replication.destinations] == [
        "spool-b"
    ]


def test_config_md_example_loads_without_replication(tmp_path: Path) -> None:
    file = tmp_path / "etc" / "spool-a.xml"
    file.parent.mkdir()
    file.write_text(CONFIG_MD_EXAMPLE.replace(REPLICATION_TRANSPORT, "").replace(MINIMUM_SYNC, ""))
    # (the replication transport alone would load too: it only adds the inbound endpoint)
    cfg = load_config(file, env=EXAMPLE_ENV)
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
        transports=(TransportConfig("websocket-json", "websocket", "127.0.0.1", 9007),),
        transaction_log=TransactionLogConfig(
            journal_directory=here / "data" / "journal",
            archive_directory=here / "data" / "archive",
            preallocated_files=2,
            journal_size=64 * MB,
            flush_interval=0.001,
            topics=(TopicRule("orders"), TopicRule("^/audit/", is_regex=True)),
        ),
        tuning=TuningConfig(slow_client_buffer_limit=64 * MB),
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
            "<PreallocatedJournalFiles>1</PreallocatedJournalFiles>",
            "<JournalSize>1MB</JournalSize>",
            "<FlushInterval>30us</FlushInterval>",
            "<WriteRetryInterval>250ms</WriteRetryInterval>",
            "<MaxSize>1GB</MaxSize>",
        )
    }
<Tuning><SlowClientBufferLimit>2MB</SlowClientBufferLimit><HeartbeatDefault>30s</HeartbeatDefault>
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
        1,
        MB,
        30e-6,
        1024 * MB,
    )
    assert log.write_retry_interval == 0.25
    assert cfg.tuning == TuningConfig(2 * MB, 30.0, 0.25)
    assert cfg.users == (UserConfig("x@y", HASH, TOKEN, admin=True, read=("a", "b"), write=("c",)),)


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


def test_parse_config_defaults_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = parse_config(doc(""), env={})
    assert cfg.data_directory == Path(os.getcwd()) / "data"
    assert cfg.data_directory.is_absolute()
