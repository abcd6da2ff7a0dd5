"""``spool journal``: dump, verify and search transaction-log files.

::

    spool journal dump FILE [--from BOOKMARK|TIME] [--topic T] [--limit N] [--json]
    spool journal verify DIR [--name NAME] [--archive DIR] [--json]
    spool journal find BOOKMARK|TIME --dir DIR [--name NAME] [--archive DIR] [--json]

All three only read: they are safe on the directory of a running broker. ``verify``
checks every record of every journal (ignoring indexes), reads each journal past its
damage (server/txlog/damage/salvage.py) to list every damaged range with the local sequences it
held, and reports exactly what recovery would do; its exit code is 0 when clean, 1 when
damage was found, 2 when the log cannot be opened at all (a missing journal in the
middle, no journals...).
Output is human-readable by default, JSON lines with ``--json``.

Bookmarks are ``PUBHASH|PUBSEQ|``; times are ``YYYYmmddTHHMMSS[.ffffff][Z]`` (UTC) as in
docs/protocol.md.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import orjson

from spool.server.bookmarks import format_bookmark
from spool.server.txlog.damage.ranges import DamagedRange
from spool.server.txlog.damage.salvage import ranges_of, salvage
from spool.server.txlog.errors import CorruptRecord, JournalSequenceGap, TxlogError
from spool.server.txlog.format.codec import decode_records, record_size
from spool.server.txlog.format.record import FLAG_RELEASED, Record, RecordKind
from spool.server.txlog.recovery.discovery import discover
from spool.server.txlog.recovery.recover import Recovery, recover
from spool.server.txlog.storage.files import discover_instances, parse_name
from spool.server.txlog.storage.journal import Journal
from spool.server.txlog.storage.search import plan_bookmark, plan_time, search_span
from spool.server.txlog.storage.source import WINDOW, RecordWindows, open_source

__all__ = ["iter_file_records", "parse_position", "register"]

_ALL = 1 << 62
_EXIT_OK, _EXIT_DAMAGE, _EXIT_ERROR = 0, 1, 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``journal`` with ``dump``, ``verify`` and ``find`` to the ``spool`` command."""
    journal = subparsers.add_parser("journal", help="inspect transaction-log journals")
    sub = journal.add_subparsers(dest="journal_command", required=True)

    dump = sub.add_parser("dump", help="print the records of one journal file")
    dump.add_argument("file", type=Path, help="a .journal, .journal.zst or .journal.gz file")
    dump.add_argument(
        "--from", dest="start", metavar="BM|TIME", help="start at this bookmark or time"
    )
    dump.add_argument("--topic", help="only records of this topic")
    dump.add_argument("--limit", type=int, default=0, help="stop after N records (0: all)")
    dump.add_argument("--json", action="store_true", help="JSON lines")
    dump.set_defaults(func=cmd_dump)

    verify = sub.add_parser("verify", help="check every record of an instance's journals")
    verify.add_argument("dir", type=Path, help="the JournalDirectory")
    verify.add_argument("--name", help="instance name (default: the only one in DIR)")
    verify.add_argument("--archive", type=Path, help="the JournalArchiveDirectory, if any")
    verify.add_argument("--json", action="store_true", help="JSON lines")
    verify.set_defaults(func=cmd_verify)

    find = sub.add_parser("find", help="locate a record by bookmark or time")
    find.add_argument("position", metavar="BOOKMARK|TIME")
    find.add_argument("--dir", type=Path, required=True, help="the JournalDirectory")
    find.add_argument("--name", help="instance name (default: the only one in DIR)")
    find.add_argument("--archive", type=Path, help="the JournalArchiveDirectory, if any")
    find.add_argument("--json", action="store_true", help="JSON lines")
    find.set_defaults(func=cmd_find)


