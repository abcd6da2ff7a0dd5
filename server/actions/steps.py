"""What each condition and module does when a run reaches it.

One coroutine per module, each taking its configuration and the :class:`StepContext` of
the run and returning a :class:`~spool.server.actions.results.StepResult` (the runner fills in
its index and duration). Every effect goes through the instance's admin surface
(:class:`~spool.server.operations.Operations`), the one REST uses: journals, statistics,
transports, replication destinations, the broker's own publish, the shutdown request. A module that cannot do its
work returns ``failed`` with the reason (the runner also turns an unexpected exception into
``failed``): nothing here raises into the scheduler.

Modules add variables to the run's context for the modules after them
(``AMPS_JOURNALS_ARCHIVED``, ``AMPS_PUBLISHED_BOOKMARK``...; the names are declared on the
configuration classes, where the loader checks references against them).

The same steps run the firings of an event-driven action, one per message
(:mod:`spool.server.actions.eventrunner`): then :attr:`StepContext.event` holds the batch
the firing belongs to. A publish does not wait there: its message joins the batch's
derived messages (:class:`EventBatch`), published together at the batch's end under a
derived identity; an echo counts against its step's ``MaxPerSecond``; extract-values
reads the message that fired the run; a webhook is queued (:class:`WebhookOutlet`) and
the firing goes on: the event runner never waits on HTTP. A run of its own (a schedule,
an admin request, start-up) waits for the post's outcome and sets
``AMPS_WEBHOOK_STATUS``.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import quote

import orjson

from spool.server.actions.journals import JournalOp, PinnedJournal, select
from spool.server.actions.lanes import Hold
from spool.server.actions.metricsdoc import MetricsDocument
from spool.server.actions.results import (
    PinnedDict,
    RunRecord,
    StepResult,
    StepStatus,
    WebhookTally,
)
from spool.server.actions.webhooks import WebhookOutcome, WebhookRequest, Webhooks
from spool.server.bookmarks import derived_pub_hash, format_bookmark
from spool.server.clock import Clock
from spool.server.config import (
    AllowList,
    ArchiveJournals,
    CompactSow,
    CompressJournals,
    Config,
    DeleteSow,
    DiskThreshold,
    DowngradeReplication,
    EchoMessage,
    ExecuteEvent,
    ExtractValues,
    IfCondition,
    IfDiskUsage,
    PublishMessage,
    RedriveDeadLetters,
    RemoveJournals,
    SetProxiedTransfer,
    SetTransport,
    Shutdown,
    Step,
    TruncateStatistics,
    UpgradeReplication,
    Webhook,
    redact_url,
)
from spool.server.engine_errors import PublishRefused, TransportNotFound
from spool.server.expr import FilterSyntaxError, MessageView, compile_filter, compile_value
from spool.server.expr.values import Value
from spool.server.operations import JournalDict, Operations
from spool.server.protocol.errors import ProtocolFailure
from spool.server.protocol.topic import is_regex_topic
from spool.server.queues.errors import QueueError
from spool.server.replication.errors import ReplicationError
from spool.server.sow.errors import SowTopicNotFound
from spool.server.stats.host import FilesystemUsage
from spool.server.txlog.errors import JournalPinned
from spool.server.units import format_duration

__all__ = [
    "MAX_EVENT_DEPTH",
    "Derived",
    "EchoLimit",
    "EventBatch",
    "EventFiring",
    "RaiseEvent",
    "StepContext",
    "WebhookOutlet",
    "run_step",
    "run_steps",
]

#: How deep events raised by actions may chain (an action raising an event whose action
#: raises another...) before the raise is refused: a loop in the configuration ends here.
MAX_EVENT_DEPTH: Final = 4

#: ``raise_event(event, variables, depth)`` -> one line per action it ran
RaiseEvent = Callable[[str, Mapping[str, str], int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class EventFiring:
    """The message one firing of an event-driven action runs for.

    Attributes:
        view: the message (its topic, body, bookmark), as filters read it.
        pub_hash: its publisher id.
        pub_seq: its publisher sequence; 0 when it has no bookmark (its topic is not
            recorded).
        index: the firing's place in its batch.
    """

    view: MessageView
    pub_hash: int
    pub_seq: int
    index: int


@dataclass(frozen=True, slots=True)
class Derived:
    """A message a publish step derived, waiting for the end of its batch.

    Attributes:
        step: the publish step (1-based).
        topic: where it goes.
        pub_hash: its derived publisher id.
        pub_seq: its sequence (its source's); 0: numbered when published (its source has
            no bookmark).
        body: the message.
        corr_id: its correlation id (``""``: none).
        firing: the firing that derived it (its index in the batch).
    """

    step: int
    topic: str
    pub_hash: int
    pub_seq: int
    body: bytes
    corr_id: str
    firing: int


class EchoLimit:
    """The ``MaxPerSecond`` of an action's echo steps: lines per step per second of the
    clock; what is over it is counted, not written."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        #: step -> (the second, lines written in it)
        self._seconds: dict[int, tuple[int, int]] = {}
        #: lines not written since the instance started
        self.suppressed = 0

    def allow(self, step: int, limit: int) -> bool:
        """Whether one more line of ``step`` fits in this second (counted if not)."""
        second = math.floor(self._clock.monotonic())
        at, lines = self._seconds.get(step, (second, 0))
        if at != second:
            lines = 0
        if lines >= limit:
            self.suppressed += 1
            return False
        self._seconds[step] = (second, lines + 1)
        return True


