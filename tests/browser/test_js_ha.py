"""The browser HA client (static/spool-ha.js) in Chromium against a real broker that is
restarted on the same port and data directory: a bookmark subscriber with the IndexedDB
bookmark store survives a page reload and a server restart with no gap or duplicate, a
publisher with the IndexedDB publish store loses nothing across a server crash and a
reload, and a second tab cannot open a store the first one holds."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import BrowserContext, Page, Route

from spool.server.bookmarks import pub_hash
from tests.support.replication import free_ports, publish_resending, read_log
from tests.support.server import SpoolProcess, config_xml
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

T = TypeVar("T")


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to the end in a thread of its own (Playwright's sync API holds an
    event loop in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class Broker:
    """One `spool serve` on a fixed port, so that a restart keeps the pages' origin (their
    IndexedDB) and the HA clients' URI."""

    def __init__(self, workdir: Path) -> None:
        port = free_ports(1)[0]
        # the admin listener and the websocket transport share one address
        xml = config_xml(workdir / "data", name="spool-ha").replace(
            "<InetAddr>127.0.0.1:0</InetAddr>", f"<InetAddr>127.0.0.1:{port}</InetAddr>"
        )
        self.proc = SpoolProcess(workdir, xml)
        self.port = port

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/amps/json"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc.start()
        assert self.proc.port == self.port

    @property
    def running(self) -> bool:
        proc = self.proc.proc
        return proc is not None and proc.poll() is None

    def restart(self, *, crash: bool) -> None:
        if crash:
            self.proc.kill()
        else:
            self.proc.stop()
        self.start()


@pytest.fixture(scope="module")
def ha_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("ha"))
    b.start()
    yield b
    b.proc.stop()


@pytest.fixture
def broker(ha_broker: Broker) -> Broker:
    """The module's broker, running: a test that failed while it was down (killed, not
    restarted yet) must not fail every later test with a refused connection."""
    if not ha_broker.running:
        ha_broker.start()
    return ha_broker


def park_page(context: BrowserContext, broker: Broker) -> str:
    """A blank page of the broker's origin served by the browser itself (so that it loads
    while the broker is down); returns its URL. Chromium's local network access checks
    keep such a page from opening websockets: it only replaces a page that had a client."""

    def fulfill(route: Route) -> None:
        route.fulfill(
            status=200, body="<!doctype html><title>parked</title>", content_type="text/html"
        )

    context.route(f"{broker.http_url}/parked", fulfill)
    return f"{broker.http_url}/parked"


class Tab:
    """A page of the broker's origin (by default its own Query page); uncaught exceptions
    fail the test (the console's "WebSocket connection failed" lines during a restart are
    expected)."""

    def __init__(self, context: BrowserContext, broker: Broker, url: str | None = None) -> None:
        self.page: Page = context.new_page()
        self.uncaught: list[str] = []
        self.page.on("pageerror", lambda exc: self.uncaught.append(str(exc)))
        self.page.goto(url or f"{broker.http_url}/query")

    def value(self, expression: str) -> object:
        return self.page.evaluate(expression)


SUBSCRIBER = """
async ({ url, topic }) => {
  const H = await import('/static/spool-ha.js');
  const got = JSON.parse(localStorage.getItem('got') || '[]');
  window.got = got;
  window.states = [];
  window.errors = [];
  const ha = new H.HAClient('ha-reader', {
    chooser: new H.DefaultServerChooser([url]),
    delay: new H.ExponentialDelayStrategy({ initial: 100, maximum: 500 }),
    bookmarkStore: new H.IndexedDBBookmarkStore('reader'),
  });
  ha.addConnectionStateListener((s) => window.states.push(s));
  ha.setExceptionListener((e) => window.errors.push(String(e)));
  await ha.connectAndLogon();
  // `rate` paces the replay, so that the reload and the restart fall mid-stream
  await ha.subscribe(topic, { bookmark: H.MOST_RECENT, subId: 'feed', options: 'rate=300' }, (m) => {
    got.push(m.json().n);
    localStorage.setItem('got', JSON.stringify(got));
    m.discard();
  });
  window.ha = ha;
}
"""


def test_subscriber_survives_a_reload_and_a_server_restart(
    context: BrowserContext, broker: Broker
) -> None:
    total = 1200
    topic = "ha-feed"
    run_async(publish_resending([broker.ws_url], "ha-src", topic, range(1, total - 200 + 1)))
    tab = Tab(context, broker)
    args = {"url": broker.ws_url, "topic": topic}
    tab.page.evaluate(SUBSCRIBER, args)

    def received() -> int:
        return int(str(tab.value("JSON.parse(localStorage.getItem('got') || '[]').length")))

    wait_until(lambda: received() >= 200, 30, message="200 messages before the reload")
    tab.page.reload()
    at_reload = received()
    assert at_reload < total - 200, "the reload came after the replay ended"
    tab.page.evaluate(SUBSCRIBER, args)
    wait_until(lambda: received() >= at_reload + 200, 30, message="200 more after the reload")
    at_restart = received()  # the broker stops sending when it is told to stop
    broker.restart(crash=False)
    # live messages after the restart (the page reconnects on its own, nobody calls it)
    run_async(
        publish_resending([broker.ws_url], "ha-src", topic, range(total - 200 + 1, total + 1))
    )
    wait_until(lambda: received() >= total, 60, message=f"all {total} messages")
    got = json.loads(str(tab.value("JSON.stringify(window.got)")))
    states = tab.value("window.states")
    errors = tab.value("window.errors")
    assert at_restart < total - 200, "the restart came after the replay ended"
    assert got == list(range(1, total + 1))  # no gap, no duplicate, in order
    assert isinstance(states, list)
    # after the reload: the first logon; the restart: one more
    assert states.count("logged_on") == 2
    assert "reconnecting" in states
    assert errors == []
    assert tab.uncaught == []