def parse_position(text: str) -> tuple[int, int] | int:
    """A bookmark ``H|S|`` as ``(pub_hash, pub_seq)``, or a time as microseconds (UTC).

    Raises:
        ValueError: neither form.
    """
    text = text.strip()
    if "|" in text:
        parts = text.rstrip("|").split("|")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"bad bookmark {text!r} (expected PUBHASH|PUBSEQ|)")
        return int(parts[0]), int(parts[1])
    raw = text[:-1] if text.endswith("Z") else text
    for fmt in ("%Y%m%dT%H%M%S.%f", "%Y%m%dT%H%M%S"):
        try:
            moment = datetime.strptime(raw, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        return _us(moment)
    raise ValueError(f"bad position {text!r} (expected PUBHASH|PUBSEQ| or YYYYmmddTHHMMSS[Z])")


def _us(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _time(ts: int) -> str:
    return (_EPOCH + timedelta(microseconds=ts)).strftime("%Y%m%dT%H%M%S.%fZ")


def iter_file_records(path: Path, *, window: int = WINDOW) -> Iterator[tuple[int, Record]]:
    """``(offset, record)`` of every record of one journal file, plain or compressed.

    Stops at the end of data (the zeros of a preallocated journal), wherever the read
    windows of ``window`` bytes fall (:class:`~spool.server.txlog.storage.source.RecordWindows`).

    Raises:
        CorruptRecord: at the first damaged record, or a torn one at the end of the file
            (after yielding every record before it).
        OSError: the file cannot be read.
    """
    parsed = parse_name(path.name)
    compression = parsed.compression if parsed is not None else _guess(path)
    source = open_source(path, compression)
    windows = RecordWindows(source, window=window)
    try:
        seq = parsed.base if parsed is not None and parsed.kind == "journal" else None
        while (buf := windows.read()) is not None:
            base = windows.offset
            if seq is None:
                seq = int.from_bytes(buf[8:16], "little")
            damage: CorruptRecord | None = None
            try:
                records, stop = decode_records(
                    buf, 0, len(buf), seq, max_count=_ALL, max_bytes=_ALL
                )
            except CorruptRecord as exc:  # the records before the damage are still shown
                damage = CorruptRecord(base + exc.offset, exc.reason, str(path))
                records, stop = decode_records(
                    buf, 0, exc.offset, seq, max_count=_ALL, max_bytes=_ALL
                )
            off = 0
            for rec in records:
                yield base + off, rec
                off += record_size(buf, off)
            if damage is not None:
                raise damage
            seq += len(records)
            windows.advance(stop)
        if windows.reason not in (None, "end of data"):
            raise CorruptRecord(windows.offset, str(windows.reason), str(path))
    finally:
        source.retire()


def _guess(path: Path) -> Any:
    if path.name.endswith(".zst"):
        return "zstd"
    if path.name.endswith(".gz"):
        return "gzip"
    return None


def _record_json(offset: int, rec: Record) -> dict[str, object]:
    out: dict[str, object] = {
        "seq": rec.seq,
        "offset": offset,
        "timestamp": _time(rec.timestamp_us),
        "timestamp_us": rec.timestamp_us,
        "bookmark": rec.bookmark,
        "topic": rec.topic,
        "message_type": rec.message_type,
        "kind": rec.kind.name.lower(),
        "path": list(rec.path),
        "flags": rec.flags,
        "corr_id": rec.corr_id,
        "sow_key": rec.sow_key,
    }
    try:
        out["body"] = rec.body.decode()
    except UnicodeDecodeError:
        out["body_base64"] = base64.b64encode(rec.body).decode()
    return out


def _emit(out: TextIO, obj: dict[str, object]) -> None:
    out.write(orjson.dumps(obj).decode() + "\n")


def cmd_dump(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``spool journal dump``."""
    out = out or sys.stdout
    start: tuple[int, int] | int | None = None
    if args.start:
        try:
            start = parse_position(args.start)
        except ValueError as exc:
            print(f"spool journal dump: {exc}", file=sys.stderr)
            return _EXIT_ERROR
    started = start is None
    shown = 0
    fenced: list[list[int]] = []  # runs of placeholders of damaged records
    try:
        for offset, rec in iter_file_records(args.file):
            if rec.kind is RecordKind.LOST:
                if not rec.flags & FLAG_RELEASED:
                    if fenced and fenced[-1][1] == rec.seq - 1:
                        fenced[-1][1] = rec.seq
                    else:
                        fenced.append([rec.seq, rec.seq])
                continue
            if not started:
                if isinstance(start, tuple):
                    started = (rec.pub_hash, rec.pub_seq) == start
                else:
                    started = start is not None and rec.timestamp_us >= start
                if not started:
                    continue
            if args.topic is not None and rec.topic != args.topic:
                continue
            if args.json:
                _emit(out, _record_json(offset, rec))
            else:
                body = rec.body[:120].decode(errors="replace")
                more = "..." if len(rec.body) > 120 else ""
                out.write(
                    f"{rec.seq:>10} {_time(rec.timestamp_us)} {rec.bookmark:<28} "
                    f"{rec.kind.name.lower():<13} {rec.topic} [{len(rec.body)}B] {body}{more}\n"
                )
            shown += 1
            if args.limit and shown >= args.limit:
                break
    except CorruptRecord as exc:
        print(f"spool journal dump: {exc}", file=sys.stderr)
        return _EXIT_DAMAGE
    except OSError as exc:
        print(f"spool journal dump: {exc}", file=sys.stderr)
        return _EXIT_ERROR
    for first, last in fenced:
        print(
            f"spool journal dump: seqs {first}..{last} are fenced: damaged records waiting "
            "for a repair from a replication peer",
            file=sys.stderr,
        )
    if start is not None and not started:
        print(f"spool journal dump: {args.start} is not in {args.file}", file=sys.stderr)
        return _EXIT_DAMAGE
    return _EXIT_DAMAGE if fenced else _EXIT_OK


def _instance(directory: Path, name: str | None) -> str:
    if name:
        return name
    found = discover_instances(directory)
    if len(found) != 1:
        listed = ", ".join(sorted(found)) or "none"
        raise ValueError(
            f"{directory} holds journals of {len(found)} instances ({listed}); use --name"
        )
    return found.pop()


def _open(args: argparse.Namespace, directory: Path, trust: bool) -> Recovery:
    instance = _instance(directory, args.name)
    return recover(directory, args.archive, instance, apply=False, trust_indexes=trust)


def cmd_verify(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``spool journal verify``."""
    out = out or sys.stdout
    try:
        rec = _open(args, args.dir, trust=False)
        damage = _damage(args.dir, args.archive, _instance(args.dir, args.name))
    except (ValueError, JournalSequenceGap, OSError) as exc:
        print(f"spool journal verify: {exc}", file=sys.stderr)
        return _EXIT_ERROR
    try:
        report = rec.report
        clean = report.clean and not damage
        if args.json:
            for j in rec.journals:
                _emit(
                    out,
                    {"journal": j.base, "path": str(j.path), "records": j.index.count,
                     "first_seq": j.base, "last_seq": j.index.last_seq, "bytes": j.index.data_len},
                )  # fmt: skip
            for d in damage:
                _emit(out, {"damaged": d.to_dict()})
            _emit(out, {"report": report.to_dict()})
        else:
            for j in rec.journals:
                out.write(
                    f"ok   {j.path.name}  seqs {j.base}..{j.index.last_seq}  "
                    f"{j.index.count} records  {j.index.data_len} bytes\n"
                )
            for d in damage:
                last = d.last_seq if d.last_seq is not None else "?"
                out.write(
                    f"DAMAGED {Path(d.path).name} at offset {d.offset}: {d.reason}; "
                    f"seqs {d.first_seq}..{last} not readable ({d.end - d.offset} bytes)\n"
                )
            for t in report.truncations:
                out.write(
                    f"CUT  {Path(t.path).name} at offset {t.offset}: {t.reason}; "
                    f"{t.bytes_cut} bytes from seq {t.first_seq_cut} would be cut\n"
                )
            for problem in report.index_problems:
                out.write(f"note index: {problem} (rebuilt at next open)\n")
            verdict = "clean" if clean else f"DAMAGED ({len(damage)} damaged ranges)"
            out.write(
                f"{report.instance}: {report.files_scanned} journals, {report.records_recovered} "
                f"good records, seqs {report.first_seq}..{report.last_seq}: {verdict}\n"
            )
        return _EXIT_OK if clean else _EXIT_DAMAGE
    finally:
        rec.close()


def _damage(directory: Path, archive: Path | None, instance: str) -> list[DamagedRange]:
    """Every damaged range of every journal, each journal read past its damage."""
    found: list[DamagedRange] = []
    now = _us(datetime.now(UTC))
    for cand in discover(directory, archive, instance).journals:
        source = open_source(cand.path, cand.compression)
        try:
            sv = salvage(source, cand.base)
        finally:
            source.retire()
        found.extend(ranges_of(sv.spans, cand.base, str(cand.path), None, "verify", now))
    return found


def cmd_find(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``spool journal find``."""
    out = out or sys.stdout
    try:
        position = parse_position(args.position)
        rec = _open(args, args.dir, trust=True)
    except (ValueError, JournalSequenceGap, OSError) as exc:
        print(f"spool journal find: {exc}", file=sys.stderr)
        return _EXIT_ERROR
    try:
        journals = [
            Journal(
                j.base,
                j.path,
                j.index,
                compression=j.compression,
                archived=j.archived,
                source=j.source,
            )
            for j in rec.journals
        ]
        if isinstance(position, tuple):
            plan = plan_bookmark(journals, *position)
        else:
            plan = plan_time(journals, position)
        match = None
        if plan is not None:
            source = plan.journal.source
            assert source is not None
            buf = source.read(plan.span.offset, plan.span.length)
            match, _ = search_span(plan, buf, plan.span.seq + plan.span.count)
        if match is None:
            if args.json:
                _emit(out, {"found": False, "position": args.position})
            else:
                out.write(f"{args.position}: not found\n")
            return _EXIT_DAMAGE
        assert plan is not None
        found = {
            "found": True,
            "seq": match.seq,
            "journal": str(plan.journal.path),
            "offset": match.offset,
            "bookmark": format_bookmark(match.pub_hash, match.pub_seq),
            "timestamp": _time(match.timestamp_us),
        }
        if args.json:
            _emit(out, found)
        else:
            out.write(
                f"seq {match.seq}  {found['bookmark']}  {found['timestamp']}  "
                f"{plan.journal.path.name} @ {match.offset}\n"
            )
        return _EXIT_OK
    except (CorruptRecord, TxlogError, OSError) as exc:
        print(f"spool journal find: {exc}", file=sys.stderr)
        return _EXIT_DAMAGE
    finally:
        rec.close()
