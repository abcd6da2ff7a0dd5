"""The on-publish trigger: a publish stage that offers appended messages to actions' lanes.

:class:`PublishTriggers` is an appended stage of the publish pipeline, after the fan-out,
added only when an ``amps-action-on-publish-message`` trigger is configured: an instance
without one has no hook on its publish path at all. The pipeline asks
:meth:`PublishTriggers.applies_to` once per topic (the topic table keeps the answer), so a
topic no trigger watches has no hook either, and its runs cost nothing here.

For a watched topic, :meth:`PublishTriggers.appended` costs one dict lookup per run and one
O(1) lane offer per trigger that watches it: no filter runs here (the action's worker
filters, off the publish path), and a full lane drops and counts rather than wait. Only
publishes reach it (``sow_delete`` and queue records replicated in pass appended stages
too), and only from the trigger's ``MessageSource``: ``local`` runs were published here
(by a client or the broker), ``replicated`` ones came over a link. A message refused by
the pipeline (entitlement, duplicate, ``txlog full``) never reaches appended stages, so
never fires an action.

Loops: each derived identity an action publishes under is remembered with its depth (how
many derived hops from a client's message, :meth:`PublishTriggers.derived`); a run whose
publisher is at :data:`~spool.server.actions.eventrunner.MAX_DERIVED_DEPTH` is not offered
and counted ``loop_cut``.

Restarts: the stage is also a recovering stage. Every :data:`CHECKPOINT_INTERVAL` seconds
(:meth:`PublishTriggers.keep_checkpoint`) it writes each action's checkpoint (the seq up
to which every candidate is done and what it derived is durable,
:meth:`~spool.server.actions.lanes.EventLane.checkpoint`) to ``DATA/NAME.triggers.json``
(:mod:`spool.server.actions.checkpoint`). At start-up, :meth:`PublishTriggers.recover_from`
reads it back and :meth:`PublishTriggers.recover` offers again the log's publishes past each
action's checkpoint (at most ``Tuning/ActionCatchUpRecords`` records back; an action without
checkpoint starts at the log's end, never replaying history): they run first once the
workers start. Runs are so at least once across a crash, and the derived messages a re-run
repeats are duplicates the log drops. A message of a derived identity met in the catch-up
counts as a client's (the lineage is not kept across a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from spool.server.actions.checkpoint import (
    TriggerCheckpointError,
    checkpoint_name,
    decode,
    encode,
)
from spool.server.actions.eventrunner import MAX_DERIVED_DEPTH, EventRunner, MessageRun
from spool.server.clock import Clock
from spool.server.config import Config, OnPublishMessage
from spool.server.ports import AppendedRun, Origin, Outbound
from spool.server.stats.source import EventSink
from spool.server.topics import TOPIC_LIMIT
from spool.server.txlog import TransactionLog, TxlogClosed
from spool.server.txlog.format.batch import RecordBatch
from spool.server.txlog.format.record import MESSAGE_KINDS, RecordKind
from spool.server.txlog.storage.files import OsFileSeam, write_durable
from spool.server.wire import topic_json

__all__ = ["CHECKPOINT_INTERVAL", "LINEAGE_LIMIT", "PublishTriggers"]

#: Seconds between two writes of the checkpoint file (when a checkpoint moved).
CHECKPOINT_INTERVAL: Final = 1.0

#: Derived identities whose depth is remembered (the oldest is forgotten past it: a
#: message of a forgotten identity counts as a client's, so a loop runs at most this
#: many more hops before it is cut again).
LINEAGE_LIMIT: Final = 65_536
#: nothing to read back: the pipeline starts no earlier for this stage
_NOTHING: Final = 1 << 62


@dataclass(frozen=True, slots=True)
class _Binding:
    """One on-publish trigger of an action, and the action it feeds."""

    runner: EventRunner
    trigger: OnPublishMessage
    index: int

    def takes(self, replicated: bool) -> bool:
        """Whether the trigger takes a message of that source."""
        source = self.trigger.source
        return source == "all" or (source == "replicated") == replicated


class PublishTriggers:
    """The on-publish triggers of an instance, as a publish stage (see the module docstring).

    Args:
        config: the instance configuration (its actions, data directory, ``Tuning``).
        txlog: the transaction log (None: nothing is recorded, nothing caught up).
        clock: the time source of the checkpoint's writes.
        events: where a checkpoint file that cannot be used or written is reported.
    """

    def __init__(
        self,
        config: Config,
        txlog: TransactionLog | None = None,
        clock: Clock | None = None,
        events: EventSink | None = None,
    ) -> None:
        #: whether any action has an on-publish trigger (else the stage is not added)
        self.configured = any(
            isinstance(t, OnPublishMessage) for action in config.actions for t in action.triggers
        )
        self._txlog = txlog
        self._clock = clock
        self._events = events
        self._catch_up = config.tuning.action_catch_up_records
        self._path = Path(config.data_directory) / checkpoint_name(config.name)
        self._origin = Origin(kind="broker", name=config.name, user=None, replies=None)
        self._bindings: list[_Binding] = []
        self._by_topic: dict[str, tuple[_Binding, ...]] = {}
        #: derived identity -> its depth, the newest last
        self._lineage: OrderedDict[int, int] = OrderedDict()
        #: action -> the first seq its catch-up takes (set by :meth:`recover_from`)
        self._starts: dict[str, int] = {}
        #: action -> (candidates offered again at start-up, of which dropped)
        self.caught_up: dict[str, tuple[int, int]] = {}
        self._saved: dict[str, int] | None = None
        self._write_failed = False
        #: the checkpoint file's write in progress (in a thread)
        self._writing: asyncio.Future[None] | None = None

    def bind(self, runner: EventRunner, trigger: OnPublishMessage, index: int) -> None:
        """Offer the runs ``trigger`` (the ``index``-th trigger of the runner's action)
        watches to the runner's lane. Before the first publish and the recovery."""
        self._bindings.append(_Binding(runner, trigger, index))
        self._by_topic.clear()

    @property
    def _runners(self) -> dict[str, EventRunner]:
        return {b.runner.name: b.runner for b in self._bindings}

    def _resolve(self, topic: str) -> tuple[_Binding, ...]:
        found = tuple(b for b in self._bindings if b.trigger.topic.matches(topic))
        if len(self._by_topic) >= TOPIC_LIMIT:
            self._by_topic.clear()
        self._by_topic[topic] = found
        return found

    def applies_to(self, topic: str) -> bool:
        """Whether a trigger watches ``topic`` (asked once per topic by the topic table)."""
        return bool(self._resolve(topic))

    def appended(self, run: AppendedRun) -> None:
        """Offer ``run`` to the lane of each trigger that watches its topic and source."""
        if run.kind not in MESSAGE_KINDS:
            return
        bindings = self._by_topic.get(run.topic)
        if bindings is None:  # forgotten since the topic table asked
            bindings = self._resolve(run.topic)
        depth = self._lineage.get(run.pub_hash, 0) if self._lineage else 0
        replicated = bool(run.path)
        for binding in bindings:
            if not binding.takes(replicated):
                continue
            if depth >= MAX_DERIVED_DEPTH:
                binding.runner.tally.loop_cut += len(run.bodies)
                continue
            binding.runner.lane.offer(MessageRun(run, binding.index, depth))

    def reaches(self, topic: str, peer: Outbound) -> bool:
        """Never: the stage sends nothing to anyone."""
        return False

    def derived(self, pub_hash: int, depth: int) -> None:
        """An action published under ``pub_hash`` messages ``depth`` derived hops from a
        client's (the event runner tells, before it publishes them)."""
        lineage = self._lineage
        if lineage.get(pub_hash, 0) >= depth:
            return
        lineage[pub_hash] = depth
        lineage.move_to_end(pub_hash)
        if len(lineage) > LINEAGE_LIMIT:
            lineage.popitem(last=False)

    # -- restarts ---------------------------------------------------------------------------

    def _read(self, txlog: TransactionLog) -> dict[str, int]:
        """The checkpoints of the file, or none (a file that cannot be used is reported)."""
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            try:
                return decode(data, txlog.own_pub_hash)
            except TriggerCheckpointError as exc:
                problem = str(exc)
        if self._events is not None:
            self._events.emit(
                "warning", "actions", "checkpoint_ignored", path=str(self._path),
                reason=problem, detail="on-publish actions start at the log's end",
            )  # fmt: skip
        return {}

    def recover_from(self) -> int:
        """The first seq an action's catch-up takes (each action resumes after its own
        checkpoint, at most ``Tuning/ActionCatchUpRecords`` records back; without one, at
        the log's end). Called once, at start-up, before :meth:`recover`."""
        txlog = self._txlog
        if txlog is None or not self._bindings:
            return _NOTHING
        marks = self._read(txlog)
        end = txlog.last_seq + 1
        floor = end - self._catch_up
        for name, runner in self._runners.items():
            mark = marks.get(name)
            start = end if mark is None else min(end, max(mark + 1, floor))
            self._starts[name] = start
            runner.lane.resume(start - 1)
        return min(self._starts.values(), default=_NOTHING)

    def recover(self, batch: RecordBatch) -> None:
        """Offer the batch's publishes past each action's start to its lane again."""
        starts = self._starts
        if not starts:
            return
        first = batch.first_seq
        topics = batch.topics
        kinds = batch.kinds()
        plain = kinds <= {int(RecordKind.PUBLISH)}
        if not plain and not kinds & MESSAGE_KINDS:
            return
        for i in range(len(batch)):
            seq = first + i
            kind = int(RecordKind.PUBLISH) if plain else batch.kind(i)
            if kind not in MESSAGE_KINDS:
                continue
            topic = topics[i]
            bindings = self._by_topic.get(topic)
            if bindings is None:
                bindings = self._resolve(topic)
            if not bindings:
                continue
            path = batch.path(i)
            run: AppendedRun | None = None
            for binding in bindings:
                name = binding.runner.name
                if seq < starts.get(name, _NOTHING) or not binding.takes(bool(path)):
                    continue
                if run is None:
                    run = self._record_run(batch, i, seq, kind, path)
                offered, dropped = self.caught_up.get(name, (0, 0))
                queued = binding.runner.lane.offer(MessageRun(run, binding.index))
                self.caught_up[name] = (offered + 1, dropped + (not queued))

    def _record_run(
        self, batch: RecordBatch, i: int, seq: int, kind: int, path: tuple[str, ...]
    ) -> AppendedRun:
        topic = batch.topics[i]
        corr_id = batch.corr_id(i)
        sow_key = batch.sow_key(i)
        return AppendedRun(
            topic=topic, topic_literal=topic_json(topic), origin=self._origin,
            pub_hash=batch.pub_hashes[i], pub_seqs=[batch.pub_seqs[i]], bodies=[batch.bodies[i]],
            first_seq=seq, timestamp_us=batch.timestamps_us[i],
            corr_ids=[corr_id] if corr_id else None, sow_keys=[sow_key] if sow_key else None,
            kind=RecordKind(kind), publisher_name="", path=path,
        )  # fmt: skip

    async def keep_checkpoint(self) -> None:
        """Write the checkpoints every :data:`CHECKPOINT_INTERVAL` seconds (until
        cancelled)."""
        assert self._clock is not None
        while True:
            await self._clock.sleep(CHECKPOINT_INTERVAL)
            await self.save()

    async def save(self) -> None:
        """Write each action's checkpoint when one moved (in a thread, atomically)."""
        txlog = self._txlog
        if txlog is None or not self._starts:
            return  # not recovered: the marks would not mean anything yet
        try:
            durable = txlog.durable_seq
            log_id = txlog.own_pub_hash
        except TxlogClosed:
            return
        marks: dict[str, int] = {}
        for name, runner in self._runners.items():
            lane = runner.lane
            if runner.idle and not lane.queued and not lane.marks:
                # every candidate up to the durable seq reached the lane when it was
                # appended, and the worker ran all it took: done through it
                with contextlib.suppress(ValueError):  # a mark already past it
                    lane.done(max(durable, self._starts[name] - 1))
            mark = lane.checkpoint(durable)
            if mark is not None:
                marks[name] = mark
        if marks == self._saved:
            return
        data = encode(log_id, marks)
        writing = self._writing
        if writing is not None and not writing.done():
            # a write whose caller was cancelled (at stop) still runs: one file at a time
            await asyncio.wait({writing})
            if not writing.cancelled():
                writing.exception()  # reported by its own caller, or lost with it
        writing = self._writing = asyncio.ensure_future(
            asyncio.to_thread(write_durable, OsFileSeam(), self._path, data)
        )
        try:
            await asyncio.shield(writing)
        except OSError as exc:
            if not self._write_failed and self._events is not None:
                self._write_failed = True
                self._events.emit(
                    "error", "actions", "checkpoint_write_failed", path=str(self._path),
                    error=f"{type(exc).__name__}: {exc}",
                )  # fmt: skip
            return
        self._write_failed = False
        self._saved = marks
