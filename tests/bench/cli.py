"""``python -m tests.bench`` (``make bench``): run the suite, print the table, keep the JSON.

Exit codes: 0 the suite ran (missed targets and missing peers are reported, not failures:
benchmarks are not tests); 1 a Spool or feature scenario failed with an error; 2 usage;
130 interrupted (what was measured is still written).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from tests.bench import (
    delayed_family,
    features,
    ha_family,
    neighbour,
    peer_families,
    queue_family,
    replication_family,
    scrub_family,
    sow_family,
    spool_families,
    tls_family,
    triggers_family,
)
from tests.bench.catalog import SCENARIOS, ScenarioSpec, feature_spec, select
from tests.bench.report import compare, format_markdown, format_table
from tests.bench.results import (
    ROOT,
    SCHEMA_VERSION,
    append_run,
    git_info,
    load_runs,
    machine_info,
    package_versions,
)
from tests.bench.suite import Settings, Suite

Family = Callable[[Suite, Sequence[ScenarioSpec]], None]

#: family runners in the order the suite runs them.
FAMILIES: Final[dict[str, Family]] = {
    "publish": spool_families.run_publish,
    "fanout": spool_families.run_fanout,
    "burst": spool_families.run_burst,
    "latency": spool_families.run_latency,
    "replay": spool_families.run_replay,
    "tls": tls_family.run_tls,
    "memory": spool_families.run_memory,
    "neighbour": neighbour.run_neighbour,
    "replication": replication_family.run_replication,
    "sow": sow_family.run_sow,
    "ha": ha_family.run_ha,
    "queue": queue_family.run_queue,
    "queue_replicated": queue_family.run_queue_replicated,
    "queue_bounded": queue_family.run_queue_bounded,
    "queue_replicated_bounded": queue_family.run_queue_replicated_bounded,
    "queue_restart": queue_family.run_queue_restart,
    "scrub": scrub_family.run_scrub,
    "triggers": triggers_family.run_triggers,
    "delayed": delayed_family.run_delayed,
    "redis": peer_families.run_redis,
    "mosquitto": peer_families.run_mosquitto,
    "feature": features.run_features,
}

DEFAULT_OUT: Final = ROOT / "bench-results.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench",
        description="Spool benchmark suite with Redis Streams and Mosquitto peer runs.",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="reduced counts (CI smoke, under 2 minutes); numbers not comparable",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"JSON history to append the run to (default {DEFAULT_OUT.name})",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="REGEX",
        help="run only scenarios whose name matches (repeatable)",
    )
    p.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="REGEX",
        help="skip scenarios whose name matches (repeatable)",
    )
    p.add_argument("--no-peers", action="store_true", help="skip Redis and Mosquitto")
    p.add_argument(
        "--no-extensions",
        action="store_true",
        help="run brokers and clients with SPOOL_NO_EXTENSIONS=1 (the pure-Python hot loops)",
    )
    p.add_argument(
        "--no-install",
        action="store_true",
        help="never apt-get install a missing peer (report it missing)",
    )
    p.add_argument("--runs", type=int, help="measured runs per scenario (default 3, quick 2)")
    p.add_argument("--warmup", type=int, help="discarded warm-up runs per scenario (default 1)")
    p.add_argument("--seed", type=int, default=20240607, help="seed of the message bodies")
    p.add_argument(
        "--profile", action="store_true", help="one extra py-spy-profiled run of the top scenarios"
    )
    p.add_argument(
        "--profile-dir",
        type=Path,
        default=ROOT / "test-artifacts" / "bench-profiles",
        help="where py-spy profiles go",
    )
    p.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before each family, wait up to SECONDS for the CPUs to be mostly idle",
    )
    p.add_argument("--workdir", type=Path, help="parent of the scratch directory (default TMP)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument(
        "--show",
        nargs="?",
        const=DEFAULT_OUT,
        type=Path,
        metavar="FILE",
        help="print the table of the last run stored in FILE and exit",
    )
    return p


def all_specs() -> list[ScenarioSpec]:
    return [*SCENARIOS, *(feature_spec(m) for m in features.discover())]


def _raise_fd_limit() -> None:
    """1000 connections need 1000 descriptors in the broker and the worker (inherited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def run_suite(
    settings: Settings,
    specs: Sequence[ScenarioSpec],
    suite: Suite,
    argv: Sequence[str],
    wait_idle: float = 0.0,
) -> dict[str, Any]:
    """Run the selected scenarios family by family; returns the run record."""
    started = time.time()
    machine = machine_info(suite.workdir)
    interrupted = False
    try:
        for family, runner in FAMILIES.items():
            chosen = [s for s in specs if s.family == family]
            if not chosen:
                continue
            suite.log(f"== {family}: {', '.join(s.name for s in chosen)}")
            if wait_idle > 0:
                suite.wait_idle(wait_idle)
            runner(suite, chosen)
    except KeyboardInterrupt:
        interrupted = True
        suite.log("interrupted: writing what was measured")
    scenarios = [r.as_dict() for r in suite.results]
    return {
        "schema": SCHEMA_VERSION,
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1),
        "quick": settings.quick,
        "interrupted": interrupted,
        "argv": list(argv),
        "machine": {**machine, "loadavg_at_end": list(os.getloadavg())},
        "versions": {
            "packages": package_versions(),
            "peers": suite.peers,
            "spool": spool_version(),
        },
        "git": git_info(),
        "settings": settings.as_dict(),
        "method": METHOD,
        "scenarios": scenarios,
        "comparisons": compare(scenarios),
    }


