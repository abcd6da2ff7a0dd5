"""The options of the ``spool`` format, parsed and checked once.

Spark hands a data source its options as a case-insensitive map of strings. This module
turns them into typed values and refuses what it does not know: a misspelt option is an
error naming the options that exist, never silently ignored (docs/pipeline.md lists them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Literal

from spool.server.pipeline.errors import BadOption
from spool.server.pipeline.planner import DEFAULT_SLICE_BYTES

__all__ = [
    "READ_OPTIONS",
    "STREAM_OPTIONS",
    "WRITE_OPTIONS",
    "Mode",
    "ReadOptions",
    "StreamOptions",
    "WriteOptions",
    "parse_read",
    "parse_stream",
    "parse_write",
]

Mode = Literal["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]
_MODES: Final = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
_PIN_OWNER: Final = re.compile(r"[A-Za-z0-9_.:-]{1,200}")

#: what both a batch read and a stream take: where the journals are and how to read them
_SOURCE_OPTIONS: Final = ("path", "archive", "name", "mode", "partitionbytes", "batchrows")
READ_OPTIONS: Final = (
    *_SOURCE_OPTIONS,
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
)
STREAM_OPTIONS: Final = (
    *_SOURCE_OPTIONS,
    "adminurl",
    "admintoken",
    "pinowner",
    "startingoffsets",
    "startingtimestamp",
    "maxrecordspertrigger",
    "maxbytespertrigger",
    "failondataloss",
)
WRITE_OPTIONS: Final = (
    "url",
    "topic",
    "clientname",
    "user",
    "password",
    "batchsize",
    "timeout",
    "cafile",
    "certfile",
    "keyfile",
)
_SPELLING: Final = {
    "partitionbytes": "partitionBytes",
    "batchrows": "batchRows",
    "adminurl": "adminUrl",
    "admintoken": "adminToken",
    "pinowner": "pinOwner",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "maxrecordspertrigger": "maxRecordsPerTrigger",
    "maxbytespertrigger": "maxBytesPerTrigger",
    "failondataloss": "failOnDataLoss",
    "clientname": "clientName",
    "batchsize": "batchSize",
    "cafile": "caFile",
    "certfile": "certFile",
    "keyfile": "keyFile",
}


def _spelled(key: str) -> str:
    return _SPELLING.get(key, key)


def _check_known(options: Mapping[str, str], known: tuple[str, ...]) -> dict[str, str]:
    out = {str(k).lower(): str(v) for k, v in options.items()}
    for key in out:
        if key not in known:
            names = ", ".join(_spelled(k) for k in known)
            raise BadOption(key, out[key], f"not an option of the spool format (known: {names})")
    return out


def _int(opts: dict[str, str], key: str, default: int, low: int) -> int:
    text = opts.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadOption(_spelled(key), text, "expected an integer") from None
    if value < low:
        raise BadOption(_spelled(key), text, f"must be at least {low}")
    return value


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    text = opts.get(key)
    if text is None:
        return default
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise BadOption(_spelled(key), text, "expected true or false")


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Options of ``spark.read.format("spool")``.

    Attributes:
        journal_dir: the JournalDirectory (``load(path)``).
        archive_dir: the JournalArchiveDirectory (``archive``).
        name: the instance (``name``; default: the only one in the directories).
        mode: what damaged bytes become (``mode``).
        slice_bytes: most bytes per input partition (``partitionBytes``).
        batch_rows: most rows per Arrow batch (``batchRows``).
        starting, ending: the positions the read starts and ends at (``startingOffsets``,
            ``endingOffsets``; server/pipeline/positions.py); None: the whole log.
        ts_lo, ts_hi: records from ``ts_lo`` and before ``ts_hi``, microseconds
            (``startingTimestamp``, ``endingTimestamp``, given in milliseconds as Kafka's
            are); None: unbounded.
    """

    journal_dir: Path
    archive_dir: Path | None = None
    name: str | None = None
    mode: Mode = "PERMISSIVE"
    slice_bytes: int = DEFAULT_SLICE_BYTES
    batch_rows: int = 8192
    starting: str | None = None
    ending: str | None = None
    ts_lo: int | None = None
    ts_hi: int | None = None


def _read(opts: dict[str, str]) -> ReadOptions:
    path = opts.get("path")
    if not path:
        raise BadOption("path", path, 'give the journal directory: load("/path/to/journal")')
    mode = opts.get("mode", "PERMISSIVE").upper()
    if mode not in _MODES:
        raise BadOption("mode", opts["mode"], f"one of {', '.join(_MODES)}")
    archive = opts.get("archive")
    return ReadOptions(
        journal_dir=Path(path),
        archive_dir=Path(archive) if archive else None,
        name=opts.get("name") or None,
        mode=mode,  # type: ignore[arg-type]
        slice_bytes=_int(opts, "partitionbytes", DEFAULT_SLICE_BYTES, 1),
        batch_rows=_int(opts, "batchrows", 8192, 1),
    )


def _millis(opts: dict[str, str], key: str) -> int | None:
    """A ``...Timestamp`` option: milliseconds since the epoch, as microseconds."""
    text = opts.get(key)
    if text is None:
        return None
    try:
        return int(text) * 1000
    except ValueError:
        raise BadOption(
            _spelled(key), text, "milliseconds since the Unix epoch (as Kafka's options)"
        ) from None


def _one_start(opts: dict[str, str], *, ending: bool) -> None:
    """A range starts (and ends) by an offset or by a timestamp, not both."""
    for offsets, stamp in (("startingoffsets", "startingtimestamp"),) + (
        (("endingoffsets", "endingtimestamp"),) if ending else ()
    ):
        if offsets in opts and stamp in opts:
            raise BadOption(
                _spelled(stamp),
                opts[stamp],
                f"give {_spelled(offsets)} or {_spelled(stamp)}, not both",
            )


