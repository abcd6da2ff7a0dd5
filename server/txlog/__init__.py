"""The transaction log: journals, record codec, indexes, recovery, group commit, retention.

The engine appends publishes on the event loop; a flusher fsyncs them in a thread (group
commit) and reports durable positions; replay, replication and the CLI read records back
by sequence, bookmark or time. See docs/transaction-log.md for the file formats and the
recovery rules.
"""

from __future__ import annotations

from server.txlog.batch import RecordBatch
from server.txlog.errors import (
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
from server.txlog.events import EventCallback
from server.txlog.files import FileSeam, JournalHandle, OsFileSeam
from server.txlog.journal import JournalInfo
from server.txlog.locate import Located, LookupView
from server.txlog.log import TransactionLog
from server.txlog.outage import WriteOutage
from server.txlog.pins import Pin, PinInfo
from server.txlog.record import Record, RecordKind
from server.txlog.recoveryreport import RecoveryReport, Truncation
from server.txlog.space import PreallocationShortfall

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
