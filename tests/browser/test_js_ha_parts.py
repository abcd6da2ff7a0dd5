"""The pure parts of the browser HA client (static/spool-ha*.js) in Chromium, without a
broker: the delay schedules on an injected clock, the server chooser, the bookmark state
machine against a Python oracle (hypothesis), the publish ledger, and HAClient's reconnect
steps over a scripted transport on virtual timers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.sync_api import Page

pytestmark = pytest.mark.browser

PRELUDE = "const H = await import('/static/spool-ha.js');"


def run(page: Page, body: str, arg: Any = None) -> Any:
    return page.evaluate(f"async (arg) => {{ {PRELUDE}\n{body} }}", arg)


# -- delay strategies ------------------------------------------------------------------


def test_exponential_schedule_is_exact_on_an_injected_clock(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        let now = 1000;
        const randoms = [0.5, 0.25, 0, 0.75, 0, 0, 0, 0];
        const d = new H.ExponentialDelayStrategy({ initial: 100, maximum: 1000, backoff: 2,
          jitter: 0.5, maxTotal: 3000, clock: { now: () => now }, random: () => randoms.shift() });
        const waits = [];
        for (let i = 0; i < 6; i++) { const w = d.getConnectWaitDuration('ws://a'); waits.push(w); now += w; }
        const other = d.getConnectWaitDuration('ws://b');   // a fresh URI: at once
        let gaveUp = null;
        // now 3576: the next wait on a (1000) would start past the 3000 ms budget
        try { d.getConnectWaitDuration('ws://a'); } catch (e) {
          gaveUp = { name: e.name, reason: e.reason, elapsed: e.elapsedMs, max: e.maxTotalMs }; }
        d.reset();
        const afterReset = d.getConnectWaitDuration('ws://a');
        return { waits, other, gaveUp, afterReset };
        """,
    )
    # first attempt at once; then 100*2^(k-1) + 0.5*100*random, capped at 1000
    assert result["waits"] == [0, 125, 213, 400, 838, 1000]  # rounded to whole ms
    assert result["other"] == 0
    assert result["gaveUp"] == {
        "name": "RetryTimeExceededError",
        "reason": "retry time exceeded",
        "elapsed": 2576,
        "max": 3000,
    }
    assert result["afterReset"] == 0


def test_fixed_delay_and_bad_options(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        let now = 0;
        const d = new H.FixedDelayStrategy({ delay: 300, maxTotal: 1000, clock: { now: () => now } });
        const waits = [];
        let error = null;
        try { for (;;) { const w = d.getConnectWaitDuration('ws://a'); waits.push(w); now += w; } }
        catch (e) { error = e.name; }
        const refused = [];
        for (const make of [() => new H.ExponentialDelayStrategy({ initail: 5 }),
                            () => new H.ExponentialDelayStrategy({ initial: 10, maximum: 5 }),
                            () => new H.FixedDelayStrategy({ delay: -1 }),
                            () => new H.ExponentialDelayStrategy({ backoff: 0.5 })]) {
          try { make(); refused.push(null); } catch (e) { refused.push(e.message); }
        }
        return { waits, error, refused };
        """,
    )
    assert result["waits"] == [0, 300, 300, 300]  # a fifth would start at 1200 ms
    assert result["error"] == "RetryTimeExceededError"
    assert "unknown option 'initail'" in result["refused"][0]
    assert "maximum (5) is below initial (10)" in result["refused"][1]
    assert "delay must be a number >= 0" in result["refused"][2]
    assert "backoff must be a number >= 1" in result["refused"][3]


def test_default_chooser_rotates_with_per_uri_credentials(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        const c = new H.DefaultServerChooser(['ws://a/amps/json', 'ws://b/amps/json'], {
          authenticators: { 'ws://b/amps/json': { credentials: async (uri) => ({ userId: 'u', password: 'tok:' + uri }) } } });
        const seen = [];
        for (let i = 0; i < 3; i++) {
          seen.push([c.getCurrentURI(), await c.getCurrentAuthenticator()]);
          c.reportFailure(new Error('refused ' + i));
        }
        const error = c.getError();
        c.reportSuccess();
        let bad = null;
        try { c.add('http://x'); } catch (e) { bad = e.message; }
        return { seen, error, after: c.getError(), bad, empty: new H.DefaultServerChooser().getError() };
        """,
    )
    assert result["seen"] == [
        ["ws://a/amps/json", None],
        ["ws://b/amps/json", {"userId": "u", "password": "tok:ws://b/amps/json"}],
        ["ws://a/amps/json", None],
    ]
    assert result["error"] == (
        "last failures: ws://a/amps/json: refused 2; ws://b/amps/json: refused 1"
    )
    assert result["after"] == "last failures: ws://a/amps/json: refused 2"  # b succeeded
    assert "must start with ws:// or wss://" in result["bad"]
    assert result["empty"] == "the server chooser has no URI"


# -- stores ----------------------------------------------------------------------------


