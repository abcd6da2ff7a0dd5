"""The browser HA client (static/spool-ha.js) never trades an acked message for
availability: Chromium against real processes.

Instance ``a`` replicates to ``b`` over an async link; ``b`` is stopped. A page served by
an application's own web server (both brokers allow its origin: ``Admin/AllowedOrigins``;
a broker's own pages may talk to that broker only) runs an HA publisher (server list a,
b) that publishes 10,000 messages, all acked persisted by ``a``. ``a`` is SIGKILLed and
its data directory deleted; ``b`` starts. The page's client fails over and republishes
what ``a`` never confirmed as replicated: ``b`` ends with every message, once, in order.
"""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import BrowserContext

from spool.server.bookmarks import pub_hash
from spool.server.client import Client, DefaultServerChooser, FixedDelayStrategy, HAClient
from tests.support.haclient import fixed_port_server
from tests.support.replication import Cluster, destination, publish_numbered, read_log
from tests.support.server import SpoolProcess, sow_topic
from tests.support.wait import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.faults]

TOTAL = 10_000
STATIC = Path(__file__).resolve().parents[2] / "static"


class _AppPages(SimpleHTTPRequestHandler):
    """The application's web server: a blank page at / and the client modules at
    /static/."""

    def do_GET(self) -> None:
        if self.path.startswith("/static/"):
            self.path = self.path[len("/static") :]
            super().do_GET()
            return
        body = b"<!doctype html><title>app</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def app_origin() -> Iterator[str]:
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_AppPages, directory=str(STATIC))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


PUBLISHER = """
async ({ a, b, total }) => {
  const H = await import('/static/spool-ha.js');
  const ha = new H.HAClient('browser-feed', {
    chooser: new H.DefaultServerChooser([a, b]),
    delay: new H.FixedDelayStrategy({ delay: 100 }),
    publishStore: new H.MemoryPublishStore(),
  });
  window.ha = ha;
  window.told = [];
  window.errors = [];
  ha.setExceptionListener((e) => window.errors.push(String(e)));
  ha.addFailoverListener((uri, safety) => window.told.push({ uri, failover: safety.failover,
    asyncLinks: safety.asyncLinks }));
  await ha.connectAndLogon();
  for (let n = 1; n <= total; n++) {
    await ha.publish('orders', { n });
  }
  await ha.publishFlush(60000);
  return { unpersisted: ha.unpersistedCount(), unreplicated: ha.unreplicatedCount() };
}
"""


def test_the_browser_client_loses_nothing_when_the_source_and_its_disk_are_lost(
    context: BrowserContext, app_origin: str, tmp_path: Path
) -> None:
    cluster = Cluster(tmp_path, ["a", "b"])
    allowed = f"<AllowedOrigins>{app_origin}</AllowedOrigins>"
    cluster.add("a", destinations=[destination("b", [cluster.address("b")], sync=False,
                                               exclude="replicate")], admin_extra=allowed)  # fmt: skip
    cluster.add("b", admin_extra=allowed)
    a_url = f"ws://127.0.0.1:{cluster.port['a']}/amps/json"
    b_url = f"ws://127.0.0.1:{cluster.port['b']}/amps/json"
    cluster.start("a")
    page = context.new_page()
    uncaught: list[str] = []  # (the console's failed connections to a are expected)
    page.on("pageerror", lambda exc: uncaught.append(str(exc)))
    try:
        page.goto(app_origin)
        first = page.evaluate(PUBLISHER, {"a": a_url, "b": b_url, "total": TOTAL})
        # every one acked persisted by a, none confirmed replicated: b is down
        assert first == {"unpersisted": 0, "unreplicated": TOTAL}
        told = page.evaluate("window.told")
        assert told[0] == {"uri": a_url, "failover": "unsafe", "asyncLinks": ["b"]}
        cluster.procs["a"].kill()
        shutil.rmtree(cluster.data_dir("a"))  # a's disk is lost
        cluster.procs["b"].start()
        page.evaluate("window.done = window.ha.publishFlush(120000, { replicated: true })"
                      ".then(() => 'ok', (e) => String(e))")  # fmt: skip
        wait_until(lambda: page.evaluate("window.ha.unreplicatedCount()") == 0, 120,
                   message="b confirmed every message")  # fmt: skip
        assert page.evaluate("window.done") == "ok"
        assert page.evaluate("window.ha.uri") == b_url
        assert page.evaluate("window.errors") == []
        page.evaluate("window.ha.close()")
        cluster.procs["b"].stop()
        with ThreadPoolExecutor(1) as pool:
            records = pool.submit(asyncio.run, read_log(cluster.procs["b"])).result()
    finally:
        cluster.stop()
    mine = [(s, json.loads(body)["n"]) for h, s, body, _ in records
            if h == pub_hash("browser-feed")]  # fmt: skip
    assert mine == [(n, n) for n in range(1, TOTAL + 1)], "b has each once, in order"
    assert uncaught == []


QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod>"
    "<MaxPerSubscriptionBacklog>8</MaxPerSubscriptionBacklog>"
    "<DeadLetter><Topic>work-dead</Topic></DeadLetter></Queue>"
    + sow_topic("work-dead", "/dead_letter/bookmark")
)

CONSUMER = """
async ({ url, holdFrom }) => {
  const H = await import('/static/spool-ha.js');
  const ha = new H.HAClient('browser-worker', {
    chooser: new H.DefaultServerChooser([url]),
    delay: new H.FixedDelayStrategy({ delay: 100 }),
  });
  window.worker = ha;
  window.processed = [];
  window.errors = [];
  window.states = [];
  // the page rejects every third message; at each count of holdFrom it keeps the next
  // one to reject until the test calls settleHeld(), once the broker is gone. While one
  // is held the page settles nothing else, so at most maxBacklog messages are out and
  // the next count is reached only after the broker came back, however fast the page
  // runs; settleHeld() then settles the held message and those that came after it.
  window.holdFrom = holdFrom;
  window.held = null;
  window.deferred = [];
  const settle = (m, n) => { if (n % 3 === 2) m.reject(`bad ${n}`); else m.ack(); };
  window.settleHeld = () => {
    const { m, n } = window.held;
    window.held = null;
    settle(m, n);
    for (const d of window.deferred.splice(0)) settle(d.m, d.n);
  };
  ha.setExceptionListener((e) => window.errors.push(String(e)));
  ha.addConnectionStateListener((s) => window.states.push(s));
  await ha.connectAndLogon();
  await ha.queueSubscribe('work', { subId: 'w', maxBacklog: 8 }, (m) => {
    const n = m.json().n;
    window.processed.push(n);
    if (window.held !== null) { window.deferred.push({ m, n }); return; }
    if (window.holdFrom.length && window.processed.length >= window.holdFrom[0] && n % 3 === 2) {
      window.holdFrom.shift();
      window.held = { m, n };
      return;
    }
    settle(m, n);
  });
}
"""


def test_the_browser_client_consumes_a_queue_once_across_broker_kills(
    context: BrowserContext, app_origin: str, tmp_path: Path
) -> None:
    total, kills = 300, (100, 200)
    proc = fixed_port_server(
        tmp_path / "srv", sow=QUEUE, admin_extra=f"<AllowedOrigins>{app_origin}</AllowedOrigins>"
    ).start()
    page = context.new_page()
    uncaught: list[str] = []
    page.on("pageerror", lambda exc: uncaught.append(str(exc)))

    async def feed() -> None:
        async with HAClient("browser-feed-q", chooser=DefaultServerChooser([proc.ws_url]),
                            delay=FixedDelayStrategy(0.05)) as feeder:  # fmt: skip
            for n in range(total):
                feeder.publish("work-in", {"n": n})
            await feeder.publish_flush(60)

    def processed() -> list[int]:
        got = page.evaluate("window.processed")
        assert isinstance(got, list)
        return got

    def went_since(count: int) -> bool:
        """The page's client reported a disconnect after its first ``count`` states."""
        states = page.evaluate("window.states")
        assert isinstance(states, list)
        return "disconnected" in states[count:]

    try:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, feed()).result()
        page.goto(app_origin)
        page.evaluate(CONSUMER, {"url": proc.ws_url, "holdFrom": list(kills)})
        for point in kills:
            # a reject given while the broker is down never reaches it: the redelivery
            # must be rejected again by the client, not handed to the page a second time
            wait_until(lambda: page.evaluate("window.held !== null"), 60,
                       message=f"a reject held after {point} processed")  # fmt: skip
            gone = page.evaluate("window.states.length")
            proc.kill()
            wait_until(lambda g=gone: went_since(g), 30, message="the page saw the broker go")
            page.evaluate("window.settleHeld()")
            proc.start()
        wait_until(lambda: len(set(processed())) == total, 120, message="every message")
        got = processed()
        wait_until(lambda: depth(proc) == 0, 60, message="the queue emptied")
        r = httpx.get(f"{proc.http_url}/api/queues/work/dead_letters?limit=1000", timeout=10)
        letters = r.json()["letters"]
    finally:
        proc.stop()
    assert sorted(got) == list(range(total)), "each message handed to the page once"
    # a reject lost with its connection was sent again, with the page's reason
    rejected = sorted(json.loads(x["data"])["n"] for x in letters)
    assert rejected == list(range(2, total, 3))
    assert all(x["detail"] == f"bad {json.loads(x['data'])['n']}" for x in letters)
    assert page.evaluate("window.errors") == [] and uncaught == []


