"""Actions in the engine, on a virtual clock: triggers at exact times, each module's effect
through the admin surface, conditions, failures, events, start-up and shutdown, history.

A real Broker (tests/support/engine.py); the broker's own publish goes through the real
publish pipeline and the real transaction log, so a run that publishes waits for a group
commit: ``EngineHarness.run_admin`` advances the clock while it waits.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from spool.server.actions import ActionBusy, ActionNotFound, BadParameters, NotOnAdmin, RunRecord
from spool.server.actions.triggers import EARLY
from spool.server.bookmarks import format_bookmark
from spool.server.stats.actionruns import ActionRunRow
from tests.support.disk import tmpfs
from tests.support.engine import EngineHarness, actions_engine, scenario
from tests.support.faults import GatedSeam


def statuses(record: RunRecord) -> list[str]:
    return [s.status for s in record.steps]


# -- the broker publishes through the pipeline ------------------------------------------------

ANNOUNCE = """
<Action><Name>announce</Name>
  <On><Module>amps-action-on-admin</Module><Options>
    <Parameter><Name>who</Name><Pattern>[a-z]+</Pattern><Description>a name</Description></Parameter>
    <Parameter><Name>note</Name><Default>none</Default></Parameter>
  </Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>ops/{{who}}</Topic>
    <Data>{"who":"{{who}}","note":"{{note}}","by":"{{AMPS_USER}}","on":"{{AMPS_INSTANCE_NAME}}"}</Data>
  </Options></Do>
  <Do><Module>amps-action-do-execute-event</Module><Options><Event>announced</Event></Options></Do>
</Action>
<Action><Name>nightly</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>Daily 02:00</Every></Options></On>
  <Do><Module>amps-action-do-enable-transport</Module><Options><Transport>websocket-json</Transport></Options></Do>
</Action>"""


@scenario
async def test_an_on_admin_run_publishes_as_the_broker_through_the_publish_pipeline(
    tmp_path: Path,
) -> None:
    async with actions_engine(tmp_path, ANNOUNCE) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "ops/alice", "sub_id": "live"}, b""),
                 ({"c": "subscribe", "t": "ops/alice", "sub_id": "bm", "bm": "0"}, b""))  # fmt: skip
        await h.settle()
        note = 'says "hi" \\ and\nleaves'
        record = await h.run_admin("announce", user="ops", who="alice", note=note)
        assert record.outcome == "succeeded", record.message
        assert (record.trigger, record.user, record.parameters) == (
            "amps-action-on-admin", "ops", {"who": "alice", "note": note},
        )  # fmt: skip
        await h.until(lambda: len(sub.deliveries("bm")) == 1)
        ((_, live_body),) = sub.deliveries("live")
        # values are inserted JSON-escaped: the quote, backslash and newline survive
        assert orjson.loads(live_body) == {"who": "alice", "note": note, "by": "ops",
                                           "on": "spool-test"}  # fmt: skip
        assert h.broker.txlog is not None
        broker = h.broker.txlog.own_pub_hash
        bookmark = format_bookmark(broker, 1)
        assert [hd["bm"] for hd, _ in sub.deliveries("bm")] == [bookmark]
        assert record.steps[0].variables == {"AMPS_PUBLISHED_BOOKMARK": bookmark}
        assert record.steps[0].message == f"published to ops/alice (bookmark {bookmark})"
        assert h.broker.txlog is not None and h.broker.txlog.publisher_last(broker) == 1
        # the second publish continues the broker's own numbering
        again = await h.run_admin("announce", who="alice")
        assert again.steps[0].variables["AMPS_PUBLISHED_BOOKMARK"] == format_bookmark(broker, 2)


ORDER = """
<Action><Name>order</Name>
  <On><Module>amps-action-on-admin</Module><Options>
    <Parameter><Name>sym</Name></Parameter>
    <Parameter><Name>qty</Name></Parameter>
    <Parameter><Name>source</Name><Default>null</Default></Parameter>
  </Options></On>
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>orders</Topic>
    <Data>{"sym":"{{sym}}","qty":{{qty}},"source":{{source}}}</Data>
  </Options></Do>