def test_publish_ledger_trims_and_keeps_order(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        const s = new H.MemoryPublishStore();
        for (let seq = 1; seq <= 5; seq++) await s.store({ seq, topic: 't', body: new Uint8Array([seq]) });
        const trimmed = s.discardUpTo(2);
        s.remove(4);
        let error = null;
        try { await s.store({ seq: 3, topic: 't', body: new Uint8Array() }); } catch (e) { error = e.message; }
        const afterServerAhead = (s.discardUpTo(9), [s.lastSeq, s.lastDiscarded, s.unpersistedCount()]);
        return { trimmed, left: [3, 5], error, afterServerAhead };
        """,
    )
    assert result["trimmed"] == 2
    assert "sequence 3 is not above the last one stored (5)" in result["error"]
    # a server that persisted more than the store knew: numbering continues after it
    assert result["afterServerAhead"] == [9, 9, 0]


def test_most_recent_across_publishers_and_dropped_duplicates(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        const s = new H.MemoryBookmarkStore();
        const empty = s.getMostRecent('sub');
        const arrived = ['1|1|', '2|1|', '1|2|', '2|2|', '1|3|'];
        const first = arrived.map((b) => s.log('sub', b));
        s.discard('sub', '1|1|'); s.discard('sub', '1|2|'); s.discard('sub', '2|2|');
        const mostRecent = s.getMostRecent('sub');       // 2|1| is outstanding
        // a resubscription replays after 1|1|: 1|2| and 2|2| were discarded (dropped); 2|1|
        // and 1|3| are outstanding but were handed over in this session (dropped too: the
        // application holds them; only a reload hands outstanding messages over again)
        const again = ['2|1|', '1|2|', '2|2|', '1|3|'].map((b) => s.log('sub', b));
        s.discard('sub', '2|1|');
        const afterAll = s.getMostRecent('sub');
        s.discard('sub', '1|3|');
        s.persisted('sub', '3|9|');                       // nothing outstanding: a durable position
        return { empty, first, mostRecent, again, afterAll, end: s.getMostRecent('sub'),
                 outstanding: s.outstanding('sub'), oldDup: s.log('sub', '1|2|') };
        """,
    )
    assert result["empty"] == "0"
    assert result["first"] == [True] * 5
    # the resume point and each publisher's contiguous point: 1|2| is discarded and every
    # message of publisher 1 before it too (2|1| being outstanding holds only the first)
    assert result["mostRecent"] == "1|1|,1|2|"
    assert result["again"] == [False, False, False, False]
    # (for a replica whose log interleaves the publishers differently)
    assert result["afterAll"] == "2|2|,1|2|"
    assert result["end"] == "3|9|,1|3|,2|2|"
    assert result["outstanding"] == []
    assert result["oldDup"] is False


# A log of messages from a few publishers (each publisher's sequence grows), and a
# subscriber session that receives some, discards some and resubscribes from the store's
# resume point. The oracle works on plain sets; the store on its compact prefix state.
Op = tuple[str, int]
ops_strategy = st.lists(
    st.tuples(st.sampled_from(["receive", "discard", "resubscribe"]), st.integers(0, 30)),
    max_size=60,
)
logs = st.lists(st.integers(1, 3), min_size=1, max_size=40)


def oracle(log_pubs: list[int], ops: list[Op]) -> dict[str, Any]:
    counts: dict[int, int] = {}
    log = []
    for pub in log_pubs:
        counts[pub] = counts.get(pub, 0) + 1
        log.append(f"{pub}|{counts[pub]}|")
    arrivals: list[str] = []
    handed: set[str] = set()
    discarded: set[str] = set()
    cursor = 0
    trace: list[Any] = []
    for op, n in ops:
        if op == "receive":
            for bm in log[cursor : cursor + n % 5 + 1]:
                if bm not in arrivals:
                    arrivals.append(bm)
                deliver = bm not in discarded and bm not in handed
                if deliver:
                    handed.add(bm)
                trace.append([bm, deliver])
            cursor = min(len(log), cursor + n % 5 + 1)
        elif op == "discard":
            outstanding = [b for b in arrivals if b not in discarded]
            if outstanding:
                bm = outstanding[n % len(outstanding)]
                discarded.add(bm)
                trace.append(["d", bm])
        else:
            folded: list[str] = []
            for bm in arrivals:
                if bm not in discarded:
                    break
                folded.append(bm)
            if not folded:
                cursor = 0
            else:
                # the resume list: the last folded message and each publisher's last message
                # such that it and all that publisher's before it are discarded; the broker
                # starts after the oldest of them in its log
                contig: dict[str, str] = {}
                held: set[str] = set()  # publishers with a message not discarded yet
                for bm in arrivals:
                    pub = bm.split("|")[0]
                    if bm not in discarded:
                        held.add(pub)
                    elif pub not in held:
                        contig[pub] = bm
                points = [folded[-1], *(b for b in contig.values() if b)]
                cursor = min(log.index(b) for b in points) + 1
            trace.append(["r", cursor])
    return {"log": log, "trace": trace}


@settings(max_examples=40)
@given(log_pubs=logs, ops=ops_strategy)
def test_bookmark_store_matches_the_oracle(
    static_origin: Page, log_pubs: list[int], ops: list[Op]
) -> None:
    expected = oracle(log_pubs, ops)
    got = run(
        static_origin,
        """
        const { log, ops } = arg;
        const s = new H.MemoryBookmarkStore();
        const trace = [];
        let cursor = 0;
        const arrivals = [];
        for (const [op, n] of ops) {
          if (op === 'receive') {
            for (const bm of log.slice(cursor, cursor + n % 5 + 1)) {
              if (!arrivals.includes(bm)) arrivals.push(bm);
              trace.push([bm, s.log('sub', bm)]);
            }
            cursor = Math.min(log.length, cursor + n % 5 + 1);
          } else if (op === 'discard') {
            const outstanding = s.outstanding('sub');
            if (outstanding.length) {
              const bm = outstanding[n % outstanding.length];
              s.discard('sub', bm);
              trace.push(['d', bm]);
            }
          } else {
            const point = s.getMostRecent('sub');
            cursor = point === '0' ? 0 : Math.min(...point.split(',').map((b) => log.indexOf(b))) + 1;
            trace.push(['r', cursor]);
          }
        }
        return { log, trace };
        """,
        {"log": expected["log"], "ops": [list(o) for o in ops]},
    )
    assert got == expected


