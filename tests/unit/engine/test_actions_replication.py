"""The replication modules of actions, on one virtual clock, between brokers linked by
in-memory pipes (tests/support/fabric.py): a scheduled action downgrades a sync
destination once it is more than ``Age`` behind (releasing the persisted acks that waited
for it) and upgrades it again once it is back and close enough; the
``MinimumSyncDestinations`` floor makes the downgrade a reported refusal, tried again at
every run; a journal policy keeps the journals a down destination has not acknowledged.

Everything but the network is real: both brokers' logs, the publish pipeline, the links,
the sync horizon, the scheduler, and the run history in each stats database.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

from spool.server.actions import RunRecord
from spool.server.actions.runner import ActionRunner
from spool.server.clock import VirtualClock
from tests.support.engine import EngineHarness
from tests.support.fabric import B, drive, fabric_of, persisted, publish, scenario, xml
from tests.support.replication import destination

LINKS = """
<Action><Name>links</Name>
  <On><Module>amps-action-on-schedule</Module><Options><Every>1s</Every></Options></On>
  <Do><Module>amps-action-do-downgrade-replication</Module><Options><Age>5s</Age></Options></Do>
  <Do><Module>amps-action-do-upgrade-replication</Module>
      <Options><Age>2s</Age><Destination>b</Destination></Options></Do>
  <Do><Module>amps-action-do-publish-message</Module><Options><Topic>ops/links</Topic>
      <Data>{"down":"{{AMPS_DESTINATIONS_DOWNGRADED}}","up":"{{AMPS_DESTINATIONS_UPGRADED}}"}</Data>
  </Options></Do>
</Action>"""


async def next_run(clock: VirtualClock, h: EngineHarness, runner: ActionRunner) -> RunRecord:
    """Advance to the action's next firing, then in small steps (the run's publish waits
    for a group commit) until that run is recorded: one firing at a time, so none is
    skipped as having come due during a run."""
    info = h.broker.actions.action_info(runner.name)
    assert info["next_run"] is not None
    when = datetime.fromisoformat(info["next_run"]).timestamp()
    runs = runner.runs
    await clock.advance(max(0.0, when - clock.time()))
    await drive(clock, lambda: runner.runs > runs)
    return runner.recent[-1]


@scenario
async def test_a_scheduled_downgrade_releases_stalled_acks_past_age_and_an_upgrade_restores_sync(
    tmp_path: Path,
) -> None:
    configs = {
        "a": xml(tmp_path, "a", destination("b", [B], exclude="replicate"), actions=LINKS),
        "b": xml(tmp_path, "b"),
    }
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a = h["a"]
        repl = a.broker.replication
        assert repl is not None
        link = repl.destinations["b"]
        runner = a.broker.actions.runners["links"]
        await drive(clock, lambda: link.connected)
        pub = await a.logon("pub")
        publish(pub, "orders", range(1, 11))
        await drive(clock, lambda: persisted(pub) == 10)
        record = await next_run(clock, a, runner)
        assert [s.status for s in record.steps] == ["ok", "ok", "ok"]
        assert record.steps[0].message == "no sync destination is more than 5s behind"

        fabric.cut(B)
        await drive(clock, lambda: not link.connected)
        t0 = clock.time()
        publish(pub, "orders", range(11, 21))
        await a.commit()
        # durable here, but b is down: the acks wait for it until a run finds it > 5 s behind
        while True:
            record = await next_run(clock, a, runner)
            behind = record.started - t0
            if record.steps[0].message.startswith("downgraded"):
                break
            assert behind <= 5.0 + 1e-3, f"not downgraded {behind:.3f} s behind"
            assert persisted(pub) == 10
            assert link.sync.effective == "sync"
        assert 5.0 < behind <= 6.0 + 1e-3  # the first run past Age
        assert record.steps[0].message.startswith("downgraded b (")
        assert record.steps[0].variables == {"AMPS_DESTINATIONS_DOWNGRADED": "b"}
        assert link.sync.effective == "async"
        await drive(clock, lambda: persisted(pub) == 20)  # released
        # b is still down: the upgrade waits for it to be connected
        record = await next_run(clock, a, runner)
        assert record.steps[0].message == "no sync destination is more than 5s behind"
        assert record.steps[1].message == (
            "no downgraded destination is connected and less than 2s behind"
        )
        assert link.sync.effective == "async"

        # b comes back and catches up; a run upgrades it, and acks wait for it again
        fabric.heal(B)
        await drive(clock, lambda: link.connected)

        def upgrades() -> list[RunRecord]:
            return [r for r in runner.recent if r.steps[1].message.startswith("upgraded b (")]

        await drive(clock, lambda: upgrades() and link.sync.effective == "sync")
        assert len(upgrades()) == 1
        assert upgrades()[0].steps[1].message.endswith("s behind): sync again once caught up")
        assert upgrades()[0].steps[1].variables == {"AMPS_DESTINATIONS_UPGRADED": "b"}
        events = [e.event for e in repl.history.recent("out", "b")]
        assert events.index("downgraded") < events.index("upgrading") < events.index("upgraded")
        fabric.cut(B)
        await drive(clock, lambda: not link.connected)
        publish(pub, "orders", range(21, 26))
        await a.commit()
        record = await next_run(clock, a, runner)
        assert persisted(pub) == 20  # sync again: the acks wait for b
        fabric.heal(B)
        await drive(clock, lambda: persisted(pub) == 25)
        # every run is in the history with its per-module results
        assert all(len(r.steps) == 3 for r in runner.recent)


@scenario
async def test_the_sync_floor_turns_a_due_downgrade_into_a_refusal_retried_every_run(
    tmp_path: Path,
) -> None:
    configs = {
        "a": xml(
            tmp_path, "a", destination("b", [B], exclude="replicate"), actions=LINKS,
            tuning="<MinimumSyncDestinations>1</MinimumSyncDestinations>",
        ),
        "b": xml(tmp_path, "b"),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a = h["a"]
        repl = a.broker.replication
        assert repl is not None
        link = repl.destinations["b"]
        runner = a.broker.actions.runners["links"]
        await drive(clock, lambda: link.connected)
        pub = await a.logon("pub")
        fabric.cut(B)
        await drive(clock, lambda: not link.connected)
        t0 = clock.time()
        publish(pub, "orders", range(1, 6))
        await a.commit()
        refused = 0
        while refused < 3:
            record = await next_run(clock, a, runner)
            if record.started - t0 > 5.0 + 1e-3:
                step = record.steps[0]
                assert step.status == "partial", step.message
                assert (
                    "refused: b: downgrading 'b' would leave 0 sync destinations, below "
                    "Tuning/MinimumSyncDestinations (1)" in step.message
                )
                assert "(tried again next run)" in step.message
                assert record.outcome == "partial"
                refused += 1
            assert link.sync.effective == "sync"
            assert persisted(pub) == 0
        fabric.heal(B)
        await drive(clock, lambda: persisted(pub) == 5)


TRIM = """
<Action><Name>trim</Name>
  <On><Module>amps-action-on-admin</Module></On>
  <Do><Module>amps-action-do-remove-journal</Module><Options><Count>1</Count></Options></Do>
