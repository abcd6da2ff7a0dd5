"""A scripted in-memory broker for the HA client's unit tests (the transport seam:
``HAClient(connector=...)``; real brokers are in tests/faults/test_ha_client.py).

It keeps what a broker keeps for the tests' purposes: per client name the last persisted
sequence, and one log of ``(bookmark, topic, body)``. Logons are answered with the logon
ack's ``s``; publishes are logged once per sequence (a resend is a duplicate) and answered
with conflated persisted acks (unless ``hold_acks``); a subscribe with a bookmark replays
the log after the oldest listed bookmark found in it (EPOCH: all), then stays live; one
with ``bookmark_not_found=fail`` whose bookmarks are all unknown is refused with
``bookmark not found``. With ``failover`` set it says so in the logon ack and takes the
logon options (``o``) it is asked for; replicated acks and failover notices are the
test's to send (``link.reply``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

from spool.server.bookmarks import pub_hash
from spool.server.client.connection import ClientTransport, Handlers
from spool.server.protocol.frame import encode_message, parse_frame

Header = dict[str, Any]


class FakeBroker:
    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.persisted: dict[str, int] = {}
        self.log: list[tuple[str, str, bytes]] = []
        self.hold_acks = False
        self.refuse_subscribe = ""  # a failure reason for every subscribe
        #: the logon ack's ``failover`` (None: a broker that does not replicate)
        self.failover: str | None = None
        #: logon options it takes (a broker that predates them takes none)
        self.options: frozenset[str] = frozenset()
        self.fail_next = 0  # connection attempts to refuse
        self.refuse_logon: list[str] = []  # failure reasons for the next logons, in order
        self.attempts: list[tuple[str, float]] = []
        self.transports: list[FakeLink] = []
        self.commands: list[list[Header]] = []  # per connection, in order

    @property
    def link(self) -> FakeLink:
        return self.transports[-1]

    async def connect(
        self,
        url: str,
        handlers: Handlers,
        *,
        open_timeout: float,
        max_size: int | None,
        ssl: ssl.SSLContext | None = None,
    ) -> ClientTransport:
        self.attempts.append((url, self.now()))
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionRefusedError(f"refused: {url}")
        link = FakeLink(self, handlers, url)
        self.transports.append(link)
        self.commands.append(link.commands)
        return link

    def drop(self) -> None:
        """The broker process dies: the connection ends without a close frame."""
        self.link.lost()


class FakeLink:
    def __init__(self, broker: FakeBroker, handlers: Handlers, url: str) -> None:
        self.broker = broker
        self.handlers = handlers
        self.url = url
        self.commands: list[Header] = []
        self.closed = False
        self.name = ""
        self.subs: dict[str, str] = {}  # sub_id -> topic
        self.last_received = asyncio.get_running_loop().time()
        self._scheduled = False

    # -- Transport ------------------------------------------------------------------------

    def flush_soon(self) -> None:
        if not self._scheduled and not self.closed:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        if self.closed:
            return
        data = self.handlers.data_to_send()
        if data:
            asyncio.get_running_loop().create_task(self._serve(data))

    async def flush(self) -> None:
        self._drain()

    async def send(self, frame: bytes) -> None:
        self._drain()
        await self._serve(frame)

    def start_heartbeat(self, interval: float, beat: Callable[[], None]) -> None:
        pass

    def abort(self) -> None:
        self.lost()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.lost(reason, code)

    def lost(self, reason: str = "", code: int | None = None) -> None:
        if not self.closed:
            self.closed = True
            self.handlers.connection_lost(reason, code)

    # -- the broker's answers -------------------------------------------------------------

    async def reply(self, *messages: Header | tuple[Header, bytes]) -> None:
        if self.closed:
            return
        out = []
        for m in messages:
            header, body = m if isinstance(m, tuple) else (m, b"")
            out.append(encode_message(header, body))
        await self.handlers.frame_received(b"".join(out))

    async def _serve(self, data: bytes) -> None:
        broker = self.broker
        for m in parse_frame(data).messages:
            h = m.header
            self.commands.append(h)
            c = h.get("c")
            cid = h.get("cid")
            if c == "logon" and broker.refuse_logon:
                await self.reply({"c": "ack", "a": "processed", "cid": cid, "status": "failure",
                                  "reason": broker.refuse_logon.pop(0)})  # fmt: skip
            elif c == "logon":
                self.name = h["client_name"]
                s = broker.persisted.get(self.name, 0)
                ack = {"c": "ack", "a": "processed", "cid": cid, "status": "success",
                       "client_name": self.name, "s": s, "version": "fake"}  # fmt: skip
                if broker.failover is not None:
                    ack["failover"] = broker.failover
                    ack["async_links"] = "" if broker.failover == "safe" else "b"
                taken = sorted(set(str(h.get("o", "")).split(",")) & broker.options)
                if taken:
                    ack["o"] = ",".join(taken)
                await self.reply(ack)
            elif c == "publish":
                s = int(h["s"])
                last = broker.persisted.get(self.name, 0)
                if s > last:
                    broker.log.append((f"{pub_hash(self.name)}|{s}|", h["t"], m.body))
                    broker.persisted[self.name] = s
                    await self._deliver(len(broker.log) - 1)
                if not broker.hold_acks:
                    await self.reply({"c": "ack", "a": "persisted", "status": "success",
                                      "s": broker.persisted[self.name]})  # fmt: skip
            elif c in ("subscribe", "delta_subscribe") and broker.refuse_subscribe:
                await self.reply({"c": "ack", "a": "processed", "cid": cid, "status": "failure",
                                  "reason": broker.refuse_subscribe})  # fmt: skip
            elif c in ("subscribe", "delta_subscribe"):
                sid = h["sub_id"]
                self.subs[sid] = h["t"]
                bm = h.get("bm")
                if bm is not None and bm != "0":
                    found = [i for i, (b, _, _) in enumerate(broker.log) if b in bm.split(",")]
                    if not found and "bookmark_not_found=fail" in str(h.get("o", "")):
                        self.subs.pop(sid)
                        await self.reply({"c": "ack", "a": "processed", "cid": cid,
                                          "status": "failure", "reason": "bookmark not found"})  # fmt: skip
                        continue
                await self.reply({"c": "ack", "a": "processed", "cid": cid, "status": "success"})
                if bm is not None:
                    start = 0
                    if bm != "0":
                        start = min(found) + 1 if found else len(broker.log)
                    for i in range(start, len(broker.log)):
                        await self._deliver(i, only=sid)
            elif c == "unsubscribe":
                self.subs.pop(h["sub_id"], None)
                await self.reply({"c": "ack", "a": "processed", "cid": cid, "status": "success"})
            elif cid is not None:
                await self.reply({"c": "ack", "a": h.get("a", "processed"), "cid": cid,
                                  "status": "success"})  # fmt: skip

    async def _deliver(self, i: int, only: str | None = None) -> None:
        bm, topic, body = self.broker.log[i]
        for sid, t in self.subs.items():
            if t == topic and (only is None or sid == only):
                await self.reply(({"c": "publish", "t": topic, "sids": sid, "bm": bm}, body))
