"""Errors of the SOW that are not wire failures.

Wire failures (a message without its key, a query with a bad ``orderby``...) are the
classes of :mod:`spool.server.protocol.errors`, with the detail saying what was wrong; this
module holds what the SOW raises about its files and its admin surface::

    SpoolError
    └── SowError                    root of this module
        ├── SowFileError            a SOW file cannot be used as it is
        │   ├── BadSowHeader        not a SOW file, a version we do not read, a bad CRC
        │   └── SowFileMismatch     the file keeps another topic, or other Key paths
        └── SowTopicNotFound        an admin action named a topic that keeps no records
"""

from __future__ import annotations

from pathlib import Path

from spool.server.protocol.errors import SpoolError


class SowError(SpoolError):
    """Root of the SOW's own errors."""


class SowFileError(SowError):
    """A SOW file cannot be used as it is.

    Attributes:
        path: the file.
        reason: a stable short reason (``bad magic``, ``bad version``, ``header crc``...).
    """

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason


class BadSowHeader(SowFileError):
    """The file's header is not a SOW header we can read."""


class SowFileMismatch(SowFileError):
    """The file belongs to another topic, or was written with other Key paths."""


class SowTopicNotFound(SowError):
    """An admin action named a topic that keeps no records (404 on REST)."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"no SOW topic named {topic!r}")
        self.topic = topic
