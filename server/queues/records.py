"""The bodies of a queue's log records (``QUEUE_ACK``, ``QUEUE_TRANSFER``).

A queue's records are logged on its own name (the record's topic). Two forms of
``QUEUE_ACK``:

- a **local** queue's (``LocalQueue``, or any queue of an instance that does not
  replicate): the local seqs that left the queue, ``b"12,13,20"``, without publisher
  identity (``pub_hash`` 0: never replicated, like a SOW expiration);
- a **replicated** queue's: the bookmarks of the messages (``b"H|S|,H|S|"``: local seqs
  differ between instances, bookmarks do not), with the broker's publisher identity
  (server/bookmarks.py ``broker_pub_hash``) and its next sequence, so replication sends
  them like a ``sow_delete`` and a destination de-duplicates them on a resync.

A ``QUEUE_TRANSFER`` record (replicated queues only, same identity) carries ownership
changes (server/queues/ownership.py): requests and grants, as JSON
``[["r", bookmark, requester, owner, epoch], ["g", bookmark, owner, epoch, proxied]]``;
a grant at epoch 0 is a first-owner claim (the message was published on ``owner`` too,
``Ownership.claim``).

Decoding is defensive (the bytes may come from another instance): a malformed item is
skipped, never raised.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from spool.server.queues.ownership import Grant, Request

__all__ = ["decode_ack", "decode_transfers", "encode_ack_bookmarks", "encode_ack_seqs",
           "encode_transfers"]  # fmt: skip


def encode_ack_seqs(seqs: Sequence[int]) -> bytes:
    """A local queue's ``QUEUE_ACK`` body: the local seqs that left the queue."""
    return b",".join(b"%d" % s for s in seqs)


def encode_ack_bookmarks(bookmarks: Sequence[str]) -> bytes:
    """A replicated queue's ``QUEUE_ACK`` body: the bookmarks that left the queue."""
    return ",".join(bookmarks).encode()


def decode_ack(body: bytes) -> tuple[list[int], list[str]]:
    """The seqs (local form) or the bookmarks (replicated form) of a ``QUEUE_ACK``
    body; a damaged item is skipped."""
    seqs: list[int] = []
    bookmarks: list[str] = []
    for part in body.split(b","):
        if part.isdigit():
            seqs.append(int(part))
        elif part.count(b"|") == 2 and part.endswith(b"|"):
            bookmarks.append(part.decode("ascii", "replace"))
    return seqs, bookmarks


def encode_transfers(changes: Sequence[Request | Grant]) -> bytes:
    """A ``QUEUE_TRANSFER`` body."""
    items: list[list[object]] = []
    for c in changes:
        if type(c) is Request:
            items.append(["r", c.bookmark, c.requester, c.owner, c.epoch])
        else:
            assert type(c) is Grant
            items.append(["g", c.bookmark, c.owner, c.epoch, c.proxied])
    return orjson.dumps(items)


def decode_transfers(body: bytes) -> list[Request | Grant]:
    """The changes of a ``QUEUE_TRANSFER`` body (malformed items skipped)."""
    try:
        items = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    out: list[Request | Grant] = []
    if not isinstance(items, list):
        return out
    for item in items:
        if not isinstance(item, list) or not item:
            continue
        if (
            item[0] == "r"
            and len(item) == 5
            and all(isinstance(v, str) for v in item[1:4])
            and type(item[4]) is int
        ):
            out.append(Request(item[1], item[2], item[3], item[4]))
        elif (
            item[0] == "g"
            and len(item) == 5
            and isinstance(item[1], str)
            and isinstance(item[2], str)
            and type(item[3]) is int
            and isinstance(item[4], bool)
        ):
            out.append(Grant(item[1], item[2], item[3], item[4]))
    return out
