"""``spool serve`` with a transaction-log file seam that a test steers from outside.

Usage (tests/support/server.py does it with ``SpoolProcess(..., control=PATH)``)::

    python -m tests.support.faulty_serve --control PATH serve --config ... --port-file ...

Everything is the real ``spool serve`` (the data directory lock, uvicorn, the broker)
except the file seam of the log's journal writes: a
:class:`~tests.support.faults.ControlledSeam` that fails an operation while the control
file names it (``fsync EIO``, ``write ENOSPC``; ``lossy``: a failed fsync also drops the
pages it covered, as Linux may). Production code has no flag for this; the
seam is handed in by this launcher, the only caller that passes one. With ``--clock
PATH`` the broker also runs on a :class:`~tests.support.clocks.JumpingClock`: its wall
clock is offset by the seconds the file holds (a clock jump, as an NTP step makes).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from spool.server.cli import EXIT_USAGE, build_parser, serve_config, serve_locked
from tests.support.clocks import JumpingClock
from tests.support.faults import ControlledSeam


def main(argv: Sequence[str] | None = None) -> int:
    outer = argparse.ArgumentParser(prog="faulty_serve")
    outer.add_argument("--control", required=True, help="file naming what to fail")
    outer.add_argument("--clock", help="file holding the wall clock's offset in seconds")
    ours, rest = outer.parse_known_args(argv)
    args = build_parser().parse_args(rest)
    if args.command != "serve":
        print("faulty_serve: only 'serve'", file=sys.stderr)
        return EXIT_USAGE
    config = serve_config(args)
    if config is None:
        return EXIT_USAGE
    seam = ControlledSeam(Path(ours.control))
    clock = JumpingClock(Path(ours.clock)) if ours.clock else None
    return serve_locked(config, args, files=seam, clock=clock)


if __name__ == "__main__":
    sys.exit(main())
