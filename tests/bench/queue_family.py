"""The queue scenario (issue 17): publish + consume + ack through one queue with four
consumers.

One broker has the queue ``bench-q`` over the recorded topic ``bench/q/in``
(``MaxPerSubscriptionBacklog`` 1000, 60 s leases). A publisher sends the run's messages
100 per frame (tests/bench/workers.py ``publish_burst``); one worker process holds four
consumer connections, each subscribed with ``max_backlog=500``, and acks every frame it
receives with one ``sow_delete`` carrying the bookmarks of that frame's deliveries. The
clock runs from the first publish to the moment the consumers together received every
message; a ``flush`` on each consumer connection then proves every ack was processed, and
the queue must be empty (checked over REST) before the next run. Workers are lean like the
others (tests/bench/wire.py): bookmarks are read with a regex over whole frames.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Sequence
from typing import Any, Final

import httpx

from tests.bench.catalog import ScenarioSpec
from tests.bench.processes import Gate, Task, run_tasks
from tests.bench.spool_families import _pid, _rss_mib, _seconds, _with_broker
from tests.bench.suite import Suite
from tests.bench.wire import close_quietly, command, open_session, subscribe_command, wait_acks
from tests.bench.workers import publish_burst
from tests.support.server import SpoolProcess

QUEUE: Final = "bench-q"
UNDERLYING: Final = "bench/q/in"
QUEUE_RULE: Final = (
    f"<Queue><Name>{QUEUE}</Name><MessageType>json</MessageType>"
    f"<UnderlyingTopic>{UNDERLYING}</UnderlyingTopic><LeasePeriod>60s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>1000</MaxPerSubscriptionBacklog></Queue>"
)
_BOOKMARK: Final = re.compile(rb'"bm":"([^"]+)"')
_DELIVERY: Final = b'{"c":"publish"'


async def queue_consumers(
    gate: Gate,
    *,
    url: str,
    name: str,
    connections: int,
    backlog: int,
    expected: int,
    timeout: float,
) -> dict[str, Any]:
    """``connections`` consumers of the bench queue; each frame's deliveries are acked at
    once with one ``sow_delete``. Ends when they received ``expected`` together."""
    sockets = [(await open_session(url, f"{name}-{i}", timeout=timeout))[0]
               for i in range(connections)]  # fmt: skip
    per: list[int] = [0] * connections
    total = 0
    last = 0
    done = asyncio.Event()
    try:
        for i, ws in enumerate(sockets):
            await ws.send(subscribe_command(QUEUE, f"q{i}", options=f"max_backlog={backlog}"))
            await wait_acks(ws, {f"q{i}"}, timeout)
        await gate.aopen()

        async def consume(i: int) -> None:
            nonlocal total, last
            ws = sockets[i]
            head = b'{"c":"sow_delete","t":"' + QUEUE.encode() + b'","bm":"'
            while not done.is_set():
                frame = await ws.recv(decode=False)
                n = frame.count(_DELIVERY)
                if not n:
                    continue
                bms = _BOOKMARK.findall(frame)
                await ws.send(head + b",".join(bms) + b'","l":0}')
                per[i] += n
                total += n
                if total >= expected:
                    last = time.monotonic_ns()
                    done.set()

        tasks = [asyncio.ensure_future(consume(i)) for i in range(connections)]
        await asyncio.wait_for(done.wait(), timeout)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for i, ws in enumerate(sockets):  # every ack processed
            await ws.send(command({"c": "flush", "cid": f"f{i}", "a": "processed"}))
            await wait_acks(ws, {f"f{i}"}, timeout)
    finally:
        for ws in sockets:
            await close_quietly(ws)
    return {"last_ns": last, "count": total, "per_consumer": per}


def _queue_once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    count = s.publish_count
    consumers = int(spec.params["consumers"])
    cons, pub = run_tasks(
        [
            Task(
                queue_consumers,
                {
                    "url": broker.ws_url, "name": f"qc-{rid}", "connections": consumers,
                    "backlog": int(spec.params["max_backlog"]), "expected": count,
                    "timeout": s.worker_timeout,
                },
            ),
            Task(
                publish_burst,
                {
                    "url": broker.ws_url, "name": f"qp-{rid}", "topic": UNDERLYING,
                    "count": count, "body_bytes": spec.params["body_bytes"], "seed": s.seed,
                    "persisted": False, "window": s.window, "per_frame": s.per_frame,
                    "timeout": s.worker_timeout,
                },
            ),
        ],
        timeout=s.worker_timeout,
    )  # fmt: skip
    if cons["count"] != count:
        raise RuntimeError(f"the consumers received {cons['count']} messages, expected {count}")
    depth = httpx.get(f"{broker.http_url}/api/queues/{QUEUE}", timeout=10).json()["depth"]
    if depth:
        raise RuntimeError(f"{depth} messages left in the queue after every ack was processed")
    secs = _seconds(pub["start_ns"], cons["last_ns"])
    shares = cons["per_consumer"]
    return {
        "msgs_per_s": count / secs,
        "publish_msgs_per_s": count / _seconds(pub["start_ns"], pub["end_ns"]),
        "elapsed_s": secs,
        "min_share": min(shares) / count,
        "max_share": max(shares) / count,
        "broker_rss_mib": _rss_mib(broker),
    }


def run_queue(suite: Suite, chosen: Sequence[ScenarioSpec]) -> None:
    """The queue family: one broker with the bench queue."""
    s = suite.settings

    def body(broker: SpoolProcess) -> None:
        pid = functools.partial(_pid, broker)
        for spec in chosen:
            suite.measure(
                spec,
                functools.partial(_queue_once, suite, broker, spec),
                params={"count": s.publish_count, "per_frame": s.per_frame},
                profile_pid=pid,
            )

    _with_broker(suite, "queue", chosen, body, sow=QUEUE_RULE)
