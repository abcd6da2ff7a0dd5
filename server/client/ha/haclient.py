"""The HA client: a :class:`~spool.server.client.client.Client` per connection, composed with
the pure parts into one session that survives restarts and failovers.

The reconnect handler (:meth:`HAClient._reconnect`) runs the seed's steps in order:
chooser, delay, connect and logon, report success, trim the publish store to the logon
ack's ``s``, republish what it holds, resubscribe (bookmark subscriptions from the bookmark
store's resume point); a failure after connecting starts over, and giving up raises
:class:`ReconnectGaveUp` everywhere. Publishes are numbered, stored, and sent once stored,
always with ``a=persisted``; what discards them depends on the broker's failover safety
(persisted acks, or replicated acks while failover is unsafe). A file store whose disk
fails keeps its state in memory and is rewritten every ``store_retry`` seconds. See
docs/ha-client.md "The reconnect handler", "Failover safety" and "When a store's disk
fails".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final, Unpack

from spool.server.client.client import Client, SowResult, Subscription
from spool.server.client.errors import ClientError, Disconnected, InvalidOption
from spool.server.client.events import (
    Event,
    Failed,
    FailoverChanged,
    FailoverSafety,
    LogonInfo,
    Message,
    Persisted,
    PositionReported,
    Replicated,
)
from spool.server.client.ha.bookmarkstore import BookmarkStore, MemoryBookmarkStore
from spool.server.client.ha.chooser import ServerChooser
from spool.server.client.ha.delay import DelayStrategy, ExponentialDelayStrategy
from spool.server.client.ha.errors import (
    CatchUpTimeout,
    HAError,
    PublishFlushTimeout,
    PublishStoreFull,
    ReconnectGaveUp,
    StoreClosed,
    StoreIOError,
)
from spool.server.client.ha.heartbeat import HeartbeatLiveness
from spool.server.client.ha.listeners import (
    ConnectionState,
    ConnectionStateEvent,
    ConnectionStateListener,
    DefaultSubscriptionManager,
    ExceptionListener,
    SubscriptionManager,
)
from spool.server.client.ha.publishstore import MemoryPublishStore, PublishStore
from spool.server.client.ha.queue import ACKED_MEMORY, HAQueueSubscription
from spool.server.client.ha.resume import EPOCH, MOST_RECENT, NOW
from spool.server.client.ha.sender import PublishSender
from spool.server.client.ha.subscription import (
    ACTIVE,
    CATCHING_UP,
    END,
    HAMessage,
    HASubscription,
    SubscriptionSpec,
)
from spool.server.client.options import ClientKeywords, ClientOptions, resolve
from spool.server.client.state import encode_body, publish_options
from spool.server.protocol.errors import BookmarkNotFound, ProtocolFailure, TxlogFull

#: what a failed connection attempt may raise (docs/python-client.md "Connecting").
_CONNECT_ERRORS = (OSError, TimeoutError, ClientError)
#: what a failed connection attempt may raise at steps 3 and 4: also a refused logon (the
#: name still held at another instance of the fabric, the server shutting down, its logon
#: throttle): another server, or the same one later, may take it
_LOGON_ERRORS = (*_CONNECT_ERRORS, ProtocolFailure)
#: what every logon asks for (docs/protocol.md "Logon options")
LOGON_OPTIONS = "failover,replicated"
#: the client options the HA client sets on every connection itself
_SET_BY_HA: Final = frozenset({"user_id", "password", "logon_options", "reused_seq"})
#: told ``(uri, safety)`` whenever a server says how safe failing over from it is
FailoverListener = Callable[[str, FailoverSafety], None]
#: what a resumed bookmark subscription does once its server has lacked its resume point
#: for ``catch_up_timeout`` seconds
CATCH_UP_POLICIES = ("fail", "epoch", "now")


class HAClient:
    """A client whose session survives lost connections (module docstring).

    Args:
        name: the client name (the publisher identity the broker deduplicates by).
        publish_store: keeps unpersisted publishes (default: in memory).
        bookmark_store: keeps bookmark subscriptions' positions (default: in memory).
        chooser: the servers (required).
        delay: the reconnect delay strategy (default: exponential).
        error_on_publish_gap: fail a logon whose ``s`` is below what the store discarded.
        options: how each connection connects (:class:`ClientOptions`, as for
            :class:`~spool.server.client.client.Client`; docs/python-client.md
            "Options"), or the same as keyword arguments (``connect_timeout=5``). The HA
            client sets ``user_id`` and ``password`` (the chooser's authenticator),
            ``logon_options`` and ``reused_seq`` itself; a ``heartbeat`` is
            :meth:`set_heartbeat` with that interval.
        subscription_manager: replaces the default (re-enter everything, in order).
        sleep: waits of the delay strategy (a virtual clock's in tests).
        catch_up_timeout: seconds a resumed bookmark subscription waits for a server that
            lacks its resume point (a failover over an unsafe link) before its
            ``catch_up_policy`` applies.
        catch_up_policy: ``epoch`` (resume from the start of that server's log, dropping
            what was processed: nothing it has is skipped), ``now`` (resume at NOW: an
            accepted gap) or ``fail`` (end the subscription); each reports a
            :class:`CatchUpTimeout` to the exception listener.
        catch_up_retry: seconds between two attempts while catching up.
        store_retry: seconds between two attempts to write a failed file store again
            (module docstring).
    """

    def __init__(
        self,
        name: str,
        *,
        publish_store: PublishStore | None = None,
        bookmark_store: BookmarkStore | None = None,
        chooser: ServerChooser,
        delay: DelayStrategy | None = None,
        error_on_publish_gap: bool = False,
        options: ClientOptions | None = None,
        subscription_manager: SubscriptionManager[HASubscription] | None = None,
        sleep: Callable[[float], Any] = asyncio.sleep,
        catch_up_timeout: float = 60.0,
        catch_up_policy: str = "epoch",
        catch_up_retry: float = 0.5,
        store_retry: float = 1.0,
        **keywords: Unpack[ClientKeywords],
    ) -> None:
        opts = resolve(options, keywords)
        owned = sorted(opts.changed() & _SET_BY_HA)
        if owned:
            raise InvalidOption(
                f"{', '.join(owned)}: the HA client sets these itself (credentials come from "
                "the chooser's authenticator)"
            )
        if catch_up_policy not in CATCH_UP_POLICIES:
            raise ValueError(
                f"catch_up_policy must be one of {', '.join(CATCH_UP_POLICIES)}, not "
                f"{catch_up_policy!r}"
            )
        if catch_up_retry <= 0 or catch_up_timeout < 0:
            raise ValueError("catch_up_retry must be > 0 and catch_up_timeout >= 0")
        if store_retry <= 0:
            raise ValueError(f"store_retry must be > 0, not {store_retry}")
        self.store_retry = store_retry
        self.catch_up_timeout = catch_up_timeout
        self.catch_up_policy = catch_up_policy
        self.catch_up_retry = catch_up_retry
        self.name = name
        self.publish_store: PublishStore = publish_store or MemoryPublishStore()
        self.bookmark_store: BookmarkStore = bookmark_store or MemoryBookmarkStore()
        self.publish_store.on_failure = self._store_failed
        self.bookmark_store.on_failure = self._store_failed
        self._store_recovery: asyncio.Task[None] | None = None
        self.chooser = chooser
        self.delay: DelayStrategy = delay or ExponentialDelayStrategy()
        self.error_on_publish_gap = error_on_publish_gap
        #: what each connection's :class:`Client` is given (its credentials, logon options
        #: and heartbeat filled in per connection)
        self.options = opts
        self.subscriptions: SubscriptionManager[HASubscription] = (
            subscription_manager or DefaultSubscriptionManager()
        )
        self._sleep = sleep
        self.exception_listener: ExceptionListener | None = None
        self._state_listeners: list[ConnectionStateListener] = []
        self._liveness: HeartbeatLiveness | None = (
            None if opts.heartbeat is None else HeartbeatLiveness.of(opts.heartbeat)
        )
        self._client: Client | None = None
        self._uri: str | None = None
        self._sender = PublishSender(self.publish_store, lambda: self._client, self._ready)
        self._reconnecting: asyncio.Task[None] | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._progress = asyncio.Condition()
        self._failed: BaseException | None = None
        self._closed = False
        self._opened = False
        self._sub_ids = 0
        self._failover_listeners: list[FailoverListener] = []
        #: the current broker's failover safety (None: it does not replicate)
        self._safety: FailoverSafety | None = None
        #: the current broker gives replicated acks
        self._replicated_acks = False
        #: the highest sequence the current broker persisted for this client name
        self._persisted = 0
        self._catch_ups: set[asyncio.Task[None]] = set()
        #: the wait, then the resend of publishes the broker refused for now (txlog full)
        self._resending: asyncio.Task[None] | None = None
        #: the first sequence of the last such resend, until an ack confirms it
        self._resent: int | None = None

    # -- listeners -----------------------------------------------------------------------

    def add_connection_state_listener(self, listener: ConnectionStateListener) -> None:
        self._state_listeners.append(listener)

    def remove_connection_state_listener(self, listener: ConnectionStateListener) -> None:
        self._state_listeners.remove(listener)

    def add_failover_listener(self, listener: FailoverListener) -> None:
        """``listener(uri, safety)`` hears what each server says of failing over from it:
        at every logon (``detail`` ``logon``) and at every notice on the open connection
        (a destination downgraded, upgraded, connected or lost)."""
        self._failover_listeners.append(listener)

    def remove_failover_listener(self, listener: FailoverListener) -> None:
        self._failover_listeners.remove(listener)

    @property
    def safety(self) -> FailoverSafety | None:
        """How safe failing over from the current (or last) server is; None when it does
        not replicate."""
        return self._safety

    def _trust_persisted(self) -> bool:
        """Whether a persisted ack may discard the publish store: failover from the broker
        is safe, or the broker cannot say more (it does not replicate, or gives no
        replicated acks)."""
        safety = self._safety
        return safety is None or safety.safe or not self._replicated_acks

    def _safety_known(self, safety: FailoverSafety | None) -> None:
        self._safety = safety
        uri = self._uri
        if uri is None:
            return
        report = getattr(self.chooser, "report_safety", None)
        if report is not None:
            report(uri, None if safety is None else safety.safe)
        if safety is None:
            return
        for listener in list(self._failover_listeners):
            try:
                listener(uri, safety)
            except Exception as exc:  # a listener's bug must not stop the client
                self._report(exc)

    def _tell(self, state: ConnectionState, uri: str | None = None, detail: str = "") -> None:
        event = ConnectionStateEvent(state, uri, detail)
        for listener in list(self._state_listeners):
            try:
                listener(event)
            except Exception as exc:  # a listener's bug must not stop the reconnect
                self._report(exc)

    def _report(self, exc: BaseException) -> None:
        listener = self.exception_listener
        if listener is not None:
            with contextlib.suppress(Exception):
                listener(exc)

    # -- connection ----------------------------------------------------------------------

    @property
    def uri(self) -> str | None:
        """The server of the current (or last) connection."""
        return self._uri

    @property
    def client(self) -> Client | None:
        """The current connection's client (None while reconnecting)."""
        return self._client

    @property
    def logon(self) -> LogonInfo | None:
        return None if self._client is None else self._client.logon

    def set_heartbeat(self, interval: float, idle: float | None = None) -> None:
        """Heartbeats every ``interval`` seconds; nothing received for ``idle`` (default:
        two intervals) means the connection is dead and the reconnect handler runs."""
        self._liveness = HeartbeatLiveness.of(interval, idle)
        c = self._client
        if c is not None and not c.closed.is_set():
            c.set_heartbeat(interval)
            self._start_monitor(c)

    async def connect_and_logon(self) -> LogonInfo:
        """Open the stores and connect (retrying as the chooser and the delay strategy
        say); returns the logon ack's information.

        Raises:
            StoreLocked: a store file has another owner.
            StoreIOError: a store file could not be read or repaired.
            ReconnectGaveUp: no server could be reached before giving up (its
                ``last_error`` is a :class:`PublishGap` when the last server tried lacked
                publishes the store had discarded).
        """
        if isinstance(self._failed, ReconnectGaveUp):
            # giving up ended the last attempt, not the client: a new call starts afresh
            # (the delay strategy from its start; the chooser decides whether it has a URI)
            self._failed = None
            self.delay.reset()
        if self._failed is not None:
            raise self._failed
        c = self._client
        if c is not None and c.logon is not None and self._connected.is_set():
            return c.logon  # already connected: one session, one connection
        if not self._opened:
            await self.publish_store.open()
            await self.bookmark_store.open()
            self._opened = True
            self._sender.opened()
        self._start_reconnect()
        await self._wait_connected(None)
        assert self._client is not None and self._client.logon is not None
        return self._client.logon

    def _start_reconnect(self) -> None:
        if self._reconnecting is None or self._reconnecting.done():
            self._connected.clear()
            self._reconnecting = asyncio.get_running_loop().create_task(self._reconnect())

    async def _wait_connected(self, timeout: float | None) -> Client:
        async def wait() -> Client:
            while True:
                if self._failed is not None:
                    raise self._failed
                if self._closed:
                    raise Disconnected("closed by client")
                c = self._client
                if c is not None and self._connected.is_set() and not c.closed.is_set():
                    return c
                async with self._progress:
                    await self._progress.wait()

        return await asyncio.wait_for(wait(), timeout)

    async def _notify(self) -> None:
        async with self._progress:
            self._progress.notify_all()

    async def _reconnect(self) -> None:
        last_error: BaseException | None = None
        try:
            while not self._closed:
                # 1. chooser
                uri = self.chooser.current_uri()
                if uri is None:
                    raise ReconnectGaveUp(self.chooser.get_error(), last_error)
                # 2. delay (may give up)
                try:
                    wait = self.delay.get_connect_wait_duration(uri)
                except ReconnectGaveUp as exc:
                    raise ReconnectGaveUp(exc.detail, last_error) from None
                if wait > 0:
                    await self._sleep(wait)
                self._tell(ConnectionState.RECONNECTING, uri)
                creds = self.chooser.current_authenticator().authenticate(uri)
                client = Client(uri, self.name, options=replace(
                    self.options, user_id=creds.user_id, password=creds.password,
                    heartbeat=self._liveness.interval if self._liveness else None,
                    logon_options=LOGON_OPTIONS, reused_seq="allow",  # resends on purpose
                ))  # fmt: skip
                client.event_hook = self._event
                # 3. connect, 4. logon
                try:
                    info = await client.connect()
                except _LOGON_ERRORS as exc:
                    last_error = exc
                    await client.close()
                    self.chooser.report_failure(exc, uri)
                    self._tell(ConnectionState.DISCONNECTED, uri, repr(exc))
                    continue
                # a server lacking publishes the store already discarded is a failed
                # attempt on that server (reported; the delay is not reset, so a
                # bounded strategy ends in giving up with the gap as the last error)
                gap = self._sender.gap(info.last_seq) if self.error_on_publish_gap else None
                if gap is not None:
                    last_error = gap
                    self._report(gap)
                    await client.close()
                    self.chooser.report_failure(gap, uri)
                    self._tell(ConnectionState.DISCONNECTED, uri, str(gap))
                    continue
                # 5. report success
                self.chooser.report_success(uri)
                self.delay.reset()
                self._tell(ConnectionState.CONNECTED, uri)
                self._tell(ConnectionState.LOGGED_ON, uri)
                if self._uri is not None and uri != self._uri:
                    self._tell(ConnectionState.FAILED_OVER, uri)
                self._uri = uri
                try:
                    await self._resume(client, info)
                except _CONNECT_ERRORS as exc:  # lost again while resuming: start over
                    last_error = exc
                    await client.close()
                    self._tell(ConnectionState.DISCONNECTED, uri, repr(exc))
                    continue
                if client.closed.is_set():
                    continue
                self._connected.set()
                self._sender.kick()  # what was published while steps 7 and 8 ran
                await self._notify()
                return
        except ReconnectGaveUp as exc:
            self._give_up(exc)
            await self._notify()

    async def _resume(self, client: Client, info: LogonInfo) -> None:
        self._stop_resend()  # the whole store goes again on the new connection
        self._replicated_acks = "replicated" in info.options
        self._persisted = info.last_seq
        self._safety_known(info.safety)
        # 6. trim the publish store to what the broker has (a broker that confirms
        #    replication: never on the logon's word, its duplicate acks confirm instead)
        self._sender.logged_on(info.last_seq, trim=not self._replicated_acks)
        # 7. republish the rest, in order
        self._client = client
        with contextlib.suppress(StoreIOError):  # sent once the store recovered
            await self._sender.send(client)
        self._tell(ConnectionState.PUBLISH_REPLAYED, self._uri)
        # 8. resubscribe
        for sub in self.subscriptions.all():
            await sub.detached()
        await self.subscriptions.resubscribe(lambda sub: self._enter(client, sub))
        self._tell(ConnectionState.RESUBSCRIBED, self._uri)
        self._watch(client)

    def _watch(self, client: Client) -> None:
        async def watch() -> None:
            await client.closed.wait()
            # the lost connection's transport tasks end here (its close is quick: the
            # peer is gone or the transport was aborted)
            await client.close()
            if self._closed or client is not self._client:
                return
            self._connected.clear()
            self._tell(ConnectionState.DISCONNECTED, self._uri, client.close_reason)
            self._start_reconnect()

        self._watcher = asyncio.get_running_loop().create_task(watch())
        if self._liveness is not None:
            self._start_monitor(client)

    def _start_monitor(self, client: Client) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        liveness = self._liveness
        assert liveness is not None

        async def monitor() -> None:
            loop = asyncio.get_running_loop()
            due = loop.time()
            while not client.closed.is_set():
                last = client.last_received
                now = loop.time()
                # woken late: this process was busy (the application held the event loop),
                # so the reader has not taken what arrived meanwhile: judge next time
                stalled = now - due > liveness.check_every
                if last is not None and liveness.dead(now, last) and not stalled:
                    client.abandon("heartbeat")  # the watcher starts the reconnect
                    return
                wait = liveness.next_check(now, last or now) or liveness.check_every
                if stalled:
                    wait = liveness.check_every
                due = now + wait
                await asyncio.sleep(wait)

        self._monitor = asyncio.get_running_loop().create_task(monitor())

    def _give_up(self, exc: BaseException) -> None:
        self._failed = exc
        self._report(exc)
        for sub in self.subscriptions.all():
            sub.end(exc)
        self._tell(ConnectionState.CLOSED, self._uri, str(exc))

    # -- stores --------------------------------------------------------------------------

    @property
    def store_failure(self) -> StoreIOError | None:
        """Why a store writes nothing now (the publish store's first); None when both
        write."""
        return self.publish_store.failure or self.bookmark_store.failure

    def _store_failed(self, failure: StoreIOError) -> None:
        """A store stopped writing: tell the application, and rewrite it until it works."""
        self._report(failure)
        if self._closed:
            return
        if self._store_recovery is None or self._store_recovery.done():
            loop = asyncio.get_running_loop()
            self._store_recovery = loop.create_task(self._recover_stores())

    async def _recover_stores(self) -> None:
        stores = (self.publish_store, self.bookmark_store)
        while not self._closed and any(store.failure is not None for store in stores):
            await self._sleep(self.store_retry)
            for store in stores:
                if store.failure is not None and not self._closed:
                    with contextlib.suppress(StoreIOError, StoreClosed):  # next time
                        await store.recover()
        self._sender.kick()  # what the publish store took before it failed
        await self._notify()

    # -- events of the current connection ------------------------------------------------

    def _event(self, event: Event[Subscription]) -> None:
        if isinstance(event, Persisted):
            seq = self._sender.confirmed(event.seq)
            self._persisted = max(self._persisted, seq)
            if self._trust_persisted():
                self.publish_store.discard_up_to(seq)
            if self._resent is not None and seq >= self._resent:
                self._resent = None  # the resend went through: a fresh schedule next time
                self.delay.reset()
            asyncio.get_running_loop().create_task(self._notify())
        elif isinstance(event, Replicated):
            self.publish_store.discard_up_to(self._sender.confirmed(event.seq))
            asyncio.get_running_loop().create_task(self._notify())
        elif isinstance(event, FailoverChanged):
            self._safety_known(event.safety)
        elif isinstance(event, PositionReported):
            if event.bookmark and self.subscriptions.get(event.subscription.sub_id):
                sub = self.subscriptions.get(event.subscription.sub_id)
                if sub is not None and sub.spec.bookmark is not None:
                    self.bookmark_store.persisted(sub.sub_id, event.bookmark)
        elif (
            isinstance(event, Failed)
            and event.subscription is None
            and event.ack.reason != "duplicate"
        ):
            self._report(event.error)
            refused = event.ack.header.get("s")
            if (
                isinstance(event.error, TxlogFull)
                and event.ack.kind == "processed"  # refused, not accepted and kept
                and isinstance(refused, int)
                and self._sender.refuse(refused)
            ):
                self._schedule_resend()

    # -- publishes refused for now -------------------------------------------------------

    def _schedule_resend(self) -> None:
        """Resend from the lowest refused publish after the delay strategy's wait, on the
        current connection (docs/ha-client.md "When a broker refuses writes")."""
        client = self._client
        if client is None or (self._resending is not None and not self._resending.done()):
            return
        self._resending = asyncio.get_running_loop().create_task(self._resend(client))

    async def _resend(self, client: Client) -> None:
        uri = self._uri or ""
        try:
            wait = self.delay.get_connect_wait_duration(uri)
        except ReconnectGaveUp:
            # retried as long as the strategy allows: the connection ends, and the
            # reconnect handler (with the same strategy) gives up or finds another server
            client.abandon("txlog full: gave up resending refused publishes")
            return
        if wait > 0:
            await self._sleep(wait)
        if client is self._client and not client.closed.is_set():
            self._resent = self._sender.resend_refused()

    def _stop_resend(self) -> None:
        if self._resending is not None and self._resending is not asyncio.current_task():
            self._resending.cancel()
        self._resending = None
        self._resent = None

    # -- publishing ----------------------------------------------------------------------

    def publish(
        self,
        topic: str,
        data: bytes | str | Any,
        *,
        sow_key: str | None = None,
        expiration: int | None = None,
        correlation_id: str | None = None,
        deliver_at: datetime | None = None,
        deliver_after: float | timedelta | None = None,
    ) -> int:
        """Store a publish and send it as soon as it is stored and a connection is up;
        returns its sequence number. Every publish asks for a persisted ack.

        ``deliver_at`` / ``deliver_after`` ask for delayed delivery as
        :meth:`Client.publish <spool.server.client.client.Client.publish>` (same checks,
        ValueError); the store keeps the option text with the message and a resend
        carries it. A ``deliver_after`` counts from when a broker takes the message: a
        message resent after a reconnect because no broker had persisted it counts from
        the resend.
        """
        options = publish_options(deliver_at, deliver_after)
        return self._store(topic, data, sow_key, expiration, correlation_id, delta=False,
                           options=options)  # fmt: skip

    def delta_publish(
        self,
        topic: str,
        data: bytes | str | Any,
        *,
        sow_key: str | None = None,
        expiration: int | None = None,
        correlation_id: str | None = None,
    ) -> int:
        """A stored ``delta_publish`` (see :meth:`publish`)."""
        return self._store(topic, data, sow_key, expiration, correlation_id, delta=True)

    def _store(self, topic: str, data: bytes | str | Any, sow_key: str | None,
               expiration: int | None, correlation_id: str | None, *, delta: bool,
               options: str | None = None) -> int:  # fmt: skip
        self._check_open()
        self._check_room(1)
        self._check_store()
        extra: dict[str, Any] = {}
        if sow_key is not None:
            extra["k"] = sow_key
        if expiration is not None:
            extra["e"] = expiration
        if correlation_id is not None:
            extra["x"] = correlation_id
        if delta:
            extra["delta"] = True
        if options is not None:
            extra["o"] = options
        return self._sender.add(topic, encode_body(data), extra or None)

    def publish_many(self, topic: str, items: list[bytes | str | Any]) -> int:
        """Store and send a publish per item (bytes, text or JSON-able); returns the last
        sequence number. The batch form of :meth:`publish` without per-message options."""
        self._check_open()
        self._check_room(len(items))
        self._check_store()
        return self._sender.add_many(topic, [encode_body(d) for d in items])

    def _check_open(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise Disconnected("closed by client")

    def _check_store(self) -> None:
        failure = self.publish_store.failure
        if failure is not None:
            raise failure

    def _room(self) -> int | None:
        """How many more publishes the store takes now (None: no bound)."""
        capacity = self.publish_store.capacity
        if capacity is None:
            return None
        return capacity - self.publish_store.unpersisted_count()

    def _check_room(self, count: int) -> None:
        room = self._room()
        if room is not None and count > room:
            capacity = self.publish_store.capacity
            assert capacity is not None
            raise PublishStoreFull(capacity, count)

    async def wait_for_room(self, count: int = 1, timeout: float | None = None) -> None:
        """Return once the publish store takes ``count`` more publishes (the broker
        confirmed enough of what it holds, and its disk takes writes): the back-pressure
        of a publisher that must not outrun its store.

        Raises:
            TimeoutError: ``timeout`` ran out first.
            ValueError: ``count`` is above the store's capacity.
            ReconnectGaveUp: reconnection gave up first.
        """
        capacity = self.publish_store.capacity
        if capacity is not None and count > capacity:
            raise ValueError(f"{count} publishes cannot fit a store of capacity {capacity}")

        def fits() -> bool:
            if self._failed is not None or self._closed:
                return True
            room = self._room()
            return (room is None or room >= count) and self.publish_store.failure is None

        async def wait() -> None:
            async with self._progress:
                await self._progress.wait_for(fits)

        await asyncio.wait_for(wait(), timeout)
        self._check_open()

    def _ready(self) -> Client | None:
        """The current connection once it is fully resumed (steps 1-8 done)."""
        c = self._client
        return c if c is not None and self._connected.is_set() and not c.closed.is_set() else None

    def unpersisted_count(self) -> int:
        """Publishes the current broker has not acked as persisted yet."""
        return self.publish_store.count_after(self._persisted)

    def unreplicated_count(self) -> int:
        """Publishes the publish store still holds: not persisted yet, or (while failover
        is unsafe) persisted but not yet on every replication destination."""
        return self.publish_store.unpersisted_count()

    async def publish_flush(
        self, timeout: float | None = None, *, replicated: bool = False
    ) -> None:
        """Wait until every publish made so far is persisted by the broker, across
        reconnects; with ``replicated``, until the store dropped them all (while failover
        is unsafe: until they are on every replication destination).

        Raises:
            PublishFlushTimeout: ``timeout`` ran out first.
            ReconnectGaveUp: reconnection gave up first.
        """
        target = self._sender.seq
        store = self.publish_store

        def done() -> bool:
            if store.last_discarded >= target:
                return True
            return not replicated and self._persisted >= target

        async def wait() -> None:
            async with self._progress:
                await self._progress.wait_for(
                    lambda: done() or self._failed is not None or self._closed
                )

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            left = self.unreplicated_count() if replicated else self.unpersisted_count()
            raise PublishFlushTimeout(timeout or 0.0, left) from None
        if not done():
            if self._failed is not None:
                raise self._failed
            raise Disconnected("closed by client")

    # -- subscriptions -------------------------------------------------------------------

    async def subscribe(
        self,
        topic: str,
        *,
        filter: str | None = None,
        bookmark: str | None = None,
        options: str | None = None,
        sub_id: str | None = None,
        timeout: float | None = 30.0,
    ) -> HASubscription:
        """Subscribe; with ``bookmark`` a bookmark subscription that resumes from the
        bookmark store (its starting point: ``bookmark``, unless the store already knows
        ``sub_id``; :data:`MOST_RECENT`: the store's resume point, EPOCH when it has
        none). Returns once the current connection's broker accepted it (or, resuming on a
        server that lacks its resume point, once it is catching up: its ``state``)."""
        return await self._subscribe("subscribe", topic, filter, options, bookmark, sub_id,
                                     timeout)  # fmt: skip

    async def delta_subscribe(self, topic: str, *, filter: str | None = None,
                              options: str | None = None, sub_id: str | None = None,
                              timeout: float | None = 30.0) -> HASubscription:  # fmt: skip
        """A ``delta_subscribe`` re-entered as it was after a reconnect."""
        return await self._subscribe("delta_subscribe", topic, filter, options, None, sub_id,
                                     timeout)  # fmt: skip

    async def sow_and_subscribe(
        self,
        topic: str,
        *,
        filter: str | None = None,
        options: str | None = None,
        sub_id: str | None = None,
        top_n: int | None = None,
        orderby: str | None = None,
        batch_size: int | None = None,
        delta: bool = False,
        timeout: float | None = 30.0,
    ) -> HASubscription:
        """A ``sow_and_subscribe`` (``delta``: ``sow_and_delta_subscribe``); after a
        reconnect it is re-entered as it was: a new snapshot, then live changes."""
        extra = tuple((k, v) for k, v in (("top_n", top_n), ("orderby", orderby),
                      ("batch_size", batch_size), ("delta", delta or None)) if v is not None)  # fmt: skip
        return await self._subscribe("sow_and_subscribe", topic, filter, options, None, sub_id,
                                     timeout, extra)  # fmt: skip

    async def _subscribe(self, command: str, topic: str, filter: str | None,
                         options: str | None, bookmark: str | None, sub_id: str | None,
                         timeout: float | None,
                         extra: tuple[tuple[str, Any], ...] = ()) -> HASubscription:  # fmt: skip
        sub_id = self._new_sub_id(sub_id)
        if bookmark == MOST_RECENT:
            bookmark = EPOCH  # where it starts when the store knows nothing of sub_id
        spec = SubscriptionSpec(command, topic, filter, options, bookmark, extra)
        store = self.bookmark_store
        if bookmark is not None:
            store.register(sub_id, bookmark)
        sub = HASubscription(
            sub_id, spec, self.options.queue_size,
            receive=store.receive if bookmark is not None else None,
            discard=store.discard, unsubscribe=self.unsubscribe,
            store=store if bookmark is not None else None,
        )  # fmt: skip
        return await self._add(sub, timeout)

    async def _add(self, sub: HASubscription, timeout: float | None) -> HASubscription:
        """Enter a new subscription on the current connection (or the next one)."""
        self.subscriptions.add(sub.sub_id, sub)
        client = await self._wait_connected(timeout)
        try:
            await self._enter(client, sub, initial=True)
        except Disconnected:
            return sub  # the reconnect handler enters it on the next connection
        except BaseException:  # refused, timed out, cancelled: it does not exist
            self.subscriptions.remove(sub.sub_id)
            sub.end()
            raise
        return sub

    def _new_sub_id(self, sub_id: str | None) -> str:
        if sub_id is None:
            self._sub_ids += 1
            sub_id = f"{self.name}.{self._sub_ids}"
        if self.subscriptions.get(sub_id) is not None:
            raise HAError(f"sub_id {sub_id!r} is already subscribed in this client")
        return sub_id

    async def subscribe_queue(
        self,
        queue: str,
        *,
        max_backlog: int | None = None,
        filter: str | None = None,
        sub_id: str | None = None,
        timeout: float | None = 30.0,
        acked_memory: int = ACKED_MEMORY,
    ) -> HAQueueSubscription:
        """Consume queue ``queue`` across reconnects (``max_backlog``: most messages
        leased at once; the broker grants at most the queue's
        ``MaxPerSubscriptionBacklog``, 1 when not given). After a reconnect it subscribes
        again under the same ``sub_id``; what was leased and not acked is delivered again
        (docs/queues.md); a message the application acked, expired or rejected is never
        handed to it again (its last ``acked_memory`` are remembered and a redelivery is
        settled again the same way: server/client/ha/queue.py)."""
        sub_id = self._new_sub_id(sub_id)
        options = f"max_backlog={max_backlog}" if max_backlog is not None else None
        spec = SubscriptionSpec("subscribe", queue, filter, options, None)
        sub = HAQueueSubscription(
            sub_id, spec, self.options.queue_size, current=self._ready, unsubscribe=self.unsubscribe,
            acked_memory=acked_memory,
        )  # fmt: skip
        added = await self._add(sub, timeout)
        assert isinstance(added, HAQueueSubscription)
        return added

    async def _enter(self, client: Client, sub: HASubscription, *, initial: bool = False) -> None:
        """Subscribe ``sub`` on ``client``. A broker refusal raises on the first entry; on a
        re-entry it ends the subscription's iteration with the broker's error and reaches
        the exception listener (nobody waits for a resubscription)."""
        if sub.ended:
            return
        spec = sub.spec
        guarded = False
        bookmark: str | None = None
        try:
            if spec.command == "sow_and_subscribe":
                current = await client.sow_and_subscribe(
                    spec.topic,
                    filter=spec.filter,
                    options=spec.options,
                    sub_id=sub.sub_id,
                    **dict(spec.extra),
                )
            else:
                bookmark, options, guarded = self._resume_point(sub)
                current = await client.subscribe(
                    spec.topic, filter=spec.filter, bookmark=bookmark, options=options,
                    sub_id=sub.sub_id, delta=spec.command == "delta_subscribe",
                )  # fmt: skip
        except BookmarkNotFound:
            if not guarded:
                raise
            self._start_catch_up(client, sub, bookmark or "")
            return
        except ProtocolFailure as exc:  # the broker refused it
            if initial:
                raise
            self._refused(sub, exc)
            return
        sub.attach(current)

    def _resume_point(self, sub: HASubscription) -> tuple[str | None, str | None, bool]:
        """Where ``sub`` (re)starts: its bookmark, its options, and whether a server that
        lacks that bookmark must say so (``bookmark_not_found=fail``) rather than start
        at NOW. A subscription resuming after what it processed is guarded that way
        unless its own options say what to do with an unknown bookmark."""
        spec = sub.spec
        if spec.bookmark is None:
            return None, spec.options, False
        store = self.bookmark_store
        bookmark = store.resume_bookmark(sub.sub_id)
        options = spec.options
        guarded = store.has_resume_point(sub.sub_id) and "bookmark_not_found" not in (options or "")
        if guarded:
            options = (
                f"{options},bookmark_not_found=fail" if options else ("bookmark_not_found=fail")
            )
        return bookmark, options, guarded

    def _refused(self, sub: HASubscription, exc: BaseException) -> None:
        """A re-entry refused by the broker: the subscription ends with its error."""
        self.subscriptions.remove(sub.sub_id)
        sub.end(exc)
        self._report(exc)

    # -- catching up after an unsafe failover ------------------------------------------

    def _start_catch_up(self, client: Client, sub: HASubscription, bookmark: str) -> None:
        """``sub``'s server lacks its resume point: retry until it has it (module
        docstring; docs/ha-client.md "Bookmark subscriptions across an unsafe failover")."""
        if sub.state != CATCHING_UP:
            sub.state = CATCHING_UP
            self._tell(ConnectionState.CATCHING_UP, self._uri, sub.sub_id)
        task = asyncio.get_running_loop().create_task(self._catch_up(client, sub, bookmark))
        self._catch_ups.add(task)
        task.add_done_callback(self._catch_ups.discard)

    async def _catch_up(self, client: Client, sub: HASubscription, bookmark: str) -> None:
        spec = sub.spec
        while not sub.ended:
            if sub.waited >= self.catch_up_timeout:
                await self._catch_up_gave_up(client, sub, bookmark)
                return
            await self._sleep(self.catch_up_retry)
            sub.waited += self.catch_up_retry
            if client.closed.is_set() or client is not self._client or sub.ended:
                return  # the next connection enters it again (the wait goes on there)
            resume, options, _ = self._resume_point(sub)
            bookmark = resume or bookmark
            try:
                current = await client.subscribe(
                    spec.topic, filter=spec.filter, bookmark=resume, options=options,
                    sub_id=sub.sub_id, delta=spec.command == "delta_subscribe",
                )  # fmt: skip
            except BookmarkNotFound:
                continue
            except ProtocolFailure as exc:
                self._refused(sub, exc)
                return
            except _CONNECT_ERRORS:
                return
            self._caught_up(sub, current)
            return

    def _caught_up(self, sub: HASubscription, current: Subscription) -> None:
        sub.state = ACTIVE
        sub.waited = 0.0
        sub.attach(current)
        self._tell(ConnectionState.CAUGHT_UP, self._uri, sub.sub_id)

    async def _catch_up_gave_up(self, client: Client, sub: HASubscription, bookmark: str) -> None:
        """``catch_up_timeout`` ran out: apply ``catch_up_policy`` (and report it)."""
        policy = self.catch_up_policy
        error = CatchUpTimeout(sub.sub_id, self._uri or "", bookmark, sub.waited, policy)
        self._report(error)
        if policy == "fail":
            self._refused_quietly(sub, error)
            return
        spec = sub.spec
        try:
            current = await client.subscribe(
                spec.topic, filter=spec.filter, bookmark=EPOCH if policy == "epoch" else NOW,
                options=spec.options, sub_id=sub.sub_id,
                delta=spec.command == "delta_subscribe",
            )  # fmt: skip
        except ProtocolFailure as exc:
            self._refused(sub, exc)
            return
        except _CONNECT_ERRORS:
            return  # the next connection tries its own server first
        self._caught_up(sub, current)

    def _refused_quietly(self, sub: HASubscription, error: BaseException) -> None:
        self.subscriptions.remove(sub.sub_id)
        sub.end(error)

    def discard(self, message: HAMessage | Message) -> None:
        """The application is done with ``message`` (``message.discard()`` does the same)."""
        if isinstance(message, HAMessage):
            message.discard()
            return
        for sid in message.sub_ids:
            sub = self.subscriptions.get(sid)
            if sub is not None:
                sub.discard(message)

    async def unsubscribe(self, sub_id: str, timeout: float = 30.0) -> None:
        """End subscription ``sub_id`` (its iteration ends after what is buffered); its
        bookmark store entry stays, so subscribing again with the same ``sub_id`` resumes.
        """
        sub = self.subscriptions.remove(sub_id)
        if sub is None:
            return
        sub.end(END)
        c = self._client
        if c is not None and not c.closed.is_set():
            with contextlib.suppress(*_CONNECT_ERRORS):
                await c.unsubscribe(sub_id, timeout)

    async def sow(self, topic: str, *, timeout: float | None = 60.0, **kwargs: Any) -> SowResult:
        """A SOW query on the current connection (waits for one); arguments as
        :meth:`Client.sow`. A connection lost during the query retries it on the next."""
        while True:
            client = await self._wait_connected(timeout)
            try:
                return await client.sow(topic, timeout=timeout or 60.0, **kwargs)
            except Disconnected:
                continue

    async def sow_delete(
        self,
        topic: str,
        *,
        filter: str | None = None,
        keys: list[str] | None = None,
        data: bytes | str | Any | None = None,
        timeout: float | None = 60.0,
    ) -> int:
        """``sow_delete`` on the current connection (waits for one); returns how many
        records were deleted. Not retried when the connection is lost during it (whether
        the broker ran it is unknown): that raises ``Disconnected``."""
        client = await self._wait_connected(timeout)
        return await client.sow_delete(topic, filter=filter, keys=keys, data=data,
                                       timeout=timeout or 60.0)  # fmt: skip

    # -- end -----------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop reconnecting, end every subscription, close the connection and the stores
        (what the stores hold stays for the next run). Each store's file and lock are
        released whatever its last write did.

        Raises:
            StoreIOError: a store could not write all it held (the other store is closed
                all the same; a second such error goes to the exception listener).
        """
        if self._closed:
            return
        self._closed = True
        await self._sender.stop()
        tasks = (self._reconnecting, self._monitor, self._watcher, self._resending,
                 self._store_recovery, *self._catch_ups)  # fmt: skip
        for task in tasks:
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for sub in self.subscriptions.all():
            sub.end(END)
        if self._client is not None:
            await self._client.close()
        await self._notify()
        errors: list[Exception] = []
        for store in (self.publish_store, self.bookmark_store):
            try:
                await store.close()
            except Exception as exc:  # the other store is closed all the same
                errors.append(exc)
        self._tell(ConnectionState.CLOSED, self._uri)
        for extra in errors[1:]:
            self._report(extra)
        if errors:
            raise errors[0]

    async def __aenter__(self) -> HAClient:
        await self.connect_and_logon()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["HAClient"]
