"""``python -m tests.bench``: the benchmark suite (see tests/bench/cli.py)."""

from __future__ import annotations

import sys

from tests.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