</Action>"""


@scenario
async def test_a_reference_in_a_value_position_of_data_is_inserted_as_json(
    tmp_path: Path,
) -> None:
    async with actions_engine(tmp_path, ORDER) as h:
        sub = await h.logon("sub")
        sub.send(({"c": "subscribe", "t": "orders", "sub_id": "s"}, b""))
        await h.settle()
        source = {"id": 'a "quoted" \\ id', "legs": [1, 2.5, None, True]}
        record = await h.run_admin(
            "order", sym='X"Y', qty="12", source=orjson.dumps(source).decode()
        )
        assert record.outcome == "succeeded", record.message
        await h.until(lambda: len(sub.deliveries("s")) == 1)
        # the string reference is escaped, the value positions hold the values as JSON
        assert orjson.loads(sub.deliveries("s")[0][1]) == {
            "sym": 'X"Y', "qty": 12, "source": source,
        }  # fmt: skip
        # a value position given text that is not JSON there fails the step, nothing is sent
        failed = await h.run_admin("order", sym="X", qty="twelve")
        assert failed.outcome == "failed"
        assert failed.steps[0].message.startswith("the expanded Data is not JSON (")
        assert failed.steps[0].message.endswith("""'{"sym":"X","qty":twelve,"source":null}'""")
        await h.settle()
        assert len(sub.deliveries("s")) == 1


@scenario
async def test_on_demand_runs_check_the_action_and_its_parameters(tmp_path: Path) -> None:
    seam = GatedSeam()
    seam.gate.set()
    async with actions_engine(tmp_path, ANNOUNCE, files=seam) as h:
        actions = h.broker.actions
        with pytest.raises(ActionNotFound, match="no action named 'ghost'"):
            await actions.run_admin("ghost", {}, "ops")
        with pytest.raises(NotOnAdmin, match="runs on amps-action-on-schedule, not on demand"):
            await actions.run_admin("nightly", {}, "ops")
        for params, message in [
            ({}, "parameter 'who' is required"),
            ({"who": "Alice"}, "parameter 'who' must match '[a-z]+'"),
            (
                {"who": "al", "extra": "x"},
                "unknown parameter 'extra' (this action takes: note, who)",
            ),
            ({"who": ["a"]}, "parameter 'who' must be a string"),
            ({"who": True}, "parameter 'who' must be a string"),
        ]:
            with pytest.raises(BadParameters) as info:
                await actions.run_admin("announce", params, "ops")
            assert str(info.value) == message
        # a run in progress (waiting for its publish to be durable: the journal write
        # is held until the test looked) refuses another
        seam.gate.clear()
        first = asyncio.ensure_future(actions.run_admin("announce", {"who": "bob"}, "ops"))
        await h.settle()
        with pytest.raises(ActionBusy, match="action 'announce' is running"):
            await actions.run_admin("announce", {"who": "bob"}, "ops")
        assert actions.action_info("announce")["running"] is not None
        seam.gate.set()
        assert (await h.drive(first)).outcome == "succeeded"
        assert actions.runners["announce"].runs == 1


# -- failures and conditions -----------------------------------------------------------------

STEPS = """
<Action><Name>guarded</Name>
  <On><Module>amps-action-on-admin</Module><Options>
    <Parameter><Name>min</Name><Default>1</Default></Parameter>
    <Parameter><Name>topic</Name><Default>ok</Default></Parameter>
  </Options></On>
  <If><Module>amps-action-if-condition</Module>
      <Options><Condition>/instance/connections &gt;= {{min}} AND /txlog/journals &gt;= 1</Condition></Options></If>
  <If><Module>amps-action-if-disk-usage</Module>
      <Options><Path>journal</Path><FreeBelow>1024TB</FreeBelow></Options></If>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>{{topic}}</Topic><Data>{"disk":{{AMPS_DISK_PERCENT}}}</Data></Options></Do>
  <Do><Module>amps-action-do-disable-transport</Module><Options><Transport>websocket-json</Transport></Options></Do>
</Action>"""


@scenario
async def test_conditions_over_metrics_and_disk_stop_or_let_the_run_go_on(tmp_path: Path) -> None:
    async with actions_engine(tmp_path, STEPS) as h:
        await h.logon("one")
        stopped = await h.run_admin("guarded", min="5")
        assert stopped.outcome == "stopped"
        assert statuses(stopped) == ["stopped", "not_run", "not_run", "not_run"]
        assert stopped.steps[0].message == (
            "/instance/connections >= 5 AND /txlog/journals >= 1 does not hold"
        )
        assert h.broker.operations.transports_info()[0]["enabled"]

        went = await h.run_admin("guarded")
        assert went.outcome == "succeeded", went.message
        assert statuses(went) == ["ok", "ok", "ok", "ok"]
        disk = went.steps[1]
        assert set(disk.variables) == {
            "AMPS_DISK_PATH",
            "AMPS_DISK_PERCENT",
            "AMPS_DISK_FREE_BYTES",
        }
        assert disk.variables["AMPS_DISK_PATH"] == str(tmp_path / "data" / "journal")
        assert not h.broker.operations.transports_info()[0]["enabled"]
        assert went.steps[3].message == "transport websocket-json disabled"


@scenario
async def test_a_failed_module_stops_the_run_and_says_why(tmp_path: Path) -> None:
    async with actions_engine(tmp_path, STEPS) as h:
        await h.logon("one")
        failed = await h.run_admin("guarded", topic="orders.*")
        assert failed.outcome == "failed"
        assert statuses(failed) == ["ok", "ok", "failed", "not_run"]
        assert failed.message == (
            "step 3 (amps-action-do-publish-message): 'orders.*' cannot be published to "
            "(not a topic name)"
        )
        # the module after it did not run: the transport is still enabled
        assert h.broker.operations.transports_info()[0]["enabled"]
        events = [e for e in h.broker.events.recent(50) if e["category"] == "actions"]
        assert events[-1]["event"] == "run" and events[-1]["level"] == "error"


# -- events -----------------------------------------------------------------------------------

EVENTS = (
    """
