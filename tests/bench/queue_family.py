"""The queue scenario: publish + consume + ack through one queue with four
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

The replicated variant (``spool.queue.replicated.4consumers.100B``): two instances
replicating to each other (sync, passing everything through) with the same ``Queue``; a
publisher on each (half the messages each), two consumer connections on each. Each
instance owns what was published on it and serves its own consumers first; a consumer
with room gets the other instance's messages by transfer requests once they waited
longer than the typical publish-to-ack time (docs/queues.md "Replicated queues"). The run ends when the four together
received every message exactly once (more is an error: a message delivered twice), and
both copies of the queue must be empty.

The restart with a queue (``spool.restart.queue.100B``): one broker with the bench queue
through which the replay count of messages (1,000,000; 100,000 in quick mode) went,
published and acked as in the queue run, plus 10 left in the queue. Each run restarts it
three ways, to the first logon ack: after SIGTERM (``stop_restart_s``: recovery starts at
the queue's checkpoint, written at shutdown), after SIGTERM with the checkpoint file
removed (``full_replay_restart_s``: recovery reads the whole retained log, as it did
before checkpoints), and after SIGKILL once the periodic checkpoint is on disk
(``kill_restart_s``). After each the queue must hold exactly its 10 messages.
``*_startup_s``: the broker's own start-up of each (its event log, ``starting`` to
``started``), without the interpreter's start that a loaded machine stretches.

The bounded variant (``spool.queue.bounded.4consumers.100B``): the same single-instance
run with ``TargetQueueDepth`` 4,000: what refilling the window from the log costs. And
the replicated one with the same target on both instances
(``spool.queue.replicated.bounded.4consumers.100B``): each window counts the messages its
instance can deliver, ownership changes of inactive messages wait for their activation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import httpx
import orjson
import psutil

from tests.bench.catalog import ScenarioSpec
from tests.bench.processes import Gate, Task, run_tasks
from tests.bench.spool_families import _pid, _rss_mib, _seconds, _with_broker
from tests.bench.suite import BENCH_TUNING, Suite
from tests.bench.wire import close_quietly, command, open_session, subscribe_command, wait_acks
from tests.bench.workers import logon_once, publish_burst
from tests.support.replication import destination, free_ports, replication_xml
from tests.support.server import SpoolProcess

QUEUE: Final = "bench-q"
UNDERLYING: Final = "bench/q/in"
QUEUE_RULE: Final = (
    f"<Queue><Name>{QUEUE}</Name><MessageType>json</MessageType>"
    f"<UnderlyingTopic>{UNDERLYING}</UnderlyingTopic><LeasePeriod>60s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>1000</MaxPerSubscriptionBacklog></Queue>"
)
#: the bounded variant: at most 4,000 messages active (four consumers of 500 fill half of
#: it), the rest read back from the log as acks make room (docs/queues.md "TargetQueueDepth")
BOUNDED_TARGET: Final = 4000
QUEUE_RULE_BOUNDED: Final = QUEUE_RULE.replace(
    "</Queue>", f"<TargetQueueDepth>{BOUNDED_TARGET}</TargetQueueDepth></Queue>"
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
    urls: Sequence[str] = (),
) -> dict[str, Any]:
    """``connections`` consumers of the bench queue (connection ``i`` to
    ``urls[i % len(urls)]`` when given, else all to ``url``); each frame's deliveries are
    acked at once with one ``sow_delete``. Ends when they received ``expected``
    together."""
    where = list(urls) or [url]
    sockets = [(await open_session(where[i % len(where)], f"{name}-{i}", timeout=timeout))[0]
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


def _queue_once(
    suite: Suite, broker: SpoolProcess, spec: ScenarioSpec, others: Sequence[SpoolProcess] = ()
) -> dict[str, float]:
    """One run; ``others``: more instances of a replicated queue (consumers spread over
    all, the publisher on ``broker``)."""
    s = suite.settings
    rid = suite.next_id()
    count = s.publish_count
    consumers = int(spec.params["consumers"])
    brokers = [broker, *others]
    # one publisher per instance, the messages split between them (each instance owns
    # what was published on it and serves its own consumers first)
    shares = [count // len(brokers) + (i < count % len(brokers)) for i in range(len(brokers))]
    cpu0 = [_cpu_seconds(b) for b in brokers]
    cons, *pubs = run_tasks(
        [
            Task(
                queue_consumers,
                {
                    "url": broker.ws_url, "name": f"qc-{rid}", "connections": consumers,
                    "backlog": int(spec.params["max_backlog"]), "expected": count,
                    "timeout": s.worker_timeout, "urls": [b.ws_url for b in brokers],
                },
            ),
            *(
                Task(
                    publish_burst,
                    {
                        "url": b.ws_url, "name": f"qp-{rid}-{i}", "topic": UNDERLYING,
                        "count": shares[i], "body_bytes": spec.params["body_bytes"],
                        "seed": s.seed + i, "persisted": False, "window": s.window,
                        "per_frame": s.per_frame, "timeout": s.worker_timeout,
                    },
                )
                for i, b in enumerate(brokers)
            ),
        ],
        timeout=s.worker_timeout,
    )  # fmt: skip
    pub = {"start_ns": min(p["start_ns"] for p in pubs), "end_ns": max(p["end_ns"] for p in pubs)}
    if cons["count"] != count:
        raise RuntimeError(f"the consumers received {cons['count']} messages, expected {count}")
    for b in brokers:
        depth = _depth(b)
        if depth and b is not broker:  # a copy converges once the acks have crossed
            deadline = time.monotonic() + 30
            while depth and time.monotonic() < deadline:
                time.sleep(0.05)
                depth = _depth(b)
        if depth:
            raise RuntimeError(
                f"{depth} messages left in the queue on {b.ws_url} after every ack was processed"
            )
    secs = _seconds(pub["start_ns"], cons["last_ns"])
    cpu_us = [(_cpu_seconds(b) - c) / count * 1e6 for b, c in zip(brokers, cpu0, strict=True)]
    shares = cons["per_consumer"]
    return {
        "msgs_per_s": count / secs,
        "publish_msgs_per_s": count / _seconds(pub["start_ns"], pub["end_ns"]),
        "elapsed_s": secs,
        "min_share": min(shares) / count,
        "max_share": max(shares) / count,
        "broker_rss_mib": _rss_mib(broker),
        # CPU of the instances (all threads, user + system) per message of the run: on
        # the shared machine a steadier measure of a change than the rate
        "broker_cpu_us_per_msg": sum(cpu_us),
    }


def _cpu_seconds(broker: SpoolProcess) -> float:
    times = psutil.Process(_pid(broker)).cpu_times()
    return float(times.user + times.system)


def _depth(broker: SpoolProcess) -> int:
    depth: int = httpx.get(f"{broker.http_url}/api/queues/{QUEUE}", timeout=10).json()["depth"]
    return depth


@contextlib.contextmanager
def _replicated_pair(
    suite: Suite, rule: str = QUEUE_RULE
) -> Iterator[tuple[SpoolProcess, SpoolProcess]]:
    """Two instances replicating to each other (sync) with the bench queue."""
    port_a, port_b = free_ports(2)
    root = suite.workdir / "spool-queue-replicated"
    procs = []
    for name, port, other, other_port in (("qa", port_a, "qb", port_b),
                                          ("qb", port_b, "qa", port_a)):  # fmt: skip
        xml = replication_xml(
            root / name / "data", name, port=port, admin_interval="10s", tuning=BENCH_TUNING,
            sow=rule,
            destinations=[destination(other, [("127.0.0.1", other_port)], passthrough=(".*",))],
        )  # fmt: skip
        procs.append(SpoolProcess(root / name, xml))
    a, b = procs
    with contextlib.ExitStack() as stack:
        for proc in procs:
            proc.start(timeout=120)
            stack.callback(proc.stop)
        for proc, other in ((a, "qb"), (b, "qa")):
            deadline = time.monotonic() + 60
            while not _connected(proc, other):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the link to {other} did not connect")
                time.sleep(0.05)
        yield a, b


def _connected(proc: SpoolProcess, dest: str) -> bool:
    info = httpx.get(f"{proc.http_url}/api/replication", timeout=10).json()
    return any(d["name"] == dest and d["connected"] for d in info["destinations"])


def run_queue_replicated_bounded(suite: Suite, chosen: Sequence[ScenarioSpec]) -> None:
    """The replicated queue family with a TargetQueueDepth on both instances."""
    run_queue_replicated(suite, chosen, QUEUE_RULE_BOUNDED)


def run_queue_replicated(
    suite: Suite, chosen: Sequence[ScenarioSpec], rule: str = QUEUE_RULE
) -> None:
    """The replicated queue family: two instances, consumers on both."""
    s = suite.settings
    try:
        pair = _replicated_pair(suite, rule)
        a, b = pair.__enter__()
    except Exception as exc:
        suite.record_all(chosen, "error", f"the instances did not start: {exc}"[-300:], {})
        return
    try:
        for spec in chosen:
            suite.measure(
                spec,
                functools.partial(_queue_once, suite, a, spec, [b]),
                params={"count": s.publish_count, "per_frame": s.per_frame, "instances": 2},
                profile_pid=functools.partial(_pid, a),
            )
    finally:
        pair.__exit__(None, None, None)


def run_queue_bounded(suite: Suite, chosen: Sequence[ScenarioSpec]) -> None:
    """The bounded queue family: one broker, the bench queue with a TargetQueueDepth."""
    run_queue(suite, chosen, QUEUE_RULE_BOUNDED)


def run_queue(suite: Suite, chosen: Sequence[ScenarioSpec], rule: str = QUEUE_RULE) -> None:
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

    _with_broker(suite, "queue", chosen, body, sow=rule)


#: the messages left in the queue for the restart scenario (recovery must bring them back)
RESTART_LEFT: Final = 10


def _fill_and_drain(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> None:
    """The restart scenario's log: the replay count of messages through the queue (each
    published, delivered and acked), then :data:`RESTART_LEFT` left in it."""
    s = suite.settings
    rid = suite.next_id()
    count = s.replay_count
    cons, _ = run_tasks(
        [
            Task(queue_consumers, {
                "url": broker.ws_url, "name": f"qr-{rid}", "connections": 4, "backlog": 500,
                "expected": count, "timeout": s.worker_timeout * 4, "urls": [broker.ws_url],
            }),
            Task(publish_burst, {
                "url": broker.ws_url, "name": f"qr-pub-{rid}", "topic": UNDERLYING,
                "count": count, "body_bytes": spec.params["body_bytes"], "seed": s.seed,
                "persisted": False, "window": s.window, "per_frame": s.per_frame,
                "timeout": s.worker_timeout * 4,
            }),
        ],
        timeout=s.worker_timeout * 4,
    )  # fmt: skip
    if cons["count"] != count or _depth(broker):
        raise RuntimeError(f"filling the queue: {cons['count']} of {count} consumed")
    (left,) = run_tasks(
        [Task(publish_burst, {
            "url": broker.ws_url, "name": f"qr-left-{rid}", "topic": UNDERLYING,
            "count": RESTART_LEFT, "body_bytes": spec.params["body_bytes"], "seed": s.seed,
            "persisted": True, "window": s.window, "per_frame": s.per_frame,
            "timeout": s.worker_timeout,
        })],
        timeout=s.worker_timeout,
    )  # fmt: skip
    del left


def _checkpoint_file(broker: SpoolProcess) -> Path | None:
    return next(iter(broker.workdir.rglob("*.queues.ack")), None)


def _startup_s(broker: SpoolProcess) -> float:
    """The broker's own start-up, from its event log: ``starting`` (the process is up,
    the configuration read) to ``started`` (serving) of the last start. Apart from the
    interpreter's start, which a loaded machine stretches and the change does not touch."""
    path = next(broker.workdir.rglob("*.events.log"))
    starting = started = None
    for line in path.read_text().splitlines():
        event = orjson.loads(line)
        if event.get("event") == "starting":
            starting, started = event["time"], None
        elif event.get("event") == "started":
            started = event["time"]
    if starting is None or started is None:
        raise RuntimeError("no starting/started pair in the event log")
    return (datetime.fromisoformat(started) - datetime.fromisoformat(starting)).total_seconds()


