"""Per-feature benchmarks: every ``tests/bench/bench_<area>.py`` module is a scenario.

Each module exposes ``run(quick: bool = False) -> dict[str, float]`` (metric names carry
their units, e.g. ``expr_evals_per_s``). The suite runs it in a fresh interpreter per run,
so one module's imports, caches or crash cannot affect another's numbers or the suite,
and takes the median and spread over runs like any scenario.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import pkgutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from tests.bench.catalog import ScenarioSpec
from tests.bench.suite import Suite

ROOT: Final = Path(__file__).resolve().parents[2]
BENCH_DIR: Final = Path(__file__).resolve().parent
_MARK: Final = "@@SPOOL-BENCH-RESULT@@"

_RUNNER: Final = (
    "import importlib, json, sys\n"
    "mod = importlib.import_module(sys.argv[1])\n"
    "result = mod.run(quick=sys.argv[2] == '1')\n"
    f"print('\\n{_MARK}' + json.dumps(result), flush=True)\n"
)


class FeatureBenchError(Exception):
    """A feature module failed or returned something that is not ``{name: number}``."""


def discover(bench_dir: Path = BENCH_DIR) -> list[str]:
    """Names of the ``bench_*`` modules in tests/bench, sorted."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules([str(bench_dir)])
        if m.name.startswith("bench_") and not m.ispkg
    )


def parse_output(stdout: str) -> dict[str, float]:
    """The metrics printed by the runner snippet.

    Raises:
        FeatureBenchError: no result line, not JSON, or not a flat dict of finite numbers.
    """
    lines = [ln for ln in stdout.splitlines() if ln.startswith(_MARK)]
    if not lines:
        raise FeatureBenchError("the module printed no result")
    try:
        data = json.loads(lines[-1][len(_MARK) :])
    except json.JSONDecodeError as exc:
        raise FeatureBenchError(f"result is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not data:
        raise FeatureBenchError("run() must return a non-empty dict of metric -> number")
    out: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FeatureBenchError(f"metric {key!r} is not a number: {value!r}")
        if not math.isfinite(value):
            raise FeatureBenchError(f"metric {key!r} is not finite: {value!r}")
        out[str(key)] = float(value)
    return out


def run_module(module: str, quick: bool, timeout: float) -> dict[str, float]:
    """One ``run(quick)`` of ``tests.bench.<module>`` in a fresh interpreter.

    Raises:
        FeatureBenchError: it failed, timed out or returned a bad result.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", _RUNNER, f"tests.bench.{module}", "1" if quick else "0"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise FeatureBenchError(f"{module} did not finish within {timeout:.0f}s") from exc
    if done.returncode != 0:
        raise FeatureBenchError(
            f"{module} exited with {done.returncode}:\n{done.stderr.strip()[-3000:]}"
        )
    return parse_output(done.stdout)


def quick_timeout(module: str, bench_dir: Path = BENCH_DIR, default: float = 120.0) -> float:
    """A module's own ``QUICK_TIMEOUT_S = <number>`` (read from its source, not imported:
    the harness does not load Spark to learn that Spark needs longer), else ``default``."""
    tree = ast.parse((bench_dir / f"{module}.py").read_text())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "QUICK_TIMEOUT_S" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int | float)
        ):
            return float(node.value.value)
    return default


def run_features(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings
    for spec in specs:
        module = str(spec.params["module"]).rsplit(".", 1)[-1]
        timeout = quick_timeout(module) if s.quick else 900.0
        suite.measure(
            spec,
            functools.partial(run_module, module, s.quick, timeout),
            params={"quick": s.quick},
            warmup=0,
            runs=s.feature_runs,
        )