@dataclass(slots=True)
class EventBatch:
    """What the firings of one batch of an event-driven action share.

    Attributes:
        action: the action's name (its derived identities).
        echo: its echo steps' rate limit.
        firing: the message of the firing being run.
        derived: the messages its publish steps derived so far, in order.
        metrics: the metrics document its conditions read (read once per batch, at the
            first condition: per message it would cost a reading of the host each).
        hold: its webhook posts not settled yet (the batch's checkpoint mark waits for
            them, so a post a crash or a stop cuts off is made again after a restart).
    """

    action: str
    echo: EchoLimit
    firing: EventFiring | None = None
    derived: list[Derived] = field(default_factory=list)
    metrics: dict[str, Value] | None = None
    hold: Hold = field(default_factory=Hold)


@dataclass(frozen=True, slots=True)
class WebhookOutlet:
    """Where an action's webhook steps post.

    Attributes:
        sender: the instance's webhook sender (its queue, retries, threads).
        allow: the ``<Webhooks><Allow>`` prefixes; an expanded URL is checked again.
        tally: the action's webhook counters.
    """

    sender: Webhooks
    allow: AllowList
    tally: WebhookTally

    def count(self, outcome: WebhookOutcome) -> None:
        """Count what became of one post."""
        tally = self.tally
        if outcome.result == "sent":
            tally.sent += 1
        elif outcome.result == "failed":
            tally.failed += 1
        else:  # refused at once, or cut off by the stop's budget
            tally.dropped += 1
        tally.retried += max(outcome.attempts - 1, 0)


@dataclass(slots=True)
class StepContext:
    """What the steps of one run share.

    Attributes:
        ops: the instance's admin surface.
        config: the instance configuration (its directories).
        clock: the time source.
        metrics: the metrics document of conditions.
        variables: the run's context; steps add to it.
        raise_event: runs the actions an event triggers.
        depth: how many raised events led to this run.
        index: the step being run (1-based; the runner sets it).
        event: the batch of an event-driven action's firing (None: a run of its own).
        webhooks: where its webhook steps post (None: the instance has none).
    """

    ops: Operations
    config: Config
    clock: Clock
    metrics: MetricsDocument
    raise_event: RaiseEvent
    variables: dict[str, str] = field(default_factory=dict)
    depth: int = 0
    index: int = 0
    event: EventBatch | None = None
    webhooks: WebhookOutlet | None = None

    def directory(self, label: str, path: Path | None) -> Path:
        """A disk option's directory: the one given, or the instance's by its name."""
        return path if path is not None else self.config.directory(label)


