"""The client side of one Spool session, sans-I/O: frames in, events out, commands as bytes.

:class:`SessionState` holds everything the client knows about its session and nothing
about how bytes travel: command ids and the commands waiting for their ack, the
subscriptions by id, the publish sequence numbers and the last sequence the broker
persisted, and the outbound messages not yet handed to the connection. It uses no asyncio
and no sockets, so it is tested with bytes alone and reused unchanged by the HA client
(which replays the same commands on a new connection) and by any other transport.

Outbound, every command method encodes its message and appends it to a buffer;
:meth:`SessionState.data_to_send` joins the buffer into one frame. The owner calls it
once per loop turn, so everything queued in one turn leaves in one frame (docs/protocol.md
lets clients batch like the server does).

Inbound, :meth:`SessionState.receive_frame` parses one frame and returns the
:mod:`~spool.server.client.events` its messages mean, in arrival order, after updating its own
bookkeeping (waiting commands, persisted sequence, logon). The owner applies the events in
that order. Like the websockets library's ``protocol.py``, a parse error is never raised:
it becomes a :class:`~spool.server.client.events.ConnectionFailed` event, and later frames are
ignored.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Final, Generic, TypeVar, cast

import orjson

from spool.server.client.errors import (
    Disconnected,
    ReusedSequence,
    ReusedSequenceWarning,
    reused_text,
)
from spool.server.client.events import (
    HEARTBEAT,
    Ack,
    Completed,
    ConnectionFailed,
    Delivered,
    Event,
    Failed,
    FailoverChanged,
    FailoverSafety,
    LogonInfo,
    Message,
    Persisted,
    PositionReported,
    QueryEnded,
    QueryRecords,
    Replicated,
    Replied,
)
from spool.server.protocol.delivery import split_deliveries
from spool.server.protocol.errors import failure_for
from spool.server.protocol.frame import FrameError, encode_publishes
from spool.server.protocol.message import Message as FrameMessage
from spool.server.protocol.message import delivery_of

S = TypeVar("S")

#: the version string the client sends on logon.
CLIENT_VERSION: Final = "spool-python/0.1"
#: a frame out holds queued messages up to this size (one larger message goes alone): an
#: application that publishes faster than the socket drains must not build one frame past
#: the broker's message limit (16 MiB by default), which ends the connection
MAX_FRAME_BYTES: Final = 1024 * 1024


def encode_body(data: bytes | str | Any) -> bytes:
    """A publish body: bytes as they are, text as UTF-8, anything else as JSON."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    return orjson.dumps(data)


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def publish_options(
    deliver_at: datetime | None = None, deliver_after: float | timedelta | None = None
) -> str | None:
    """The ``o`` header of a delayed publish (docs/protocol.md "Publish options"), or None
    when neither is given.

    ``deliver_at`` is written to the microsecond in UTC (``YYYYmmddTHHMMSS.ffffffZ``);
    ``deliver_after`` (seconds, or a timedelta) exactly: whole seconds (``30s``), else
    whole milliseconds (``1500ms``), else a decimal number of seconds (``0.0005s``).

    Raises:
        ValueError: both given; ``deliver_at`` not a datetime or naive (no timezone: which
            moment it names depends on the machine); ``deliver_after`` not a number or
            timedelta, or not finite and > 0.
    """
    if deliver_at is not None and deliver_after is not None:
        raise ValueError("deliver_at and deliver_after contradict each other: give one")
    if deliver_at is not None:
        return f"deliver_at={_moment_text(deliver_at)}"
    if deliver_after is not None:
        return f"deliver_after={_duration_text(deliver_after)}"
    return None


def _moment_text(at: datetime) -> str:
    if not isinstance(at, datetime):
        raise ValueError(f"deliver_at must be a datetime, not {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(
            "deliver_at is a naive datetime: give it a timezone (e.g. "
            "datetime.now(timezone.utc)), as which moment a naive one names depends on the "
            "machine's local time"
        )
    d = at.astimezone(UTC)
    return (
        f"{d.year:04d}{d.month:02d}{d.day:02d}T{d.hour:02d}{d.minute:02d}{d.second:02d}"
        f".{d.microsecond:06d}Z"
    )