# -- HAClient over a scripted broker on virtual timers ---------------------------------

# Brokers by URI (up or down; each keeps the sequences it persisted for the client name)
# and a transport that plays them; timers run only when the test advances the clock. A
# broker with `failover` says so at logon and takes the logon options it is asked for
# (its replicated acks and notices are the test's to push); one with `missing` refuses a
# subscribe whose bookmark is in it under bookmark_not_found=fail.
SCRIPTED = """
const { encodeMessage, parseFrame, SpoolError } = window.spool;
const events = [];
let now = 0;
const due = [];
const timers = {
  setTimeout: (f, ms) => { const t = { at: now + ms, f }; due.push(t); return t; },
  clearTimeout: (t) => { const i = due.indexOf(t); if (i >= 0) due.splice(i, 1); },
};
const settle = async () => { for (let i = 0; i < 5; i++) await new Promise((r) => setTimeout(r, 0)); };
const advance = async (ms) => {
  const end = now + ms;
  for (;;) {
    due.sort((a, b) => a.at - b.at);
    if (!due.length || due[0].at > end) break;
    const t = due.shift(); now = t.at; t.f(); await settle();
  }
  now = end; await settle();
};
const brokers = {};
const broker = (uri, persisted = 0) => (brokers[uri] = { uri, up: true, persisted, log: [], conn: null,
  ackPersisted: true, holdSubscribeAcks: false, held: [], failover: undefined, missing: new Set() });
class Scripted {
  constructor(url) { this.url = url; this.isOpen = false; this.bufferedAmount = 0;
    this.onFrame = () => {}; this.onClose = () => {}; }
  async open() {
    const b = brokers[this.url];
    events.push(['open', this.url]);
    if (!b || !b.up) throw new SpoolError('disconnected', `connection to ${this.url} failed`);
    this.isOpen = true; b.conn = this;
  }
  push(h, body) { if (this.isOpen) this.onFrame(encodeMessage(h, body)); }
  send(frame) {
    const b = brokers[this.url];
    for (const { header: h, body } of parseFrame(frame).messages) {
      if (h.c === 'logon') {
        events.push(['logon', this.url]);
        const ack = { c: 'ack', a: 'processed', cid: h.cid, status: 'success',
          client_name: h.client_name, s: b.persisted };
        if (b.failover !== undefined) { ack.failover = b.failover; ack.async_links = b.failover === 'safe' ? '' : 'x';
          if (h.o) ack.o = h.o; }
        queueMicrotask(() => this.push(ack));
      } else if (h.c === 'publish' && b.refuse?.(h)) {
        events.push(['refused', h.s]);
        queueMicrotask(() => this.push({ c: 'ack', a: 'processed', cid: h.cid, status: 'failure',
          reason: b.refuse(h) }));
      } else if (h.c === 'publish') {
        events.push(['publish', h.s]);
        b.log.push([h.s, new TextDecoder().decode(body)]);
        if (b.ackPersisted) { b.persisted = Math.max(b.persisted, h.s);
          queueMicrotask(() => this.push({ c: 'ack', a: 'persisted', status: 'success', s: b.persisted })); }
      } else if (h.c === 'subscribe' && b.missing.has(h.bm) && (h.o ?? '').includes('bookmark_not_found=fail')) {
        events.push(['not found', h.sub_id, h.bm]);
        queueMicrotask(() => this.push({ c: 'ack', a: 'processed', cid: h.cid, status: 'failure',
          reason: 'bookmark not found' }));
      } else if (h.c === 'subscribe') {
        events.push(h.o ? ['subscribe', h.sub_id, h.bm ?? null, h.o] : ['subscribe', h.sub_id, h.bm ?? null]);
        const ack = () => this.push({ c: 'ack', a: 'processed', cid: h.cid, status: 'success' });
        if (b.holdSubscribeAcks) b.held.push(ack); else queueMicrotask(ack);
      } else if (h.c === 'unsubscribe') {
        events.push(['unsubscribe', h.sub_id]);
        queueMicrotask(() => this.push({ c: 'ack', a: 'processed', cid: h.cid, status: 'success' }));
      } else if (h.c === 'heartbeat') {
        events.push(['heartbeat', h.o]);
      }
    }
  }
  close(code, reason) { if (!this.isOpen) return; this.isOpen = false;
    queueMicrotask(() => this.onClose({ code, reason, wasClean: true })); }
  drop() { this.isOpen = false; this.onClose({ code: 1006, reason: '', wasClean: false }); }
}
const states = [];
const errors = [];
const make = (name, opts) => {
  const ha = new H.HAClient(name, { transportFactory: (u) => new Scripted(u), timers, ...opts });
  ha.addConnectionStateListener((s, info) => states.push(info.uri ? `${s} ${info.uri}` : s));
  ha.setExceptionListener((e) => errors.push(`${e.name}: ${e.message}`));
  return ha;
};
"""


def scripted(page: Page, body: str) -> Any:
    return page.evaluate(f"async () => {{ {PRELUDE}\n{SCRIPTED}\n{body} }}")


