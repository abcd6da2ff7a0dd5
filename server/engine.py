"""The broker: sessions, topics, the transaction log, subscriptions and their delivery.

One asyncio event loop owns all broker state (no locks). Blocking work (fsync, file scans,
SQLite) runs in threads owned by the subsystems, which report back to the loop.

Publish path::

    session.receive -> Broker.publish -> [txlog.append (recorded topics)] -> live fan-out
                                         txlog group commit -> _on_durable -> persisted acks
                                                                           -> replay cursors

Live (plain) subscriptions get a message as soon as it is published; bookmark
subscriptions read the log through a replay cursor (server/replay.py) and so see a message
once it is persisted, with no gap or duplicate at the replay/live boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import orjson

from server.auth import Authenticator
from server.bookmarks import (
    BookmarkSpec,
    format_bookmark,
    format_timestamp_us,
    lookup_points,
    parse_bookmark,
    pub_hash,
    spec_kind,
)
from server.clock import SYSTEM_CLOCK, Clock
from server.delivery import BookmarkSink, encode_publish
from server.engine_errors import ClientNotFound, TransportNotFound
from server.eventlog import EventLog
from server.expr import Filter, MessageView, compile_filter
from server.protocol.commands import Command, cached_acks
from server.protocol.errors import (
    AuthFailure,
    BadFilter,
    InvalidMessage,
    InvalidOptions,
    InvalidTopic,
    NameInUse,
    NotEntitled,
    ProtocolFailure,
    ShuttingDown,
    SubIdInUse,
    SubIdNotFound,
    TxlogFull,
)
from server.protocol.frame import Message
from server.protocol.options import SubscribeOptions, parse_subscribe_options
from server.replay import FunctionHorizon, Horizon, ReplayGroup, ReplaySource
from server.router import Router, compile_topic, is_regex_topic
from server.stats.histogram import LatencyHistogram
from server.stats.sampler import Sampler
from server.subscription import Subscription
from server.txlog import RecordBatch, TransactionLog
from server.txlog.journal import JournalInfo
from server.txlog.log import Located
from server.txlog.record import Record

if TYPE_CHECKING:
    from server.config import Config, TransportConfig, UserConfig
    from server.session import Session, Transport

VERSION: Final = "0.1.0"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


class Broker:
    """One Spool instance's engine. See ENGINE surface in docs/architecture.md."""

    def __init__(
        self, config: Config, *, clock: Clock = SYSTEM_CLOCK, console_log: bool = True
    ) -> None:
        self.config = config
        self.clock = clock
        self.started_at = clock.time()
        self.events = EventLog(config.data_directory, config.name, console=console_log)
        self.auth = Authenticator(config.users)
        self.router = Router()
        self.sessions: set[Session] = set()
        self.by_name: dict[str, Session] = {}
        self.txlog: TransactionLog | None = None
        if config.transaction_log is not None:
            self.txlog = TransactionLog(
                config.transaction_log, config.name, clock=clock, on_event=self._txlog_event
            )
        self.ready = False
        self.stopping = False
        self.msgs_in = 0
        self.msgs_out_live = 0
        self.bytes_in = 0
        self.topics: dict[str, list[int]] = {}
        self.persisted_ack_latency = LatencyHistogram()
        self._records_cache: dict[str, bool] = {}
        self.topic_json_cache: dict[str, bytes] = {}
        self._pending_sessions: set[Session] = set()
        self._transport_enabled: dict[str, bool] = {t.name: t.enabled for t in config.transports}
        self._transport_conns: dict[str, int] = {t.name: 0 for t in config.transports}
        self._sampler: Sampler | None = None
        self._closed_sessions: deque[dict[str, Any]] = deque(maxlen=100)
        self._msgs_out_closed = 0
        self._bytes_out_closed = 0

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Recover the transaction log, start background parts, become ready."""
        cfg = self.config
        self.events.emit(
            "info",
            "instance",
            "starting",
            name=cfg.name,
            group=cfg.group,
            version=VERSION,
            pid=os.getpid(),
            config=str(cfg.source_path) if cfg.source_path else "<embedded>",
        )
        if self.txlog is not None:
            report = await self.txlog.open()
            self.txlog.add_durable_listener(self._on_durable)
            self.events.emit("info", "txlog", "recovered", **_report_fields(report))
        self._sampler = Sampler(self, cfg, self.clock)
        await self._sampler.start()
        self.ready = True
        self.events.emit("info", "instance", "started", name=cfg.name)

    async def drain(self) -> None:
        """Shutdown step 1: refuse new work, close every client with ``shutting down``."""
        if self.stopping:
            return
        self.stopping = True
        self.ready = False
        self.events.emit("info", "instance", "stopping", clients=len(self.sessions))
        if self.txlog is not None:
            # let persisted acks for everything already appended go out before closing
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.txlog.wait_durable(self.txlog.last_seq), 5.0)
        sessions = list(self.sessions)
        from server.session import CLOSE_GOING_AWAY

        await asyncio.gather(
            *(s.close(ShuttingDown.reason, CLOSE_GOING_AWAY, drain=True) for s in sessions),
            return_exceptions=True,
        )

    async def stop(self) -> None:
        """Shut down in order: 1. clients, 2. sampler, 3. transaction log, 4. event log."""
        # 1. clients: drain outbound and close with "shutting down"
        await self.drain()
        # 2. statistics sampler: last sample, close the database
        if self._sampler is not None:
            with contextlib.suppress(Exception):
                await self._sampler.stop()
        # 3. transaction log: final group commit and fsync
        if self.txlog is not None:
            await self.txlog.close()
        self.events.emit("info", "instance", "stopped", name=self.config.name)
        # 4. event log: flush its file
        self.events.close()

    @property
    def sampler(self) -> Sampler | None:
        """The statistics sampler (None before start)."""
        return self._sampler

    # -- sessions ------------------------------------------------------------------------

    def connect(self, transport: Transport, transport_name: str = "websocket-json") -> Session:
        """A new client connection; the caller feeds it frames and awaits its close."""
        from server.session import Session

        session = Session(self, transport, buffer_limit=self.config.tuning.slow_client_buffer_limit)
        session.transport_name = transport_name  # type: ignore[attr-defined]
        self.sessions.add(session)
        self._transport_conns[transport_name] = self._transport_conns.get(transport_name, 0) + 1
        session.start()
        self.events.emit(
            "info", "session", "connected", remote=transport.remote, transport=transport_name
        )
        return session

    def transport_accepting(self, name: str) -> bool:
        return self._transport_enabled.get(name, False) and not self.stopping

    def session_closed(self, session: Session) -> None:
        """Forget a session: its subscriptions, its name, pending acks."""
        if session not in self.sessions:
            return
        self.sessions.discard(session)
        tname = getattr(session, "transport_name", "websocket-json")
        self._transport_conns[tname] = max(0, self._transport_conns.get(tname, 1) - 1)
        for sub in list(session.subs.values()):
            self._drop_subscription(sub)
        session.subs.clear()
        self._pending_sessions.discard(session)
        if session.name is not None and self.by_name.get(session.name) is session:
            del self.by_name[session.name]
        self._closed_sessions.append({"name": session.name, "remote": session.remote})
        self._msgs_out_closed += session.msgs_out
        self._bytes_out_closed += session.bytes_out
        self.events.emit(
            "info",
            "session",
            "disconnected",
            client=session.name,
            remote=session.remote,
            reason=session.close_reason or "closed",
            msgs_in=session.msgs_in,
            msgs_out=session.msgs_out,
        )

    def check_logon(self, session: Session, cmd: Command) -> str:
        """Validate a logon before authentication; returns the client name."""
        if session.name is not None:
            raise InvalidMessage("already logged on: one logon per connection")
        if self.stopping:
            raise ShuttingDown()
        name = cmd.field("client_name")
        if not name:
            raise InvalidMessage("logon needs a client_name")
        return str(name)

    async def authenticate(self, session: Session, cmd: Command) -> UserConfig | None:
        """Check credentials off the loop (scrypt runs in a thread); None without Users."""
        if not self.auth.enabled:
            return None
        user_id = cmd.field("user_id")
        user = await self.auth.authenticate_async(user_id, cmd.field("pw"))
        if user is None:
            self.events.emit(
                "warning",
                "session",
                "auth_failure",
                remote=session.remote,
                user=user_id,
                client=cmd.field("client_name"),
            )
            raise AuthFailure("unknown user or wrong password/token")
        return user

    def logon(self, session: Session, cmd: Command, user: UserConfig | None) -> None:
        """Claim the client name and answer with the logon ack (credentials checked)."""
        name = self.check_logon(session, cmd)
        user_id = cmd.field("user_id")
        user_name = user.name if user is not None else (user_id or None)
        existing = self.by_name.get(name)
        if existing is not None and not existing.closed:
            if existing.user_name != user_name:
                self.events.emit(
                    "warning",
                    "session",
                    "name_in_use",
                    client=name,
                    remote=session.remote,
                    refused=True,
                )
                raise NameInUse(f"client name {name!r} is in use by another user")
            # same user: the new connection wins, the old one is dropped
            self.events.emit(
                "info",
                "session",
                "name_in_use",
                client=name,
                remote=existing.remote,
                replaced_by=session.remote,
            )
            self.session_closed(existing)
            existing.close_soon(NameInUse.reason)
        session.name = name
        session.user = user
        session.user_name = user_name
        session.pub_hash = pub_hash(name)
        version = cmd.field("version")
        session.version = version if isinstance(version, str) else ""
        self.by_name[name] = session
        last_s = 0
        last_bm = None
        if self.txlog is not None:
            last_s = self.txlog.publisher_last(session.pub_hash)
            last_bm = self.txlog.publisher_last_bookmark(session.pub_hash)
        session.last_persisted_seq = last_s
        hb = cmd.field("hb")
        hb_value: float | None = None
        if hb:
            hb_value = float(hb)
            session.start_heartbeat(hb_value)
        elif self.config.tuning.heartbeat_default > 0:
            hb_value = self.config.tuning.heartbeat_default
            session.start_heartbeat(hb_value)
        session.ack(
            "processed",
            cmd.cid,
            client_name=name,
            s=last_s,
            bm=last_bm,
            version=VERSION,
            hb=hb_value,
        )
        self.events.emit(
            "info", "session", "logon", client=name, user=user_name, remote=session.remote
        )

    # -- commands ------------------------------------------------------------------------

    def execute(self, session: Session, cmd: Command) -> None:
        """Run a command of a logged-on session (raises ProtocolFailure subclasses)."""
        if self.stopping:
            raise ShuttingDown()
        name = cmd.name
        if name == "publish" or name == "delta_publish":
            self.publish(session, cmd)
        elif name == "subscribe" or name == "delta_subscribe":
            self.subscribe(session, cmd)
        elif name == "unsubscribe":
            self.unsubscribe(session, cmd)
        elif name == "flush":
            self.flush(session, cmd)
        elif name in ("sow", "sow_and_subscribe", "sow_delete"):
            raise InvalidTopic(f"{cmd.topic or ''!r} is not a SOW topic (no SOW configured)")
        else:  # pragma: no cover - decode_command admits only known names
            raise InvalidMessage(f"unhandled command {name}")

    def records(self, topic: str) -> bool:
        """Whether the transaction log records this topic."""
        cached = self._records_cache.get(topic)
        if cached is None:
            tl = self.config.transaction_log
            cached = tl is not None and tl.records(topic)
            if len(self._records_cache) > 50_000:
                self._records_cache.clear()
            self._records_cache[topic] = cached
        return cached

    def can_read(self, session: Session, topic: str) -> bool:
        return self.auth.can_read(session.user, topic)

    def publish(self, session: Session, cmd: Command) -> None:
        topic = cmd.topic
        assert topic is not None
        counters = self.topics.get(topic)
        if counters is None:
            # first publish to this topic: the checks that depend on the name alone
            if is_regex_topic(topic):
                raise InvalidTopic(f"cannot publish to a regular expression {topic!r}")
            # [messages, bytes, recorded in the transaction log (1/0)]
            counters = self.topics[topic] = [0, 0, 1 if self.records(topic) else 0]
        if self.auth.enabled and not self.auth.can_write(session.user, topic):
            raise NotEntitled(f"user {session.user_name!r} may not publish to {topic!r}")
        body = cmd.body
        session.msgs_in += 1
        self.msgs_in += 1
        self.bytes_in += len(body)
        counters[0] += 1
        counters[1] += len(body)
        acks = cmd.acks
        rec: Record | None = None
        txlog = self.txlog
        if txlog is not None and counters[2]:
            last = txlog.publisher_last(session.pub_hash)
            s = cmd.seq
            if s is None:
                s = last + 1
            elif s <= last:
                self._duplicate(session, cmd, s)
                return
            corr = cmd.field("x")
            try:
                rec = txlog.append(
                    topic=topic,
                    message_type="json",
                    pub_hash=session.pub_hash,
                    pub_seq=s,
                    body=body,
                    corr_id=corr or "",
                    sow_key=cmd.field("k") or "",
                )
            except ProtocolFailure:  # txlog full, sequence problems: the reason stands
                raise
            except Exception as exc:
                self.events.emit("error", "txlog", "append_failed", error=repr(exc))
                raise TxlogFull(f"transaction log cannot accept writes: {exc}") from exc
            if "persisted" in acks:
                session.pending_persist.append((rec.seq, s, self.clock.monotonic()))
                self._pending_sessions.add(session)
        elif "persisted" in acks:
            session.ack("persisted", None, s=cmd.seq)
        if "processed" in acks:
            session.ack("processed", cmd.cid)
        matches = self.router.match(topic)
        if matches:
            if rec is not None:
                self._fan_out(
                    session, topic, body, matches, rec.bookmark, rec.timestamp_us, cmd.field("x")
                )
            else:
                self._fan_out(session, topic, body, matches, None, None, cmd.field("x"))

    def publish_run(self, session: Session, msgs: list[Message], start: int) -> int:
        """Publish the plain publishes of ``msgs[start:]`` as runs (the hot path).

        A publisher's frame usually holds many publishes to one topic. For a run of them
        the topic checks, the publisher's last sequence, the router match, the log append
        bookkeeping and the delivery encoding are done once per run instead of once per
        message. A message is plain when its header has only ``c``, ``t``, ``l``, ``s``,
        ``a`` (a string seen before), ``cid``, all well typed; the first publish to a
        topic, a duplicate sequence, a log that refuses an append and everything else go
        to the general path, which gives them their exact ack or failure.

        Returns:
            The index of the first message not handled here (``start`` when none was).
        """
        n = len(msgs)
        i = start
        topics = self.topics
        auth = self.auth
        txlog = self.txlog
        pub_hash = session.pub_hash
        while i < n:
            if session.closed:
                return i  # the caller stops too
            h = msgs[i].header
            if h.get("c") != "publish":
                return i
            topic = h.get("t")
            if type(topic) is not str:
                return i
            counters = topics.get(topic)
            if counters is None:
                return i
            if auth.enabled and not auth.can_write(session.user, topic):
                return i
            recorded = txlog is not None and counters[2]
            last = txlog.publisher_last(pub_hash) if recorded and txlog is not None else 0
            seqs: list[int] = []
            bodies: list[bytes] = []
            acked: list[tuple[int, frozenset[str], str | None]] = []
            j = i
            while j < n:
                msg = msgs[j]
                h = msg.header
                if h.get("c") != "publish" or h.get("t") != topic:
                    break
                acks: frozenset[str] | None = None
                cid: str | None = None
                s = None
                plain = True
                for key, value in h.items():
                    if key == "c" or key == "t" or key == "l" or value is None:
                        continue
                    if key == "s":
                        if type(value) is not int or value < 0:
                            plain = False
                            break
                        s = value
                    elif key == "a":
                        if type(value) is not str:
                            plain = False
                            break
                        acks = cached_acks(value)
                        if acks is None:
                            plain = False
                            break
                    elif key == "cid":
                        if type(value) is str:
                            cid = value
                        elif type(value) is int:
                            cid = str(value)
                        else:
                            plain = False
                            break
                    else:
                        plain = False
                        break
                if not plain:
                    break
                if recorded:
                    if s is None:
                        s = last + 1
                    elif s <= last:
                        break  # a duplicate: the general path acks it as one
                    last = s
                if acks:
                    acked.append((j - i, acks, cid))
                seqs.append(s if s is not None else 0)
                bodies.append(msg.body)
                j += 1
            if j == i:
                return i
            if recorded and txlog is not None:
                k = txlog.append_many(
                    topic=topic,
                    message_type="json",
                    pub_hash=pub_hash,
                    pub_seqs=seqs,
                    bodies=bodies,
                )
                if k < j - i:
                    del seqs[k:]
                    del bodies[k:]
                    acked = [a for a in acked if a[0] < k]
                if not k:
                    return i
                first_seq = txlog.last_seq - k + 1
            else:
                k = j - i
                first_seq = 0
            self._publish_done(session, topic, counters, seqs, bodies, acked, first_seq)
            i += k
            if i < j:
                return i  # the log refused the next one: the general path reports why
        return i

    def _publish_done(
        self,
        session: Session,
        topic: str,
        counters: list[int],
        seqs: list[int],
        bodies: list[bytes],
        acked: list[tuple[int, frozenset[str], str | None]],
        first_seq: int,
    ) -> None:
        """Account, ack and deliver a run of publishes (stored when ``first_seq``)."""
        k = len(bodies)
        nbytes = sum(map(len, bodies))
        session.msgs_in += k
        self.msgs_in += k
        self.bytes_in += nbytes
        counters[0] += k
        counters[1] += nbytes
        if first_seq:
            # one pending entry for the run: persisted acks are conflated to the highest s
            for idx, acks, _cid in reversed(acked):
                if "persisted" in acks:
                    session.pending_persist.append(
                        (first_seq + idx, seqs[idx], self.clock.monotonic())
                    )
                    self._pending_sessions.add(session)
                    break
        matches = self.router.match(topic)
        if not acked or all(
            not ("received" in a or "processed" in a or ("persisted" in a and not first_seq))
            for _, a, _ in acked
        ):
            if matches:
                self._fan_out_run(session, topic, seqs, bodies, matches, first_seq)
            return
        # acks interleave with deliveries message by message, as on the general path
        ack_at = {idx: (acks, cid) for idx, acks, cid in acked}
        ts = self.txlog.last_timestamp_us if first_seq and self.txlog is not None else None
        prefix = f"{session.pub_hash}|"
        for idx in range(k):
            a = ack_at.get(idx)
            if a is not None:
                acks, cid = a
                if "received" in acks:
                    session.ack("received", cid)
                if "persisted" in acks and not first_seq:
                    session.ack("persisted", None, s=seqs[idx] or None)
                if "processed" in acks:
                    session.ack("processed", cid)
            if matches:
                bm = f"{prefix}{seqs[idx]}|" if first_seq else None
                self._fan_out(session, topic, bodies[idx], matches, bm, ts, None)

    def _fan_out_run(
        self,
        publisher: Session,
        topic: str,
        seqs: list[int],
        bodies: list[bytes],
        matches: list[Subscription],
        first_seq: int,
    ) -> None:
        """Deliver a run of publishes to live subscriptions: one encoding pass per
        distinct (sub ids, timestamp) and one queued chunk per subscriber session."""
        ts_us = self.txlog.last_timestamp_us if first_seq and self.txlog is not None else None
        live = [sub for sub in matches if sub.state == "live"]
        if any(sub.filter is not None for sub in live):
            # filters decide message by message
            bm_prefix = f"{publisher.pub_hash}|"
            for s, body in zip(seqs, bodies, strict=True):
                bm = f"{bm_prefix}{s}|" if first_seq else None
                self._fan_out(publisher, topic, body, matches, bm, ts_us, None)
            return
        per_session = self._by_session(live, topic)
        if not per_session:
            return
        tj = self.topic_json(topic)
        ts: str | None = None
        encoded: dict[tuple[bytes, bool], bytes] = {}
        k = len(bodies)
        for sess, subs in per_session.items():
            key = sids, want_ts = _delivery_key(subs)
            if want_ts and ts is None:
                ts = self._timestamp(ts_us)
            data = encoded.get(key)
            if data is None:
                head = b'{"c":"publish","t":' + tj + b',"sids":' + sids
                if first_seq:
                    head += b',"bm":"' + str(publisher.pub_hash).encode() + b"|"
                    tail = b'|","ts":"' + ts.encode() + b'","l":' if want_ts and ts else b'|","l":'
                    data = b"".join(
                        [
                            head + b"%d" % s + tail + b"%d}" % len(body) + body
                            for s, body in zip(seqs, bodies, strict=True)
                        ]
                    )
                else:
                    if want_ts and ts:
                        head += b',"ts":"' + ts.encode() + b'"'
                    head += b',"l":'
                    data = b"".join([head + b"%d}" % len(body) + body for body in bodies])
                encoded[key] = data
            sess.send_messages(data, k)
        self.msgs_out_live += k * len(per_session)

    def _duplicate(self, session: Session, cmd: Command, s: int) -> None:
        """A publish whose sequence was already stored: not stored, not delivered."""
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid, status="failure", reason="duplicate", s=s)
        if "persisted" in cmd.acks:
            txlog = self.txlog
            assert txlog is not None
            # acked once everything this publisher has appended is durable
            session.pending_persist.append((txlog.last_seq, s, self.clock.monotonic()))
            self._pending_sessions.add(session)
            if txlog.durable_seq >= txlog.last_seq:
                self._on_durable(txlog.durable_seq)

    def _fan_out(
        self,
        publisher: Session,
        topic: str,
        body: bytes,
        matches: list[Subscription],
        bm: str | None,
        ts_us: int | None,
        corr: str | None,
    ) -> None:
        view: MessageView | None = None
        if len(matches) == 1:
            only = matches[0]
            if (
                only.state == "live"
                and only.filter is None
                and not only.want_ts
                and (only.pattern is None or not self.auth.enabled)
            ):
                # the common case: one plain subscription, nothing to group or share
                only.session.send_message(
                    encode_publish(self.topic_json(topic), only.sid_bytes, body, bm, None, corr)
                )
                self.msgs_out_live += 1
                return
        taken: list[Subscription] = []
        for sub in matches:
            if sub.state != "live":
                continue
            flt = sub.filter
            if flt is not None:
                if view is None:
                    view = MessageView(
                        topic,
                        body,
                        bookmark=bm or "",
                        timestamp=format_timestamp_us(ts_us) if ts_us is not None else "",
                        client_name=publisher.name or "",
                    )
                if not flt.matches(view):
                    continue
            taken.append(sub)
        per_session = self._by_session(taken, topic)
        if not per_session:
            return
        tj = self.topic_json(topic)
        ts: str | None = None
        encoded: dict[tuple[bytes, bool], bytes] = {}
        for s, subs in per_session.items():
            # subscribers that use the same sub id get the very same bytes: encode once
            key = sids, want_ts = _delivery_key(subs)
            if want_ts and ts is None:
                ts = self._timestamp(ts_us)
            data = encoded.get(key)
            if data is None:
                data = encoded[key] = encode_publish(
                    tj, sids, body, bm, ts if want_ts else None, corr
                )
            s.send_message(data)
        self.msgs_out_live += len(per_session)

    def _by_session(
        self, subs: list[Subscription], topic: str
    ) -> dict[Session, list[Subscription]]:
        """Subscriptions that receive ``topic``, grouped by session (one message each).

        A regex subscription only gets topics its user may read (exact topics were
        checked at subscribe time).
        """
        check_read = self.auth.enabled
        per_session: dict[Session, list[Subscription]] = {}
        for sub in subs:
            if check_read and sub.pattern is not None and not self.can_read(sub.session, topic):
                continue
            per_session.setdefault(sub.session, []).append(sub)
        return per_session

    def _timestamp(self, ts_us: int | None) -> str:
        """The ``ts`` of a delivery: the record's time, or now for unrecorded topics."""
        return format_timestamp_us(ts_us if ts_us is not None else int(self.clock.time() * 1e6))

    def topic_json(self, topic: str) -> bytes:
        """A topic as a JSON string literal, encoded once per topic."""
        tj = self.topic_json_cache.get(topic)
        if tj is None:
            tj = orjson.dumps(topic)
            if len(self.topic_json_cache) < 50_000:
                self.topic_json_cache[topic] = tj
        return tj

    def _on_durable(self, durable_seq: int) -> None:
        """Group commit done: persisted acks (conflated per client) and flush acks."""
        if not self._pending_sessions:
            return
        now = self.clock.monotonic()
        hist = self.persisted_ack_latency
        done: list[Session] = []
        for session in self._pending_sessions:
            pending = session.pending_persist
            top = -1
            while pending and pending[0][0] <= durable_seq:
                _, s, t0 = pending.popleft()
                hist.observe(now - t0)
                if s > top:
                    top = s
            if top >= 0:
                session.last_persisted_seq = max(session.last_persisted_seq, top)
                session.ack("persisted", None, s=top, bm=format_bookmark(session.pub_hash, top))
            flushes = session.pending_flush
            while flushes and flushes[0][0] <= durable_seq:
                _, cid = flushes.popleft()
                session.ack("processed", cid)
            if not pending and not flushes:
                done.append(session)
        for session in done:
            self._pending_sessions.discard(session)

    def flush(self, session: Session, cmd: Command) -> None:
        """Ack once every earlier command of this connection is processed and persisted."""
        txlog = self.txlog
        if txlog is None or txlog.durable_seq >= txlog.last_seq:
            if "processed" in cmd.acks or "completed" in cmd.acks or not cmd.acks:
                session.ack("processed", cmd.cid)
            return
        session.pending_flush.append((txlog.last_seq, cmd.cid))
        self._pending_sessions.add(session)

    # -- subscriptions -------------------------------------------------------------------

    def lookups_to_prefetch(self, cmd: Command) -> bool:
        """Whether planning this subscribe would read the log's files on the loop.

        A bookmark or time that is no longer in memory (an older journal, a compressed
        one) costs a file read or a chunk decompression to locate. The session then
        resolves those lookups off the loop first (:meth:`prefetch_lookups`) and runs the
        command afterwards, holding its later commands back to keep their order.
        """
        txlog = self.txlog
        if txlog is None or cmd.name != "subscribe" or not cmd.bookmark:
            return False
        try:
            spec = parse_bookmark(cmd.bookmark)
        except ProtocolFailure:
            return False  # the command reports it when it runs
        bookmarks, times = lookup_points(spec)
        return (bool(bookmarks) or bool(times)) and txlog.lookups_need_io(bookmarks, times)

    async def prefetch_lookups(self, cmd: Command) -> Located | None:
        """The lookups of a subscribe's bookmark, resolved with file reads in a thread."""
        txlog = self.txlog
        if txlog is None or not cmd.bookmark:
            return None
        bookmarks, times = lookup_points(parse_bookmark(cmd.bookmark))
        return await txlog.locate_all(bookmarks, times)

    def execute_prefetched(self, session: Session, cmd: Command, located: Located | None) -> None:
        """:meth:`execute` with the lookups of :meth:`prefetch_lookups` answered."""
        if self.txlog is None or located is None:
            self.execute(session, cmd)
            return
        with self.txlog.using(located):
            self.execute(session, cmd)

    def subscribe(self, session: Session, cmd: Command) -> None:
        topic = cmd.topic
        assert topic is not None
        sub_id = cmd.sub_id or cmd.cid
        if not sub_id:
            raise InvalidMessage("subscribe needs a sub_id (or a cid to use as one)")
        options = parse_subscribe_options(cmd.options)
        if options.resume or (
            options.pause and all(i.strip() in session.subs for i in sub_id.split(","))
        ):
            self._pause_resume_command(session, cmd, sub_id, options)
            return
        if "," in sub_id:
            raise InvalidMessage("a sub_id cannot contain ',' (lists only with pause/resume)")
        existing = session.subs.get(sub_id)
        if existing is not None and not options.replace:
            raise SubIdInUse(f"sub_id {sub_id!r} is already in use on this connection")
        pattern = compile_topic(topic) if is_regex_topic(topic) else None
        if self.auth.enabled and pattern is None and not self.can_read(session, topic):
            raise NotEntitled(f"user {session.user_name!r} may not read {topic!r}")
        flt: Filter | None = None
        if cmd.filter:
            try:
                flt = compile_filter(cmd.filter, clock=self.clock)
            except BadFilter:
                raise
            except Exception as exc:  # the compiler must never crash a session
                raise BadFilter(f"cannot compile filter: {exc}") from exc
        bookmark = cmd.bookmark
        spec = None
        if bookmark is not None and bookmark != "":
            spec = parse_bookmark(bookmark)
            if self.txlog is None:
                raise InvalidTopic("no transaction log is configured on this instance")
            if pattern is None and not self.records(topic):
                raise InvalidTopic(f"topic {topic!r} is not recorded in the transaction log")
        elif options.rate is not None or options.pause or options.resume:
            raise InvalidOptions("rate, pause and resume need a bookmark subscription")
        if existing is not None:
            self._drop_subscription(existing)
            del session.subs[sub_id]
        sub = Subscription(
            session=session,
            sub_id=sub_id,
            topic=topic,
            pattern=pattern,
            filter=flt,
            filter_text=cmd.filter,
            options=options,
            bookmark=bookmark if spec else None,
            bookmark_kind=spec_kind(spec) if spec is not None else "none",
            want_ts=options.timestamp,
            cid=cmd.cid,
            acks=cmd.acks,
            sid_bytes=orjson.dumps(sub_id),
        )
        session.subs[sub_id] = sub
        if spec is None:
            self.router.add(sub)
            if "processed" in cmd.acks:
                session.ack("processed", cmd.cid, sub_id=sub_id)
            return
        try:
            self._start_replay(sub, spec, options)
        except ProtocolFailure:
            del session.subs[sub_id]
            raise
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid, sub_id=sub_id)

    def _pause_resume_command(
        self, session: Session, cmd: Command, sub_ids: str, options: SubscribeOptions
    ) -> None:
        """``subscribe`` with ``pause``/``resume`` naming existing subscriptions."""
        assert session.name is not None
        ids = [i.strip() for i in sub_ids.split(",") if i.strip()]
        for i in ids:
            sub = session.subs.get(i)
            if sub is None or sub.cursor is None:
                raise SubIdNotFound(f"no bookmark subscription {i!r} on this connection")
        if options.resume:
            self.resume_subscriptions(session.name, ids)
        else:
            for i in ids:
                self.pause_subscription(session.name, i)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid, sub_id=sub_ids)

    def _new_group(self, spec: BookmarkSpec, options: SubscribeOptions) -> ReplayGroup:
        """A replay cursor over the log as these options see it (durable or appended)."""
        txlog = self.txlog
        assert txlog is not None
        source: ReplaySource = txlog
        horizon: Horizon | None = None
        if options.live:
            # deliver records as soon as they are appended, before the group commit
            source = AppendedSource(txlog)
            horizon = FunctionHorizon(lambda: txlog.last_seq, txlog.wait_appended)
        return ReplayGroup(
            source,
            spec,
            options,
            clock=self.clock,
            horizon=horizon,
            position_interval=self.config.tuning.persisted_ack_interval,
            # large reads: each file read is one hop to a thread and back
            batch_count=4096,
            batch_bytes=2 << 20,
        )

    def _start_replay(
        self, sub: Subscription, spec: BookmarkSpec, options: SubscribeOptions
    ) -> None:
        txlog = self.txlog
        assert txlog is not None
        sink = BookmarkSink(sub)
        sub.sink = sink
        group = self._new_group(spec, options)
        # with conflation the filter must run before records are conflated
        accept = sink.accepts if options.conflation else None
        member = group.add_sink(sink, accept=accept)  # BookmarkNotFound under ..._not_found=fail
        # hold the journals this replay still needs (journal removal answers 409)
        sink.pin = txlog.pin(f"replay:{sub.session.name}:{sub.sub_id}", group.position_of(member))
        sub.cursor = group
        sub.state = "paused" if options.pause else "replaying"
        if options.pause:
            group.pause()
        sub.task = asyncio.get_running_loop().create_task(self._run_replay(sub, group))

    async def _run_replay(self, sub: Subscription, group: ReplayGroup) -> None:
        try:
            await group.run()
        except asyncio.CancelledError:
            raise
        except ProtocolFailure as exc:
            sub.session.fail(sub.cid, exc)
        except Exception as exc:
            self.events.emit(
                "error",
                "replay",
                "replay_failed",
                client=sub.session.name,
                sub_id=sub.sub_id,
                error=repr(exc),
            )
            sub.session.fail(sub.cid, InvalidMessage(f"replay failed: {exc}"))

    def _drop_subscription(self, sub: Subscription) -> None:
        if sub.sink is not None and sub.sink.pin is not None:
            sub.sink.pin.release()
            sub.sink.pin = None
        if sub.task is not None:
            sub.task.cancel()
            sub.task = None
        if sub.cursor is not None:
            with contextlib.suppress(Exception):
                sub.cursor.close()
            sub.cursor = None
        self.router.remove(sub)

    def unsubscribe(self, session: Session, cmd: Command) -> None:
        ids = (cmd.sub_id or "").strip()
        if not ids:
            raise InvalidMessage("unsubscribe needs sub_id (a comma list or 'all')")
        if ids == "all":
            targets = list(session.subs)
        else:
            targets = [i.strip() for i in ids.split(",") if i.strip()]
            missing = [i for i in targets if i not in session.subs]
            if missing:
                raise SubIdNotFound(f"no subscription {missing[0]!r} on this connection")
        for sub_id in targets:
            sub = session.subs.pop(sub_id)
            self._drop_subscription(sub)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid)

    # -- pause / resume (protocol options and REST) --------------------------------------

    def pause_subscription(self, client: str, sub_id: str) -> None:
        session = self.by_name.get(client)
        if session is None:
            raise ClientNotFound(client)
        sub = session.subs.get(sub_id)
        if sub is None or sub.cursor is None:
            raise SubIdNotFound(f"no bookmark subscription {sub_id!r} for {client!r}")
        group: ReplayGroup = sub.cursor
        if len(group.members) > 1:
            # it shares a cursor since a resume-together: give it its own, paused
            member = group.take_sink(sub_id)
            own = self._new_group(group.spec, sub.options)
            own.add_sink_at(member, group.position_of(member))
            own.pause()
            sub.cursor = own
            sub.task = asyncio.get_running_loop().create_task(self._run_replay(sub, own))
        else:
            group.pause()
        sub.state = "paused"
        self.events.emit("info", "subscription", "paused", client=client, sub_id=sub_id)

    def resume_subscriptions(self, client: str, sub_ids: list[str]) -> None:
        """Resume one or several paused subscriptions; several share one cursor."""
        session = self.by_name.get(client)
        if session is None:
            raise ClientNotFound(client)
        subs: list[Subscription] = []
        for sub_id in sub_ids:
            sub = session.subs.get(sub_id)
            if sub is None or sub.cursor is None:
                raise SubIdNotFound(f"no bookmark subscription {sub_id!r} for {client!r}")
            subs.append(sub)
        if len(subs) > 1:
            # merge into the first one's cursor so their relative order is preserved
            lead = subs[0]
            group: ReplayGroup = lead.cursor
            for other in subs[1:]:
                if other.cursor is group:
                    continue
                old: ReplayGroup = other.cursor
                sink = old.take_sink(other.sub_id)
                if other.task is not None:
                    other.task.cancel()
                    other.task = None
                with contextlib.suppress(Exception):
                    old.close()
                group.add_sink_at(sink, old.position_of(sink))
                other.cursor = group
        group = subs[0].cursor
        for sub in subs:
            sub.state = "replaying"
            # announce the next catch-up again (the state turns "live" there)
            group.member(sub.sub_id).caught_up = False
        group.resume()
        self.events.emit("info", "subscription", "resumed", client=client, sub_ids=sub_ids)

    # -- admin surface -------------------------------------------------------------------

    def instance_info(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "name": cfg.name,
            "group": cfg.group,
            "version": VERSION,
            "pid": os.getpid(),
            "uptime": round(self.clock.time() - self.started_at, 3),
            "config_path": str(cfg.source_path) if cfg.source_path else None,
            "data_dir": str(cfg.data_directory),
            "start_time": _iso(self.started_at),
            "ready": self.ready,
        }

    def _client_dict(self, s: Session) -> dict[str, Any]:
        return {
            "name": s.name,
            "user": s.user_name,
            "remote_addr": s.remote,
            "connected_since": _iso(s.connected_at),
            "msgs_in": s.msgs_in,
            "msgs_out": s.msgs_out,
            "bytes_in": s.bytes_in,
            "bytes_out": s.bytes_out,
            "queue_depth": s.queue_depth,
            "last_persisted_seq": s.last_persisted_seq,
            "subscriptions": len(s.subs),
            "version": s.version,
        }

    def clients_info(self) -> list[dict[str, Any]]:
        return [self._client_dict(s) for s in self.sessions if s.name is not None]

    def client_info(self, name: str) -> dict[str, Any] | None:
        s = self.by_name.get(name)
        return self._client_dict(s) if s is not None else None

    def _seconds_behind(self, sub: Subscription) -> float:
        if sub.bookmark is None or self.txlog is None or not sub.position_time_us:
            return 0.0
        if sub.position_seq >= self.txlog.durable_seq:
            return 0.0
        return max(0.0, self.clock.time() - sub.position_time_us / 1e6)

    def subscriptions_info(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for s in self.sessions:
            for sub in s.subs.values():
                out.append(
                    {
                        "client": s.name,
                        "sub_id": sub.sub_id,
                        "topic": sub.topic,
                        "filter": sub.filter_text,
                        "bookmark_kind": sub.bookmark_kind,
                        "bookmark": sub.bookmark,
                        "options": sub.options.raw,
                        "state": sub.state,
                        "position": sub.position,
                        "position_seq": sub.position_seq,
                        "delivered": sub.delivered,
                        "seconds_behind": round(self._seconds_behind(sub), 3),
                    }
                )
        return out

    def transports_info(self) -> list[dict[str, Any]]:
        return [self._transport_dict(t) for t in self.config.transports]

    def _transport_dict(self, t: TransportConfig) -> dict[str, Any]:
        return {
            "name": t.name,
            "type": t.type,
            "address": t.address,
            "enabled": self._transport_enabled.get(t.name, False),
            "connections": self._transport_conns.get(t.name, 0),
        }

    def set_transport_enabled(self, name: str, enabled: bool) -> None:
        if name not in self._transport_enabled:
            raise TransportNotFound(name)
        self._transport_enabled[name] = enabled
        self.events.emit("info", "transport", "enabled" if enabled else "disabled", transport=name)

    async def disconnect_client(self, name: str, reason: str = "disconnected by admin") -> bool:
        s = self.by_name.get(name)
        if s is None:
            return False
        await s.close(reason)
        return True

    def transaction_log_info(self) -> dict[str, Any] | None:
        txlog = self.txlog
        if txlog is None:
            return None
        journals = [_journal_dict(j) for j in txlog.journals()]
        st = txlog.stats()
        return {
            "journals": journals,
            "totals": {
                "files": len(journals),
                "bytes": sum(j["size"] for j in journals),
                "first_seq": txlog.first_seq,
                "last_seq": txlog.last_seq,
                "durable_seq": txlog.durable_seq,
            },
            "flush_latency_ms": {
                "p50": st.get("fsync_p50_ms", 0.0),
                "p99": st.get("fsync_p99_ms", 0.0),
            },
            "stats": st,
        }

    async def journal_action(self, action: str, journal_id: int) -> list[dict[str, Any]]:
        txlog = self.txlog
        if txlog is None:
            from server.engine_errors import JournalNotFound

            raise JournalNotFound(str(journal_id))
        if action == "archive":
            infos = await txlog.archive(journal_id)
        elif action == "compress":
            infos = await txlog.compress(journal_id)
        elif action == "remove":
            infos = await txlog.remove(journal_id)
        else:
            raise ValueError(action)
        self.events.emit("info", "txlog", f"journal_{action}", journal=journal_id, files=len(infos))
        return [_journal_dict(j) for j in infos]

    def metrics_snapshot(self) -> dict[str, Any]:
        msgs_out = self._msgs_out_closed
        bytes_out = self._bytes_out_closed
        clients: dict[str, dict[str, int]] = {}
        subs = 0
        detail: list[dict[str, Any]] = []
        for s in self.sessions:
            msgs_out += s.msgs_out
            bytes_out += s.bytes_out
            subs += len(s.subs)
            if s.name is not None:
                clients[s.name] = {
                    "msgs_in": s.msgs_in,
                    "msgs_out": s.msgs_out,
                    "bytes_in": s.bytes_in,
                    "bytes_out": s.bytes_out,
                    "queue_depth": s.queue_depth,
                }
            for sub in s.subs.values():
                detail.append(
                    {
                        "client": s.name,
                        "sub_id": sub.sub_id,
                        "topic": sub.topic,
                        "state": sub.state,
                        "position_seq": sub.position_seq,
                        "seconds_behind": self._seconds_behind(sub),
                    }
                )
        txlog_snapshot: dict[str, Any] | None = None
        if self.txlog is not None:
            st = self.txlog.stats()
            txlog_snapshot = {
                "last_seq": self.txlog.last_seq,
                "durable_seq": self.txlog.durable_seq,
                "bytes": st.get("disk_bytes", 0),
                "journals": st.get("journals", 0),
                "appended": st.get("appended", 0),
                "flushes": st.get("flushes", 0),
                "fsync_p50_ms": st.get("fsync_p50_ms", 0.0),
                "fsync_p99_ms": st.get("fsync_p99_ms", 0.0),
            }
        return {
            "time": self.clock.time(),
            "msgs_in": self.msgs_in,
            "msgs_out": msgs_out,
            "bytes_in": self.bytes_in,
            "bytes_out": bytes_out,
            "connections": len(self.sessions),
            "subscriptions": subs,
            "clients": clients,
            "topics": {t: {"msgs_in": c[0], "bytes_in": c[1]} for t, c in self.topics.items()},
            "subscriptions_detail": detail,
            "txlog": txlog_snapshot,
            "persisted_ack_latency": self.persisted_ack_latency,
            "transports": {
                name: {"connections": self._transport_conns.get(name, 0), "enabled": en}
                for name, en in self._transport_enabled.items()
            },
        }

    def _txlog_event(self, event: str, fields: dict[str, object]) -> None:
        level = "warning" if "truncat" in event or "fail" in event else "info"
        self.events.emit(level, "txlog", event, **fields)


class AppendedSource:
    """The log as a ``live`` bookmark subscription sees it: appended, not only durable."""

    def __init__(self, txlog: TransactionLog) -> None:
        self._log = txlog

    @property
    def durable_seq(self) -> int:
        return self._log.durable_seq

    @property
    def first_seq(self) -> int:
        return self._log.first_seq

    def seq_for_bookmark(self, pub_hash: int, pub_seq: int) -> int | None:
        return self._log.seq_for_bookmark(pub_hash, pub_seq)

    def seq_for_time(self, timestamp_us: int) -> int:
        return self._log.seq_for_time(timestamp_us)

    async def read_view(
        self,
        from_seq: int,
        *,
        max_count: int = 1000,
        max_bytes: int = 1 << 20,
        upto_seq: int | None = None,
    ) -> RecordBatch:
        """Appended records from ``from_seq``, as a :class:`RecordBatch` (the protocol's
        one read; see ``ReplaySource``).

        Durable records come from the log's own columnar read, as for any other bookmark
        subscription (a log read never crosses the durable point); records not on disk yet
        come from the in-memory tail (``read_appended``) and are wrapped in a batch.
        """
        if from_seq <= self._log.durable_seq:
            return await self._log.read_view(
                from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
            )
        records = await self._log.read_appended(
            from_seq, max_count=max_count, max_bytes=max_bytes, upto_seq=upto_seq
        )
        return RecordBatch.from_records(records)

    async def wait_durable(self, seq: int) -> None:
        await self._log.wait_durable(seq)


def _iso_us(us: int | None) -> str | None:
    if us is None:
        return None
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="microseconds")


