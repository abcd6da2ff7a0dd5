"""The transaction log: journals, record codec, indexes, recovery, group commit, retention.

The engine appends publishes on the event loop; a flusher fsyncs them in a thread (group
commit) and reports durable positions; replay, replication and the CLI read records back
by sequence, bookmark or time. See docs/transaction-log.md for the file formats and the
recovery rules.

Where things live (each sub-package's ``__init__`` says more; imports point down this list,
an import-linter contract in pyproject.toml keeps the order):

- :mod:`.log`: ``TransactionLog``, the facade over every part; :mod:`.startup`, the file
  work of ``open()``; :mod:`.cli`, ``spool journal dump / verify / find``.
- reading, :mod:`.read`: a live log's records by seq, lookups by bookmark and time.
- retention, :mod:`.retention`: pins; archive, compress, remove.
- appending, :mod:`.append`: placement, the in-memory tail, group commit, write outages,
  preallocation and ``MaxSize``; sealing, :mod:`.append.cachewriter`: a finished
  journal's sealed index written after its last commit.
- recovery, :mod:`.recovery`: journals found, checked, cut and rewritten at open; the
  same on a running log (fencing, repairs written back, re-indexing).
- :mod:`.publishers`: each publisher's highest sequence and gaps, ``clients.ack``, the
  instance's own identity.
- :mod:`.damage`: damage found and read past, fences, the scrub.
- :mod:`.storage`: file names and the write seam, reading journal bytes (plain or
  compressed), the journal list, searches by bookmark or time.
- indexing, :mod:`.index`: the sparse per-journal indexes and their file.
- :mod:`.format`: the record, its codec and bulk decoding (and their compiled twins).
- :mod:`.errors` and :mod:`.events`: the failures and events of the whole package.
"""

from __future__ import annotations

from spool.server.txlog.append.outage import WriteOutage
from spool.server.txlog.append.space import PreallocationShortfall
from spool.server.txlog.errors import (
    CorruptRecord,
    FencedRecords,
    FieldOutOfRange,
    InvalidInstanceName,
    JournalActive,
    JournalNotFound,
    JournalPinned,
    JournalSequenceGap,
    JournalUnfinished,
    PublisherSequenceRegression,
    PublishersUnsaved,
    RecordTooLarge,
    TxlogClosed,
    TxlogError,
    TxlogFull,
    TxlogWriteFailed,
)
from spool.server.txlog.events import EventCallback
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import MESSAGE_KINDS, Record, RecordKind
from spool.server.txlog.log import TransactionLog
from spool.server.txlog.read.locator import Located, LookupView
from spool.server.txlog.recovery.report import RecoveryReport, Truncation
from spool.server.txlog.retention.pins import Pin, PinInfo
from spool.server.txlog.storage.files import FileSeam, JournalHandle, OsFileSeam
from spool.server.txlog.storage.journal import JournalInfo

__all__ = [
    "MESSAGE_KINDS",
    "CorruptRecord",
    "EventCallback",
    "FencedRecords",
    "FieldOutOfRange",
    "FileSeam",
    "InvalidInstanceName",
    "JournalActive",
    "JournalHandle",
    "JournalInfo",
    "JournalNotFound",
    "JournalPinned",
    "JournalSequenceGap",
    "JournalUnfinished",
    "Located",
    "LookupView",
    "OsFileSeam",
    "Pin",
    "PinInfo",
    "PreallocationShortfall",
    "PublisherSequenceRegression",
    "PublishersUnsaved",
    "Record",
    "RecordBatch",
    "RecordKind",
    "RecordTooLarge",
    "RecoveryReport",
    "TransactionLog",
    "Truncation",
    "TxlogClosed",
    "TxlogError",
    "TxlogFull",
    "TxlogWriteFailed",
    "WriteOutage",
]
