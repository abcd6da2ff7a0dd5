"""Failures of the Spark pipeline, one class per reason.

Each message says what was wrong and what to do, because most reach a person through
``spool pipeline`` or a Spark stack trace: a missing Java, a wrong directory, a journal
that cannot be read, an option that is not understood.

Hierarchy::

    SpoolError
    └── PipelineError
        ├── PipelineNotInstalled    pyspark / pyarrow missing (the [pipeline] extra)
        ├── JavaNotFound            no usable Java for Spark
        ├── JournalDirectoryNotFound  the journal (or archive) directory does not exist
        ├── NoJournals              no journal files of any instance there
        ├── AmbiguousInstance       journals of several instances: say which (``name``)
        ├── UnreadableJournal       a journal or index file cannot be read (permissions, I/O)
        ├── BadOption               an option of the source, the sink or a job is wrong
        ├── DamagedJournal          damage found with ``mode`` FAILFAST
        ├── RecordsRemoved          a stream needs records the instance no longer has
        ├── AdminRequestFailed      the instance's admin REST API refused or is unreachable
        └── PublishFailed           the sink's publishes were refused by the broker
"""

from __future__ import annotations

from spool.server.protocol.errors import SpoolError

__all__ = [
    "AdminRequestFailed",
    "AmbiguousInstance",
    "BadOption",
    "DamagedJournal",
    "JavaNotFound",
    "JournalDirectoryNotFound",
    "NoJournals",
    "PipelineError",
    "PipelineNotInstalled",
    "PublishFailed",
    "RecordsRemoved",
    "UnreadableJournal",
]


class PipelineError(SpoolError):
    """Root of the pipeline's own failures."""


class PipelineNotInstalled(PipelineError):
    """pyspark or pyarrow is not importable."""

    def __init__(self, module: str) -> None:
        super().__init__(
            f"the Spark pipeline needs {module}: install it with "
            "pip install 'spool-broker[pipeline]' (make install does)"
        )
        self.module = module


class JavaNotFound(PipelineError):
    """Spark needs a Java runtime (17 or newer) and none was found or it is too old."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"Spark needs Java 17 or newer: {detail}. Install one (Debian: apt-get install "
            "openjdk-17-jre-headless) or set JAVA_HOME"
        )
        self.detail = detail


class JournalDirectoryNotFound(PipelineError):
    """A journal or archive directory given to the source does not exist."""

    def __init__(self, path: str, what: str = "journal directory") -> None:
        super().__init__(f"{what} {path} does not exist or is not a directory")
        self.path = path


class NoJournals(PipelineError):
    """The directories hold no journal file (of the instance asked for)."""

    def __init__(self, where: str, instance: str | None) -> None:
        of = f" of instance {instance!r}" if instance else ""
        super().__init__(
            f"no journal files{of} in {where} (expected NAME.<20 digits>.journal[.zst|.gz])"
        )
        self.where = where
        self.instance = instance


class AmbiguousInstance(PipelineError):
    """Several instances keep journals in the directory; their sequences are unrelated."""

    def __init__(self, where: str, instances: list[str]) -> None:
        super().__init__(
            f"{where} holds journals of {len(instances)} instances ({', '.join(instances)}): "
            "choose one with the name option (--name)"
        )
        self.instances = instances


class UnreadableJournal(PipelineError):
    """A journal or index file exists but cannot be read."""

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(f"cannot read {path}: {cause}")
        self.path = path
        self.cause = cause


class BadOption(PipelineError):
    """An option has a value the pipeline does not understand."""

    def __init__(self, option: str, value: object, expected: str) -> None:
        super().__init__(f"option {option}={value!r}: {expected}")
        self.option = option
        self.value = value


class DamagedJournal(PipelineError):
    """Damaged bytes were found and ``mode`` is FAILFAST."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"damaged journal {path} at offset {offset}: {reason} (mode FAILFAST)")
        self.path = path
        self.offset = offset
        self.reason = reason


class RecordsRemoved(PipelineError):
    """A stream must read records that were removed from the instance (data loss)."""

    def __init__(self, wanted: int, first: int) -> None:
        super().__init__(
            f"the stream needs records from seq {wanted} but the oldest journal starts at "
            f"{first}: seqs {wanted}..{first - 1} were removed before they were read "
            "(set failOnDataLoss=false to go on from the oldest record)"
        )
        self.wanted = wanted
        self.first = first


class AdminRequestFailed(PipelineError):
    """A request to the instance's admin REST API failed."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"admin request {url} failed: {detail}")
        self.url = url
        self.detail = detail


class PublishFailed(PipelineError):
    """The broker refused publishes of the sink (a failure ack)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        more = f" ({detail})" if detail else ""
        super().__init__(f"the broker refused a publish: {reason}{more}")
        self.reason = reason
        self.detail = detail
