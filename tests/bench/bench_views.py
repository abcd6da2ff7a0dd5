"""Benchmark of view maintenance (not a test: numbers, no assertions on timing).

The cost per underlying update of a grouped ``SUM`` / ``COUNT`` view over a SOW topic of
100,000 keys (10 desks x 100 symbols: 1,000 groups, one update in ten moves its record to
another symbol), next to the SOW update it rides on. Every scenario first fills its
stores with the 100,000 keys, then times one update of each key.

Metrics (times in microseconds per update):

* ``store_put_us``: :meth:`MemoryStore.put` alone, key and body given.
* ``sow_update_us``: what a keyed SOW topic does per message before the store: the key
  read from the body (``<Key>/id</Key>``: one parse), then the put.
* ``view_apply_us``: :meth:`ViewEngine.apply` alone on those changes (it parses the
  body itself).
* ``sow_view_update_us``: ``sow_update`` plus ``apply``: a SOW topic with one view.
* ``shared_parse_update_us``: the same with the body parsed once and the document
  handed to both the key and the view (what the publish path can do).
* ``sow_run_update_us``: the SOW update of a run of :data:`RUN` messages (keys read
  from the bodies, one ``put_run``), per message.
* ``sow_run_view_update_us``: the same run with one view: each body parsed once for the
  key and the view, one ``put_run``, one :meth:`ViewEngine.apply_many` (each group the
  run touched is rendered once), per message.
* ``view_over_sow_ratio``: ``sow_view_update_us / sow_update_us``;
  ``view_over_put_ratio``: ``(store_put_us + view_apply_us) / store_put_us``;
  ``shared_over_sow_ratio``: ``shared_parse_update_us / sow_update_us``;
  ``run_view_over_sow_ratio``: ``sow_run_view_update_us / sow_run_update_us``.

Run: ``python -m tests.bench.bench_views [--quick]`` (prints JSON) or ``run(quick=True)``.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson

from spool.server.sow.keys import KeySpec
from spool.server.sow.memory import MemoryStore
from spool.server.views import ViewEngine, parse_definition

KEYS = 100_000
DESKS = [f"desk{i}" for i in range(10)]
SYMBOLS = [f"SYM{i:03d}" for i in range(100)]
PROJECTION = ["/desk", "/symbol", "SUM(/qty) AS /position", "COUNT(/id) AS /fills"]
GROUPING = ["/desk", "/symbol"]
RUN = 100
"""Messages per run in the run scenarios (a publisher's batch: one ``put_run``)."""


def make_bodies(keys: int, rng: random.Random, moved: bool) -> list[bytes]:
    """One order per key, about 150 bytes; ``moved``: one in ten on another symbol."""
    out: list[bytes] = []
    for i in range(keys):
        doc: dict[str, Any] = {
            "id": i,
            "desk": DESKS[i % len(DESKS)],
            "symbol": SYMBOLS[(i // len(DESKS)) % len(SYMBOLS)],
            "qty": rng.randint(1, 1000),
            "px": round(rng.uniform(10, 500), 2),
            "side": rng.choice("BS"),
            "trader": f"trader-{rng.randint(1, 50)}",
        }
        if moved and i % 10 == 0:
            doc["symbol"] = rng.choice(SYMBOLS)
        out.append(orjson.dumps(doc))
    return out


def _us(n: int, seconds: float) -> float:
    return seconds / n * 1e6


def _best(repeats: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(repeats))


def run(quick: bool = False) -> dict[str, float]:
    """Run every measurement; returns metric name -> number."""
    keys = 10_000 if quick else KEYS
    repeats = 2 if quick else 3
    rng = random.Random(20261201)
    first = make_bodies(keys, rng, moved=False)
    second = make_bodies(keys, rng, moved=True)
    names = [str(i) for i in range(keys)]
    spec = KeySpec("bench/views", ("/id",))
    definition = parse_definition(PROJECTION, GROUPING)
    results: dict[str, float] = {"keys": keys, "body_bytes": sum(map(len, second)) / keys}

    def store_put() -> float:
        store = MemoryStore("orders")
        for k, b in zip(names, first, strict=True):
            store.put(k, b)
        put = store.put
        start = time.perf_counter()
        for k, b in zip(names, second, strict=True):
            put(k, b)
        return time.perf_counter() - start

    def sow_update() -> float:
        store = MemoryStore("orders")
        for b in first:
            store.put(spec.key("orders", b, None), b)
        put = store.put
        key = spec.key
        start = time.perf_counter()
        for b in second:
            put(key("orders", b, None), b)
        return time.perf_counter() - start

    def view_apply() -> float:
        store = MemoryStore("orders")
        engine = ViewEngine(definition, "orders")
        for k, b in zip(names, first, strict=True):
            engine.apply(store.put(k, b))
        changes = [store.put(k, b) for k, b in zip(names, second, strict=True)]
        apply = engine.apply
        start = time.perf_counter()
        for change in changes:
            apply(change)
        return time.perf_counter() - start

    def sow_view_update() -> float:
        store = MemoryStore("orders")
        engine = ViewEngine(definition, "orders")
        for b in first:
            engine.apply(store.put(spec.key("orders", b, None), b))
        put = store.put
        key = spec.key
        apply = engine.apply
        start = time.perf_counter()
        for b in second:
            apply(put(key("orders", b, None), b))
        return time.perf_counter() - start

    def shared_parse_update() -> float:
        store = MemoryStore("orders")
        engine = ViewEngine(definition, "orders")
        for b in first:
            engine.apply(store.put(spec.key("orders", b, None), b))
        put = store.put
        key_of = spec.key_of
        apply = engine.apply
        loads = orjson.loads
        start = time.perf_counter()
        for b in second:
            doc = loads(b)
            apply(put(key_of("orders", doc), b), doc)
        return time.perf_counter() - start

    def _run_args(n: int) -> dict[str, Any]:
        return {"seqs": [0] * n, "timestamp_us": 0, "pub_hash": 0, "pub_seqs": [0] * n,
                "expires": None}  # fmt: skip

    runs = [(i, min(i + RUN, keys)) for i in range(0, keys, RUN)]

    def sow_run_update() -> float:
        store = MemoryStore("orders")
        for b in first:
            store.put(spec.key("orders", b, None), b)
        key = spec.key
        start = time.perf_counter()
        for lo, hi in runs:
            bodies = second[lo:hi]
            ks = [key("orders", b, None) for b in bodies]
            store.put_run(ks, bodies, changes=True, **_run_args(hi - lo))
        return time.perf_counter() - start

    def sow_run_view_update() -> float:
        store = MemoryStore("orders")
        engine = ViewEngine(definition, "orders")
        for b in first:
            engine.apply(store.put(spec.key("orders", b, None), b))
        key_of = spec.key_of
        loads = orjson.loads
        start = time.perf_counter()
        for lo, hi in runs:
            bodies = second[lo:hi]
            docs = [loads(b) for b in bodies]
            ks = [key_of("orders", d) for d in docs]
            changes = store.put_run(ks, bodies, changes=True, **_run_args(hi - lo))
            engine.apply_many(changes, docs)
        return time.perf_counter() - start

    for name, fn in (
        ("store_put_us", store_put),
        ("sow_update_us", sow_update),
        ("view_apply_us", view_apply),
        ("sow_view_update_us", sow_view_update),
        ("shared_parse_update_us", shared_parse_update),
        ("sow_run_update_us", sow_run_update),
        ("sow_run_view_update_us", sow_run_view_update),
    ):
        results[name] = _us(keys, _best(repeats, fn))
    results["view_over_sow_ratio"] = results["sow_view_update_us"] / results["sow_update_us"]
    results["view_over_put_ratio"] = (results["store_put_us"] + results["view_apply_us"]) / results[
        "store_put_us"
    ]
    results["shared_over_sow_ratio"] = results["shared_parse_update_us"] / results["sow_update_us"]
    results["run_view_over_sow_ratio"] = (
        results["sow_run_view_update_us"] / results["sow_run_update_us"]
    )
    return results


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
