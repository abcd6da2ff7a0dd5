"""The SOW methods of static/spool-client.js in Chromium against a real broker: ``sow``
(shapes, keys, historical, refusals), ``sowAndSubscribe`` (snapshot then live, ``oof``),
``sowDelete``, ``deltaPublish`` and ``deltaSubscribe``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.support.server import SpoolProcess, config_xml, sow_topic

pytestmark = pytest.mark.browser

PRELUDE = """
const { SpoolClient, SpoolError } = await import('/static/spool-client.js');
const within = (promise, ms, what) => Promise.race([promise, new Promise((_, reject) =>
  setTimeout(() => reject(new Error(`timed out: ${what}`)), ms))]);
const until = async (cond, what) => {
  const deadline = Date.now() + 10000;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};
const refusal = async (promise) => {
  try { await promise; return null; } catch (e) { return e instanceof SpoolError ? e.reason : String(e); }
};
"""


@pytest.fixture(scope="module")
def sow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("js-sow")
    sow = sow_topic("js-orders", "/id") + sow_topic("js-kv", "/id", durability="transient")
    proc = SpoolProcess(workdir, config_xml(workdir / "data", journal_size="4MB", sow=sow))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def client_page(page: Page, sow_server: SpoolProcess) -> Iterator[Page]:
    page.goto(f"{sow_server.http_url}/query")
    yield page


def run(page: Page, server: SpoolProcess, body: str) -> Any:
    return page.evaluate(f"async ({{url}}) => {{ {PRELUDE}\n{body} }}", {"url": server.ws_url})


def test_sow_queries_deletes_and_delta_publish(client_page: Page, sow_server: SpoolProcess) -> None:
    result = run(
        client_page,
        sow_server,
        """
        const c = new SpoolClient(url, { name: 'js-sow-q' });
        await c.connect();
        const acks = [];
        for (let i = 0; i < 5; i++) {
          acks.push(await c.publish('js-orders', { id: i, px: i * 10, nested: { a: i } },
                                    { ackPersisted: true }));
        }
        const top = await c.sow('js-orders', { orderby: '/id DESC', topN: 3, batchSize: 2 });
        const filtered = await c.sow('js-orders', { filter: '/px >= 30' });
        const byKeys = await c.sow('js-orders', { keys: ['1', '3', '77'] });
        const streamed = [];
        const none = await c.sow('js-orders', { onRecord: (m) => streamed.push(m.sowKey) });
        const historical = await c.sow('js-orders', { bookmark: acks[1].bookmark });
        await c.deltaPublish('js-orders', { id: 1, nested: { b: 2 } }, { ackPersisted: true });
        const merged = (await c.sow('js-orders', { keys: ['1'] })).records[0].json();
        const byKeysDeleted = await c.sowDelete('js-orders', { keys: ['1', '2'] });
        const byFilterDeleted = await c.sowDelete('js-orders', { filter: '/px >= 40' });
        const byData = await c.sowDelete('js-orders', { data: '{"id":0}' });
        const left = (await c.sow('js-orders')).records.map((m) => m.json().id);
        const refusals = {
          notSow: await refusal(c.sow('not-a-sow-topic')),
          badFilter: await refusal(c.sow('js-orders', { filter: '/px >>> 1' })),
          twoWays: await refusal(c.sowDelete('js-orders', { filter: '/a = 1', keys: ['1'] })),
          deltaNotSow: await refusal(c.deltaPublish('plain', { id: 1 }, { ack: 'processed' })),
        };
        c.close();
        return {
          top: top.records.map((m) => [m.command, m.sowKey, m.json().id, Boolean(m.bookmark)]),
          topCounts: [top.matches, top.returned],
          filtered: filtered.records.map((m) => m.json().id).sort(),
          byKeys: byKeys.records.map((m) => m.sowKey),
          streamed: streamed.sort(), noneKept: none.records.length, noneReturned: none.returned,
          historical: historical.records.map((m) => m.json().id).sort(),
          merged, byKeysDeleted, byFilterDeleted, byData, left, refusals,
        };
        """,
    )
    assert result["top"] == [["sow", "4", 4, True], ["sow", "3", 3, True], ["sow", "2", 2, True]]
    assert result["topCounts"] == [5, 3]
    assert result["filtered"] == [3, 4]
    assert result["byKeys"] == ["1", "3"]
    assert result["streamed"] == ["0", "1", "2", "3", "4"]
    assert (result["noneKept"], result["noneReturned"]) == (0, 5)
    assert result["historical"] == [0, 1]
    assert result["merged"] == {"id": 1, "px": 10, "nested": {"a": 1, "b": 2}}
    assert (result["byKeysDeleted"], result["byFilterDeleted"], result["byData"]) == (2, 1, 1)
    assert result["left"] == [3]
    assert result["refusals"] == {
        "notSow": "invalid topic",
        "badFilter": "bad filter",
        "twoWays": "invalid message",
        "deltaNotSow": "invalid topic",
    }


def test_sow_and_subscribe_then_live_changes_oof_and_deltas(
    client_page: Page, sow_server: SpoolProcess
) -> None:
    result = run(
        client_page,
        sow_server,
        """
        const pub = new SpoolClient(url, { name: 'js-sow-pub' });
        const sub = new SpoolClient(url, { name: 'js-sow-sub' });
        await pub.connect();
        await sub.connect();
        for (let i = 0; i < 4; i++) {
          await pub.publish('js-kv', { id: i, px: i }, { ackPersisted: true });
        }
        const got = [];
        let snapshotAt = -1;
        const subId = await sub.sowAndSubscribe('js-kv', {
          filter: '/px < 10', options: 'oof', orderby: '/id',
          onSnapshot: () => { snapshotAt = got.length; },
        }, (m) => got.push([m.command, m.sowKey, m.data, m.reason ?? null]));
        await within(until(() => snapshotAt >= 0, 'snapshot'), 10000, 'snapshot');
        const deltas = [];
        await sub.deltaSubscribe('js-kv', {}, (m) => deltas.push([m.sowKey, m.json()]));
        await pub.publish('js-kv', { id: 1, px: 5 }, { ackPersisted: true });
        await pub.publish('js-kv', { id: 2, px: 50 }, { ackPersisted: true });
        await pub.deltaPublish('js-kv', { id: 3, note: 'x' }, { ackPersisted: true });
        await pub.sowDelete('js-kv', { keys: ['0'] });
        await within(until(() => got.length >= snapshotAt + 4 && deltas.length >= 3, 'live'),
                     10000, 'live changes');
        await sub.unsubscribe(subId);
        sub.close(); pub.close();
        return { subId, got, snapshotAt, deltas };
        """,
    )
    got = result["got"]
    assert result["snapshotAt"] == 4
    assert got[:4] == [["sow", str(i), f'{{"id":{i},"px":{i}}}', None] for i in range(4)]
    assert got[4:] == [
        ["publish", "1", '{"id":1,"px":5}', None],
        ["oof", "2", '{"id":2,"px":50}', "match"],
        ["publish", "3", '{"id":3,"px":3,"note":"x"}', None],
        ["oof", "0", '{"id":0,"px":0}', "deleted"],
    ]
    # the delta subscriber holds nothing at first: each record's first change comes whole,
    # the merged record of id 3 as well
    assert result["deltas"] == [
        ["1", {"id": 1, "px": 5}],
        ["2", {"id": 2, "px": 50}],
        ["3", {"id": 3, "px": 3, "note": "x"}],
    ]


def test_select_lists_in_the_options(client_page: Page, sow_server: SpoolProcess) -> None:
    result = run(
        client_page,
        sow_server,
        """
        const c = new SpoolClient(url, { name: 'js-sow-select' });
        await c.connect();
        const live = [];
        await c.subscribe('js-sel-plain', { options: 'select=[-/,+/id,+/px]' },
                          (m) => live.push(m.json()));
        const deltas = [];
        await c.deltaSubscribe('js-orders', { options: 'select=[-/,+/sel]', filter: '/id >= 100' },
                               (m) => deltas.push(m.json()));
        await c.publish('js-sel-plain', { id: 1, px: 2, secret: 's' }, { ackPersisted: true });
        for (const [sel, other] of [[1, 'a'], [1, 'b'], [2, 'b']]) {
          await c.publish('js-orders', { id: 100, sel, other }, { ackPersisted: true });
        }
        const query = await c.sow('js-orders', { filter: '/id = 100', options: 'select=[-/other]' });
        await within(until(() => live.length >= 1 && deltas.length >= 2, 'deliveries'), 10000, 'live');
        const refused = await refusal(c.subscribe('js-sel-plain', { options: 'select=[+/a,+/a]' }));
        c.close();
        return { live, deltas, query: query.records.map((m) => m.json()), refused };
        """,
    )
    assert result["live"] == [{"id": 1, "px": 2}]
    # the second publish changed only /other: nothing selected changed, nothing was sent
    assert result["deltas"] == [{"sel": 1}, {"sel": 2}]
    assert result["query"] == [{"id": 100, "sel": 2}]
    assert result["refused"] == "invalid options"
