"""The SOW topics of an instance: which rule keeps a topic, its key spec, its store.

A ``SOW/Topic`` rule with an exact name has its store from the start; a regex rule gets a
store per topic it matches, made on the first publish to that topic (or at start, for a
topic with a file or records in the transaction log). Persistent stores live in
``DataDirectory/sow/``, one file per topic named ``INSTANCE.TOPIC.HASH.sow`` (the topic
made safe for a file name, and a hash of the exact topic so that topics differing only in
unsafe characters never share a file); the file's header names its topic, which is what
start-up trusts.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from spool.server.clock import Clock
from spool.server.config import Config, SowTopicConfig
from spool.server.regex import Regex
from spool.server.sow.expiry import ExpiryIndex
from spool.server.sow.fileformat import decode_header
from spool.server.sow.filestore import FileStore, LoadReport
from spool.server.sow.keys import KeySpec
from spool.server.sow.memory import MemoryStore
from spool.server.stats.source import EventSink

__all__ = ["SowTopics", "sow_file_name"]

#: topics whose rule lookup is remembered (a broker sees thousands of topics, not millions)
_RULE_CACHE_LIMIT: Final = 50_000
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")
#: bytes read to find a file's topic at start-up (a header is 36 bytes plus its names)
_HEADER_PROBE: Final = 70_000


def sow_file_name(instance: str, topic: str) -> str:
    """The file of ``topic``'s persistent store."""
    safe = _UNSAFE.sub("_", topic)[:64]
    digest = hashlib.blake2b(topic.encode(), digest_size=6).hexdigest()
    return f"{instance}.{safe}.{digest}.sow"