def _restart_with_queue_once(suite: Suite, broker: SpoolProcess) -> dict[str, float]:
    timeout = suite.settings.worker_timeout * 4
    rid = suite.next_id()

    def started(tag: str) -> tuple[float, float]:
        t = time.monotonic()
        broker.start(timeout=timeout)
        asyncio.run(logon_once(broker.ws_url, f"qrestart-{rid}-{tag}", timeout))
        took = time.monotonic() - t
        if _depth(broker) != RESTART_LEFT:
            raise RuntimeError(f"after the restart ({tag}) the queue holds {_depth(broker)}")
        return took, _startup_s(broker)

    broker.stop()
    stop_s, stop_startup = started("stop")
    broker.stop()
    path = _checkpoint_file(broker)
    if path is None:
        raise RuntimeError("no queue checkpoint after a graceful stop")
    path.unlink()
    full_s, full_startup = started("full")
    # the periodic checkpoint (a full replay leaves none until the first pass)
    deadline = time.monotonic() + 60
    while _checkpoint_file(broker) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    broker.kill()
    kill_s, kill_startup = started("kill")
    return {
        "stop_restart_s": stop_s, "full_replay_restart_s": full_s, "kill_restart_s": kill_s,
        "stop_startup_s": stop_startup, "full_replay_startup_s": full_startup,
        "kill_startup_s": kill_startup, "checkpoint_speedup": full_startup / stop_startup,
    }  # fmt: skip


def run_queue_restart(suite: Suite, chosen: Sequence[ScenarioSpec]) -> None:
    """The restart-with-a-queue family: one broker, the bench queue, a long log."""
    s = suite.settings

    def body(broker: SpoolProcess) -> None:
        for spec in chosen:
            suite.log(f"  {s.replay_count:,} messages through the queue (published, acked)")
            try:
                _fill_and_drain(suite, broker, spec)
            except Exception as exc:
                suite.record_all([spec], "error", f"filling the queue failed: {exc}")
                continue
            suite.measure(
                spec,
                functools.partial(_restart_with_queue_once, suite, broker),
                params={"log_messages": s.replay_count, "left_in_queue": RESTART_LEFT},
            )

    _with_broker(suite, "queue-restart", chosen, body, sow=QUEUE_RULE)
