"""The client registry: connections, logon, client names, users and transports.

A connection becomes a client with its ``logon``: the credentials are checked (scrypt runs
on the password-check pool, so the logon returns an awaitable and the connection's later
commands wait), unless the logon throttle refuses the attempt first (too many recent
failures from the address or for the user: ``auth failure`` with ``retry_after``, no
check run); over mutual TLS a verified client certificate mapped to a user is the
credential.
the client name is claimed (the same user reconnecting takes it over and the old connection
is dropped; another user is refused with ``name in use``), and the logon ack tells the
client the last sequence the log holds for its name, so it can resend what was not
persisted (docs/protocol.md "Acks"). A name is the client's publisher identity, so names
starting ``spool-broker:`` or ``spool-action:`` are refused (``invalid message``): those
are the identities of the broker's own messages and of the messages actions derive
(server/bookmarks.py): a client publishing under one would take sequences they need.

A connection that has not logged on costs the broker a socket and a session while it
proves nothing, so it gets ``Tuning/LogonTimeout`` to log on (then it is closed with
``logon required``), and there are at most ``MaxConnectionsBeforeLogon`` of them on the
instance and ``MaxConnectionsBeforeLogonPerAddress`` from one address: the transport asks
:meth:`ClientRegistry.before_logon_refusal` before it accepts a websocket.

A logon may ask for more with its ``o`` (docs/protocol.md "Logon options"): ``failover``
(the connection is told at once, by a ``failover`` ack, when the safety of failing over
from this instance changes for it: :meth:`ClientRegistry.failover_changed`) and
``replicated`` (conflated ``replicated`` acks for its persisted publishes, server/acks.py).
A client that asks for neither sees exactly what it saw before they existed.

On an instance that replicates, a name not logged on here is first asked of every linked
instance (server/replication/clientnames.py, through the :class:`~spool.server.ports.NameClaims`
port): a client of that name logged on at another instance, or logging on there earlier,
makes this logon fail with ``name in use elsewhere``. Two clients with one name would share
a publisher identity, and replication would drop one's messages as the other's duplicates.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

from spool.server import __version__
from spool.server.acks import DurableAcks
from spool.server.auth import UserAuthenticator
from spool.server.bookmarks import RESERVED_CLIENT_PREFIXES, pub_hash
from spool.server.clock import Clock, time_us
from spool.server.config import Config, UserConfig
from spool.server.engine_errors import TransportNotFound
from spool.server.eventlog import EventLog
from spool.server.happenings import Happenings
from spool.server.lifecycle import Lifecycle
from spool.server.logons import LogonGuard
from spool.server.peer import Peer
from spool.server.ports import (
    AckValue,
    ClientHappening,
    NameClaims,
    SubscriptionEnd,
    SubscriptionHappening,
)
from spool.server.protocol.commands import Command
from spool.server.protocol.errors import (
    AuthFailure,
    InvalidMessage,
    InvalidOptions,
    LogonRequired,
    NameInUse,
    NameInUseElsewhere,
    ShuttingDown,
)
from spool.server.scryptpool import PoolBusy
from spool.server.session import CLOSE_GOING_AWAY, Session, Transport
from spool.server.subscription import SessionSubscription
from spool.server.throttle import address_key
from spool.server.txlog import TransactionLog

#: what a logon's ``o`` may ask for (docs/protocol.md "Logon options")
LOGON_OPTIONS: Final = frozenset({"failover", "replicated"})


def logon_options(text: str | None) -> frozenset[str]:
    """The options of a logon's ``o`` (a comma list; empty items ignored).

    Raises:
        InvalidOptions: an option the logon does not take.
    """
    if not text:
        return frozenset()
    options = frozenset(o.strip() for o in text.split(",") if o.strip())
    unknown = sorted(options - LOGON_OPTIONS)
    if unknown:
        raise InvalidOptions(
            f"unknown logon option {', '.join(map(repr, unknown))}: a logon takes "
            f"{', '.join(sorted(LOGON_OPTIONS))}"
        )
    return options


class ClientRegistry:
    """Every connection of an instance, by name once logged on. Owned by the event loop.

    Args:
        config: the instance configuration (users, transports, tuning).
        auth: credentials and entitlements.
        txlog: the transaction log (each client's last sequence), or None.
        acks: persisted acks (a client's last persisted sequence).
        lifecycle: whether the instance is stopping.
        events: the event log.
        clock: connection times, heartbeats.
        logons: the logon throttle and counters (shared with the dashboard login).
        logon_fields: more fields of the logon ack, for the logged-on user (replication
            says whether failing over from this instance is safe).
        name_claims: asks the fabric's linked instances whether a client name is free
            (an instance that replicates), or None.
    """

    def __init__(
        self,
        config: Config,
        auth: UserAuthenticator,
        txlog: TransactionLog | None,
        acks: DurableAcks,
        lifecycle: Lifecycle,
        events: EventLog,
        clock: Clock,
        logons: LogonGuard,
        happenings: Happenings,
        *,
        logon_fields: Callable[[UserConfig | None], Mapping[str, AckValue]] | None = None,
        name_claims: NameClaims | None = None,
    ) -> None:
        self._config = config
        self._happenings = happenings
        self._connections = itertools.count(1)
        self._logons = logons
        self._auth = auth
        self._txlog = txlog
        self._acks = acks
        self._lifecycle = lifecycle
        self._events = events
        self._clock = clock
        self._logon_fields = logon_fields
        self._claims = name_claims
        self.sessions: set[Session] = set()
        self.by_name: dict[str, Session] = {}
        self._transport_enabled = {t.name: t.enabled for t in config.transports}
        self._transport_conns = {t.name: 0 for t in config.transports}
        #: data messages and bytes sent to connections that are gone (totals stay monotonic)
        self.msgs_out_closed = 0
        self.bytes_out_closed = 0
        #: connections that ended, by cause (server/session.py ``DisconnectCause``)
        self.disconnects: dict[str, int] = {}
        #: called with every session that closes (subscriptions, acks forget it)
        self.on_close: list[Callable[[Session], None]] = []
        #: the logged-on sessions of each user name (per-user quotas, server/quotas.py)
        self._by_user: dict[str, set[Session]] = {}
        #: connections not logged on yet, with their logon deadline
        self._before_logon: dict[Session, asyncio.Task[None]] = {}
        self._before_logon_at: dict[str, int] = {}
        #: connections refused before their upgrade (too many not logged on)
        self.refused_before_logon = 0
        self._refusal_announced = -1e18

    # -- connections ---------------------------------------------------------------------

    def connect(
        self, transport: Transport, transport_name: str, peer: Peer | None = None
    ) -> Session:
        """A new connection (the caller gives it a frame handler and starts it)."""
        session = Session(
            transport,
            transport_name=transport_name,
            owner=self,
            clock=self._clock,
            events=self._events,
            buffer_limit=self._config.tuning.slow_client_buffer_limit,
            peer=peer,
            connection=next(self._connections),
        )
        self.sessions.add(session)
        self._transport_conns[transport_name] = self._transport_conns.get(transport_name, 0) + 1
        address = address_key(session.peer.host)
        self._before_logon_at[address] = self._before_logon_at.get(address, 0) + 1
        self._before_logon[session] = asyncio.get_running_loop().create_task(
            self._logon_deadline(session)
        )
        p = session.peer
        self._events.emit(
            "info", "session", "connected", remote=transport.remote, transport=transport_name,
            tls=p.tls_version, certificate=p.client_subject,
        )  # fmt: skip
        if self._happenings.clients:
            self._happenings.emit(self._client_happening("connected", session))
        return session

    # -- before logon --------------------------------------------------------------------

    def before_logon_refusal(self, host: str) -> str | None:
        """Why a new connection from ``host`` is refused before its upgrade (too many
        connections have not logged on yet, on the instance or from that address), or
        None. A refusal is counted, and announced in the event log at most once a minute.
        """
        tuning = self._config.tuning
        waiting = self._before_logon_at.get(address_key(host), 0)
        reason: str | None = None
        if len(self._before_logon) >= tuning.max_connections_before_logon:
            reason = (
                f"{len(self._before_logon)} connections have not logged on yet, the most "
                "Tuning/MaxConnectionsBeforeLogon allows"
            )
        elif waiting >= tuning.max_connections_before_logon_per_address:
            reason = (
                f"{waiting} connections from this address have not logged on yet, the most "
                "Tuning/MaxConnectionsBeforeLogonPerAddress allows"
            )
        if reason is None:
            return None
        self.refused_before_logon += 1
        now = self._clock.monotonic()
        if now - self._refusal_announced >= 60.0:
            self._refusal_announced = now
            self._events.emit(
                "warning", "session", "too_many_before_logon", remote=host, detail=reason,
                refused=self.refused_before_logon,
            )  # fmt: skip
        return reason

    @property
    def waiting_logon(self) -> int:
        """Connections that have not logged on yet."""
        return len(self._before_logon)

    async def _logon_deadline(self, session: Session) -> None:
        """Close ``session`` if it has not logged on within ``Tuning/LogonTimeout``."""
        timeout = self._config.tuning.logon_timeout
        await self._clock.sleep(timeout)
        if session.origin is not None or session.closing:
            return
        self._events.emit(
            "info", "session", "logon_timeout", remote=session.remote, timeout=timeout
        )
        self._logged_on_or_gone(session, cancel=False)
        await session.close(
            f"{LogonRequired.reason}: no logon within {timeout:g} s", cause="logon_timeout"
        )

    def _logged_on_or_gone(self, session: Session, *, cancel: bool = True) -> None:
        """``session`` no longer waits for its logon."""
        task = self._before_logon.pop(session, None)
        if task is None:
            return
        if cancel:
            task.cancel()
        address = address_key(session.peer.host)
        left = self._before_logon_at.get(address, 1) - 1
        if left > 0:
            self._before_logon_at[address] = left
        else:
            self._before_logon_at.pop(address, None)

    def sessions_of(self, user: str) -> set[Session]:
        """The logged-on sessions of ``user``."""
        return self._by_user.get(user, set())

    def session_closed(self, session: Session) -> None:
        """Forget a session: its name, its subscriptions, what it waited for."""
        if session not in self.sessions:
            return
        held = len(session.subs)
        self.sessions.discard(session)
        self._logged_on_or_gone(session)
        if session.user is not None:
            same_user = self._by_user.get(session.user.name)
            if same_user is not None:
                same_user.discard(session)
                if not same_user:
                    del self._by_user[session.user.name]
        name = session.transport_name
        self._transport_conns[name] = max(0, self._transport_conns.get(name, 1) - 1)
        for forget in self.on_close:
            forget(session)
        if session.name is not None and self.by_name.get(session.name) is session:
            del self.by_name[session.name]
        self.msgs_out_closed += session.traffic.msgs_out
        self.bytes_out_closed += session.traffic.bytes_out
        cause = session.close_cause or "client"
        self.disconnects[cause] = self.disconnects.get(cause, 0) + 1
        self._events.emit(
            "info",
            "session",
            "disconnected",
            client=session.name,
            remote=session.remote,
            reason=session.close_reason or "closed",
            cause=cause,
            msgs_in=session.traffic.msgs_in,
            msgs_out=session.traffic.msgs_out,
        )
        if self._happenings.clients:
            self._happenings.emit(self._client_happening(
                "disconnected", session, reason=session.close_reason or "closed", cause=cause,
                msgs_in=session.traffic.msgs_in, msgs_out=session.traffic.msgs_out,
                subscriptions=held,
            ))  # fmt: skip

    async def close_all(self) -> None:
        """Close every connection with ``shutting down`` after what it has buffered."""
        await asyncio.gather(
            *(
                s.close(ShuttingDown.reason, CLOSE_GOING_AWAY, drain=True, cause="shutting_down")
                for s in list(self.sessions)
            ),
            return_exceptions=True,
        )

    def logged_on(self) -> list[Session]:
        """The connections that logged on."""
        return [s for s in self.sessions if s.name is not None]

    def name_of(self, pub_hash: int) -> str | None:
        """The client name of a publisher identity, when a client logged on here has it."""
        return next((s.name for s in self.by_name.values() if s.pub_hash == pub_hash), None)

    def holds(self, name: str) -> bool:
        """Whether a client called ``name`` is logged on here now."""
        session = self.by_name.get(name)
        return session is not None and not session.closed

    # -- transports ----------------------------------------------------------------------

    def transport_accepting(self, name: str) -> bool:
        """Whether the transport takes new connections now."""
        return self._transport_enabled.get(name, False) and not self._lifecycle.stopping

    def transport_enabled(self, name: str) -> bool:
        return self._transport_enabled.get(name, False)

    def transport_connections(self, name: str) -> int:
        return self._transport_conns.get(name, 0)

    def transport_opened(self, name: str) -> None:
        """A connection that is not a client session (a replication link) opened on it."""
        self._transport_conns[name] = self._transport_conns.get(name, 0) + 1

    def transport_closed(self, name: str) -> None:
        """That connection closed."""
        self._transport_conns[name] = max(0, self._transport_conns.get(name, 1) - 1)

    def set_transport_enabled(self, name: str, enabled: bool) -> None:
        """Enable or disable a transport (existing connections stay)."""
        if name not in self._transport_enabled:
            raise TransportNotFound(name)
        self._transport_enabled[name] = enabled
        self._events.emit("info", "transport", "enabled" if enabled else "disabled", transport=name)

    # -- logon ---------------------------------------------------------------------------

    def logon(self, session: Session, cmd: Command) -> Awaitable[None] | None:
        """The ``logon`` command: at once without users or with a client certificate that
        is the credential; else after the throttle admits it and the credentials are
        checked off the loop (the returned awaitable).

        Over mutual TLS, a verified client certificate mapped to a user logs on as that
        user without ``pw`` (``user_id``, if given, must name the same user). With ``pw``
        the credentials are checked as usual and must belong to the certificate's user.
        """
        self._check(session, cmd)
        if not self._auth.enabled:
            return self._granted(session, cmd, None)
        user_id = cmd.field("user_id")
        if session.foreign_origin and not cmd.field("pw"):
            # a page of another origin gets nothing the browser adds by itself: not the
            # no-users trust (web/transport.py refuses it), not a client certificate
            self._auth_failed(session, cmd, counted=False)
            raise AuthFailure(
                f"a page of origin {session.web_origin} must log on with a password or token"
            )
        cert_user = self._auth.by_certificate(session.peer.client_subject)
        if cert_user is not None and not cmd.field("pw"):
            if user_id and user_id != cert_user.name:
                self._auth_failed(session, cmd, counted=False)
                raise AuthFailure(
                    f"the client certificate belongs to user {cert_user.name!r}, not {user_id!r}"
                )
            return self._granted(session, cmd, cert_user)
        wait = self._logons.admit("websocket", session.peer.host, user_id)
        if wait > 0:
            raise AuthFailure(
                "too many failed logons from this address or for this user; try again in "
                f"{max(1, int(wait + 0.999))} s",
                retry_after=wait,
            )
        return self._authenticated_logon(session, cmd, cert_user)

    def _check(self, session: Session, cmd: Command) -> str:
        """Validate a logon before authentication; returns the client name."""
        if session.name is not None:
            raise InvalidMessage("already logged on: one logon per connection")
        if self._lifecycle.stopping:
            raise ShuttingDown()
        name = cmd.field("client_name")
        if not name:
            raise InvalidMessage("logon needs a client_name")
        name = str(name)
        if name.startswith(RESERVED_CLIENT_PREFIXES):
            raise InvalidMessage(
                f"client name {name!r} is reserved: names starting "
                + " or ".join(repr(p) for p in RESERVED_CLIENT_PREFIXES)
                + " are the broker's own publisher identities"
            )
        logon_options(cmd.options)
        return name

    async def _authenticated_logon(
        self, session: Session, cmd: Command, cert_user: UserConfig | None
    ) -> None:
        user_id = cmd.field("user_id")
        try:
            user = await self._auth.authenticate_async(user_id, cmd.field("pw"))
        except PoolBusy as exc:
            self._logons.refused("websocket")
            raise AuthFailure(
                "the server is busy checking other logons; try again shortly",
                retry_after=exc.retry_after,
            ) from None
        if user is None or (cert_user is not None and user is not cert_user):
            self._auth_failed(session, cmd, counted=True)
            detail = "unknown user or wrong password/token"
            if user is not None:
                detail = "these credentials do not belong to the client certificate's user"
            raise AuthFailure(detail)
        self._logons.succeeded("websocket", session.peer.host, user.name)
        if not session.closed:
            granted = self._granted(session, cmd, user)
            if granted is not None:
                await granted

    def _granted(
        self, session: Session, cmd: Command, user: UserConfig | None
    ) -> Awaitable[None] | None:
        """Complete the logon (credentials checked): at once, or once the fabric's linked
        instances said the name is free (the returned awaitable)."""
        name = self._check(session, cmd)
        claims = self._claims
        if claims is None or self.holds(name) or not claims.asks():
            self._complete(session, cmd, user)
            return None
        return self._claimed(session, cmd, user, name, claims)

    async def _claimed(
        self,
        session: Session,
        cmd: Command,
        user: UserConfig | None,
        name: str,
        claims: NameClaims,
    ) -> None:
        held = await claims.claim(name)
        if session.closed:
            return
        if held is not None:
            self._events.emit(
                "warning", "session", "name_in_use_elsewhere", client=name,
                remote=session.remote, detail=held,
            )  # fmt: skip
            raise NameInUseElsewhere(held)
        self._complete(session, cmd, user)

    def _auth_failed(self, session: Session, cmd: Command, *, counted: bool) -> None:
        user_id = cmd.field("user_id")
        if counted:
            self._logons.failed("websocket", session.peer.host, user_id)
        self._events.emit(
            "warning", "session", "auth_failure", remote=session.remote, user=user_id,
            client=cmd.field("client_name"), certificate=session.peer.client_subject,
        )  # fmt: skip
        if self._happenings.clients:
            name = cmd.field("client_name")
            self._happenings.emit(self._client_happening(
                "logon_failed", session, client=name if isinstance(name, str) else None,
                user=user_id if isinstance(user_id, str) else None, reason=AuthFailure.reason,
            ))  # fmt: skip

    def _complete(self, session: Session, cmd: Command, user: UserConfig | None) -> None:
        """Claim the client name and answer with the logon ack (credentials checked)."""
        name = self._check(session, cmd)
        user_id = cmd.field("user_id")
        user_name = user.name if user is not None else (user_id or None)
        existing = self.by_name.get(name)
        if existing is not None and not existing.closed:
            if existing.user_name != user_name:
                self._events.emit(
                    "warning", "session", "name_in_use",
                    client=name, remote=session.remote, refused=True,
                )  # fmt: skip
                raise NameInUse(f"client name {name!r} is in use by another user")
            # same user: the new connection wins, the old one is dropped
            self._events.emit(
                "info", "session", "name_in_use",
                client=name, remote=existing.remote, replaced_by=session.remote,
            )  # fmt: skip
            existing.close_cause = "name_in_use"
            self.session_closed(existing)
            existing.close_soon(NameInUse.reason, cause="name_in_use")
        version = cmd.field("version")
        session.log_on(
            name, user, user_name, pub_hash(name), version if isinstance(version, str) else ""
        )
        self.by_name[name] = session
        self._logged_on_or_gone(session)
        if user is not None:
            self._by_user.setdefault(user.name, set()).add(session)
        last_s = 0
        last_bm = None
        if self._txlog is not None:
            last_s = self._txlog.publisher_last(session.pub_hash)
            last_bm = self._txlog.publisher_last_bookmark(session.pub_hash)
        self._acks.set_last_persisted(session, last_s)
        hb = cmd.field("hb")
        hb_value: float | None = None
        if hb:
            hb_value = float(hb)
        elif self._config.tuning.heartbeat_default > 0:
            hb_value = self._config.tuning.heartbeat_default
        if hb_value:
            session.start_heartbeat(hb_value)
        extra = dict(self._logon_fields(user)) if self._logon_fields is not None else {}
        options = logon_options(cmd.options)
        if "replicated" in options:
            self._acks.want_replicated(session, session.pub_hash)
        if "failover" in options:
            session.failover_seen = _failover_key(extra)
        session.ack(
            "processed", cmd.cid, "success", None, client_name=name, s=last_s, bm=last_bm,
            version=__version__, hb=hb_value, o=",".join(sorted(options)) or None, **extra,
        )  # fmt: skip
        self._events.emit(
            "info", "session", "logon", client=name, user=user_name, remote=session.remote
        )
        if self._happenings.clients:
            self._happenings.emit(self._client_happening(
                "logged_on", session, version=session.version or None,
                options=",".join(sorted(options)) or None,
            ))  # fmt: skip
        if self._happenings.subscriptions:  # none exists before the logon
            session.subs.listener = functools.partial(self._subscription_changed, session)

    def _subscription_changed(
        self,
        session: Session,
        event: Literal["added", "removed"],
        sub: SessionSubscription,
        reason: SubscriptionEnd | None,
    ) -> None:
        """A subscription of ``session`` began or ended (its table's listener)."""
        happenings = self._happenings
        if not happenings.subscriptions:  # the bus closed at shutdown
            return
        happenings.emit(SubscriptionHappening(
            event=event, time_us=time_us(self._clock), connection=session.connection,
            client=sub.client, user=session.user_name, sub_id=sub.sub_id, command=sub.command,
            kind=sub.kind, topic=sub.topic, filter=sub.filter_text, options=sub.options.raw,
            bookmark_kind=sub.bookmark_kind, reason=reason,
        ))  # fmt: skip

    def _client_happening(
        self,
        event: Literal["connected", "logged_on", "logon_failed", "disconnected"],
        session: Session,
        **fields: Any,
    ) -> ClientHappening:
        """What :class:`~spool.server.ports.ClientHappening` says of ``session`` now
        (``fields``: the event's own, or another ``client`` and ``user``)."""
        peer = session.peer
        named: dict[str, Any] = {"client": session.name, "user": session.user_name}
        named.update(fields)
        return ClientHappening(
            event=event, time_us=time_us(self._clock), connection=session.connection,
            remote=session.remote, transport=session.transport_name, tls=peer.tls_version,
            certificate=peer.client_subject, **named,
        )  # fmt: skip

    def failover_changed(self, detail: str) -> None:
        """The safety of failing over from this instance may have changed (a destination
        downgraded, upgraded, connected or lost): every client that asked for ``failover``
        notices and for which it did change gets a ``failover`` ack now, before any ack
        the change releases (the caller changes the horizon after this call)."""
        fields_of = self._logon_fields
        if fields_of is None:
            return
        for session in list(self.by_name.values()):
            if session.failover_seen is None or session.closing:
                continue
            fields = fields_of(session.user)
            key = _failover_key(fields)
            if key == session.failover_seen:
                continue
            session.failover_seen = key
            session.ack("failover", None, "success", None, detail=detail, **fields)


def _failover_key(fields: Mapping[str, AckValue]) -> tuple[AckValue, ...]:
    """What a failover notice reports, to tell whether it changed."""
    return (fields.get("failover"), fields.get("async_links"), fields.get("down_links"))
