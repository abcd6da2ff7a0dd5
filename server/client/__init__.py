"""Python client of Spool: :class:`Client` (asyncio) and :class:`SyncClient` (blocking)."""

from server.client.client import (
    Ack,
    Client,
    ClientError,
    Disconnected,
    LogonInfo,
    Message,
    Subscription,
)
from server.client.sync import SyncClient, SyncSubscription

__all__ = [
    "Ack",
    "Client",
    "ClientError",
    "Disconnected",
    "LogonInfo",
    "Message",
    "Subscription",
    "SyncClient",
    "SyncSubscription",
]