def _result(
    step: Step,
    status: StepStatus,
    message: str,
    *,
    journals: list[int] | None = None,
    files: list[str] | None = None,
    pinned: list[PinnedDict] | None = None,
    variables: dict[str, str] | None = None,
) -> StepResult:
    kind = "if" if isinstance(step, IfCondition | IfDiskUsage) else "do"
    return StepResult(
        0, kind, step.module, status, message, journals=journals or [], files=files or [],
        pinned=pinned or [], variables=variables or {},
    )  # fmt: skip


def _disk_variables(usage: FilesystemUsage) -> dict[str, str]:
    return {
        "AMPS_DISK_PATH": usage.path,
        "AMPS_DISK_PERCENT": f"{usage.percent:g}",
        "AMPS_DISK_FREE_BYTES": str(usage.free),
    }


def passes(threshold: DiskThreshold, usage: FilesystemUsage) -> bool:
    """Whether a file system's usage passes a disk threshold."""
    if threshold.kind == "above":
        return usage.percent > threshold.value
    if threshold.kind == "below":
        return usage.percent < threshold.value
    return usage.free < threshold.value


# -- conditions -----------------------------------------------------------------------------


async def _if_condition(step: IfCondition, ctx: StepContext) -> StepResult:
    text = step.expression.expand(ctx.variables)
    try:
        flt = compile_filter(text, clock=ctx.clock)
    except FilterSyntaxError as exc:
        return _result(step, "failed", f"the condition {text!r} does not compile: {exc}")
    batch = ctx.event
    if batch is None:
        document = await ctx.metrics.read()
    else:
        if batch.metrics is None:
            batch.metrics = await ctx.metrics.read()
        document = batch.metrics
    view = MessageView.of_document("", document)
    if flt.matches(view):
        return _result(step, "ok", f"{text} holds")
    return _result(step, "stopped", f"{text} does not hold")


async def _if_disk_usage(step: IfDiskUsage, ctx: StepContext) -> StepResult:
    usage = await ctx.ops.filesystem_usage(ctx.directory(step.label, step.path))
    variables = _disk_variables(usage)
    ctx.variables.update(variables)
    seen = f"{step.label} is {usage.percent:g}% used, {usage.free} bytes free"
    if passes(step.threshold, usage):
        return _result(step, "ok", f"{seen} ({step.threshold.describe()})", variables=variables)
    return _result(step, "stopped", f"{seen}: not {step.threshold.describe()}", variables=variables)


# -- journals -------------------------------------------------------------------------------


_VERBS: Final[Mapping[JournalOp, str]] = {
    "archive": "archived",
    "compress": "compressed",
    "remove": "removed",
}
_COUNTERS: Final[Mapping[JournalOp, str]] = {
    "archive": "AMPS_JOURNALS_ARCHIVED",
    "compress": "AMPS_JOURNALS_COMPRESSED",
    "remove": "AMPS_JOURNALS_REMOVED",
}


def _ids(ids: list[int]) -> str:
    if not ids:
        return "none"
    return str(ids[0]) if len(ids) == 1 else f"{ids[0]}..{ids[-1]} ({len(ids)})"


