"""Instance configuration: the AMPS-shaped XML file of CONFIG.md as frozen dataclasses.

The model (this part) is what the rest of the broker reads. ``load_config(path)`` parses
and validates a file; ``default_config()`` is the embedded default used by ``spool serve``
without a file. Errors are :class:`ConfigError` carrying the element path and line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """One listener. ``type`` is ``websocket`` (clients) or ``amps-replication``."""

    name: str
    type: str
    host: str
    port: int
    message_type: str = "json"
    per_message_deflate: bool = False
    max_message_size: int = 16 * 1024 * 1024
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """REST admin + dashboard + /metrics; served on the web port."""

    host: str = "127.0.0.1"
    port: int = 9007
    stats_file: Path = Path("./data/stats.db")
    interval: float = 10.0  # seconds, >= 1
    authentication: str = "none"  # "none" | "token"
    stats_retention: float = 7 * 86400.0  # seconds of samples kept
    metrics_public: bool = False  # /healthz and /metrics readable without auth off-loopback


@dataclass(frozen=True, slots=True)
class TopicRule:
    """A TransactionLog/Topic: exact name or regex (a name with regex metacharacters)."""

    name: str
    message_type: str = "json"
    is_regex: bool = False


@dataclass(frozen=True, slots=True)
class TransactionLogConfig:
    journal_directory: Path
    archive_directory: Path
    preallocated_files: int = 2
    journal_size: int = 64 * 1024 * 1024
    flush_interval: float = 0.001  # seconds, 30us..100ms
    topics: tuple[TopicRule, ...] = ()
    # Maximum bytes of journals (active + preallocated + archived kept locally) before
    # publishes fail with "txlog full"; 0 = unlimited.
    max_size: int = 0


@dataclass(frozen=True, slots=True)
class TuningConfig:
    minimum_sync_destinations: int = 1
    slow_client_buffer_limit: int = 64 * 1024 * 1024
    heartbeat_default: float = 0.0  # seconds; 0 = client chooses
    persisted_ack_interval: float = 1.0  # periodic bookmark-position ack after replay


@dataclass(frozen=True, slots=True)
class UserConfig:
    """A user: password hash (scrypt$...) and/or token; topic entitlements as regexes."""

    name: str
    password_hash: str | None = None
    token: str | None = field(default=None, repr=False)
    admin: bool = False
    read: tuple[str, ...] = ()  # regexes; empty = nothing
    write: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    group: str
    data_directory: Path
    admin: AdminConfig
    transports: tuple[TransportConfig, ...]
    transaction_log: TransactionLogConfig | None
    tuning: TuningConfig = TuningConfig()
    users: tuple[UserConfig, ...] = ()
    source_path: Path | None = None

    @property
    def auth_enabled(self) -> bool:
        return bool(self.users)
