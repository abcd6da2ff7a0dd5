"""``python -m tests.nemesis [--minutes N] [--seed S] [--instances 3..5] ...`` (``make nemesis``).

Runs the cluster under the seed's fault schedule, checks the histories against the
journals, prints the summary table, writes ``summary.json`` and ``report.html`` (into
``--out``), and exits 0 only when the checker found nothing. ``--schedule`` prints the
schedule of a seed without running it; ``--scenario NAME`` runs a named scenario
(tests/nemesis/scenarios.py).

SIGTERM (a CI job's timeout, ``kill``) stops a run as Ctrl-C does: the instances are
stopped, the network namespaces deleted and the tmpfs disks unmounted before the exit
(status 130), so a stopped run leaves nothing behind on the machine.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tests.nemesis.cluster import TOPOLOGIES
from tests.nemesis.history import read_history
from tests.nemesis.run import Settings, run_nemesis
from tests.nemesis.scenarios import SCENARIOS
from tests.nemesis.schedule import KINDS, draw_schedule


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown fault kinds {', '.join(unknown)}; known: {', '.join(KINDS)}"
        )
    return kinds


def main(argv: Sequence[str] | None = None) -> int:
    d = Settings()
    parser = argparse.ArgumentParser(prog="python -m tests.nemesis", description=__doc__)
    parser.add_argument("--minutes", type=float, default=d.minutes, help="nominal length")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--instances", type=int, default=d.instances, choices=(3, 4, 5))
    parser.add_argument("--topology", default=d.topology, choices=TOPOLOGIES)
    parser.add_argument(
        "--faults", type=_kinds, default=d.faults,
        help=f"comma list of fault kinds (default: all of {','.join(KINDS)})",
    )  # fmt: skip
    parser.add_argument("--pace", type=float, default=d.pace, help="scales fault durations")
    parser.add_argument("--rate", type=float, default=d.rate, help="msg/s per publisher")
    parser.add_argument("--stall", type=float, default=d.stall,
                        help="seconds without progress before a wait gives up")  # fmt: skip
    parser.add_argument("--no-netns", action="store_true", help="loopback even as root")
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS),
        help="a named run: its own minutes, seed, instances, topology and faults "
        "(refused beside them); --pace, --rate, --stall and --no-netns still apply",
    )  # fmt: skip
    parser.add_argument(
        "--workdir",
        type=Path,
        help="kept afterwards, with every instance's data (default: a temp dir)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("test-artifacts/nemesis"), help="reports go here"
    )
    parser.add_argument("--schedule", action="store_true", help="print the schedule and exit")
    args = parser.parse_args(argv)
    settings = Settings(
        minutes=args.minutes,
        seed=args.seed,
        instances=args.instances,
        topology=args.topology,
        faults=args.faults,
        pace=args.pace,
        rate=args.rate,
        netns=not args.no_netns,
        stall=args.stall,
    )
    if args.scenario:
        clash = [
            f"--{name}" for name in ("minutes", "seed", "instances", "topology", "faults")
            if getattr(args, name) != getattr(d, name)
        ]  # fmt: skip
        if clash:
            parser.error(f"--scenario sets {', '.join(clash)} itself; leave them out")
        settings = replace(
            SCENARIOS[args.scenario].settings,
            pace=args.pace, rate=args.rate, stall=args.stall, netns=not args.no_netns,
        )  # fmt: skip
    if args.schedule:
        names = ["a", "b", "c", "d", "e"][: settings.instances]
        sched = draw_schedule(
            settings.seed, names, settings.minutes * 60, settings.faults, pace=settings.pace
        )
        for p in sched.periods:
            print(p.describe())
        return 0
    from tests.nemesis.report import table, write_reports

    # a KeyboardInterrupt unwinds through the run's cleanup (the finally of run_nemesis)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if args.workdir is not None:
            result = run_nemesis(args.workdir, settings, keep_data=True)
            events = list(read_history(args.workdir / "history"))
        else:
            with tempfile.TemporaryDirectory(prefix="spool-nemesis-") as tmp:
                result = run_nemesis(Path(tmp), settings)
                events = list(read_history(Path(tmp) / "history"))
    except KeyboardInterrupt:
        print("interrupted: the instances were stopped and the network removed", flush=True)
        return 130
    print(table(result))
    paths = write_reports(result, events, args.out)
    print(f"summary: {paths['json']}\nreport: {paths['html']}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
