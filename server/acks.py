"""Persisted and flush acks, released by a durability horizon.

A publish that asked for a ``persisted`` ack is answered once its record is durable: today
written and fsynced to the local journal (:class:`LocalHorizon`); with replication, also
acknowledged by every sync destination (a horizon that waits for both). This module does
not care which: it registers on a :class:`~spool.server.ports.DurabilityHorizon` and releases
what the new horizon covers.

Persisted acks are conflated per client (docs/protocol.md "Acks"): each release sends one ack
with the highest publisher sequence it covers and that bookmark, however many publishes it
covers. Flush acks (``flush``: every earlier command of this connection processed and
persisted) wait on the same horizon, in order.

Nothing waits forever on a horizon that cannot move: when it reports a failure (the log
refuses writes), every waiting ``flush`` fails at once with it (``txlog full`` and the
cause) and every client with publishes waiting for ``persisted`` gets one failure ack (the
highest ``s`` waiting). Those publishes stay accepted: if the horizon moves again (the log
wrote them after all) their ``persisted`` acks follow as usual, so a client that resends
after a failure finds them as duplicates, acknowledged as persisted.

**Replicated acks.** A client that asked for them at logon (``o=replicated``,
docs/protocol.md) also gets, for the publishes that asked for ``persisted``, conflated
``replicated`` acks: ``s`` is the highest publisher sequence of this connection such that
it and every earlier one is durable here and acknowledged by every replication destination
that takes it, sync or async (the :class:`~spool.server.ports.Watermark` the instance gives:
server/replication/horizon.py's replicated watermark, or the local fsync without
replication). An HA publisher whose failover is unsafe keeps its messages until then.
They are tracked beside the persisted ones (one entry per run, as for persisted acks),
only for the peers that asked, and they never fail: they wait.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from spool.server.bookmarks import format_bookmark
from spool.server.clock import Clock
from spool.server.ports import DurabilityHorizon, Outbound, Watermark
from spool.server.protocol.commands import Command
from spool.server.protocol.errors import ProtocolFailure, TxlogFull
from spool.server.stats.histogram import LatencyHistogram
from spool.server.txlog import TransactionLog, WriteOutage


class LocalHorizon:
    """The durability horizon of an instance without sync replication: the local fsync.

    It cannot move while the log is in a write outage; its :attr:`failure` is then
    ``txlog full`` with the outage's cause and since when.
    """

    def __init__(self, txlog: TransactionLog) -> None:
        self._log = txlog

    @property
    def seq(self) -> int:
        return self._log.durable_seq

    async def wait(self, seq: int) -> None:
        await self._log.wait_durable(seq)

    def on_advance(self, callback: Callable[[int], None]) -> None:
        self._log.add_durable_listener(callback)

    @property
    def failure(self) -> ProtocolFailure | None:
        return _outage_failure(self._log.write_outage)

    def on_failure(self, callback: Callable[[ProtocolFailure | None], None]) -> None:
        self._log.add_outage_listener(lambda outage: callback(_outage_failure(outage)))


def _outage_failure(outage: WriteOutage | None) -> ProtocolFailure | None:
    """What a client is told while the log refuses writes."""
    return TxlogFull(outage.describe()) if outage is not None else None


@dataclass(slots=True, eq=False)
class _Waiting:
    """What one peer waits for."""

    pub_hash: int
    #: (local seq, publisher seq, monotonic arrival) of publishes awaiting a persisted ack
    persist: deque[tuple[int, int, float]] = field(default_factory=deque)
    #: flush commands waiting for durability: (local seq, cid)
    flushes: deque[tuple[int, str | None]] = field(default_factory=deque)
    #: for a peer that asked for replicated acks: (local seq, publisher seq) waiting for
    #: the replicated watermark; None for the others
    replicate: deque[tuple[int, int]] | None = None


class DurableAcks:
    """Persisted and flush acks of every peer. Owned by the event loop.

    Args:
        horizon: how far the log is durable, or None without a transaction log (then
            nothing is ever pending: flushes are answered at once).
        last_seq: the local sequence of the last record appended (what a flush covers).
        clock: arrival and release times for the latency histogram.
        replicated: what ``replicated`` acks follow (None without a transaction log: they
            are sent with the persisted ones).
    """

    def __init__(
        self,
        horizon: DurabilityHorizon | None,
        last_seq: Callable[[], int],
        clock: Clock,
        replicated: Watermark | None = None,
    ) -> None:
        self._horizon = horizon
        self._last_seq = last_seq
        self._clock = clock
        self._waiting: dict[Outbound, _Waiting] = {}
        #: peers with something pending (the release walks only these)
        self._pending: set[Outbound] = set()
        #: the highest publisher sequence acked as persisted, per peer
        self._last_persisted: dict[Outbound, int] = {}
        #: peers with replicated acks pending
        self._replicating: set[Outbound] = set()
        self._replicated = replicated
        self.latency = LatencyHistogram()
        if horizon is not None:
            horizon.on_advance(self._release)
            horizon.on_failure(self._horizon_failed)
        if replicated is not None:
            replicated.on_advance(self._release_replicated)

    # -- registration ---------------------------------------------------------------------

    def _entry(self, peer: Outbound, pub_hash: int) -> _Waiting:
        w = self._waiting.get(peer)
        if w is None:
            w = self._waiting[peer] = _Waiting(pub_hash)
        elif pub_hash:
            w.pub_hash = pub_hash
        return w

    def expect_persisted(self, peer: Outbound, pub_hash: int, seq: int, pub_seq: int) -> None:
        """Ack ``pub_seq`` (and what it covers) to ``peer`` once ``seq`` is durable (and,
        to a peer that asked for them, as replicated once ``seq`` is replicated)."""
        w = self._entry(peer, pub_hash)
        w.persist.append((seq, pub_seq, self._clock.monotonic()))
        self._pending.add(peer)
        replicate = w.replicate
        if replicate is not None:
            replicate.append((seq, pub_seq))
            self._replicating.add(peer)

    def want_replicated(self, peer: Outbound, pub_hash: int) -> None:
        """``peer`` asked for ``replicated`` acks at logon (module docstring)."""
        w = self._entry(peer, pub_hash)
        if w.replicate is None:
            w.replicate = deque()

    def expect_unrecorded(self, peer: Outbound, pub_hash: int, pub_seq: int) -> None:
        """A publish to a topic the log does not record asked for ``persisted`` (acked at
        once, nothing to persist): a peer that asked for replicated acks gets ``pub_seq``
        acked as replicated once everything appended so far is (what its earlier
        publishes need), since nothing of its own will replicate."""
        w = self._waiting.get(peer)
        if w is None or w.replicate is None or not pub_seq:
            return
        replicated = self._replicated
        if replicated is None:  # no log: nothing replicates, nothing waits
            peer.ack("replicated", None, s=pub_seq, bm=format_bookmark(w.pub_hash, pub_seq))
            return
        w.replicate.append((self._last_seq(), pub_seq))
        if self._release_replicated_peer(peer, replicated.seq):
            self._replicating.discard(peer)
        else:
            self._replicating.add(peer)

    def expect_duplicate(self, peer: Outbound, pub_hash: int, pub_seq: int) -> None:
        """A duplicate publish asked for a persisted ack: it is persisted once everything
        appended so far is (its first copy is among it); replicated likewise."""
        seq = self._last_seq()
        self.expect_persisted(peer, pub_hash, seq, pub_seq)
        horizon = self._horizon
        if horizon is not None and horizon.seq >= seq:
            self._release_peer(peer, horizon.seq, self._clock.monotonic())
        elif horizon is not None and (failure := horizon.failure) is not None:
            self._fail_peer(peer, failure)
        replicated = self._replicated
        if (
            replicated is not None
            and replicated.seq >= seq
            and peer in self._replicating
            and self._release_replicated_peer(peer, replicated.seq)
        ):
            self._replicating.discard(peer)

    def flush(self, peer: Outbound, cmd: Command) -> None:
        """The ``flush`` command: ack once every earlier publish of ``peer`` is durable."""
        horizon = self._horizon
        seq = self._last_seq()
        if horizon is None or horizon.seq >= seq:
            if "processed" in cmd.acks or "completed" in cmd.acks or not cmd.acks:
                peer.ack("processed", cmd.cid)
            return
        failure = horizon.failure
        if failure is not None:  # it would wait for a disk that refuses writes
            peer.fail(cmd.cid, failure)
            return
        self._entry(peer, 0).flushes.append((seq, cmd.cid))
        self._pending.add(peer)

    def set_last_persisted(self, peer: Outbound, pub_seq: int) -> None:
        """What a client's logon ack reported as its last persisted sequence."""
        self._last_persisted[peer] = pub_seq

    def last_persisted(self, peer: Outbound) -> int:
        """The highest publisher sequence acked as persisted to ``peer``."""
        return self._last_persisted.get(peer, 0)

    def forget(self, peer: Outbound) -> None:
        """The peer is gone: drop what it waited for."""
        self._waiting.pop(peer, None)
        self._pending.discard(peer)
        self._replicating.discard(peer)
        self._last_persisted.pop(peer, None)

    @property
    def pending_peers(self) -> int:
        """Peers waiting for a persisted or flush ack."""
        return len(self._pending)

    # -- failure ------------------------------------------------------------------------

    def _horizon_failed(self, failure: ProtocolFailure | None) -> None:
        """The horizon cannot move: fail every flush, tell every peer waiting to persist
        (see the module docstring). ``None``: it can again; its advance releases the rest."""
        if failure is None:
            return
        for peer in list(self._pending):
            self._fail_peer(peer, failure)

    def _fail_peer(self, peer: Outbound, failure: ProtocolFailure) -> None:
        """One peer's failure acks: its waiting flushes (dropped: each is answered), and
        one ``persisted`` failure with the highest publisher sequence waiting (kept)."""
        w = self._waiting.get(peer)
        if w is None:
            return
        if w.persist:
            top = max(s for _, s, _ in w.persist)
            peer.ack(
                "persisted", None, status="failure", reason=failure.reason, s=top,
                detail=failure.detail or None,
            )  # fmt: skip
        while w.flushes:
            _, cid = w.flushes.popleft()
            peer.fail(cid, failure)
        if not w.persist:
            self._pending.discard(peer)

    # -- release ------------------------------------------------------------------------

    def _release(self, durable_seq: int) -> None:
        """The horizon moved: persisted acks (conflated per peer) and flush acks."""
        if not self._pending:
            return
        now = self._clock.monotonic()
        done = [p for p in self._pending if self._release_peer(p, durable_seq, now)]
        for peer in done:
            self._pending.discard(peer)

    def _release_peer(self, peer: Outbound, durable_seq: int, now: float) -> bool:
        """Send what ``durable_seq`` covers for one peer; True when nothing is left."""
        w = self._waiting.get(peer)
        if w is None:
            return True
        pending = w.persist
        top = -1
        observe = self.latency.observe
        while pending and pending[0][0] <= durable_seq:
            _, s, t0 = pending.popleft()
            observe(now - t0)
            if s > top:
                top = s
        if top >= 0:
            if top > self._last_persisted.get(peer, 0):
                self._last_persisted[peer] = top
            peer.ack("persisted", None, s=top, bm=format_bookmark(w.pub_hash, top))
        flushes = w.flushes
        while flushes and flushes[0][0] <= durable_seq:
            _, cid = flushes.popleft()
            peer.ack("processed", cid)
        return not pending and not flushes

    # -- replicated acks ----------------------------------------------------------------

    def _release_replicated(self, seq: int) -> None:
        """The replicated watermark moved: one conflated ``replicated`` ack per peer."""
        if not self._replicating:
            return
        done = [p for p in self._replicating if self._release_replicated_peer(p, seq)]
        for peer in done:
            self._replicating.discard(peer)

    def _release_replicated_peer(self, peer: Outbound, seq: int) -> bool:
        """Send what ``seq`` covers for one peer; True when nothing is left."""
        w = self._waiting.get(peer)
        if w is None or w.replicate is None:
            return True
        pending = w.replicate
        top = -1
        while pending and pending[0][0] <= seq:
            s = pending.popleft()[1]
            if s > top:
                top = s
        if top > 0:
            peer.ack("replicated", None, s=top, bm=format_bookmark(w.pub_hash, top))
        return not pending
