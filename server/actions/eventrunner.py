"""One event-driven action: its lane, its worker, its tally and its history windows.

An action whose triggers are all event triggers runs once per message (a *firing*), not
once per trigger as :class:`~spool.server.actions.runner.ActionRunner` runs the others.
Its candidate messages wait in its lane (:class:`~spool.server.actions.lanes.EventLane`),
offered by the publish path without ever slowing it; :meth:`EventRunner.work` takes them
in batches, in the order they came, and for each batch:

1. waits until the batch's recorded messages are durable here (a firing never acts on a
   message a crash could still take away);
2. keeps the messages the trigger's ``Filter`` matches, and runs the action's steps once
   for each (:func:`~spool.server.actions.steps.run_steps`), with the message's variables;
3. publishes what the firings' publish steps derived, together, as runs under derived
   identities (:meth:`~spool.server.operations.Operations.publish_derived`): each carries
   its source's sequence and, as correlation id, its source's bookmark, so a second run
   over the same sources stores nothing twice. While the log refuses writes (``txlog
   full``) the batch is retried every :data:`TXLOG_FULL_RETRY` seconds and its
   checkpoint mark waits; another refusal fails the firings whose messages it refused;
4. marks the batch done in the lane (the restart checkpoint), then lets the loop run.

A client's or a link's happening (:class:`~spool.server.actions.hooks.HappeningRun`,
offered by the happenings sink) is one candidate: its trigger's ``Filter`` reads it as a
document, and a firing has its variables; it waits for nothing, and what it derives has no
source bookmark (numbered on from the log's last for its derived identity). So is each
record of a SOW happening (:class:`~spool.server.actions.hooks.SowRun`): a record removed,
or an update that takes a record out of an oof trigger's filter; and each dead letter a
queue published (:class:`~spool.server.actions.hooks.LetterRun`), read as the dead letter.

Nothing is stored per firing: the tally (:class:`~spool.server.actions.results.EventTally`)
counts, and every ``Tuning/ActionHistoryInterval`` in which something moved, one *window*
record goes to the history (``action_run``): the firings counted, one aggregate result per
step, the tally's change in ``events``. The first :data:`FAILED_PER_WINDOW` failed firings
of a window are stored in full beside it, each with a warning; the rest are counted.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from spool.server.actions.history import HistoryWriter
from spool.server.actions.hooks import (
    HappeningRun,
    LetterRun,
    SowRun,
    describe,
    document,
    variables,
)
from spool.server.actions.lanes import EventLane
from spool.server.actions.metricsdoc import MetricsDocument
from spool.server.actions.results import EventTally, RunDict, RunRecord, StepResult, iso
from spool.server.actions.steps import (
    Derived,
    EchoLimit,
    EventBatch,
    EventFiring,
    StepContext,
    WebhookOutlet,
    run_steps,
)
from spool.server.bookmarks import format_bookmark, format_timestamp_us
from spool.server.clock import Clock
from spool.server.config import (
    EVENT_TRIGGERS,
    ActionConfig,
    Config,
    IfCondition,
    IfDiskUsage,
    OnDeadLetter,
    OnSowRemoval,
)
from spool.server.config.template import Template
from spool.server.expr import Filter, MessageView, compile_filter
from spool.server.operations import Operations
from spool.server.ports import AppendedRun, SowRecord, SowRemovalHappening
from spool.server.protocol.errors import TxlogFull
from spool.server.txlog import TxlogClosed

__all__ = [
    "FAILED_PER_WINDOW",
    "MAX_DERIVED_DEPTH",
    "RECENT_WINDOWS",
    "TXLOG_FULL_RETRY",
    "EventRunner",
    "MessageRun",
]

#: Failed firings of one window stored in full (the others are counted).
FAILED_PER_WINDOW: Final = 5
#: Seconds between two tries of a batch's derived messages while the log refuses writes.
TXLOG_FULL_RETRY: Final = 1.0
#: Derived hops after which a message no longer fires on-publish actions: a message an
#: action derived from a message an action derived from... this many times over is cut
#: (a loop the configuration could not prove).
MAX_DERIVED_DEPTH: Final = 4
#: Windows and failed firings of one action kept in memory (the stats database keeps more).
RECENT_WINDOWS: Final = 50

_ORDER: Final = {"ok": 0, "partial": 1, "stopped": 2, "failed": 3, "not_run": -1}


@dataclass(frozen=True, slots=True)
class MessageRun:
    """Candidate messages of one on-publish trigger: a run the publish path appended.

    Attributes:
        run: the messages (they share the run's columns).
        trigger: the trigger's index among the action's triggers.
        depth: how many derived hops led to these messages (0: a client's or the broker's).
    """

    run: AppendedRun
    trigger: int
    depth: int = 0

    @property
    def count(self) -> int:
        """Candidate messages it stands for."""
        return len(self.run.bodies)


@dataclass(slots=True)
class _Firing:
    """One firing of a batch: its record, and how far its source is from a client."""

    record: RunRecord
    depth: int


async def _no_events(event: str, variables: Mapping[str, str], depth: int) -> list[str]:
    """An event action raises no event (the configuration refuses the module there)."""
    return []


def _templates(steps: Sequence[object]) -> set[str]:
    """Every variable the steps' templates read."""
    names: set[str] = set()
    for step in steps:
        for slot in getattr(type(step), "__slots__", ()):
            value = getattr(step, slot, None)
            values = value if isinstance(value, tuple) else (value,)
            for item in values:
                parts = item if isinstance(item, tuple) else (item,)
                for part in parts:
                    if isinstance(part, Template):
                        names.update(part.variables)
    return names


def _record_view(topic: str, record: SowRecord) -> MessageView:
    """A SOW record as a filter reads it (its bookmark, when it has one)."""
    bookmark = format_bookmark(record.pub_hash, record.pub_seq) if record.pub_seq else ""
    return MessageView(topic, record.body, bookmark=bookmark,
                       timestamp=format_timestamp_us(record.timestamp_us))  # fmt: skip


def _segments(entries: list[Derived]) -> Iterator[list[Derived]]:
    """``entries`` (of one derived id, in order) cut where the topic changes."""
    group: list[Derived] = []
    for entry in entries:
        if group and entry.topic != group[0].topic:
            yield group
            group = []
        group.append(entry)
    if group:
        yield group


class EventRunner:
    """Runs one event-driven action (see the module docstring).

    Args:
        config: the action (every trigger an event trigger).
        instance: the instance configuration (its ``Tuning``).
        ops: the instance's admin surface.
        clock: the time source.
        metrics: the metrics document of conditions.
        on_derived: told of each derived id the action published to and how many derived
            hops its messages carry (the publish stage cuts loops with it).
        webhooks: where its webhook steps post (queued, never waited for; None: it has
            no webhook step).
    """

    def __init__(
        self,
        config: ActionConfig,
        instance: Config,
        ops: Operations,
        clock: Clock,
        metrics: MetricsDocument,
        *,
        on_derived: Callable[[int, int], None] | None = None,
        webhooks: WebhookOutlet | None = None,
    ) -> None:
        self.config = config
        self.webhooks = webhooks
        self._instance = instance
        self._ops = ops
        self._clock = clock
        self._metrics = metrics
        self._on_derived = on_derived
        tuning = instance.tuning
        #: the action's candidate messages
        self.lane: EventLane[MessageRun | HappeningRun | SowRun | LetterRun] = EventLane(
            config.name, tuning.action_event_queue_depth
        )
        #: what it did since the instance started
        self.tally = EventTally()
        self._interval = tuning.action_history_interval
        self._filters: list[Filter | None] = [
            compile_filter(t.filter, clock=clock)
            if isinstance(t, EVENT_TRIGGERS) and t.filter is not None
            else None
            for t in config.triggers
        ]
        self._needs = _templates(config.steps)
        self._echo = EchoLimit(clock)
        #: the newest windows and failed firings of this process, oldest first
        self.recent: deque[RunRecord] = deque(maxlen=RECENT_WINDOWS)
        #: the last record stored by an earlier process (read at start), until one is here
        self.stored_last: RunDict | None = None
        self._history = HistoryWriter(config.name, ops)
        self._window_start = clock.time()
        self._window_base = self.tally.counts()
        self._window_failed = 0
        self._window_modules: dict[str, None] = {}
        self._window_steps: list[dict[str, int]] = [{} for _ in config.steps]
        #: the worker waits for candidates (it holds none it has not run)
        self.idle = True
        #: failed firings being written to the history
        self._writes: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def last_run(self) -> RunDict | None:
        """The last window or failed firing recorded (this process's, else the one stored
        before it)."""
        if self.recent:
            return self.recent[-1].to_dict()
        return self.stored_last

    def counts(self) -> dict[str, int]:
        """The tally, with the lane's own counters."""
        tally = self.tally
        tally.offered = self.lane.offered + tally.loop_cut
        tally.dropped = self.lane.dropped
        tally.echo_suppressed = self._echo.suppressed
        if self.webhooks is not None:
            posts = self.webhooks.tally
            tally.webhooks_queued = posts.queued
            tally.webhooks_sent = posts.sent
            tally.webhooks_failed = posts.failed
            tally.webhooks_dropped = posts.dropped
            tally.webhooks_retried = posts.retried
        return tally.counts()

    # -- the worker -------------------------------------------------------------------------

    async def work(self) -> None:
        """Take and run batches until the lane is stopped and empty."""
        while True:
            self.idle = True
            batch = await self.lane.take()
            self.idle = False  # in the step that took it: nothing runs in between
            if not batch:
                return
            try:
                await self.run_batch(batch)
            except TxlogClosed:
                return  # the log closed under the wait: the instance is stopping
            except Exception as exc:  # a batch must never end the action's worker
                self._ops.events.emit(
                    "error", "actions", "event_batch_failed", action=self.name,
                    messages=sum(m.count for m in batch), error=f"{type(exc).__name__}: {exc}",
                )  # fmt: skip
            await asyncio.sleep(0)  # client work interleaves with a busy action

    async def run_batch(self, batch: list[MessageRun | HappeningRun | SowRun | LetterRun]) -> None:
        """Run one batch (see the module docstring)."""
        upto = max(
            (m.run.first_seq + m.count - 1 for m in batch
             if isinstance(m, MessageRun) and m.run.recorded),
            default=0,
        )  # fmt: skip
        await self._ops.wait_durable(upto)
        events = EventBatch(self.name, self._echo)
        firings: list[_Firing] = []
        for item in batch:
            if isinstance(item, HappeningRun):
                firing = await self._fire_happening(events, item, len(firings))
                if firing is not None:
                    firings.append(firing)
                continue
            if isinstance(item, SowRun):
                await self._fire_records(events, item, firings)
                continue
            if isinstance(item, LetterRun):
                await self._fire_letters(events, item, firings)
                continue
            chosen = self._select(item)
            self.tally.matched += len(chosen)
            trigger = self.config.triggers[item.trigger]
            self._window_modules[trigger.module] = None
            for i in chosen:
                firings.append(await self._fire(events, item, i, trigger.module, len(firings)))
        derived_last = await self._publish(events, firings)
        for firing in firings:
            self._settle(firing.record)
        if upto:
            hold = None if events.hold.settled else events.hold
            self.lane.done(upto, derived_last or None, hold)

    async def _fire_happening(
        self, events: EventBatch, item: HappeningRun, index: int
    ) -> _Firing | None:
        """Run the steps once for a client's or a link's happening, if the trigger's
        ``Filter`` takes it (None: it does not)."""
        happening = item.happening
        module = self.config.triggers[item.trigger].module
        self._window_modules[module] = None
        client = getattr(happening, "client", None) or ""
        view = MessageView.of_document("", document(happening), client_name=client)
        flt = self._filters[item.trigger]
        if flt is not None and not flt.matches(view):
            return None
        self.tally.matched += 1
        return await self._run(
            events, EventFiring(view, 0, 0, index), module, describe(happening),
            {**self._base(module), **variables(happening)},
        )  # fmt: skip

    async def _fire_records(self, events: EventBatch, item: SowRun, firings: list[_Firing]) -> None:
        """Run the steps once per record of a SOW happening the trigger takes: a removed
        record whose last state matches its ``Filter`` (on-sow-delete, -expire; oof
        ``deleted``, ``expired``), or an update whose old state matched and whose new
        state does not (oof ``match``)."""
        happening = item.happening
        trigger = self.config.triggers[item.trigger]
        module = trigger.module
        self._window_modules[module] = None
        flt = self._filters[item.trigger]
        topic = happening.topic
        chosen: list[tuple[SowRecord, str]] = []
        if isinstance(happening, SowRemovalHappening):
            reason: str = happening.reason
            if isinstance(trigger, OnSowRemoval):
                reason = "time_limit" if reason == "expired" else ""
            for record in happening.records:
                if flt is None or flt.matches(_record_view(topic, record)):
                    chosen.append((record, reason))
        else:
            assert flt is not None  # an oof ``match`` trigger has a filter
            for change in happening.changes:
                old, new = change.old, change.new
                if old is None or new is None:
                    continue
                if flt.matches(_record_view(topic, old)) and not flt.matches(
                    _record_view(topic, new)
                ):
                    chosen.append((new, "match"))
        self.tally.matched += len(chosen)
        for record, reason in chosen:
            view = _record_view(topic, record)
            variables_ = {
                **self._base(module), "AMPS_TOPIC": topic, "AMPS_SOW_KEY": record.key,
                "AMPS_BOOKMARK": view.bookmark,
                "AMPS_DATA": record.body.decode("utf-8", "replace"),
                "AMPS_DATA_LENGTH": str(len(record.body)),
            }  # fmt: skip
            if reason:
                variables_["AMPS_REASON"] = reason
            firing = EventFiring(view, 0, 0, len(firings))
            detail = f"key {record.key} on topic {topic}"
            firings.append(await self._run(events, firing, module, detail, variables_))

    async def _fire_letters(
        self, events: EventBatch, item: LetterRun, firings: list[_Firing]
    ) -> None:
        """Run the steps once per dead letter of one of the trigger's reasons that its
        ``Filter`` matches (read as the dead letter: ``/dead_letter/...``,
        ``/message/...``)."""
        happening = item.happening
        trigger = self.config.triggers[item.trigger]
        assert isinstance(trigger, OnDeadLetter)
        module = trigger.module
        self._window_modules[module] = None
        flt = self._filters[item.trigger]
        topic = happening.topic
        for letter in happening.letters:
            if letter.reason not in trigger.reasons:
                continue
            view = MessageView(topic, letter.envelope, bookmark=letter.bookmark,
                               client_name=letter.consumer)  # fmt: skip
            if flt is not None and not flt.matches(view):
                continue
            self.tally.matched += 1
            variables_ = {
                **self._base(module), "AMPS_TOPIC": topic, "AMPS_QUEUE": happening.queue,
                "AMPS_DATA": letter.envelope.decode("utf-8", "replace"),
                "AMPS_REASON": letter.reason, "AMPS_BOOKMARK": letter.bookmark,
                "AMPS_CONSUMER": letter.consumer, "AMPS_DELIVERIES": str(letter.deliveries),
            }  # fmt: skip
            firing = EventFiring(view, 0, 0, len(firings))
            detail = f"bookmark {letter.bookmark} of queue {happening.queue} ({letter.reason})"
            firings.append(await self._run(events, firing, module, detail, variables_))

    def _base(self, module: str) -> dict[str, str]:
        """The variables of every firing."""
        now = self._clock.time()
        return {
            "AMPS_INSTANCE_NAME": self._instance.name,
            "AMPS_ACTION_NAME": self.name,
            "AMPS_TRIGGER": module,
            "AMPS_DATETIME": iso(now),
            "AMPS_UNIX_TIMESTAMP": f"{now:.6f}",
        }

    def _select(self, item: MessageRun) -> list[int]:
        run = item.run
        flt = self._filters[item.trigger]
        n = item.count
        if flt is None:
            return list(range(n))
        seqs = run.pub_seqs
        us = run.timestamp_us
        stamp = format_timestamp_us(us) if us is not None else ""
        if run.documents is None:  # the actions that filter this run share each parse
            run.documents = [None] * len(run.bodies)
        return flt.select(
            [run.topic] * n, run.bodies, range(n),
            bookmark_of=(lambda i: format_bookmark(run.pub_hash, seqs[i])) if run.recorded else None,
            timestamp_of=lambda _: stamp, documents=run.documents,
        )  # fmt: skip

    def _variables(self, module: str, run: AppendedRun, i: int, bookmark: str) -> dict[str, str]:
        now = self._clock.time()
        variables = {
            **self._base(module),
            "AMPS_TOPIC": run.topic,
            "AMPS_BOOKMARK": bookmark,
            "AMPS_CLIENT_NAME": run.publisher_name,
            "AMPS_MESSAGE_SOURCE": "replicated" if run.path else "local",
        }
        needs = self._needs
        if "AMPS_DATA" in needs:
            variables["AMPS_DATA"] = run.bodies[i].decode("utf-8", "replace")
        if "AMPS_DATA_LENGTH" in needs:
            variables["AMPS_DATA_LENGTH"] = str(len(run.bodies[i]))
        if "AMPS_CORRELATION_ID" in needs:
            variables["AMPS_CORRELATION_ID"] = (run.corr_ids[i] or "") if run.corr_ids else ""
        if "AMPS_SOW_KEY" in needs:
            keys = run.keys or run.sow_keys
            variables["AMPS_SOW_KEY"] = (keys[i] or "") if keys else ""
        if "AMPS_TIMESTAMP" in needs:
            us = run.timestamp_us
            variables["AMPS_TIMESTAMP"] = format_timestamp_us(us) if us is not None else iso(now)
        return variables

    async def _fire(
        self, events: EventBatch, item: MessageRun, i: int, module: str, index: int
    ) -> _Firing:
        """Run the steps once for message ``i`` of ``item``."""
        run = item.run
        seq = run.pub_seqs[i] if run.recorded else 0
        bookmark = format_bookmark(run.pub_hash, seq) if seq else ""
        detail = (
            f"bookmark {bookmark} on topic {run.topic}" if bookmark
            else f"a message on topic {run.topic}"
        )  # fmt: skip
        view = MessageView(run.topic, run.bodies[i], bookmark=bookmark,
                           client_name=run.publisher_name)  # fmt: skip
        return await self._run(
            events, EventFiring(view, run.pub_hash, seq, index), module, detail,
            self._variables(module, run, i, bookmark), item.depth,
        )  # fmt: skip

    async def _run(
        self,
        events: EventBatch,
        firing: EventFiring,
        module: str,
        detail: str,
        variables_: dict[str, str],
        depth: int = 0,
    ) -> _Firing:
        """Run the steps once for ``firing`` of the batch (its record says ``detail``;
        ``depth``: derived hops from a client's message to its source)."""
        events.firing = firing
        record = RunRecord(self.name, module, detail, self._clock.time())
        ctx = StepContext(
            self._ops, self._instance, self._clock, self._metrics, _no_events, variables_,
            event=events, webhooks=self.webhooks,
        )  # fmt: skip
        await run_steps(self.config.steps, record, ctx)
        record.finish(self._clock.time())
        return _Firing(record, depth)

    async def _publish(self, events: EventBatch, firings: list[_Firing]) -> int:
        """Publish the batch's derived messages; the log's last seq once they are in it
        (0: none went to the log). A refusal fails the firings it refused."""
        by_id: dict[int, list[Derived]] = {}
        for entry in events.derived:
            by_id.setdefault(entry.pub_hash, []).append(entry)
        last = 0
        for pub, entries in by_id.items():
            depth = max(firings[e.firing].depth for e in entries) + 1
            if self._on_derived is not None:
                self._on_derived(pub, depth)
            for group in _segments(entries):
                last = max(last, await self._publish_group(pub, group, firings))
        return last

    async def _publish_group(self, pub: int, group: list[Derived], firings: list[_Firing]) -> int:
        topic = group[0].topic
        seqs = [e.pub_seq for e in group]
        if not seqs[0]:  # sources without a bookmark: numbered on from the log's highest
            base = self._ops.publisher_last(pub)
            seqs = list(range(base + 1, base + 1 + len(group)))
        bodies = [e.body for e in group]
        corr_ids = [e.corr_id for e in group]
        accepted = 0
        while True:
            out = self._ops.publish_derived(topic, pub, seqs, bodies, corr_ids, action=self.name)
            accepted += out.accepted
            failure = out.failure
            if failure is None or failure.reason != TxlogFull.reason:
                break
            # the log refuses writes for now: try again, the checkpoint waits meanwhile
            # (what went in already comes back as duplicates)
            await self._clock.sleep(TXLOG_FULL_RETRY)
        self.tally.derived += accepted
        self.tally.derived_duplicates += out.duplicates - (accepted - out.accepted)
        if failure is not None:
            refused = set(out.refused_seqs) if len(out.refused_seqs) == out.refused else None
            for seq, entry in zip(seqs, group, strict=True):
                if refused is None or seq in refused:
                    self._fail_publish(firings[entry.firing].record, entry.step,
                                       f"publish to {topic!r} refused: {failure}")  # fmt: skip
        return out.last_seq

    @staticmethod
    def _fail_publish(record: RunRecord, step: int, message: str) -> None:
        for result in record.steps:
            if result.index == step:
                result.status = "failed"
                result.message = message
        record.finish(record.finished or record.started)

    # -- the tally and the history ----------------------------------------------------------

    def _settle(self, record: RunRecord) -> None:
        tally = self.tally
        tally.runs += 1
        outcome = record.outcome or "failed"
        if outcome == "failed":
            tally.failed += 1
        elif outcome == "stopped":
            tally.stopped += 1
        else:
            tally.succeeded += 1
        for result, seen in zip(record.steps, self._window_steps, strict=True):
            seen[result.status] = seen.get(result.status, 0) + 1
        if outcome != "failed":
            return
        self._window_failed += 1
        if self._window_failed > FAILED_PER_WINDOW:
            return
        self._ops.events.emit(
            "warning", "actions", "event_run_failed", action=self.name,
            trigger=record.trigger, detail=record.detail, message=record.message,
        )  # fmt: skip
        self.recent.append(record)
        task = asyncio.get_running_loop().create_task(self._history.store(record))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def windows(self) -> None:
        """Close a window every ``Tuning/ActionHistoryInterval`` (until cancelled)."""
        while True:
            await self._clock.sleep(self._interval)
            await self.close_window()

    async def close_window(self) -> RunRecord | None:
        """Record the window since the last one when anything moved in it (else None):
        one history record, one ``actions/event_window`` event."""
        now = self._clock.time()
        counts = self.counts()
        delta = self.tally.since(self._window_base)
        started = self._window_start
        if not any(delta.values()):
            self._window_start = now
            return None
        failed = self._window_failed
        modules = ", ".join(self._window_modules) or self.config.triggers[0].module
        record = RunRecord(self.name, modules, self._detail(delta), started)
        record.steps = [
            self._aggregate(index, step, seen)
            for index, (step, seen) in enumerate(
                zip(self.config.steps, self._window_steps, strict=True), start=1
            )
        ]
        record.finish(now)
        if not delta["runs"]:
            record.outcome = "failed" if delta["dropped"] or delta["loop_cut"] else "succeeded"
        record.events = delta
        self._window_start = now
        self._window_base = counts
        self._window_failed = 0
        self._window_modules = {}
        self._window_steps = [{} for _ in self.config.steps]
        self._ops.events.emit(
            "info", "actions", "event_window", action=self.name, detail=record.detail,
            outcome=record.outcome or "failed", stored_failures=min(failed, FAILED_PER_WINDOW),
            **delta,
        )  # fmt: skip
        if delta["dropped"]:
            self._ops.events.emit(
                "warning", "actions", "events_dropped", action=self.name, dropped=delta["dropped"],
                capacity=self.lane.capacity,
                detail="the action's lane was full: those messages did not fire it",
            )  # fmt: skip
        if delta["loop_cut"]:
            self._ops.events.emit(
                "warning", "actions", "loop_cut", action=self.name, cut=delta["loop_cut"],
                depth=MAX_DERIVED_DEPTH,
                detail=f"messages derived {MAX_DERIVED_DEPTH} times over did not fire it",
            )  # fmt: skip
        await self._history.store(record)
        self.recent.append(record)
        return record

    @staticmethod
    def _detail(delta: Mapping[str, int]) -> str:
        text = f"{delta['offered']:,} events"
        lost = [f"{delta[k]:,} {w}" for k, w in (("dropped", "dropped"), ("loop_cut", "cut"))
                if delta[k]]  # fmt: skip
        if lost:
            text += f" ({', '.join(lost)})"
        text += f": {delta['runs']:,} runs"
        parts = [f"{delta[k]:,} {k}" for k in ("succeeded", "stopped", "failed") if delta[k]]
        if parts:
            text += ", " + ", ".join(parts)
        if delta["echo_suppressed"]:
            text += f"; {delta['echo_suppressed']:,} echo lines over the rate"
        posts = [f"{delta['webhooks_' + k]:,} {k}" for k in ("sent", "failed", "dropped")
                 if delta["webhooks_" + k]]  # fmt: skip
        if posts:
            text += f"; webhooks {', '.join(posts)}"
        return text

    @staticmethod
    def _aggregate(index: int, step: object, seen: Mapping[str, int]) -> StepResult:
        kind = "if" if isinstance(step, IfCondition | IfDiskUsage) else "do"
        module = str(getattr(step, "module", ""))
        if not seen:
            return StepResult(index, kind, module, "not_run", "not reached in this window")
        worst = max(seen, key=lambda s: _ORDER.get(s, 0))
        status = "not_run" if worst == "not_run" else worst
        message = ", ".join(f"{seen[s]:,} {s}" for s in sorted(seen, key=lambda s: _ORDER[s]))
        if status == "not_run":
            return StepResult(index, kind, module, "not_run", message)
        if status == "failed":
            return StepResult(index, kind, module, "failed", message)
        if status == "stopped":
            return StepResult(index, kind, module, "stopped", message)
        if status == "partial":
            return StepResult(index, kind, module, "partial", message)
        return StepResult(index, kind, module, "ok", message)

    async def flush(self) -> None:
        """Wait for the failed firings being written (at stop)."""
        if self._writes:
            await asyncio.wait(set(self._writes))