async def _journals(
    step: ArchiveJournals | CompressJournals | RemoveJournals, ctx: StepContext
) -> StepResult:
    op: JournalOp = (
        "archive" if isinstance(step, ArchiveJournals)
        else "compress" if isinstance(step, CompressJournals)
        else "remove"
    )  # fmt: skip
    state = ctx.ops.journal_state()
    if state is None:
        return _result(step, "failed", "this instance has no transaction log")
    journals, pins = state
    chosen = select(op, journals, pins, step.limits, ctx.clock.time())
    pinned = list(chosen.pinned)
    done: list[JournalDict] = []
    before = {j.id: j.path for j in chosen.act}
    if chosen.target is not None:
        try:
            if isinstance(step, CompressJournals):
                done = await ctx.ops.journal_action(op, chosen.target, step.method)
            else:
                done = await ctx.ops.journal_action(op, chosen.target)
        except JournalPinned as exc:
            # a pin was taken while the run waited for the journals to be sealed
            pinned = [PinnedJournal(j.id, exc.owner, exc.seq) for j in chosen.act] + pinned
    ids = [d["id"] for d in done]
    files = [before.get(d["id"], d["path"]) if op == "remove" else d["path"] for d in done]
    variables = {_COUNTERS[op]: str(len(done))}
    ctx.variables.update(variables)
    message = f"{_VERBS[op]} journals {_ids(ids)}" if done else f"no journal to {op}"
    pinned_dicts: list[PinnedDict] = [
        {"journal": p.journal, "owner": p.owner, "seq": p.seq} for p in pinned
    ]
    if pinned:
        first = pinned[0]
        message += (
            f"; journals {_ids([p.journal for p in pinned])} still needed by {first.owner} "
            f"(from seq {first.seq}): retried next run"
        )
    return _result(
        step, "partial" if pinned else "ok", message, journals=ids, files=files,
        pinned=pinned_dicts, variables=variables,
    )  # fmt: skip


# -- the rest -------------------------------------------------------------------------------


async def _truncate(step: TruncateStatistics, ctx: StepContext) -> StepResult:
    deleted = await ctx.ops.truncate_stats(ctx.clock.time() - step.age)
    variables = {"AMPS_STATS_SAMPLES_DELETED": str(deleted)}
    ctx.variables.update(variables)
    return _result(step, "ok", f"deleted {deleted} samples", variables=variables)


async def _transport(step: SetTransport, ctx: StepContext) -> StepResult:
    try:
        ctx.ops.set_transport_enabled(step.transport, step.enabled)
    except TransportNotFound as exc:
        return _result(step, "failed", str(exc))
    state = "enabled" if step.enabled else "disabled"
    ctx.ops.events.emit(
        "info", "actions", f"transport_{state}", transport=step.transport,
        action=ctx.variables.get("AMPS_ACTION_NAME", ""),
    )  # fmt: skip
    return _result(step, "ok", f"transport {step.transport} {state}")


async def _replication(
    step: DowngradeReplication | UpgradeReplication, ctx: StepContext
) -> StepResult:
    """Downgrade the sync destinations past ``Age``, or upgrade the downgraded ones that
    are connected and under it. A change the replication service refuses (the
    ``MinimumSyncDestinations`` floor) is reported and tried again at the next run."""
    downgrade = isinstance(step, DowngradeReplication)
    try:
        info = ctx.ops.replication_info()
    except ReplicationError as exc:
        return _result(step, "failed", str(exc))
    watched = set(step.destinations)
    names: list[str] = []
    changed: list[str] = []
    refused: list[str] = []
    for dest in info["destinations"]:
        name = dest["name"]
        if dest["configured_sync_type"] != "sync" or (watched and name not in watched):
            continue
        behind = dest["seconds_behind"]
        if downgrade:
            due = dest["effective_sync_type"] == "sync" and behind > step.age
        else:
            due = (
                dest["effective_sync_type"] == "async" and dest["connected"] and (behind < step.age)
            )
        if not due:
            continue
        try:
            if downgrade:
                ctx.ops.downgrade_destination(name)
            else:
                ctx.ops.upgrade_destination(name)
        except ReplicationError as exc:
            refused.append(f"{name}: {exc}")
            continue
        names.append(name)
        changed.append(f"{name} ({behind:g}s behind)")
    variables = {
        ("AMPS_DESTINATIONS_DOWNGRADED" if downgrade else "AMPS_DESTINATIONS_UPGRADED"): (
            ",".join(names)
        )
    }
    ctx.variables.update(variables)
    limit = format_duration(step.age)
    if changed:
        message = f"{'downgraded' if downgrade else 'upgraded'} {', '.join(changed)}"
        if not downgrade:
            message += ": sync again once caught up"
    elif downgrade:
        message = f"no sync destination is more than {limit} behind"
    else:
        message = f"no downgraded destination is connected and less than {limit} behind"
    if refused:
        message += "; refused: " + "; ".join(refused) + " (tried again next run)"
    return _result(step, "partial" if refused else "ok", message, variables=variables)


