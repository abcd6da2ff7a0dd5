"""The delayed family: how late delayed messages are delivered (docs/protocol.md "Publish
options"; docs/performance.md "Delayed delivery").

One broker (the bench configuration, every topic recorded by its transaction log) for the
family; each run publishes to a fresh topic ``bench/delayed/<id>``. A publisher and a
subscriber run in processes of their own (tests/bench/delayed_workers.py); each message
is published with ``deliver_at`` and carries its due time, and the subscriber's lateness
for it is its receive time minus that due time (same machine, same clock).

- ``lateness.paced``: a publisher at ``rate_per_s`` for ``seconds`` (10 s; 2 s under
  ``--quick``), each message due ``delay_s`` after its send. Reports the lateness
  percentiles, ``max_ms``, ``min_ms`` and ``early`` (messages delivered before their due
  time: none is expected). Target: p99 at most 50 ms.
- ``lateness.burst``: ``count`` messages published as fast as the persisted acks allow,
  all due at one moment ``lead_s`` after the start; ``last_ms`` is the lateness of the
  last delivery and ``drain_msgs_per_s`` the messages over the time from the due moment
  to the last delivery. No target.

A run fails when a message is lost or delivered twice (the subscriber checks every
message number), or when the burst was not stored before its due time.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from tests.bench.catalog import ScenarioSpec
from tests.bench.delayed_workers import (
    delayed_burst_publisher,
    delayed_paced_publisher,
    delayed_subscriber,
)
from tests.bench.processes import Task, run_tasks
from tests.bench.spool_families import _pid, _with_broker
from tests.bench.stats import latency_summary
from tests.bench.suite import Suite
from tests.support.server import SpoolProcess

#: seconds the subscriber keeps reading after the last message (duplicates show then)
GRACE_S = 0.5
#: the paced case's publishing time under ``--quick``
QUICK_SECONDS = 2.0


def lateness_metrics(lateness_ns: Sequence[int]) -> dict[str, float]:
    """Percentiles of the lateness samples in ms (``p50_ms`` ... ``max_ms``, ``mean_ms``,
    ``samples``), plus ``min_ms`` and ``early`` (samples below zero)."""
    out = latency_summary(lateness_ns)
    out["min_ms"] = min(lateness_ns) / 1e6
    out["early"] = float(sum(1 for x in lateness_ns if x < 0))
    return out


def _paced_seconds(suite: Suite, spec: ScenarioSpec) -> float:
    return QUICK_SECONDS if suite.settings.quick else float(spec.params["seconds"])


def _paced_once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    topic = f"bench/delayed/{rid}"
    rate = int(spec.params["rate_per_s"])
    seconds = _paced_seconds(suite, spec)
    expected = int(rate * seconds)
    sub, pub = run_tasks(
        [
            Task(delayed_subscriber, {
                "url": broker.ws_url, "name": f"dsub-{rid}", "topic": topic,
                "expected": expected, "grace_s": GRACE_S, "timeout": s.worker_timeout,
            }),
            Task(delayed_paced_publisher, {
                "url": broker.ws_url, "name": f"dpub-{rid}", "topic": topic, "rate": rate,
                "seconds": seconds, "delay_s": float(spec.params["delay_s"]),
                "timeout": s.worker_timeout,
            }),
        ],
        timeout=s.worker_timeout,
    )  # fmt: skip
    out = lateness_metrics(sub["lateness_ns"])
    out["count"] = float(sub["count"])
    span = (pub["last_send_ns"] - pub["start_ns"]) / 1e9
    out["achieved_msgs_per_s"] = (pub["sent"] - 1) / span if span > 0 else 0.0
    return out


def _burst_once(suite: Suite, broker: SpoolProcess, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    topic = f"bench/delayed/{rid}"
    count = int(spec.params["count"])
    sub, pub = run_tasks(
        [
            Task(delayed_subscriber, {
                "url": broker.ws_url, "name": f"dsub-{rid}", "topic": topic,
                "expected": count, "grace_s": GRACE_S, "timeout": s.worker_timeout,
            }),
            Task(delayed_burst_publisher, {
                "url": broker.ws_url, "name": f"dpub-{rid}", "topic": topic, "count": count,
                "lead_s": float(spec.params["lead_s"]), "timeout": s.worker_timeout,
            }),
        ],
        timeout=s.worker_timeout,
    )  # fmt: skip
    return burst_metrics(sub, pub)


def burst_metrics(sub: dict[str, Any], pub: dict[str, Any]) -> dict[str, float]:
    """The burst case's metrics from the workers' results: every message is due at
    ``pub["due_us"]``; the drain runs from then to the last delivery."""
    due_ns = int(pub["due_us"]) * 1000
    out = lateness_metrics(sub["lateness_ns"])
    drain_s = (int(sub["last_ns"]) - due_ns) / 1e9
    out["count"] = float(sub["count"])
    out["first_ms"] = (int(sub["first_ns"]) - due_ns) / 1e6
    out["last_ms"] = drain_s * 1000
    out["drain_msgs_per_s"] = sub["count"] / drain_s if drain_s > 0 else 0.0
    out["stored_ahead_s"] = float(pub["stored_ahead_s"])
    return out


def run_delayed(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    def body(broker: SpoolProcess) -> None:
        for spec in specs:
            if spec.params["case"] == "paced":
                once = functools.partial(_paced_once, suite, broker, spec)
                params: dict[str, Any] = {"seconds": _paced_seconds(suite, spec)}
            else:
                once = functools.partial(_burst_once, suite, broker, spec)
                params = {}
            suite.measure(spec, once, params=params, profile_pid=functools.partial(_pid, broker))

    _with_broker(suite, "delayed", specs, body)
