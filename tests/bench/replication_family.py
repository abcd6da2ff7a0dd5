"""The replication family: persisted publish through a replicating instance (sync and
async) against an unreplicated one in the same run, and the replication lag.

Three broker processes: an unreplicated one (the baseline, the ``publish`` family's
configuration) and a pair A -> B (A's one destination is B, configured sync, every topic;
B records what it receives). The sync and async scenarios publish to A with persisted
acks, the same workload as ``spool.publish.persisted``; async is A with its destination
downgraded over REST (``POST /api/replication/b/downgrade``), sync with it upgraded again
(the upgrade completes once B has caught up). Both are **paired** with the unreplicated
instance (tests/bench/pairing.py): each run publishes twice to A and twice to the
unreplicated instance, ABBA, and ``vs_unreplicated`` is the ratio of the two rates of that
run, checked against its goal ratio (>= 0.6x for sync). The lag scenario paces a publisher on A at
10,000 msgs/s and measures publish-to-delivery at a live subscriber on B: the local
fsync at A, the push, B's record and fan-out. The bootstrap scenario starts a fresh, empty
instance with ``<Bootstrap>`` from A per run and measures the copy of A's whole log (what
the scenarios before it published) from its own progress (``GET /api/bootstrap``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import time
from collections.abc import Iterator, Sequence

import httpx
import psutil

from tests.bench.catalog import ScenarioSpec
from tests.bench.pairing import combined, pair_order
from tests.bench.processes import Task, run_tasks
from tests.bench.spool_families import (
    _LATENCY_KEYS,
    _achieved_rate,
    _pid,
    _publish_once,
    _with_broker,
)
from tests.bench.suite import BENCH_TUNING, Suite
from tests.bench.workers import latency_subscriber, paced_publisher
from tests.support.replication import bootstrap_xml, destination, free_ports, replication_xml
from tests.support.server import SpoolProcess


@contextlib.contextmanager
def _pair(suite: Suite) -> Iterator[tuple[SpoolProcess, SpoolProcess]]:
    """A -> B, sync, every topic; stopped at the end."""
    port_a, port_b = free_ports(2)
    root = suite.workdir / "spool-replication"
    b_xml = replication_xml(
        root / "b" / "data", "bench-b", port=port_b, admin_interval="10s", tuning=BENCH_TUNING
    )
    a_xml = replication_xml(
        root / "a" / "data", "bench-a", port=port_a, admin_interval="10s", tuning=BENCH_TUNING,
        destinations=[destination("bench-b", [("127.0.0.1", port_b)], exclude="replicate")],
    )  # fmt: skip
    b = SpoolProcess(root / "b", b_xml)
    a = SpoolProcess(root / "a", a_xml)
    b.start(timeout=120)
    try:
        a.start(timeout=120)
        try:
            _wait(lambda: _destination(a)["connected"], "A's link to B")
            yield a, b
        finally:
            a.stop()
    finally:
        b.stop()


def _destination(a: SpoolProcess) -> dict[str, object]:
    info = httpx.get(f"{a.http_url}/api/replication", timeout=10).json()
    dest: dict[str, object] = info["destinations"][0]
    return dest


def _wait(cond: functools.partial[bool] | object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    assert callable(cond)
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached in {timeout:.0f}s")
        time.sleep(0.05)


def _sync_type(a: SpoolProcess, effective: str) -> None:
    """Make A's destination's effective sync type ``effective`` (REST)."""
    now = _destination(a)["effective_sync_type"]
    if now == effective:
        return
    verb = "downgrade" if effective == "async" else "upgrade"
    response = httpx.post(f"{a.http_url}/api/replication/bench-b/{verb}", timeout=10)
    response.raise_for_status()
    _wait(lambda: _destination(a)["effective_sync_type"] == effective, f"{verb} of bench-b")


def _lag_once(
    suite: Suite, a: SpoolProcess, b: SpoolProcess, spec: ScenarioSpec
) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    rate = int(spec.params["rate_per_s"])
    topic = f"bench/repl/{rid}"
    expected = int(rate * s.latency_seconds)
    sub, pub = run_tasks(
        [
            Task(
                latency_subscriber,
                {"url": b.ws_url, "name": f"rsub-{rid}", "topic": topic, "expected": expected,
                 "timeout": s.worker_timeout},
            ),
            Task(
                paced_publisher,
                {"url": a.ws_url, "name": f"rpub-{rid}", "topic": topic, "rate": rate,
                 "seconds": s.latency_seconds, "body_bytes": spec.params["body_bytes"],
                 "persisted": False, "timeout": s.worker_timeout},
            ),
        ],
        timeout=s.worker_timeout,
    )  # fmt: skip
    out = {k: float(sub[k]) for k in _LATENCY_KEYS}
    out["achieved_msgs_per_s"] = _achieved_rate(pub)
    return out


def _durable(a: SpoolProcess) -> int:
    return int(httpx.get(f"{a.http_url}/api/replication", timeout=10).json()["durable_seq"])


def _bootstrap_once(suite: Suite, a: SpoolProcess) -> dict[str, float]:
    """A new empty instance copies A's log; its own progress says how fast."""
    rid = suite.next_id()
    (port,) = free_ports(1)
    root = suite.workdir / "spool-bootstrap" / str(rid)
    xml = replication_xml(
        root / "data", f"bench-boot-{rid}", port=port, admin_interval="10s",
        tuning=BENCH_TUNING, bootstrap=bootstrap_xml([".*"], [("127.0.0.1", a.port)]),
    )  # fmt: skip
    proc = SpoolProcess(root, xml)
    proc.start(timeout=120)
    try:

        def done() -> bool:
            state = httpx.get(f"{proc.http_url}/api/bootstrap", timeout=10).json()
            if state["state"] == "failed":
                raise RuntimeError(f"bootstrap failed: {state['error']}")
            return bool(state["state"] == "done")

        _wait(done, "the bootstrap", timeout=600)
        state = httpx.get(f"{proc.http_url}/api/bootstrap", timeout=10).json()
    finally:
        proc.stop()
    seconds = max(float(state["finished_at"]) - float(state["started_at"]), 1e-6)
    records = float(state["records"])
    return {"records_per_s": records / seconds, "records": records, "seconds": seconds,
            "mb_per_s": float(state["bytes"]) / seconds / 1e6}  # fmt: skip