def test_reconnect_steps_run_in_order_and_keep_the_sub_id(static_origin: Page) -> None:
    result = scripted(
        static_origin,
        """
        broker('ws://a'); broker('ws://b');
        const ha = make('pub', {
          chooser: new H.DefaultServerChooser(['ws://a', 'ws://b']),
          delay: new H.ExponentialDelayStrategy({ initial: 100, maximum: 400, jitter: 0, clock: { now: () => now } }),
          publishStore: new H.MemoryPublishStore(), bookmarkStore: new H.MemoryBookmarkStore() });
        await ha.connectAndLogon();
        const got = [];
        await ha.subscribe('feed', { bookmark: H.MOST_RECENT, subId: 'feed' }, (m) => { got.push(m.data); m.discard(); });
        brokers['ws://a'].conn.push({ c: 'publish', t: 'feed', sids: 'feed', bm: '9|1|' }, 'one');
        brokers['ws://a'].ackPersisted = false;       // a's acks stop: the store keeps 1 and 2
        await ha.publish('t', 'p1'); await ha.publish('t', 'p2');
        await settle();
        brokers['ws://a'].up = false;
        brokers['ws://b'].up = false;
        events.length = 0; states.length = 0;
        brokers['ws://a'].conn.drop();
        await ha.publish('t', 'p3');                   // while disconnected: stored
        await settle();
        const beforeB = events.slice();
        await advance(100);                            // a: first retry after 100 ms
        brokers['ws://b'].up = true;
        brokers['ws://b'].persisted = 1;               // b has 1 (replicated), not 2 or 3
        await advance(100);                            // b: its second attempt
        await settle();
        return { beforeB, events, states, count: ha.unpersistedCount(), blog: brokers['ws://b'].log,
                 got, errors, connected: ha.connected };
        """,
    )
    # a dropped connection is retried at once, then the chooser rotates to b (at once: a
    # fresh URI), then back to a after its backoff
    assert result["beforeB"] == [["open", "ws://a"], ["open", "ws://b"]]
    assert result["events"][2:] == [
        ["open", "ws://a"],
        ["open", "ws://b"],
        ["logon", "ws://b"],
        ["publish", 2],
        ["publish", 3],
        ["subscribe", "feed", "9|1|", "bookmark_not_found=fail"],
    ]
    assert result["states"] == [
        "disconnected",
        "reconnecting",
        "connected ws://b",
        "logged_on ws://b",
        "failed_over ws://b",
        "publish_replayed",
        "resubscribed",
    ]
    assert result["blog"] == [[2, "p2"], [3, "p3"]]
    assert result["count"] == 0
    assert result["got"] == ["one"]
    assert result["errors"] == []
    assert result["connected"] is True


def test_giving_up_reaches_the_exception_listener(static_origin: Page) -> None:
    result = scripted(
        static_origin,
        """
        const ha = make('x', { chooser: new H.DefaultServerChooser(['ws://down']),
          delay: new H.FixedDelayStrategy({ delay: 50, maxTotal: 120, clock: { now: () => now } }) });
        const outcome = ha.connectAndLogon().then(() => 'connected', (e) => `${e.name} ${e.reason}`);
        await settle();
        await advance(200);
        return { outcome: await outcome, errors, opens: events.length, states };
        """,
    )
    assert result["outcome"] == "ReconnectGaveUpError gave up"
    assert result["opens"] == 3  # at 0, 50, 100; one at 150 would be past the budget
    assert result["errors"] == [
        "ReconnectGaveUpError: gave up: retry time exceeded: no connection after 100 ms (maxTotal 120 ms); "
        "last failures: ws://down: disconnected: connection to ws://down failed"
    ]
    assert result["states"] == ["gave_up"]


def test_publish_gap_is_refused_with_both_numbers(static_origin: Page) -> None:
    result = scripted(
        static_origin,
        """
        broker('ws://a'); broker('ws://fresh');
        const store = new H.MemoryPublishStore();
        const ha = make('p', { chooser: new H.DefaultServerChooser(['ws://a', 'ws://fresh']),
          delay: new H.FixedDelayStrategy({ delay: 10, maxTotal: 25, clock: { now: () => now } }),
          publishStore: store, errorOnPublishGap: true });
        await ha.connectAndLogon();
        for (let i = 0; i < 3; i++) await ha.publish('t', 'x');
        await settle();
        brokers['ws://a'].up = false;
        brokers['ws://fresh'].persisted = 1;        // never saw 2 and 3
        brokers['ws://a'].conn.drop();
        await settle();
        await advance(100);
        return { errors, lastDiscarded: store.lastDiscarded };
        """,
    )
    assert result["lastDiscarded"] == 3
    gap = (
        "PublishGapError: publish gap: the server's last persisted sequence is 1, "
        "but the publish store already discarded up to 3 as persisted"
    )
    assert result["errors"][0] == gap
    assert result["errors"][-1].startswith("ReconnectGaveUpError: gave up")


