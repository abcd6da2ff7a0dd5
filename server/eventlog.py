"""The event log: structured JSON lines for operators.

Every line has ``time``, ``level``, ``category``, ``event`` and the event's fields. Lines go
to the console and to a rotating file in the data directory. File writes happen on a
logging ``QueueListener`` thread, so emitting on the event loop costs a queue put, never a
disk write. The last few hundred events stay in memory for the dashboard.

Secrets never reach this module's output: fields whose name looks like a secret (password,
token, pw, secret, authorization) are replaced with ``"***"``.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import sys
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from spool.server.clock import SYSTEM_CLOCK, Clock

_SECRET_WORDS: Final = ("password", "token", "secret", "authorization", "cookie")
_SECRET_KEYS: Final = frozenset({"pw", "passwd"})
_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _redact(fields: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        lowered = key.lower()
        if lowered in _SECRET_KEYS or any(w in lowered for w in _SECRET_WORDS):
            out[key] = "***"
        else:
            out[key] = value
    return out


#: how events look on the console: JSON lines (for collectors) or text (for a person)
ConsoleFormat = Literal["json", "text"]

#: the fields every event has, shown first by :func:`text_line`
_HEAD: Final = ("time", "level", "category", "event")


class _JsonLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = getattr(record, "spool_line", None)
        if isinstance(line, str):
            return line
        return super().format(record)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = getattr(record, "spool_entry", None)
        if isinstance(entry, dict):
            return text_line(entry)
        return super().format(record)


def text_line(entry: dict[str, Any]) -> str:
    """One event as a person reads it: ``2026-11-29 22:15:01.123 WARNING replication
    destination_disconnected destination=b detail="nothing heard for 6.0 s"`` (UTC; a
    value that is not a plain word is quoted as JSON)."""
    stamp = str(entry.get("time", ""))[:23].replace("T", " ")
    level = str(entry.get("level", "")).upper()
    words = [stamp, f"{level:<7}", str(entry.get("category", "")), str(entry.get("event", ""))]
    for key, value in entry.items():
        if key in _HEAD:
            continue
        text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
        if not text or any(c.isspace() or c in '"=' for c in text) or not text.isprintable():
            text = orjson.dumps(text).decode()
        words.append(f"{key}={text}")
    return " ".join(words)


class EventLog:
    """Structured event log of one broker instance.

    Args:
        directory: where ``NAME.events.log`` rotates (None: console only).
        name: instance name, the file prefix.
        console: also write lines to stderr.
        console_format: as JSON lines (the file's format) or as text (:func:`text_line`).
        max_bytes / backups: rotation policy.
        level: the lowest level written to the handlers (``recent()`` keeps every event).
        keep: how many events ``recent()`` remembers.
        clock: stamps each event's ``time``; the broker passes its own, so events line up
            with everything else it stamps (and tests on a virtual clock see exact times).
    """

    def __init__(
        self,
        directory: Path | None,
        name: str,
        *,
        console: bool = True,
        console_format: ConsoleFormat = "json",
        max_bytes: int = 16 * 1024 * 1024,
        backups: int = 5,
        level: str = "info",
        keep: int = 500,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self._recent: deque[dict[str, Any]] = deque(maxlen=keep)
        self._logger = logging.getLogger(f"spool.events.{name}.{id(self)}")
        self._logger.propagate = False
        self._logger.setLevel(_LEVELS.get(level, logging.INFO))
        self._queue: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        handlers: list[logging.Handler] = []
        formatter = _JsonLineFormatter()
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            fh = logging.handlers.RotatingFileHandler(
                directory / f"{name}.events.log",
                maxBytes=max_bytes,
                backupCount=backups,
                encoding="utf-8",
            )
            fh.setFormatter(formatter)
            handlers.append(fh)
        if console:
            ch = logging.StreamHandler(sys.stderr)
            ch.setFormatter(_TextFormatter() if console_format == "text" else formatter)
            handlers.append(ch)
        self._handlers = handlers
        self._listener = logging.handlers.QueueListener(self._queue, *handlers)
        self._logger.addHandler(logging.handlers.QueueHandler(self._queue))
        self._listener.start()
        self._closed = False

    def emit(self, level: str, category: str, event: str, **fields: Any) -> None:
        """Record one event (cheap; safe to call on the event loop)."""
        stamp = datetime.fromtimestamp(self._clock.time(), UTC)
        entry: dict[str, Any] = {
            "time": stamp.isoformat(timespec="microseconds"),
            "level": level,
            "category": category,
            "event": event,
        }
        entry.update(_redact(fields))
        self._recent.append(entry)
        if self._closed:
            return
        line = orjson.dumps(entry, default=str).decode()
        self._logger.log(
            _LEVELS.get(level, logging.INFO), line, extra={"spool_line": line, "spool_entry": entry}
        )

    def recent(self, limit: int = 200) -> list[dict[str, Any]]:
        """The newest events, oldest first."""
        items = list(self._recent)
        return items[-limit:]

    def close(self) -> None:
        """Flush the queue to the handlers and close them (called last at shutdown)."""
        if self._closed:
            return
        self._closed = True
        self._listener.stop()
        for h in self._handlers:
            h.close()
