"""The transaction log: journals, record codec, indexes, recovery, group commit, retention.

The engine appends publishes on the event loop; a flusher fsyncs them in a thread (group
commit) and reports durable positions; replay, replication and the CLI read records back
by sequence, bookmark or time. See docs/transaction-log.md for the file formats and the
recovery rules.
"""

from __future__ import annotations

from spool.server.txlog.batch import RecordBatch
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
from spool.server.txlog.files import FileSeam, JournalHandle, OsFileSeam
from spool.server.txlog.journal import JournalInfo
from spool.server.txlog.locate import Located, LookupView
from spool.server.txlog.log import TransactionLog
from spool.server.txlog.outage import WriteOutage
from spool.server.txlog.pins import Pin, PinInfo
from spool.server.txlog.record import Record, RecordKind
from spool.server.txlog.recoveryreport import RecoveryReport, Truncation
from spool.server.txlog.space import PreallocationShortfall

__all__ = [
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