async def _publish(step: PublishMessage, ctx: StepContext) -> StepResult:
    topic = step.topic.expand(ctx.variables)
    if not topic or is_regex_topic(topic) or any(ord(ch) < 32 for ch in topic):
        return _result(step, "failed", f"{topic!r} cannot be published to (not a topic name)")
    # escaped inside JSON strings, raw in value positions; a value that is not JSON where
    # it stands fails the step here rather than reaching subscribers
    body = step.data.expand_json(ctx.variables)
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _result(step, "failed", f"the expanded Data is not JSON ({exc}): {body[:200]!r}")
    firing = ctx.event.firing if ctx.event is not None else None
    if step.correlation_id is not None:
        corr_id = step.correlation_id.expand(ctx.variables)
        if any(ord(ch) < 32 for ch in corr_id):
            return _result(step, "failed", f"the correlation id {corr_id!r} has control "
                           "characters")  # fmt: skip
    else:  # a derived message names its source
        corr_id = firing.view.bookmark if firing is not None else ""
    if ctx.event is not None and firing is not None:
        return _derive(step, ctx.event, firing, ctx, topic, body, corr_id)
    try:
        published = await ctx.ops.publish(topic, body.encode(), corr_id)
    except PublishRefused as exc:
        return _result(step, "failed", f"publish to {topic!r} refused: {exc}")
    variables = {"AMPS_PUBLISHED_BOOKMARK": published.bookmark or ""}
    ctx.variables.update(variables)
    where = f" (bookmark {published.bookmark})" if published.bookmark else ""
    return _result(step, "ok", f"published to {topic}{where}", variables=variables)


def _derive(
    step: PublishMessage,
    batch: EventBatch,
    firing: EventFiring,
    ctx: StepContext,
    topic: str,
    body: str,
    corr_id: str,
) -> StepResult:
    """A firing's publish: the message joins the batch's derived messages under the
    identity of this step and its source (its source's sequence when it has one), so
    running the firing again stores nothing twice."""
    recorded = firing.pub_seq > 0
    pub = derived_pub_hash(batch.action, ctx.index, firing.pub_hash, unrecorded=not recorded)
    batch.derived.append(
        Derived(ctx.index, topic, pub, firing.pub_seq, body.encode(), corr_id, firing.index)
    )
    bookmark = format_bookmark(pub, firing.pub_seq) if recorded else ""
    variables = {"AMPS_PUBLISHED_BOOKMARK": bookmark}
    ctx.variables.update(variables)
    return _result(step, "ok", f"derived to {topic}", variables=variables)


async def _delete_sow(step: DeleteSow, ctx: StepContext) -> StepResult:
    topic = step.topic.expand(ctx.variables)
    action = ctx.variables.get("AMPS_ACTION_NAME", "")
    try:
        if step.key is not None:
            key = step.key.expand(ctx.variables)
            deleted = await ctx.ops.delete_sow(topic, keys=[key], by=f"action {action}")
            what = f"key {key!r}"
        else:
            assert step.filter is not None  # the configuration gives exactly one
            text = step.filter.expand(ctx.variables)
            deleted = await ctx.ops.delete_sow(topic, filter=text, by=f"action {action}")
            what = f"filter {text}"
    except ProtocolFailure as exc:
        return _result(step, "failed", f"delete from {topic!r} refused: {exc}")
    variables = {"AMPS_SOW_DELETED": str(deleted)}
    ctx.variables.update(variables)
    return _result(step, "ok", f"deleted {deleted} record(s) of {topic} ({what})",
                   variables=variables)  # fmt: skip


