"""A lean websocket speaker of docs/protocol.md for the benchmark workers.

The Python client (``spool.server.client``) builds a ``Message`` object and an asyncio queue
entry per delivered message; measuring through it would measure the client. The workers
use raw ``websockets`` connections instead: commands are pre-encoded bytes, delivered
messages are counted with ``bytes.count`` over whole frames (every delivered message starts
with ``{"c":"publish"``, and our bodies never contain that text), and acks are decoded with
the project's own sans-I/O frame parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import ssl
from collections.abc import Callable
from typing import Any, Final

import orjson
from websockets.asyncio.client import ClientConnection, connect

from spool.server.protocol.frame import encode_message, parse_frame

#: the start of every delivered message (docs/protocol.md: the server sends ``c`` first).
PUBLISH_MARK: Final = b'{"c":"publish"'
#: the start of every ack.
ACK_MARK: Final = b'{"c":"ack"'


#: one ack header inside a frame (headers hold only scalars; strings may contain braces).
_ACK_HEADER_RE: Final = re.compile(rb'\{"c":"ack"(?:[^"{}]|"(?:[^"\\]|\\.)*")*\}')


def scan_acks(frame: bytes) -> list[dict[str, Any]]:
    """The ack headers in a frame, found without splitting the data messages around them
    (a frame of a thousand deliveries with one ack costs one regex scan, not a parse)."""
    if ACK_MARK not in frame:
        return []
    out = []
    for m in _ACK_HEADER_RE.finditer(frame):
        header = orjson.loads(m.group(0))
        if isinstance(header, dict):
            out.append(header)
    return out


class BenchProtocolError(Exception):
    """The broker refused a benchmark command or sent something unexpected."""


async def open_session(
    url: str,
    name: str,
    *,
    timeout: float = 30.0,
    cafile: str | None = None,
    sock: socket.socket | None = None,
) -> tuple[ClientConnection, dict[str, Any]]:
    """Connect without compression and log on as ``name``; returns the logon ack too
    (its ``s`` is the last sequence number the broker persisted for this name).

    A ``wss://`` URL verifies the broker against ``cafile`` (the TLS scenarios' own CA);
    ``sock`` is a connected socket to use (to set its options first).

    Raises:
        BenchProtocolError: the logon was refused.
        TimeoutError: no logon ack within ``timeout``.
    """
    ws = await connect(
        url,
        ssl=ssl.create_default_context(cafile=cafile) if url.startswith("wss://") else None,
        compression=None,
        max_size=None,
        open_timeout=timeout,
        ping_interval=None,
        close_timeout=2,
        max_queue=64,
        sock=sock,
    )
    try:
        await ws.send(logon_command(name))
        acks = await wait_acks(ws, {"logon"}, timeout)
    except BaseException:
        await close_quietly(ws)
        raise
    return ws, acks["logon"]


def logon_command(name: str) -> bytes:
    """A logon as ``name`` whose ack carries ``cid`` = ``logon``."""
    header = {
        "c": "logon",
        "cid": "logon",
        "client_name": name,
        "a": "processed",
        "version": "spool-bench/1",
    }
    return encode_message(header)


def command(header: dict[str, Any]) -> bytes:
    """One command without a body, as the bytes of a message."""
    return encode_message(header)


def subscribe_command(
    topic: str,
    sub_id: str,
    *,
    bookmark: str | None = None,
    filter: str | None = None,
    options: str | None = None,
    acks: str = "processed",
) -> bytes:
    """A subscribe whose ack(s) carry ``cid`` = ``sub_id``."""
    header: dict[str, Any] = {
        "c": "subscribe",
        "t": topic,
        "sub_id": sub_id,
        "cid": sub_id,
        "a": acks,
    }
    if bookmark is not None:
        header["bm"] = bookmark
    if filter is not None:
        header["f"] = filter
    if options is not None:
        header["o"] = options
    return command(header)


async def wait_acks(
    ws: ClientConnection,
    cids: set[str],
    timeout: float,
    *,
    kind: str | None = None,
    on_frame: Callable[[bytes], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Read frames until an ack arrived for every command id in ``cids``.

    Args:
        kind: only acks of this kind count (``processed``, ``completed``...).
        on_frame: sees every frame read meanwhile (so data is not lost while waiting).

    Returns:
        The ack headers by command id.

    Raises:
        BenchProtocolError: a failure ack for one of ``cids``, or a malformed frame.
        TimeoutError: not all acks within ``timeout``.
    """
    found: dict[str, dict[str, Any]] = {}

    async def _read() -> None:
        while len(found) < len(cids):
            frame = await ws.recv(decode=False)
            if on_frame is not None:
                on_frame(frame)
            if ACK_MARK not in frame:
                continue
            parsed = parse_frame(frame)
            for msg in parsed.messages:
                h = msg.header
                if h.get("c") != "ack" or h.get("cid") not in cids:
                    continue
                if kind is not None and h.get("a") != kind:
                    continue
                if h.get("status", "success") != "success":
                    raise BenchProtocolError(
                        f"{h.get('a')} ack for {h.get('cid')}: {h.get('reason')} "
                        f"{h.get('detail', '')}".strip()
                    )
                found[str(h["cid"])] = h
            if parsed.error is not None:
                raise BenchProtocolError(f"malformed frame from the broker: {parsed.error}")

    await asyncio.wait_for(_read(), timeout)
    return found


async def close_quietly(ws: ClientConnection) -> None:
    """Close, ignoring a connection that is already gone."""
    # websockets raises several closed-connection errors; all mean "already closed"
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ws.close(), 5)