def test_two_silent_intervals_mean_a_dead_connection(static_origin: Page) -> None:
    # real timers: a heartbeat of 0.1 s, the scripted broker never beats
    result = scripted(
        static_origin,
        """
        broker('ws://a');
        const ha = new H.HAClient('hb', { chooser: new H.DefaultServerChooser(['ws://a']),
          transportFactory: (u) => new Scripted(u), heartbeat: 0.1 });
        const at = [];
        ha.addConnectionStateListener((s) => at.push([s, performance.now()]));
        await ha.connectAndLogon();
        const t0 = performance.now();
        await new Promise((r) => { const off = ha.addConnectionStateListener((s) => { if (s === 'logged_on') { off(); r(); } }); });
        await ha.close();
        const down = at.find(([s]) => s === 'disconnected');
        return { after: down[1] - t0, states: at.map(([s]) => s) };
        """,
    )
    assert 190 <= result["after"] <= 600
    states = result["states"]
    assert states[:3] == ["connected", "logged_on", "resubscribed"]
    assert states[3:7] == ["disconnected", "reconnecting", "connected", "logged_on"]


def test_refusals_misuse_and_a_replaced_subscription_manager(static_origin: Page) -> None:
    result = scripted(
        static_origin,
        """
        broker('ws://a');
        brokers['ws://a'].refuse = (h) => (h.t === 'secret' ? 'not entitled' : null);
        const store = new H.MemoryPublishStore();
        const ha = make('m', { chooser: new H.DefaultServerChooser(['ws://a']),
          delay: new H.FixedDelayStrategy({ delay: 10 }), publishStore: store,
          bookmarkStore: new H.MemoryBookmarkStore() });
        const misuse = [];
        const attempt = async (f) => { try { await f(); misuse.push(null); } catch (e) { misuse.push(e.message); } };
        await attempt(() => ha.publish('t', 'early'));
        await ha.connectAndLogon();
        await attempt(() => ha.subscribe('t', { bookmark: H.MOST_RECENT }));
        await attempt(() => ha.subscribe('t', { bookmrak: '0' }));
        await attempt(() => ha.publish('t', 'x', { ackPersisted: true }));
        // a manager that places subscriptions in reverse order
        const manager = new H.DefaultSubscriptionManager();
        manager.resubscribe = async function (place) { for (const r of this.records().reverse()) await place(r); };
        ha.setSubscriptionManager(manager);
        await ha.subscribe('t', { subId: 'one' });
        await ha.subscribe('t', { subId: 'two', bookmark: '0' });
        await ha.subscribe('t', { subId: 'three' });
        await attempt(() => ha.subscribe('t', { subId: 'two' }));
        await ha.publish('secret', 'no');
        await ha.publish('t', 'yes');
        await settle();
        const afterRefusal = store.unpersistedCount();
        await ha.unsubscribe('three');
        events.length = 0;
        brokers['ws://a'].conn.drop();
        await settle();
        return { misuse, errors, afterRefusal, events, subs: ha.subscriptions };
        """,
    )
    assert result["misuse"] == [
        "invalid command: call connectAndLogon() first",
        "invalid bookmark: MOST_RECENT needs opts.subId: the sub id is the key of the resume "
        "point in the bookmark store",
        "HAClient.subscribe: unknown option 'bookmrak' (known: filter, bookmark, options, subId, "
        "onCompleted, onError, onPosition, onBatch, topN, orderby, batchSize, delta, onSnapshot)",
        "HAClient.publish: unknown option 'ackPersisted' (known: correlationId, expiration, sowKey)",
        "subid in use: sub_id two is already in use on this client",
    ]
    assert result["errors"] == ["PublishFailedError: not entitled: publish 1 to 'secret' refused"]
    assert result["afterRefusal"] == 0  # dropped from the store, not sent again
    assert result["events"] == [
        ["open", "ws://a"],
        ["logon", "ws://a"],
        ["subscribe", "two", "0"],  # nothing discarded yet: from where it started
        ["subscribe", "one", None],
    ]
    assert result["subs"] == ["one", "two"]


def test_batches_drop_what_was_discarded_or_handed_over(static_origin: Page) -> None:
    result = scripted(
        static_origin,
        """
        const { encodeFrame } = window.spool;
        broker('ws://a');
        const ha = make('b', { chooser: new H.DefaultServerChooser(['ws://a']),
          delay: new H.FixedDelayStrategy({ delay: 10 }), bookmarkStore: new H.MemoryBookmarkStore() });
        await ha.connectAndLogon();
        const batches = [];
        await ha.subscribe('t', { subId: 'q', bookmark: '0', onBatch: (batch) => {
          batches.push(batch.map((m) => m.bookmark));
          for (const m of batch) if (m.data !== 'keep') m.discard();
        } });
        const frame = (bms) => encodeFrame(bms.map((bm, i) => [{ c: 'publish', t: 't', sids: 'q', bm },
          i === 1 ? 'keep' : 'x']));
        brokers['ws://a'].conn.onFrame(frame(['5|1|', '5|2|', '5|3|']));
        events.length = 0;
        brokers['ws://a'].conn.drop();
        await settle();
        const resubscribed = events.filter((e) => e[0] === 'subscribe');
        // the replay after 5|1|: 5|2| (outstanding, handed over already), 5|3| (discarded)
        brokers['ws://a'].conn.onFrame(frame(['5|2|', '5|3|', '5|4|']));
        return { batches, resubscribed };
        """,
    )
    assert result["batches"] == [["5|1|", "5|2|", "5|3|"], ["5|4|"]]
    assert result["resubscribed"] == [["subscribe", "q", "5|1|", "bookmark_not_found=fail"]]


