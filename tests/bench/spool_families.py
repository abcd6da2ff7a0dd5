"""The Spool scenario families: publish, fan-out, burst, latency, replay + restart, memory.

Each family starts one broker process (``spool serve`` through tests/support/server.py,
with its own data directory), measures its selected scenarios against it, and stops it.
Workers run in their own processes (processes.py); every run uses fresh topic and client
names so runs never see each other's messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import psutil

from tests.bench.browser_replay import browser_replay
from tests.bench.catalog import ScenarioSpec
from tests.bench.client_workers import client_publish, client_replay
from tests.bench.processes import Task, run_tasks
from tests.bench.suite import BURST_TRANSPORT, BURST_TUNING, Suite, reason_of
from tests.bench.workers import (
    hold_connections,
    hold_subscriptions,
    late_subscriber,
    latency_subscriber,
    live_subscribers,
    logon_once,
    paced_publisher,
    publish_burst,
    replay_subscriber,
)
from tests.support.server import SpoolProcess

_LATENCY_KEYS = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "mean_ms", "samples")


def _seconds(start_ns: int, end_ns: int) -> float:
    secs = (end_ns - start_ns) / 1e9
    if secs <= 0:
        raise RuntimeError(f"non-positive elapsed time {secs}")
    return secs


def _with_broker(
    suite: Suite,
    label: str,
    specs: Sequence[ScenarioSpec],
    body: Callable[[SpoolProcess], None],
    sow: str = "",
    **broker_kw: str,
) -> None:
    """Run ``body`` with a broker; if it does not start, every spec is an error."""
    with contextlib.ExitStack() as stack:
        try:
            broker = stack.enter_context(suite.spool_broker(label, sow=sow, **broker_kw))
        except Exception as exc:
            suite.record_all(
                specs,
                "error",
                f"broker did not start: {str(exc)[-300:]}",
                {"log": str(exc)[-4000:]},
            )
            return
        body(broker)


# -- publish -----------------------------------------------------------------------------


def _publish_once(
    suite: Suite,
    broker: SpoolProcess,
    spec: ScenarioSpec,
    cafile: str | None = None,
    topic: str = "bench/pub",
) -> dict[str, float]:
    """One persisted (or unacked) burst of the publish family to a fresh topic under
    ``topic``: its rate, bytes, time and the broker's memory after it."""
    s = suite.settings
    rid = suite.next_id()
    persisted = spec.params["ack"] == "persisted"
    (res,) = run_tasks(
        [
            Task(
                publish_burst,
                {
                    "url": broker.ws_url,
                    "name": f"pub-{rid}",
                    "topic": f"{topic}/{rid}",
                    "count": s.publish_count,
                    "body_bytes": spec.params["body_bytes"],
                    "seed": s.seed,
                    "persisted": persisted,
                    "window": s.window,
                    "per_frame": s.per_frame,
                    "timeout": s.worker_timeout,
                    "cafile": cafile,
                },
            )
        ],
        timeout=s.worker_timeout,
    )
    secs = _seconds(res["start_ns"], res["end_ns"])
    return {
        "msgs_per_s": res["count"] / secs,
        "mb_per_s": res["bytes"] / secs / 1e6,
        "elapsed_s": secs,
        "broker_rss_mib": _rss_mib(broker),
    }


def _client_publish_once(
    suite: Suite, broker: SpoolProcess, spec: ScenarioSpec
) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    (res,) = run_tasks(
        [
            Task(
                client_publish,
                {
                    "url": broker.ws_url,
                    "name": f"cpub-{rid}",
                    "topic": f"bench/cpub/{rid}",
                    "count": s.publish_count,
                    "body_bytes": spec.params["body_bytes"],
                    "seed": s.seed,
                    "window": s.window,
                    "per_batch": s.per_frame,
                    "timeout": s.worker_timeout,
                },
            )
        ],
        timeout=s.worker_timeout,
    )
    secs = _seconds(res["start_ns"], res["end_ns"])
    return {"msgs_per_s": res["count"] / secs, "elapsed_s": secs}


def _achieved_rate(res: dict[str, Any]) -> float:
    sent = int(res["sent"])
    span = (res["last_send_ns"] - res["start_ns"]) / 1e9
    return (sent - 1) / span if sent > 1 and span > 0 else 0.0


