"""The modules of message-driven actions, run on the in-process engine (virtual clock):
delete-sow, extract-values, echo and a publish's correlation id from an action run on
demand; and the event runner, fed candidate runs by hand: firings per message, derived
messages published together at the batch's end, the echo rate, failed firings and the
history windows.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import orjson

from spool.server.actions.eventrunner import FAILED_PER_WINDOW, EventRunner, MessageRun
from spool.server.actions.metricsdoc import MetricsDocument
from spool.server.bookmarks import derived_pub_hash, format_bookmark, pub_hash
from spool.server.config import ActionConfig, OnPublishMessage, Step, Template, TopicMatch
from spool.server.config.actions import (
    DeleteSow,
    EchoMessage,
    ExtractValues,
    IfCondition,
    PublishMessage,
)
from spool.server.ports import AppendedRun, Origin
from spool.server.txlog.format.record import RecordKind
from spool.server.wire import topic_json
from tests.support.engine import EngineHarness, scenario
from tests.support.faults import FaultySeam
from tests.support.server import config_xml, sow_topic
from tests.unit.engine.outage import RETRY

SOURCE = pub_hash("feed")


def harness(tmp_path: Path, actions: str = "", **kw: Any) -> EngineHarness:
    xml = config_xml(
        tmp_path / "data", admin_interval="1d", actions=actions,
        sow=sow_topic("orders", "/id"), **kw,
    )  # fmt: skip
    return EngineHarness(tmp_path, xml=xml)


def echoes(h: EngineHarness) -> list[tuple[str, str]]:
    return [(e["level"], e["message"]) for e in h.broker.events.recent(500)
            if e["category"] == "actions" and e["event"] == "echo"]  # fmt: skip


ON_DEMAND = """
<Action><Name>tidy</Name>
  <On><Module>amps-action-on-admin</Module><Options>
    <Parameter><Name>id</Name></Parameter></Options></On>
  <Do><Module>amps-action-do-delete-sow</Module><Options>
    <Topic>orders</Topic><Key>{{id}}</Key></Options></Do>
  <Do><Module>amps-action-do-delete-sow</Module><Options>
    <Topic>orders</Topic><Filter>/qty &lt; 5</Filter></Options></Do>
  <Do><Module>amps-action-do-extract-values</Module><Options>
    <Value>GONE=/a + /b</Value><Value>WHO=/who</Value><Value>LIST=/list</Value>
    <Value>NONE=/missing</Value>
    <Data>{"a":{{AMPS_SOW_DELETED}},"b":1,"who":"{{id}}","list":[1,"x"]}</Data></Options></Do>
  <Do><Module>amps-action-do-echo-message</Module><Options>
    <Message>tidied {{GONE}} for {{WHO}} {{LIST}} [{{NONE}}]</Message><Level>warning</Level>
  </Options></Do>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>tidied</Topic><Data>{"gone":{{GONE}}}</Data>
    <CorrelationId>tidy-{{WHO}}</CorrelationId></Options></Do>
</Action>"""


@scenario
async def test_an_action_on_demand_deletes_extracts_echoes_and_sets_a_correlation_id(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, ON_DEMAND) as h:
        pub = await h.logon("pub")
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "tidied", "sub_id": "s"}, b""))
        rows = [{"id": "a", "qty": 1}, {"id": "b", "qty": 9}, {"id": "c", "qty": 2},
                {"id": "d", "qty": 7}]  # fmt: skip
        pub.send(*[({"c": "publish", "t": "orders"}, orjson.dumps(r)) for r in rows])
        await h.commit()
        ops = h.broker.operations
        assert ops.sow_keys("orders")["records"] == 4
        record = await h.run_admin("tidy", id="d")
        assert record.outcome == "succeeded", record.message
        # the key went first, then what the filter matched of the rest
        assert ops.sow_keys("orders")["keys"] == ["b"]
        assert [s.variables for s in record.steps[:3]] == [
            {"AMPS_SOW_DELETED": "1"}, {"AMPS_SOW_DELETED": "2"},
            {"GONE": "3", "WHO": "d", "LIST": '[1,"x"]', "NONE": ""},
        ]  # fmt: skip
        assert echoes(h) == [("warning", 'tidied 3 for d [1,"x"] []')]
        await h.until(lambda: sub.deliveries("s"))
        ((header, body),) = sub.deliveries("s")
        assert (header.get("x"), orjson.loads(body)) == ("tidy-d", {"gone": 3})


@scenario
async def test_a_delete_the_sow_refuses_fails_its_step(tmp_path: Path) -> None:
    actions = """
<Action><Name>bad</Name>
  <On><Module>amps-action-on-admin</Module><Options>
    <Parameter><Name>t</Name></Parameter></Options></On>
  <Do><Module>amps-action-do-delete-sow</Module><Options>
    <Topic>{{t}}</Topic><Key>k</Key></Options></Do>