def _journal_dict(j: JournalInfo) -> dict[str, Any]:
    """A journal as ADMIN_API.md shows it (times as ISO-8601 UTC)."""
    return {
        "id": j.id,
        "path": j.path,
        "state": j.state,
        "size": j.size_bytes,
        "data_bytes": j.data_bytes,
        "compression": j.compression,
        "records": j.records,
        "first_seq": j.first_seq,
        "last_seq": j.last_seq,
        "first_bookmark": j.first_bookmark,
        "last_bookmark": j.last_bookmark,
        "first_time": _iso_us(j.first_time_us),
        "last_time": _iso_us(j.last_time_us),
        "pinned_by": j.pinned_by,
    }


def _report_fields(report: object) -> dict[str, Any]:
    to_dict = getattr(report, "to_dict", None)
    if callable(to_dict):
        result = to_dict()
        if isinstance(result, dict):
            return result
    return {"report": str(report)}


def _delivery_key(subs: list[Subscription]) -> tuple[bytes, bool]:
    """(sub ids as a JSON string, wants a timestamp) of one session's matching
    subscriptions: a session gets one message per publish whatever number matched."""
    if len(subs) == 1:
        return subs[0].sid_bytes, subs[0].want_ts
    return orjson.dumps(",".join(x.sub_id for x in subs)), any(x.want_ts for x in subs)
