"""The ``<TransactionLog>`` section: where the journal lives and which topics it records.

A topic ``Name`` is a regular expression by the rule of :mod:`spool.server.protocol.topic` (the
one the subscription router applies), checked to compile at load time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from spool.server.config.model import (
    EXPLICIT_ARCHIVE_DIRECTORY,
    EXPLICIT_JOURNAL_DIRECTORY,
    MESSAGE_TYPES,
    TopicRule,
    TransactionLogConfig,
)
from spool.server.config.values import (
    GB,
    MB,
    Context,
    read_choice,
    read_duration,
    read_int,
    read_path,
    read_regex,
    read_size,
    read_value,
)
from spool.server.config.xmltree import Children, Spec, XmlNode, fail
from spool.server.protocol.topic import is_regex_topic
from spool.server.units import format_size

__all__ = ["read_transaction_log"]

_TXLOG_SPEC: Final[Spec] = {
    "JournalDirectory": False,
    "JournalArchiveDirectory": False,
    "PreallocatedJournalFiles": False,
    "JournalSize": False,
    "FlushInterval": False,
    "WriteRetryInterval": False,
    "MaxSize": False,
    "Topic": True,
}
_TOPIC_SPEC: Final[Spec] = {"Name": False, "MessageType": False}
_TOPIC_NAME_MAX: Final = 1024


def _topic(node: XmlNode, ctx: Context) -> TopicRule:
    kids = Children(node, _TOPIC_SPEC)
    name_node = kids.require("Name")
    name = read_value(name_node, ctx)
    if len(name) > _TOPIC_NAME_MAX or any(ord(ch) < 32 for ch in name):
        raise fail(
            name_node,
            f"a topic name is at most {_TOPIC_NAME_MAX} characters without control characters",
        )
    regex = is_regex_topic(name)
    if regex:
        name = read_regex(name_node, ctx)
    message_type = "json"
    if (type_node := kids.one("MessageType")) is not None:
        message_type = read_choice(type_node, ctx, MESSAGE_TYPES, "MessageType")
    return TopicRule(name=name, message_type=message_type, is_regex=regex)


def _topics(node: XmlNode, kids: Children, ctx: Context) -> tuple[TopicRule, ...]:
    topic_nodes = kids.many("Topic")
    if not topic_nodes:
        raise fail(
            node,
            "<TransactionLog> needs at least one <Topic> (it would record nothing); "
            "remove <TransactionLog> to run without a transaction log",
        )
    topics: list[TopicRule] = []
    first_line: dict[tuple[str, str], int] = {}
    for topic_node in topic_nodes:
        rule = _topic(topic_node, ctx)
        key = (rule.name, rule.message_type)
        if key in first_line:
            raise fail(
                topic_node, f"duplicate Topic {rule.name!r} (first at line {first_line[key]})"
            )
        first_line[key] = topic_node.line
        topics.append(rule)
    return tuple(topics)


def read_transaction_log(
    node: XmlNode, ctx: Context, data_dir: Path
) -> tuple[TransactionLogConfig, frozenset[str]]:
    """Read ``<TransactionLog>``.

    Returns:
        The configuration, and which directories the file gave itself (``EXPLICIT_*``
        names; the others follow ``data_dir``, also under ``--data-dir``).
    """
    kids = Children(node, _TXLOG_SPEC)
    explicit: set[str] = set()
    journal_dir = data_dir / "journal"
    if (journal_node := kids.one("JournalDirectory")) is not None:
        journal_dir = read_path(journal_node, ctx)
        explicit.add(EXPLICIT_JOURNAL_DIRECTORY)
    archive_dir = data_dir / "archive"
    if (archive_node := kids.one("JournalArchiveDirectory")) is not None:
        archive_dir = read_path(archive_node, ctx)
        explicit.add(EXPLICIT_ARCHIVE_DIRECTORY)
        if archive_dir == journal_dir:
            raise fail(archive_node, "JournalArchiveDirectory must differ from JournalDirectory")
    elif archive_dir == journal_dir and journal_node is not None:
        raise fail(journal_node, "JournalDirectory must differ from JournalArchiveDirectory")
    defaults = TransactionLogConfig(journal_dir, archive_dir)
    prealloc = defaults.preallocated_files
    if (prealloc_node := kids.one("PreallocatedJournalFiles")) is not None:
        # at least one: a roll then renames a file instead of allocating JournalSize bytes
        # on the commit path (a disk short of room still starts: see docs/transaction-log.md)
        prealloc = read_int(prealloc_node, ctx, minimum=1, maximum=100)
    journal_size = defaults.journal_size
    if (size_node := kids.one("JournalSize")) is not None:
        journal_size = read_size(size_node, ctx, minimum=MB, maximum=1024 * GB)
    flush = defaults.flush_interval
    if (flush_node := kids.one("FlushInterval")) is not None:
        flush = read_duration(flush_node, ctx, minimum=30e-6, maximum=0.1)
    retry = defaults.write_retry_interval
    if (retry_node := kids.one("WriteRetryInterval")) is not None:
        retry = read_duration(retry_node, ctx, minimum=0.01, maximum=600.0)
    max_size = 0
    if (max_node := kids.one("MaxSize")) is not None:
        max_size = read_size(max_node, ctx, minimum=MB, maximum=1024**5, zero_ok=True)
        floor = journal_size * (prealloc + 1)
        if max_size and max_size < floor:
            raise fail(
                max_node,
                f"MaxSize ({format_size(max_size)}) is smaller than the active and "
                f"preallocated journals (JournalSize x (PreallocatedJournalFiles + 1) = "
                f"{format_size(floor)}): every publish would fail; raise it or use 0",
            )
    config = TransactionLogConfig(
        journal_directory=journal_dir,
        archive_directory=archive_dir,
        preallocated_files=prealloc,
        journal_size=journal_size,
        flush_interval=flush,
        write_retry_interval=retry,
        topics=_topics(node, kids, ctx),
        max_size=max_size,
    )
    return config, frozenset(explicit)
