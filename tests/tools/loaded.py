"""Run a command several times in a row on a machine kept busy by CPU burners.

    python -m tests.tools.loaded --runs 3 -- make test

A test that passes only when the machine is idle depends on one process being faster
than another; this is how such tests are found before CI finds them. While the command
runs, ``--burners`` processes (one per core by default) spin at the same priority as the
command, so every process of the suite gets about half the CPU it would get alone.
The runs stop at the first failure; the exit status is that run's, or 0 when every run
passed. Each run's duration and status are printed, and the burners are stopped however
the runs end (a failure, Ctrl-C, an exception).

Imports only the standard library.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Sequence

#: What a burner runs: a busy loop that ends when its parent (this tool, whose pid it is
#: given) is gone, so a burner never outlives a tool killed with SIGKILL. The pid comes
#: from the tool, not from the burner's own first look: a tool killed while a burner's
#: interpreter was still starting would otherwise leave it watching its new parent.
BURN = (
    "import os, sys\nparent = int(sys.argv[1])\n"
    "while os.getppid() == parent:\n    for _ in range(100_000): pass\n"
)


def start_burners(count: int) -> list[subprocess.Popen[bytes]]:
    """Start ``count`` busy processes."""
    tool = str(os.getpid())
    return [subprocess.Popen([sys.executable, "-c", BURN, tool]) for _ in range(count)]


def stop_burners(burners: Sequence[subprocess.Popen[bytes]]) -> None:
    """Stop the burners and reap them."""
    for burner in burners:
        burner.kill()
    for burner in burners:
        burner.wait()


def run_loaded(command: Sequence[str], runs: int, burners: int) -> int:
    """Run ``command`` up to ``runs`` times beside ``burners`` busy processes.

    Returns 0 when every run passed, else the exit status of the first run that failed.
    """
    busy = start_burners(burners)
    try:
        for run in range(1, runs + 1):
            started = time.monotonic()
            status = subprocess.call(list(command))
            took = time.monotonic() - started
            print(
                f"loaded run {run}/{runs}: exit {status} after {took:.0f} s "
                f"beside {burners} burner(s)",
                flush=True,
            )
            if status != 0:
                return status
        return 0
    finally:
        stop_burners(busy)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="how many runs in a row (3)")
    parser.add_argument(
        "--burners",
        type=int,
        default=os.cpu_count() or 1,
        help="busy processes beside the command (one per core)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command to run after --")
    if args.runs < 1 or args.burners < 0:
        parser.error("--runs must be at least 1 and --burners at least 0")
    return run_loaded(command, args.runs, args.burners)


if __name__ == "__main__":
    sys.exit(main())
