"""A page reloaded in the middle of an HA publish reconciles its own record with the
IndexedDB publish store (static/spool-ha.js, `onRestore`), against a real broker.

`publish()` resolves after the store's IndexedDB write committed, so a reload can land on
either side of that commit; the test puts it there on purpose, with hooks in the page
rather than timing luck:

- *committed*: a store whose write committed and whose `publish()` then never resolves;
- *uncommitted*: the store's transaction cannot start while another connection of the page
  holds a read-write transaction on the same database (IndexedDB runs overlapping
  read-write transactions one after the other), so the message is in the store's memory
  and not in IndexedDB when the page goes.

The page keeps its own record (message id -> sequence number) in localStorage and, on each
load, publishes the ids it has no record of. With `onRestore` it marks what the store held
as in flight: the broker's log ends with every id once, under one sequence number each,
in order. A page that ignores `onRestore` publishes the restored message a second time
under a new sequence number (the control, so that the hook is known to land in the window
that matters). While a write is held, a broker restart runs the reconnect path: it must not
send the message before its write committed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import BrowserContext

from spool.server.bookmarks import pub_hash
from tests.browser.test_js_ha import Broker, Tab, run_async
from tests.support.replication import read_log
from tests.support.wait import wait_until

pytestmark = pytest.mark.browser

PAGE = """
async ({ url, name, topic, total, hook, reconcile }) => {
  const H = await import('/static/spool-ha.js');
  const key = `record/${name}`;
  // the page's own record of what it published: message id -> sequence number
  const record = JSON.parse(localStorage.getItem(key) || '{}');
  const save = () => localStorage.setItem(key, JSON.stringify(record));
  const idOf = (body) => JSON.parse(new TextDecoder().decode(body)).id;
  window.sent = [];
  window.states = [];
  window.errors = [];
  window.restored = null;
  window.hooked = null;

  // a read-write transaction of another connection, kept alive until released: the
  // store's transactions on the same object stores wait behind it
  const holdDatabase = (dbName) => new Promise((resolve, reject) => {
    const req = indexedDB.open(dbName);
    req.onerror = () => reject(req.error);
    req.onsuccess = () => {
      const store = req.result.transaction(['messages', 'meta'], 'readwrite').objectStore('messages');
      let held = true;
      const spin = () => { if (held) store.get(0).onsuccess = spin; };
      spin();
      resolve(() => { held = false; });
    };
  });

  class HookedStore extends H.IndexedDBPublishStore {
    store(entry) {
      const written = super.store(entry);
      if (hook === null || idOf(entry.body) !== hook.id) return written;
      if (hook.when === 'committed') {
        // committed; the page goes before publish() resolves
        return written.then(() => {
          window.hooked = { id: hook.id, seq: entry.seq };
          return new Promise(() => {});
        });
      }
      window.hooked = { id: hook.id, seq: entry.seq }; // held: not committed
      return written;
    }
  }

  const ha = new H.HAClient(name, {
    chooser: new H.DefaultServerChooser([url]),
    delay: new H.ExponentialDelayStrategy({ initial: 50, maximum: 300 }),
    publishStore: new HookedStore(name),
    onRestore: ({ pending }) => {
      window.restored = pending.map((e) => [idOf(e.body), e.seq]);
      if (!reconcile) return;
      for (const e of pending) record[idOf(e.body)] = e.seq; // in flight: the store sends it
      save();
    },
  });
  ha.addConnectionStateListener((s) => window.states.push(s));
  ha.setExceptionListener((e) => window.errors.push(String(e)));
  // every sequence number the HA client hands to its connection (observed, then passed on)
  const client = ha._client;
  const publish = client.publish.bind(client);
  client.publish = (t, data, opts) => { window.sent.push(opts.seq); return publish(t, data, opts); };
  window.ha = ha;
  await ha.connectAndLogon();
  for (let id = 1; id <= total; id++) {
    if (id in record) continue;
    if (hook !== null && id === hook.id && hook.when === 'uncommitted') {
      window.release = await holdDatabase(`spool-publish-store/${name}`);
    }
    record[id] = await ha.publish(topic, { id });
    save();
  }
  await ha.publishFlush(20000);
  await ha.close();
  return { record, restored: window.restored, errors: window.errors };
}
"""

#: (id, when, restart the broker while the write is held)
HOOKS: list[tuple[int, str, bool]] = [
    (4, "committed", False),
    (7, "uncommitted", True),
    (11, "committed", False),
    (14, "uncommitted", False),
    (18, "committed", False),
    (21, "uncommitted", False),
    (25, "committed", False),
    (28, "uncommitted", False),
]
TOTAL = 32


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("ha-reload"))
    b.start()
    yield b
    b.proc.stop()


def start_hooked(tab: Tab, args: dict[str, Any]) -> dict[str, int]:
    """Run the page until its hook holds a publish; returns {id, seq} of that message."""
    tab.page.evaluate(
        f"(args) => {{ ({PAGE})(args).catch((e) => {{ window.failed = String(e); }}); }}", args
    )
    hooked = wait_until(
        lambda: tab.value("window.hooked") or tab.value("window.failed"),
        20,
        message=f"the publish of {args['hook']['id']} held by its hook",
    )
    assert isinstance(hooked, dict), hooked
    return {"id": int(hooked["id"]), "seq": int(hooked["seq"])}


def mine(records: list[tuple[int, int, bytes, tuple[str, ...]]], name: str) -> list[list[int]]:
    """(sequence number, message id) of the client name's records, in log order."""
    return [[seq, json.loads(body)["id"]] for h, seq, body, _ in records if h == pub_hash(name)]


