"""The checker: the recorded histories against every instance's journals.

Input: the events of every process (:mod:`tests.nemesis.history`) and the log of every
instance read back after the run (:mod:`tests.nemesis.journals`). Every check below is
an invariant of what the clients were told, so its verdict does not depend on how fast
the machine ran; each violation is an :class:`Anomaly` with a category (the table in
docs/nemesis.md) and the smallest slice of the history that shows it.

- **publishers** (``pub-*``, ``ha-pub-*``, ``qpub``, ``sow-w-*``): on every instance, each
  acknowledged sequence (at or below the highest persisted ack) is in the log: ``lost``
  otherwise, split by where it falls among the sequences the log does hold (``prefix``:
  before the first, ``postfix``: after the last, ``middle``); no sequence is stored twice
  (``duplicated``, also for the records of the instances' own identity: queue acks and
  transfers); nothing is stored that was never sent (``unexpected``: a sequence above
  what the publisher invoked, or a publisher nobody ran).
- **copies**: every record with a publisher identity is on every instance (each topology
  here reaches every instance from every other): ``divergent`` otherwise (split-brain,
  a copy never repaired, a record only one instance kept).
- **bookmark subscribers** (``ha-sub-*`` of ``nem.pub``, ``dsub`` of ``nem.delay``):
  each acknowledged message of their topic processed
  (``sub-missing``), once (``sub-duplicated``), in a valid order: a publisher's messages
  in increasing sequence, unless an instance's log holds them in the order they came
  (a late record that filled a gap) or held them so before a fault replaced its records
  (its earlier logs, :func:`held_orders`) (``sub-order``; not for ``dsub``: delayed
  messages come in due order); nothing processed that no log holds and nobody sent
  (``sub-unexpected``).
- **delayed delivery** (``dpub``, ``dsub``): a delayed message is stored once as a
  scheduled record (``lost``, ``duplicated`` and ``divergent`` go by it) and falls due once
  on every instance that holds it (``delay-undelivered``: no due record in its log;
  a second one is ``duplicated``); ``dsub`` receives nothing before its due time, less
  a tolerance (``delay-early``): 50 ms, plus the largest forward clock offset the
  nemesis applied between the message's first send and its receipt (an instance whose
  clock is ahead writes the due record early by that much). How late the messages came
  is reported (:attr:`Verdict.delayed`), not judged: pauses and kills delay them.
- **the queue** (``qc-*``): every message whose publish was acknowledged is delivered to
  a consumer that acks it (``queue-unprocessed``: never delivered, or only to consumers
  that died holding it; the final drain also requires every copy's depth to reach 0, so
  such a message left the queue unprocessed or is stuck); no message is delivered after
  an ack of it was confirmed (processed and flushed) (``queue-after-ack``). Deliveries of
  one message to several consumers before its ack are allowed (at-least-once) and
  counted; an ack whose confirmation was cut off by a fault counts as sent. So are, and
  counted apart, deliveries after the ack of a message the publisher sent to several
  instances (it failed over before the first confirmed) by an instance, other than the
  ack's, that owned a copy (one it was published on, or one a transfer granted it):
  docs/queues.md "A message published on two instances" says why no instance can know
  of the other copy before it arrives. A confirmed reject settles a message as an ack
  does, and its dead letter (a publish of ``nem.q.dead`` naming the message's bookmark)
  is in the logs (``dead-letter-lost`` otherwise); every copy's records are checked like
  any others (``divergent``, ``duplicated``).
- **the SOW**: each snapshot taken at a quiet point equals the fold of that instance's
  log up to the position the snapshot reflects (``sow-fold``); a read returns only
  values some writer published (``sow-unexpected``).
- **liveness**: after the final heal everything converged within the bound
  (``liveness``: the nemesis history's ``liveness`` failures); after each fault the
  publishers moved again (``stalled``); the journals verify clean (``journal-damage``).
"""

from __future__ import annotations

import itertools
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from spool.server.bookmarks import pub_hash
from spool.server.queues import deadletter
from spool.server.txlog.publishers.gaps import Interval, PublisherGaps
from tests.nemesis.cluster import TOPIC_DELAY, TOPIC_PUB, TOPIC_QDEAD, TOPIC_QIN, TOPIC_SOW
from tests.nemesis.history import Event
from tests.nemesis.journals import (
    DUE,
    KIND_NAMES,
    PUBLISH,
    QUEUE_TRANSFER,
    SCHEDULED,
    SOW_DELETE,
    InstanceLog,
    LogRecord,
)

__all__ = ["CATEGORIES", "Anomaly", "HeldOrders", "Verdict", "check", "held_orders"]

