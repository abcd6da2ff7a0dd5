"""``spool pipeline stats|grep|export``: the journal jobs on Spark.

::

    spool pipeline stats DIR [--db FILE] [--parquet DIR] [--intervals 1s,1m,1h]
    spool pipeline grep DIR [--topic REGEX] [--filter EXPR] [--from T|BM] [--to T|BM]
                            [--out FILE] [--parquet DIR]
    spool pipeline export DIR OUT [--flatten SCHEMA] [--topic REGEX] [--overwrite]

Common options: ``--name`` (the instance, default the only one in DIR), ``--archive DIR``,
``--from`` / ``--to``, ``--master`` (default ``local[*]``; or leave it to
``spark-submit``), ``--conf KEY=VALUE`` (repeatable), ``--quiet`` (no progress line).
Exit codes: 0 done, 1 done but damaged spans were found (reported on stderr), 2 usage or
input error (missing Java, wrong path, bad filter...).

This module imports neither Spark nor pyarrow until a command runs, so ``spool`` starts
fast and without the ``[pipeline]`` extra; a missing extra is reported as such.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from spool.server.pipeline.errors import PipelineNotInstalled

__all__ = ["add_commands", "register"]

EXIT_OK, EXIT_DAMAGE, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pipeline`` with ``stats``, ``grep`` and ``export`` to the ``spool`` command."""
    pipeline = subparsers.add_parser("pipeline", help="journal jobs on Spark (stats, grep, export)")
    add_commands(pipeline.add_subparsers(dest="pipeline_command", required=True))


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``stats``, ``grep`` and ``export`` commands (``spool pipeline`` and submit.py)."""
    stats = sub.add_parser("stats", help="counts, bytes and rates per topic/publisher/interval")
    _common(stats)
    stats.add_argument("--db", type=Path, help="the stats database to add the series to")
    stats.add_argument("--parquet", type=Path, help="write windows/ and summary/ here")
    stats.add_argument("--intervals", default="1s,1m,1h", help="window sizes (default 1s,1m,1h)")
    stats.set_defaults(func=cmd_stats)

    grep = sub.add_parser("grep", help="search journals with the broker's filter language")
    _common(grep)
    grep.add_argument("--topic", help="topic regular expression (Python re.search)")
    grep.add_argument("--filter", dest="filter_text", help='content filter, e.g. "/qty > 10"')
    grep.add_argument("--out", type=Path, help="JSON lines file (default: stdout)")
    grep.add_argument("--parquet", type=Path, help="write a Parquet dataset instead")
    grep.set_defaults(func=cmd_grep)

    export = sub.add_parser("export", help="journals to Parquet by topic and date")
    _common(export)
    export.add_argument("out", type=Path, help="output directory (a Parquet dataset)")
    export.add_argument("--topic", help="only topics matching this regular expression")
    export.add_argument("--flatten", help="parse JSON bodies by this schema: 'sym STRING, qty INT'")
    export.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    export.set_defaults(func=cmd_export)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", type=Path, help="the JournalDirectory")
    p.add_argument("--name", help="instance name (default: the only one in DIR)")
    p.add_argument("--archive", type=Path, help="the JournalArchiveDirectory, if any")
    p.add_argument("--from", dest="start", metavar="T|BM", help="from this time or bookmark")
    p.add_argument("--to", dest="end", metavar="T|BM", help="up to this time or bookmark")
    p.add_argument("--master", help="Spark master (default local[*], or spark-submit's)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting (repeatable)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress line")


def _error(command: str, exc: BaseException) -> int:
    print(f"spool pipeline {command}: {exc}", file=sys.stderr)
    return EXIT_USAGE


def _load(command: str) -> Any:
    """The job machinery (imports Spark); None after reporting a missing extra."""
    try:
        return importlib.import_module("spool.server.pipeline.jobs")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("pyspark", "pyarrow", "pandas"):
            print(f"spool pipeline {command}: {PipelineNotInstalled(exc.name)}", file=sys.stderr)
            return None
        raise


def _run(command: str, args: argparse.Namespace) -> int:
    jobs = _load(command)
    if jobs is None:
        return EXIT_USAGE
    code: int = jobs.run(command, args)
    return code


def cmd_stats(args: argparse.Namespace) -> int:
    return _run("stats", args)


def cmd_grep(args: argparse.Namespace) -> int:
    return _run("grep", args)


def cmd_export(args: argparse.Namespace) -> int:
    return _run("export", args)
