"""``spool sow``: check SOW files, and rebuild them from the transaction log.

::

    spool sow verify DIR [--json]
    spool sow rebuild --config FILE [--topic TOPIC] [--json]

``verify`` reads every ``*.sow`` file of ``DIR`` (the ``DataDirectory`` or its ``sow``
directory) and reports, per file, its topic, records, the last log sequence it holds, and
where its readable part ends when it does not reach the end of the file. It only reads:
it is safe on a running broker's files. Exit code 0 when every file is clean, 1 when one
is damaged (the broker repairs it at start: it keeps the readable part and replays the
rest from the log), 2 when nothing could be checked.

``rebuild`` writes the file of every persistent SOW topic the transaction log records
(or of one ``--topic``) anew from the log, as the broker would rebuild a missing file,
for an operator who wants a file made before starting the broker. Run it with the broker
stopped: it replaces files the broker writes. Journals are read, never written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

import orjson

from spool.server.config import ConfigError, SowTopicConfig, load_config
from spool.server.sow.filestore import read_sow_file, write_sow_file
from spool.server.sow.history import LogApplier
from spool.server.sow.keys import KeySpec
from spool.server.sow.memory import MemoryStore
from spool.server.sow.registry import sow_file_name
from spool.server.txlog.cli import iter_file_records
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import FLAG_RELEASED, Record, RecordKind
from spool.server.txlog.storage.files import parse_name

__all__ = ["cmd_rebuild", "cmd_verify", "register"]

_EXIT_OK, _EXIT_DAMAGE, _EXIT_ERROR = 0, 1, 2
#: records handed to the applier at once
_BATCH = 4096


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """Add ``sow`` with ``verify`` and ``rebuild`` to the ``spool`` command; returns its
    subcommands (server/cli.py adds ``query``, the client command, there)."""
    sow = subparsers.add_parser(
        "sow",
        help="query a SOW topic (spool sow URL TOPIC); check and rebuild SOW files",
        description=(
            "spool sow URL TOPIC [...] queries a running broker (short for spool sow query); "
            "verify and rebuild work on the files."
        ),
    )
    sub = sow.add_subparsers(dest="sow_command", required=True)

    verify = sub.add_parser("verify", help="check every SOW file of a directory")
    verify.add_argument("dir", type=Path, help="the DataDirectory, or its sow directory")
    verify.add_argument("--json", action="store_true", help="JSON lines")
    verify.set_defaults(func=cmd_verify)

    rebuild = sub.add_parser("rebuild", help="write SOW files anew from the transaction log")
    rebuild.add_argument("--config", type=Path, required=True, help="the instance's XML file")
    rebuild.add_argument("--topic", help="only this topic (default: every persistent one)")
    rebuild.add_argument("--json", action="store_true", help="JSON lines")
    rebuild.add_argument(
        "--skip-fenced",
        action="store_true",
        help="go on past fenced (damaged, not yet repaired) records instead of stopping",
    )
    rebuild.set_defaults(func=cmd_rebuild)
    return sub


def _emit(out: TextIO, as_json: bool, obj: dict[str, object], text: str) -> None:
    out.write((orjson.dumps(obj).decode() if as_json else text) + "\n")


def cmd_verify(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``spool sow verify DIR``."""
    out = out or sys.stdout
    directory: Path = args.dir
    if (directory / "sow").is_dir():
        directory = directory / "sow"
    files = sorted(directory.glob("*.sow")) if directory.is_dir() else []
    if not files:
        print(f"spool: no SOW files in {directory}", file=sys.stderr)
        return _EXIT_ERROR
    code = _EXIT_OK
    for path in files:
        try:
            read = read_sow_file(path)
        except OSError as exc:
            _emit(out, args.json, {"file": str(path), "error": str(exc)}, f"{path}: {exc}")
            code = _EXIT_DAMAGE
            continue
        if read.header is None:
            _emit(out, args.json, {"file": str(path), "status": "unusable", "reason": read.reason},
                  f"{path}: not usable ({read.reason})")  # fmt: skip
            code = _EXIT_DAMAGE
            continue
        damage = read.damage
        obj: dict[str, object] = {
            "file": str(path),
            "topic": read.header.topic,
            "key_paths": list(read.header.keys),
            "status": "damaged" if damage else "clean",
            "records": len(read.records),
            "file_seq": read.file_seq,
            "bytes": read.size,
            "readable_bytes": read.valid_end,
            "damage_offset": damage.offset if damage else None,
            "damage": damage.reason if damage else None,
        }
        text = (
            f"{path.name}: topic {read.header.topic!r}, {len(read.records)} records, "
            f"log seq {read.file_seq}, {read.size} bytes: "
            + (f"damaged at offset {damage.offset} ({damage.reason})" if damage else "clean")
        )
        _emit(out, args.json, obj, text)
        if damage is not None:
            code = _EXIT_DAMAGE
    return code


