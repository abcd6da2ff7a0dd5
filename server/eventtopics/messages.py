"""What the event topics carry: one JSON object per happening (docs/protocol.md "Event
topics"). No I/O.

Every message starts with the same head (``instance``, ``group``, ``time``, ``time_us``,
``event``) and has every field of its topic, null when it does not apply, so filters and
SOW keys see one shape (:data:`FIELDS`). Text a client chose (names, topics, options) is
cut to :data:`MAX_TEXT` characters, a filter to :data:`MAX_FILTER` with
``filter_truncated``. Nothing secret and no message data is ever in one: no password or
token, no body, no SOW key, no bookmark (only its kind).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from spool.server.bookmarks import format_timestamp_us
from spool.server.config import (
    EVENT_TOPICS,
    EVENTS_CLIENTS,
    EVENTS_LINKS,
    EVENTS_SUBSCRIPTIONS,
    STATS_SOW,
)
from spool.server.ports import (
    ClientHappening,
    LifeHappening,
    LinkHappening,
    SubscriptionHappening,
)
from spool.server.sow.admin import SowTopicInfo

__all__ = [
    "CLIENTS",
    "EVENT_TOPICS",
    "FIELDS",
    "LINKS",
    "MAX_FILTER",
    "MAX_TEXT",
    "SOW_STATS",
    "SUBSCRIPTIONS",
    "encode",
    "encode_sow_stats",
    "topic_of",
]

CLIENTS: Final = EVENTS_CLIENTS
SUBSCRIPTIONS: Final = EVENTS_SUBSCRIPTIONS
LINKS: Final = EVENTS_LINKS
SOW_STATS: Final = STATS_SOW

#: the longest text a client chose that a message keeps (characters)
MAX_TEXT: Final = 1024
#: the longest filter a message keeps (characters)
MAX_FILTER: Final = 4096

_HEAD: Final = ("instance", "group", "time", "time_us", "event")
#: the fields of each topic's messages, in order
FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    CLIENTS: (*_HEAD, "connection", "client", "user", "remote", "transport", "tls",
              "certificate", "version", "options", "reason", "cause", "msgs_in", "msgs_out",
              "subscriptions"),
    SUBSCRIPTIONS: (*_HEAD, "connection", "client", "user", "sub_id", "command", "kind",
                    "topic", "filter", "filter_truncated", "options", "bookmark_kind",
                    "reason"),
    LINKS: (*_HEAD, "direction", "link", "remote", "connected", "sync_type", "detail"),
    SOW_STATS: (*_HEAD, "topic", "rule", "durability", "recorded", "records", "bytes",
                "key_paths", "expiration", "subscribers", "file_bytes", "file_seq",
                "unwritten", "last_compaction", "write_error"),
}  # fmt: skip


def topic_of(happening: LifeHappening) -> str:
    """The event topic a happening goes to."""
    if isinstance(happening, ClientHappening):
        return CLIENTS
    if isinstance(happening, SubscriptionHappening):
        return SUBSCRIPTIONS
    return LINKS


def encode(happening: LifeHappening, instance: str, group: str) -> bytes:
    """The message of ``happening`` on instance ``instance`` of ``group``."""
    doc = _head(instance, group, happening.time_us, happening.event)
    if isinstance(happening, ClientHappening):
        h = happening
        doc.update(
            connection=h.connection, client=_cut(h.client), user=_cut(h.user),
            remote=h.remote, transport=h.transport, tls=h.tls,
            certificate=_cut(h.certificate), version=_cut(h.version),
            options=h.options, reason=_cut(h.reason), cause=h.cause, msgs_in=h.msgs_in,
            msgs_out=h.msgs_out, subscriptions=h.subscriptions,
        )  # fmt: skip
    elif isinstance(happening, SubscriptionHappening):
        s = happening
        flt = s.filter
        cut = flt is not None and len(flt) > MAX_FILTER
        doc.update(
            connection=s.connection, client=_cut(s.client), user=_cut(s.user),
            sub_id=_cut(s.sub_id), command=s.command, kind=s.kind, topic=_cut(s.topic),
            filter=flt[:MAX_FILTER] if flt is not None else None, filter_truncated=cut,
            options=_cut(s.options), bookmark_kind=s.bookmark_kind, reason=s.reason,
        )  # fmt: skip
    else:
        link: LinkHappening = happening
        doc.update(
            direction=link.direction, link=link.link, remote=link.remote,
            connected=link.connected, sync_type=link.sync_type, detail=_cut(link.detail),
        )  # fmt: skip
    return orjson.dumps(doc)


def encode_sow_stats(info: SowTopicInfo, instance: str, group: str, time_us: int) -> bytes:
    """One SOW topic's sample (what ``GET /api/sow`` shows, but its file's path)."""
    doc = _head(instance, group, time_us, "sample")
    doc.update((key, value) for key, value in info.items() if key != "file")
    return orjson.dumps(doc)


def _head(instance: str, group: str, time_us: int, event: str) -> dict[str, Any]:
    return {
        "instance": instance, "group": group, "time": format_timestamp_us(time_us),
        "time_us": time_us, "event": event,
    }  # fmt: skip


def _cut(text: str | None) -> str | None:
    return text[:MAX_TEXT] if text is not None and len(text) > MAX_TEXT else text
