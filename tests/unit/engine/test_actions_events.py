"""On-publish actions end to end on the in-process engine (virtual clock): the publish stage
offers appended messages to the action's lane, its worker runs them once durable, and what
it derives is published under a derived identity with its source's bookmark.

A real Broker (tests/support/engine.py): real publish pipeline, real transaction log.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from spool.server.actions import NotOnAdmin
from spool.server.actions.checkpoint import checkpoint_name, encode
from spool.server.actions.eventrunner import MAX_DERIVED_DEPTH
from spool.server.bookmarks import derived_pub_hash, format_bookmark
from tests.support.engine import EngineHarness, FakeClient, actions_engine, scenario
from tests.support.faults import GatedSeam
from tests.support.server import sow_topic


def source(bookmark: str) -> tuple[int, int]:
    """(publisher id, sequence) of a bookmark."""
    pub, seq, _ = bookmark.split("|")
    return int(pub), int(seq)


def info(h: EngineHarness, name: str) -> Any:
    return h.broker.actions.action_info(name)


def named(h: EngineHarness, event: str) -> list[dict[str, Any]]:
    return [e for e in h.broker.events.recent(1000)
            if e["category"] == "actions" and e["event"] == event]  # fmt: skip


HOT = """
<Action><Name>hot</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>^orders/</Topic><Filter>/hot = true</Filter></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>derived/{{AMPS_TOPIC}}</Topic>
    <Data>{"from":"{{AMPS_BOOKMARK}}","order":{{AMPS_DATA}}}</Data></Options></Do>