<Action><Name>start-chain</Name>
  <On><Module>amps-action-on-admin</Module><Options><Parameter><Name>tag</Name></Parameter></Options></On>
  <Do><Module>amps-action-do-execute-event</Module><Options><Event>e1</Event></Options></Do>
</Action>"""
    + "".join(
        f"""
<Action><Name>link{i}</Name>
  <On><Module>amps-action-on-execute</Module><Options><Event>e{i}</Event></Options></On>
  <Do><Module>amps-action-do-execute-event</Module><Options><Event>e{i + 1}</Event></Options></Do>
</Action>"""
        for i in range(1, 6)
    )
    + """
<Action><Name>self</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <On><Module>amps-action-on-execute</Module><Options><Event>again</Event></Options></On>
  <Do><Module>amps-action-do-execute-event</Module><Options><Event>again</Event></Options></Do>
</Action>"""
)


@scenario
async def test_raised_events_run_their_actions_and_a_loop_ends(tmp_path: Path) -> None:
    async with actions_engine(tmp_path, EVENTS) as h:
        chain = await h.run_admin("start-chain", tag="t1")
        # start-chain raises e1 (depth 1) -> link1 raises e2 ... link3 raises e4 (depth 4)
        # -> link4 may not raise e5: four events already chain to it
        runners = h.broker.actions.runners
        assert [runners[f"link{i}"].runs for i in range(1, 6)] == [1, 1, 1, 1, 0]
        link4 = runners["link4"].recent[-1]
        assert link4.outcome == "failed"
        assert "event 'e5' not raised: 4 events already chain to this run" in link4.message
        # the raising run's variables reach the raised ones
        assert link4.trigger == "amps-action-on-execute" and link4.detail == "event e4"
        assert chain.steps[0].message == "event e1 raised: link1 succeeded"
        assert chain.outcome == "succeeded"

        looped = await h.run_admin("self")
        assert looped.steps[0].message == "event again raised: self skipped (running)"
        assert runners["self"].skipped == 1


# -- schedules at exact times ---------------------------------------------------------------

SCHEDULES = """
<Action><Name>timer</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>15m</Every></Options></On>
  <Do><Module>amps-action-do-enable-transport</Module><Options><Transport>websocket-json</Transport></Options></Do>
</Action>
<Action><Name>paris</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>Daily 02:00</Every><TimeZone>Europe/Paris</TimeZone></Options></On>
  <On><Module>amps-action-on-schedule</Module><Options><Every>Weekly Sun 03:30</Every><TimeZone>America/New_York</TimeZone></Options></On>
  <Do><Module>amps-action-do-enable-transport</Module><Options><Transport>websocket-json</Transport></Options></Do>
