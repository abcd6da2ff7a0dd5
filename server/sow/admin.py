"""The SOW as operators see it: the JSON shapes of ``/api/sow`` (docs/admin-api.md), typed.

:class:`~spool.server.sow.service.SowService` builds these on the loop (a copy of counters and
paths, no file access); ``server/operations.py`` exposes them to REST and the dashboard.
"""

from __future__ import annotations

from typing import TypedDict

from spool.server.bookmarks import format_timestamp_us
from spool.server.config import SowTopicConfig
from spool.server.sow.filestore import CompactReport, FileStore
from spool.server.sow.memory import MemoryStore

__all__ = ["SowCompaction", "SowKeys", "SowTopicInfo", "compaction_info", "topic_info"]


class SowTopicInfo(TypedDict):
    """One SOW topic.

    ``key_paths`` are the configured ``Key`` paths (empty: keys from ``k`` or a digest of
    the body); ``file_*`` and ``last_compaction`` are None for a transient topic;
    ``unwritten`` counts changes not in the file yet (waiting for the log's durability).
    """

    topic: str
    rule: str
    durability: str
    recorded: bool
    records: int
    bytes: int
    key_paths: list[str]
    expiration: float
    subscribers: int
    file: str | None
    file_bytes: int | None
    file_seq: int | None
    unwritten: int | None
    last_compaction: str | None
    write_error: str | None


class SowKeys(TypedDict):
    """A page of a topic's keys, in store order."""

    topic: str
    records: int
    keys: list[str]
    next_after: str | None


class SowCompaction(TypedDict):
    """What ``POST /api/sow/{topic}/compact`` did."""

    topic: str
    before_bytes: int
    after_bytes: int
    records: int
    at: str


def topic_info(
    store: MemoryStore, rule: SowTopicConfig, recorded: bool, subscribers: int
) -> SowTopicInfo:
    """The admin view of one store."""
    fs = store if isinstance(store, FileStore) else None
    return SowTopicInfo(
        topic=store.topic,
        rule=rule.name,
        durability=rule.durability,
        recorded=recorded,
        records=len(store),
        bytes=store.body_bytes,
        key_paths=list(rule.keys),
        expiration=rule.expiration,
        subscribers=subscribers,
        file=str(fs.path) if fs else None,
        file_bytes=fs.file_bytes if fs else None,
        file_seq=fs.file_seq if fs else None,
        unwritten=fs.unwritten if fs else None,
        last_compaction=(
            format_timestamp_us(fs.last_compaction_us) if fs and fs.last_compaction_us else None
        ),
        write_error=repr(fs.write_error) if fs and fs.write_error else None,
    )


def compaction_info(report: CompactReport) -> SowCompaction:
    """The admin view of a compaction."""
    return SowCompaction(
        topic=report.topic,
        before_bytes=report.before,
        after_bytes=report.after,
        records=report.records,
        at=format_timestamp_us(report.at_us),
    )