#: every anomaly category, in the order the summary lists them
CATEGORIES = (
    "lost",
    "duplicated",
    "unexpected",
    "divergent",
    "sub-missing",
    "sub-duplicated",
    "sub-order",
    "sub-unexpected",
    "delay-early",
    "delay-undelivered",
    "queue-unprocessed",
    "queue-after-ack",
    "dead-letter-lost",
    "sow-fold",
    "sow-unexpected",
    "liveness",
    "stalled",
    "journal-damage",
)
#: faults after which a snapshot no longer describes the instance's log (its records
#: were damaged, or it was wiped and copied anew)
_REWRITES = {"torn-tail", "truncate", "bit-flip", "missing-journal", "lost-writes", "join-empty"}
_SLICE = 40  # most events shown for one anomaly
#: the records a publisher's message is stored as (a delayed one: its scheduled record)
_STORED = (PUBLISH, SCHEDULED)
#: how early a delayed message may arrive with no clock ahead (seconds): the broker's
#: timer and the clients' clocks are the machine's, so this is rounding and scheduling
EARLY_TOLERANCE_S = 0.05
#: how long after a clock jump's ``end`` an instance may still run on its offset (the
#: clock re-reads its control file every 50 ms)
_CLOCK_SETTLE_S = 1.0


@dataclass
class Anomaly:
    category: str
    detail: str
    instance: str | None = None
    process: str | None = None
    #: when it first shows (run seconds), for the timeline
    time: float | None = None
    count: int = 1
    sub: str | None = None  # lost: prefix / middle / postfix
    slice: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "sub": self.sub,
            "instance": self.instance,
            "process": self.process,
            "time": self.time,
            "count": self.count,
            "detail": self.detail,
            "slice": self.slice,
        }