</Action>"""


async def step_to(h: EngineHarness, name: str, when: float, runs: int) -> RunRecord:
    """Advance to ``when`` and wait for run number ``runs`` of ``name`` to be recorded.

    One firing at a time: a run records itself in a thread, and a virtual clock moved past
    the next firing meanwhile would (rightly) skip that firing as one that came due during
    a run. The run is counted in its own task; the trigger that awaits it takes its next
    firing (``next_run``) at a later turn of the loop, which is let run before returning.
    """
    await h.clock.advance(when - h.clock.time())
    runner = h.broker.actions.runners[name]
    await h.until(lambda: runner.runs == runs)
    await h.clock.wait_all_blocked()
    return runner.recent[-1]


@scenario
async def test_a_timer_fires_every_interval_from_the_start(tmp_path: Path) -> None:
    async with actions_engine(tmp_path, SCHEDULES) as h:
        start = h.clock.time()
        for k in range(1, 9):
            record = await step_to(h, "timer", start + 900 * k, k)
            assert record.started == pytest.approx(start + 900 * k, abs=EARLY)
            assert record.detail == "every 15m"
        info = h.broker.actions.action_info("timer")
        assert info["next_run"] == datetime.fromtimestamp(start + 900 * 9, UTC).isoformat(
            timespec="milliseconds"
        )


@scenario
async def test_calendar_times_in_named_zones_fire_at_exact_times(tmp_path: Path) -> None:
    async with actions_engine(tmp_path, SCHEDULES) as h:
        # the clock starts on Tuesday 2023-11-14 22:13:20 UTC
        info = h.broker.actions.action_info("paris")
        assert info["next_run"] == "2023-11-15T01:00:00.000+00:00"  # 02:00 CET
        assert [t["description"] for t in info["triggers"]] == [
            "daily at 02:00 Europe/Paris", "Sunday at 03:30 America/New_York",
        ]  # fmt: skip
        # every day at 01:00 UTC, and on Sunday 2023-11-19 at 03:30 EST (08:30 UTC)
        expected = [f"2023-11-{d}T01:00:00+00:00" for d in range(15, 22)]
        expected.insert(5, "2023-11-19T08:30:00+00:00")
        for runs, when in enumerate(expected, start=1):
            instant = datetime.fromisoformat(when).timestamp()
            record = await step_to(h, "paris", instant, runs)
            assert record.started == pytest.approx(instant, abs=EARLY)
            weekly = when.endswith("08:30:00+00:00")
            assert record.detail == (
                "Sunday at 03:30 America/New_York" if weekly else "daily at 02:00 Europe/Paris"
            )
        assert h.broker.actions.runners["paris"].skipped == 0


# -- start-up, shutdown, the shutdown module ------------------------------------------------

LIFECYCLE = """
<Action><Name>boot</Name>
  <On><Module>amps-action-on-startup</Module></On>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>status</Topic><Data>{"up":"{{AMPS_INSTANCE_NAME}}"}</Data></Options></Do>
</Action>
<Action><Name>bye</Name>
  <On><Module>amps-action-on-shutdown</Module></On>
  <Do><Module>amps-action-do-publish-message</Module>
      <Options><Topic>status</Topic><Data>{"down":"{{AMPS_TRIGGER}}"}</Data></Options></Do>
</Action>
<Action><Name>stop</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-shutdown</Module></Do>
</Action>"""


@scenario
async def test_on_startup_runs_before_clients_and_on_shutdown_before_they_are_closed(
    tmp_path: Path,
) -> None:
    h = actions_engine(tmp_path, LIFECYCLE)
    await h.drive(h.broker.start())
    try:
        boot = h.broker.actions.runners["boot"].recent[-1]
        assert boot.outcome == "succeeded" and boot.detail == "start-up"
        names = [(e["category"], e["event"]) for e in h.broker.events.recent(100)]
        assert names.index(("actions", "run")) < names.index(("instance", "started"))
        assert h.last_seq == 1  # the first record of the log is the broker's
        sub = await h.logon("watcher")
        sub.send(({"c": "subscribe", "t": "status", "sub_id": "s", "bm": "0"}, b""))
        await h.until(lambda: len(sub.deliveries("s")) == 1)
        assert orjson.loads(sub.deliveries("s")[0][1]) == {"up": "spool-test"}
    finally:
        await h.drive(h.broker.stop())
    # the shutdown message reached the subscriber before it was closed
    assert [orjson.loads(b) for _, b in sub.deliveries("s")] == [
        {"up": "spool-test"}, {"down": "amps-action-on-shutdown"},
    ]  # fmt: skip
    assert sub.transport.close_reason == "shutting down"


@scenario
async def test_the_shutdown_module_asks_the_host_process_to_stop(tmp_path: Path) -> None:
    async with actions_engine(
        tmp_path, LIFECYCLE.replace("amps-action-on-startup", "amps-action-on-admin")
    ) as h:
        alone = await h.run_admin("stop")
        assert alone.outcome == "failed"
        assert alone.message.endswith("nothing hosts this instance that could stop it")
        asked: list[str] = []
        h.broker.lifecycle.shutdown_hosts.append(asked.append)
        record = await h.run_admin("stop")
        assert record.outcome == "succeeded"
        assert asked == ["action stop"]
        assert h.broker.lifecycle.shutdown_reason == "action stop"


# -- history ----------------------------------------------------------------------------------


@scenario
async def test_runs_are_stored_and_the_last_one_is_shown_after_a_restart(tmp_path: Path) -> None:
    async with actions_engine(tmp_path, ANNOUNCE) as h:
        for who in ("ann", "ben", "cid"):
            await h.run_admin("announce", who=who)
        history = await h.broker.actions.history("announce", 10)
        assert [r["parameters"]["who"] for r in history] == ["cid", "ben", "ann"]
        assert [r["id"] for r in history] == [3, 2, 1]
        assert history[0]["steps"][0]["module"] == "amps-action-do-publish-message"
        last = history[0]
    async with actions_engine(tmp_path, ANNOUNCE) as h:
        info = h.broker.actions.action_info("announce")
        assert info["last_run"] == last
        assert info["runs"] == 0
        assert await h.broker.actions.history(None, 2) == [last, history[1]]
        with pytest.raises(ActionNotFound):
            await h.broker.actions.history("ghost", 1)


@scenario
async def test_a_run_stored_before_runs_had_event_counts_reads_back_without_them(
    tmp_path: Path,
) -> None:
    async with actions_engine(tmp_path, ANNOUNCE) as h:
        run = await h.run_admin("announce", who="ann")
        older = run.to_dict()
        del older["events"]  # the shape of a run stored by an earlier version
        row = ActionRunRow("announce", older["trigger"], 1.0, 2.0, "ok", "tester",
                           orjson.dumps(older).decode())  # fmt: skip
        await h.broker.operations.record_action_run(row)
        history = await h.broker.actions.history("announce", 1)
        assert history[0]["events"] is None
        assert {k: v for k, v in history[0].items() if k not in ("id", "events")} == {
            k: v for k, v in older.items() if k != "id"
        }


# -- disk usage (a real, small file system) ---------------------------------------------------


def disk_actions(watched: Path) -> str:
    return f"""