</Action>"""
    async with harness(tmp_path, actions) as h:
        record = await h.run_admin("bad", t="trades")
        assert record.outcome == "failed"
        assert record.steps[0].message.startswith("delete from 'trades' refused: invalid topic")


COMPACT = """
<Action><Name>compact</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>spool-action-do-compact-sow</Module><Options>
    <Topic>orders</Topic></Options></Do>
  <Do><Module>amps-action-do-echo-message</Module><Options>
    <Message>compacted {{AMPS_SOW_COMPACTED}}</Message></Options></Do>
</Action>"""


@scenario
async def test_an_action_compacts_a_persistent_sow_topic_and_keeps_every_record(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path, COMPACT) as h:
        pub = await h.logon("pub")
        # every key written ten times: the file holds nine dead versions of each
        for version in range(10):
            pub.send(*[({"c": "publish", "t": "orders"},
                        orjson.dumps({"id": k, "v": version, "pad": "x" * 200}))
                       for k in range(50)])  # fmt: skip
            await h.commit()
        ops = h.broker.operations
        before = ops.sow_topic("orders")
        record = await h.run_admin("compact")
        assert record.outcome == "succeeded", record.message
        assert record.steps[0].message.startswith("compacted 1 topic: ")
        assert ("info", "compacted 1") in echoes(h)
        after = ops.sow_topic("orders")
        assert after["records"] == before["records"] == 50
        assert after["file_bytes"] is not None and before["file_bytes"] is not None
        assert after["file_bytes"] < before["file_bytes"]
        assert after["last_compaction"] is not None


# -- the event runner -------------------------------------------------------------------------


def action(*steps: Step, flt: str | None = None) -> ActionConfig:
    trigger = OnPublishMessage(TopicMatch("^in/", is_regex=True), flt)
    return ActionConfig("enrich", (trigger,), steps)


def publish_step(topic: str = "out", data: str = '{"n":{{N}},"src":{{AMPS_DATA}}}') -> Step:
    return PublishMessage(Template.parse(topic), Template.parse(data))


EXTRACT = ExtractValues((("N", "/n"),))


def runner(h: EngineHarness, config: ActionConfig) -> EventRunner:
    b = h.broker
    metrics = MetricsDocument(b.operations, b.config, h.clock)
    return EventRunner(config, b.config, b.operations, h.clock, metrics)


def unrecorded(topic: str, docs: list[dict[str, Any]]) -> MessageRun:
    """Messages of a topic the log does not record (no bookmarks), as the publish path
    hands them over."""
    run = AppendedRun(
        topic=topic, topic_literal=topic_json(topic),
        origin=Origin(kind="client", name="feed", user=None, replies=None),
        pub_hash=SOURCE, pub_seqs=[0] * len(docs), bodies=[orjson.dumps(d) for d in docs],
        first_seq=0, timestamp_us=None, corr_ids=None, sow_keys=None, kind=RecordKind.PUBLISH,
        publisher_name="feed",
    )  # fmt: skip
    return MessageRun(run, 0)


async def feed(h: EngineHarness, r: EventRunner, *items: MessageRun) -> None:
    """Offer ``items`` to the runner's lane and run what its worker would take."""
    for item in items:
        assert r.lane.offer(item)
    await h.drive(r.run_batch(r.lane.take_nowait()))


@scenario
async def test_firings_derive_messages_published_together_after_the_batch(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "out", "sub_id": "s"}, b""))
        await h.settle()
        r = runner(h, action(EXTRACT, publish_step(), flt="/n > 1"))
        docs = [{"n": n} for n in range(5)]
        await feed(h, r, unrecorded("in/a", docs[:3]), unrecorded("in/b", docs[3:]))
        await h.commit()
        got = [(hd.get("x"), orjson.loads(body)) for hd, body in sub.deliveries("s")]
        # no source bookmark, so no correlation id; the filter kept n > 1
        assert got == [(None, {"n": n, "src": {"n": n}}) for n in (2, 3, 4)]
        derived = derived_pub_hash("enrich", 2, SOURCE, unrecorded=True)
        assert [hd["bm"] for hd, _ in sub.deliveries("s")] == [
            format_bookmark(derived, s) for s in (1, 2, 3)
        ]
        # a second batch numbers on from what the log holds for the derived id
        await feed(h, r, unrecorded("in/a", [{"n": 7}]))
        await h.until(lambda: len(sub.deliveries("s")) == 4)
        assert sub.deliveries("s")[-1][0]["bm"] == format_bookmark(derived, 4)
        counts = r.counts()
        assert (counts["offered"], counts["matched"], counts["runs"], counts["derived"]) == (
            6, 4, 4, 4,
        )  # fmt: skip