#: a summary of the method, stored with every run (docs/performance.md has the details).
METHOD: Final = (
    "Broker, publisher and subscriber(s) are separate OS processes on one machine "
    "(loopback). Publishers send 100 messages per websocket frame; subscribers count "
    "deliveries in raw frames. Each scenario: warm-up run(s) discarded, then N runs; "
    "median and spread=(max-min)/median. Latency: publisher stamps CLOCK_MONOTONIC ns in "
    "the body when the frame is built, the subscriber subtracts on frame receipt. "
    "Peers use the same bodies through redis-py / paho-mqtt."
)


def spool_version() -> str:
    """``spool --version`` as the brokers of this run see it (which hot loops run)."""
    done = subprocess.run(
        [sys.executable, "-m", "spool.server.cli", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout.strip() or done.stderr.strip()[-300:]


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.no_extensions:
        # inherited by every broker, worker (forkserver) and feature module started later
        os.environ["SPOOL_NO_EXTENSIONS"] = "1"
    if args.list:
        for spec in all_specs():
            print(f"{spec.name:<40} {spec.title}")
        return 0
    if args.show is not None:
        runs = load_runs(args.show)
        if not runs:
            print(f"no runs in {args.show}", file=sys.stderr)
            return 2
        print(format_table(runs[-1]))
        return 0
    try:
        specs = select(all_specs(), args.only, args.skip)
    except Exception as exc:
        parser.error(f"bad pattern: {exc}")
    if args.no_peers:
        specs = [s for s in specs if s.family not in ("redis", "mosquitto")]
    if not specs:
        parser.error("no scenario selected")
    settings = Settings.for_mode(
        args.quick,
        seed=args.seed,
        runs=args.runs,
        warmup=args.warmup,
        install_peers=not args.no_install,
        profile=args.profile,
    )
    _raise_fd_limit()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="spool-bench-", dir=args.workdir))
    suite = Suite(settings, workdir, profile_dir=args.profile_dir)
    if settings.quick:
        suite.log(
            "QUICK mode: reduced message counts (e.g. replay over "
            f"{settings.replay_count:,} messages, not 1,000,000); smoke use only"
        )
    suite.log(f"scratch directory {workdir}")
    try:
        record = run_suite(settings, specs, suite, args_list, args.wait_idle)
    finally:
        if args.keep:
            suite.log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    moved = append_run(args.out, record)
    if moved is not None:
        suite.log(f"{args.out} was not a JSON array of runs; moved it to {moved}")
    print()
    print(format_table(record))
    print(f"\nappended to {args.out}")
    if args.markdown is not None:
        args.markdown.write_text(format_markdown(record) + "\n")
        print(f"markdown table written to {args.markdown}")
    if record["interrupted"]:
        return 130
    failed = [
        s["name"]
        for s in record["scenarios"]
        if s["status"] == "error" and s["family"] not in ("redis", "mosquitto")
    ]
    if failed:
        print(f"\n{len(failed)} scenario(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
