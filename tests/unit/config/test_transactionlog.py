"""The <TransactionLog> section and which topics it records."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from spool.server.config import (
    TopicRule,
    TransactionLogConfig,
    default_config,
)
from tests.unit.config.helpers import (
    MB,
    assert_refused,
    doc,
    parse,
    txlog,
)

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
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
        "PreallocatedJournalFiles must be between 1 and 100, got 101",
    ),
    (
        # the seed's minimum: a roll renames a preallocated file (0 was accepted once)
        "no prealloc",
        txlog("<PreallocatedJournalFiles>0</PreallocatedJournalFiles>"),
        "/SpoolConfig/TransactionLog/PreallocatedJournalFiles",
        4,
        "PreallocatedJournalFiles must be between 1 and 100, got 0",
    ),
    (
        "WriteRetryInterval too short",
        txlog("<WriteRetryInterval>5ms</WriteRetryInterval>"),
        "/SpoolConfig/TransactionLog/WriteRetryInterval",
        4,
        "WriteRetryInterval must be between 10ms and 10m, got 5ms",
    ),
    (
        "WriteRetryInterval too long",
        txlog("<WriteRetryInterval>1h</WriteRetryInterval>"),
        "/SpoolConfig/TransactionLog/WriteRetryInterval",
        4,
        "WriteRetryInterval must be between 10ms and 10m, got 1h",
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
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


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
    assert log.write_retry_interval == 1.0


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
