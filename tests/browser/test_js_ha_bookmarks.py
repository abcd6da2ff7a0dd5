"""The browser HA client's bookmark store (static/spool-ha-stores.js) against the Python
client's ResumeState (server/client/ha/resume.py), in Chromium without a broker.

Both follow one subscription over a log in which a publisher's sequences need not grow (a
late message reached the instance after higher sequences of its publisher, e.g. after the
publisher failed over): the same events (receive, discard, reconnect from the resume
list, reload, prune) go through the IndexedDB store in the page and through ResumeState,
and they must agree on every verdict and every resume list; a plain-set oracle says what
each verdict must be. A store written before gaps were kept still loads."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.sync_api import Page

from spool.server.client.ha.resume import EPOCH, MAX_GAPS, ResumeState

pytestmark = pytest.mark.browser

Op = tuple[str, int]
_names = itertools.count()

# The events, run in the page through an IndexedDBBookmarkStore (a reload closes it and
# opens it again, replaying its journal; prune compacts the journal into checkpoints).
JS_DRIVER = """
async ({ log, ops, name, opts }) => {
  const H = await import('/static/spool-ha.js');
  const open = async () => { const s = new H.IndexedDBBookmarkStore(name, opts); await s.open(); return s; };
  let s = await open();
  const trace = [];
  let cursor = 0;
  const resume = (kind) => {
    const point = s.getMostRecent('sub');
    cursor = point === H.EPOCH ? 0 : Math.min(...point.split(',').map((b) => log.indexOf(b))) + 1;
    trace.push([kind, point]);
  };
  const arrive = (bms) => { for (const bm of bms) trace.push([bm, s.log('sub', bm)]); };
  for (const [op, n] of ops) {
    if (op === 'receive') { arrive(log.slice(cursor, cursor + n)); cursor = Math.min(log.length, cursor + n); }
    else if (op === 'discard') {
      const outstanding = s.outstanding('sub');
      if (outstanding.length) { const bm = outstanding[n % outstanding.length]; s.discard('sub', bm); trace.push(['d', bm]); }
    } else if (op === 'reconnect') resume('r');
    else if (op === 'reload') { await s.close(); s = await open(); resume('reload'); }
    else if (op === 'prune') await s.prune();
    else if (op === 'drain') { arrive(log.slice(cursor)); cursor = log.length; }
  }
  trace.push(['outstanding', s.outstanding('sub')]);
  const dbName = s.dbName;
  await s.close();
  await new Promise((done) => { const r = indexedDB.deleteDatabase(dbName); r.onsuccess = r.onerror = done; });
  return trace;
}
"""


def drive_python(
    log: list[str], ops: list[Op], *, set_oracle: bool = True, max_gaps: int = MAX_GAPS
) -> list[Any]:
    """The same events through ResumeState (a reload is a restart from its JSON snapshot).
    With ``set_oracle``, every verdict is also checked against plain sets: a message is
    handed over when it was never discarded and not handed over yet in this process life;
    and once the log was drained, every message was either discarded or handed over in
    the last life (a reload re-delivered exactly what was received and not discarded)."""
    state = ResumeState(max_gaps=max_gaps)
    trace: list[Any] = []
    cursor = 0
    discarded: set[str] = set()
    handed: set[str] = set()  # in this process life
    outstanding: list[str] = []  # received, not discarded, in arrival order

    def arrive(bms: list[str]) -> None:
        for bm in bms:
            got = state.receive(bm)
            if set_oracle:
                assert got == (bm not in discarded and bm not in handed), bm
            if got:
                handed.add(bm)
                if bm not in outstanding:
                    outstanding.append(bm)
            trace.append([bm, got])

    def resume(kind: str) -> int:
        point = state.resume_bookmark()
        trace.append([kind, point])
        return 0 if point == EPOCH else min(log.index(b) for b in point.split(",")) + 1

    for op, n in ops:
        if op == "receive":
            arrive(log[cursor : cursor + n])
            cursor = min(len(log), cursor + n)
        elif op == "discard" and outstanding:
            bm = outstanding.pop(n % len(outstanding))
            state.discard(bm)
            discarded.add(bm)
            trace.append(["d", bm])
        elif op == "reconnect":
            cursor = resume("r")
        elif op == "reload":
            snap = json.loads(json.dumps(state.snapshot()))
            state = ResumeState.from_snapshot(snap, max_gaps=max_gaps)
            state.reloaded()
            handed = set()
            cursor = resume("reload")
        elif op == "drain":
            arrive(log[cursor:])
            cursor = len(log)
    assert state.outstanding == len(outstanding)
    if set_oracle and ops and ops[-1][0] == "drain":
        assert [b for b in log if b not in discarded and b not in handed] == []
    trace.append(["outstanding", outstanding])
    return trace


def drive_js(page: Page, log: list[str], ops: list[Op], **opts: Any) -> list[Any]:
    """The events through an IndexedDBBookmarkStore with options ``opts``."""
    trace: list[Any] = page.evaluate(
        JS_DRIVER,
        {"log": log, "ops": [list(o) for o in ops], "name": f"diff-{next(_names)}", "opts": opts},
    )
    return trace


def late_log(pubs: list[int], rnd: random.Random) -> list[str]:
    """A log of ``pubs``' messages: each publisher's sequences grow by 1 or 2 (a skipped
    one is a gap never filled, as a subscription's filter makes), and for about half the
    publishers they come in any order (late messages below the publisher's highest)."""
    seqs: dict[int, list[int]] = {}
    for pub in pubs:
        mine = seqs.setdefault(pub, [])
        mine.append((mine[-1] if mine else 0) + (2 if rnd.random() < 0.2 else 1))
    for mine in seqs.values():
        if rnd.random() < 0.5:
            rnd.shuffle(mine)
    return [f"{pub}|{seqs[pub].pop(0)}|" for pub in pubs]


# receive n messages from the cursor, discard the n-th outstanding one, resubscribe from
# the resume list, reload the page (with or without compacting the journal first), compact
ops_strategy = st.lists(
    st.tuples(
        st.sampled_from(
            ["receive"] * 3 + ["discard"] * 3 + ["reconnect", "reload", "compact", "prune"]
        ),
        st.integers(1, 6),
    ).flatmap(lambda op: st.just([("prune", 0), ("reload", 0)] if op[0] == "compact" else [op])),
    max_size=40,
).map(lambda chunks: [op for chunk in chunks for op in chunk])


@settings(max_examples=100)
@given(
    pubs=st.lists(st.integers(1, 3), min_size=1, max_size=40),
    rnd=st.randoms(use_true_random=False),
    ops=ops_strategy,
)
def test_the_bookmark_store_agrees_with_resume_state(
    secure_static_origin: Page, pubs: list[int], rnd: random.Random, ops: list[Op]
) -> None:
    log = late_log(pubs, rnd)
    ops = [*ops, ("reconnect", 0), ("drain", 0)]
    expected = drive_python(log, ops)
    assert drive_js(secure_static_origin, log, ops) == expected


def test_a_late_message_below_a_publishers_highest_is_delivered_once(
    secure_static_origin: Page,
) -> None:
    """A publisher failed over: the instance holds its 21..30 before its 11..20, which came
    later by another route. The late ones are new to the subscription, once, also after a
    reload from a compacted journal (the gap travels in the checkpoint); the store of the
    version that decided "at or below the highest = duplicate" dropped all ten."""
    log = [f"1|{q}|" for q in [*range(1, 11), *range(21, 31), *range(11, 21)]]
    ops: list[Op] = [("receive", 20)]
    ops += [("discard", 0)] * 20
    ops += [("receive", 5)] + [("discard", 0)] * 5
    ops += [("prune", 0), ("reload", 0), ("drain", 0)]
    trace = drive_js(secure_static_origin, log, ops)
    assert trace == drive_python(log, ops)
    delivered = [bm for bm, got in trace if got is True]
    assert delivered == log  # each once: 16..20 after the reload
    assert ["reload", "1|15|,1|30|"] in trace


def test_a_reload_resumes_as_the_running_page_would(secure_static_origin: Page) -> None:
    """Publisher 1's 5 is discarded while publisher 2's 1, before it, is outstanding; the
    journal is compacted and the page reloaded. Later discards of publisher 1 still move its
    contiguous point: the resume list is the one the page would have without the reload."""
    log = ["2|1|", "1|5|", "1|6|"]
    ops: list[Op] = [("receive", 3), ("discard", 1), ("prune", 0), ("reload", 0), ("drain", 0)]
    ops += [("discard", 1), ("discard", 0), ("reconnect", 0)]
    trace = drive_js(secure_static_origin, log, ops)
    assert trace == drive_python(log, ops)
    assert trace[-2:] == [["r", "1|6|,2|1|"], ["outstanding", []]]


def test_past_the_gap_bound_the_oldest_gaps_are_forgotten_as_in_python(
    secure_static_origin: Page,
) -> None:
    """One publisher's even sequences first (a gap before each), then the odd ones late:
    of the 300 gaps a store with ``maxGaps: 256`` keeps the last 256, as ResumeState with
    ``max_gaps=256``; the late messages in forgotten gaps count as received. Across a
    reload whose journal is a checkpoint plus entries after it."""
    bound = 256
    evens = [f"1|{q}|" for q in range(2, 601, 2)]
    odds = [f"1|{q}|" for q in range(1, 600, 2)]
    log = evens + odds
    ops: list[Op] = [("receive", 150), ("prune", 0), ("receive", 150), ("reload", 0), ("drain", 0)]
    trace = drive_js(secure_static_origin, log, ops, maxGaps=bound)
    assert trace == drive_python(log, ops, set_oracle=False, max_gaps=bound)
    forgotten = len(evens) - bound
    after_reload = trace[trace.index(["reload", "0"]) + 1 :]
    assert [got for _, got in after_reload[: len(evens)]] == [True] * len(evens)  # outstanding
    late = after_reload[len(evens) : len(evens) + len(odds)]
    assert [bm for bm, got in late if got] == odds[forgotten:]


DEFAULT_BOUND = """
async ({ name, n }) => {
  const H = await import('/static/spool-ha.js');
  const refused = [];
  for (const make of [() => new H.MemoryBookmarkStore({ maxGaps: 0 }),
                      () => new H.MemoryBookmarkStore({ maxGaps: 1.5 }),
                      () => new H.MemoryBookmarkStore({ gaps: 2 }),
                      () => new H.IndexedDBBookmarkStore(name, { maxGaps: -1 })]) {
    try { make(); refused.push(null); } catch (e) { refused.push(e.message); }
  }
  // immediate (even) messages first, then the delayed (odd) ones as they fall due, in a
  // scrambled order; then everything once more
  const evens = [], odds = [];
  for (let q = 2; q <= n; q += 2) evens.push(`1|${q}|`);
  for (let q = 1; q < n; q += 2) odds.push(`1|${(q * 7919) % n | 1}|`);
  const memory = new H.MemoryBookmarkStore();
  const handed = [...evens, ...odds].filter((b) => memory.log('sub', b));
  const again = [...evens, ...odds].filter((b) => memory.log('sub', b));
  // a checkpoint written with the default bound, opened with maxGaps 2: the newest 2 gaps
  let s = new H.IndexedDBBookmarkStore(name);
  await s.open();
  for (const b of ['1|2|', '1|4|', '1|6|']) { s.log('sub', b); s.discard('sub', b); }
  await s.prune();
  await s.close();
  s = new H.IndexedDBBookmarkStore(name, { maxGaps: 2 });
  await s.open();
  const reopened = ['1|1|', '1|3|', '1|5|'].map((b) => s.log('sub', b));
  const dbName = s.dbName;
  await s.close();
  await new Promise((done) => { const r = indexedDB.deleteDatabase(dbName); r.onsuccess = r.onerror = done; });
  return { maxGaps: H.MAX_GAPS, refused, handed, again, odds, reopened };
}
"""


def test_thousands_of_delayed_messages_are_each_handed_over_once(
    secure_static_origin: Page,
) -> None:
    """With the default bound (MAX_GAPS, as Python's) a publisher's 10,000 messages, the
    odd ones delayed past the even ones, are each handed over once; ``maxGaps`` must be a
    positive integer; a checkpoint with more gaps than ``maxGaps`` keeps the newest, as
    ResumeState.from_snapshot."""
    n = 10_000
    result = secure_static_origin.evaluate(DEFAULT_BOUND, {"name": "default-bound", "n": n})
    assert result["maxGaps"] == MAX_GAPS == 65_536
    assert result["refused"] == [
        "MemoryBookmarkStore: maxGaps must be a positive integer, not 0",
        "MemoryBookmarkStore: maxGaps must be a positive integer, not 1.5",
        "MemoryBookmarkStore: unknown option 'gaps'",
        "IndexedDBBookmarkStore: maxGaps must be a positive integer, not -1",
    ]
    assert sorted(result["odds"]) == sorted(f"1|{q}|" for q in range(1, n, 2))
    assert len(result["handed"]) == n and result["again"] == []
    assert result["reopened"] == [False, True, True]


# A journal as the store wrote it before gaps were kept: a checkpoint `{prefix, pubSeqs}`
# (every sequence of a publisher up to pubSeqs counts as received), then its records as
# `r` / `d` entries.
OLD_JOURNAL = """
async ({ name, entries, arrivals }) => {
  const H = await import('/static/spool-ha.js');
  const db = await new Promise((resolve, reject) => {
    const req = indexedDB.open(`spool-bookmark-store/${name}`, 1);
    req.onupgradeneeded = () => req.result.createObjectStore('journal', { autoIncrement: true });
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
  await new Promise((resolve, reject) => {
    const tx = db.transaction('journal', 'readwrite');
    for (const e of entries) tx.objectStore('journal').add(e);
    tx.oncomplete = resolve;
    tx.onerror = () => reject(tx.error);
  });
  db.close();
  const s = new H.IndexedDBBookmarkStore(name);
  await s.open();
  const resume = s.getMostRecent('sub');
  const outstanding = s.outstanding('sub');
  const got = arrivals.map((b) => s.log('sub', b));
  await s.prune();
  await s.close();
  await s.open();
  const afterPrune = [s.getMostRecent('sub'), s.outstanding('sub'), arrivals.map((b) => s.log('sub', b))];
  await s.close();
  return { resume, outstanding, got, afterPrune };
}
"""


def test_a_store_written_before_gaps_loads_as_it_did(secure_static_origin: Page) -> None:
    """The journal of the Python test `test_a_snapshot_without_gaps_keeps_its_out_of_order_
    discards`, in the browser store's older format: 1..3 and the discarded 6 stay
    duplicates, the outstanding 5 comes again once, 4 and 7 are new, as the older store
    decided; compacted in the new format, the same holds after another reload."""
    entries = [
        {"s": "sub", "k": "c", "c": {"prefix": "1|3|", "pubSeqs": {"1": 3}}},
        {"s": "sub", "k": "r", "b": "1|5|"},
        {"s": "sub", "k": "r", "b": "1|6|"},
        {"s": "sub", "k": "d", "b": "1|6|"},
    ]
    arrivals = [f"1|{q}|" for q in range(1, 8)]
    result = secure_static_origin.evaluate(
        OLD_JOURNAL, {"name": "old-format", "entries": entries, "arrivals": arrivals}
    )
    assert result["resume"] == "1|3|"
    assert result["outstanding"] == ["1|5|"]
    assert result["got"] == [False, False, False, True, True, False, True]
    old_snapshot = {"start": EPOCH, "recovery": "1|3|", "contig": {"1": 3}, "above": {"1": [6]},
                    "order": [["1|5|", False], ["1|6|", True]]}  # fmt: skip
    python = ResumeState.from_snapshot(old_snapshot)
    python.reloaded()
    assert [python.receive(b) for b in arrivals] == result["got"]
    # after the reload the received 4, 5 and 7 come again (not discarded), the rest not
    assert result["afterPrune"] == [
        "1|3|",
        ["1|5|", "1|4|", "1|7|"],
        [False, False, False, True, True, False, True],
    ]


TAIL_REPEATS = """
async () => {
  const H = await import('/static/spool-ha.js');
  const open = async () => { const s = new H.IndexedDBBookmarkStore('tail-repeats'); await s.open(); return s; };
  let s = await open();
  const entries = [];
  for (const b of ['1|3|', '1|1|', '2|1|', '1|2|']) { s.log('sub', b); entries.push({ s: 'sub', k: 'r', b }); }
  for (const b of ['1|3|', '1|1|', '1|2|']) { s.discard('sub', b); entries.push({ s: 'sub', k: 'd', b }); }
  const state = () => [s.getMostRecent('sub'), s.outstanding('sub')];
  const before = state();
  await s.close();
  // the tab died after these entries committed and before its tail was cleaned up
  const tail = 'spool-bookmark-store/tail-repeats/tail/';
  entries.forEach((e, i) => localStorage.setItem(tail + i, JSON.stringify(e)));
  s = await open();
  const after = state();
  const again = ['1|1|', '1|2|', '1|3|', '2|1|'].map((b) => s.log('sub', b));
  await s.close();
  return { before, after, again };
}
"""


def test_a_tail_that_repeats_committed_entries_changes_nothing(
    secure_static_origin: Page,
) -> None:
    """Entries replayed twice (committed, and still in the localStorage tail of a tab that
    died before cleaning it): a message folded into the resume point is not brought back."""
    result = secure_static_origin.evaluate(TAIL_REPEATS)
    assert result["before"] == ["1|1|,1|3|", ["2|1|"]]
    assert result["after"] == result["before"]
    assert result["again"] == [False, False, False, True]  # 2|1| outstanding: once more


FULL_LOCAL_STORAGE = """
async () => {
  const H = await import('/static/spool-ha.js');
  const reported = [];
  const open = async () => {
    const s = new H.IndexedDBBookmarkStore('full-tail', { onError: (e) => reported.push(e.message) });
    await s.open();
    return s;
  };
  let s = await open();
  const keys = [];
  for (const size of [100000, 10000, 1000, 100, 10, 1]) {
    try { for (;;) { const k = `fill${keys.length}`; localStorage.setItem(k, 'x'.repeat(size)); keys.push(k); } }
    catch { /* full at this size: go on with smaller values */ }
  }
  const handed = [];
  let thrown = null;
  try {
    handed.push(s.log('sub', '1|1|'), s.log('sub', '1|2|'));
    s.discard('sub', '1|1|');
  } catch (e) { thrown = `${e.name}: ${e.message}`; }
  await s.flush();
  for (const k of keys) localStorage.removeItem(k);
  await s.close();
  s = await open();
  const reopened = [s.getMostRecent('sub'), s.outstanding('sub')];
  await s.close();
  return { handed, thrown, reported, reopened };
}
"""


def test_a_full_local_storage_leaves_the_bookmark_store_working(
    secure_static_origin: Page,
) -> None:
    """localStorage (the synchronous tail) refuses every entry: messages are still handed
    over and discarded, the entries reach IndexedDB (a reload finds them), and the store's
    onError hears it once."""
    result = secure_static_origin.evaluate(FULL_LOCAL_STORAGE)
    assert result["thrown"] is None
    assert result["handed"] == [True, True]
    assert result["reported"] == [
        "store write failed: the bookmark store's localStorage tail 'full-tail' could not "
        "write: QuotaExceededError (the origin's storage quota is used up)"
    ]
    assert result["reopened"] == ["1|1|", ["1|2|"]]


# One subscription's events around a failed IndexedDB write, localStorage full (no tail:
# the journal is all a reload has). The first transaction fails (the origin's quota is
# used up) with 1|1|'s arrival in it; then the quota is back, 1|2| arrives and is
# discarded, and the broker's persisted position passes both.
LOST_WRITE = {
    "open": """
async ({ name }) => {
  const H = await import('/static/spool-ha.js');
  window.reported = [];
  window.memory = new H.MemoryBookmarkStore();
  window.store = new H.IndexedDBBookmarkStore(name, {
    retryMs: 600000, onError: (e) => window.reported.push(`${e.name}: ${e.message}`) });
  await window.store.open();
  window.fill = [];
  for (const size of [100000, 10000, 1000, 100, 10, 1]) {
    try { for (;;) { const k = `fill${window.fill.length}`; localStorage.setItem(k, 'x'.repeat(size)); window.fill.push(k); } }
    catch { /* full at this size: go on with smaller values */ }
  }
  for (const s of [window.store, window.memory]) s.log('sub', '1|1|');
  try { await window.store.flush(); return null; } catch (e) { return e.name; }
}
""",
    "after": """
async ({ name, rewrite }) => {
  for (const s of [window.store, window.memory]) {
    s.log('sub', '1|2|');
    s.discard('sub', '1|2|');
    s.persisted('sub', '1|2|');
  }
  if (rewrite) {
    await window.store.flush();
    for (const s of [window.store, window.memory]) s.log('sub', '1|3|'); // journaled again
    await window.store.close();
  }
  // a read through a connection of its own waits for every transaction begun before it
  const journal = await new Promise((resolve, reject) => {
    const open = indexedDB.open(`spool-bookmark-store/${name}`);
    open.onerror = () => reject(open.error);
    open.onsuccess = () => {
      const read = open.result.transaction('journal', 'readonly').objectStore('journal').getAll();
      read.onsuccess = () => { open.result.close(); resolve(read.result.map((e) => e.k)); };
      read.onerror = () => reject(read.error);
    };
  });
  for (const k of window.fill) localStorage.removeItem(k);
  return { reported: window.reported, journal,
           memory: [window.memory.resumePoint('sub'), window.memory.outstanding('sub')] };
}
""",
    "reopen": """
async ({ name }) => {
  const H = await import('/static/spool-ha.js');
  const s = new H.IndexedDBBookmarkStore(name);
  await s.open();
  const state = [s.resumePoint('sub'), s.outstanding('sub')];
  const again = s.log('sub', '1|1|');
  await s.close();
  return { state, again };
}
""",
}


@pytest.mark.parametrize("rewrite", [True, False], ids=["rewritten", "killed-before-rewrite"])
def test_a_failed_write_never_lets_the_resume_point_pass_a_message(
    fresh_secure_origin: Page, rewrite: bool
) -> None:
    """A transaction of the store fails with a message's arrival in it; the next writes
    would succeed, and the broker's persisted position passes the message. Nothing goes
    into the journal after the failure but a rewrite of the whole state: rewritten, the
    store reopens as the memory store's state; killed before the rewrite, it reopens as it
    was before the failure. Either way the message is handed over again, never skipped."""
    name = f"lost-write-{next(_names)}"
    page = fresh_secure_origin.context.new_page()
    cdp = page.context.new_cdp_session(page)
    try:
        page.goto(fresh_secure_origin.url)
        origin = {"origin": page.evaluate("location.origin")}
        # the quota is taken when the database is first written to: used up then, the
        # first transaction fails; the later ones find it back
        cdp.send("Storage.overrideQuotaForOrigin", {**origin, "quotaSize": 1})
        try:
            failed = page.evaluate(LOST_WRITE["open"], {"name": name})
        finally:
            cdp.send("Storage.overrideQuotaForOrigin", origin)
        after = page.evaluate(LOST_WRITE["after"], {"name": name, "rewrite": rewrite})
    finally:
        page.close()  # the store left open when not rewritten: a killed tab
    reopened = fresh_secure_origin.evaluate(LOST_WRITE["reopen"], {"name": name})
    assert failed == "StoreWriteError"  # flush() could not rewrite it either
    lost = [r for r in after["reported"] if "localStorage" not in r]
    assert lost == [
        f"StoreWriteError: store write failed: the bookmark store '{name}' could not write: "
        "QuotaExceededError (the origin's storage quota is used up)"
    ]
    if rewrite:
        assert after["memory"][1] == ["1|1|", "1|3|"]
        assert after["journal"] == ["c", "r"]  # the whole state, then the journal goes on
        assert reopened["state"] == after["memory"]
    else:
        assert after["memory"][1] == ["1|1|"]
        assert after["journal"] == []  # nothing written after the failure
        assert reopened["state"] == [None, []]
    assert reopened["again"] is True  # 1|1| is handed over again
