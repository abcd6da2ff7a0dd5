"""The publish pipeline: every publish takes this one path, a run at a time.

A client's publishes, a replicated message and the broker's own all enter
:meth:`PublishPipeline.publish` as a :class:`~spool.server.ports.PublishRun` (consecutive
publishes to one topic; a single publish is a run of one) with an
:class:`~spool.server.ports.Origin`::

    checks (topic, entitlement: once per run)
      -> prepare stages            (SOW keys, delta merge: may refuse the run)
      -> sequence + de-duplication (publisher id + sequence, against the log)
      -> append                    (TransactionLog.append_many, for recorded topics)
      -> acks on the wire          (received / processed, interleaved with deliveries)
      -> appended stages           (live fan-out; later SOW, queues, replication push)
      -> persisted acks            (server/acks.py, when the durability horizon covers them)

De-duplication is by bookmark, exactly: a message whose sequence is at or below its
publisher's highest is a duplicate unless the log is missing that sequence (a *gap*,
server/txlog/publishers/gaps.py, tracked when replication is configured). A publisher that fails over
between instances can make one instance receive its 101 by one route before its 100 by
another; 100 then fills the gap as a late record instead of being dropped.

The unit of work is the run: topic and entitlement checks, the publisher's last sequence,
the append bookkeeping, the stage calls and the delivery encoding happen once per run, not
once per message. What must stay per message stays per message: a duplicate sequence is
answered alone (``duplicate``) and splits the run around it; a record the log refuses gets
its exact failure from :meth:`TransactionLog.append`, and the rest of the run continues
(while the log refuses every write, a write outage, the whole run is refused at once with
``txlog full`` and the cause, without trying each record). A refused sequence holds its
publisher on that origin: nothing of it above that sequence is written from there until
the sequence comes again, so the refusal cannot turn into a gap the de-duplication would
never let the publisher fill (:meth:`PublishPipeline._publish_recorded`);
``received`` and ``processed`` acks go out message by message, each before that message's
deliveries, so a batched frame behaves on the wire exactly like one command per frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from spool.server.acks import DurableAcks
from spool.server.ports import (
    AckRequest,
    DelayedSink,
    DurabilityHorizon,
    DurableStage,
    Entitlements,
    IdentityWatch,
    Origin,
    Outbound,
    PublishRun,
    PublishStage,
    RecoveringStage,
    Refold,
    RefoldingStage,
)
from spool.server.protocol.commands import Command, take_publish_run
from spool.server.protocol.errors import (
    Duplicate,
    InvalidMessage,
    InvalidOptions,
    InvalidTopic,
    NotEntitled,
    ProtocolFailure,
    TxlogFull,
)
from spool.server.protocol.frame import Message
from spool.server.stats.source import EventSink
from spool.server.topics import Topic, TopicTable
from spool.server.txlog import CorruptRecord, FencedRecords, TransactionLog, TxlogWriteFailed
from spool.server.txlog.format.record import (
    Record,
    RecordKind,
    schedule_field,
    split_schedule_field,
    split_sow_key_field,
)

#: the kinds a topic without a SOW takes: messages (a delayed one is stored as scheduled)
_PLAIN_KINDS: Final = frozenset({RecordKind.PUBLISH, RecordKind.SCHEDULED})
#: the latest moment a delayed message may fall due (the end of year 9999, UTC: the
#: last a ``deliver_at`` moment can name)
MAX_DUE_US: Final = 253_402_300_799_999_999
#: ack kinds that go out message by message, in order with the deliveries
_INLINE: Final = frozenset({"received", "processed"})
#: a refold reads the rest of the log without yielding once it is this close to its end
#: (the last records are in the log's memory tail: read without a file, bounded work)
_REFOLD_TAIL: Final = 4096
#: how much of a repaired range a refold applies in one step of the loop (SOW keys,
#: queue records): a missing journal can hold hundreds of thousands of records, and the
#: loop runs between two parts
REFOLD_PART: Final = 2048


class PublishPipeline:
    """The one publish path of an instance. Owned by the event loop.

    Args:
        topics: the topic table (resolves each topic's checks and stages once).
        txlog: the transaction log, or None (nothing is recorded).
        local_fsync: the local fsync (stages with a ``durable`` hook follow it).
        acks: persisted acks, released by the durability horizon.
        entitlements: who may publish to which topic.
        events: where unexpected append failures are reported.
        stages: the publish stages, in the order they run.
    """

    def __init__(
        self,
        topics: TopicTable,
        txlog: TransactionLog | None,
        local_fsync: DurabilityHorizon | None,
        acks: DurableAcks,
        entitlements: Entitlements,
        events: EventSink,
        *,
        stages: tuple[PublishStage, ...] = (),
    ) -> None:
        self._topics = topics
        self._txlog = txlog
        self._acks = acks
        self._auth = entitlements
        self._events = events
        self._stages = stages
        topics.set_stages(stages)
        if local_fsync is not None:
            for stage in stages:
                if isinstance(stage, DurableStage):
                    local_fsync.on_advance(stage.durable)
        #: messages and body bytes published (all topics, all origins)
        self.msgs_in = 0
        self.bytes_in = 0
        #: told of each recorded run's origin and of each duplicate, on an instance that
        #: replicates (two publishers sharing an identity: server/replication/collisions.py)
        self.watch: IdentityWatch | None = None
        #: fenced ranges the stages' recovery went past at start-up (damaged records the
        #: rebuilt SOW and queue state lacks), as reported at start-up
        self.recovery_skipped: list[tuple[int, int]] = []
        #: where stored delayed messages go to be delivered at their due time (None: an
        #: instance without a transaction log, which refuses them)
        self.delayed: DelayedSink | None = None
        #: the part of :attr:`recovery_skipped` no :meth:`refold` took back yet
        self.unfolded: list[tuple[int, int]] = []
        self._refolding = asyncio.Lock()
        #: how much of a repaired range one step of the loop applies (:meth:`refold`)
        self.refold_part = REFOLD_PART

    async def recover(self, *, batch_count: int = 4096) -> int:
        """Feed the journal, in order, to the stages that rebuild state from it (start-up).

        Returns:
            How many records were read (0 when no stage recovers, or without a log).
        """
        txlog = self._txlog
        stages = [s for s in self._stages if isinstance(s, RecoveringStage)]
        if txlog is None or not stages:
            return 0
        # the oldest record any recovering stage needs (a persistent SOW needs only what
        # its file lacks)
        seq = max(txlog.first_seq, min(s.recover_from() for s in stages))
        read = 0
        checked: set[int] = set()  # reads whose journal was checked after they failed
        while seq <= txlog.durable_seq:
            try:
                batch = await txlog.read_view(seq, max_count=batch_count)
            except FencedRecords as exc:
                # the state is rebuilt from what the log holds: fenced records are not
                # there (a repair writes them back later); the engine reports the skip
                self.recovery_skipped.append((exc.first_seq, exc.last_seq))
                seq = exc.last_seq + 1
                continue
            except CorruptRecord:
                # damage no check had found yet: fenced now, it is skipped like the rest
                # (the instance starts and its peers repair it); else, or when the same
                # read fails again, the error stands
                if seq not in checked and await txlog.fence_damage_at(seq):
                    checked.add(seq)
                    continue
                raise
            if not len(batch):
                break
            for stage in stages:
                stage.recover(batch)
            read += len(batch)
            seq = batch.last_seq + 1
        self.unfolded = list(self.recovery_skipped)
        return read

    async def refold(self) -> Refolded:
        """Take the unfolded ranges (:attr:`unfolded`) that no fence covers any more (a
        repair wrote them back, or an operator released them) into the stages' state, as
        a rebuild from the whole log would have them, without a restart.

        Each such range is read (in worker threads, like any read of the log), then every
        record after it up to the log's end, and each refolding stage decides from what
        came later what the repaired records still change (a SOW key stored or removed
        later keeps its later state; a queue message acked later stays out). The last
        records are read from the log's memory tail without yielding, so the stages apply
        on the loop with nothing appended since their last record: no live change can
        slip between the read and the apply. They apply :attr:`refold_part` items per
        step of the loop; before each next part, what was appended meanwhile is read the
        same way and fed to them. One refold at a time.

        A range whose read meets records after it that were folded already and are now
        fenced (damage found since: what they changed is unknown for now) waits, and is
        tried again at the next call (the next repair written). A part applied before
        that is applied again then, to no effect: each stage's apply is idempotent.
        """
        txlog = self._txlog
        done = Refolded()
        if txlog is None or not any(isinstance(s, RefoldingStage) for s in self._stages):
            return done
        async with self.refolding():
            for first, last in list(self.unfolded):
                if any(f.first_seq <= last and f.last_seq >= first for f in txlog.fences):
                    continue  # still fenced: its repair has not come yet
                counts = await self._refold_range(txlog, first, last)
                if counts is None:
                    done.deferred.append((first, last))
                    continue
                done.ranges.append((first, last, *counts))
                self.unfolded = _without(self.unfolded, first, last)
        return done

    def folds(self) -> list[Refold]:
        """A new :class:`~spool.server.ports.Refold` of each stage that takes repaired ranges
        in: what :meth:`refold` feeds a range and what follows it, then applies."""
        return [s.refold() for s in self._stages if isinstance(s, RefoldingStage)]

    @contextlib.asynccontextmanager
    async def refolding(self) -> AsyncIterator[None]:
        """One refold at a time: held by :meth:`refold` for its whole run, and by a
        caller that takes a range in through :meth:`folds` itself."""
        async with self._refolding:
            yield

    async def _refold_range(
        self, txlog: TransactionLog, first: int, last: int
    ) -> tuple[int, int] | None:
        """One unfolded range the log holds again: read it and what follows, then apply.
        Returns (records read, changes made), or None to try again later."""
        folds = self.folds()
        read = 0
        seq = first
        while seq <= last:  # the range itself (a released placeholder reads as nothing)
            try:
                records = await txlog.read_appended(seq, max_count=4096, upto_seq=last)
            except (FencedRecords, CorruptRecord):
                return None  # damaged again since the repair: the next repair retries
            if not records:
                break
            for fold in folds:
                fold.repaired(records)
            read += len(records)
            seq = records[-1].seq + 1
        if not read:
            return 0, 0  # released, or taken by retention: nothing to take in
        made = 0
        seq = last + 1
        while True:
            # every record after it, to the log's end; the condition is checked with no
            # await between it and the apply below
            later = await self._read_later(txlog, folds, seq)
            if later is None:
                return None
            seq, count = later
            read += count
            made += sum(fold.apply(self.refold_part) for fold in folds)
            if all(fold.done for fold in folds):
                return read, made
            await asyncio.sleep(0)  # let the loop run between two parts

    async def _read_later(
        self, txlog: TransactionLog, folds: list[Refold], seq: int
    ) -> tuple[int, int] | None:
        """Feed ``folds`` the records from ``seq`` to the log's end, returning with no
        await after the end was seen: (the next seq, records read), or None when the
        range must wait (folded records damaged since)."""
        read = 0
        while seq <= txlog.last_seq:
            try:
                records = await txlog.read_appended(seq, max_count=4096)
            except FencedRecords as exc:
                if not _within(self.unfolded, exc.first_seq, exc.last_seq):
                    return None  # folded records now damaged: what they did is unknown
                seq = exc.last_seq + 1  # unfolded too: its own refold comes later
                continue
            except CorruptRecord:
                await txlog.fence_damage_at(seq)
                return None
            if not records:
                break
            for fold in folds:
                fold.later(records)
            read += len(records)
            seq = records[-1].seq + 1
            if txlog.last_seq - seq > _REFOLD_TAIL:
                await asyncio.sleep(0)  # far from the end: let the loop run between reads
        return seq, read

    # -- front ends ---------------------------------------------------------------------

    def publish_frame(self, origin: Origin, pub_hash: int, msgs: list[Message], start: int) -> int:
        """Publish the runs of plain publishes at ``msgs[start:]`` (a client's frame).

        Returns:
            The index of the first message not taken (``start`` when none was): it is not
            a plain publish, and :func:`~spool.server.protocol.commands.decode_command` decides
            what it is.
        """
        i = start
        n = len(msgs)
        replies = origin.replies
        while i < n:
            if replies is not None and replies.closed:
                return i
            scan = take_publish_run(msgs, i)
            if scan is None:
                return i
            self.publish(
                origin,
                PublishRun(scan.topic, pub_hash, scan.seqs, scan.bodies, scan.acks,
                           publisher_name=origin.name),
            )  # fmt: skip
            i = scan.end
        return i

    # -- the pipeline -------------------------------------------------------------------

    def publish(self, origin: Origin, run: PublishRun) -> None:
        """Publish a run: store, ack and deliver it, or report why not, message by message.

        Never raises: a refusal becomes a failure ack per message to ``origin.replies``.
        Answers keep the order of the messages: when a stage refuses single messages, the
        run is stored in the segments between them, each refusal answered after the
        segment before it (as a duplicate splits a run).
        """
        #: refusals of single messages: (position in the run as sent, run, index, why)
        refusals: list[tuple[int, PublishRun, int, ProtocolFailure]] = []
        #: for each message of ``run``, its position in the run as sent
        place = list(range(len(run.bodies)))
        try:
            topic = self._topics.admit(run.topic)
            if topic.reserved and origin.kind == "client":
                raise InvalidTopic(
                    f"{run.topic!r} is an event topic: only the broker publishes there"
                )
            auth = self._auth
            # the broker's own messages (actions) are trusted: no user's entitlements apply
            if (
                auth.enabled
                and origin.kind != "broker"
                and not auth.can_write(origin.user, run.topic)
            ):
                raise NotEntitled(f"{origin.name!r} may not publish to {run.topic!r}")
            scheduled = run.kind == RecordKind.SCHEDULED
            if scheduled:
                self._check_scheduled(topic, run)
            if run.expirations is not None and not topic.prepare:
                raise InvalidMessage(
                    f"'e' (a message lifetime) needs a SOW topic; {run.topic!r} keeps no records"
                )
            if run.kind not in _PLAIN_KINDS and not topic.prepare:
                raise InvalidTopic(f"{run.topic!r} is not a SOW topic")
            for prepare in topic.prepare:
                refused = prepare(run)
                if refused:
                    out = {i for i, _ in refused}
                    refusals.extend((place[i], run, i, exc) for i, exc in refused)
                    keep = [i for i in range(len(run.bodies)) if i not in out]
                    place = [place[i] for i in keep]
                    run = run.select(keep)
                    if not keep:
                        break
            if scheduled and run.bodies:
                _write_dues(run)
        except ProtocolFailure as exc:
            refusals.extend((place[i], run, i, exc) for i in range(len(run.bodies)))
            self._answer(origin, refusals)
            return
        if not refusals:
            self._store(origin, topic, run)
            return
        refusals.sort(key=lambda refusal: refusal[0])
        start = 0  # the first message of ``run`` not stored yet
        for position, refused_run, i, why in refusals:
            end = start
            while end < len(place) and place[end] < position:
                end += 1
            if end > start:
                self._store(origin, topic, run.slice(start, end))
            start = end
            self._refuse(origin, refused_run, i, why)
        if start < len(place):
            self._store(origin, topic, run.slice(start, len(place)))

    def _check_scheduled(self, topic: Topic, run: PublishRun) -> None:
        """A run of delayed messages (kind ``SCHEDULED``) before the preparing stages: it
        needs a recorded topic, and a replicated run brings its due times in its SOW key
        fields, which are split here so that the stages read the fields as a publish
        gives them (:func:`_write_dues` puts the due times back after them).

        Raises:
            InvalidOptions: the topic is not recorded here (or nothing here delivers
                delayed messages).
            InvalidMessage: a replicated record without a due time.
        """
        if self.delayed is None or self._txlog is None or not topic.recorded:
            raise InvalidOptions(
                f"delayed delivery needs a topic the transaction log records; {run.topic!r} "
                "is not recorded here"
            )
        if run.dues is not None:
            return
        fields = run.sow_keys or []
        if len(fields) != len(run.bodies):
            raise InvalidMessage(f"a scheduled record of {run.topic!r} carries no due time")
        dues: list[int] = []
        plain: list[str] = []
        for logged in fields:
            try:
                due, rest = split_schedule_field(logged)
            except ValueError as exc:
                raise InvalidMessage(f"a scheduled record of {run.topic!r}: {exc}") from None
            dues.append(due)
            plain.append(rest)
        run.dues = dues
        _unpack_fields(run, plain)

    def deliver_due(self, name: str, records: Sequence[Record]) -> int:
        """Write the due records of ``records`` (scheduled records of one topic,
        publisher and path, in the order they fell due) and hand them to the topic's
        appended stages as the messages they are: live subscribers, the SOW, queues and
        actions get them now, in log order with everything else. ``name``: the instance's
        name (the origin of the hand-over).

        The preparing stages run again on each message, as for a publish (a SOW key is
        derived from the body the same way); one they refuse now (the topic's key
        definition changed since) is not written and is reported.

        Returns:
            How many of ``records`` were dealt with, from the first: written and handed
            over, or refused and reported. Fewer than all when the log did not take the
            rest (a full or failing disk): the caller tries those again later.
        """
        txlog = self._txlog
        assert txlog is not None
        first = records[0]
        topic = self._topics.admit(first.topic)
        run = PublishRun(
            topic=first.topic,
            pub_hash=first.pub_hash,
            pub_seqs=[r.pub_seq for r in records],
            bodies=[r.body for r in records],
            acks=[],
            corr_ids=[r.corr_id for r in records] if any(r.corr_id for r in records) else None,
            kind=RecordKind.DUE,
            path=first.path,
        )
        _unpack_fields(run, [split_schedule_field(r.sow_key)[1] for r in records])
        keep = list(range(len(records)))
        for prepare in topic.prepare:
            refused = prepare(run)
            if refused:
                out = {i for i, _ in refused}
                for i, exc in refused:
                    self._events.emit(
                        "error", "delayed", "due_message_refused", topic=run.topic,
                        bookmark=f"{run.pub_hash}|{run.pub_seqs[i]}|", reason=exc.reason,
                        detail=exc.detail or "",
                    )  # fmt: skip
                chosen = [i for i in range(len(run.bodies)) if i not in out]
                keep = [keep[i] for i in chosen]
                run = run.select(chosen)
                if not keep:
                    return len(records)
        seqs = [s for s in run.pub_seqs if s is not None]
        k = txlog.append_due(
            topic=run.topic,
            message_type="json",
            pub_hash=run.pub_hash,
            pub_seqs=seqs,
            bodies=run.bodies,
            corr_ids=run.corr_ids,
            sow_keys=run.sow_keys,
            path=run.path,
        )
        if k and topic.appended:
            origin = Origin(kind="broker", name=name, user=None, replies=None)
            self._hand_over(origin, topic, run, 0, k, seqs[:k], txlog.last_seq - k + 1,
                            txlog.last_timestamp_us)  # fmt: skip
        # the records before the first one not written (refused ones count as dealt with)
        return len(records) if k == len(keep) else keep[k]

    def _store(self, origin: Origin, topic: Topic, run: PublishRun) -> None:
        """Log (when the topic is recorded), ack and hand over a run every stage took."""
        txlog = self._txlog
        if topic.recorded and txlog is not None:
            self._publish_recorded(origin, topic, run, txlog)
        else:
            self._publish_unrecorded(origin, topic, run)

    def _answer(
        self, origin: Origin, refusals: list[tuple[int, PublishRun, int, ProtocolFailure]]
    ) -> None:
        """Refuse messages in the order they were sent."""
        for _, run, i, exc in sorted(refusals, key=lambda refusal: refusal[0]):
            self._refuse(origin, run, i, exc)

    def _publish_recorded(
        self, origin: Origin, topic: Topic, run: PublishRun, txlog: TransactionLog
    ) -> None:
        """Sequence, de-duplicate, append and hand over a run of a recorded topic.

        A sequence the log refuses (``txlog full``) becomes the publisher's *hold* on this
        origin (:attr:`Origin.held`): nothing of that publisher above it is written from
        this origin until it is, so the refused message can still be written, in order,
        when the publisher sends it again (the de-duplication takes only a sequence above
        the publisher's highest). Later sequences are refused meanwhile, with the hold in
        the detail.
        """
        pub_hash = run.pub_hash
        given = run.pub_seqs
        bodies = run.bodies
        n = len(bodies)
        held = origin.held
        outage = txlog.write_outage
        last = txlog.publisher_last(pub_hash)
        if outage is not None:  # the log refuses every write until the outage ends
            refused = TxlogFull(outage.describe())
            for i in range(n):
                self._refuse(origin, run, i, refused)
            new = [s for s in given if s is not None and s > last]
            if new:
                _hold(held, pub_hash, min(new))
            return
        i = 0
        while i < n:
            hold = held.get(pub_hash) if held else None
            if hold is not None:
                if hold <= last and not txlog.publishers.missing(pub_hash, hold):
                    del held[pub_hash]  # the held sequence is in the log (by any route)
                    hold = None
                elif _above(given[i], hold):
                    # refused until the held sequence is written
                    refused = TxlogFull(_held_detail(hold))
                    j = i
                    while j < n and _above(given[j], hold):
                        self._refuse(origin, run, j, refused)
                        j += 1
                    i = j
                    continue
            # the longest stretch from i whose sequences are new (and not above a hold)
            seqs: list[int] = []
            j = i
            while j < n:
                s = given[j]
                if hold is not None and _above(s, hold):
                    break
                if s is None:
                    s = last + 1
                elif s <= last:
                    break
                last = s
                seqs.append(s)
                j += 1
            if j > i:
                k = txlog.append_many(
                    topic=run.topic,
                    message_type="json",
                    pub_hash=pub_hash,
                    pub_seqs=seqs,
                    bodies=bodies if i == 0 and j == n else bodies[i:j],
                    corr_ids=run.corr_ids[i:j] if run.corr_ids else None,
                    sow_keys=run.sow_keys[i:j] if run.sow_keys else None,
                    kind=run.kind,
                    path=run.path,
                )
                if k:
                    first = txlog.last_seq - k + 1
                    if self.watch is not None:
                        self.watch.appended(pub_hash, seqs[0], run.path, False)
                    self._accepted(origin, topic, run, i, i + k, seqs[:k], first,
                                   txlog.last_timestamp_us)  # fmt: skip
                    if hold is not None and seqs[k - 1] >= hold:
                        del held[pub_hash]  # the held sequence is written: order holds
                if k < j - i:
                    # the log refused record i + k: append() of it says why
                    appended = self._append_one(origin, topic, run, i + k, seqs[k], txlog)
                    if not appended and given[i + k] is not None:
                        # (a number the broker gave is not the publisher's: nothing to hold)
                        _hold(held, pub_hash, seqs[k])
                    last = txlog.publisher_last(pub_hash)
                    i += k + 1
                    continue
            if j < n and (hold is None or not _above(given[j], hold)):
                below = given[j]
                assert below is not None  # only a given sequence can be at or below the last
                if txlog.publishers.missing(pub_hash, below):
                    # a gap of this publisher: the message arrived late, by another route
                    self._append_one(origin, topic, run, j, below, txlog, late=True)
                else:
                    if self.watch is not None:
                        self.watch.duplicate(run, j, below, f"{origin.kind} {origin.name!r}")
                    if run.path and topic.duplicated and run.kind != RecordKind.SCHEDULED:
                        # (a scheduled record is no message to the stages until it is due)
                        # another instance's copy (a replicated queue learns from it
                        # that the message was published there too)
                        held_by = self.watch.origin(pub_hash, below) if self.watch else None
                        for hook in topic.duplicated:
                            hook(run, j, below, held_by)
                    self._duplicate(origin, run, j, below)
                j += 1
            i = j

    def _append_one(
        self,
        origin: Origin,
        topic: Topic,
        run: PublishRun,
        i: int,
        s: int,
        txlog: TransactionLog,
        *,
        late: bool = False,
    ) -> bool:
        """Append message ``i`` alone: it gets the log's exact refusal, or goes through
        (``late``: it fills a gap of its publisher, below the publisher's highest).

        Returns:
            Whether it was appended.
        """
        try:
            rec = txlog.append(
                topic=run.topic,
                message_type="json",
                pub_hash=run.pub_hash,
                pub_seq=s,
                body=run.bodies[i],
                kind=run.kind,
                path=run.path,
                corr_id=run.corr_ids[i] if run.corr_ids else "",
                sow_key=run.sow_keys[i] if run.sow_keys else "",
                late=late,
            )
        except ProtocolFailure as exc:  # txlog full (MaxSize): the reason stands
            self._refuse(origin, run, i, exc)
            return False
        except TxlogWriteFailed as exc:  # a write outage (reported once by the log)
            outage = txlog.write_outage
            self._refuse(origin, run, i, TxlogFull(outage.describe() if outage else str(exc)))
            return False
        except Exception as exc:
            self._events.emit("error", "txlog", "append_failed", error=repr(exc))
            self._refuse(origin, run, i, TxlogFull(f"transaction log cannot accept writes: {exc}"))
            return False
        if self.watch is not None:
            self.watch.appended(run.pub_hash, s, run.path, late)
        self._accepted(origin, topic, run, i, i + 1, [s], rec.seq, rec.timestamp_us)
        return True

    def _publish_unrecorded(self, origin: Origin, topic: Topic, run: PublishRun) -> None:
        """A run of a topic the log does not record: acked and delivered at once."""
        seqs = [s or 0 for s in run.pub_seqs]
        self._accepted(origin, topic, run, 0, len(run.bodies), seqs, 0, None)

    # -- after the checks ---------------------------------------------------------------

    def _accepted(
        self,
        origin: Origin,
        topic: Topic,
        run: PublishRun,
        lo: int,
        hi: int,
        seqs: Sequence[int],
        first_seq: int,
        timestamp_us: int | None,
    ) -> None:
        """Messages ``lo:hi`` passed (and were appended from ``first_seq``, when recorded),
        with the publisher sequences ``seqs``: counted, their acks registered, then acked
        and handed to the topic's stages."""
        inline = self._count_and_register(origin, topic, run, lo, hi, seqs, first_seq)
        self._ack_and_hand_over(origin, topic, run, lo, hi, seqs, first_seq, timestamp_us, inline)

    def _count_and_register(
        self,
        origin: Origin,
        topic: Topic,
        run: PublishRun,
        lo: int,
        hi: int,
        seqs: Sequence[int],
        first_seq: int,
    ) -> list[AckRequest]:
        """Count messages ``lo:hi`` in (origin, instance, topic) and register their
        ``persisted`` ack with the durable acks (a recorded run's waits for the horizon).

        Returns:
            The acks of ``lo:hi`` that go out as the messages pass, in message order:
            ``received`` and ``processed``, and ``persisted`` when not recorded.
        """
        bodies = run.bodies if lo == 0 and hi == len(run.bodies) else run.bodies[lo:hi]
        k = hi - lo
        nbytes = sum(map(len, bodies))
        origin.traffic.msgs_in += k
        self.msgs_in += k
        self.bytes_in += nbytes
        topic.msgs_in += k
        topic.bytes_in += nbytes
        inline: list[AckRequest] = []
        if not run.acks:
            return inline
        replies = origin.replies
        recorded = first_seq > 0
        persist_at = -1
        for req in run.acks:
            idx, kinds, _cid = req
            if idx < lo or idx >= hi:
                continue
            if "persisted" in kinds and recorded:
                persist_at = idx
            if not _INLINE.isdisjoint(kinds) or ("persisted" in kinds and not recorded):
                inline.append(req)
        if persist_at >= 0 and replies is not None:
            # one pending entry for the stretch: persisted acks are conflated anyway
            self._acks.expect_persisted(
                replies, run.pub_hash, first_seq + persist_at - lo, seqs[persist_at - lo]
            )
        elif not recorded and replies is not None:
            # acked persisted inline; a peer that asked for replicated acks hears of
            # the stretch's last sequence once what came before it has replicated
            top = max((seqs[i - lo] for i, k, _ in run.acks if lo <= i < hi
                       and "persisted" in k), default=0)  # fmt: skip
            if top:
                self._acks.expect_unrecorded(replies, run.pub_hash, top)
        return inline

    def _ack_and_hand_over(
        self,
        origin: Origin,
        topic: Topic,
        run: PublishRun,
        lo: int,
        hi: int,
        seqs: Sequence[int],
        first_seq: int,
        timestamp_us: int | None,
        inline: list[AckRequest],
    ) -> None:
        """Send the ``inline`` acks of messages ``lo:hi`` and hand the messages to the
        topic's appended stages. When a stage may deliver to the publisher itself, the
        run is split at each acked message so that its acks go out before its
        deliveries; otherwise the acks go first and the run is handed over whole."""
        replies = origin.replies
        if run.kind == RecordKind.SCHEDULED:
            # stored and acked now, delivered at the due time by the delayed delivery
            if replies is not None:
                for idx, kinds, cid in inline:
                    _send_acks(replies, kinds, cid, seqs[idx - lo], True)
            assert run.dues is not None and self.delayed is not None
            self.delayed.scheduled(run.topic, run.pub_hash, seqs, first_seq, run.dues[lo:hi])
            return
        if inline and replies is not None and any(r(run.topic, replies) for r in topic.reaches):
            # the publisher also receives this run: each message's acks before its delivery
            pos = lo
            for idx, kinds, cid in inline:
                if idx > pos:
                    self._hand_over(origin, topic, run, pos, idx, seqs[pos - lo : idx - lo],
                                    first_seq + pos - lo if first_seq else 0,
                                    timestamp_us)  # fmt: skip
                _send_acks(replies, kinds, cid, seqs[idx - lo], first_seq > 0)
                pos = idx
            if pos < hi:
                self._hand_over(origin, topic, run, pos, hi, seqs[pos - lo :],
                                first_seq + pos - lo if first_seq else 0, timestamp_us)  # fmt: skip
            return
        if replies is not None:
            for idx, kinds, cid in inline:
                _send_acks(replies, kinds, cid, seqs[idx - lo], first_seq > 0)
        if topic.appended:
            self._hand_over(origin, topic, run, lo, hi, seqs, first_seq, timestamp_us)

    def _hand_over(
        self,
        origin: Origin,
        topic: Topic,
        run: PublishRun,
        lo: int,
        hi: int,
        seqs: Sequence[int],
        first_seq: int,
        timestamp_us: int | None,
    ) -> None:
        """Messages ``lo:hi`` (publisher sequences ``seqs``) to the topic's appended
        stages, as one run."""
        appended = run.as_appended(
            lo,
            hi,
            topic_literal=topic.literal,
            origin=origin,
            pub_seqs=seqs,
            first_seq=first_seq,
            timestamp_us=timestamp_us,
        )
        for stage in topic.appended:
            stage(appended)

    def _duplicate(self, origin: Origin, run: PublishRun, i: int, s: int) -> None:
        """Message ``i`` repeats a sequence already stored: not stored, not delivered."""
        replies = origin.replies
        if replies is None:
            return
        kinds, cid = _acks_of(run.acks, i)
        if "received" in kinds:
            replies.ack("received", cid)
        if "processed" in kinds:
            replies.ack("processed", cid, status="failure", reason=Duplicate.reason, s=s)
        if "persisted" in kinds:
            self._acks.expect_duplicate(replies, run.pub_hash, s)

    def _refuse(self, origin: Origin, run: PublishRun, i: int, exc: ProtocolFailure) -> None:
        """Message ``i`` failed: its ``received`` ack if asked, then the failure (always),
        with the message's own ``s`` when it gave one (docs/protocol.md "Acks"), so a client
        waiting for that sequence to persist learns it will not."""
        replies = origin.replies
        if replies is None:
            return
        kinds, cid = _acks_of(run.acks, i)
        if "received" in kinds:
            replies.ack("received", cid)
        replies.fail(cid, exc, s=run.pub_seqs[i])


def publish_due(cmd: Command, now_us: int, *, delta: bool = False) -> int | None:
    """The due time a ``publish`` (or ``delta_publish``: ``delta``) asks for with its
    options (``o``), in microseconds since the epoch; None for an ordinary publish (no
    ``o``, or an empty one). ``deliver_after`` counts from ``now_us``; a ``deliver_at``
    already past is due at once (it is still stored first and delivered by the delayed
    delivery, in log order).

    No option is accepted and ignored (docs/architecture.md "Delivery semantics"): a
    caller answers the refusal as the pipeline answers one (:func:`refuse_options`). The
    runs of plain publishes never get here: a header with ``o`` is not plain
    (:func:`~spool.server.protocol.commands.take_publish_run`).

    Raises:
        InvalidOptions: options that are not valid publish options (the grammar's detail,
            server/protocol/options.py), a due time past :data:`MAX_DUE_US`, or a delayed
            ``delta_publish``.
    """
    if cmd.opts.text is None:
        return None
    opts = cmd.opts.publish()
    if opts.deliver_at_us is not None:
        due = opts.deliver_at_us
    elif opts.deliver_after_s is not None:
        due = now_us + round(opts.deliver_after_s * 1_000_000)
    else:
        return None
    if delta:
        raise InvalidOptions(
            "delayed delivery is for publish: a delta_publish merges into the record "
            "stored when it arrives, so it cannot wait"
        )
    if due > MAX_DUE_US:
        raise InvalidOptions("deliver_after reaches past the year 9999")
    return max(due, 0)


def refuse_options(replies: Outbound, cmd: Command, exc: InvalidOptions) -> None:
    """Answer a publish refused for its options as the pipeline answers a refusal
    (:meth:`PublishPipeline._refuse`): a failure ack with its own ``s``, so a client
    waiting for that sequence to persist learns at once that it will not. Nothing of it
    is stored or delivered, and the connection goes on."""
    replies.fail(cmd.cid, exc, s=cmd.seq)


def _unpack_fields(run: PublishRun, fields: list[str]) -> None:
    """Give ``run`` the SOW key fields ``fields`` as a publisher gives them: the keys as
    its ``k``, the lifetimes as its ``e`` (the preparing stages write the fields again)."""
    if not any(fields):
        run.sow_keys = None
        return
    keys: list[str] = []
    lives: list[int | None] = []
    for logged in fields:
        key, life = split_sow_key_field(logged)
        keys.append(key)
        lives.append(life)
    run.sow_keys = keys
    run.expirations = lives if any(life is not None for life in lives) else None


def _write_dues(run: PublishRun) -> None:
    """The SOW key fields of a run of delayed messages once the preparing stages wrote
    theirs: each due time in front of the field (:func:`schedule_field`)."""
    assert run.dues is not None
    fields = run.sow_keys or [""] * len(run.bodies)
    run.sow_keys = [schedule_field(due, f) for due, f in zip(run.dues, fields, strict=True)]


def _hold(held: dict[int, int], pub_hash: int, s: int) -> None:
    """The log refused sequence ``s`` of ``pub_hash``: hold the publisher there (or lower)."""
    prior = held.get(pub_hash)
    held[pub_hash] = s if prior is None else min(prior, s)


def _above(s: int | None, hold: int) -> bool:
    """Whether a message with sequence ``s`` (None: numbered by the broker, after the
    publisher's highest) would be written past a publisher held at ``hold``."""
    return s is None or s > hold


def _held_detail(hold: int) -> str:
    return (
        f"sequence {hold} of this publisher was refused (txlog full) and is not written yet: "
        f"nothing later of it is written on this connection until {hold} is sent again, "
        "so resend from it in order (or log on again)"
    )


def _acks_of(acks: list[AckRequest], i: int) -> tuple[frozenset[str], str | None]:
    """The ack kinds and cid of message ``i`` of a run (none when it asked for none)."""
    for idx, kinds, cid in acks:
        if idx == i:
            return kinds, cid
        if idx > i:
            break
    return frozenset(), None


def _send_acks(
    replies: Outbound, kinds: frozenset[str], cid: str | None, s: int, recorded: bool
) -> None:
    """The acks a message gets as it passes (``persisted`` here only when not recorded)."""
    if "received" in kinds:
        replies.ack("received", cid)
    if "persisted" in kinds and not recorded:
        replies.ack("persisted", None, s=s or None)
    if "processed" in kinds:
        replies.ack("processed", cid)


@dataclass
class Refolded:
    """What one :meth:`PublishPipeline.refold` did."""

    #: ranges taken in: (first seq, last seq, records read, changes made)
    ranges: list[tuple[int, int, int, int]] = field(default_factory=list)
    #: ranges that wait for damage found after them to be repaired
    deferred: list[tuple[int, int]] = field(default_factory=list)


def _without(ranges: list[tuple[int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """``ranges`` less the seqs ``first..last``."""
    out: list[tuple[int, int]] = []
    for a, b in ranges:
        if b < first or a > last:
            out.append((a, b))
            continue
        if a < first:
            out.append((a, first - 1))
        if b > last:
            out.append((last + 1, b))
    return out


def _within(ranges: list[tuple[int, int]], first: int, last: int) -> bool:
    """Whether ``first..last`` lies inside one of ``ranges``."""
    return any(a <= first and last <= b for a, b in ranges)
