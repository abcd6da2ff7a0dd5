"""The ``spool`` command.

``spool serve`` runs an instance; ``spool publish`` / ``spool subscribe`` / ``spool sow URL
TOPIC`` / ``spool sow-delete`` are small clients;
``spool journal ...``, ``spool sow ...``, ``spool stats ...``, ``spool pipeline ...`` and
``spool passwd`` come from their subsystems; ``spool ops`` prints an operations file.

Exit codes: 0 success, 1 the broker refused (failure ack; the reason is printed),
2 usage or configuration error, 3 cannot connect / connection lost, 4 (``serve``) the data
directory is in use by another instance (its pid and address are printed).

Each subcommand imports what it needs when it runs (not to dodge an import cycle: there is
none, lint-imports keeps it so), so that ``spool publish`` starts without loading the
broker, SQLAlchemy or the web stack.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import importlib
import io
import os
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson

from spool.server import __version__, speedups
from spool.server.protocol.errors import ProtocolFailure

if TYPE_CHECKING:  # annotations only: each subcommand imports what it runs when it runs
    from spool.server.clock import Clock
    from spool.server.config import Config
    from spool.server.eventlog import ConsoleFormat
    from spool.server.txlog import FileSeam

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_IN_USE = 4


def _host_port(text: str) -> tuple[str, int]:
    from spool.server.config import InetAddrError, parse_inet_addr

    try:
        return parse_inet_addr(text)
    except InetAddrError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


# -- serve -------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    # `kill -USR1 <pid>` writes every thread's Python stack to stderr: how an operator (or
    # a test harness whose SIGTERM went unanswered) sees where a stuck instance is
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    config = serve_config(args)
    if config is None:
        return EXIT_USAGE
    return serve_locked(config, args, files=None)


def serve_config(args: argparse.Namespace) -> Config | None:
    """The configuration ``spool serve`` runs with (its file or the embedded default, with
    ``--listen`` and ``--data-dir``); None, the error printed, when it is refused."""
    from spool.server.config import ConfigError, default_config, load_config, with_overrides

    if args.config and args.config_file and args.config != args.config_file:
        print(
            f"spool: two configuration files ({args.config_file} and --config "
            f"{args.config}): give one",
            file=sys.stderr,
        )
        return None
    path = args.config or args.config_file
    try:
        config = load_config(path) if path else default_config()
        return with_overrides(
            config, listen=args.listen, data_dir=Path(args.data_dir) if args.data_dir else None
        )
    except ConfigError as exc:
        print(f"spool: {exc}", file=sys.stderr)
        return None


def serve_locked(
    config: Config,
    args: argparse.Namespace,
    *,
    files: FileSeam | None,
    clock: Clock | None = None,
) -> int:
    """Take the data directory's lock, then serve until a signal (``spool serve``).

    The lock comes before anything touches a file of the instance (server/datalock.py);
    a second instance on the same directories exits with :data:`EXIT_IN_USE`.
    ``files`` is the transaction log's file seam (None: the real one; the fault tests'
    launcher passes one that injects failures); ``clock`` the broker's time source
    (None: the system's; the same launcher passes one whose wall clock jumps).
    """
    from spool.server.datalock import DataDirectoryInUse, DataDirectoryLock

    try:
        lock = DataDirectoryLock.acquire(config)
    except DataDirectoryInUse as exc:
        print(f"spool: {exc}", file=sys.stderr)
        return EXIT_IN_USE
    try:
        # The CLI is the composition root: it is the one place in server/ that starts the
        # web layer, and it does so by name so the package dependency still points down.
        serve = importlib.import_module("spool.web.serve")
        code: int = serve.run(
            config, port_file=Path(args.port_file) if args.port_file else None,
            log_level=args.log_level, log_format=_log_format(args.log_format), lock=lock,
            files=files, clock=clock,
        )  # fmt: skip
        return code
    finally:
        lock.release()


def _log_format(asked: str) -> ConsoleFormat:
    """``--log-format``: ``auto`` is text for a person at a terminal, JSON lines for
    whatever collects stderr otherwise."""
    if asked == "text" or (asked == "auto" and sys.stderr.isatty()):
        return "text"
    return "json"


# -- publish / subscribe -----------------------------------------------------------------


class UsageError(Exception):
    """A command line that cannot work (printed, exit code 2)."""


#: the websocket path a broker serves its clients at unless configured otherwise
CLIENT_PATH = "/amps/json"


def broker_url(text: str) -> str:
    """The websocket URL a client command connects to, from what a user may type: a
    ``ws://`` or ``wss://`` URL as it is, ``http://`` / ``https://`` as ``ws://`` /
    ``wss://``, or ``HOST:PORT`` as ``ws://HOST:PORT``; with no path, the clients' path
    (:data:`CLIENT_PATH`).

    Raises:
        UsageError: anything else (one line saying what is expected).
    """
    from urllib.parse import urlsplit

    expected = (
        f"{text!r} is not a broker address: give ws://HOST:PORT{CLIENT_PATH} (wss:// with "
        "TLS), an http:// or https:// URL of the broker, or HOST:PORT"
    )
    given = text.strip()
    scheme, sep, rest = given.partition("://")
    if not sep:
        scheme, rest = "ws", given
    scheme = {"http": "ws", "https": "wss"}.get(scheme.lower(), scheme.lower())
    if scheme not in ("ws", "wss"):
        raise UsageError(expected)
    try:
        parts = urlsplit(f"{scheme}://{rest}")
        port = parts.port
    except ValueError:
        raise UsageError(expected) from None
    if not parts.hostname or (not sep and port is None):
        raise UsageError(expected)  # a bare word is a forgotten URL, not a host
    path = parts.path if parts.path not in ("", "/") else CLIENT_PATH
    return parts._replace(path=path, fragment="").geturl()


def _client_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Credentials and TLS of ``spool publish`` / ``subscribe``.

    A ``wss://`` URL verifies the broker's certificate: against ``--cafile`` when given,
    else the system's CAs. ``--cert`` / ``--key`` present a client certificate (mutual
    TLS). ``--insecure`` skips verification (tests with throwaway certificates only).

    Raises:
        UsageError: TLS options with a ``ws://`` URL.
    """
    from spool.server.client import ClientError, client_context

    password = args.password or os.environ.get("SPOOL_PASSWORD")
    kwargs: dict[str, Any] = {"user_id": args.user, "password": password}
    tls_options = args.cafile or args.cert or args.key or args.insecure
    if not args.url.lower().startswith("wss://"):
        if tls_options:
            raise UsageError("--cafile, --cert, --key and --insecure need a wss:// URL")
        return kwargs
    if args.insecure:
        print(
            "spool: --insecure: the broker's certificate is NOT verified (tests only)",
            file=sys.stderr,
        )
    try:
        kwargs["ssl"] = client_context(
            cafile=args.cafile, certfile=args.cert, keyfile=args.key, insecure=args.insecure
        )
    except ClientError as exc:
        raise UsageError(str(exc)) from exc
    return kwargs


async def _publish(args: argparse.Namespace) -> int:
    from spool.server.client import Client

    name = args.name or f"spool-publish-{os.getpid()}"
    client = Client(args.url, name, **_client_kwargs(args))
    await client.connect()
    try:
        last = count = 0
        if args.data == "-":
            # Whatever stdin has ready, split into lines, goes out as one batch
            # (publish_many: one encoding pass, one frame); a partial last line waits.
            loop = asyncio.get_running_loop()
            stdin = cast(io.BufferedReader, sys.stdin.buffer)
            pending = b""
            while True:
                chunk = await loop.run_in_executor(None, stdin.read1, 1 << 20)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                bodies = [ln.rstrip(b"\r") for ln in lines if ln.rstrip(b"\r")]
                if bodies:
                    last = client.publish_many(args.topic, bodies, persisted=True)
                    count += len(bodies)
            if pending.rstrip(b"\r"):
                last = client.publish(args.topic, pending.rstrip(b"\r"), persisted=True)
                count += 1
        else:
            data = args.data if args.data is not None else ""
            last = client.publish(args.topic, data.encode(), persisted=True)
            count = 1
        await client.flush(timeout=args.timeout)
        if client.failures:
            f = client.failures[0]
            print(f"spool: publish failed: {f.reason}", file=sys.stderr)
            return EXIT_REFUSED
        if not args.quiet:
            print(_published(count, args.topic, args.url, name, last))
        return EXIT_OK
    finally:
        await client.close()


def _published(count: int, topic: str, url: str, name: str, last: int) -> str:
    """What ``spool publish`` says it did."""
    if not count:
        return f"published nothing to {topic}: stdin had no lines"
    plural = "" if count == 1 else "s"
    return (
        f"published {count} message{plural} to {topic} at {url}, persisted "
        f"(client {name!r}, last sequence {last})"
    )


async def _subscribe(args: argparse.Namespace) -> int:
    from spool.server.client import Client

    name = args.name or f"spool-subscribe-{os.getpid()}"
    client = Client(args.url, name, **_client_kwargs(args))
    await client.connect()
    try:
        sub = await client.subscribe(
            args.topic, filter=args.filter, bookmark=args.bookmark, options=args.options
        )
        count = 0
        out = sys.stdout.buffer
        # A batch at a time (the deliveries of one frame): one write and flush per batch.
        async for batch in sub.batches():
            if args.count:
                batch = batch[: args.count - count]
            if args.json:
                lines = [
                    orjson.dumps(
                        {
                            "topic": msg.topic,
                            "bookmark": msg.bookmark,
                            "timestamp": msg.timestamp,
                            "data": msg.data.decode("utf-8", "replace"),
                        }
                    )
                    for msg in batch
                ]
            elif args.show_bookmark:
                lines = [(msg.bookmark or "").encode() + b"\t" + msg.data for msg in batch]
            else:
                lines = [msg.data for msg in batch]
            out.write(b"\n".join(lines) + b"\n")
            out.flush()
            count += len(batch)
            if args.count and count >= args.count:
                break
        return EXIT_OK
    finally:
        await client.close()


async def _sow(args: argparse.Namespace) -> int:
    from spool.server.client import Client

    name = args.name or f"spool-sow-{os.getpid()}"
    client = Client(args.url, name, **_client_kwargs(args))
    await client.connect()
    try:
        result = await client.sow(
            args.topic, filter=args.filter, top_n=args.top_n, orderby=args.orderby,
            bookmark=args.bookmark, batch_size=args.batch_size, timeout=args.timeout,
        )  # fmt: skip
        out = sys.stdout.buffer
        if args.json:
            lines = [
                orjson.dumps(
                    {
                        "topic": m.topic,
                        "key": m.key,
                        "bookmark": m.bookmark,
                        "data": m.data.decode("utf-8", "replace"),
                    }
                )
                for m in result.records
            ]
        elif args.show_key:
            lines = [(m.key or "").encode() + b"\t" + m.data for m in result.records]
        else:
            lines = [m.data for m in result.records]
        if lines:
            out.write(b"\n".join(lines) + b"\n")
        out.flush()
        if args.verbose:
            print(
                f"{result.returned} records returned of {result.matches} matching",
                file=sys.stderr,
            )
        return EXIT_OK
    finally:
        await client.close()


async def _sow_delete(args: argparse.Namespace) -> int:
    from spool.server.client import Client

    keys = None
    if args.keys is not None:
        keys = [k for k in args.keys.split(",") if k]
        if not keys:
            raise UsageError("--keys needs at least one key (K1,K2,...)")
    name = args.name or f"spool-sow-delete-{os.getpid()}"
    client = Client(args.url, name, **_client_kwargs(args))
    await client.connect()
    try:
        deleted = await client.sow_delete(
            args.topic, filter=args.filter, keys=keys, timeout=args.timeout
        )
        if args.json:
            print(orjson.dumps({"topic": args.topic, "records_deleted": deleted}).decode())
        else:
            plural = "" if deleted == 1 else "s"
            print(f"{deleted} record{plural} deleted from {args.topic}")
        return EXIT_OK
    finally:
        await client.close()


def _run_client(coro_fn: Any, args: argparse.Namespace) -> int:
    from spool.server.client import Disconnected

    try:
        args.url = broker_url(args.url)
        result: int = asyncio.run(coro_fn(args))
        return result
    except UsageError as exc:
        print(f"spool: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ProtocolFailure as exc:
        print(f"spool: refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except Disconnected as exc:
        print(f"spool: disconnected: {exc.reason or 'connection closed'}", file=sys.stderr)
        return EXIT_CONNECTION
    except ssl.SSLCertVerificationError as exc:
        print(
            f"spool: cannot connect to {args.url}: the broker's certificate is not trusted "
            f"({exc.verify_message}); give its CA with --cafile",
            file=sys.stderr,
        )
        return EXIT_CONNECTION
    except (OSError, TimeoutError) as exc:
        print(f"spool: cannot connect to {args.url}: {exc}", file=sys.stderr)
        return EXIT_CONNECTION
    except KeyboardInterrupt:
        return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    return _run_client(_publish, args)


def cmd_subscribe(args: argparse.Namespace) -> int:
    return _run_client(_subscribe, args)


def cmd_sow(args: argparse.Namespace) -> int:
    return _run_client(_sow, args)


def cmd_sow_delete(args: argparse.Namespace) -> int:
    return _run_client(_sow_delete, args)


def cmd_ops(args: argparse.Namespace) -> int:
    from spool.server import ops

    sys.stdout.write(ops.read(args.what))
    return EXIT_OK


# -- parser --------------------------------------------------------------------------------


def _client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "url",
        help="the broker: ws://127.0.0.1:9007/amps/json, wss://... (TLS), http(s)://HOST:PORT "
        "or HOST:PORT (the path defaults to /amps/json)",
    )
    p.add_argument("topic", help="topic (a regular expression for subscribe)")
    p.add_argument("--name", help="client name (default: spool-<command>-<pid>)")
    p.add_argument("--user", help="user id when the instance has Users")
    p.add_argument("--password", help="password or token (or env SPOOL_PASSWORD)")
    p.add_argument("--cafile", help="wss://: PEM CA bundle to verify the broker against")
    p.add_argument("--cert", help="wss://: client certificate (PEM) for mutual TLS")
    p.add_argument("--key", help="wss://: the client certificate's key (PEM)")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="wss://: do not verify the broker's certificate (tests only)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spool", description="Spool message broker")
    parser.add_argument(
        "--version",
        action="version",
        version=f"spool {__version__} (hot loops: {speedups.describe()})",
        help="print the version and whether the compiled hot loops are active",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "serve",
        help="run a broker instance",
        description="Run a broker instance (the embedded default without a configuration file).",
    )
    p.add_argument(
        "config_file", nargs="?", metavar="CONFIG", help="XML configuration file (as --config)"
    )
    p.add_argument("--config", help="XML configuration file (docs/configuration.md)")
    p.add_argument("--listen", type=_host_port, help="HOST:PORT for websocket + admin")
    p.add_argument("--data-dir", help="data directory (journals, stats, event log)")
    p.add_argument("--port-file", help="write the bound port to this file once listening")
    p.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn log level (the event log is separate)",
    )
    p.add_argument(
        "--log-format",
        default="auto",
        choices=["auto", "text", "json"],
        help="the event log on stderr: text on a terminal, JSON lines otherwise (auto), or "
        "as given; the event log file is JSON lines always",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("publish", help="publish one message, or lines from stdin with '-'")
    _client_args(p)
    p.add_argument("data", nargs="?", help="message body, or '-' to read lines from stdin")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for acks")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("subscribe", help="print messages of a topic")
    _client_args(p)
    p.add_argument("--filter", help='content filter, e.g. "/qty > 10"')
    p.add_argument("--bookmark", help="replay from: 0 (EPOCH), 0|1| (NOW), a bookmark, a time")
    p.add_argument("--options", help="subscribe options, e.g. rate=100,timestamp")
    p.add_argument("--count", type=int, default=0, help="exit after N messages")
    p.add_argument("--json", action="store_true", help="print JSON lines with metadata")
    p.add_argument("--show-bookmark", action="store_true", help="prefix lines with bookmark")
    p.set_defaults(func=cmd_subscribe)

    from spool.server.auth import register as register_auth
    from spool.server.pipeline.cli import register as register_pipeline
    from spool.server.sow.cli import register as register_sow
    from spool.server.stats.cli import register as register_stats
    from spool.server.txlog.cli import register as register_journal

    register_journal(sub)
    sow_commands = register_sow(sub)
    p = sow_commands.add_parser(
        "query",
        help="print the records of a SOW topic (spool sow URL TOPIC is short for this)",
    )
    _client_args(p)
    p.add_argument("--filter", help='content filter, e.g. "/qty > 10"')
    p.add_argument("--top-n", type=_positive, help="at most N records")
    p.add_argument("--orderby", help='sort, e.g. "/px DESC, /id"')
    p.add_argument("--bookmark", help="the state as of a bookmark or a time (historical)")
    p.add_argument("--batch-size", type=_positive, help="records per frame (bs)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the end")
    p.add_argument("--json", action="store_true", help="JSON lines with topic, key, bookmark")
    p.add_argument("--show-key", action="store_true", help="prefix lines with the SOW key")
    p.add_argument("-v", "--verbose", action="store_true", help="counts on stderr")
    p.set_defaults(func=cmd_sow)

    p = sub.add_parser("sow-delete", help="delete SOW records by filter or by keys")
    _client_args(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--filter", help='delete the records matching, e.g. "/px < 0"')
    which.add_argument("--keys", help="delete these keys: K1,K2,...")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the ack")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.set_defaults(func=cmd_sow_delete)
    register_stats(sub)
    register_auth(sub)
    register_pipeline(sub)

    p = sub.add_parser(
        "ops",
        help="print an operations file: Prometheus alert rules or a Grafana dashboard",
        description="Print an operations file shipped with the broker (docs/monitoring.md).",
    )
    from spool.server.ops import FILES

    p.add_argument(
        "what",
        choices=sorted(FILES),
        help="alerts: Prometheus alert rules (YAML); grafana: a dashboard to import (JSON)",
    )
    p.set_defaults(func=cmd_ops)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


#: ``spool sow`` words that are not a broker URL (``spool sow URL TOPIC`` means ``query``)
_SOW_WORDS = frozenset({"verify", "rebuild", "query", "-h", "--help"})


def _expand(argv: list[str]) -> list[str]:
    """``spool sow URL TOPIC ...`` is ``spool sow query URL TOPIC ...`` (the short form a
    query is usually typed in; ``verify`` and ``rebuild`` keep their names)."""
    if len(argv) >= 2 and argv[0] == "sow" and argv[1] not in _SOW_WORDS:
        return ["sow", "query", *argv[1:]]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_expand(list(sys.argv[1:] if argv is None else argv)))
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
