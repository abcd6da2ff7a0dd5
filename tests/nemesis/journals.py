"""Every instance's journals read back at the end, without the broker.

The same read-only APIs as ``spool journal verify`` and the soak's oracle: recovery with
``apply=False`` says which records a restart would keep (and what damage it would cut),
and the journal files are read record by record up to that count.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from spool.server.txlog.cli import iter_file_records
from spool.server.txlog.errors import CorruptRecord
from spool.server.txlog.format.record import FLAG_LATE, RecordKind
from spool.server.txlog.recovery.recover import recover
from tests.nemesis.cluster import TOPIC_QDEAD, TOPIC_SOW

__all__ = ["InstanceLog", "LogRecord", "read_instance"]


@dataclass(frozen=True, slots=True)
class LogRecord:
    seq: int
    pub_hash: int
    pub_seq: int
    topic: str
    kind: int
    path: tuple[str, ...]
    late: bool
    #: the body, kept for the SOW topic (the fold needs it) and for queue transfers (the
    #: queue check reads who was granted a message)
    body: bytes | None

    @property
    def key(self) -> tuple[int, int]:
        return (self.pub_hash, self.pub_seq)


@dataclass
class InstanceLog:
    name: str
    records: list[LogRecord] = field(default_factory=list)
    clean: bool = True
    damage: list[str] = field(default_factory=list)
    journals: int = 0
    #: the files could not be read at all
    error: str | None = None


def read_instance(data_dir: Path, name: str) -> InstanceLog:
    """Every record of ``name``'s log in log order, and what recovery would cut."""
    out = InstanceLog(name)
    journal_dir, archive_dir = data_dir / "journal", data_dir / "archive"
    if not journal_dir.is_dir():
        out.error = f"no journal directory {journal_dir}"
        return out
    recovery = recover(journal_dir, archive_dir if archive_dir.is_dir() else None, name,
                       apply=False, trust_indexes=False)  # fmt: skip
    try:
        for journal in recovery.journals:
            count = journal.index.count
            try:
                for n, (_, rec) in enumerate(iter_file_records(journal.path)):
                    if n >= count:  # past what recovery keeps
                        break
                    out.records.append(
                        LogRecord(
                            rec.seq,
                            rec.pub_hash,
                            rec.pub_seq,
                            rec.topic,
                            int(rec.kind),
                            tuple(rec.path),
                            bool(rec.flags & FLAG_LATE),
                            rec.body
                            if rec.topic in (TOPIC_SOW, TOPIC_QDEAD)
                            or rec.kind == RecordKind.QUEUE_TRANSFER
                            else None,
                        )
                    )
            except CorruptRecord as exc:
                out.damage.append(f"{journal.path.name}: {exc}")
        out.journals = len(recovery.journals)
        report = recovery.report
        out.damage += [f"{t.path} at {t.offset}: {t.reason}" for t in report.truncations]
        out.clean = report.clean and not out.damage
    finally:
        recovery.close()
    return out


PUBLISH = int(RecordKind.PUBLISH)
SOW_DELETE = int(RecordKind.SOW_DELETE)
QUEUE_TRANSFER = int(RecordKind.QUEUE_TRANSFER)
#: a delayed message as published (never delivered), and each instance's own record of
#: it falling due (the one delivered; never replicated): docs/transaction-log.md
SCHEDULED = int(RecordKind.SCHEDULED)
DUE = int(RecordKind.DUE)
KIND_NAMES = {int(k): k.name.lower() for k in RecordKind}
