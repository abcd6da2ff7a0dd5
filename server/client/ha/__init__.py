"""The HA client: a session that survives client restarts, server restarts and
failovers with no message lost or duplicated. Guide: docs/ha-client.md.

Modules, lowest first: ``errors``; the pure parts ``delay`` (reconnect delay strategies),
``chooser`` (server choosers), ``heartbeat`` (liveness), ``resume`` (one bookmark
subscription's resume point and duplicates), ``listeners`` (connection states, the
subscription manager); ``lockfile`` and ``recordlog`` (the stores' file: lock, checksummed
records, crash-safe compaction, writes off the loop); ``recovery`` (recovery point
adapters, the SOW one); ``publishstore`` and ``bookmarkstore``; ``sender`` (the publish
path: number, store, send once written, resend after a logon) and ``subscription`` (the
iterator that outlives connections); ``queue`` (a queue consumer that outlives
connections); ``haclient`` (the reconnect handler composing them).
"""

from spool.server.client.ha.bookmarkstore import (
    BookmarkStore,
    FileBookmarkStore,
    MemoryBookmarkStore,
)
from spool.server.client.ha.chooser import (
    Authenticator,
    Credentials,
    DefaultServerChooser,
    SafetyAware,
    ServerChooser,
    StaticAuthenticator,
)
from spool.server.client.ha.delay import DelayStrategy, ExponentialDelayStrategy, FixedDelayStrategy
from spool.server.client.ha.errors import (
    CatchUpTimeout,
    HAError,
    PublishFlushTimeout,
    PublishGap,
    PublishStoreFull,
    ReconnectGaveUp,
    StoreClosed,
    StoreIOError,
    StoreLocked,
)
from spool.server.client.ha.haclient import FailoverListener, HAClient
from spool.server.client.ha.listeners import (
    ConnectionState,
    ConnectionStateEvent,
    DefaultSubscriptionManager,
    SubscriptionManager,
)
from spool.server.client.ha.publishstore import (
    DEFAULT_CAPACITY,
    FilePublishStore,
    MemoryPublishStore,
    PublishStore,
    StoredPublish,
)
from spool.server.client.ha.queue import HAQueueMessage, HAQueueSubscription
from spool.server.client.ha.recovery import RecoveryPointAdapter, SowRecoveryPointAdapter
from spool.server.client.ha.resume import EPOCH, MOST_RECENT, NOW
from spool.server.client.ha.subscription import (
    ACTIVE,
    CATCHING_UP,
    ENDED,
    HAMessage,
    HASubscription,
)

__all__ = [
    "ACTIVE",
    "CATCHING_UP",
    "DEFAULT_CAPACITY",
    "ENDED",
    "EPOCH",
    "MOST_RECENT",
    "NOW",
    "Authenticator",
    "BookmarkStore",
    "CatchUpTimeout",
    "ConnectionState",
    "ConnectionStateEvent",
    "Credentials",
    "DefaultServerChooser",
    "DefaultSubscriptionManager",
    "DelayStrategy",
    "ExponentialDelayStrategy",
    "FailoverListener",
    "FileBookmarkStore",
    "FilePublishStore",
    "FixedDelayStrategy",
    "HAClient",
    "HAError",
    "HAMessage",
    "HAQueueMessage",
    "HAQueueSubscription",
    "HASubscription",
    "MemoryBookmarkStore",
    "MemoryPublishStore",
    "PublishFlushTimeout",
    "PublishGap",
    "PublishStore",
    "PublishStoreFull",
    "ReconnectGaveUp",
    "RecoveryPointAdapter",
    "SafetyAware",
    "ServerChooser",
    "SowRecoveryPointAdapter",
    "StaticAuthenticator",
    "StoreClosed",
    "StoreIOError",
    "StoreLocked",
    "StoredPublish",
    "SubscriptionManager",
]
