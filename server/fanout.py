"""The live fan-out: the publish stage that delivers appended runs to live subscriptions.

One implementation for every run length (a single publish is a run of one). For a run:
the router is asked once; a subscription with a content filter decides message by message
(one :class:`~spool.server.expr.MessageView` per message, shared by every filter, so a body is
parsed at most once whatever number of filters read it); then each client connection gets
one message per publish whatever number of its subscriptions matched (``sids`` lists them),
encoded in one pass per connection by :func:`spool.server.wire.encode_run` and queued as one
piece. Connections whose matching subscriptions are the same get the very same bytes.
Each subscription's ``progress.delivered`` grows by the messages it took once its
connection's piece is queued: one integer add per subscription per run.

A subscription with a select list (server/protocol/selection.py) gets the projection of
each message: a run's message is projected once per distinct select list, whatever the
number of subscriptions that share it, and only for the messages some of them take.
On a connection, the subscriptions of one select list share messages as above; those of
another list, or of none, get theirs apart (their bodies differ). Filters read the whole
message. Subscriptions without a select list never meet any of this.

Bookmarks come from the run's records (``AppendedRun.pub_hash``/``pub_seqs``), never from
the connection that published them: a replicated message keeps the bookmark its publisher
gave it elsewhere.

Back-pressure (server/backpressure.py): a connection's share of a run is offered to it
(:meth:`~spool.server.ports.Outbound.live_fits`) once encoded. When it does not fit and its
subscriptions could read it back from the log (a recorded topic, no filter on
``CLIENT_NAME()``), they *spill*: the :class:`Spiller` (server/spills.py) starts their
catch-up read at the run's first record, and the fan-out skips them for recorded runs until
they rejoin. Otherwise the connection overflows and is disconnected (``slow client``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from spool.server.backpressure import route
from spool.server.bookmarks import format_bookmark, format_timestamp_us
from spool.server.clock import Clock, time_us
from spool.server.expr import MessageView
from spool.server.ports import AppendedRun, Entitlements, Outbound
from spool.server.protocol.selection import SelectList
from spool.server.router import Router
from spool.server.subscription import SessionSubscription
from spool.server.txlog.format.record import MESSAGE_KINDS
from spool.server.wire import encode_run, sids_json

#: messages of a run each subscription of one connection takes (None: all of them)
_Taken = list[tuple[SessionSubscription, list[int] | None]]


class Spiller(Protocol):
    """Where live subscriptions go when their connection cannot take a run (server/spills.py)."""

    def spill(self, subs: Sequence[SessionSubscription], first_seq: int) -> None:
        """Catch ``subs`` up from the log, starting at record ``first_seq``."""
        ...


def readable(sub: SessionSubscription) -> bool:
    """Whether a catch-up read from the log gives ``sub`` what the live path would: not
    when its filter reads ``CLIENT_NAME()`` (records do not keep the publisher's name)."""
    flt = sub.filter
    return flt is None or "CLIENT_NAME" not in flt.functions


class FanOut:
    """Delivers published runs to the live subscriptions of the router.

    Args:
        router: the index of live subscriptions.
        entitlements: read entitlements of regex subscriptions (checked per topic).
        clock: the ``ts`` of messages of topics not in the log (stamped on delivery).
        spiller: catches spilled subscriptions up from the log (None: no log, nothing
            can be read back, a run that does not fit disconnects its connection).
    """

    def __init__(
        self,
        router: Router,
        entitlements: Entitlements,
        clock: Clock,
        spiller: Spiller | None = None,
    ) -> None:
        self._router = router
        self._auth = entitlements
        self._clock = clock
        self._spiller = spiller
        self._ts_run: AppendedRun | None = None
        self._ts_text = ""

    def applies_to(self, topic: str) -> bool:
        """Every topic can have live subscribers."""
        return True

    def reaches(self, topic: str, peer: Outbound) -> bool:
        """Whether a live subscription of ``peer`` takes ``topic``."""
        return any(sub.outbound is peer for sub in self._router.match(topic))

    def appended(self, run: AppendedRun) -> None:
        """Deliver ``run`` to every live subscription that takes (some of) it.

        Only runs of the message kinds (``MESSAGE_KINDS``) are delivered. A run of
        ``SOW_DELETE`` records (a replicated ``sow_delete``) is no message: the SOW stage
        tells its subscribers, plain subscribers hear nothing of it; nor of a replicated
        queue's ``QUEUE_ACK`` / ``QUEUE_TRANSFER`` records (the queue stage's); nor of a
        delayed message's ``SCHEDULED`` record (its ``DUE`` record is delivered when it
        falls due).
        """
        if run.kind not in MESSAGE_KINDS:
            return
        matches = self._router.match(run.topic)
        if not matches:
            return
        n = len(run.bodies)
        if len(matches) == 1:
            only = matches[0]
            if (
                only.filter is None
                and only.select is None
                and (only.pattern is None or not self._auth.enabled)
            ):
                # the common case: one plain subscription, nothing to select or group
                recorded = run.first_seq > 0
                if recorded and only.progress.feed.catching_up:
                    return  # its catch-up read delivers this run
                ts = self._ts(run, only.want_ts)
                data = self._encode(run, run.bodies, only.sid_bytes, range(n), ts)
                peer = only.outbound
                # no filter: it can read the run back when the log holds it
                can_read_back = recorded and self._spiller is not None
                if peer.live_fits(len(data), readable=can_read_back):
                    peer.send_messages(data, n)
                    only.progress.delivered += n
                else:
                    self._refused(run, peer, (only,), len(data), can_read_back)
                return
        self._deliver(run, matches, n)

    def _offer(
        self,
        run: AppendedRun,
        peer: Outbound,
        takers: Sequence[SessionSubscription],
        data: bytes,
        count: int,
    ) -> bool:
        """Queue one connection's share of ``run`` if it fits (True); else spill or
        overflow (False: the spilled subscriptions' catch-up read delivers it)."""
        can_read_back = (
            run.first_seq > 0 and self._spiller is not None and all(map(readable, takers))
        )
        if peer.live_fits(len(data), readable=can_read_back):
            peer.send_messages(data, count)
            return True
        self._refused(run, peer, takers, len(data), can_read_back)
        return False

    def _refused(
        self,
        run: AppendedRun,
        peer: Outbound,
        takers: Sequence[SessionSubscription],
        nbytes: int,
        can_read_back: bool,
    ) -> None:
        """A connection's share of ``run`` does not fit: its subscriptions spill, or the
        connection overflows (server/backpressure.py ``route``)."""
        match route(fits=False, readable=can_read_back):
            case "spill":
                assert self._spiller is not None
                self._spiller.spill(takers, run.first_seq)
            case "overflow":
                peer.overflow(nbytes)
            case "deliver":  # pragma: no cover - route() never delivers what does not fit
                raise AssertionError("route() delivered what does not fit")

    def _deliver(self, run: AppendedRun, matches: Sequence[SessionSubscription], n: int) -> None:
        """The general case: entitlements, filters, select lists, several subscriptions
        per connection."""
        per_peer: dict[Outbound, _Taken] = {}
        selecting: dict[tuple[Outbound, SelectList], _Taken] = {}
        filtered: list[tuple[SessionSubscription, list[int]]] = []
        auth = self._auth
        recorded = run.recorded
        for sub in matches:
            if not sub.progress.feed.takes(recorded):
                continue  # catching up from the log, which delivers this run
            if auth.enabled and sub.pattern is not None and not auth.can_read(sub.user, run.topic):
                continue  # exact topics were checked when the subscription was made
            if sub.select is not None:
                chosen: list[int] | None = None if sub.filter is None else []
                if chosen is not None:
                    filtered.append((sub, chosen))
                selecting.setdefault((sub.outbound, sub.select), []).append((sub, chosen))
            elif sub.filter is None:
                per_peer.setdefault(sub.outbound, []).append((sub, None))
            else:
                taken: list[int] = []
                filtered.append((sub, taken))
                per_peer.setdefault(sub.outbound, []).append((sub, taken))
        if filtered:
            self._select(run, filtered, n)
        encoded: dict[tuple[bytes, bool], bytes] = {}
        bodies = run.bodies
        for peer, subs in per_peer.items():
            # _deliver_to, inlined: a call per connection costs the many-connection case
            if len(subs) == 1:
                sub, sel = subs[0]
                if sel is None:
                    # connections that take the whole run under the same ids share bytes
                    key = (sub.sid_bytes, sub.want_ts)
                    data = encoded.get(key)
                    if data is None:
                        data = encoded[key] = self._encode(
                            run, bodies, sub.sid_bytes, range(n), self._ts(run, sub.want_ts)
                        )
                    if self._offer(run, peer, (sub,), data, n):
                        sub.progress.delivered += n
                elif sel:
                    data = self._encode(run, bodies, sub.sid_bytes, sel, self._ts(run, sub.want_ts))
                    if self._offer(run, peer, (sub,), data, len(sel)):
                        sub.progress.delivered += len(sel)
            else:
                self._deliver_several(run, peer, subs, bodies, n, encoded)
        if selecting:
            projected: dict[SelectList, list[bytes]] = {}
            by_list: dict[SelectList, dict[tuple[bytes, bool], bytes]] = {}
            for (peer, select), subs in selecting.items():
                chosen_bodies = projected.setdefault(select, [b""] * n)
                self._project(run, select, subs, chosen_bodies)
                self._deliver_to(run, peer, subs, chosen_bodies, n, by_list.setdefault(select, {}))

    @staticmethod
    def _project(run: AppendedRun, select: SelectList, subs: _Taken, bodies: list[bytes]) -> None:
        """Fill ``bodies`` (the run's, as ``select`` delivers them; shared by every
        connection with that list) with the messages ``subs`` take that are not there
        yet: each message is projected once per list, whatever the subscribers."""
        n = len(bodies)
        if any(sel is None for _, sel in subs):
            wanted: Sequence[int] = range(n)
        else:
            wanted = sorted({i for _, sel in subs if sel for i in sel})
        whole = run.bodies
        for i in wanted:
            if not bodies[i]:  # only an empty body projects to nothing, cheaply again
                bodies[i] = select.project(whole[i])

    def _deliver_to(
        self,
        run: AppendedRun,
        peer: Outbound,
        subs: _Taken,
        bodies: Sequence[bytes],
        n: int,
        encoded: dict[tuple[bytes, bool], bytes],
    ) -> None:
        """One connection's subscriptions that share ``bodies`` (the run's, or their
        select list's projection of it); ``encoded``: bytes already made for these
        bodies, shared by connections that take the same."""
        if len(subs) == 1:
            sub, sel = subs[0]
            if sel is None:
                # connections that take the whole run under the same ids share bytes
                key = (sub.sid_bytes, sub.want_ts)
                data = encoded.get(key)
                if data is None:
                    data = encoded[key] = self._encode(
                        run, bodies, sub.sid_bytes, range(n), self._ts(run, sub.want_ts)
                    )
                if self._offer(run, peer, (sub,), data, n):
                    sub.progress.delivered += n
            elif sel:
                data = self._encode(run, bodies, sub.sid_bytes, sel, self._ts(run, sub.want_ts))
                if self._offer(run, peer, (sub,), data, len(sel)):
                    sub.progress.delivered += len(sel)
        else:
            self._deliver_several(run, peer, subs, bodies, n, encoded)

    def _deliver_several(
        self,
        run: AppendedRun,
        peer: Outbound,
        subs: _Taken,
        bodies: Sequence[bytes],
        n: int,
        encoded: dict[tuple[bytes, bool], bytes],
    ) -> None:
        """One connection with several matching subscriptions: one message per publish,
        ``sids`` naming the subscriptions that took it."""
        if all(sel is None for _, sel in subs):
            ids = [sub.sub_id for sub, _ in subs]
            want_ts = any(sub.want_ts for sub, _ in subs)
            sids = sids_json(ids)
            key = (sids, want_ts)
            data = encoded.get(key)
            if data is None:
                data = encoded[key] = self._encode(
                    run, bodies, sids, range(n), self._ts(run, want_ts)
                )
            if self._offer(run, peer, [sub for sub, _ in subs], data, n):
                for sub, _ in subs:
                    sub.progress.delivered += n
            return
        takers: list[list[SessionSubscription]] = [[] for _ in range(n)]
        for sub, sel in subs:
            for i in range(n) if sel is None else sel:
                takers[i].append(sub)
        pieces: list[bytes] = []
        for i, these in enumerate(takers):
            if these:
                want_ts = any(s.want_ts for s in these)
                sids = sids_json([s.sub_id for s in these])
                pieces.append(self._encode(run, bodies, sids, (i,), self._ts(run, want_ts)))
        if pieces:
            took = [sub for sub, sel in subs if sel is None or sel]
            if self._offer(run, peer, took, b"".join(pieces), len(pieces)):
                # one message per publish, but each subscription counts what it took
                for sub, sel in subs:
                    sub.progress.delivered += n if sel is None else len(sel)

    def _select(
        self, run: AppendedRun, filtered: list[tuple[SessionSubscription, list[int]]], n: int
    ) -> None:
        """Fill each filtered subscription's list with the messages its filter matches."""
        needs_bm = any("BOOKMARK" in sub.filter.functions for sub, _ in filtered if sub.filter)
        needs_ts = any("TIMESTAMP" in sub.filter.functions for sub, _ in filtered if sub.filter)
        recorded = run.recorded
        ts = format_timestamp_us(run.timestamp_us) if needs_ts and run.timestamp_us else ""
        topic = run.topic
        bodies = run.bodies
        for i in range(n):
            view = MessageView(
                topic,
                bodies[i],
                bookmark=format_bookmark(run.pub_hash, run.pub_seqs[i])
                if needs_bm and recorded
                else "",
                timestamp=ts,
                client_name=run.publisher_name,
            )
            for sub, taken in filtered:
                flt = sub.filter
                if flt is not None and flt.matches(view):
                    taken.append(i)

    def _ts(self, run: AppendedRun, want: bool) -> str | None:
        """The ``ts`` of the run's deliveries: the record time, or now when not recorded
        (formatted once per run, whatever number of connections asked for it)."""
        if not want:
            return None
        if self._ts_run is not run:
            us = run.timestamp_us
            self._ts_run = run
            self._ts_text = format_timestamp_us(us if us is not None else time_us(self._clock))
        return self._ts_text

    @staticmethod
    def _encode(
        run: AppendedRun,
        bodies: Sequence[bytes],
        sids: bytes,
        part: Sequence[int] | range,
        ts: str | None,
    ) -> bytes:
        return encode_run(
            run.topic_literal,
            sids,
            bodies,
            part,
            pub_hash=run.pub_hash,
            pub_seqs=run.pub_seqs if run.recorded else None,
            ts=ts,
            corr_ids=run.corr_ids,
        )
