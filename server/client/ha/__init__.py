"""The HA client (issue 16): a session that survives client restarts, server restarts and
failovers with no message lost or duplicated. Guide: docs/ha-client.md.

Modules, lowest first: ``errors``; the pure parts ``delay`` (reconnect delay strategies),
``chooser`` (server choosers), ``heartbeat`` (liveness), ``resume`` (one bookmark
subscription's resume point and duplicates), ``listeners`` (connection states, the
subscription manager); ``lockfile`` and ``recordlog`` (the stores' file: lock, checksummed
records, crash-safe compaction, writes off the loop); ``recovery`` (recovery point
adapters, the SOW one); ``publishstore`` and ``bookmarkstore``; ``sender`` (the publish
path: number, store, send once written, resend after a logon) and ``subscription`` (the
iterator that outlives connections); ``haclient`` (the reconnect handler composing them).
"""

from server.client.ha.bookmarkstore import BookmarkStore, FileBookmarkStore, MemoryBookmarkStore
from server.client.ha.chooser import (
    Authenticator,
    Credentials,
    DefaultServerChooser,
    ServerChooser,
    StaticAuthenticator,
)
from server.client.ha.delay import DelayStrategy, ExponentialDelayStrategy, FixedDelayStrategy
from server.client.ha.errors import (
    HAError,
    PublishFlushTimeout,
    PublishGap,
    ReconnectGaveUp,
    StoreClosed,
    StoreLocked,
)
from server.client.ha.haclient import HAClient
from server.client.ha.listeners import (
    ConnectionState,
    ConnectionStateEvent,
    DefaultSubscriptionManager,
    SubscriptionManager,
)
from server.client.ha.publishstore import (
    FilePublishStore,
    MemoryPublishStore,
    PublishStore,
    StoredPublish,
)
from server.client.ha.recovery import RecoveryPointAdapter, SowRecoveryPointAdapter
from server.client.ha.resume import EPOCH, NOW
from server.client.ha.subscription import HAMessage, HASubscription

__all__ = [
    "EPOCH",
    "NOW",
    "Authenticator",
    "BookmarkStore",
    "ConnectionState",
    "ConnectionStateEvent",
    "Credentials",
    "DefaultServerChooser",
    "DefaultSubscriptionManager",
    "DelayStrategy",
    "ExponentialDelayStrategy",
    "FileBookmarkStore",
    "FilePublishStore",
    "FixedDelayStrategy",
    "HAClient",
    "HAError",
    "HAMessage",
    "HASubscription",
    "MemoryBookmarkStore",
    "MemoryPublishStore",
    "PublishFlushTimeout",
    "PublishGap",
    "PublishStore",
    "ReconnectGaveUp",
    "RecoveryPointAdapter",
    "ServerChooser",
    "SowRecoveryPointAdapter",
    "StaticAuthenticator",
    "StoreClosed",
    "StoreLocked",
    "StoredPublish",
    "SubscriptionManager",
]