<Action><Name>full</Name>
  <On><Module>amps-action-on-disk-usage</Module>
      <Options><Path>{watched}</Path><Above>50%</Above><Interval>10s</Interval></Options></On>
  <Do><Module>amps-action-do-execute-event</Module><Options><Event>disk</Event></Options></Do>
</Action>"""


def test_the_disk_usage_trigger_fires_once_per_crossing(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "1m") as small:
        asyncio.run(_disk_scenario(tmp_path, small))


async def _disk_scenario(tmp_path: Path, small: Path) -> None:
    async with actions_engine(tmp_path, disk_actions(small)) as h:
        runner = h.broker.actions.runners["full"]
        watcher = h.broker.actions._disks["full"][0]
        await h.clock.advance(30)
        await h.until(lambda: watcher.checks >= 1)  # read in a thread
        assert runner.runs == 0 and watcher.armed
        (small / "fill").write_bytes(b"x" * 700_000)
        await h.clock.advance(10)
        await h.until(lambda: runner.runs == 1)
        record = runner.recent[-1]
        assert record.trigger == "amps-action-on-disk-usage"
        assert record.detail.startswith(f"{small} ") and "(above 50%)" in record.detail
        assert not watcher.armed
        for _ in range(3):  # still above: no new run
            checks = watcher.checks
            await h.clock.advance(10)
            await h.until(lambda before=checks: watcher.checks > before)
        assert runner.runs == 1 and not watcher.armed
        (small / "fill").unlink()
        await h.clock.advance(10)
        await h.until(lambda: watcher.armed)
        (small / "fill").write_bytes(b"x" * 700_000)
        await h.clock.advance(10)
        await h.until(lambda: runner.runs == 2)


# -- entitlements -----------------------------------------------------------------------------


@scenario
async def test_the_broker_publishes_where_no_user_may(tmp_path: Path) -> None:
    """With <Users>, the broker's own publish is not checked against the entitlements of
    "no user" (which would refuse it): the broker is trusted."""
    users = "<User><Name>feed</Name><Token>feed-token-0123456789</Token><Read>.*</Read></User>"
    async with actions_engine(tmp_path, ANNOUNCE, users=users) as h:
        record = await h.run_admin("announce", who="alice")
        assert record.outcome == "succeeded", record.message
        reader = await h.logon("r", user_id="feed", pw="feed-token-0123456789")
        reader.send(({"c": "subscribe", "t": "ops/alice", "sub_id": "s", "bm": "0"}, b""))
        await h.until(lambda: len(reader.deliveries("s")) == 1)
        # a client without write entitlements is still refused
        reader.send(({"c": "publish", "t": "ops/alice", "a": "processed", "cid": "x"}, b"{}"))
        await h.settle()
        assert [(a["status"], a.get("reason")) for a in reader.acks("processed")] == [
            ("failure", "not entitled")
        ]