def _journals(config_dirs: list[Path], instance: str) -> list[Path]:
    """The instance's journal files (active and archived), oldest first."""
    found: dict[int, Path] = {}
    for directory in config_dirs:
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            parsed = parse_name(path.name, instance)
            if parsed is not None and parsed.kind == "journal":
                found.setdefault(parsed.base, path)
    return [found[base] for base in sorted(found)]


def cmd_rebuild(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``spool sow rebuild --config FILE [--topic T]``."""
    out = out or sys.stdout
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"spool: {exc}", file=sys.stderr)
        return _EXIT_ERROR
    tl = config.transaction_log
    if tl is None:
        print("spool: the configuration has no transaction log to rebuild from", file=sys.stderr)
        return _EXIT_ERROR
    only: str | None = args.topic

    def rule_of(topic: str) -> SowTopicConfig | None:
        if only is not None and topic != only:
            return None
        rule = config.sow_topic(topic)
        return rule if rule is not None and rule.persistent and tl.records(topic) else None

    specs: dict[str, KeySpec] = {}

    def spec_of(rule: SowTopicConfig) -> KeySpec:
        return specs.setdefault(rule.name, KeySpec(rule.name, rule.keys))

    stores: dict[str, MemoryStore] = {}

    def store_of(topic: str, rule: SowTopicConfig) -> MemoryStore:
        return stores.setdefault(topic, MemoryStore(topic))

    applier = LogApplier(rule_of, spec_of, store_of)
    journals = _journals([tl.journal_directory, tl.archive_directory], config.name)
    first_seq = 0
    last_seq = 0
    pending: list[Record] = []
    fenced = 0
    try:
        for path in journals:
            for _, rec in iter_file_records(path):
                if not first_seq:
                    first_seq = rec.seq
                last_seq = rec.seq
                if rec.kind is RecordKind.LOST:
                    if rec.flags & FLAG_RELEASED:
                        continue
                    if not args.skip_fenced:
                        print(
                            f"spool: seq {rec.seq} of {path.name} is fenced: a damaged record "
                            "waiting for a repair from a replication peer; repair it first, "
                            "or rebuild without it with --skip-fenced",
                            file=sys.stderr,
                        )
                        return _EXIT_DAMAGE
                    fenced += 1
                    continue
                pending.append(rec)
                if len(pending) >= _BATCH:
                    applier.apply(RecordBatch.from_records(pending))
                    pending = []
    except CorruptRecord as exc:
        # recovery at start cuts the log here too: what follows is not part of it
        print(f"spool: the log ends at damage: {exc}", file=sys.stderr)
    except OSError as exc:
        print(f"spool: cannot read the journals: {exc}", file=sys.stderr)
        return _EXIT_ERROR
    if pending:  # the records read before the end of the log (or its damage)
        applier.apply(RecordBatch.from_records(pending))
    if only is not None and rule_of(only) is not None and only not in stores:
        stores[only] = MemoryStore(only)  # a topic with nothing logged gets an empty file
    if first_seq > 1:
        print(f"spool: the log starts at seq {first_seq} (older journals were removed): "
              "the rebuilt state lacks what they held", file=sys.stderr)  # fmt: skip
    if fenced:
        print(f"spool: {fenced} fenced (damaged) records were skipped: the rebuilt state "
              "lacks them", file=sys.stderr)  # fmt: skip
    directory = config.data_directory / "sow"
    directory.mkdir(parents=True, exist_ok=True)
    for topic in sorted(stores):
        store = stores[topic]
        rule = rule_of(topic)
        assert rule is not None
        path = directory / sow_file_name(config.name, topic)
        size = write_sow_file(path, topic, rule.keys, last_seq, store.records())
        _emit(out, args.json,
              {"topic": topic, "file": str(path), "records": len(store), "file_seq": last_seq,
               "bytes": size},
              f"{path.name}: topic {topic!r}, {len(store)} records up to log seq {last_seq}")  # fmt: skip
    if not stores:
        print("spool: no persistent SOW topic recorded in the log", file=sys.stderr)
        return _EXIT_ERROR
    return _EXIT_OK
