"""``spool stats``: read a stats database from the shell, as CSV on stdout.

``spool stats report DB [--since T] [--metric M]``
    every sample (``metric,time,value``; time ISO-8601 UTC), optionally since a time
    (``YYYYmmddTHHMMSS``, ISO-8601, epoch seconds, or a duration such as ``1h`` meaning
    that long ago) and for metrics whose path equals ``M`` or starts with ``M/``.

``spool stats query DB "SQL"``
    any read-only SQL over the ``metric`` and ``sample`` tables (docs/admin-api.md).

The file is opened with SQLite's ``mode=ro`` URI plus ``PRAGMA query_only``, so neither
command can change the database, even one the broker is writing right now (WAL).
"""

from __future__ import annotations

import argparse
import csv
import sqlite3
import sys
import time
from pathlib import Path
from urllib.parse import quote

from spool.server.stats.timeparse import BadTimeValue, format_time, parse_duration, parse_time


def open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to the SQLite file at ``path``.

    Raises:
        FileNotFoundError: no such file (``mode=ro`` would otherwise report a vague error).
    """
    if not path.is_file():
        raise FileNotFoundError(f"no stats database at {path}")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    conn.execute("PRAGMA query_only=ON")
    return conn


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_time(text)
    except BadTimeValue:
        return time.time() - parse_duration(text)


def _report(args: argparse.Namespace) -> int:
    try:
        since = _since(args.since)
    except BadTimeValue as exc:
        print(f"spool stats report: {exc}", file=sys.stderr)
        return 2
    sql = "SELECT m.path, s.ts, s.value FROM sample s JOIN metric m ON m.id = s.metric_id"
    where: list[str] = []
    params: list[object] = []
    if since is not None:
        where.append("s.ts >= ?")
        params.append(since)
    if args.metric:
        where.append("(m.path = ? OR substr(m.path, 1, ?) = ?)")
        prefix = args.metric.rstrip("/") + "/"
        params.extend([args.metric, len(prefix), prefix])
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY m.path, s.ts"
    with open_read_only(Path(args.db)) as conn:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["metric", "time", "value"])
        for path, ts, value in conn.execute(sql, params):
            writer.writerow([path, format_time(ts), repr(float(value))])
    return 0


def _query(args: argparse.Namespace) -> int:
    with open_read_only(Path(args.db)) as conn:
        try:
            cursor = conn.execute(args.sql)
        except sqlite3.Error as exc:
            print(f"spool stats query: {exc}", file=sys.stderr)
            return 2
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([d[0] for d in cursor.description or ()])
        writer.writerows(cursor)
    return 0


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.stats_func(args))
    except FileNotFoundError as exc:
        print(f"spool stats: {exc}", file=sys.stderr)
        return 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``spool stats report`` and ``spool stats query`` (handler in ``args.func``)."""
    stats = subparsers.add_parser("stats", help="read the statistics database (CSV)")
    commands = stats.add_subparsers(dest="stats_command", required=True)

    report = commands.add_parser("report", help="dump samples as CSV")
    report.add_argument("db", help="the stats database file (Admin/FileName)")
    report.add_argument("--since", help="time or duration ago (e.g. 20240501T000000Z, 1h)")
    report.add_argument("--metric", help="a metric path, or a prefix such as clients/feed")
    report.set_defaults(func=_run, stats_func=_report)

    query = commands.add_parser("query", help="run read-only SQL, print CSV")
    query.add_argument("db", help="the stats database file (Admin/FileName)")
    query.add_argument("sql", help='e.g. "SELECT path FROM metric"')
    query.set_defaults(func=_run, stats_func=_query)