</Action>"""


def order(n: int, topic: str = "orders/1") -> tuple[dict[str, Any], bytes]:
    return {"c": "publish", "t": topic}, orjson.dumps({"n": n, "hot": n % 3 == 0})


@scenario
async def test_every_matching_message_derives_one_message_with_its_source_bookmark(
    tmp_path: Path,
) -> None:
    async with actions_engine(tmp_path, HOT) as h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^derived/", "sub_id": "d", "bm": "0"}, b""),
                    ({"c": "subscribe", "t": "^orders/", "sub_id": "o", "bm": "0"}, b""))  # fmt: skip
        pub = await h.logon("pub")
        pub.send(*[order(n) for n in range(100)], order(300, "other/1"))  # one frame
        await h.until(lambda: len(reader.deliveries("o")) == 100)
        await h.drive(h.until(lambda: len(reader.deliveries("d")) >= 34))
        await h.commit()
        await h.settle()
        sources = [hd["bm"] for hd, body in reader.deliveries("o") if orjson.loads(body)["hot"]]
        assert len(sources) == 34
        got = reader.deliveries("d")
        assert [hd["x"] for hd, _ in got] == sources  # in order, corr id = source bookmark
        expected = []
        for bm in sources:
            pub_hash, seq = source(bm)
            expected.append(format_bookmark(derived_pub_hash("hot", 1, pub_hash), seq))
        assert [hd["bm"] for hd, _ in got] == expected
        assert {hd["t"] for hd, _ in got} == {"derived/orders/1"}
        bodies = [orjson.loads(body) for _, body in got]
        assert [b["order"]["n"] for b in bodies] == list(range(0, 100, 3))
        assert [b["from"] for b in bodies] == sources
        events = info(h, "hot")["events"]
        assert (events["offered"], events["matched"], events["runs"], events["derived"]) == (
            100, 34, 34, 34,
        )  # fmt: skip
        assert (events["dropped"], events["failed"]) == (0, 0)


@scenario
async def test_no_hook_without_an_on_publish_trigger_and_none_for_other_topics(
    tmp_path: Path,
) -> None:
    async with actions_engine(tmp_path, "") as h:
        assert not h.broker.publish_triggers.configured
        pub = await h.logon("pub")
        pub.send(order(3, "orders/1"))
        await h.commit()
        entry = h.broker.topics.get("orders/1")
        assert entry is not None and len(entry.appended) == 1  # the fan-out alone
    async with actions_engine(tmp_path / "on", HOT) as h:
        assert h.broker.publish_triggers.configured
        pub = await h.logon("pub")
        pub.send(order(0, "other/1"), order(3, "orders/1"))
        await h.commit()
        entry = h.broker.topics.get("other/1")
        assert entry is not None and len(entry.appended) == 1  # the fan-out alone
        watched = h.broker.topics.get("orders/1")
        assert watched is not None and len(watched.appended) == 2


@scenario
async def test_nothing_is_derived_before_its_source_is_durable(tmp_path: Path) -> None:
    seam = GatedSeam()
    seam.gate.set()
    async with actions_engine(tmp_path, HOT, files=seam) as h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^derived/", "sub_id": "d"}, b""))
        await h.settle()
        seam.gate.clear()
        before = h.last_seq
        pub = await h.logon("pub")
        pub.send(order(0), order(3))
        await h.settle()
        for _ in range(20):  # group commits come due; none can write
            await h.clock.advance(0.01)
            await asyncio.sleep(0.001)
        assert h.durable_seq <= before < h.last_seq
        assert not reader.deliveries("d") and h.last_seq == before + 2
        seam.gate.set()
        await h.drive(h.until(lambda: len(reader.deliveries("d")) == 2))


FULL = """
<Action><Name>slow</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>^orders/</Topic></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>derived/x</Topic><Data>{"n":1}</Data></Options></Do>
</Action>"""


async def acked_at(h: EngineHarness, pub: FakeClient, frames: int) -> list[float]:
    """Send ``frames`` one-message runs (one topic each) in one frame; the virtual time
    of each processed ack."""
    pub.send(*[({"c": "publish", "t": f"orders/{i}", "cid": str(i), "a": "processed"},
                b'{"n":1}') for i in range(frames)])  # fmt: skip
    times: list[float] = []
    while len(times) < frames:
        await h.settle()
        new = [a for a in pub.acks("processed") if a.get("cid")]
        times.extend(h.clock.time() for _ in new[len(times) :])
    return times


@scenario
async def test_a_full_lane_drops_and_counts_and_never_slows_the_publisher(tmp_path: Path) -> None:
    tuning = "<ActionEventQueueDepth>10</ActionEventQueueDepth>"
    seam = GatedSeam()
    seam.gate.set()
    async with actions_engine(tmp_path / "off", "", files=seam) as off:
        seam.gate.clear()  # nothing becomes durable: the worker would wait
        start = off.clock.time()
        plain = [t - start for t in await acked_at(off, await off.logon("pub"), 50)]
        seam.gate.set()
    seam = GatedSeam()
    seam.gate.set()
    async with actions_engine(tmp_path / "on", FULL, files=seam, tuning=tuning) as h:
        seam.gate.clear()
        start = h.clock.time()
        times = [t - start for t in await acked_at(h, await h.logon("pub"), 50)]
        assert times == plain  # every ack at once, as without the action
        events = info(h, "slow")["events"]
        assert (events["offered"], events["dropped"]) == (50, 40)
        assert info(h, "slow")["skipped"] == 40
        seam.gate.set()
        await h.drive(h.until(lambda: info(h, "slow")["events"]["runs"] == 10))
        await h.clock.advance(60.0)  # the window closes: one warning for the drops
        await h.until(lambda: named(h, "events_dropped"))
        (warning,) = named(h, "events_dropped")
        assert (warning["level"], warning["dropped"], warning["capacity"]) == ("warning", 40, 10)


BAD = """
<Action><Name>bad</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>^orders/</Topic></Options></On>
  <Do><Module>amps-action-do-delete-sow</Module><Options>
    <Topic>{{AMPS_TOPIC}}</Topic><Key>k</Key></Options></Do>
