"""Frames from the broker as a client reads them: deliveries and the other messages.

A client receives mostly deliveries (``publish`` messages), thousands per frame during a
replay. :func:`split_deliveries` turns a frame into :class:`~spool.server.protocol.message.
Delivery` values for those (topic, body, subscription ids, bookmark, read straight from
the broker's header layout: no header dict per message, no JSON decode of the body) and
plain :class:`~spool.server.protocol.message.Message` values for everything else (acks,
heartbeats), which the client's session state interprets. Errors are those of
:func:`spool.server.protocol.frame.parse_frame`, at the same message.

:func:`split_deliveries_py` is the definition and the oracle; the compiled twin
(``_frame_c.split_deliveries``, :mod:`spool.server.speedups`) is selected at import.
"""

from __future__ import annotations

from collections.abc import Callable

from spool.server import speedups
from spool.server.protocol.frame import parse_frame_py
from spool.server.protocol.message import Delivery, FrameError, Message, delivery_of

__all__ = ["Split", "split_deliveries", "split_deliveries_py"]

#: what a split returns: the messages in order, then the error that ended the frame.
Split = tuple[list[Delivery | Message], FrameError | None]


def split_deliveries_py(data: bytes) -> Split:
    """The messages of a frame: a :class:`Delivery` per ``publish``, the others as they
    are; then :func:`~spool.server.protocol.frame.parse_frame`'s error, if any."""
    parsed = parse_frame_py(data)
    items: list[Delivery | Message] = [
        delivery_of(m.header, m.body) if m.header.get("c") == "publish" else m
        for m in parsed.messages
    ]
    return items, parsed.error


split_deliveries: Callable[[bytes], Split] = split_deliveries_py
if speedups.ENABLED:
    try:
        from spool.server.protocol._frame_c import split_deliveries as _split_c
    except ImportError:  # not built: speedups.status() says why
        pass
    else:
        split_deliveries = _split_c