@scenario
async def test_echo_keeps_to_its_rate_and_counts_the_rest(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        echo = EchoMessage(Template.parse("saw {{AMPS_DATA}}"), max_per_second=2)
        r = runner(h, action(echo))
        await feed(h, r, unrecorded("in/a", [{"n": n} for n in range(5)]))
        assert echoes(h) == [("info", 'saw {"n":0}'), ("info", 'saw {"n":1}')]
        assert r.counts()["echo_suppressed"] == 3
        await h.clock.advance(1.0)  # the next second has room again
        await feed(h, r, unrecorded("in/a", [{"n": 9}]))
        assert echoes(h)[-1] == ("info", 'saw {"n":9}')
        window = await h.drive(r.close_window())
        assert window.events["echo_suppressed"] == 3 and window.events["runs"] == 6
        assert "3 echo lines over the rate" in window.detail


@scenario
async def test_a_window_records_counts_and_only_the_first_failures_in_full(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path) as h:
        # a delete from a topic no SOW rule keeps fails; n = 0 only stops at the condition
        steps = (EXTRACT, DeleteSow(Template.parse("{{N}}"), key=Template.parse("k")))
        r = runner(h, action(*steps))
        docs = [{"n": "orders"}] * 2 + [{"n": f"t{i}"} for i in range(7)]
        await feed(h, r, unrecorded("in/a", docs))
        counts = r.counts()
        assert (counts["runs"], counts["succeeded"], counts["failed"]) == (9, 2, 7)
        warned = [e for e in h.broker.events.recent(500) if e["event"] == "event_run_failed"]
        assert len(warned) == FAILED_PER_WINDOW
        assert warned[0]["detail"] == "a message on topic in/a"
        await h.drive(r.flush())
        window = await h.drive(r.close_window())
        assert window is not None and window.outcome == "failed"
        assert window.detail == "9 events: 9 runs, 2 succeeded, 7 failed"
        assert [(s.status, s.message) for s in window.steps] == [
            ("ok", "9 ok"),
            ("failed", "2 ok, 7 failed"),
        ]
        assert window.events is not None
        assert (window.events["offered"], window.events["matched"]) == (9, 9)
        stored = await h.drive(h.broker.operations.action_runs("enrich", 20))
        records = [orjson.loads(s.record) for s in stored]
        assert [(d["outcome"], d["events"] is not None) for d in records] == [
            ("failed", True),
            *[("failed", False)] * FAILED_PER_WINDOW,
        ]
        # nothing moved since: no window
        assert await h.drive(r.close_window()) is None


@scenario
async def test_conditions_of_firings_read_the_metrics_of_their_batch(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        await h.logon("someone")
        holds = IfCondition(Template.parse("/instance/connections = 1"))
        r = runner(h, action(holds, EchoMessage(Template.parse("{{AMPS_DATA}}")), flt=None))
        never = runner(h, action(IfCondition(Template.parse("/instance/connections > 1")),
                                 EchoMessage(Template.parse("never"))))  # fmt: skip
        docs = [{"n": n} for n in range(3)]
        await feed(h, r, unrecorded("in/a", docs))
        await feed(h, never, unrecorded("in/a", docs))
        assert (r.counts()["succeeded"], never.counts()["stopped"]) == (3, 3)
        assert [m for _, m in echoes(h)] == [f'{{"n":{n}}}' for n in range(3)]


@scenario
async def test_derived_messages_wait_out_a_full_log_and_are_published_once_it_takes_writes(
    tmp_path: Path,
) -> None:
    seam = FaultySeam()
    xml = config_xml(tmp_path / "data", admin_interval="1d", txlog_extra=RETRY)
    async with EngineHarness(tmp_path, xml=xml, files=seam) as h:
        log = h.broker.txlog
        assert log is not None
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "out", "sub_id": "s"}, b""))
        pub = await h.logon("pub")
        seam.fail("write", errno.ENOSPC)  # the disk fills up
        pub.send(({"c": "publish", "t": "orders"}, b'{"n":0}'))
        await h.clock.advance(0.001)
        await h.until(lambda: log.write_outage is not None)
        r = runner(h, action(EXTRACT, publish_step()))
        assert r.lane.offer(unrecorded("in/a", [{"n": 1}, {"n": 2}]))
        batch = asyncio.ensure_future(r.run_batch(r.lane.take_nowait()))
        for _ in range(3):  # refused, tried again a second later, and again
            await h.clock.advance(1.0)
            await h.settle()
            assert not batch.done() and not sub.deliveries("s")
        seam.heal()
        await h.drive(batch)
        await h.until(lambda: len(sub.deliveries("s")) == 2)
        assert [orjson.loads(b)["n"] for _, b in sub.deliveries("s")] == [1, 2]
        counts = r.counts()
        assert (counts["succeeded"], counts["failed"], counts["derived"]) == (2, 0, 2)