PUBLISHER = """
async ({ url, topic, first, last, flush, hold = 0 }) => {
  const H = await import('/static/spool-ha.js');
  window.errors = [];
  const store = new H.IndexedDBPublishStore('ha-pub');
  const ha = new H.HAClient('ha-pub', {
    chooser: new H.DefaultServerChooser([url]),
    delay: new H.ExponentialDelayStrategy({ initial: 100, maximum: 400 }),
    publishStore: store,
  });
  ha.setExceptionListener((e) => window.errors.push(String(e)));
  window.ha = ha;
  await ha.connectAndLogon();
  const recovered = ha.unpersistedCount();
  for (let n = first; n <= last; n++) {
    await ha.publish(topic, { n });
    localStorage.setItem('sent', String(n));
    // `hold`: stop after that message until the test says go (it kills the broker first)
    while (n === hold && !window.go) await new Promise((r) => setTimeout(r, 10));
  }
  if (flush) await ha.publishFlush(30000);
  return { recovered, unpersisted: ha.unpersistedCount() };
}
"""


def test_publisher_loses_nothing_across_a_crash_and_a_reload(
    context: BrowserContext, broker: Broker
) -> None:
    total = 1000
    topic = "ha-pub-topic"
    tab = Tab(context, broker)
    parked = park_page(context, broker)

    def sent() -> int:
        return int(str(tab.value("Number(localStorage.getItem('sent') || 0)")))

    args = {
        "url": broker.ws_url, "topic": topic, "first": 1, "last": total // 2, "flush": False,
        "hold": 150,
    }  # fmt: skip
    # started, not awaited: the test crashes the broker under it
    tab.page.evaluate(
        f"(args) => {{ ({PUBLISHER})(args).catch((e) => {{ window.firstHalfError = String(e); }}); }}",
        args,
    )
    wait_until(
        lambda: sent() >= 150 or tab.value("window.firstHalfError"), 30, message="150 published"
    )
    assert tab.value("window.firstHalfError") is None
    # SIGKILL mid-stream: the page holds at message 150 until the broker is gone, then
    # publishes the other 350 into its store (before, it could finish - and have all 500
    # persisted - before the kill landed, under load)
    broker.proc.kill()
    tab.value("window.go = true")
    wait_until(lambda: sent() == total // 2, 30, message="the first half stored")
    unpersisted = tab.value("window.ha.unpersistedCount()")
    assert isinstance(unpersisted, int) and unpersisted > 0
    # the page (and its client, mid-reconnect) goes away: the unpersisted messages are only
    # in IndexedDB now; after the restart a new page of the origin takes the store over
    tab.page.goto(parked)
    broker.start()
    tab.page.goto(f"{broker.http_url}/query")
    args = {
        "url": broker.ws_url,
        "topic": topic,
        "first": total // 2 + 1,
        "last": total,
        "flush": True,
    }
    result = tab.page.evaluate(PUBLISHER, args)
    assert result == {"recovered": result["recovered"], "unpersisted": 0}
    assert result["recovered"] > 0
    assert tab.value("window.errors") == []
    broker.proc.stop()
    try:
        records = run_async(read_log(broker.proc))
    finally:
        broker.start()
    mine = [(seq, json.loads(body)["n"]) for h, seq, body, _ in records if h == pub_hash("ha-pub")]
    assert mine == [(n, n) for n in range(1, total + 1)]  # each once, in order
    assert tab.uncaught == []


SECOND_TAB = """
async ({ url }) => {
  const H = await import('/static/spool-ha.js');
  const make = () => new H.HAClient('ha-owner', { chooser: new H.DefaultServerChooser([url]),
    publishStore: new H.IndexedDBPublishStore('shared'), bookmarkStore: new H.IndexedDBBookmarkStore('shared') });
  try {
    await make().connectAndLogon();
    return { refused: null };
  } catch (e) {
    return { refused: { name: e.name, reason: e.reason, message: e.message } };
  }
}
"""


def test_a_second_tab_cannot_open_the_same_store(context: BrowserContext, broker: Broker) -> None:
    first = Tab(context, broker)
    second = Tab(context, broker)
    args = {"url": broker.ws_url}
    assert first.page.evaluate(SECOND_TAB, args) == {"refused": None}
    refused = second.page.evaluate(SECOND_TAB, args)["refused"]
    assert refused == {
        "name": "StoreLockedError",
        "reason": "store locked",
        "message": "store locked: the publish store 'shared' is in use by another tab or client "
        "of this origin",
    }
    # the owner's tab goes away: its locks go with it (the browser releases them shortly)
    first.page.close()
    held = "navigator.locks.query().then((q) => q.held.map((l) => l.name))"
    wait_until(lambda: not second.value(held), 10, message="the first tab's locks released")
    assert second.page.evaluate(SECOND_TAB, args) == {"refused": None}
    assert first.uncaught == [] and second.uncaught == []


STORE_RECOVERY = """
async () => {
  const H = await import('/static/spool-ha.js');
  const open = async () => { const s = new H.IndexedDBBookmarkStore('rec'); await s.open(); return s; };
  let s = await open();
  for (const b of ['1|1|', '2|1|', '1|2|', '2|2|']) s.log('sub', b);
  s.discard('sub', '1|1|'); s.discard('sub', '2|2|');
  await s.prune();
  s.log('sub', '1|3|');
  s.discard('sub', '2|1|');
  await s.close();
  // a tab that died before its last transaction committed: only its localStorage tail has
  // the entries (the owner's tail keys, as SyncTail writes them)
  s = await open();
  const before = s.getMostRecent('sub');
  const tail = 'spool-bookmark-store/rec/tail/';
  localStorage.setItem(tail + '7', JSON.stringify({ s: 'sub', k: 'd', b: '1|2|' }));
  localStorage.setItem(tail + '8', JSON.stringify({ s: 'sub', k: 'r', b: '1|4|' }));
  await s.close();
  for (const k of Object.keys(localStorage)) if (k.startsWith(tail) && !/\\/(7|8)$/.test(k)) localStorage.removeItem(k);
  s = await open();
  const after = s.getMostRecent('sub');
  const outstanding = s.outstanding('sub');
  // outstanding messages recovered from the journal are handed over once more, not twice
  const again = ['1|3|', '1|3|', '1|4|', '1|2|'].map((b) => s.log('sub', b));
  await s.flush();
  const leftKeys = Object.keys(localStorage).filter((k) => k.startsWith(tail)).length;
  await s.close();
  s = await open();
  const reopened = [s.getMostRecent('sub'), s.outstanding('sub')];
  await s.close();
  return { before, after, outstanding, again, leftKeys, reopened };
}
"""


def test_indexeddb_bookmark_store_recovers_its_journal_prune_and_tail(
    context: BrowserContext, broker: Broker
) -> None:
    tab = Tab(context, broker)
    result = tab.page.evaluate(STORE_RECOVERY)
    # 1|1| and 2|1| discarded, 1|2| outstanding (2|2|, discarded, waits behind it; it is
    # publisher 2's contiguous point)
    assert result["before"] == "2|1|,1|1|,2|2|"
    assert result["after"] == "2|2|,1|2|"  # the tail's discard of 1|2| was applied
    assert result["outstanding"] == ["1|3|", "1|4|"]
    assert result["again"] == [True, False, True, False]
    assert result["leftKeys"] == 0  # the tail went into the journal
    assert result["reopened"] == ["2|2|,1|2|", ["1|3|", "1|4|"]]
    assert tab.uncaught == []


HEARTBEAT = """
async ({ url }) => {
  const H = await import('/static/spool-ha.js');
  window.states = [];
  const ha = new H.HAClient('ha-beat', { chooser: new H.DefaultServerChooser([url]),
    delay: new H.FixedDelayStrategy({ delay: 200 }), heartbeat: 1, timeoutMs: 1000 });
  ha.addConnectionStateListener((s) => window.states.push([s, performance.now()]));
  await ha.connectAndLogon();
  window.ha = ha;
  return performance.now();
}
"""


def test_heartbeat_detects_a_frozen_broker_and_reconnects_after(
    context: BrowserContext, broker: Broker
) -> None:
    tab = Tab(context, broker)
    tab.page.evaluate(HEARTBEAT, {"url": broker.ws_url})

    def states() -> list[tuple[str, float]]:
        value = tab.value("window.states")
        assert isinstance(value, list)
        return [(str(s), float(t)) for s, t in value]

    # freeze the broker: the last traffic was the logon ack or a beat, at most an interval ago
    stopped_at = float(str(tab.value("performance.now()")))
    broker.proc.signal(signal.SIGSTOP)
    try:
        wait_until(
            lambda: any(s == "disconnected" for s, _ in states()),
            10,
            message="the heartbeat to declare the connection dead",
        )
    finally:
        broker.proc.signal(signal.SIGCONT)
    down = next(t for s, t in states() if s == "disconnected")
    # the last traffic was at most one interval before the freeze: dead within two intervals
    assert 1000 <= down - stopped_at <= 2000 + 500
    wait_until(
        lambda: [s for s, _ in states()].count("logged_on") == 2,
        20,
        message="the reconnect after the broker thawed",
    )
    tab.value("window.ha.close()")
    assert tab.uncaught == []
