"""Per-message cost of the hot loops, in the implementation this interpreter selected.

Run: ``python -m tests.bench.bench_codecs [--quick]``; prints a JSON dict of metrics.
``SPOOL_NO_EXTENSIONS=1`` in the environment measures the pure-Python twins; the metric
``compiled`` says which ran (1 compiled, 0 pure Python).

Each metric is nanoseconds of this process's CPU time per message (``process_time``:
time spent waiting for a core on a busy machine is not counted), best of several
repetitions, over 100-byte bodies:

- ``parse_frame_ns``: split a frame of 100 publishes into messages (server inbound).
- ``take_publish_run_ns``: read the run of plain publishes off those messages.
- ``record_encode_ns``: encode a run of 100 journal records with their CRC.
- ``decode_batch_ns``: decode 1,000 journal records into a columnar batch (replay).
- ``wire_encode_run_ns``: encode 100 live deliveries of a run (fan-out).
- ``wire_encode_batch_ns``: encode 1,000 replayed deliveries of a batch (replay sink).
- ``client_receive_ns``: the Python client's session state turning a frame of 1,000
  deliveries into delivered messages.
- ``client_publish_ns``: the Python client queueing 100 publishes one by one
  (``publish``) and making the frame.
- ``client_publish_many_ns``: the same 100 publishes as one ``publish_many`` batch.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from spool.server import speedups
from spool.server.client.state import SessionState
from spool.server.protocol.commands import decode_command, take_publish_run
from spool.server.protocol.frame import parse_frame
from spool.server.txlog.format.batch import decode_batch
from spool.server.txlog.format.codec import encode_run as encode_records
from spool.server.wire import encode_batch, encode_run, sids_json, topic_json

BODY = b'{"order":123456,"sym":"ABCD","qty":100,"px":101.25,"side":"buy","acct":"XYZ-1"}'.ljust(
    100, b" "
)


def _best_ns(fn: Callable[[], object], per_call: int, repeat: int, number: int) -> float:
    """CPU nanoseconds per message: the best of ``repeat`` timings of ``number`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time_ns()
        for _ in range(number):
            fn()
        best = min(best, (time.process_time_ns() - t0) / number)
    return best / per_call


def run(quick: bool = False) -> dict[str, float]:
    repeat, number = (3, 20) if quick else (7, 100)
    frame = b"".join(
        b'{"c":"publish","t":"orders","s":%d,"a":"persisted","l":%d}%s' % (i + 1, len(BODY), BODY)
        for i in range(100)
    )
    msgs = parse_frame(frame).messages
    decode_command(msgs[0])  # validates the ack string once, as the broker does per client
    seqs = list(range(1, 101))
    bodies = [BODY] * 100
    records = b"".join(
        encode_records(1, 1_700_000_000_000_000, 42, list(range(1, 1001)), "orders", "json",
                       [BODY] * 1000)
    )  # fmt: skip
    batch, _ = decode_batch(records, 0, len(records), 1)
    tj = topic_json("orders")
    sj = sids_json(["s1"])
    delivery_frame = encode_batch(batch, range(len(batch)), sj, topic_literal=tj)
    state: SessionState[object] = SessionState("bench")
    state.add_subscription("s1", object())

    def publish_100() -> None:
        for _ in range(100):
            state.publish("orders", BODY, persisted=True)
        state.data_to_send()

    def publish_many_100() -> None:
        state.publish_many("orders", bodies, persisted=True)
        state.data_to_send()

    out = {
        "compiled": 1.0 if speedups.status()["implementation"] == "compiled" else 0.0,
        "parse_frame_ns": _best_ns(lambda: parse_frame(frame), 100, repeat, number),
        "take_publish_run_ns": _best_ns(lambda: take_publish_run(msgs, 0), 100, repeat, number),
        "record_encode_ns": _best_ns(
            lambda: encode_records(1, 1_700_000_000_000_000, 42, seqs, "orders", "json", bodies),
            100,
            repeat,
            number,
        ),
        "decode_batch_ns": _best_ns(
            lambda: decode_batch(records, 0, len(records), 1), 1000, repeat, max(1, number // 10)
        ),
        "wire_encode_run_ns": _best_ns(
            lambda: encode_run(tj, sj, bodies, range(100), pub_hash=42, pub_seqs=seqs),
            100,
            repeat,
            number,
        ),
        "wire_encode_batch_ns": _best_ns(
            lambda: encode_batch(batch, range(len(batch)), sj, topic_literal=tj),
            1000,
            repeat,
            max(1, number // 10),
        ),
        "client_receive_ns": _best_ns(
            lambda: state.receive_frame(delivery_frame), 1000, repeat, max(1, number // 10)
        ),
        "client_publish_ns": _best_ns(publish_100, 100, repeat, number),
        "client_publish_many_ns": _best_ns(publish_many_100, 100, repeat, number),
    }
    return out


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))