async def _compact_sow(step: CompactSow, ctx: StepContext) -> StepResult:
    """Compact the files of the persistent SOW topics the step names (a topic, or a
    rule's regular expression: every topic it keeps), one after the other; the first
    that fails stops the step."""
    names = set(step.topics)
    chosen = [
        info["topic"]
        for info in ctx.ops.sow_topics()
        if info["durability"] == "persistent"
        and (not names or info["topic"] in names or info["rule"] in names)
    ]
    before = after = 0
    for topic in chosen:
        try:
            done = await ctx.ops.compact_sow(topic)
        except (OSError, ProtocolFailure, SowTopicNotFound) as exc:
            return _result(step, "failed", f"compaction of {topic!r} failed: {exc}")
        before += done["before_bytes"]
        after += done["after_bytes"]
    variables = {"AMPS_SOW_COMPACTED": str(len(chosen))}
    ctx.variables.update(variables)
    if not chosen:
        return _result(step, "ok", "no persistent SOW topic of these has a file yet",
                       variables=variables)  # fmt: skip
    topics = f"{len(chosen)} topic{'s' if len(chosen) > 1 else ''}"
    return _result(step, "ok", f"compacted {topics}: {before} -> {after} bytes",
                   variables=variables)  # fmt: skip


async def _echo(step: EchoMessage, ctx: StepContext) -> StepResult:
    text = step.message.expand(ctx.variables)
    if ctx.event is not None and not ctx.event.echo.allow(ctx.index, step.max_per_second):
        return _result(step, "ok", f"over {step.max_per_second} lines a second: counted, "
                       "not written")  # fmt: skip
    ctx.ops.events.emit(
        step.level, "actions", "echo", action=ctx.variables.get("AMPS_ACTION_NAME", ""),
        message=text,
    )  # fmt: skip
    return _result(step, "ok", f"echoed: {text[:200]}")


