"""Alert rules: the state machine against a model, and a queue rule on the in-process
engine (virtual clock) firing, showing and clearing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from spool.server.alertrules import RuleMachine, describe
from spool.server.config import AlertRuleConfig
from spool.server.metrics import AlertRuleGauges
from tests.support.engine import EngineHarness


def rule(hold: float, *, above: bool = True, threshold: float = 10.0) -> AlertRuleConfig:
    return AlertRuleConfig(
        name="r", metric="queue_age", measure="seconds", above=above, threshold=threshold,
        hold=hold,
    )  # fmt: skip


def test_a_rule_is_pending_until_it_held_for_its_duration_then_fires_and_clears() -> None:
    m = RuleMachine(rule(hold=5.0))
    assert m.state == "inactive"
    assert m.observe(3.0, 0.0) is None and m.state == "inactive"
    assert m.observe(11.0, 1.0) is None and m.state == "pending"
    assert m.held_at == 1.0
    assert m.observe(12.0, 5.9) is None and m.state == "pending"
    assert m.observe(13.0, 6.0) == "fired" and m.state == "firing"
    assert m.observe(14.0, 7.0) is None and m.state == "firing"
    assert m.observe(10.0, 8.0) == "cleared" and m.state == "inactive"
    assert (m.held_at, m.fired_at, m.value) == (None, None, 10.0)


def test_a_flapping_value_starts_the_wait_again_and_a_pending_rule_clears_silently() -> None:
    m = RuleMachine(rule(hold=2.0))
    assert m.observe(11.0, 0.0) is None
    assert m.observe(9.0, 1.5) is None and m.state == "inactive"
    assert m.observe(11.0, 2.0) is None and m.state == "pending"
    assert m.observe(11.0, 3.5) is None and m.state == "pending"
    assert m.observe(11.0, 4.0) == "fired"


def test_without_for_the_first_holding_value_fires_and_unknown_values_never_hold() -> None:
    m = RuleMachine(rule(hold=0.0, above=False, threshold=5.0))
    assert m.observe(None, 0.0) is None and m.state == "inactive"
    assert m.observe(float("nan"), 1.0) is None and m.state == "inactive"
    assert m.observe(4.0, 2.0) == "fired"
    assert m.observe(None, 3.0) == "cleared"


@given(
    hold=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    steps=st.lists(
        st.tuples(st.booleans(), st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0])), max_size=40
    ),
)
def test_the_machine_follows_the_model(hold: float, steps: list[tuple[bool, float]]) -> None:
    """Firing exactly when every value since the run began held and the run is at least
    ``For`` long; one ``fired`` per run, one ``cleared`` when a firing run ends."""
    m = RuleMachine(rule(hold=hold))
    now = 0.0
    run_start: float | None = None
    firing = False
    for holds, dt in steps:
        now += dt
        transition = m.observe(11.0 if holds else 1.0, now)
        if not holds:
            assert transition == ("cleared" if firing else None)
            run_start, firing = None, False
            assert m.state == "inactive"
            continue
        if run_start is None:
            run_start = now
        should_fire = now - run_start >= hold
        assert transition == ("fired" if should_fire and not firing else None)
        firing = should_fire
        assert m.state == ("firing" if firing else "pending")
        assert m.held_at == run_start


def test_values_are_shown_in_the_unit_of_their_threshold() -> None:
    r = rule(hold=0.0)
    assert describe(r, 12.3456) == "12.3s"
    assert describe(r, 5.0) == "5s"
    assert describe(r, 150.4) == "150s"
    disk = AlertRuleConfig("d", "disk_free", "bytes", False, 10 * 1024**3)
    assert describe(disk, disk.threshold) == "10GB"
    assert describe(AlertRuleConfig("p", "disk_free", "percent", False, 5.0), 4.25) == "4.25%"
    lag = AlertRuleConfig("l", "subscription_lag", "messages", True, 5000.0)
    assert describe(lag, 7000.0) == "7000 messages"
    rate = AlertRuleConfig("q", "publish_rate_drop", "per_second", False, 100.0)
    assert describe(rate, 12.5) == "12.5/s"


QUEUE = (
    "<Queue><Name>work</Name><MessageType>json</MessageType>"
    "<UnderlyingTopic>work-in</UnderlyingTopic><LeasePeriod>30s</LeasePeriod></Queue>"
)
RULES = (
    "<Alerts><Rule><Name>work-old</Name><Metric>queue_age</Metric><Queue>work</Queue>"
    "<Above>5s</Above><For>2s</For><Level>error</Level></Rule>"
    "<Rule><Name>slow-in</Name><Metric>publish_rate_drop</Metric><Below>1000/s</Below>"
    "</Rule></Alerts>"
)


def test_a_queue_rule_fires_on_the_engine_and_clears_when_the_message_is_consumed(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with EngineHarness(
            tmp_path, sow=QUEUE, admin_extra=RULES, flush_interval="10ms"
        ) as h:
            ops = h.broker.operations
            rules = h.broker.alert_rules
            pub = await h.logon("pub")
            pub.send(({"c": "publish", "t": "work-in"}, b'{"n":1}'))
            await h.commit()

            def states() -> dict[str, str]:
                return {r["name"]: r["state"] for r in ops.alert_rules_info()}

            await h.clock.advance(5.0)
            assert states()["work-old"] == "inactive"  # 5s old: not above 5s yet
            # the rate rule has no value before a second evaluation, then fires at once
            assert states()["slow-in"] == "firing"
            await h.clock.advance(1.0)
            assert states()["work-old"] == "pending"
            info = next(r for r in ops.alert_rules_info() if r["name"] == "work-old")
            assert info["since"] is not None and info["value"] is not None
            assert info["value"] > 5.0 and info["threshold_text"] == "5s"
            assert ops.health() == {"status": "ok"}
            await h.clock.advance(2.0)
            assert states()["work-old"] == "firing"
            alert = next(a for a in ops.alerts() if a["id"] == "rule-work-old")
            assert alert["level"] == "error"
            assert "queue work" in alert["message"] and "above 5s for 2s" in alert["message"]
            assert ops.health()["status"] == "degraded"
            assert {"id": "rule-work-old", "title": "Alert rule work-old"} in ops.health()[
                "reasons"
            ]
            fired = [e for e in h.broker.events.recent() if e["event"] == "alert_fired"]
            assert [e["rule"] for e in fired] == ["slow-in", "work-old"]
            assert fired[1]["level"] == "error" and fired[1]["category"] == "alert"
            assert fired[1]["threshold"] == 5.0 and fired[1]["metric_value"] > 5.0
            gauges = {name: (fires, value) for name, fires, value in rules.gauges()}
            assert gauges["work-old"][0] is True
            families = {f.name: f for f in AlertRuleGauges(rules).collect()}
            assert {s.labels["rule"]: s.value for s in families["spool_alert_firing"].samples} == {
                "work-old": 1.0,
                "slow-in": 1.0,
            }
            # a consumer takes the message and acks it: the rule clears at the next tick
            c = await h.logon("worker")
            c.send(({"c": "subscribe", "t": "work", "sub_id": "s", "a": "processed"}, b""))
            await h.settle()
            delivered: list[tuple[dict[str, Any], bytes]] = c.deliveries("s")
            assert [orjson.loads(b)["n"] for _, b in delivered] == [1]
            c.send(({"c": "sow_delete", "t": "work", "bm": delivered[0][0]["bm"]}, b""))
            await h.commit()
            await h.clock.advance(1.0)
            assert states()["work-old"] == "inactive"
            assert not [a for a in ops.alerts() if a["id"] == "rule-work-old"]
            cleared = [e for e in h.broker.events.recent() if e["event"] == "alert_cleared"]
            assert [e["rule"] for e in cleared] == ["work-old"]

    asyncio.run(scenario())