def _cpu_seconds(proc: SpoolProcess) -> float:
    """User + system CPU seconds the broker process has used so far (all threads)."""
    times = psutil.Process(_pid(proc)).cpu_times()
    return float(times.user + times.system)


def _publish_with_cpu(
    suite: Suite, broker: SpoolProcess, spec: ScenarioSpec, dest: SpoolProcess | None
) -> dict[str, float]:
    """The persisted publish run, plus the CPU each broker spent per message in it.

    Wall throughput on a shared 2-core machine swings with the neighbours' load; CPU
    microseconds per message of the publishing instance (and of its destination, for the
    replicated cases) is what a change to the replication path actually moves.
    """
    procs = [broker] if dest is None else [broker, dest]
    before = [_cpu_seconds(p) for p in procs]
    out = _publish_once(suite, broker, spec)
    spent = [_cpu_seconds(p) - b for p, b in zip(procs, before, strict=True)]
    count = suite.settings.publish_count
    out["cpu_us_per_msg"] = spent[0] / count * 1e6
    if dest is not None:
        out["dest_cpu_us_per_msg"] = spent[1] / count * 1e6
    return out


#: how a replicated scenario's run is made (its params say it)
_PAIRED = "each run: two publishes to A and two to the unreplicated instance, ABBA order"


def _paired_once(
    suite: Suite,
    spec: ScenarioSpec,
    base: SpoolProcess,
    a: SpoolProcess,
    b: SpoolProcess,
    order: Iterator[int],
) -> dict[str, float]:
    """Two persisted-publish runs to A (replicating to B) and two to the unreplicated
    instance, in the order :func:`~tests.bench.pairing.pair_order` gives for this call.

    The metrics are A's (:func:`_publish_with_cpu`, each side's two combined) plus the
    unreplicated side's ``unreplicated_msgs_per_s`` and ``unreplicated_cpu_us_per_msg``
    and ``vs_unreplicated``, the ratio of the two rates: the issue's goal ratio, measured
    under one load instead of dividing by a figure taken minutes before.
    """
    sides: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for replicated in pair_order(next(order)):
        if sides[False] or sides[True]:
            os.sync()  # the other side's writeback must not land in this one's fsyncs
        if replicated:
            sides[True].append(_publish_with_cpu(suite, a, spec, b))
        else:
            sides[False].append(_publish_with_cpu(suite, base, spec, None))
    out = combined(sides[True])
    plain = combined(sides[False])
    out["unreplicated_msgs_per_s"] = plain["msgs_per_s"]
    out["unreplicated_cpu_us_per_msg"] = plain["cpu_us_per_msg"]
    out["vs_unreplicated"] = out["msgs_per_s"] / plain["msgs_per_s"]
    return out


def run_replication(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings
    publish_params = {
        "count": s.publish_count, "per_frame": s.per_frame, "window": s.window,
        "flush_interval": "1ms",
    }  # fmt: skip

    def body(base: SpoolProcess) -> None:
        try:
            pair = _pair(suite)
            a, b = pair.__enter__()
        except Exception as exc:
            suite.record_all(specs, "error", f"replication pair did not start: {exc}"[-300:], {})
            return
        try:
            for spec in specs:
                mode = spec.params["mode"]
                if mode == "bootstrap":
                    if not _durable(a):
                        # run alone (--only): give A a log to copy first
                        _publish_once(suite, a, spec)
                    suite.measure(spec, functools.partial(_bootstrap_once, suite, a))
                    continue
                if mode == "lag":
                    _sync_type(a, "sync")
                    suite.measure(
                        spec,
                        functools.partial(_lag_once, suite, a, b, spec),
                        params={"seconds": s.latency_seconds},
                        profile_pid=functools.partial(_pid, a),
                    )
                    continue
                if mode == "unreplicated":
                    suite.measure(
                        spec,
                        functools.partial(_publish_with_cpu, suite, base, spec, None),
                        params=publish_params,
                        profile_pid=functools.partial(_pid, base),
                    )
                    continue
                _sync_type(a, mode)
                suite.measure(
                    spec,
                    functools.partial(_paired_once, suite, spec, base, a, b, itertools.count()),
                    params={**publish_params, "paired": _PAIRED},
                    profile_pid=functools.partial(_pid, a),
                )
        finally:
            pair.__exit__(None, None, None)

    _with_broker(suite, "replication-base", specs, body)
