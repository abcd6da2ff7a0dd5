"""The topic table: one entry per topic published to, resolved once, bounded.

The first publish to a topic decides everything that depends on the name alone: whether it
may be published to at all (not a regular expression), whether the transaction log
records it, its JSON literal, and which publish stages it goes through. The publish path
then reads one dict entry per run.

The table is bounded (:data:`TOPIC_LIMIT`): a broker that sees a stream of one-off topic
names (a topic per order id) must not grow without end, neither in memory nor in the stats
database, where every entry becomes a series. Past the limit the entry published to least
recently is forgotten; if that topic comes back it is resolved again and its counters
start from zero (a rate computed across the gap counts from zero, as Prometheus does).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from spool.server.ports import (
    AppendedRun,
    AppendedStage,
    DuplicateStage,
    Outbound,
    PreparingStage,
    PublishRun,
    PublishStage,
    Refusals,
)
from spool.server.protocol.errors import InvalidTopic
from spool.server.protocol.topic import is_regex_topic
from spool.server.wire import topic_json

#: most topics the table keeps
TOPIC_LIMIT: Final = 10_000


@dataclass(slots=True, eq=False)
class Topic:
    """One topic as the publish path sees it.

    Attributes:
        name: the topic.
        literal: the topic as a JSON string literal.
        recorded: whether the transaction log records it.
        prepare: the stages' ``prepare`` hooks, in stage order.
        appended: the stages' ``appended`` hooks, in stage order.
        reaches: the stages' ``reaches`` hooks (may a run's hand-over send to a peer now).
        duplicated: the stages' ``duplicated`` hooks (a replicated message the log held).
        reserved: an event topic that is on: only the broker publishes there.
        msgs_in: messages published to it (since it entered the table).
        bytes_in: body bytes published to it.
    """

    name: str
    literal: bytes
    recorded: bool
    prepare: tuple[Callable[[PublishRun], Refusals | None], ...]
    appended: tuple[Callable[[AppendedRun], None], ...]
    reaches: tuple[Callable[[str, Outbound], bool], ...]
    duplicated: tuple[Callable[[PublishRun, int, int, str | None], None], ...] = ()
    reserved: bool = False
    msgs_in: int = 0
    bytes_in: int = 0


class TopicTable:
    """The topics published to, most recently used last. Owned by the event loop.

    Args:
        records: whether the transaction log records a topic.
        stages: the publish stages, in the order they run.
        limit: most entries kept.
        reserved: the event topics that are on (clients may not publish there).
    """

    def __init__(
        self,
        records: Callable[[str], bool],
        stages: tuple[PublishStage, ...] = (),
        *,
        limit: int = TOPIC_LIMIT,
        reserved: frozenset[str] = frozenset(),
    ) -> None:
        self._records = records
        self._reserved = reserved
        self._stages = stages
        self._limit = limit
        self._entries: OrderedDict[str, Topic] = OrderedDict()
        self.evicted = 0

    def set_stages(self, stages: tuple[PublishStage, ...]) -> None:
        """Replace the stage list (at start-up, before the first publish)."""
        self._stages = stages
        self._entries.clear()

    def get(self, name: str) -> Topic | None:
        """The entry of a topic already published to (marks it recently used)."""
        entry = self._entries.get(name)
        if entry is not None:
            self._entries.move_to_end(name)
        return entry

    def admit(self, name: str) -> Topic:
        """The entry of ``name``, resolving it on its first publish.

        Raises:
            InvalidTopic: ``name`` is a regular expression (publishes need a topic name).
        """
        entry = self.get(name)
        if entry is not None:
            return entry
        if is_regex_topic(name):
            raise InvalidTopic(f"cannot publish to a regular expression {name!r}")
        stages = [s for s in self._stages if s.applies_to(name)]
        entry = Topic(
            name=name,
            literal=topic_json(name),
            recorded=self._records(name),
            prepare=tuple(s.prepare for s in stages if isinstance(s, PreparingStage)),
            appended=tuple(s.appended for s in stages if isinstance(s, AppendedStage)),
            reaches=tuple(s.reaches for s in stages if isinstance(s, AppendedStage)),
            duplicated=tuple(s.duplicated for s in stages if isinstance(s, DuplicateStage)),
            reserved=name in self._reserved,
        )
        self._entries[name] = entry
        if len(self._entries) > self._limit:
            self._entries.popitem(last=False)
            self.evicted += 1
        return entry

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._entries.values()))