def parse_read(options: Mapping[str, str]) -> ReadOptions:
    """The options of a batch read.

    Raises:
        BadOption: unknown option, missing path, bad value, an end given twice.
    """
    opts = _check_known(options, READ_OPTIONS)
    _one_start(opts, ending=True)
    return replace(
        _read(opts),
        starting=opts.get("startingoffsets"),
        ending=opts.get("endingoffsets"),
        ts_lo=_millis(opts, "startingtimestamp"),
        ts_hi=_millis(opts, "endingtimestamp"),
    )


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Options of ``spark.readStream.format("spool")`` (the read options, and:).

    Attributes:
        read: the batch read options.
        admin_url: the instance's admin address (``http://127.0.0.1:8085``): the durable
            point and retention pins come from it. None: files only (see docs/pipeline.md).
        admin_token: bearer token for the admin API when the instance has users.
        pin_owner: name of the retention pin of this query (required with ``adminUrl``).
        starting: ``earliest``, ``latest``, a seq, a bookmark or a time
            (``startingOffsets``).
        starting_ts: start at the first record at or after this time, microseconds
            (``startingTimestamp``, given in milliseconds); None: ``starting`` decides.
        max_records: most records per micro-batch (None: all available).
        max_bytes: about the most journal bytes per micro-batch, in whole index blocks
            and at least one (``maxBytesPerTrigger``; None: no such limit).
        fail_on_data_loss: raise when needed records were removed (else skip ahead).
    """

    read: ReadOptions
    admin_url: str | None = None
    admin_token: str | None = None
    pin_owner: str | None = None
    starting: str = "earliest"
    starting_ts: int | None = None
    max_records: int | None = None
    max_bytes: int | None = None
    fail_on_data_loss: bool = True


def parse_stream(options: Mapping[str, str]) -> StreamOptions:
    """The options of a streaming read.

    Raises:
        BadOption: unknown option, missing path, bad value, ``adminUrl`` without
            ``pinOwner``.
    """
    opts = _check_known(options, STREAM_OPTIONS)
    url = opts.get("adminurl") or None
    owner = opts.get("pinowner") or None
    if url is not None and owner is None:
        raise BadOption(
            "pinOwner",
            None,
            "required with adminUrl: a name unique to this query and stable across its "
            "restarts (e.g. its checkpoint's name); the instance keeps the journals the "
            "query still needs under it",
        )
    if owner is not None and not _PIN_OWNER.fullmatch(owner):
        raise BadOption("pinOwner", owner, "1 to 200 letters, digits, '_', '.', ':' or '-'")
    if owner is not None and url is None:
        raise BadOption("pinOwner", owner, "needs adminUrl (pins are taken over REST)")
    _one_start(opts, ending=False)
    max_records = opts.get("maxrecordspertrigger")
    max_bytes = opts.get("maxbytespertrigger")
    if max_records and max_bytes:
        raise BadOption(
            "maxBytesPerTrigger",
            max_bytes,
            "give maxRecordsPerTrigger or maxBytesPerTrigger, not both",
        )
    return StreamOptions(
        read=_read(opts),
        admin_url=url.rstrip("/") if url else None,
        admin_token=opts.get("admintoken") or None,
        pin_owner=owner,
        starting=opts.get("startingoffsets", "earliest"),
        starting_ts=_millis(opts, "startingtimestamp"),
        max_records=_int(opts, "maxrecordspertrigger", 0, 1) if max_records else None,
        max_bytes=_int(opts, "maxbytespertrigger", 0, 1) if max_bytes else None,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
    )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Options of ``df.write.format("spool")``.

    Attributes:
        url: the broker's websocket URL (``ws://127.0.0.1:9007/amps/json``).
        topic: topic of rows without a ``topic`` column (or where it is NULL).
        client_name: prefix of the per-partition client names; give it to make a rerun of
            the same job exactly-once too (default: unique per write).
        user, password: credentials when the instance has users.
        batch_size: publishes sent before waiting for their persisted acks.
        timeout: seconds to wait for acks.
        ca_file: ``wss://``: PEM CA bundle the broker's certificate is verified against
            (default: the system's; the certificate is always verified).
        cert_file, key_file: ``wss://``: a client certificate (mutual TLS).
    """

    url: str
    topic: str | None = None
    client_name: str | None = None
    user: str | None = None
    password: str | None = None
    batch_size: int = 10_000
    timeout: float = 60.0
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    """The options of a write.

    Raises:
        BadOption: unknown option, missing url, bad value.
    """
    opts = _check_known(options, WRITE_OPTIONS)
    url = opts.get("url")
    if not url or not url.startswith(("ws://", "wss://")):
        raise BadOption(
            "url", url, "the broker's websocket URL, e.g. ws://127.0.0.1:9007/amps/json"
        )
    timeout = opts.get("timeout")
    try:
        seconds = float(timeout) if timeout else 60.0
    except ValueError:
        raise BadOption("timeout", timeout, "seconds, e.g. 60") from None
    tls = {k: opts[k] for k in ("cafile", "certfile", "keyfile") if opts.get(k)}
    if tls and not url.startswith("wss://"):
        raise BadOption(_spelled(next(iter(tls))), next(iter(tls.values())), "needs a wss:// url")
    return WriteOptions(
        ca_file=tls.get("cafile"),
        cert_file=tls.get("certfile"),
        key_file=tls.get("keyfile"),
        url=url,
        topic=opts.get("topic") or None,
        client_name=opts.get("clientname") or None,
        user=opts.get("user") or None,
        password=opts.get("password") or None,
        batch_size=_int(opts, "batchsize", 10_000, 1),
        timeout=seconds,
    )