</Action>"""


@scenario
async def test_windows_and_at_most_five_failed_runs_each_in_the_history(tmp_path: Path) -> None:
    tuning = "<ActionHistoryInterval>10s</ActionHistoryInterval>"
    async with actions_engine(tmp_path, BAD, tuning=tuning) as h:
        pub = await h.logon("pub")
        pub.send(*[order(n, f"orders/{n}") for n in range(7)])
        await h.drive(h.until(lambda: info(h, "bad")["events"]["runs"] == 7))
        await h.clock.advance(10.0)
        await h.until(lambda: (info(h, "bad")["last_run"] or {}).get("events"))
        action = info(h, "bad")
        assert (action["event_driven"], action["runs"], action["events"]["failed"]) == (
            True, 7, 7,
        )  # fmt: skip
        window = action["last_run"]
        assert window is not None and window["events"]["failed"] == 7
        assert window["detail"] == "7 events: 7 runs, 7 failed"
        assert window["trigger"] == "amps-action-on-publish-message"
        history = await h.drive(h.broker.actions.history("bad", 50))
        assert [(r["outcome"], r["events"] is not None) for r in history] == [
            ("failed", True),
            *[("failed", False)] * 5,
        ]
        assert (
            history[-1]["detail"].startswith("bookmark ")
            and "on topic orders/0" in (history[-1]["detail"])
        )
        assert len(named(h, "event_run_failed")) == 5
        with pytest.raises(NotOnAdmin):  # it runs per message, never on demand
            await h.broker.actions.run_admin("bad", {}, "ops")
        # nothing moved in the next interval: no window
        await h.clock.advance(10.0)
        await h.settle()
        assert len(named(h, "event_window")) == 1


LOOP = """
<Action><Name>loop</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>^loop/</Topic></Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>loop/{{AMPS_TOPIC}}</Topic><Data>{"n":1}</Data></Options></Do>
</Action>"""


@scenario
async def test_a_templated_loop_is_cut_after_four_derived_hops(tmp_path: Path) -> None:
    async with actions_engine(tmp_path, LOOP) as h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^loop/", "sub_id": "l"}, b""))
        pub = await h.logon("pub")
        pub.send(({"c": "publish", "t": "loop/a"}, b'{"n":0}'))
        await h.drive(h.until(lambda: info(h, "loop")["events"]["loop_cut"] == 1))
        await h.commit()
        topics = [hd["t"] for hd, _ in reader.deliveries("l")]
        assert topics == ["loop/" * k + "a" for k in range(1, MAX_DERIVED_DEPTH + 2)]
        assert info(h, "loop")["events"]["derived"] == MAX_DERIVED_DEPTH


ENRICH = """
<Action><Name>enrich</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>orders</Topic></Options></On>
  <Do><Module>amps-action-do-extract-values</Module><Options>
    <Value>SYM=/sym</Value><Value>NOTIONAL=/qty * /px</Value></Options></Do>
  <Do><Module>amps-action-do-delete-sow</Module><Options>
    <Topic>book</Topic><Key>{{SYM}}</Key></Options></Do>
  <Do><Module>amps-action-do-delete-sow</Module><Options>
    <Topic>book</Topic><Filter>/stale = true</Filter></Options></Do>
  <Do><Module>amps-action-do-echo-message</Module><Options>
    <Message>{{SYM}} {{NOTIONAL}}</Message><MaxPerSecond>2</MaxPerSecond></Options></Do>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>alerts</Topic><Data>{"sym":"{{SYM}}","notional":{{NOTIONAL}}}</Data>
    <CorrelationId>{{SYM}}-{{AMPS_SOW_DELETED}}</CorrelationId></Options></Do>
</Action>"""


@scenario
async def test_delete_sow_extract_values_echo_and_publish_per_message(tmp_path: Path) -> None:
    async with actions_engine(tmp_path, ENRICH, sow=sow_topic("book", "/sym")) as h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "alerts", "sub_id": "a"}, b""))
        pub = await h.logon("pub")
        book = [{"sym": s, "stale": s == "Z"} for s in ("A", "B", "Z")]
        pub.send(*[({"c": "publish", "t": "book"}, orjson.dumps(r)) for r in book])
        await h.commit()
        pub.send(*[({"c": "publish", "t": "orders"},
                    orjson.dumps({"sym": s, "qty": q, "px": 2})) for s, q in
                   (("A", 1), ("C", 2), ("B", 3))])  # fmt: skip
        await h.drive(h.until(lambda: len(reader.deliveries("a")) == 3))
        got = [(hd["x"], orjson.loads(body)) for hd, body in reader.deliveries("a")]
        # the key's record went, then the stale one (the first firing only)
        assert got == [("A-1", {"sym": "A", "notional": 2}), ("C-0", {"sym": "C", "notional": 4}),
                       ("B-0", {"sym": "B", "notional": 6})]  # fmt: skip
        assert h.broker.operations.sow_keys("book")["keys"] == []
        assert [e["message"] for e in named(h, "echo")] == ["A 2", "C 4"]
        assert info(h, "enrich")["events"]["echo_suppressed"] == 1


# -- restarts -----------------------------------------------------------------------------------


def checkpoint_file(tmp_path: Path) -> Path:
    return tmp_path / "data" / checkpoint_name("spool-test")


async def derive_ten(tmp_path: Path, **kw: Any) -> tuple[list[str], int]:
    """Run HOT over 30 messages (10 hot) and stop; the hot sources' bookmarks and the
    log's identity."""
    async with actions_engine(tmp_path, HOT, **kw) as h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^derived/", "sub_id": "d"}, b""))
        pub = await h.logon("pub")
        pub.send(*[order(n) for n in range(30)])
        await h.drive(h.until(lambda: len(reader.deliveries("d")) == 10))
        assert h.broker.txlog is not None
        log_id = h.broker.txlog.own_pub_hash
        sources = [hd["x"] for hd, _ in reader.deliveries("d")]
        last_source = h.last_seq - 10  # the derived messages came after the sources
    saved = orjson.loads(checkpoint_file(tmp_path).read_bytes())
    assert saved["log"] == log_id and saved["actions"]["hot"] >= last_source
    return sources, log_id


