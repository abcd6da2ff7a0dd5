"""The soak's oracle: the journals, read back without the broker, against what clients saw.

The log is read with the transaction log's read-only APIs (the ones ``spool journal
verify`` uses: :func:`spool.server.txlog.recovery.recover.recover` with ``apply=False`` and
:func:`spool.server.txlog.cli.iter_file_records`), after the broker stopped. Then:

- **publishers**: the records of each publisher are exactly its sequences ``1..top`` in
  that order (``top`` = the last one it sent; it stopped only once all were acknowledged
  as persisted): no acknowledged message lost, none stored twice, none out of order;
  and no logon ever reported less than had been acknowledged before.
- **bookmark subscribers**: each processed exactly the log's messages of its topics, in
  log order, across all its reconnections.
- **live subscribers** (the slow reader too): within one connection, no message twice,
  none that is not in the log, and in log order; and where the broker was not killed
  under the connection, no gap either (a live subscription sees every message from the
  moment it is placed: a spill to the log and the catch-up must be seamless). Under a
  SIGKILL a live subscriber may have been given records appended but never made durable,
  which the publisher later resends at a new place: only order and uniqueness hold there.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from spool.server.bookmarks import pub_hash
from spool.server.txlog.cli import iter_file_records
from spool.server.txlog.recovery.recover import recover
from tests.soak.actors import BookmarkSubscriber, LiveSubscriber, Publisher

__all__ = ["Check", "LogRecord", "Verdict", "judge", "read_log"]

_REGEX = re.compile(r"[\^$*+?()\[\]{}|\\]")


@dataclass(frozen=True)
class LogRecord:
    seq: int
    pub_hash: int
    pub_seq: int
    topic: str


@dataclass
class LogRead:
    records: list[LogRecord]
    clean: bool
    journals: int
    damage: list[str]


def read_log(journal_dir: Path, archive_dir: Path | None, instance: str) -> LogRead:
    """Every record of the instance's log, in log order (read-only; the broker is down)."""
    recovery = recover(journal_dir, archive_dir, instance, apply=False, trust_indexes=False)
    try:
        records: list[LogRecord] = []
        for journal in recovery.journals:
            # only what recovery keeps: what follows would be cut at the next open (and
            # is not read, so damage right after it is reported, not raised)
            kept = itertools.islice(iter_file_records(journal.path), journal.index.count)
            records.extend(LogRecord(r.seq, r.pub_hash, r.pub_seq, r.topic) for _, r in kept)
        report = recovery.report
        damage = [f"{t.path} at {t.offset}: {t.reason}" for t in report.truncations]
        return LogRead(records, report.clean, len(recovery.journals), damage)
    finally:
        recovery.close()


def matches(pattern: str, topic: str) -> bool:
    """Whether a subscription to ``pattern`` covers ``topic`` (the regex rule of
    docs/protocol.md "Subscribing")."""
    if _REGEX.search(pattern):
        return re.search(pattern, topic) is not None
    return pattern == topic


@dataclass
class Check:
    """One property of the oracle: whether it held, and what was counted."""

    name: str
    ok: bool
    detail: str
    duplicates: int = 0
    lost: int = 0


@dataclass
class Verdict:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def duplicates(self) -> int:
        return sum(c.duplicates for c in self.checks)

    @property
    def lost(self) -> int:
        return sum(c.lost for c in self.checks)

    def add(self, check: Check) -> None:
        self.checks.append(check)


def _publisher(log: list[LogRecord], pub: Publisher) -> Check:
    h = pub_hash(pub.name)
    seqs = [r.pub_seq for r in log if r.pub_hash == h]
    unique = set(seqs)
    duplicates = len(seqs) - len(unique)
    lost = sum(1 for s in range(1, pub.acked + 1) if s not in unique)
    in_order = all(a < b for a, b in itertools.pairwise(seqs))
    exact = seqs == list(range(1, pub.top + 1))
    ok = exact and pub.acked == pub.top and not pub.acks_lost
    detail = (
        f"{len(seqs)} stored, top {pub.top}, acked {pub.acked}, in order {in_order}, "
        f"logons below an ack {len(pub.acks_lost)}"
    )
    return Check(f"publisher {pub.name}", ok, detail, duplicates, lost)


def _bookmark_subscriber(log: list[LogRecord], sub: BookmarkSubscriber) -> Check:
    expected = [(r.pub_hash, r.pub_seq) for r in log if matches(sub.topic, r.topic)]
    got = sub.processed
    duplicates = len(got) - len(set(got))
    lost = len(set(expected) - set(got))
    ok = got == expected
    detail = f"{len(got)} processed of {len(expected)}, {sub.connections} connections"
    if not ok:
        first = next(
            (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None
        )
        detail += f"; first difference at {first}"
    return Check(f"bookmark subscriber {sub.name}", ok, detail, duplicates, lost)


def _live_subscriber(log: list[LogRecord], sub: LiveSubscriber, killed: Iterable[int]) -> Check:
    position = {(r.pub_hash, r.pub_seq): i for i, r in enumerate(
        r for r in log if matches(sub.topic, r.topic))}  # fmt: skip
    killed_epochs = set(killed)
    duplicates = phantoms = disorder = gaps = killed_gaps = 0
    for conn in sub.connections:
        duplicates += len(conn.received) - len(set(conn.received))
        places = []
        for key in conn.received:
            place = position.get(key)
            if place is None:
                phantoms += 1
            else:
                places.append(place)
        for a, b in itertools.pairwise(places):
            if b <= a:
                disorder += 1
            elif b != a + 1:
                if conn.epoch in killed_epochs:
                    killed_gaps += 1
                else:
                    gaps += 1
    ok = not (duplicates or phantoms or disorder or gaps)
    detail = (
        f"{sub.received} received over {len(sub.connections)} connections; not in the log "
        f"{phantoms}, out of order {disorder}, gaps {gaps} (under a kill, allowed: {killed_gaps})"
    )
    return Check(f"live subscriber {sub.name}", ok, detail, duplicates, gaps)


def judge(
    log: LogRead,
    publishers: list[Publisher],
    bookmark_subs: list[BookmarkSubscriber],
    live_subs: list[LiveSubscriber],
    killed_epochs: Iterable[int],
) -> Verdict:
    """Every property of the module docstring, one :class:`Check` each."""
    verdict = Verdict()
    verdict.add(
        Check(
            "journals verify clean",
            log.clean,
            f"{log.journals} journals, {len(log.records)} records"
            + (f"; damage: {'; '.join(log.damage)}" if log.damage else ""),
        )
    )
    ours = {pub_hash(p.name) for p in publishers}
    foreign = sum(1 for r in log.records if r.pub_hash not in ours)
    verdict.add(Check("no record of an unknown publisher", foreign == 0, f"{foreign} found"))
    for pub in publishers:
        verdict.add(_publisher(log.records, pub))
    for bsub in bookmark_subs:
        verdict.add(_bookmark_subscriber(log.records, bsub))
    killed = list(killed_epochs)
    for lsub in live_subs:
        verdict.add(_live_subscriber(log.records, lsub, killed))
    return verdict