</Action>"""


@scenario
async def test_journals_an_unacknowledged_destination_still_needs_are_kept_until_it_has_them(
    tmp_path: Path,
) -> None:
    """The journal modules respect the pin of a replication destination: what a down
    destination has not acknowledged is not removed (the step is partial and names it);
    once it is back and has caught up, the next run removes them."""
    configs = {
        "a": xml(
            tmp_path, "a", destination("b", [B], sync=False, exclude="replicate"),
            actions=TRIM, journal_size="1MB",
        ),
        "b": xml(tmp_path, "b"),
    }  # fmt: skip
    async with fabric_of(tmp_path, configs) as (fabric, clock, h):
        a = h["a"]
        repl = a.broker.replication
        txlog = a.broker.txlog
        assert repl is not None and txlog is not None
        link = repl.destinations["b"]
        await drive(clock, lambda: link.connected)
        fabric.cut(B)
        await drive(clock, lambda: not link.connected)
        pub = await a.logon("pub")
        body = b'{"pad":"' + b"x" * 200_000 + b'"}'
        pub.send(*[({"c": "publish", "t": "orders", "s": s, "a": "persisted"}, body)
                   for s in range(1, 16)])  # fmt: skip
        await drive(clock, lambda: persisted(pub) == 15)  # async: no wait for b
        closed = [j.id for j in txlog.journals() if j.state == "closed"]
        assert len(closed) >= 2

        async def trim() -> RunRecord:
            task = asyncio.ensure_future(a.broker.actions.run_admin("trim", {}, "ops"))
            await drive(clock, task.done)
            return task.result()

        record = await trim()
        step = record.steps[0]
        assert (step.status, step.journals) == ("partial", [])
        assert {p["owner"] for p in step.pinned} == {"replication:b"}
        assert [p["journal"] for p in step.pinned] == closed
        assert "still needed by replication:b" in step.message
        assert [j.id for j in txlog.journals() if j.state == "closed"] == closed

        fabric.heal(B)
        await drive(clock, lambda: link.connected and link.acked >= txlog.durable_seq)
        record = await trim()
        step = record.steps[0]
        assert (step.status, step.journals, step.pinned) == ("ok", closed, [])
        assert not [j for j in txlog.journals() if j.state == "closed"]
