"""The SOW scenarios: updates into a SOW topic of 100,000 keys, a full query
of 100,000 records, and the snapshot of a ``sow_and_subscribe`` of 100,000 records.

One broker keeps every ``bench/sow/...`` topic in a persistent SOW keyed by ``/id`` and
records them in the transaction log (the journal is on). The update scenario publishes
to a fresh topic per run, so each run fills a store from empty to 100,000 keys and then
updates them; the query scenarios read one topic filled once. Workers are lean like the
others (tests/bench/wire.py): records are counted with ``bytes.count`` over whole frames.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from typing import Any, Final

from tests.bench.catalog import ScenarioSpec
from tests.bench.processes import Gate, Task, run_tasks
from tests.bench.spool_families import _pid, _rss_mib, _seconds, _with_broker
from tests.bench.suite import Suite, reason_of
from tests.bench.wire import close_quietly, command, open_session, wait_acks
from tests.support.server import SpoolProcess

#: the SOW rule of the bench broker: every topic under bench/sow/, keyed by /id
SOW_RULE: Final = (
    "<Topic><Name>^bench/sow/</Name><MessageType>json</MessageType><Key>/id</Key>"
    "<Durability>persistent</Durability></Topic>"
)
KEYS: Final = 100_000
QUERY_TOPIC: Final = "bench/sow/query"
SOW_MARK: Final = b'{"c":"sow"'
END_MARK: Final = b'{"c":"group_end"'


def _body(key: int, size: int) -> bytes:
    head = b'{"id":%d,"v":"' % key
    pad = max(0, size - len(head) - 2)
    return head + b"x" * pad + b'"}'


async def sow_updates(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    count: int,
    keys: int,
    body_bytes: int,
    per_frame: int,
    timeout: float,
) -> dict[str, Any]:
    """Publish ``count`` updates to ``keys`` keys in turn; ends at a flush ack."""
    ws, _ = await open_session(url, name, timeout=timeout)
    head = b'{"c":"publish","t":"' + topic.encode() + b'","l":%d}'
    bodies = [_body(k, body_bytes) for k in range(min(keys, count))]
    try:
        await gate.aopen()
        start = time.monotonic_ns()
        sent = 0
        while sent < count:
            n = min(per_frame, count - sent)
            frame = b"".join(
                head % len(b) + b for b in (bodies[(sent + i) % keys] for i in range(n))
            )
            await ws.send(frame)
            sent += n
        await ws.send(command({"c": "flush", "cid": "flush", "a": "processed"}))
        await wait_acks(ws, {"flush"}, timeout)
        end = time.monotonic_ns()
    finally:
        await close_quietly(ws)
    return {"start_ns": start, "end_ns": end, "count": count}


async def sow_reader(
    gate: Gate,
    *,
    url: str,
    name: str,
    topic: str,
    expected: int,
    bs: int,
    subscribe: bool,
    timeout: float,
) -> dict[str, Any]:
    """A ``sow`` (or ``sow_and_subscribe``) after go; counts records until ``group_end``."""
    ws, _ = await open_session(url, name, timeout=timeout)
    header: dict[str, Any] = {"t": topic, "cid": "q", "bs": bs, "qid": "q"}
    if subscribe:
        header.update(c="sow_and_subscribe", sub_id="s")
    else:
        header["c"] = "sow"
    try:
        await gate.aopen()
        start = time.monotonic_ns()
        await ws.send(command(header))
        count = 0
        first = 0

        async def read() -> None:
            nonlocal count, first
            while True:
                frame = await ws.recv(decode=False)
                n = frame.count(SOW_MARK)
                if n and not count:
                    first = time.monotonic_ns()
                count += n
                if END_MARK in frame:
                    return
                if b'"status":"failure"' in frame:
                    raise RuntimeError(f"the query failed: {frame[:300]!r}")

        await asyncio.wait_for(read(), timeout)
        end = time.monotonic_ns()
    finally:
        await close_quietly(ws)
    if count != expected:
        raise RuntimeError(f"the query gave {count} records, expected {expected}")
    return {"start_ns": start, "first_ns": first, "end_ns": end, "count": count}


def _update_once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    count = s.publish_count
    (res,) = run_tasks(
        [
            Task(
                sow_updates,
                {
                    "url": broker.ws_url,
                    "name": f"sowpub-{rid}",
                    "topic": f"bench/sow/u{rid}",
                    "count": count,
                    "keys": int(spec.params["keys"]),
                    "body_bytes": spec.params["body_bytes"],
                    "per_frame": s.per_frame,
                    "timeout": s.worker_timeout,
                },
            )
        ],
        timeout=s.worker_timeout,
    )
    secs = _seconds(res["start_ns"], res["end_ns"])
    return {"updates_per_s": count / secs, "elapsed_s": secs, "broker_rss_mib": _rss_mib(broker)}


def _read_once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    subscribe = ".snapshot." in spec.name
    (res,) = run_tasks(
        [
            Task(
                sow_reader,
                {
                    "url": broker.ws_url,
                    "name": f"sowq-{rid}",
                    "topic": QUERY_TOPIC,
                    "expected": int(spec.params["records"]),
                    "bs": int(spec.params["bs"]),
                    "subscribe": subscribe,
                    "timeout": s.worker_timeout,
                },
            )
        ],
        timeout=s.worker_timeout,
    )
    secs = _seconds(res["start_ns"], res["end_ns"])
    out = {
        "records_per_s": res["count"] / secs,
        "first_record_ms": (res["first_ns"] - res["start_ns"]) / 1e6,
        "elapsed_s": secs,
        "broker_rss_mib": _rss_mib(broker),
    }
    if subscribe:
        out["snapshot_s"] = secs
    return out


def run_sow(suite: Suite, chosen: Sequence[ScenarioSpec]) -> None:
    """The SOW family: one broker with the bench SOW rule."""
    s = suite.settings

    def body(broker: SpoolProcess) -> None:
        pid = functools.partial(_pid, broker)
        readers = [sp for sp in chosen if ".update." not in sp.name]
        for spec in chosen:
            if spec not in readers:
                suite.measure(
                    spec,
                    functools.partial(_update_once, suite, broker, spec),
                    params={"count": s.publish_count, "per_frame": s.per_frame},
                    profile_pid=pid,
                )
        if not readers:
            return
        suite.log(f"  filling {QUERY_TOPIC} with {KEYS:,} records")
        try:
            run_tasks(
                [
                    Task(
                        sow_updates,
                        {
                            "url": broker.ws_url,
                            "name": "sow-filler",
                            "topic": QUERY_TOPIC,
                            "count": KEYS,
                            "keys": KEYS,
                            "body_bytes": 100,
                            "per_frame": s.per_frame,
                            "timeout": s.worker_timeout,
                        },
                    )
                ],
                timeout=s.worker_timeout,
            )
        except Exception as exc:
            suite.record_all(readers, "error", f"filling the SOW failed: {reason_of(exc)}")
            return
        for spec in readers:
            suite.measure(
                spec,
                functools.partial(_read_once, suite, broker, spec),
                params={"records": KEYS, "bs": spec.params["bs"]},
                profile_pid=pid,
            )

    _with_broker(suite, "sow", chosen, body, sow=SOW_RULE)