def test_what_is_made_during_the_resubscription_goes_out_after_it(static_origin: Page) -> None:
    # regression: such a publish (or subscription) waited for the next reconnect
    result = scripted(
        static_origin,
        """
        broker('ws://a');
        const ha = make('r', { chooser: new H.DefaultServerChooser(['ws://a']),
          delay: new H.FixedDelayStrategy({ delay: 10 }), publishStore: new H.MemoryPublishStore() });
        await ha.connectAndLogon();
        await ha.subscribe('t', { subId: 'one' });
        await ha.publish('t', 'before');
        await settle();
        brokers['ws://a'].holdSubscribeAcks = true;
        events.length = 0;
        brokers['ws://a'].conn.drop();
        await settle();                                 // logged on, waiting for the sub ack
        await ha.publish('t', 'during');
        const late = ha.subscribe('t', { subId: 'late' });
        await settle();
        const whileHeld = events.slice();
        brokers['ws://a'].held.forEach((ack) => ack());
        await settle();
        brokers['ws://a'].held[1]?.();                  // the late subscription's ack
        await settle();
        return { lateId: await late, whileHeld, events, log: brokers['ws://a'].log.map(([s, b]) => `${s}:${b}`),
                 unpersisted: ha.unpersistedCount() };
        """,
    )
    assert result["whileHeld"] == [
        ["open", "ws://a"],
        ["logon", "ws://a"],
        ["subscribe", "one", None],
    ]
    # the subscription made meanwhile is placed before the client is ready, then the publish
    assert result["events"][3:] == [["subscribe", "late", None], ["publish", 2]]
    assert result["lateId"] == "late"
    assert result["log"] == ["1:before", "2:during"]
    assert result["unpersisted"] == 0


# -- failover safety -------------------------------------------------------------------


def test_while_failover_is_unsafe_only_replicated_acks_empty_the_store(static_origin: Page) -> None:
    result = scripted(
        static_origin,
        """
        const b = broker('ws://a');
        b.failover = 'unsafe';
        const ha = make('pub', { chooser: new H.DefaultServerChooser(['ws://a']),
          delay: new H.FixedDelayStrategy({ delay: 10 }), publishStore: new H.MemoryPublishStore() });
        const told = [];
        ha.addFailoverListener((uri, s) => told.push([uri, s.failover, s.detail]));
        const ack = await ha.connectAndLogon();
        for (let n = 1; n <= 10; n++) await ha.publish('t', `m${n}`);
        await settle();
        const afterPersisted = [ha.unpersistedCount(), ha.unreplicatedCount()];
        b.conn.push({ c: 'ack', a: 'replicated', status: 'success', s: 6 });
        const afterReplicated = ha.unreplicatedCount();
        events.length = 0;
        b.conn.drop();
        await advance(10);
        const resent = events.filter((e) => e[0] === 'publish').map((e) => e[1]);
        b.conn.push({ c: 'ack', a: 'failover', status: 'success', failover: 'safe', async_links: '',
          detail: 'upgraded' });
        await ha.publish('t', 'm11');
        await settle();
        return { logonO: ack.o, afterPersisted, afterReplicated, resent, told,
                 left: ha.unreplicatedCount(), safe: ha.safety.safe };
        """,
    )
    assert result["logonO"] == "failover,replicated"
    assert result["afterPersisted"] == [0, 10]  # persisted by a, kept: not replicated
    assert result["afterReplicated"] == 4
    assert result["resent"] == [7, 8, 9, 10]  # everything held, not trimmed by the logon's s
    assert result["told"] == [["ws://a", "unsafe", "logon"], ["ws://a", "unsafe", "logon"],
                              ["ws://a", "safe", "upgraded"]]  # fmt: skip
    assert result["left"] == 0 and result["safe"] is True


def test_a_publish_refused_for_now_is_kept_and_sent_again_in_order(static_origin: Page) -> None:
    """``txlog full`` is transient: the refused message stays in the store, an ack past it
    (from a broker that wrote a later one anyway) does not discard it, and the store goes
    again from it, in order, on the same connection, after the delay strategy's wait."""
    result = scripted(
        static_origin,
        """
        const b = broker('ws://a');
        let full = false;
        b.refuse = (h) => (full ? 'txlog full' : null);
        const ha = make('pub', { chooser: new H.DefaultServerChooser(['ws://a']),
          delay: new H.FixedDelayStrategy({ delay: 10 }), publishStore: new H.MemoryPublishStore() });
        await ha.connectAndLogon();
        await ha.publish('t', 'm1'); await ha.publish('t', 'm2');
        await settle();
        full = true;
        await ha.publish('t', 'm3'); await ha.publish('t', 'm4');
        await settle();
        await advance(0);                        // the first resend goes at once: refused again
        const held = ha.unpersistedCount();
        full = false;
        await ha.publish('t', 'm5');            // taken, and acked persisted up to 5
        await settle();
        const afterAck = [ha.unpersistedCount(), ha.unreplicatedCount()];
        const before = events.filter((e) => e[0] === 'publish' || e[0] === 'refused');
        events.length = 0;
        await advance(10);                       // the strategy's wait: 3.. again, in order
        const resent = events.filter((e) => e[0] === 'publish').map((e) => e[1]);
        return { held, afterAck, before, resent, left: ha.unreplicatedCount(),
                 opens: events.filter((e) => e[0] === 'open').length,
                 errors: errors.map((e) => e.split(':')[0]) };
        """,
    )
    assert result["before"] == [
        ["publish", 1], ["publish", 2], ["refused", 3], ["refused", 4],
        ["refused", 3], ["refused", 4], ["publish", 5],
    ]  # fmt: skip
    assert result["held"] == 2
    assert result["afterAck"] == [3, 3]  # 3, 4 and 5 kept: the ack of 5 is past a refusal
    assert result["resent"] == [3, 4, 5]
    assert result["left"] == 0 and result["opens"] == 0  # on the same connection
    assert result["errors"] == ["PublishFailedError"] * 4


