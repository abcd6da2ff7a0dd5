"""``python -m tests.soak [--minutes N] [--json PATH] [--workdir DIR]`` (``make soak``).

Prints the summary table, writes the same numbers as JSON, and exits 0 when the oracle
found nothing wrong, 1 otherwise. Root mounts a tmpfs for the disk-full fault; without
root that fault is skipped and the summary says why.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.soak.harness import SoakSettings, run_soak


def main(argv: Sequence[str] | None = None) -> int:
    defaults = SoakSettings()
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="of faults")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--publishers", type=int, default=defaults.publishers)
    parser.add_argument("--rate", type=float, default=defaults.rate, help="msg/s per publisher")
    parser.add_argument("--fault-gap", type=float, default=defaults.fault_gap, help="seconds")
    parser.add_argument(
        "--max-messages", type=int, default=0, help="per publisher (0: rate x duration x 1.5)"
    )
    parser.add_argument(
        "--json", type=Path, default=Path("test-artifacts/soak/summary.json"), help="summary"
    )
    parser.add_argument("--workdir", type=Path, help="kept afterwards (default: a temp dir)")
    args = parser.parse_args(argv)
    settings = SoakSettings(
        minutes=args.minutes,
        seed=args.seed,
        publishers=args.publishers,
        rate=args.rate,
        fault_gap=args.fault_gap,
        max_messages=args.max_messages,
    )
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        result = run_soak(args.workdir, settings)
    else:
        with tempfile.TemporaryDirectory(prefix="spool-soak-") as tmp:
            result = run_soak(Path(tmp), settings)
    print(result.table())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    print(f"summary written to {args.json}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
