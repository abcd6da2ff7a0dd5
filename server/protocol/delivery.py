"""Frames from the broker as a client reads them: deliveries and the other messages.

A client receives mostly deliveries (``publish`` messages), thousands per frame during a
replay. :func:`split_deliveries` turns a frame into :class:`~server.protocol.message.
Delivery` values for those (topic, body, subscription ids, bookmark, read straight from
the broker's header layout: no header dict per message, no JSON decode of the body) and
plain :class:`~server.protocol.message.Message` values for everything else (acks,
heartbeats), which the client's session state interprets. Errors are those of
:func:`server.protocol.frame.parse_frame`, at the same message.

:func:`split_deliveries_py` is the definition and the oracle; the compiled twin
(``_frame_c.split_deliveries``, :mod:`server.speedups`) is selected at import.
"""

from __future__ import annotations

from collections.abc import Callable

from server import speedups
from server.protocol.frame import parse_frame_py
from server.protocol.message import Delivery, FrameError, Message, delivery_of

__all__ = ["Split", "split_deliveries", "split_deliveries_py"]

#: what a split returns: the messages in order, then the error that ended the frame.
Split = tuple[list[Delivery | Message], FrameError | None]


def split_deliveries_py(data: bytes) -> Split:
    """The messages of a frame: a :class:`Delivery` per ``publish``, the others as they
    are; then :func:`~server.protocol.frame.parse_frame`'s error, if any."""
    parsed = parse_frame_py(data)
    items: list[Delivery | Message] = [
        delivery_of(m.header, m.body) if m.header.get("c") == "publish" else m
        for m in parsed.messages
    ]
    return items, parsed.error


split_deliveries: Callable[[bytes], Split] = split_deliveries_py
if speedups.ENABLED:
    try:
        from server.protocol._frame_c import split_deliveries as _split_c
    except ImportError:  # not built: speedups.status() says why
        pass
    else:
        split_deliveries = _split_c