def test_the_chooser_tries_the_servers_last_known_safe_first(static_origin: Page) -> None:
    result = run(
        static_origin,
        """
        const c = new H.DefaultServerChooser(['ws://a', 'ws://b', 'ws://c', 'ws://d']);
        c.reportSafety('ws://b', false); c.reportSafety('ws://c', true); c.reportSafety('ws://a', false);
        const tried = [];
        for (let i = 0; i < 8; i++) { const u = c.getCurrentURI(); tried.push(u); c.reportFailure(new Error('down'), u); }
        c.reportSuccess('ws://b');
        return { tried, stays: c.getCurrentURI() };
        """,
    )
    assert result["tried"] == ["ws://a", "ws://c", "ws://d", "ws://b",
                               "ws://c", "ws://d", "ws://a", "ws://b"]  # fmt: skip
    assert result["stays"] == "ws://b"


def test_a_full_store_holds_publishes_back_until_the_broker_confirms(static_origin: Page) -> None:
    result = scripted(
        static_origin,
        """
        const b = broker('ws://a');
        b.failover = 'unsafe';
        const ha = make('pub', { chooser: new H.DefaultServerChooser(['ws://a']),
          delay: new H.FixedDelayStrategy({ delay: 10 }), publishStore: new H.MemoryPublishStore({ capacity: 3 }) });
        await ha.connectAndLogon();
        for (let n = 1; n <= 3; n++) await ha.publish('t', `m${n}`);
        let fourth = null;
        const pending = ha.publish('t', 'm4').then((seq) => { fourth = seq; });
        await settle();
        const waited = fourth;
        b.conn.push({ c: 'ack', a: 'replicated', status: 'success', s: 1 });
        await pending;
        let bad = null;
        try { new H.MemoryPublishStore({ capacity: 0 }); } catch (e) { bad = e.message; }
        return { waited, fourth, bad, defaultCapacity: new H.MemoryPublishStore().capacity };
        """,
    )
    assert result["waited"] is None  # persisted, not replicated: no room
    assert result["fourth"] == 4
    assert "capacity must be a whole number >= 1 or null" in result["bad"]
    assert result["defaultCapacity"] == 1_000_000


def test_a_resumed_subscription_catches_up_then_the_policy_applies(static_origin: Page) -> None:
    result = scripted(
        static_origin,
        """
        const b = broker('ws://a');
        const make2 = (policy) => make('sub', { chooser: new H.DefaultServerChooser(['ws://a']),
          delay: new H.FixedDelayStrategy({ delay: 10 }), bookmarkStore: new H.MemoryBookmarkStore(),
          catchUpTimeoutMs: 2000, catchUpRetryMs: 500, catchUpPolicy: policy });
        const ha = make2('epoch');
        await ha.connectAndLogon();
        const got = [];
        await ha.subscribe('t', { subId: 's', bookmark: '0' }, (m) => { got.push(m.bookmark); m.discard(); });
        b.conn.push({ c: 'publish', t: 't', sids: 's', bm: '9|1|' }, 'x');
        b.missing.add('9|1|');                 // the failover lands where 9|1| is not yet
        events.length = 0; states.length = 0;
        b.conn.drop();
        await advance(10);
        await advance(1000);
        const waiting = events.filter((e) => e[0] === 'not found').length;
        b.missing.clear();                     // it arrived (replicated, or republished)
        await advance(500);
        const afterCatchUp = states.slice();
        // again, and this time it never comes: the policy resumes from EPOCH after 2 s
        b.missing.add('9|1|');
        events.length = 0; states.length = 0; errors.length = 0;
        b.conn.drop();
        await advance(10);
        await advance(3000);
        const last = events.filter((e) => e[0] === 'subscribe').pop();
        return { waiting, afterCatchUp, errors: errors.slice(), last, states: states.slice() };
        """,
    )
    assert result["waiting"] >= 2
    assert "catching_up" in result["afterCatchUp"] and result["afterCatchUp"][-1] == "caught_up"
    assert result["last"] == ["subscribe", "s", "0"]  # EPOCH, no bookmark_not_found any more
    assert len(result["errors"]) == 1 and result["errors"][0].startswith("CatchUpTimeoutError")
    assert "still lacks the resume point 9|1|" in result["errors"][0]
    assert result["states"][-1] == "caught_up"


def test_a_reused_sequence_warns_or_is_refused(static_origin: Page) -> None:
    result = static_origin.evaluate(
        """async () => {
        const { SpoolClient } = window.spool;
        const make = (reusedSeq) => {
          const sent = [];
          const c = new SpoolClient('ws://x', { name: 'p', reusedSeq,
            transportFactory: () => ({ isOpen: true, bufferedAmount: 0, open: async () => {},
              send: (f) => sent.push(f), close: () => {} }) });
          c._transport = c._transportFactory('ws://x');
          c.lastSeq = 5;
          return { c, sent };
        };
        const warnings = [];
        const warn = console.warn;
        console.warn = (m) => warnings.push(m);
        try {
          const w = make('warn');
          await w.c.publish('t', 'x', { seq: 5 });
          const r = make('refuse');
          let refused = null;
          try { await r.c.publish('t', 'x', { seq: 3 }); } catch (e) { refused = [e.reason, e.message]; }
          const a = make('allow');
          await a.c.publish('t', 'x', { seq: 2 });
          let bad = null;
          try { new SpoolClient('ws://x', { reusedSeq: 'maybe' }); } catch (e) { bad = e.message; }
          return { warnings, refused, bad };
        } finally { console.warn = warn; }
        }"""
    )
    assert len(result["warnings"]) == 1 and "sequence 5 is not above 5" in result["warnings"][0]
    assert result["refused"][0] == "reused sequence"
    assert "acks it as a duplicate and drops it" in result["refused"][1]
    assert 'reusedSeq must be "warn", "refuse" or "allow"' in result["bad"]