@dataclass
class Verdict:
    anomalies: list[Anomaly] = field(default_factory=list)
    #: what was checked, by what (for the summary)
    checked: dict[str, int] = field(default_factory=dict)
    #: facts that are not anomalies (deliveries before an ack, ...)
    notes: dict[str, Any] = field(default_factory=dict)
    #: delayed delivery: counts, the early tolerance, lateness percentiles (ms)
    delayed: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def counts(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for a in self.anomalies:
            c[a.category] += a.count
        return c


@dataclass
class _Pub:
    name: str
    topic: str
    invoked: int = 0
    acked: int = 0
    events: list[Event] = field(default_factory=list)


def _publishers(events: Sequence[Event]) -> dict[str, _Pub]:
    pubs: dict[str, _Pub] = {}
    for e in events:
        if e.f != "publish" or e.type not in ("invoke", "ok"):
            continue
        p = pubs.get(e.process)
        if p is None:
            if e.type != "invoke":
                continue
            p = pubs[e.process] = _Pub(e.process, e.value["topic"])
        p.events.append(e)
        if e.type == "invoke":
            p.invoked = max(p.invoked, e.value["last"])
        else:
            p.acked = max(p.acked, e.value["upto"])
    return pubs


def _faults(events: Sequence[Event]) -> list[Event]:
    return [e for e in events if e.process == "nemesis" and e.f in ("start", "end", "bit")]


def _touches(e: Event, instance: str | None) -> bool:
    if instance is None:
        return True
    v = e.value or {}
    targets = v.get("targets") or []
    return instance in targets or v.get("instance") == instance or e.f == "end"


def _slice(events: Iterable[Event], *, limit: int = _SLICE) -> list[dict[str, Any]]:
    out = sorted(events, key=lambda e: e.mono)
    if len(out) > limit:
        out = out[: limit // 2] + out[-limit // 2 :]
    return [e.to_json() for e in out]


def _fault_slice(
    faults: Sequence[Event], instance: str | None, t0: float, t1: float
) -> list[Event]:
    return [e for e in faults if t0 <= e.mono <= t1 and _touches(e, instance)]


def _runs(seqs: Iterable[int]) -> str:
    """``3-7, 12, 40-41``: a sorted list of integers as ranges (the first 10)."""
    out = []
    for _, group in itertools.groupby(enumerate(sorted(seqs)), lambda p: p[1] - p[0]):
        g = [s for _, s in group]
        out.append(str(g[0]) if len(g) == 1 else f"{g[0]}-{g[-1]}")
    more = f" (+{len(out) - 10} more runs)" if len(out) > 10 else ""
    return ", ".join(out[:10]) + more


#: per ``nem.pub`` message a log holds after a higher sequence of its publisher: those
#: higher sequences (inclusive intervals), see :func:`held_orders`
HeldOrders = dict[tuple[int, int], list[Interval]]


def check(
    events: Sequence[Event],
    logs: dict[str, InstanceLog],
    *,
    end_time: float | None = None,
    earlier: Sequence[HeldOrders] = (),
) -> Verdict:
    """Every check of the module docstring. ``earlier``: the orders of the journals the
    instances held before a fault replaced them (a subscriber may have read them there)."""
    v = Verdict()
    end = end_time if end_time is not None else (events[-1].mono if events else 0.0)
    faults = _faults(events)
    pubs = _publishers(events)
    by_hash = {pub_hash(p.name): p for p in pubs.values()}
    # the instances' own identities (one per log an instance had: server/txlog/publishers/incarnation.py):
    # those of its records that are not publishes (queue acks and transfers, sow_deletes)
    brokers = {
        r.pub_hash
        for log in logs.values()
        for r in log.records
        if r.pub_hash and r.kind not in (PUBLISH, SCHEDULED, DUE)
    }
    _check_journals(v, logs)
    lost_keys = _check_publishers(v, logs, pubs, faults, end)
    _check_unknown(v, logs, by_hash, brokers)
    _check_copies(v, logs, lost_keys, faults, end)
    _check_subscribers(v, events, logs, pubs, faults, earlier)
    _check_delayed(v, events, logs, pubs, faults)
    _check_queue(v, events, logs, pubs, faults)
    _check_sow(v, events, logs, pubs)
    _check_liveness(v, events)
    v.checked["instances"] = len(logs)
    v.checked["earlier logs read"] = len(earlier)
    v.checked["records read"] = sum(len(log.records) for log in logs.values())
    v.checked["messages acknowledged"] = sum(p.acked for p in pubs.values())
    return v


def _check_journals(v: Verdict, logs: dict[str, InstanceLog]) -> None:
    for log in logs.values():
        if log.error is not None:
            v.anomalies.append(Anomaly("journal-damage", log.error, log.name))
        elif not log.clean:
            v.anomalies.append(
                Anomaly(
                    "journal-damage",
                    "recovery would cut: " + "; ".join(log.damage[:5]),
                    log.name,
                    count=len(log.damage),
                )
            )


def _check_publishers(
    v: Verdict,
    logs: dict[str, InstanceLog],
    pubs: dict[str, _Pub],
    faults: Sequence[Event],
    end: float,
) -> dict[str, set[tuple[int, int]]]:
    """lost / duplicated / unexpected per publisher and instance; returns the lost keys
    per instance (the copies check does not report them twice)."""
    lost_keys: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for p in pubs.values():
        h = pub_hash(p.name)
        for log in logs.values():
            seqs = [r.pub_seq for r in log.records if r.pub_hash == h and r.kind in _STORED]
            counts = Counter(seqs)
            held = set(counts)
            lost = [s for s in range(1, p.acked + 1) if s not in held]
            if lost:
                lo, hi = (min(held), max(held)) if held else (None, None)
                parts: dict[str, list[int]] = {"prefix": [], "middle": [], "postfix": []}
                for s in lost:
                    if lo is None or s < lo:
                        parts["prefix"].append(s)
                    elif s > hi:  # type: ignore[operator]
                        parts["postfix"].append(s)
                    else:
                        parts["middle"].append(s)
                for sub, ss in parts.items():
                    if not ss:
                        continue
                    acked_at = next(
                        (e.mono for e in p.events if e.type == "ok" and e.value["upto"] >= ss[0]),
                        end,
                    )
                    shown = [
                        e for e in p.events
                        if (e.type == "invoke" and e.value["first"] <= ss[0] <= e.value["last"])
                        or (e.type == "ok" and e.mono == acked_at)
                    ]  # fmt: skip
                    v.anomalies.append(
                        Anomaly(
                            "lost",
                            f"{p.name}: acknowledged {_runs(ss)} missing from {log.name}'s log "
                            f"(it holds {len(held)} of 1..{p.invoked}, acked up to {p.acked})",
                            log.name,
                            p.name,
                            time=acked_at,
                            count=len(ss),
                            sub=sub,
                            slice=_slice([*shown, *_fault_slice(faults, log.name, acked_at, end)]),
                        )
                    )
                lost_keys[log.name].update((h, s) for s in lost)
            twice = sorted(s for s, n in counts.items() if n > 1)
            if twice:
                v.anomalies.append(
                    Anomaly(
                        "duplicated",
                        f"{p.name}: {_runs(twice)} stored more than once on {log.name}",
                        log.name,
                        p.name,
                        count=len(twice),
                    )
                )
            dues = Counter(r.pub_seq for r in log.records if r.pub_hash == h and r.kind == DUE)
            again = sorted(s for s, n in dues.items() if n > 1)
            if again:
                v.anomalies.append(
                    Anomaly(
                        "duplicated",
                        f"{p.name}: {_runs(again)} fell due more than once on {log.name} "
                        "(two due records: a replay there delivers them twice)",
                        log.name,
                        p.name,
                        count=len(again),
                    )
                )
            extra = sorted(s for s in held if s > p.invoked or s < 1)
            if extra:
                v.anomalies.append(
                    Anomaly(
                        "unexpected",
                        f"{p.name}: {_runs(extra)} stored on {log.name}, never sent "
                        f"(sent 1..{p.invoked})",
                        log.name,
                        p.name,
                        count=len(extra),
                    )
                )
    v.checked["publishers"] = len(pubs)
    return lost_keys


def _check_unknown(
    v: Verdict, logs: dict[str, InstanceLog], by_hash: dict[int, _Pub], brokers: set[int]
) -> None:
    """Records of identities nobody has; records of the instances' own identity (queue
    acks and transfers, SOW deletes) stored twice."""
    for log in logs.values():
        twice = Counter(r.key for r in log.records if r.pub_hash in brokers)
        again = sorted(k for k, n in twice.items() if n > 1)
        if again:
            v.anomalies.append(
                Anomaly(
                    "duplicated",
                    f"{len(again)} records of the instances' own identity stored more than "
                    f"once on {log.name}; first {again[:3]}",
                    log.name,
                    count=len(again),
                )
            )
        strangers = Counter(
            r.pub_hash
            for r in log.records
            if r.pub_hash and r.pub_hash not in by_hash and r.pub_hash not in brokers
        )
        if strangers:
            v.anomalies.append(
                Anomaly(
                    "unexpected",
                    f"{sum(strangers.values())} records on {log.name} from publishers nobody "
                    f"ran: {dict(list(strangers.items())[:5])}",
                    log.name,
                    count=sum(strangers.values()),
                )
            )


def _check_copies(
    v: Verdict,
    logs: dict[str, InstanceLog],
    lost_keys: dict[str, set[tuple[int, int]]],
    faults: Sequence[Event],
    end: float,
) -> None:
    # due records are each instance's own (never replicated): compared by their
    # scheduled records here, checked per instance by _check_delayed
    held: dict[str, dict[tuple[int, int], LogRecord]] = {
        n: {r.key: r for r in log.records if r.pub_hash and r.kind != DUE}
        for n, log in logs.items()
    }
    union: dict[tuple[int, int], LogRecord] = {}
    for recs in held.values():
        for k, r in recs.items():
            union.setdefault(k, r)
    for name, recs in held.items():
        missing = [k for k in union if k not in recs and k not in lost_keys.get(name, set())]
        if not missing:
            continue
        kinds = Counter(KIND_NAMES.get(union[k].kind, str(union[k].kind)) for k in missing)
        holders = Counter(",".join(sorted(n for n, r in held.items() if k in r)) for k in missing)
        first = [union[k] for k in missing[:5]]
        v.anomalies.append(
            Anomaly(
                "divergent",
                f"{len(missing)} records held elsewhere are not on {name} "
                f"(by kind {dict(kinds)}; held by {dict(holders)}); first: "
                + "; ".join(
                    f"{r.topic} {r.pub_hash}|{r.pub_seq}| path {list(r.path)}" for r in first
                ),
                name,
                count=len(missing),
                slice=_slice(_fault_slice(faults, name, 0.0, end)),
            )
        )
    v.checked["records compared across instances"] = len(union)


def held_orders(records: Iterable[LogRecord]) -> HeldOrders:
    """Which ``nem.pub`` messages a log holds after higher sequences of their publisher.

    In log order, a message below its publisher's highest so far (a late record that
    filled a gap, or a second copy) maps to the higher sequences held before it: the
    sequences above it up to that highest, less the ones still missing then. A log in
    each publisher's order gives an empty map, so the map of a replaced log is small
    enough to keep for the whole check.
    """
    out: HeldOrders = {}
    top: dict[int, int] = {}
    missing = PublisherGaps(max_gaps=sys.maxsize)
    for r in records:
        if r.topic != TOPIC_PUB or r.kind != PUBLISH:
            continue
        h, s = r.key
        highest = top.get(h, 0)
        if s > highest:
            missing.advanced(h, highest, [s])
            top[h] = s
            continue
        held, at = out.setdefault(r.key, []), s + 1
        for lo, hi in missing.gaps(h):
            if hi < at:
                continue
            if lo > at:
                held.append((at, lo - 1))
            at = hi + 1
        if at <= highest:
            held.append((at, highest))
        missing.fill(h, s)
    return out


def _check_subscribers(
    v: Verdict,
    events: Sequence[Event],
    logs: dict[str, InstanceLog],
    pubs: dict[str, _Pub],
    faults: Sequence[Event],
    earlier: Sequence[HeldOrders],
) -> None:
    orders: list[HeldOrders] | None = None
    subs: dict[str, list[tuple[tuple[int, int], Event]]] = defaultdict(list)
    for e in events:
        if e.f == "recv" and e.type == "ok":
            for m in e.value["msgs"]:
                subs[e.process].append(((m[0], m[1]), e))
    for name, seen in sorted(subs.items()):
        topic = subscribed_topic(name)
        expected = {
            (pub_hash(p.name), s)
            for p in pubs.values()
            if p.topic == topic
            for s in range(1, p.acked + 1)
        }
        stored = {r.key for log in logs.values() for r in log.records if r.topic == topic}
        invoked = {pub_hash(p.name): p.invoked for p in pubs.values() if p.topic == topic}
        keys = [k for k, _ in seen]
        counts = Counter(keys)
        twice = [k for k, n in counts.items() if n > 1]
        if twice:
            shown = [e for k, e in seen if k in set(twice[:3])]
            v.anomalies.append(
                Anomaly(
                    "sub-duplicated",
                    f"{name} processed {len(twice)} messages more than once; first {twice[:5]}",
                    process=name,
                    time=shown[-1].mono if shown else None,
                    count=len(twice),
                    slice=_slice(_trim(shown, set(twice[:3]))),
                )
            )
        missing = sorted(expected - set(keys))
        if missing:
            v.anomalies.append(
                Anomaly(
                    "sub-missing",
                    f"{name} never processed {len(missing)} acknowledged messages; first "
                    f"{missing[:5]}",
                    process=name,
                    count=len(missing),
                )
            )
        strange = [k for k in counts if k not in stored and k[1] > invoked.get(k[0], 0)]
        if strange:
            v.anomalies.append(
                Anomaly(
                    "sub-unexpected",
                    f"{name} processed {len(strange)} messages no log holds and nobody sent: "
                    f"{strange[:5]}",
                    process=name,
                    count=len(strange),
                )
            )
        top: dict[int, tuple[int, Event]] = {}
        #: (the message, the higher sequence processed before it, when, and it)
        bad: list[tuple[tuple[int, int], int, Event, Event]] = []
        # delayed messages come in due order, not in their publisher's
        for (h, s), e in seen if topic == TOPIC_PUB else ():
            prev = top.get(h)
            if prev is not None and s < prev[0] and counts[(h, s)] == 1:
                if orders is None:
                    orders = [*(held_orders(log.records) for log in logs.values()), *earlier]
                higher = prev[0]
                if not any(
                    lo <= higher <= hi for held in orders for lo, hi in held.get((h, s), ())
                ):
                    bad.append(((h, s), higher, prev[1], e))
            if prev is None or s > prev[0]:
                top[h] = (s, e)
        if bad:
            (h, s), higher, before, after = bad[0]
            v.anomalies.append(
                Anomaly(
                    "sub-order",
                    f"{name} processed {len(bad)} messages after a higher sequence of their "
                    f"publisher that no log holds or held in that order; first {h}|{s}| after "
                    f"{h}|{higher}|",
                    process=name,
                    time=after.mono,
                    count=len(bad),
                    slice=_slice(
                        [
                            *_trim(
                                [after] if before is after else [before, after],
                                {(h, s), (h, higher)},
                            ),
                            *_fault_slice(faults, None, before.mono, after.mono),
                        ]
                    ),
                )
            )
    v.checked["bookmark subscribers"] = len(subs)
    v.checked["messages processed by subscribers"] = sum(len(s) for s in subs.values())


def subscribed_topic(process: str) -> str:
    """The topic a bookmark subscriber's history is about, by its name."""
    return TOPIC_DELAY if process.startswith("dsub") else TOPIC_PUB


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of a sorted, non-empty sequence (nearest rank)."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _ahead(faults: Sequence[Event]) -> list[tuple[float, float, float]]:
    """The forward clock jumps the nemesis applied: (from, to, offset s), ``to`` with
    the time an instance may take to see the offset go."""
    ends = {e.value["index"]: e.mono for e in faults if e.f == "end"}
    out = []
    for e in faults:
        if e.f != "start" or e.value["kind"] != "clock-jump":
            continue
        offset = float(e.value["params"]["offset_s"])
        if offset > 0:
            to = ends.get(e.value["index"], float("inf")) + _CLOCK_SETTLE_S
            out.append((e.mono, to, offset))
    return out


def _check_delayed(
    v: Verdict,
    events: Sequence[Event],
    logs: dict[str, InstanceLog],
    pubs: dict[str, _Pub],
    faults: Sequence[Event],
) -> None:
    """Each delayed message fell due on every instance that holds it; ``dsub`` received
    none before its due time less the tolerance; how late they came (a note)."""
    dpubs = {pub_hash(p.name): p for p in pubs.values() if p.topic == TOPIC_DELAY}
    #: (pub_hash, seq) -> (due, its first send)
    due: dict[tuple[int, int], tuple[float, Event]] = {}
    for h, p in dpubs.items():
        for e in p.events:
            if e.type != "invoke":
                continue
            for s, t in zip(
                range(e.value["first"], e.value["last"] + 1), e.value["due"], strict=True
            ):
                due.setdefault((h, s), (t, e))
    for log in logs.values():
        scheduled = {r.key for r in log.records if r.kind == SCHEDULED and r.pub_hash in dpubs}
        fell = {r.key for r in log.records if r.kind == DUE and r.pub_hash in dpubs}
        never = sorted(scheduled - fell)
        if never:
            v.anomalies.append(
                Anomaly(
                    "delay-undelivered",
                    f"{len(never)} delayed messages {log.name} holds never fell due there "
                    f"(no due record); first {never[:5]}",
                    log.name,
                    count=len(never),
                )
            )
    ahead = _ahead(faults)
    run_tolerance = EARLY_TOLERANCE_S + max((o for _, _, o in ahead), default=0.0)
    first: dict[tuple[int, int], float] = {}
    early: list[tuple[tuple[int, int], float, float, Event]] = []
    within = 0
    received = 0
    for e in events:
        if e.f != "recv" or e.type != "ok" or subscribed_topic(e.process) != TOPIC_DELAY:
            continue
        for m in e.value["msgs"]:
            key = (m[0], m[1])
            if key not in due:
                continue  # nobody sent it: sub-unexpected
            received += 1
            wall = float(m[2])
            t, sent = due[key]
            first.setdefault(key, wall - t)
            if wall >= t - EARLY_TOLERANCE_S:
                continue
            tolerance = EARLY_TOLERANCE_S + max(
                (o for lo, hi, o in ahead if lo <= e.mono and sent.mono <= hi), default=0.0
            )
            if wall >= t - tolerance:
                within += 1
            else:
                early.append((key, t - wall, tolerance, e))
    if early:
        (h, s), by, tolerance, e = early[0]
        sent = due[(h, s)][1]
        v.anomalies.append(
            Anomaly(
                "delay-early",
                f"{e.process} received {len(early)} delayed messages before their due time "
                f"beyond the tolerance; first {h}|{s}|, due {due[(h, s)][0]:.6f}, received "
                f"{by:.3f} s early on {e.node} (tolerance {tolerance:.3f} s)",
                e.node,
                e.process,
                time=e.mono,
                count=len(early),
                slice=_slice(
                    [sent, *_trim([e], {(h, s)}), *_fault_slice(faults, None, sent.mono, e.mono)]
                ),
            )
        )
    late = sorted(first.values())
    acked = sum(p.acked for p in dpubs.values())
    v.delayed = {
        "acknowledged": acked,
        "received": received,
        "distinct received": len(first),
        "due records": {
            n: sum(1 for r in log.records if r.kind == DUE and r.pub_hash in dpubs)
            for n, log in logs.items()
        },
        "early tolerance s": round(run_tolerance, 3),
        "early within the clock tolerance": within,
        "early beyond it": len(early),
        "lateness ms": (
            {
                name: round(_percentile(late, q) * 1000, 1)
                for name, q in (
                    ("min", 0.0),
                    ("p50", 0.5),
                    ("p90", 0.9),
                    ("p99", 0.99),
                    ("max", 1.0),
                )
            }
            if late
            else {}
        ),
    }
    v.checked["delayed messages received"] = len(first)


def _published_twice(on: set[str], owners: set[str], ack: Event, later: Sequence[Event]) -> bool:
    """Deliveries after a confirmed ack that docs/queues.md ("A message published on two
    instances") allows: the message was published on several instances and every later
    delivery is by an owner of a copy, on another instance than the ack's. Each copy has
    its owner: the instance it was published on, or one a transfer granted it to before
    the copies met (``owners``: every instance a grant of the message named). Until the
    copies (and the ack) cross the links, nothing tells that owner the message was
    published elsewhere. A delivery by an instance that never owned it (one that only
    holds a replicated copy) is still an anomaly."""
    return len(on) > 1 and all(
        d.node != ack.node and (d.node in on or d.node in owners) for d in later
    )


def _granted(logs: dict[str, InstanceLog], publisher: str) -> dict[int, set[str]]:
    """Per message of ``publisher`` (its sequence), every instance a queue transfer in any
    log granted it to (``["g", bookmark, owner, epoch, ...]`` items: docs/queues.md)."""
    prefix = f"{pub_hash(publisher)}|"
    out: dict[int, set[str]] = defaultdict(set)
    for log in logs.values():
        for r in log.records:
            if r.kind != QUEUE_TRANSFER or r.body is None:
                continue
            for item in orjson.loads(r.body):
                if item[0] == "g" and str(item[1]).startswith(prefix):
                    out[int(str(item[1]).split("|")[1])].add(str(item[2]))
    return out


def _trim(events: Iterable[Event], keys: set[tuple[int, int]]) -> list[Event]:
    """``recv`` events cut down to the messages ``keys`` names (a slice stays small)."""
    out = []
    for e in events:
        msgs = [m for m in e.value["msgs"] if (m[0], m[1]) in keys]
        out.append(Event(e.type, e.wall, e.mono, e.process, e.f, {"msgs": msgs}, e.node))
    return out


def _check_queue(
    v: Verdict,
    events: Sequence[Event],
    logs: dict[str, InstanceLog],
    pubs: dict[str, _Pub],
    faults: Sequence[Event],
) -> None:
    qpubs = [p for p in pubs.values() if p.topic == TOPIC_QIN]
    deliveries: dict[int, list[Event]] = defaultdict(list)
    confirmed: dict[int, Event] = {}
    sent: set[int] = set()
    dies: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        if not e.process.startswith("qc-"):
            continue
        if e.f == "process" and e.type == "invoke":
            deliveries[e.value["n"]].append(e)
        elif e.f == "ack" and e.type == "ok":
            confirmed.setdefault(e.value["n"], e)
        elif e.f == "ack" and e.type == "invoke":
            sent.add(e.value["n"])
        elif e.f == "die":
            dies[e.value["n"]].append(e)
    # where the publisher sent each message (more than one instance: it failed over
    # before the first one confirmed, so each logged it as its own publish)
    published_on: dict[int, set[str]] = defaultdict(set)
    for p in qpubs:
        for e in p.events:
            if e.type == "invoke":
                for n in range(e.value["first"], e.value["last"] + 1):
                    published_on[n].add(e.node)
    owners: dict[int, set[str]] = defaultdict(set)
    for p in qpubs:
        for n, names in _granted(logs, p.name).items():
            owners[n] |= names
    after = []
    twice = 0
    for n, ack in confirmed.items():
        later = [d for d in deliveries[n] if d.mono > ack.mono]
        if later and _published_twice(published_on[n], owners[n], ack, later):
            twice += 1
        elif later:
            after.append((n, ack, later))
    if after:
        n, ack, later = after[0]
        v.anomalies.append(
            Anomaly(
                "queue-after-ack",
                f"{len(after)} queue messages delivered after an ack of them was confirmed; "
                f"first n={n}: acked by {ack.process} on {ack.node} at {ack.mono:.2f} s, "
                f"delivered again to {later[0].process} on {later[0].node} at "
                f"{later[0].mono:.2f} s",
                later[0].node,
                later[0].process,
                time=later[0].mono,
                count=len(after),
                slice=_slice([ack, *later, *_fault_slice(faults, None, ack.mono, later[-1].mono)]),
            )
        )
    acked = [n for p in qpubs for n in range(1, p.acked + 1)]
    unprocessed = [n for n in acked if n not in sent]
    if unprocessed:
        n = unprocessed[0]
        p = qpubs[0]
        shown = [
            e for e in p.events
            if (e.type == "invoke" and e.value["first"] <= n <= e.value["last"])
        ] + deliveries[n] + dies[n]  # fmt: skip
        t0 = min((e.mono for e in shown), default=0.0)
        v.anomalies.append(
            Anomaly(
                "queue-unprocessed",
                f"{len(unprocessed)} acknowledged queue messages never delivered to a "
                f"consumer that acked them: n = {_runs(unprocessed)}",
                process=p.name,
                time=t0,
                count=len(unprocessed),
                slice=_slice([*shown, *_fault_slice(faults, None, t0, t0 + 1e9)]),
            )
        )
    v.notes[
        "queue messages published on two instances, delivered after an ack of the other copy"
    ] = twice
    multi = sum(1 for n, ds in deliveries.items() if len(ds) > 1)
    v.notes["queue messages delivered more than once before their ack"] = multi
    v.notes["queue consumers died holding a lease"] = sum(len(d) for d in dies.values())
    v.checked["queue messages"] = len(acked)
    _check_dead_letters(v, logs, [e for e in confirmed.values() if e.value.get("reject")])


def _check_dead_letters(v: Verdict, logs: dict[str, InstanceLog], rejects: Sequence[Event]) -> None:
    """Each confirmed reject has its dead letter in the logs (the copies check compares
    the logs, so one holding it is enough here)."""
    letters: Counter[str] = Counter()
    for log in logs.values():
        seen: set[str] = set()
        for r in log.records:
            if r.topic != TOPIC_QDEAD or r.kind != PUBLISH or r.body is None:
                continue
            found = deadletter.decode(r.body)
            if found is not None and found[0].redriven is None:
                seen.add(found[0].bookmark)
        letters.update(seen)
    lost = [e for e in rejects if e.value["bm"] not in letters]
    if lost:
        first = lost[0]
        v.anomalies.append(
            Anomaly(
                "dead-letter-lost",
                f"{len(lost)} confirmed rejects without a dead letter in any log; first "
                f"n={first.value['n']} ({first.value['bm']}) rejected by {first.process} on "
                f"{first.node} at {first.mono:.2f} s",
                first.node,
                first.process,
                time=first.mono,
                count=len(lost),
                slice=_slice(lost[:_SLICE]),
            )
        )
    v.checked["dead letters of confirmed rejects"] = len(rejects) - len(lost)


def _check_sow(
    v: Verdict, events: Sequence[Event], logs: dict[str, InstanceLog], pubs: dict[str, _Pub]
) -> None:
    rewrites: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.process == "nemesis" and e.f == "start" and e.value["kind"] in _REWRITES:
            for t in e.value["targets"]:
                rewrites[t].append(e.mono)
    snapshots = 0
    for e in events:
        if e.f != "sow-snapshot" or e.type != "ok" or e.node not in logs:
            continue
        if any(t > e.mono for t in rewrites.get(e.node, [])):
            continue  # its records were damaged or replaced since: not comparable
        s1, s2 = e.value["s1"], e.value["s2"]
        recs = [r for r in logs[e.node].records if r.topic == TOPIC_SOW and r.seq <= s2]
        if any(r.seq > s1 for r in recs):
            continue  # the SOW moved while it was read: inconclusive
        state: dict[str, list[Any]] = {}
        for r in recs:
            if r.kind == PUBLISH and r.body is not None:
                body = orjson.loads(r.body)
                state[body["k"]] = [body["w"], body["n"]]
            elif r.kind == SOW_DELETE:
                state.clear()  # the workload never deletes: a delete is a finding below
        snapshots += 1
        rows = e.value["rows"]
        if rows != state:
            diff = sorted(k for k in set(rows) | set(state) if rows.get(k) != state.get(k))
            v.anomalies.append(
                Anomaly(
                    "sow-fold",
                    f"{e.node}'s SOW at snapshot #{e.value['index']} differs from the fold of "
                    f"its log up to seq {s2} on {len(diff)} keys; first "
                    + "; ".join(f"{k}: SOW {rows.get(k)} log {state.get(k)}" for k in diff[:3]),
                    e.node,
                    time=e.mono,
                    count=len(diff),
                    slice=_slice([e]),
                )
            )
    v.checked["SOW snapshots compared"] = snapshots
    writers = {p.name: p for p in pubs.values() if p.topic == TOPIC_SOW}
    reads = 0
    for e in events:
        if e.f != "sow-read" or e.type != "ok":
            continue
        reads += 1
        bad = {
            k: row
            for k, row in e.value["rows"].items()
            if row[0] not in writers or not 1 <= row[1] <= writers[row[0]].invoked
        }
        if bad:
            v.anomalies.append(
                Anomaly(
                    "sow-unexpected",
                    f"a SOW read on {e.node} returned values nobody wrote: {dict(list(bad.items())[:3])}",
                    e.node,
                    e.process,
                    time=e.mono,
                    count=len(bad),
                    slice=_slice([e]),
                )
            )
    v.checked["SOW reads"] = reads


def _check_liveness(v: Verdict, events: Sequence[Event]) -> None:
    for e in events:
        if e.process != "nemesis":
            continue
        if e.f == "liveness" and e.type == "fail":
            v.anomalies.append(Anomaly("liveness", e.value["what"], time=e.mono, slice=_slice([e])))
        elif e.f == "stalled":
            v.anomalies.append(
                Anomaly(
                    "stalled",
                    f"no publisher moved for {e.value['seconds']} s after fault "
                    f"#{e.value['index']} healed",
                    time=e.mono,
                    slice=_slice(
                        [
                            x
                            for x in events
                            if x.process == "nemesis"
                            and (x.value or {}).get("index") == e.value["index"]
                        ]
                    ),
                )
            )
