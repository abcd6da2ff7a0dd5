"""The pipeline's jobs as a Spark application file, for ``spark-submit``.

``spark-submit`` takes a Python file, not a console script::

    spark-submit --master spark://head:7077 --py-files spool_broker.whl \\
        "$(python -c 'import spool.server.pipeline.submit as m; print(m.__file__)')" \\
        stats /shared/spool/journal --parquet /shared/out/stats

The arguments are those of ``spool pipeline`` (docs/pipeline.md); the master is the one
``spark-submit`` was given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from spool.server.pipeline.cli import add_commands

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``spool pipeline`` command; returns its exit code."""
    parser = argparse.ArgumentParser(prog="spool pipeline", description=__doc__)
    add_commands(parser.add_subparsers(dest="pipeline_command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