def _duration_text(after: float | timedelta) -> str:
    if isinstance(after, timedelta):
        micros = after // timedelta(microseconds=1)
        if micros <= 0:
            raise ValueError(f"deliver_after must be greater than zero, not {after}")
        seconds, fraction = divmod(micros, 1_000_000)
        if fraction == 0:
            return f"{seconds}s"
        if fraction % 1000 == 0:
            return f"{micros // 1000}ms"
        return f"{seconds}.{fraction:06d}".rstrip("0") + "s"
    if isinstance(after, bool) or not isinstance(after, int | float):
        raise ValueError(
            f"deliver_after must be seconds or a timedelta, not {type(after).__name__}"
        )
    if not math.isfinite(after) or after <= 0:
        raise ValueError(f"deliver_after must be a finite number of seconds > 0, not {after}")
    if after == int(after):
        return f"{int(after)}s"
    millis = after * 1000
    if millis == int(millis) and int(millis) / 1000 == after:
        return f"{int(millis)}ms"
    return format(Decimal(repr(float(after))), "f") + "s"


class SessionState(Generic[S]):
    """One session's state: what was sent, what is awaited, what arrived.

    ``S`` is the owner's subscription handle (the asyncio client registers its
    :class:`~spool.server.client.client.Subscription` objects); deliveries and subscription
    events carry the handle, so the owner never looks a subscription up again.

    Attributes:
        name: the client name sent on logon.
        seq: the last sequence number given to a publish of this client name.
        persisted_seq: the highest sequence the broker acked as persisted (from the logon
            ack, then from conflated persisted acks).
        replicated_seq: the highest sequence the broker acked as replicated (the logon
            option ``replicated``), on this connection.
        safety: the safety of failing over from the broker, from the logon ack and then
            its ``failover`` notices (None: it does not replicate).
        unpersisted: the latest failure saying publishes up to its ``s`` are not persisted
            (a ``persisted`` failure while the broker's log refuses writes, or a refused
            publish), as ``(s, ack)``; a later success above ``s`` supersedes it.
        logon: what the logon ack said, once it arrived.
        failures: every failure ack no command was waiting for, in arrival order.
        error: the parse error of a malformed frame from the broker, once there was one.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.seq = 0
        self.persisted_seq = 0
        self.replicated_seq = 0
        self.safety: FailoverSafety | None = None
        #: what a hand-set sequence at or below :attr:`seq` does: ``warn``, ``refuse``
        #: or ``allow`` (a client that resends on purpose, the HA client)
        self.reused_seq = "warn"
        self.unpersisted: tuple[int, Ack] | None = None
        self.logon: LogonInfo | None = None
        self.failures: list[Ack] = []
        self.error: FrameError | None = None
        self._ids = itertools.count(1)
        self._out: list[bytes] = []
        self._waiting: set[str] = set()
        self._logon_cid: str | None = None
        self._subs: dict[str, S] = {}
        #: query handles by query id: where ``sow`` records and ``group_end`` go
        self._queries: dict[str, S] = {}
        self._lost: Disconnected | None = None

    # -- ids and subscriptions -----------------------------------------------------------

    def next_cid(self) -> str:
        """A fresh command id."""
        return str(next(self._ids))

    def next_sub_id(self) -> str:
        """A fresh subscription id (from the same counter as command ids, so never equal)."""
        return f"s{next(self._ids)}"

    @property
    def subscriptions(self) -> Mapping[str, S]:
        """The registered subscriptions by id (read-only view)."""
        return self._subs

    @property
    def waiting(self) -> frozenset[str]:
        """The command ids whose final ack has not arrived yet."""
        return frozenset(self._waiting)

    def add_subscription(self, sub_id: str, handle: S) -> S | None:
        """Route deliveries for ``sub_id`` to ``handle`` from now on.

        Registered before the subscribe command is sent, because the broker may put the
        first deliveries in the same frame as the processed ack.

        Returns:
            The handle it replaces, so a refused ``replace`` can put it back.
        """
        previous = self._subs.get(sub_id)
        self._subs[sub_id] = handle
        return previous

    def remove_subscription(self, sub_id: str) -> S | None:
        """Stop routing ``sub_id``; returns its handle if it had one."""
        return self._subs.pop(sub_id, None)

    def remove_subscriptions(self, sub_ids: str) -> list[S]:
        """Stop routing ``all`` or a comma list of ids (an unsubscribe's argument)."""
        ids = list(self._subs) if sub_ids == "all" else sub_ids.split(",")
        removed = []
        for sid in ids:
            handle = self._subs.pop(sid.strip(), None)
            if handle is not None:
                removed.append(handle)
        return removed

    def add_query(self, qid: str, handle: S) -> None:
        """Route the ``sow`` records and ``group_end`` of query ``qid`` to ``handle`` (a
        ``sow`` or the snapshot of a ``sow_and_subscribe``; register before sending)."""
        self._queries[qid] = handle

    def remove_query(self, qid: str) -> S | None:
        """Stop routing query ``qid``."""
        return self._queries.pop(qid, None)

    # -- commands out --------------------------------------------------------------------

    def send(self, header: dict[str, Any], body: bytes = b"") -> None:
        """Queue one message for the next frame (sets ``l`` in ``header``).

        Raises:
            Disconnected: the connection was lost (with its close reason and code).
        """
        if self._lost is not None:
            raise Disconnected(self._lost.reason, self._lost.code)
        header["l"] = len(body)
        self._out.append(orjson.dumps(header) + body)

    def command(self, header: dict[str, Any], body: bytes = b"", *, ack: str = "processed") -> str:
        """Queue a command whose ``ack`` the owner will wait for; returns its command id.

        ``header`` keeps a ``cid`` it already has. The id stays in :attr:`waiting` until
        the final ack arrives (a :class:`~spool.server.client.events.Replied` event) or the
        owner stops waiting (:meth:`forget`).
        """
        cid: str = header.setdefault("cid", self.next_cid())
        header["a"] = ack
        self.send(header, body)
        self._waiting.add(cid)
        return cid

    def forget(self, cid: str) -> None:
        """The owner stopped waiting for ``cid`` (it timed out or was cancelled); a late
        ack for it is then treated like any ack nobody waits for."""
        self._waiting.discard(cid)

    def logon_command(
        self,
        *,
        user_id: str | None = None,
        password: str | None = None,
        heartbeat: float | None = None,
        options: str | None = None,
    ) -> str:
        """Queue the logon; when its ack arrives :attr:`logon` and the sequences are set.
        ``options``: the logon's ``o`` (``failover``, ``replicated``: docs/protocol.md)."""
        header: dict[str, Any] = {"c": "logon", "client_name": self.name, "version": CLIENT_VERSION}
        if user_id is not None:
            header["user_id"] = user_id
        if password is not None:
            header["pw"] = password
        if heartbeat:
            header["hb"] = heartbeat
        if options:
            header["o"] = options
        cid = self.command(header)
        self._logon_cid = cid
        return cid

    def publish(
        self,
        topic: str,
        body: bytes,
        *,
        seq: int | None = None,
        persisted: bool = False,
        correlation_id: str | None = None,
        auto_seq: bool = True,
    ) -> int:
        """Queue a fire-and-forget publish; returns its sequence number (0 without one).

        Without ``seq`` the next number is taken (unless ``auto_seq`` is false: the broker
        then does no duplicate detection for it); an explicit ``seq`` moves the counter
        forward so later automatic numbers stay above it.
        """
        if seq is None and auto_seq:
            self.seq += 1
            seq = self.seq
        elif seq is not None:
            if seq <= self.seq:
                self._reused(seq)
            self.seq = max(self.seq, seq)
        if self._lost is not None:
            raise Disconnected(self._lost.reason, self._lost.code)
        header: dict[str, Any] = {"c": "publish", "t": topic}
        if seq is not None:
            header["s"] = seq
        if persisted:
            header["a"] = "persisted"
        if correlation_id is not None:
            header["x"] = correlation_id
        header["l"] = len(body)
        # :meth:`send` inlined: this is the one command sent in loops of thousands.
        self._out.append(orjson.dumps(header) + body)
        return seq or 0

    def _reused(self, seq: int) -> None:
        """A hand-set ``seq`` the broker would drop as a duplicate (:attr:`reused_seq`)."""
        if self.reused_seq == "refuse":
            raise ReusedSequence(seq, self.seq)
        if self.reused_seq == "warn":
            warnings.warn(reused_text(seq, self.seq), ReusedSequenceWarning, stacklevel=4)

    def publish_many(self, topic: str, bodies: list[bytes], *, persisted: bool = False) -> int:
        """Queue a publish per body, numbered from the next sequence, encoded in one pass;
        returns the last sequence number (the current one when ``bodies`` is empty).

        The batch form of :meth:`publish` (every message gets an automatic sequence, no
        correlation id): the header's constant parts are encoded once for the batch.
        """
        if self._lost is not None:
            raise Disconnected(self._lost.reason, self._lost.code)
        if not bodies:
            return self.seq
        first = self.seq + 1
        head = b'{"c":"publish","t":' + orjson.dumps(topic) + b',"s":'
        mid = b',"a":"persisted","l":' if persisted else b',"l":'
        self._out.append(encode_publishes(head, first, mid, bodies))
        self.seq = first + len(bodies) - 1
        return self.seq

    def publish_keyed(
        self,
        topic: str,
        body: bytes,
        *,
        delta: bool = False,
        sow_key: str | None = None,
        expiration: int | None = None,
        persisted: bool = False,
        seq: int | None = None,
        correlation_id: str | None = None,
        options: str | None = None,
    ) -> int:
        """Queue a ``publish`` (or a ``delta_publish``) with a SOW key, a lifetime or
        options (the ``o`` header, :func:`publish_options`); returns its sequence number
        (``seq``: this one, as the HA client resends a stored publish with its own number;
        the counter moves forward past it)."""
        if seq is None:
            self.seq += 1
            seq = self.seq
        else:
            if seq <= self.seq:
                self._reused(seq)
            self.seq = max(self.seq, seq)
        header: dict[str, Any] = {"c": "delta_publish" if delta else "publish", "t": topic,
                                  "s": seq}  # fmt: skip
        if sow_key is not None:
            header["k"] = sow_key
        if expiration is not None:
            header["e"] = expiration
        if options is not None:
            header["o"] = options
        if persisted:
            header["a"] = "persisted"
        if correlation_id is not None:
            header["x"] = correlation_id
        self.send(header, body)
        return seq

    def sow_command(
        self,
        name: str,
        topic: str,
        qid: str,
        *,
        sub_id: str | None = None,
        filter: str | None = None,
        top_n: int | None = None,
        orderby: str | None = None,
        batch_size: int | None = None,
        bookmark: str | None = None,
        keys: list[str] | None = None,
        options: str | None = None,
        ack: str = "processed",
    ) -> str:
        """Queue a ``sow`` / ``sow_and_subscribe`` / ``sow_and_delta_subscribe`` (register
        its query handle, and for the latter two its subscription, first)."""
        header: dict[str, Any] = {"c": name, "t": topic, "qid": qid}
        if sub_id is not None:
            header["sub_id"] = sub_id
        for field, value in (("f", filter), ("top_n", top_n), ("orderby", orderby),
                             ("bs", batch_size), ("bm", bookmark), ("o", options)):  # fmt: skip
            if value is not None:
                header[field] = value
        if keys:
            header["k"] = ",".join(keys)
        return self.command(header, ack=ack)

    def sow_delete_command(
        self,
        topic: str,
        *,
        filter: str | None = None,
        keys: list[str] | None = None,
        data: bytes = b"",
    ) -> str:
        """Queue a ``sow_delete`` answered by its ``stats`` ack (``records_deleted``)."""
        header: dict[str, Any] = {"c": "sow_delete", "t": topic}
        if filter is not None:
            header["f"] = filter
        if keys:
            header["k"] = ",".join(keys)
        return self.command(header, data, ack="stats")

    def publish_command(self, topic: str, body: bytes) -> str:
        """Queue a publish with the next sequence number that waits for its processed ack."""
        self.seq += 1
        return self.command({"c": "publish", "t": topic, "s": self.seq}, body)

    def subscribe_command(
        self,
        topic: str,
        sub_id: str,
        *,
        filter: str | None = None,
        bookmark: str | None = None,
        options: str | None = None,
        completed: bool = False,
        delta: bool = False,
    ) -> str:
        """Queue a subscribe (``delta``: a ``delta_subscribe``) for ``sub_id`` (register its
        handle first)."""
        header: dict[str, Any] = {
            "c": "delta_subscribe" if delta else "subscribe", "t": topic, "sub_id": sub_id,
        }  # fmt: skip
        if filter is not None:
            header["f"] = filter
        if bookmark is not None:
            header["bm"] = bookmark
        if options is not None:
            header["o"] = options
        return self.command(header, ack="processed,completed" if completed else "processed")

    def unsubscribe_command(self, sub_ids: str = "all") -> str:
        """Queue an unsubscribe of ``all`` or a comma list of ids."""
        return self.command({"c": "unsubscribe", "sub_id": sub_ids})

    def flush_command(self) -> str:
        """Queue a flush (acked once every earlier command is processed and persisted)."""
        return self.command({"c": "flush"})

    def heartbeat(self) -> None:
        """Queue a heartbeat beat (the broker drops a client silent for two intervals)."""
        self.send({"c": "heartbeat", "o": "beat"})

    def data_to_send(self) -> bytes:
        """The next frame of what is queued (``b""`` when nothing is): the queued messages
        in order, as many as fit in :data:`MAX_FRAME_BYTES` (at least one). Call it until
        it returns ``b""``."""
        out = self._out
        if not out:
            return b""
        size = 0
        for n, message in enumerate(out):
            size += len(message)
            if size > MAX_FRAME_BYTES and n:
                frame = b"".join(out[:n])
                del out[:n]
                return frame
        frame = b"".join(out)
        out.clear()
        return frame

    # -- frames in -----------------------------------------------------------------------

    def receive_frame(self, data: bytes) -> list[Event[S]]:
        """The events of one frame from the broker, in arrival order.

        Never raises: a malformed message ends the frame with a
        :class:`~spool.server.client.events.ConnectionFailed` event after the events of the
        messages before it, and every later frame is ignored.
        """
        if self.error is not None:
            return []
        items, error = split_deliveries(data)
        subs = self._subs
        if error is None and items:
            # A replay frame: hundreds of deliveries to one subscription and nothing else.
            # One check per message here instead of the general loop's bookkeeping.
            first = items[0]
            if type(first) is Message and len(first.sub_ids) == 1:
                sids = first.sub_ids
                if all(type(m) is Message and m.sub_ids == sids for m in items):
                    sub = subs.get(sids[0])
                    if sub is None:
                        return []
                    return [Delivered(sub, cast("list[Message]", items))]
        return self._receive_items(items, error)

    def _receive_items(self, items: list[Message | FrameMessage], error: FrameError | None
                       ) -> list[Event[S]]:  # fmt: skip
        """The general case of :meth:`receive_frame` (and the oracle of its fast path)."""
        events: list[Event[S]] = []
        subs = self._subs
        # The open run: deliveries to ``run_sid`` join it until any other event comes.
        run_sid: str | None = None
        run: list[Message] = []
        # the open run of query records, for ``query_qid``
        query_qid: str | None = None
        records: list[Message] = []
        for item in items:
            if type(item) is not Message:
                assert isinstance(item, FrameMessage)  # what is not a delivery
                h = item.header
                c = h.get("c")
                if c == "sow":
                    run_sid = None
                    qid = str(h.get("qid", ""))
                    if qid != query_qid:
                        handle = self._queries.get(qid)
                        if handle is None:
                            continue
                        records = []
                        query_qid = qid
                        events.append(QueryRecords(handle, records))
                    records.append(Message(h.get("t", ""), item.body, (), h.get("bm"),
                                           h.get("ts"), None, h))  # fmt: skip
                    continue
                if c == "oof":  # routed like a delivery: it ends a record's life there
                    item = delivery_of(h, item.body)
            query_qid = None
            if type(item) is Message:
                for sid in item.sub_ids:
                    if sid == run_sid:
                        run.append(item)
                        continue
                    sub = subs.get(sid)
                    if sub is not None:
                        run = [item]
                        run_sid = sid
                        events.append(Delivered(sub, run))
                continue
            run_sid = None
            h = item.header
            c = h.get("c")
            if c == "ack":
                self._ack(h, events)
            elif c == "heartbeat":
                events.append(HEARTBEAT)
            elif c == "group_end":
                handle = self._queries.get(str(h.get("qid", "")))
                if handle is not None:
                    events.append(QueryEnded(handle))
        if error is not None:
            self.error = error
            events.append(ConnectionFailed(error))
        return events

    def _ack(self, h: dict[str, Any], events: list[Event[S]]) -> None:
        ack = Ack.from_header(h)
        kind = ack.kind
        if kind == "persisted" and ack.cid is None:
            # Conflated publish acks, and the durable position of bookmark subscriptions.
            sub_id = h.get("sub_id")
            if sub_id is not None:
                handle = self._subs.get(sub_id)
                if handle is not None:
                    events.append(PositionReported(handle, h.get("bm")))
                return
            if not ack.ok:
                self._not_persisted(ack)
                self._failed(ack, None, events)
                return
            s = int(h.get("s", 0) or 0)
            if s > self.persisted_seq:
                self.persisted_seq = s
                events.append(Persisted(s))
            return
        if kind == "replicated" and ack.cid is None:
            s = int(h.get("s", 0) or 0)
            if s > self.replicated_seq:
                self.replicated_seq = s
                events.append(Replicated(s))
            return
        if kind == "failover" and ack.cid is None:
            self.safety = FailoverSafety.from_header(h)
            events.append(FailoverChanged(self.safety))
            return
        if kind == "completed":
            handle = self._subs.get(h.get("sub_id", ""))
            if handle is not None:
                events.append(Completed(handle, ack))
        if not ack.ok and kind == "processed" and ack.reason != "duplicate":
            self._not_persisted(ack)  # a refused publish carries its own s
        cid = ack.cid
        if cid is not None and cid in self._waiting:
            if kind == "completed" and ack.ok:
                return  # the command's processed ack answers it
            self._waiting.discard(cid)
            if cid == self._logon_cid and ack.ok:
                self._logged_on(h)
            events.append(Replied(cid, ack))
            return
        if not ack.ok:
            self._failed(ack, self._subs.get(h.get("sub_id", "") or ""), events)

    def _not_persisted(self, ack: Ack) -> None:
        s = ack.header.get("s")
        if (
            isinstance(s, int)
            and not isinstance(s, bool)
            and s > self.persisted_seq
            and (self.unpersisted is None or s >= self.unpersisted[0])
        ):
            self.unpersisted = (s, ack)

    def not_persisted(self, seq: int) -> Ack | None:
        """The failure saying ``seq`` is not persisted, if one came and no later success
        covers ``seq`` (see :attr:`unpersisted`)."""
        failed = self.unpersisted
        if failed is None or seq <= self.persisted_seq or seq > failed[0]:
            return None
        return failed[1]

    def _failed(self, ack: Ack, handle: S | None, events: list[Event[S]]) -> None:
        self.failures.append(ack)
        error = failure_for(ack.reason or "", str(ack.header.get("detail", "")))
        events.append(Failed(ack, error, handle))

    def _logged_on(self, h: dict[str, Any]) -> None:
        info = LogonInfo(
            client_name=h.get("client_name", self.name),
            last_seq=int(h.get("s", 0) or 0),
            last_bookmark=h.get("bm"),
            version=str(h.get("version", "")),
            heartbeat=h.get("hb"),
            failover=h.get("failover"),
            async_links=tuple(x for x in str(h.get("async_links") or "").split(",") if x),
            down_links=tuple(x for x in str(h.get("down_links") or "").split(",") if x),
            options=tuple(x for x in str(h.get("o") or "").split(",") if x),
        )
        self.safety = info.safety
        # Publishing resumes after what the broker already has for this name.
        self.seq = max(self.seq, info.last_seq)
        self.persisted_seq = info.last_seq
        self.logon = info

    # -- end -----------------------------------------------------------------------------

    def connection_lost(self, reason: str = "", code: int | None = None) -> None:
        """The connection ended: nothing waits any more, and later commands raise
        :class:`~spool.server.client.errors.Disconnected` with this reason and code."""
        if self._lost is None:
            self._lost = Disconnected(reason, code)
        self._waiting.clear()

    @property
    def lost(self) -> bool:
        """Whether :meth:`connection_lost` was called."""
        return self._lost is not None


__all__ = ["CLIENT_VERSION", "SessionState", "encode_body", "publish_options"]
