"""Benchmark of the expression language (not a test: numbers, no assertions on timing).

Metrics (names carry units):

* ``expr_evals_per_s``: ``/qty > 100 AND /sym = 'IBM'`` over already-parsed ~1 KB JSON
  bodies (the issue's target: at least 500,000/s).
* ``expr_evals_with_parse_per_s``: the same, building a fresh view per message, so each
  evaluation pays for the orjson parse of the body.
* ``expr_body_parses_per_s``: orjson alone on the same bodies, for scale.
* ``expr_reference_evals_per_s``: the tree-walking reference evaluator on the same filter.
* ``expr_compiles_per_s``: compiling distinct filters (cache misses).
* ``fanout_1000_msgs_per_s`` / ``fanout_1000_evals_per_s``: one view per message and 1,000
  *different* filters over it (what the engine does for 1,000 filtered subscriptions on
  one topic); ``fanout_1000_parses_per_msg`` is asserted to be exactly 1.
* ``fanout_1000_matches_per_msg``: how many of the 1,000 filters matched, on average.

Run: ``python -m tests.bench.bench_expr`` (prints JSON) or ``run(quick=True)``.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

import orjson

from spool.server.expr import MessageView, clear_caches, compile_filter
from spool.server.expr.parser import parse
from spool.server.expr.reference import evaluate_node

FILTER = "/qty > 100 AND /sym = 'IBM'"
SYMBOLS = ["IBM", "MSFT", "AAPL", "GOOG", "ORCL", "SAP", "INTC", "AMD"]
VENUES = ["XNYS", "XNAS", "BATS", "ARCX"]


def make_bodies(count: int, rng: random.Random, size: int = 1024) -> list[bytes]:
    """JSON order messages of about ``size`` bytes each."""
    bodies: list[bytes] = []
    for i in range(count):
        doc: dict[str, Any] = {
            "id": i,
            "sym": rng.choice(SYMBOLS),
            "qty": rng.randint(1, 200),
            "px": round(rng.uniform(10, 500), 2),
            "side": rng.choice(["B", "S"]),
            "venue": rng.choice(VENUES),
            "trader": f"trader-{rng.randint(1, 50)}",
            "tags": rng.sample(["algo", "dma", "care", "block", "odd"], 2),
            "legs": [{"px": round(rng.uniform(10, 500), 2), "qty": rng.randint(1, 50)}],
            "order": {"account": f"ACC{rng.randint(1, 999):03d}", "tif": "DAY"},
        }
        filler = 0
        while len(orjson.dumps(doc)) < size:
            doc[f"note{filler}"] = "x" * 40
            filler += 1
        bodies.append(orjson.dumps(doc))
    return bodies


def make_filters(count: int, rng: random.Random) -> list[str]:
    """``count`` different filters of the shapes subscriptions use."""
    shapes: list[Callable[[], str]] = [
        lambda: f"/qty > {rng.randint(1, 200)} AND /sym = '{rng.choice(SYMBOLS)}'",
        lambda: f"/sym IN ({', '.join(repr(s) for s in rng.sample(SYMBOLS, 3))})",
        lambda: f"/px BETWEEN {rng.randint(10, 200)} AND {rng.randint(200, 500)}",
        lambda: f"/venue = '{rng.choice(VENUES)}' AND /side = 'B'",
        lambda: f"/order/account = 'ACC{rng.randint(1, 999):03d}'",
        lambda: f"/trader LIKE '-{rng.randint(1, 5)}$'",
        lambda: f"/tags = '{rng.choice(['algo', 'dma', 'care'])}' OR /qty < {rng.randint(1, 20)}",
        lambda: f"/legs[0]/px > {rng.randint(10, 500)}",
        lambda: f"NOT /side = 'S' AND /qty >= {rng.randint(1, 200)}",
        lambda: f"/px * /qty > {rng.randint(1000, 90000)}",
    ]
    texts: set[str] = set()
    while len(texts) < count:
        texts.add(rng.choice(shapes)())
    return sorted(texts)


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def _best(repeats: int, fn: Callable[[], float]) -> float:
    return min(fn() for _ in range(repeats))


def run(quick: bool = False) -> dict[str, float]:
    """Run every measurement; returns metric name -> number."""
    rng = random.Random(20240101)
    repeats = 2 if quick else 3
    bodies = make_bodies(64, rng)
    n_evals = 50_000 if quick else 500_000
    flt = compile_filter(FILTER)
    match = flt.matches
    results: dict[str, float] = {
        "body_bytes": sum(len(b) for b in bodies) / len(bodies),
    }

    # 1. Filter on already-parsed bodies.
    parsed = [MessageView("orders", b) for b in bodies]
    for v in parsed:
        v.load()
    rounds = n_evals // len(parsed)

    def parsed_evals() -> float:
        start = time.perf_counter()
        for _ in range(rounds):
            for v in parsed:
                match(v)
        return time.perf_counter() - start

    results["expr_evals_per_s"] = _rate(rounds * len(parsed), _best(repeats, parsed_evals))

    # 2. Including the parse of every body.
    n_parse = n_evals // 5
    parse_rounds = n_parse // len(bodies)

    def evals_with_parse() -> float:
        start = time.perf_counter()
        for _ in range(parse_rounds):
            for b in bodies:
                match(MessageView("orders", b))
        return time.perf_counter() - start

    results["expr_evals_with_parse_per_s"] = _rate(
        parse_rounds * len(bodies), _best(repeats, evals_with_parse)
    )

    def parses_only() -> float:
        loads = orjson.loads
        start = time.perf_counter()
        for _ in range(parse_rounds):
            for b in bodies:
                loads(b)
        return time.perf_counter() - start

    results["expr_body_parses_per_s"] = _rate(
        parse_rounds * len(bodies), _best(repeats, parses_only)
    )

    # 3. The reference evaluator, for scale.
    tree = parse(FILTER)
    ref_rounds = max(1, rounds // 20)

    def reference_evals() -> float:
        start = time.perf_counter()
        for _ in range(ref_rounds):
            for v in parsed:
                evaluate_node(tree, v)
        return time.perf_counter() - start

    results["expr_reference_evals_per_s"] = _rate(
        ref_rounds * len(parsed), _best(repeats, reference_evals)
    )

    # 4. Compiling distinct filters.
    texts = make_filters(1000, rng)
    clear_caches()
    start = time.perf_counter()
    filters = [compile_filter(t) for t in texts]
    results["expr_compiles_per_s"] = _rate(len(texts), time.perf_counter() - start)

    # 5. Fan-out: 1,000 different filters, one view per message.
    n_msgs = 100 if quick else 1000
    fan_bodies = make_bodies(n_msgs, rng)
    matches = [f.matches for f in filters]

    def fanout() -> float:
        parses_before = MessageView.parse_count()
        hits = 0
        start = time.perf_counter()
        for b in fan_bodies:
            v = MessageView("orders", b)
            for m in matches:
                if m(v):
                    hits += 1
        elapsed = time.perf_counter() - start
        parses = MessageView.parse_count() - parses_before
        if parses != n_msgs:
            raise AssertionError(f"{parses} body parses for {n_msgs} messages")
        results["fanout_1000_parses_per_msg"] = parses / n_msgs
        results["fanout_1000_matches_per_msg"] = hits / n_msgs
        return elapsed

    elapsed = _best(repeats, fanout)
    results["fanout_1000_msgs_per_s"] = _rate(n_msgs, elapsed)
    results["fanout_1000_evals_per_s"] = _rate(n_msgs * len(matches), elapsed)
    errors = sum(f.errors for f in filters) + flt.errors
    if errors:
        raise AssertionError(f"{errors} filter evaluations failed")
    return results


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
