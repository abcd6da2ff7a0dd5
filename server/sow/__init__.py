"""State of the World: the latest message per key of SOW topics, queries over it, atomic
query-and-subscribe, deltas, out-of-focus notices, expiration and history.

Modules, highest first (each imports only those below it; an import-linter contract keeps
it so); docs/sow.md describes the behaviour and the decisions where the AMPS model leaves room::

    service       SowService: the commands, start / stop, the admin surface
    querying      sow, sow_and_subscribe (snapshot + live, historical), per-connection streams
    expirer       the task that removes expired records
    deleting      sow_delete; removals logged as SOW_DELETE and told to subscribers
    stage         the publish stage: keys and deltas before the append, stores after it
    streaming     a query result on the wire: group_begin, sow batches, group_end, acks
    subscribers   SOW subscriptions: k, oof, deltas, held-back updates, what each holds
    history       the transaction log applied to stores (recovery, historical queries)
    registry      rules, key specs, stores per topic, files under DataDirectory/sow
    admin         the /api/sow shapes
    conflate      conflation windows of a SOW subscription
    query         a query over a snapshot, a slice at a time (filter, orderby, top_n)
    filestore     the persistent TopicStore: memory plus a file written off the loop
    fileformat    the SOW file: header, puts and deletes, CRCs (sans-I/O)
    memory        the memory TopicStore
    expiry        deadlines of records
    keys          SOW keys from Key paths, the k header or the body
    delta         merge (delta_publish) and diff (delta_subscribe) of JSON records
    errors        the SOW's own errors
"""

from __future__ import annotations

from spool.server.sow.admin import SowCompaction, SowKeys, SowTopicInfo
from spool.server.sow.errors import SowError, SowTopicNotFound
from spool.server.sow.service import SowService

__all__ = [
    "SowCompaction",
    "SowError",
    "SowKeys",
    "SowService",
    "SowTopicInfo",
    "SowTopicNotFound",
]
