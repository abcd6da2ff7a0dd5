"""Python client of Spool: :class:`Client` (asyncio) and :class:`SyncClient` (blocking).

Modules, lowest first: ``errors`` (what the client raises), ``events`` (values and the
events of the session state), ``state`` (sans-I/O session state: frames in, events out,
commands as bytes), ``connection`` (the transport: bytes in and out over a websocket),
``options`` (``ClientOptions``: how a client or an HA client connects and logs on),
``client`` (the asyncio API composing the two), ``sync`` (a blocking wrapper), ``queue``
(queue consumers: per-message ack / cancel, auto-ack); ``tls``
(the client's TLS context: verify by default, CA file, client certificate); ``ha`` (the HA
client over the others: stores, server chooser, reconnect; docs/ha-client.md).
"""

from spool.server.client.client import (
    Ack,
    Client,
    ClientError,
    Disconnected,
    LogonInfo,
    Message,
    SowResult,
    Subscription,
)
from spool.server.client.connection import HandshakeFailed
from spool.server.client.errors import InvalidOption, ReusedSequence, ReusedSequenceWarning
from spool.server.client.events import FailoverSafety
from spool.server.client.ha import (
    EPOCH,
    MOST_RECENT,
    NOW,
    CatchUpTimeout,
    ConnectionState,
    ConnectionStateEvent,
    DefaultServerChooser,
    DefaultSubscriptionManager,
    ExponentialDelayStrategy,
    FileBookmarkStore,
    FilePublishStore,
    FixedDelayStrategy,
    HAClient,
    HAError,
    HAMessage,
    HAQueueMessage,
    HAQueueSubscription,
    HASubscription,
    MemoryBookmarkStore,
    MemoryPublishStore,
    PublishFlushTimeout,
    PublishGap,
    PublishStoreFull,
    ReconnectGaveUp,
    ServerChooser,
    SowRecoveryPointAdapter,
    StoreIOError,
    StoreLocked,
)
from spool.server.client.options import ClientOptions
from spool.server.client.queue import QueueMessage, QueueSubscription, subscribe_queue
from spool.server.client.sync import SyncClient, SyncSubscription
from spool.server.client.tls import client_context

__all__ = [
    "EPOCH",
    "MOST_RECENT",
    "NOW",
    "Ack",
    "CatchUpTimeout",
    "Client",
    "ClientError",
    "ClientOptions",
    "ConnectionState",
    "ConnectionStateEvent",
    "DefaultServerChooser",
    "DefaultSubscriptionManager",
    "Disconnected",
    "ExponentialDelayStrategy",
    "FailoverSafety",
    "FileBookmarkStore",
    "FilePublishStore",
    "FixedDelayStrategy",
    "HAClient",
    "HAError",
    "HAMessage",
    "HAQueueMessage",
    "HAQueueSubscription",
    "HASubscription",
    "HandshakeFailed",
    "InvalidOption",
    "LogonInfo",
    "MemoryBookmarkStore",
    "MemoryPublishStore",
    "Message",
    "PublishFlushTimeout",
    "PublishGap",
    "PublishStoreFull",
    "QueueMessage",
    "QueueSubscription",
    "ReconnectGaveUp",
    "ReusedSequence",
    "ReusedSequenceWarning",
    "ServerChooser",
    "SowRecoveryPointAdapter",
    "SowResult",
    "StoreIOError",
    "StoreLocked",
    "Subscription",
    "SyncClient",
    "SyncSubscription",
    "client_context",
    "subscribe_queue",
]