def test_a_reloaded_page_reconciles_with_the_publish_store(
    context: BrowserContext, broker: Broker
) -> None:
    tab = Tab(context, broker)
    base = {"url": broker.ws_url, "topic": "ha-reload", "total": TOTAL}
    restored: list[list[list[int]]] = []
    for hook_id, when, restart in HOOKS:
        args = {
            **base,
            "name": "reloader",
            "reconcile": True,
            "hook": {"id": hook_id, "when": when},
        }
        hooked = start_hooked(tab, args)
        assert hooked["id"] == hook_id
        restored.append(tab.value("window.restored"))  # type: ignore[arg-type]
        if restart:
            # the reconnect path while the write is held: it sends what committed only
            broker.restart(crash=False)
            wait_until(
                lambda: (
                    tab.value("window.states.filter((s) => s === 'logged_on').length") == 2
                    and tab.value("window.ha.connected")
                ),
                30,
                message="the page's client back after the restart",
            )
            states = tab.value("window.states")
            assert isinstance(states, list) and "publish_replayed" in states
        sent = tab.value("window.sent")
        assert isinstance(sent, list)
        assert hooked["seq"] not in sent, "a message went on the wire before it was stored"
        tab.page.reload()
    result = tab.page.evaluate(PAGE, {**base, "name": "reloader", "reconcile": True, "hook": None})
    restored.append(result["restored"])
    assert result["errors"] == []

    # what each load found in the store: the previous load's committed message (to be sent
    # again under its own number), never an uncommitted one; maybe earlier messages whose
    # persisted ack or its discard had not committed yet
    for (hook_id, when, _), found in zip(HOOKS, restored[1:], strict=True):
        assert all(seq == i and i <= hook_id for i, seq in found), (hook_id, found)
        assert ([hook_id, hook_id] in found) == (when == "committed"), (hook_id, when, found)
    assert restored[0] == []
    # the page's record: every id, under the number the broker logged it with
    assert result["record"] == {str(i): i for i in range(1, TOTAL + 1)}

    # the control: a page that ignores onRestore publishes the restored message again
    naive = {**base, "name": "naive", "total": 5, "reconcile": False}
    hooked = start_hooked(tab, {**naive, "hook": {"id": 3, "when": "committed"}})
    assert hooked == {"id": 3, "seq": 3}
    tab.page.reload()
    again = tab.page.evaluate(PAGE, {**naive, "hook": None})
    assert again["restored"] == [[3, 3]]

    broker.proc.stop()
    try:
        records = run_async(read_log(broker.proc))
    finally:
        broker.start()
    # each id once, under one sequence number, in order: nothing lost or published twice
    assert mine(records, "reloader") == [[i, i] for i in range(1, TOTAL + 1)]
    assert mine(records, "naive") == [[1, 1], [2, 2], [3, 3], [4, 3], [5, 4], [6, 5]]
    assert tab.uncaught == []
