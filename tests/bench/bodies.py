"""Deterministic JSON message bodies and pre-encoded publish frames.

Every body is a JSON object of exactly the requested size, built from a seeded
``random.Random`` so two runs (and Spool and its peers) send the same bytes. Body ``i`` of
a stream is ``pool[i % POOL]`` and carries ``"k": i % 10``, so the filter ``/k = 7``
matches exactly one message in ten, whatever the count.

Latency bodies start with the send time, ``{"ts":<monotonic ns>,...``, so a subscriber can
read it with one regular expression over a whole frame without parsing each message.
"""

from __future__ import annotations

import random
import re
import string
from typing import Final

import orjson

#: distinct bodies per stream; a multiple of 10 so ``k`` follows the message index.
POOL: Final = 1000

#: the minimal size a body can be padded to (the fixed fields take about 70 bytes).
MIN_BODY: Final = 96

#: finds the send-time stamps of latency bodies in a whole frame (``{"ts":`` never occurs
#: in a header: header ``ts`` values are strings).
STAMP_RE: Final = re.compile(rb'\{"ts":(\d+),')

_SYMBOLS: Final = ("AAPL", "MSFT", "IBM", "ORCL", "GOOG", "AMZN", "NVDA", "INTC", "CSCO", "SAP")


def make_body(index: int, size: int, rng: random.Random) -> bytes:
    """One JSON body of exactly ``size`` bytes.

    Raises:
        ValueError: ``size`` below :data:`MIN_BODY`.
    """
    if size < MIN_BODY:
        raise ValueError(f"body size {size} below the minimum {MIN_BODY}")
    fields = {
        "id": index,
        "k": index % 10,
        "sym": rng.choice(_SYMBOLS),
        "qty": rng.randint(1, 10_000),
        "px": round(rng.uniform(1, 1000), 2),
        "side": rng.choice(("buy", "sell")),
        "pad": "",
    }
    base = len(orjson.dumps(fields))
    alphabet = string.ascii_letters + string.digits
    fields["pad"] = "".join(rng.choice(alphabet) for _ in range(size - base))
    body = orjson.dumps(fields)
    assert len(body) == size
    return body


def body_pool(size: int, seed: int) -> list[bytes]:
    """The :data:`POOL` bodies of one size for one seed."""
    rng = random.Random(f"{seed}:{size}")
    return [make_body(i, size, rng) for i in range(POOL)]


def stamped_body(send_ns: int, index: int, size: int) -> bytes:
    """A latency body of exactly ``size`` bytes starting with the send time in ns."""
    head = b'{"ts":%d,"n":%d,"pad":"' % (send_ns, index)
    pad = size - len(head) - 2
    if pad < 0:
        raise ValueError(f"body size {size} too small for a stamped body")
    return head + b"x" * pad + b'"}'


class PublishEncoder:
    """Builds publish frames for one topic with pre-encoded header pieces.

    The header is ``{"c":"publish","t":TOPIC,"s":SEQ[,"a":"persisted"],"l":LEN}``:
    the publisher's sequence number is what persisted acks report back.
    """

    def __init__(self, topic: str, *, persisted: bool) -> None:
        ack = b',"a":"persisted"' if persisted else b""
        self._head = b'{"c":"publish","t":' + orjson.dumps(topic) + b',"s":'
        self._tail = ack + b',"l":'

    def message(self, seq: int, body: bytes) -> bytes:
        return b"%s%d%s%d}%s" % (self._head, seq, self._tail, len(body), body)

    def frame(self, first_seq: int, bodies: list[bytes], start: int, count: int) -> bytes:
        """``count`` messages with sequence numbers from ``first_seq``; body ``j`` is
        ``bodies[(start + j) % len(bodies)]``."""
        n = len(bodies)
        msg = self.message
        return b"".join(msg(first_seq + j, bodies[(start + j) % n]) for j in range(count))
