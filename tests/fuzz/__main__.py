"""``python -m tests.fuzz [--seconds S] [--target NAME ...] [--json PATH]`` (``make fuzz``).

Runs every target (or the ones named) for ``S`` seconds each, one process per target,
then prints a table (executions, executions per second, coverage, corpus size, crashes)
and writes it as JSON. Exits 1 when any target crashed (the input is kept under
``test-artifacts/fuzz/crashes/``; turn it into a unit test, then fix).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.fuzz.targets import TARGETS
from tests.support.server import CHECKOUT_PATH

ROOT = Path(__file__).resolve().parents[2]
SEEDS = Path(__file__).resolve().parent / "corpus"
ARTIFACTS = ROOT / "test-artifacts" / "fuzz"

_DONE = re.compile(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)")
_RUNS = re.compile(r"Done (\d+) runs in (\d+) second")
_STAT = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)")


def run_target(name: str, seconds: int, env: dict[str, str]) -> dict[str, object]:
    """Fuzz ``name`` for ``seconds``; what libFuzzer reported at the end."""
    corpus = ARTIFACTS / "corpus" / name
    crashes = ARTIFACTS / "crashes"
    corpus.mkdir(parents=True, exist_ok=True)
    crashes.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / f"{name}.log"
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(
            [
                sys.executable, "-m", "tests.fuzz.run", name,
                f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=2048",
                "-print_final_stats=1", f"-artifact_prefix={crashes}/{name}-",
                str(corpus), str(SEEDS / name),
            ],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
    text = log.read_text(errors="replace")
    stats = _DONE.findall(text) or _STAT.findall(text)
    execs, cov, ft, corp, size = stats[-1] if stats else ("0", "0", "0", "0", "0b")
    runs = _RUNS.search(text)
    elapsed = time.monotonic() - started
    crash_files = sorted(p.name for p in crashes.glob(f"{name}-*"))
    return {
        "target": name,
        "executions": int(runs.group(1) if runs else execs),
        "seconds": round(elapsed, 1),
        "exec_per_s": round(int(runs.group(1) if runs else execs) / max(elapsed, 1e-9)),
        "coverage": int(cov),
        "features": int(ft),
        "corpus": int(corp),
        "corpus_bytes": size,
        "crashed": proc.returncode != 0,
        "exit_code": proc.returncode,
        "crash_files": crash_files,
        "log": str(log.relative_to(ROOT)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--seconds", type=int, default=30, help="per target")
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--json", type=Path, default=ARTIFACTS / "summary.json")
    args = parser.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": CHECKOUT_PATH}
    results = [run_target(name, args.seconds, env) for name in args.target or list(TARGETS)]
    compiled = os.environ.get("SPOOL_NO_EXTENSIONS", "") in ("", "0")
    print(f"fuzzing ({'compiled twins vs Python oracles' if compiled else 'pure Python'})")
    print(f"{'target':<10}{'execs':>10}{'exec/s':>8}{'cov':>7}{'corpus':>8}  crashed")
    for r in results:
        print(
            f"{r['target']!s:<10}{r['executions']:>10}{r['exec_per_s']:>8}{r['coverage']:>7}"
            f"{r['corpus']:>8}  {'YES ' + str(r['crash_files']) if r['crashed'] else 'no'}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"compiled": compiled, "targets": results}, indent=2))
    return 1 if any(r["crashed"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