def _as_variable(value: object) -> str:
    """An extracted value as a variable: text as is, NULL empty, the rest as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


async def _extract_values(step: ExtractValues, ctx: StepContext) -> StepResult:
    if step.data is not None:
        text = step.data.expand_json(ctx.variables)
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return _result(step, "failed", f"the expanded Data is not JSON ({exc}): "
                           f"{text[:200]!r}")  # fmt: skip
        view = MessageView.of_document("", document if isinstance(document, dict) else {},
                                       body=text.encode())  # fmt: skip
    elif ctx.event is not None and ctx.event.firing is not None:
        view = ctx.event.firing.view
    else:  # the configuration refuses this: nothing to read without a message or Data
        return _result(step, "failed", "no message fired this run and the step has no Data")
    variables = {
        name: _as_variable(compile_value(expression, clock=ctx.clock).evaluate(view))
        for name, expression in step.values
    }
    ctx.variables.update(variables)
    return _result(step, "ok", f"extracted {', '.join(variables)}", variables=variables)


def _url_part(value: str) -> str:
    """A variable's value inside a URL: every character but unreserved ones
    percent-encoded, so a value cannot add a path segment, a query or a fragment."""
    return quote(value, safe="")


def _event_id(ctx: StepContext) -> str:
    """What identifies this post to its receiver (``Spool-Event-Id``).

    A firing of a recorded message: the message's bookmark and the step's number
    (``PUB|SEQ|STEP``), the same for a retry and for a run of the same message again
    after a restart, so the receiver can drop repeats. Anything else (a run of its own, a
    message of a topic the log does not record): a fresh identifier, the same for each
    retry of the post."""
    firing = ctx.event.firing if ctx.event is not None else None
    if firing is not None and firing.view.bookmark:
        return f"{firing.view.bookmark}{ctx.index}"
    return uuid.uuid4().hex


async def _webhook(step: Webhook, ctx: StepContext) -> StepResult:
    """Post the step's body: queued in a firing, awaited in a run of its own. Messages
    name the URL only as :func:`~spool.server.config.redact_url` shows it, never a
    header value or the key."""
    outlet = ctx.webhooks
    if outlet is None:
        return _result(step, "failed", "this instance has no webhook sender")
    url = step.url.expand(ctx.variables, _url_part)
    refusal = outlet.allow.refusal(url, what="the expanded Url")
    if refusal is not None:
        return _result(step, "failed", f"not posted: {refusal}")
    target = redact_url(url)
    if "json" in step.content_type.lower():
        body = step.body.expand_json(ctx.variables)
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return _result(step, "failed", f"not posted to {target}: the expanded Body is "
                           f"not JSON ({exc})")  # fmt: skip
    else:
        body = step.body.expand(ctx.variables)
    try:
        request = WebhookRequest(
            action=ctx.variables.get("AMPS_ACTION_NAME", ""), url=url, body=body.encode(),
            event_id=_event_id(ctx), content_type=step.content_type,
            secret_headers=tuple((name, value.expand(ctx.variables))
                                 for name, value in step.headers),
            timeout=step.timeout, retries=step.retries, backoff=step.backoff,
            signing_key=step.signing_key.encode() if step.signing_key is not None else None,
        )  # fmt: skip
    except ValueError as exc:  # names a header, never its value
        return _result(step, "failed", f"not posted to {target}: {exc}")
    sender = outlet.sender
    if ctx.event is not None:  # a firing: queued, never waited for
        hold = ctx.event.hold

        def settled(outcome: WebhookOutcome) -> None:
            outlet.count(outcome)
            if outcome.result in ("sent", "failed"):
                hold.release()  # settled; one cut off by the stop stays held

        hold.add()
        if not sender.submit(request, settled):
            hold.release()  # refused at once: the step fails, nothing to make again
            return _result(step, "failed", f"dropped: {_refused(sender)} ({target})")
        outlet.tally.queued += 1
        return _result(step, "ok", f"queued for {target}")
    future: asyncio.Future[WebhookOutcome] = asyncio.get_running_loop().create_future()

    def settle(outcome: WebhookOutcome) -> None:
        outlet.count(outcome)
        if not future.done():
            future.set_result(outcome)

    if sender.submit(request, settle):
        outlet.tally.queued += 1
    # the post goes on if this run is cancelled: its outcome is still counted
    outcome = await asyncio.shield(future)
    variables = {"AMPS_WEBHOOK_STATUS": str(outcome.status) if outcome.status else ""}
    ctx.variables.update(variables)
    if outcome.result == "dropped":
        return _result(step, "failed", f"dropped: {_refused(sender)} ({target})",
                       variables=variables)  # fmt: skip
    return _result(step, "ok" if outcome.ok else "failed", outcome.describe(),
                   variables=variables)  # fmt: skip


def _refused(sender: Webhooks) -> str:
    """Why ``sender`` refused a post just now."""
    if not sender.accepting:
        return "the instance is stopping"
    return f"the instance's webhook queue holds {sender.depth} posts already"


async def _execute_event(step: ExecuteEvent, ctx: StepContext) -> StepResult:
    if ctx.depth >= MAX_EVENT_DEPTH:
        return _result(
            step, "failed",
            f"event {step.event!r} not raised: {MAX_EVENT_DEPTH} events already chain to this "
            "run (a loop of actions raising each other?)",
        )  # fmt: skip
    ran = await ctx.raise_event(step.event, dict(ctx.variables), ctx.depth + 1)
    ctx.ops.events.emit("info", "actions", "event_raised", name=step.event, actions=len(ran))
    if not ran:
        return _result(step, "ok", f"event {step.event} raised; no action runs on it")
    return _result(step, "ok", f"event {step.event} raised: " + "; ".join(ran))


async def _proxied(step: SetProxiedTransfer, ctx: StepContext) -> StepResult:
    """Switch proxied transfer of the step's queues (as the REST switch does); the event
    log names the action as the one who switched it."""
    action = ctx.variables.get("AMPS_ACTION_NAME", "")
    taken = 0
    for queue in step.queues:
        try:
            taken += ctx.ops.set_proxied_transfer(queue, step.enabled, f"action {action}")
        except QueueError as exc:
            return _result(step, "failed", str(exc))
    variables = {"AMPS_PROXIED_TRANSFER_TAKEN": str(taken)}
    ctx.variables.update(variables)
    verb = "enabled" if step.enabled else "disabled"
    message = f"proxied transfer {verb} on {', '.join(step.queues)}"
    if step.enabled:
        message += f"; {taken} message(s) of offline owners taken over"
    return _result(step, "ok", message, variables=variables)


async def _redrive(step: RedriveDeadLetters, ctx: StepContext) -> StepResult:
    """Send the step's queue's dead letters back (as the REST redrive does); the event
    log names the action as the one who asked."""
    action = ctx.variables.get("AMPS_ACTION_NAME", "")
    try:
        done = await ctx.ops.redrive_dead_letters(
            step.queue, filter=step.filter, limit=step.limit, target=step.target,
            by=f"action {action}",
        )  # fmt: skip
    except (QueueError, ProtocolFailure) as exc:
        return _result(step, "failed", str(exc))
    count = done["redriven"]
    variables = {"AMPS_DEAD_LETTERS_REDRIVEN": str(count)}
    ctx.variables.update(variables)
    return _result(step, "ok", f"{count} dead letter(s) of {step.queue} sent back",
                   variables=variables)  # fmt: skip


async def _shutdown(step: Shutdown, ctx: StepContext) -> StepResult:
    if ctx.ops.stopping:
        return _result(step, "ok", "the instance is already shutting down")
    action = ctx.variables.get("AMPS_ACTION_NAME", "")
    if ctx.ops.request_shutdown(f"action {action}"):
        return _result(step, "ok", "shutdown requested")
    return _result(step, "failed", "nothing hosts this instance that could stop it")


async def run_steps(steps: tuple[Step, ...], record: RunRecord, ctx: StepContext) -> None:
    """Run ``steps`` in order into ``record``: a condition that does not hold or a module
    that fails stops the run there, and the steps after it say ``not_run``. A module
    that raises fails (a module must never take its caller down); a cancelled run
    records the step it was in as failed, finishes the record and goes on cancelling."""
    stopped = False
    for index, step in enumerate(steps, start=1):
        kind = "if" if isinstance(step, IfCondition | IfDiskUsage) else "do"
        if stopped:
            record.steps.append(StepResult(index, kind, step.module, "not_run"))
            continue
        started = ctx.clock.monotonic()
        ctx.index = index
        try:
            result = await run_step(step, ctx)
        except asyncio.CancelledError:
            record.steps.append(
                StepResult(index, kind, step.module, "failed", "cancelled: shutting down")
            )
            record.finish(ctx.clock.time())
            raise
        except Exception as exc:  # a module must never take the scheduler down
            result = StepResult(index, kind, step.module, "failed", f"{type(exc).__name__}: {exc}")
        result.index = index
        result.duration_s = ctx.clock.monotonic() - started
        record.steps.append(result)
        stopped = result.status in ("failed", "stopped")


async def run_step(step: Step, ctx: StepContext) -> StepResult:
    """Run one condition or module (see the module docstring)."""
    match step:
        case IfCondition():
            return await _if_condition(step, ctx)
        case IfDiskUsage():
            return await _if_disk_usage(step, ctx)
        case ArchiveJournals() | CompressJournals() | RemoveJournals():
            return await _journals(step, ctx)
        case TruncateStatistics():
            return await _truncate(step, ctx)
        case SetTransport():
            return await _transport(step, ctx)
        case DowngradeReplication() | UpgradeReplication():
            return await _replication(step, ctx)
        case PublishMessage():
            return await _publish(step, ctx)
        case DeleteSow():
            return await _delete_sow(step, ctx)
        case CompactSow():
            return await _compact_sow(step, ctx)
        case EchoMessage():
            return await _echo(step, ctx)
        case ExtractValues():
            return await _extract_values(step, ctx)
        case ExecuteEvent():
            return await _execute_event(step, ctx)
        case SetProxiedTransfer():
            return await _proxied(step, ctx)
        case RedriveDeadLetters():
            return await _redrive(step, ctx)
        case Shutdown():
            return await _shutdown(step, ctx)
        case Webhook():
            return await _webhook(step, ctx)
        case _:  # read by the configuration but refused there as not supported yet
            return _result(step, "failed", f"{step.module} is not supported yet")