async def derived_after_restart(
    tmp_path: Path, **kw: Any
) -> tuple[list[tuple[str, str]], EngineHarness, int]:
    """Restart with HOT; the derived messages (bookmark, corr id) a replay from the start
    gives once the catch-up ran, the broker, and the records of SOW topic orders/1."""
    h = actions_engine(tmp_path, HOT, **kw)
    async with h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^derived/", "sub_id": "d", "bm": "0"}, b""))
        await h.drive(h.until(lambda: len(reader.deliveries("d")) >= 10))
        await h.drive(h.until(lambda: h.broker.actions.event_runners["hot"].lane.queued == 0
                                    and h.broker.actions.event_runners["hot"].idle))  # fmt: skip
        await h.commit()
        got = [(hd["bm"], hd["x"]) for hd, _ in reader.deliveries("d")]
        records = h.broker.operations.sow_keys("orders/1")["records"] if "sow" in kw else 0
    return got, h, records


@scenario
async def test_a_restart_from_an_older_checkpoint_runs_again_and_derives_nothing_twice(
    tmp_path: Path,
) -> None:
    sow = sow_topic("orders/1", "/n")  # a persistent SOW topic: its file has it all
    sources, log_id = await derive_ten(tmp_path, sow=sow)
    checkpoint_file(tmp_path).write_bytes(encode(log_id, {"hot": 0}))  # rolled back
    got, h, records = await derived_after_restart(tmp_path, sow=sow)
    assert [x for _, x in got] == sources  # one derived message per source, once
    # reading the log from further back for the catch-up changed nothing in the SOW
    assert records == 30
    (caught,) = named(h, "catch_up")
    assert (caught["action"], caught["messages"], caught["dropped"]) == ("hot", 30, 0)
    events = h.broker.actions.event_runners["hot"].counts()
    assert (events["runs"], events["derived"], events["derived_duplicates"]) == (10, 0, 10)


@scenario
async def test_no_checkpoint_or_another_log_starts_at_the_end(tmp_path: Path) -> None:
    sources, log_id = await derive_ten(tmp_path)
    checkpoint_file(tmp_path).write_bytes(encode(log_id + 1, {"hot": 0}))
    got, h, _ = await derived_after_restart(tmp_path)
    assert [x for _, x in got] == sources and not named(h, "catch_up")
    (ignored,) = named(h, "checkpoint_ignored")
    assert "written for another log" in ignored["reason"]
    assert h.broker.actions.event_runners["hot"].counts()["runs"] == 0


@scenario
async def test_the_catch_up_goes_back_at_most_action_catch_up_records(tmp_path: Path) -> None:
    sources, log_id = await derive_ten(tmp_path)
    checkpoint_file(tmp_path).write_bytes(encode(log_id, {"hot": 0}))
    # the log ends with 30 sources then 10 derived: 16 records back reach 6 sources, 2 hot
    got, h, _ = await derived_after_restart(
        tmp_path, tuning="<ActionCatchUpRecords>16</ActionCatchUpRecords>"
    )
    assert [x for _, x in got] == sources
    (caught,) = named(h, "catch_up")
    assert caught["messages"] == 6
    events = h.broker.actions.event_runners["hot"].counts()
    assert (events["runs"], events["derived_duplicates"]) == (2, 2)


@scenario
async def test_a_delayed_message_fires_when_it_falls_due_not_when_it_is_stored(
    tmp_path: Path,
) -> None:
    async with actions_engine(tmp_path, HOT) as h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^derived/", "sub_id": "d"}, b""))
        pub = await h.logon("pub")
        pub.send(({"c": "publish", "t": "orders/1", "s": 7, "o": "deliver_after=30s"},
                  orjson.dumps({"n": 3, "hot": True})))  # fmt: skip
        await h.commit()
        await h.clock.advance(29)
        await h.commit()
        await h.settle()
        assert reader.deliveries("d") == []
        assert info(h, "hot")["events"]["offered"] == 0
        await h.clock.advance(1.01)
        await h.drive(h.until(lambda: len(reader.deliveries("d")) == 1))
        ((_header, body),) = reader.deliveries("d")
        doc = orjson.loads(body)
        assert doc["order"]["n"] == 3
        assert source(doc["from"])[1] == 7  # the bookmark it was published with
        assert info(h, "hot")["events"]["offered"] == 1