def test_a_publish_the_store_cannot_write_is_refused_and_never_sent(
    secure_static_origin: Page,
) -> None:
    """The origin's storage quota (1 MB here) cannot hold a 2 MB message: its publish
    rejects with StoreWriteError, it leaves the store, and neither the connection nor the
    replay after a reconnect nor a reload of the store ever sends it; the publishes around
    it go out in order."""
    page = secure_static_origin
    cdp = page.context.new_cdp_session(page)
    origin = {"origin": page.evaluate("location.origin")}
    cdp.send("Storage.overrideQuotaForOrigin", {**origin, "quotaSize": 1024 * 1024})
    try:
        result = scripted(
            page,
            """
            broker('ws://a');
            const storeErrors = [];
            const store = new H.IndexedDBPublishStore('quota-pub', { onError: (e) => storeErrors.push(e.name) });
            const ha = make('pub', { chooser: new H.DefaultServerChooser(['ws://a']),
              delay: new H.FixedDelayStrategy({ delay: 10 }), publishStore: store });
            await ha.connectAndLogon();
            brokers['ws://a'].ackPersisted = false;        // the store keeps what it holds
            const seqs = [await ha.publish('t', 'p1')];
            let refused = null;
            try { await ha.publish('t', new Uint8Array(2 * 1024 * 1024)); }
            catch (e) { refused = { name: e.name, reason: e.reason, message: e.message, cause: e.cause?.name }; }
            seqs.push(await ha.publish('t', 'p3'));
            await settle();
            const held = [ha.unpersistedCount(), store.entriesAfter(0).map((e) => e.seq)];
            events.length = 0;
            brokers['ws://a'].conn.drop();                 // the reconnect publishes the store again
            await advance(10);
            const replayed = events.filter((e) => e[0] === 'publish').map((e) => e[1]);
            await ha.close();
            await store.open();
            const reopened = store.entriesAfter(0).map((e) => e.seq);
            await store.close();
            return { seqs, refused, held, replayed, reopened, storeErrors,
                     log: brokers['ws://a'].log.map(([s, body]) => [s, body.length]), errors };
            """,
        )
    finally:
        cdp.send("Storage.overrideQuotaForOrigin", origin)
    assert result["refused"] == {
        "name": "StoreWriteError",
        "reason": "store write failed",
        "message": "store write failed: the publish store 'quota-pub' could not write: "
        "QuotaExceededError (the origin's storage quota is used up)",
        "cause": "QuotaExceededError",
    }
    assert result["seqs"] == [1, 3]  # 2 was numbered, then refused
    assert result["held"] == [2, [1, 3]]
    assert result["replayed"] == [1, 3]
    assert result["reopened"] == [1, 3]
    assert result["log"] == [[1, 2], [3, 2], [1, 2], [3, 2]]  # sent, then sent again
    assert result["storeErrors"] == ["QuotaExceededError"]
    assert result["errors"] == []


def test_a_publish_goes_on_the_wire_only_once_its_write_committed(
    secure_static_origin: Page,
) -> None:
    """Another connection to the store's database holds a write transaction, so the store's
    write of p2 waits: the reconnect's replay meanwhile sends p1 only (a message is in
    IndexedDB before it is on the wire, so a refused write can never have been sent); p2
    goes out once its write committed, once."""
    result = scripted(
        secure_static_origin,
        """
        broker('ws://a');
        const store = new H.IndexedDBPublishStore('gate-pub');
        const ha = make('pub', { chooser: new H.DefaultServerChooser(['ws://a']),
          delay: new H.FixedDelayStrategy({ delay: 10 }), publishStore: store });
        await ha.connectAndLogon();
        brokers['ws://a'].ackPersisted = false;
        await ha.publish('t', 'p1');
        const other = await new Promise((resolve) => {
          const req = indexedDB.open(store.dbName, 1); req.onsuccess = () => resolve(req.result); });
        let hold = true;
        const gate = other.transaction(['messages', 'meta'], 'readwrite');
        const spin = () => { if (hold) gate.objectStore('meta').get('none').onsuccess = spin; };
        spin();
        const gateDone = new Promise((resolve) => { gate.oncomplete = resolve; });
        const p2 = ha.publish('t', 'p2');
        await settle();
        events.length = 0;
        brokers['ws://a'].conn.drop();
        await advance(10);
        const whileWaiting = events.filter((e) => e[0] === 'publish').map((e) => e[1]);
        hold = false;
        await gateDone;
        other.close();
        const seq = await p2;
        await settle();
        const after = events.filter((e) => e[0] === 'publish').map((e) => e[1]);
        await ha.close();
        return { whileWaiting, seq, after, errors };
        """,
    )
    assert result["whileWaiting"] == [1]
    assert result["seq"] == 2
    assert result["after"] == [1, 2]
    assert result["errors"] == []