def _persisted_latency_once(
    suite: Suite, broker: SpoolProcess, spec: ScenarioSpec
) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    (res,) = run_tasks(
        [
            Task(
                paced_publisher,
                {
                    "url": broker.ws_url,
                    "name": f"plat-{rid}",
                    "topic": f"bench/plat/{rid}",
                    "rate": spec.params["rate_per_s"],
                    "seconds": s.latency_seconds,
                    "body_bytes": spec.params["body_bytes"],
                    "persisted": True,
                    "timeout": s.worker_timeout,
                },
            )
        ],
        timeout=s.worker_timeout,
    )
    out = {k: float(res[k]) for k in _LATENCY_KEYS}
    out["achieved_msgs_per_s"] = _achieved_rate(res)
    return out


def run_publish(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings

    def body(broker: SpoolProcess) -> None:
        pid = functools.partial(_pid, broker)
        for spec in specs:
            if spec.name.startswith("client."):
                suite.measure(
                    spec,
                    functools.partial(_client_publish_once, suite, broker, spec),
                    params={
                        "count": s.publish_count,
                        "per_batch": s.per_frame,
                        "window": s.window,
                        "flush_interval": "1ms",
                    },
                    profile_pid=pid,
                )
            elif "rate_per_s" in spec.params:
                suite.measure(
                    spec,
                    functools.partial(_persisted_latency_once, suite, broker, spec),
                    params={"seconds": s.latency_seconds, "flush_interval": "1ms"},
                    profile_pid=pid,
                )
            else:
                suite.measure(
                    spec,
                    functools.partial(_publish_once, suite, broker, spec),
                    params={
                        "count": s.publish_count,
                        "per_frame": s.per_frame,
                        "window": s.window,
                        "flush_interval": "1ms",
                    },
                    profile_pid=pid,
                )

    _with_broker(suite, "publish", specs, body)


def _rss_mib(broker: SpoolProcess) -> float:
    """The broker's resident memory after a run (growth across runs shows retention)."""
    return float(psutil.Process(_pid(broker)).memory_info().rss) / 2**20


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _pid(broker: SpoolProcess) -> int:
    assert broker.proc is not None
    return broker.proc.pid


# -- fan-out -----------------------------------------------------------------------------


def _fanout_once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    subs = int(spec.params["subscribers"])
    count = s.fanout_count if subs == 1 else s.fanout_wide_count
    topic = f"bench/fan/{rid}"
    sub, pub = run_tasks(
        [
            Task(
                live_subscribers,
                {
                    "url": broker.ws_url,
                    "name": f"sub-{rid}",
                    "topic": topic,
                    "connections": subs,
                    "expected_each": count,
                    "timeout": s.worker_timeout,
                },
            ),
            Task(
                publish_burst,
                {
                    "url": broker.ws_url,
                    "name": f"pub-{rid}",
                    "topic": topic,
                    "count": count,
                    "body_bytes": spec.params["body_bytes"],
                    "seed": s.seed,
                    "persisted": False,
                    "window": s.window,
                    "per_frame": s.per_frame,
                    "timeout": s.worker_timeout,
                },
            ),
        ],
        timeout=s.worker_timeout,
    )
    secs = _seconds(pub["start_ns"], sub["last_ns"])
    return {
        "delivered_msgs_per_s": sub["count"] / secs,
        "publish_msgs_per_s": count / _seconds(pub["start_ns"], pub["end_ns"]),
        "elapsed_s": secs,
        "broker_rss_mib": _rss_mib(broker),
    }


def run_fanout(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings

    def body(broker: SpoolProcess) -> None:
        for spec in specs:
            subs = int(spec.params["subscribers"])
            count = s.fanout_count if subs == 1 else s.fanout_wide_count
            suite.measure(
                spec,
                functools.partial(_fanout_once, suite, broker, spec),
                params={
                    "messages_published": count,
                    "deliveries": count * subs,
                    "per_frame": s.per_frame,
                },
                profile_pid=functools.partial(_pid, broker),
            )

    _with_broker(suite, "fanout", specs, body)


# -- burst -------------------------------------------------------------------------------


def _scrape(broker: SpoolProcess, name: str) -> float:
    """One unlabelled sample of the broker's /metrics."""
    text = httpx.get(f"{broker.http_url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError(f"{name} not in /metrics")


def _burst_once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> dict[str, float]:
    """A burst through a 1 MB outbound buffer to a subscriber that reads nothing until its
    subscription spilled, then everything: the rest of the burst comes by the catch-up
    read of the log, while the publisher may still be publishing."""
    s = suite.settings
    rid = suite.next_id()
    topic = f"bench/burst/{rid}"
    count = s.fanout_count
    seconds = _scrape(broker, "spool_catch_up_seconds_total")
    sub, pub = run_tasks(
        [
            Task(
                late_subscriber,
                {
                    "url": broker.ws_url,
                    "metrics_url": f"{broker.http_url}/metrics",
                    "name": f"sub-{rid}",
                    "topic": topic,
                    "expected": count,
                    "timeout": s.worker_timeout,
                },
            ),
            Task(
                publish_burst,
                {
                    "url": broker.ws_url,
                    "name": f"pub-{rid}",
                    "topic": topic,
                    "count": count,
                    "body_bytes": spec.params["body_bytes"],
                    "seed": s.seed,
                    "persisted": False,
                    "window": s.window,
                    "per_frame": s.per_frame,
                    "timeout": s.worker_timeout,
                },
            ),
        ],
        timeout=s.worker_timeout,
    )
    if sub["count"] != count:
        raise RuntimeError(f"delivered {sub['count']} of {count}")
    return {
        "delivered_msgs_per_s": count / _seconds(pub["start_ns"], sub["last_ns"]),
        "read_msgs_per_s": count / _seconds(sub["reading_ns"], sub["last_ns"]),
        "publish_msgs_per_s": count / _seconds(pub["start_ns"], pub["end_ns"]),
        "catch_up_s": _scrape(broker, "spool_catch_up_seconds_total") - seconds,
        "broker_rss_mib": _rss_mib(broker),
    }


def run_burst(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings

    def body(broker: SpoolProcess) -> None:
        for spec in specs:
            suite.measure(
                spec,
                functools.partial(_burst_once, suite, broker, spec),
                params={
                    "messages_published": s.fanout_count,
                    "per_frame": s.per_frame,
                    "slow_client_buffer_limit": "1MB",
                },
                profile_pid=functools.partial(_pid, broker),
            )

    _with_broker(suite, "burst", specs, body, tuning=BURST_TUNING, transport_extra=BURST_TRANSPORT)


# -- latency -----------------------------------------------------------------------------


def _latency_once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    rate = int(spec.params["rate_per_s"])
    topic = f"bench/lat/{rid}"
    expected = int(rate * s.latency_seconds)
    sub, pub = run_tasks(
        [
            Task(
                latency_subscriber,
                {
                    "url": broker.ws_url,
                    "name": f"lsub-{rid}",
                    "topic": topic,
                    "expected": expected,
                    "timeout": s.worker_timeout,
                },
            ),
            Task(
                paced_publisher,
                {
                    "url": broker.ws_url,
                    "name": f"lpub-{rid}",
                    "topic": topic,
                    "rate": rate,
                    "seconds": s.latency_seconds,
                    "body_bytes": spec.params["body_bytes"],
                    "persisted": False,
                    "timeout": s.worker_timeout,
                },
            ),
        ],
        timeout=s.worker_timeout,
    )
    out = {k: float(sub[k]) for k in _LATENCY_KEYS}
    out["achieved_msgs_per_s"] = _achieved_rate(pub)
    return out


def run_latency(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings

    def body(broker: SpoolProcess) -> None:
        for spec in specs:
            suite.measure(
                spec,
                functools.partial(_latency_once, suite, broker, spec),
                params={"seconds": s.latency_seconds},
                profile_pid=functools.partial(_pid, broker),
            )

    _with_broker(suite, "latency", specs, body)


# -- replay and restart ------------------------------------------------------------------


REPLAY_TOPIC = "bench/replay"


def _populate(
    suite: Suite, broker: SpoolProcess, body_bytes: int, cafile: str | None = None
) -> dict[str, float]:
    s = suite.settings
    (res,) = run_tasks(
        [
            Task(
                publish_burst,
                {
                    "url": broker.ws_url,
                    "name": "replay-feeder",
                    "topic": REPLAY_TOPIC,
                    "count": s.replay_count,
                    "body_bytes": body_bytes,
                    "seed": s.seed,
                    "persisted": True,
                    "window": s.window,
                    "per_frame": s.per_frame,
                    "timeout": s.worker_timeout * 4,
                    "cafile": cafile,
                },
            )
        ],
        timeout=s.worker_timeout * 4,
    )
    secs = _seconds(res["start_ns"], res["end_ns"])
    return {"messages": float(s.replay_count), "seconds": secs, "msgs_per_s": s.replay_count / secs}


def _replay_once(
    suite: Suite, broker: SpoolProcess, spec: ScenarioSpec, cafile: str | None = None
) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    flt = spec.params.get("filter")
    total = s.replay_count
    expected = total if flt is None else total // 10
    proc = psutil.Process(_pid(broker))
    cpu0 = _cpu_seconds(proc)
    (res,) = run_tasks(
        [
            Task(
                replay_subscriber,
                {
                    "url": broker.ws_url,
                    "name": f"replay-{rid}",
                    "topic": REPLAY_TOPIC,
                    "expected": expected,
                    "filter": flt,
                    "timeout": s.worker_timeout,
                    "cafile": cafile,
                },
            )
        ],
        timeout=s.worker_timeout,
    )
    # the broker's user + system CPU per log message over the run (the wall rate on a
    # shared machine moves with other work; this moves with the broker's own cost)
    broker_cpu_us = (_cpu_seconds(proc) - cpu0) / total * 1e6
    if res["count"] != expected:
        raise RuntimeError(f"replay delivered {res['count']} messages, expected {expected}")
    secs = _seconds(res["start_ns"], res["last_ns"])
    first_ms = (res["first_ns"] - res["start_ns"]) / 1e6
    if flt is None:
        return {
            "msgs_per_s": total / secs,
            "mb_per_s": total * spec.params["body_bytes"] / secs / 1e6,
            "first_message_ms": first_ms,
            "elapsed_s": secs,
            "broker_rss_mib": _rss_mib(broker),
            "client_cpu_us": res["cpu_s"] / total * 1e6,
            "broker_cpu_us": broker_cpu_us,
        }
    return {
        "scanned_msgs_per_s": total / secs,
        "delivered_msgs_per_s": expected / secs,
        "first_message_ms": first_ms,
        "elapsed_s": secs,
        "broker_rss_mib": _rss_mib(broker),
        "broker_cpu_us": broker_cpu_us,
    }


def _everyday_replay_once(
    suite: Suite, broker: SpoolProcess, spec: ScenarioSpec
) -> dict[str, float]:
    """A replay from EPOCH through an everyday client: the Python ``Client`` in its own
    process, or spool-client.js in Chromium (run in this process: Playwright drives the
    browser, which is a process of its own)."""
    s = suite.settings
    rid = suite.next_id()
    total = s.replay_count
    kwargs = {"url": broker.ws_url, "name": f"creplay-{rid}", "topic": REPLAY_TOPIC,
              "expected": total, "timeout": s.worker_timeout}  # fmt: skip
    if spec.name.startswith("browser."):
        res = browser_replay(**kwargs)
    else:
        (res,) = run_tasks([Task(client_replay, kwargs)], timeout=s.worker_timeout)
    if res["count"] < total:
        raise RuntimeError(f"replay delivered {res['count']} messages, expected {total}")
    secs = _seconds(res["start_ns"], res["last_ns"])
    return {"msgs_per_s": total / secs, "elapsed_s": secs,
            "first_message_ms": (res["first_ns"] - res["start_ns"]) / 1e6}  # fmt: skip


def _restart_once(suite: Suite, broker: SpoolProcess) -> dict[str, float]:
    timeout = suite.settings.worker_timeout
    rid = suite.next_id()
    t0 = time.monotonic()
    broker.stop()
    t1 = time.monotonic()
    broker.start(timeout=timeout)
    asyncio.run(logon_once(broker.ws_url, f"restart-{rid}-a", timeout))
    t2 = time.monotonic()
    broker.kill()
    t3 = time.monotonic()
    broker.start(timeout=timeout)
    asyncio.run(logon_once(broker.ws_url, f"restart-{rid}-b", timeout))
    t4 = time.monotonic()
    return {"stop_restart_s": t2 - t1, "kill_restart_s": t4 - t3, "shutdown_s": t1 - t0}


def run_replay(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings
    sizes: dict[int, list[ScenarioSpec]] = {}
    for spec in specs:
        sizes.setdefault(int(spec.params["body_bytes"]), []).append(spec)
    for body_bytes, group in sizes.items():
        # restart last: it replaces the broker process under the others
        group.sort(key=lambda sp: sp.name.startswith("spool.restart."))

        def body(
            broker: SpoolProcess, group: list[ScenarioSpec] = group, body_bytes: int = body_bytes
        ) -> None:
            suite.log(
                f"  populating {s.replay_count:,} messages of {body_bytes} bytes (persisted acks)"
            )
            try:
                fill = _populate(suite, broker, body_bytes)
            except Exception as exc:
                suite.record_all(group, "error", f"populating the log failed: {reason_of(exc)}")
                return
            suite.log(f"  populated at {fill['msgs_per_s']:,.0f} msgs/s")
            for spec in group:
                params = {"log_messages": s.replay_count, "populate": fill}
                if spec.name.startswith("spool.restart."):
                    suite.measure(
                        spec, functools.partial(_restart_once, suite, broker), params=params
                    )
                elif not spec.name.startswith("spool."):
                    suite.measure(
                        spec,
                        functools.partial(_everyday_replay_once, suite, broker, spec),
                        params=params,
                        profile_pid=functools.partial(_pid, broker),
                    )
                else:
                    suite.measure(
                        spec,
                        functools.partial(_replay_once, suite, broker, spec),
                        params=params,
                        profile_pid=functools.partial(_pid, broker),
                    )

        _with_broker(suite, f"replay-{body_bytes}", group, body)


# -- memory ------------------------------------------------------------------------------


def settled_rss(proc: psutil.Process, timeout: float = 5.0) -> int:
    """The RSS once three readings 100 ms apart agree within 0.5% (or at the timeout)."""
    deadline = time.monotonic() + timeout
    readings = [proc.memory_info().rss]
    while time.monotonic() < deadline:
        time.sleep(0.1)
        readings.append(proc.memory_info().rss)
        last = readings[-3:]
        if len(last) == 3 and max(last) - min(last) <= 0.005 * max(last):
            break
    return readings[-1]


def _memory_once(suite: Suite, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    conns = spec.name.endswith("idle_connection")
    n = s.memory_connections if conns else s.memory_subscriptions
    with suite.spool_broker(f"memory-{rid}") as broker:
        proc = psutil.Process(_pid(broker))
        # exercise the logon and subscribe paths once so lazy imports and caches are in
        asyncio.run(logon_once(broker.ws_url, f"warm-{rid}", s.worker_timeout))
        before = settled_rss(proc)
        after: list[int] = []
        if conns:
            task = Task(
                hold_connections,
                {
                    "url": broker.ws_url,
                    "name": f"idle-{rid}",
                    "connections": n,
                    "timeout": s.worker_timeout,
                },
            )
        else:
            task = Task(
                hold_subscriptions,
                {
                    "url": broker.ws_url,
                    "name": f"subs-{rid}",
                    "topic_prefix": f"mem/{rid}",
                    "subscriptions": n,
                    "timeout": s.worker_timeout,
                },
            )
        run_tasks(
            [task], timeout=s.worker_timeout, on_ready=lambda: after.append(settled_rss(proc))
        )
    per = (after[0] - before) / 1024 / n
    key = "rss_kib_per_connection" if conns else "rss_kib_per_subscription"
    return {key: per, "rss_before_mib": before / 2**20, "rss_after_mib": after[0] / 2**20}


def run_memory(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings
    for spec in specs:
        n = (
            s.memory_connections
            if spec.name.endswith("idle_connection")
            else s.memory_subscriptions
        )
        suite.measure(
            spec,
            functools.partial(_memory_once, suite, spec),
            params={"count": n, "fresh_broker_per_run": True},
        )
