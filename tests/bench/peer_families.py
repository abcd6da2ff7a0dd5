"""Peer families: Redis Streams and Mosquitto, measured with the same harness.

Redis runs twice, with ``appendfsync everysec`` and ``always`` (``appendonly yes`` both
times); the replay-from-start workload runs on the ``everysec`` instance (the fsync policy
does not affect reads). Mosquitto runs the QoS 1 publish workload.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from collections.abc import Sequence
from typing import Any

from tests.bench.catalog import ScenarioSpec
from tests.bench.peer_workers import (
    mqtt_publish,
    mqtt_publish_paho,
    redis_xadd,
    redis_xadd_api,
    redis_xrange,
    redis_xrange_api,
)
from tests.bench.peers import (
    PeerBinary,
    PeerServer,
    PeerUnavailable,
    find_peer,
    mosquitto_server,
    redis_server,
)
from tests.bench.processes import Task, run_tasks
from tests.bench.suite import Suite, reason_of


def _rate(res: dict[str, Any]) -> dict[str, float]:
    secs = (res["end_ns"] - res["start_ns"]) / 1e9
    if secs <= 0:
        raise RuntimeError(f"non-positive elapsed time {secs}")
    return {
        "msgs_per_s": res["count"] / secs,
        "mb_per_s": res["bytes"] / secs / 1e6,
        "elapsed_s": secs,
    }


def _find(
    suite: Suite,
    binary: str,
    package: str,
    version_args: list[str],
    module: str | None,
    pip_name: str,
) -> PeerBinary:
    """The peer binary and its Python client, or PeerUnavailable with the reason."""
    if module is not None and importlib.util.find_spec(module) is None:
        raise PeerUnavailable(
            f"Python client {pip_name} not installed (.venv/bin/pip install {pip_name})"
        )
    log: list[str] = []
    try:
        found = find_peer(
            binary, package, version_args, install=suite.settings.install_peers, log=log
        )
    finally:
        if log:
            suite.log("  " + "\n  ".join(log))
    suite.peers[binary] = {
        "path": found.path,
        "version": found.version,
        "installed_now": found.installed_now,
    }
    suite.log(
        f"  {binary}: {found.version} ({found.path}"
        f"{', installed now' if found.installed_now else ''})"
    )
    return found


# -- Redis -------------------------------------------------------------------------------


def _xadd_once(suite: Suite, server: PeerServer, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    kwargs: dict[str, Any] = {
        "port": server.port,
        "key": f"bench:{rid}",
        "count": s.redis_publish_count,
        "body_bytes": spec.params["body_bytes"],
        "seed": s.seed,
        "pipeline": spec.params["pipeline"],
        "delete_after": True,
    }
    if spec.params["client"] == "lean":
        task = Task(redis_xadd, {**kwargs, "window": spec.params["window"]})
    else:
        task = Task(redis_xadd_api, kwargs)
    (res,) = run_tasks([task], timeout=s.worker_timeout)
    return _rate(res)


def _xrange_once(
    suite: Suite, server: PeerServer, spec: ScenarioSpec, key: str
) -> dict[str, float]:
    s = suite.settings
    fn = redis_xrange if spec.params["client"] == "lean" else redis_xrange_api
    kwargs = {"port": server.port, "key": key, "expected": s.replay_count, "batch": 1000}
    (res,) = run_tasks([Task(fn, kwargs)], timeout=s.worker_timeout)
    return _rate(res)


def _redis_details() -> dict[str, Any]:
    import redis.utils

    return {
        "redis_py": importlib.metadata.version("redis"),
        "hiredis_parser": bool(getattr(redis.utils, "HIREDIS_AVAILABLE", False)),
    }


def run_redis(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings
    try:
        binary = _find(suite, "redis-server", "redis-server", ["--version"], "redis", "redis")
    except PeerUnavailable as exc:
        suite.record_all(specs, "missing", str(exc))
        return
    suite.peers["redis-server"].update(_redis_details())
    detail = {"server": binary.version, **_redis_details()}
    for fsync in ("everysec", "always"):
        group = [sp for sp in specs if sp.params["appendfsync"] == fsync]
        if not group:
            continue
        try:
            with redis_server(binary, suite.workdir / f"redis-{fsync}", fsync) as server:
                for spec in group:
                    if spec.name.startswith("redis.xadd."):
                        res = suite.measure(
                            spec,
                            functools.partial(_xadd_once, suite, server, spec),
                            params={"count": s.redis_publish_count},
                        )
                        res.detail.update(detail)
                replays = [sp for sp in group if sp.name.startswith("redis.xrange.")]
                for size in sorted({int(sp.params["body_bytes"]) for sp in replays}):
                    same = [sp for sp in replays if sp.params["body_bytes"] == size]
                    _measure_xrange(suite, server, size, same, detail)
        except PeerUnavailable as exc:
            done = {r.spec.name for r in suite.results}
            suite.record_all([sp for sp in group if sp.name not in done], "error", str(exc))


def _measure_xrange(
    suite: Suite,
    server: PeerServer,
    body_bytes: int,
    specs: Sequence[ScenarioSpec],
    detail: dict[str, Any],
) -> None:
    """Fill one stream with the replay count of entries, replay it per spec, drop it."""
    s = suite.settings
    key = f"bench:replay:{body_bytes}"
    suite.log(f"  populating {s.replay_count:,} stream entries of {body_bytes} bytes")
    fill_kwargs: dict[str, Any] = {
        "port": server.port,
        "key": key,
        "count": s.replay_count,
        "body_bytes": body_bytes,
        "seed": s.seed,
        "pipeline": 100,
        "window": s.window,
        "delete_after": False,
    }
    try:
        (fill,) = run_tasks([Task(redis_xadd, fill_kwargs)], timeout=s.worker_timeout * 4)
    except Exception as exc:
        for spec in specs:
            suite.record(spec, "error", f"populating the stream failed: {reason_of(exc)}")
        return
    for spec in specs:
        res = suite.measure(
            spec,
            functools.partial(_xrange_once, suite, server, spec, key),
            params={"log_messages": s.replay_count, "populate": _rate(fill)},
        )
        res.detail.update(detail)
    import redis

    client = redis.Redis(host="127.0.0.1", port=server.port)
    client.delete(key)
    client.close()


# -- Mosquitto ---------------------------------------------------------------------------


def _mqtt_once(suite: Suite, server: PeerServer, spec: ScenarioSpec) -> dict[str, float]:
    s = suite.settings
    rid = suite.next_id()
    kwargs: dict[str, Any] = {
        "port": server.port,
        "topic": f"bench/mqtt/{rid}",
        "count": s.mosquitto_count,
        "body_bytes": spec.params["body_bytes"],
        "seed": s.seed,
        "inflight": spec.params["inflight"],
        "timeout": s.worker_timeout,
    }
    if spec.params["client"] == "raw":
        task = Task(mqtt_publish, {**kwargs, "pipeline": spec.params["pipeline"]})
    else:
        task = Task(mqtt_publish_paho, kwargs)
    (res,) = run_tasks([task], timeout=s.worker_timeout)
    return _rate(res)


def run_mosquitto(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings
    try:
        binary = _find(suite, "mosquitto", "mosquitto", ["-h"], None, "")
    except PeerUnavailable as exc:
        suite.record_all(specs, "missing", str(exc))
        return
    try:
        with mosquitto_server(binary, suite.workdir / "mosquitto") as server:
            for spec in specs:
                detail: dict[str, Any] = {"server": binary.version}
                if spec.params["client"] == "paho-mqtt":
                    if importlib.util.find_spec("paho") is None:
                        suite.record(spec, "missing", "paho-mqtt not installed")
                        continue
                    detail["paho_mqtt"] = importlib.metadata.version("paho-mqtt")
                res = suite.measure(
                    spec,
                    functools.partial(_mqtt_once, suite, server, spec),
                    params={"count": s.mosquitto_count},
                )
                res.detail.update(detail)
    except PeerUnavailable as exc:
        done = {r.spec.name for r in suite.results}
        suite.record_all([sp for sp in specs if sp.name not in done], "error", str(exc))