class SowTopics:
    """Rules, key specs and stores. Owned by the event loop.

    Args:
        config: the ``SOW`` rules, the data directory and the instance name.
        records: whether the transaction log records a topic.
        clock: compaction times.
        events: where file problems and compactions are reported.
    """

    def __init__(
        self,
        config: Config,
        records: Callable[[str], bool],
        clock: Clock,
        events: EventSink,
    ) -> None:
        self.rules = config.sow
        self.directory = config.data_directory / "sow"
        self._instance = config.name
        self._config = config
        self._records = records
        self._clock = clock
        self._events = events
        self._rule_cache: dict[str, SowTopicConfig | None] = {}
        self._specs: dict[str, KeySpec] = {}
        #: stores by topic (a FileStore is a MemoryStore with a file)
        self.stores: dict[str, MemoryStore] = {}
        #: deadlines of records that expire, by topic
        self.expiry: dict[str, ExpiryIndex] = {}
        #: persistent stores of topics the log records (they follow its durability)
        self._following: list[FileStore] = []
        self._opening: set[asyncio.Task[LoadReport]] = set()
        #: called with each new store (the stage pins the log for it)
        self.on_new_store: Callable[[MemoryStore], None] | None = None

    # -- rules --------------------------------------------------------------------------

    def rule(self, topic: str) -> SowTopicConfig | None:
        """The rule that keeps ``topic`` (None: not a SOW topic)."""
        cache = self._rule_cache
        if topic in cache:
            return cache[topic]
        rule = self._config.sow_topic(topic)
        if len(cache) >= _RULE_CACHE_LIMIT:
            cache.clear()
        cache[topic] = rule
        return rule

    def spec(self, rule: SowTopicConfig) -> KeySpec:
        """The key spec of a rule."""
        spec = self._specs.get(rule.name)
        if spec is None:
            spec = self._specs[rule.name] = KeySpec(rule.name, rule.keys)
        return spec

    def recorded(self, topic: str) -> bool:
        """Whether the transaction log records ``topic``."""
        return self._records(topic)

    # -- stores -------------------------------------------------------------------------

    def store(self, topic: str) -> MemoryStore | None:
        """The store of ``topic``, if it has one yet."""
        return self.stores.get(topic)

    def store_for(self, topic: str, rule: SowTopicConfig) -> MemoryStore:
        """The store of ``topic``, made now if it is the topic's first record."""
        store = self.stores.get(topic)
        if store is None:
            store = self._new_store(topic, rule)
            if isinstance(store, FileStore):
                task = asyncio.get_running_loop().create_task(store.open(fresh=True))
                self._opening.add(task)
                task.add_done_callback(self._opened)
        return store

    def _opened(self, task: asyncio.Task[LoadReport]) -> None:
        self._opening.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._events.emit("error", "sow", "sow_file_failed", error=repr(exc))
        elif task.result().status == "replaced":
            self._events.emit("warning", "sow", "sow_file_replaced", **task.result().to_dict())

    def _new_store(self, topic: str, rule: SowTopicConfig) -> MemoryStore:
        store: MemoryStore
        if rule.persistent:
            spec = self.spec(rule)
            fs = FileStore(
                topic,
                self.directory / sow_file_name(self._instance, topic),
                rule.keys,
                recorded=self._records(topic),
                clock=self._clock,
                rekey=lambda body: spec.try_key(topic, body),
                on_event=self._file_event,
            )
            if fs.recorded:
                self._following.append(fs)
            store = fs
        else:
            store = MemoryStore(topic)
        self.stores[topic] = store
        self.expiry[topic] = ExpiryIndex()
        if self.on_new_store is not None:
            self.on_new_store(store)
        return store

    def _file_event(self, level: str, event: str, fields: dict[str, object]) -> None:
        self._events.emit(level, "sow", event, **fields)

    def matching(self, pattern: Regex) -> list[MemoryStore]:
        """The stores of the topics a regex topic matches, in topic order."""
        return [self.stores[t] for t in sorted(self.stores) if pattern.test(t)]

    def __iter__(self) -> Iterator[MemoryStore]:
        return iter(list(self.stores.values()))

    def durable(self, seq: int) -> None:
        """The log is durable up to ``seq``: persistent stores may write what it covers."""
        for store in self._following:
            store.durable(seq)

    # -- start and stop -----------------------------------------------------------------

    async def open(self) -> list[LoadReport]:
        """Make the stores of exact rules and of every file found; load the files."""
        directory = self.directory
        found = await asyncio.to_thread(_probe_files, directory)
        reports: list[LoadReport] = []
        claimed: set[str] = set()
        for path, topic in found:
            rule = self.rule(topic) if topic is not None else None
            if topic is None or rule is None or not rule.persistent or topic in claimed:
                self._events.emit(
                    "warning",
                    "sow",
                    "sow_file_unused",
                    path=str(path),
                    reason="not a SOW file"
                    if topic is None
                    else f"topic {topic!r} is not a persistent SOW topic of this configuration",
                )
                continue
            expected = directory / sow_file_name(self._instance, topic)
            if path != expected:
                if expected.exists():
                    self._events.emit(
                        "warning",
                        "sow",
                        "sow_file_unused",
                        path=str(path),
                        reason=f"{expected.name} keeps {topic!r}",
                    )
                    continue
                await asyncio.to_thread(path.rename, expected)
            claimed.add(topic)
            store = self._new_store(topic, rule)
            assert isinstance(store, FileStore)
            reports.append(await store.open())
        for rule in self.rules:
            if not rule.is_regex and rule.name not in self.stores:
                store = self._new_store(rule.name, rule)
                if isinstance(store, FileStore):
                    reports.append(await store.open())
        return reports

    async def close(self) -> None:
        """Write what the files may hold and close them."""
        for task in list(self._opening):
            await asyncio.gather(task, return_exceptions=True)
        for store in self.stores.values():
            if isinstance(store, FileStore):
                await store.close()


def _probe_files(directory: Path) -> list[tuple[Path, str | None]]:
    """Blocking: every ``*.sow`` file of ``directory`` with the topic its header names."""
    if not directory.is_dir():
        return []
    out: list[tuple[Path, str | None]] = []
    for path in sorted(directory.glob("*.sow")):
        with path.open("rb") as f:
            head = f.read(_HEADER_PROBE)
        header = decode_header(head)
        out.append((path, None if isinstance(header, str) else header.topic))
    return out