def depth(proc: SpoolProcess) -> int:
    r = httpx.get(f"{proc.http_url}/api/queues/work", timeout=10)
    return int(r.json()["depth"])


LATE_SUBSCRIBER = """
async ({ url }) => {
  const H = await import('/static/spool-ha.js');
  const ha = new H.HAClient('browser-late-reader', {
    chooser: new H.DefaultServerChooser([url]),
    delay: new H.FixedDelayStrategy({ delay: 100 }),
    bookmarkStore: new H.MemoryBookmarkStore(),
  });
  window.reader = ha;
  window.got = [];
  window.errors = [];
  window.resubscribed = 0;
  ha.setExceptionListener((e) => window.errors.push(String(e)));
  ha.addConnectionStateListener((state) => { if (state === 'resubscribed') window.resubscribed++; });
  await ha.connectAndLogon();
  await ha.subscribe('orders', { bookmark: H.EPOCH, subId: 'orders-view' }, (m) => {
    window.got.push(m.json().n);
    m.discard();
  });
}
"""


def test_the_browser_subscriber_gets_a_late_message_once(
    context: BrowserContext, app_origin: str, tmp_path: Path
) -> None:
    """A publisher failed over from ``a`` to ``b``: ``a`` acknowledged its 1..10 and went
    down before replicating them, the publisher went on at ``b`` with 11..20. A page
    subscribed at ``b`` handles 11..20; ``a`` comes back and its 1..10 reach ``b`` late
    (below the publisher's highest there): the page gets each once, and the resubscription
    after ``b`` drops its connection brings none of the twenty again."""
    cluster = Cluster(tmp_path, ["a", "b"])
    allowed = f"<AllowedOrigins>{app_origin}</AllowedOrigins>"
    for name, other in (("a", "b"), ("b", "a")):  # replicating both ways: the gap tables
        cluster.add(name, destinations=[destination(other, [cluster.address(other)], sync=False)],
                    admin_extra=allowed)  # fmt: skip

    async def publish(name: str, first: int, count: int) -> None:
        client = Client(cluster.procs[name].ws_url, "late-publisher")
        await client.connect(timeout=10)
        try:
            await client.wait_persisted(publish_numbered(client, first, count), timeout=30)
        finally:
            await client.close()

    def got() -> list[int]:
        value = page.evaluate("window.got")
        assert isinstance(value, list)
        return value

    page = context.new_page()
    uncaught: list[str] = []  # (the console's failed connections are expected)
    page.on("pageerror", lambda exc: uncaught.append(str(exc)))
    try:
        with ThreadPoolExecutor(1) as pool:
            cluster.start("a")
            pool.submit(asyncio.run, publish("a", 1, 10)).result()
            cluster.procs["a"].stop()  # 1..10 only in a's log
            cluster.start("b")
            page.goto(app_origin)
            page.evaluate(LATE_SUBSCRIBER, {"url": f"ws://127.0.0.1:{cluster.port['b']}/amps/json"})
            pool.submit(asyncio.run, publish("b", 11, 10)).result()
            wait_until(lambda: len(got()) >= 10, 30, message="11..20 handled")
            cluster.start("a")
            wait_until(lambda: len(got()) >= 20, 60, message="the late 1..10 handed over")
            placed = page.evaluate("window.resubscribed")
            cluster.api("b", "/api/clients/browser-late-reader/disconnect", "POST")
            wait_until(lambda: page.evaluate("window.resubscribed") > placed, 30,
                       message="resubscribed")  # fmt: skip
            # 21 comes after the twenty in b's log: once the page has it, the resubscription's
            # replay is behind it
            pool.submit(asyncio.run, publish("b", 21, 1)).result()
            wait_until(lambda: 21 in got(), 30, message="a live message after the resubscription")
        received = got()
        errors = page.evaluate("window.errors")
        page.evaluate("window.reader.close()")
    finally:
        cluster.stop()
    assert received == [*range(11, 21), *range(1, 11), 21], "each once, the late ones too"
    assert errors == [] and uncaught == []
