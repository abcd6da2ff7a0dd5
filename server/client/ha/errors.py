"""What the HA client raises, rooted at :class:`~spool.server.client.errors.ClientError`::

    ClientError
    └── HAError                  a failure of the HA client's own machinery
        ├── ReconnectGaveUp      the chooser or the delay strategy stopped retrying
        ├── PublishGap           the broker persisted less than the publish store discarded
        ├── PublishFlushTimeout  publish_flush(timeout) ran out (also a TimeoutError)
        ├── PublishStoreFull     the publish store is at its capacity (wait_for_room)
        ├── CatchUpTimeout       a resumed bookmark subscription's server never caught up
        ├── StoreLocked          another process (or store object) owns the store file
        ├── StoreIOError         a store file's write, fsync or open failed (ENOSPC, EIO)
        └── StoreClosed          a store used after close()

``ReconnectGaveUp`` is raised by every waiter (``connect_and_logon``, publishes waiting in
``publish_flush``, ``async for`` over a subscription) and also handed to the exception
listener, since nobody may be waiting when the reconnect handler gives up.
"""

from __future__ import annotations

import errno as _errno

from spool.server.client.errors import ClientError


class HAError(ClientError):
    """A failure of the HA client's machinery (not a broker failure ack)."""


class ReconnectGaveUp(HAError):
    """Reconnection stopped: the server chooser has no URI left, or the delay strategy's
    total retry time ran out.

    Attributes:
        detail: the chooser's ``get_error()`` text, or the delay strategy's reason.
        last_error: the error of the last connection attempt, if there was one.
    """

    def __init__(self, detail: str, last_error: BaseException | None = None) -> None:
        text = detail if last_error is None else f"{detail} (last error: {last_error!r})"
        super().__init__(text)
        self.detail = detail
        self.last_error = last_error


class PublishGap(HAError):
    """The broker's last persisted sequence for this client name is below what the publish
    store already discarded as persisted: messages acked earlier are missing there (a
    failover to a server that did not have them). Raised only with ``error_on_publish_gap``.

    Attributes:
        server_seq: the ``s`` of the logon ack.
        store_seq: the highest sequence the store discarded.
    """

    def __init__(self, server_seq: int, store_seq: int) -> None:
        super().__init__(
            f"publish gap: the server persisted up to sequence {server_seq} for this client "
            f"name, but the publish store already discarded up to {store_seq}"
        )
        self.server_seq = server_seq
        self.store_seq = store_seq


class PublishFlushTimeout(HAError, TimeoutError):
    """``publish_flush(timeout)`` ran out with publishes still unpersisted.

    Attributes:
        unpersisted: how many publishes the store still held.
    """

    def __init__(self, timeout: float, unpersisted: int) -> None:
        super().__init__(
            f"publish_flush: {unpersisted} publishes still not persisted after {timeout} s"
        )
        self.unpersisted = unpersisted


class PublishStoreFull(HAError):
    """The publish store holds ``capacity`` messages not yet confirmed: ``publish`` is
    refused until the broker confirms some (``await HAClient.wait_for_room()`` waits).

    Attributes:
        capacity: the store's bound.
    """

    def __init__(self, capacity: int, wanted: int) -> None:
        super().__init__(
            f"the publish store holds its capacity of {capacity} unconfirmed messages "
            f"({wanted} more asked): wait for room (HAClient.wait_for_room) or size the store "
            "for peak rate x longest outage"
        )
        self.capacity = capacity


class CatchUpTimeout(HAError):
    """A bookmark subscription resumed on a server whose log lacked its resume point for
    longer than ``catch_up_timeout`` (a failover over an unsafe link): what the policy did
    is in the message; the exception listener gets it (and, under the ``fail`` policy,
    the subscription's iteration raises it).

    Attributes:
        sub_id: the subscription.
        bookmark: the resume point the server lacked.
        policy: ``fail``, ``epoch`` or ``now``.
    """

    def __init__(self, sub_id: str, uri: str, bookmark: str, waited: float, policy: str) -> None:
        done = {
            "fail": "the subscription ends",
            "epoch": "it resumes from the start of that server's log, dropping what it "
            "already processed: the messages missing there come later if they ever arrive",
            "now": "it resumes at NOW: messages between the resume point and now that this "
            "server has are skipped",
        }[policy]
        super().__init__(
            f"subscription {sub_id!r}: {uri} still lacks the resume point {bookmark} after "
            f"{waited:g} s; {done}"
        )
        self.sub_id = sub_id
        self.bookmark = bookmark
        self.policy = policy


class StoreLocked(HAError):
    """The store's lock file is held: one store file has one owner at a time.

    Attributes:
        path: the lock file.
        holder: what the holder wrote in it (``pid HOST``), when readable.
    """

    def __init__(self, path: str, holder: str) -> None:
        who = f" (held by {holder})" if holder else ""
        super().__init__(f"store {path} is already open in another client{who}")
        self.path = path
        self.holder = holder


class StoreIOError(HAError):
    """A file store's I/O failed (the disk is full, ``ENOSPC``; or it failed, ``EIO``).

    The store keeps its state in memory and writes nothing more until it recovers: the
    HA client tells the exception listener, refuses new publishes with this error while
    the publish store is failed, holds a bookmark subscription's next message until its
    discards are written again, and retries (a rewrite of the whole store from memory)
    until the disk takes it (docs/ha-client.md "When a store's disk fails").

    Attributes:
        path: the store file.
        errno: the OS error number (``errno.ENOSPC``, ``errno.EIO``...), or None when the
            failure was not an ``OSError``.
        operation: what failed: ``open`` (reading or repairing the file) or ``write``
            (a write, fsync or compaction; also what ``close`` raises when the last
            writes did not all reach the file).
        cause: the original exception.
    """

    def __init__(self, path: str, operation: str, cause: BaseException) -> None:
        number = cause.errno if isinstance(cause, OSError) else None
        what = cause.strerror if isinstance(cause, OSError) and cause.strerror else repr(cause)
        name = _errno.errorcode.get(number, str(number)) if number is not None else "no errno"
        super().__init__(f"store {path}: {operation} failed: {what} ({name})")
        self.path = path
        self.errno = number
        self.operation = operation
        self.cause = cause


class StoreClosed(HAError):
    """A store was used after :meth:`close`."""


__all__ = [
    "CatchUpTimeout",
    "HAError",
    "PublishFlushTimeout",
    "PublishGap",
    "PublishStoreFull",
    "ReconnectGaveUp",
    "StoreClosed",
    "StoreIOError",
    "StoreLocked",
]
