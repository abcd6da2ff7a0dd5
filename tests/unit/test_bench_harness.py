"""The benchmark harness's own machinery: statistics, JSON history, report, codecs, workers.

No timing is asserted anywhere: these tests check that the numbers the suite prints are
computed and stored correctly, not how fast anything is.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.config import OnPublishMessage, PublishMessage, parse_config
from spool.server.expr import compile_filter
from spool.server.protocol.frame import parse_frame
from tests.bench import delayed_family, triggers_family
from tests.bench.bodies import (
    POOL,
    STAMP_RE,
    PublishEncoder,
    body_pool,
    make_body,
    stamped_body,
)
from tests.bench.catalog import (
    COMPARISONS,
    SCENARIOS,
    ScenarioSpec,
    Target,
    format_number,
    select,
)
from tests.bench.cli import FAMILIES
from tests.bench.features import (
    FeatureBenchError,
    discover,
    parse_output,
    quick_timeout,
    run_module,
)
from tests.bench.pairing import combined, pair_order
from tests.bench.peer_workers import mqtt_connect_packet, mqtt_publish_packet
from tests.bench.processes import Gate, Task, WorkerError, run_tasks
from tests.bench.profiling import frame_key, summarize_collapsed
from tests.bench.report import compare, format_markdown, format_table
from tests.bench.results import ScenarioResult, append_run, load_runs
from tests.bench.stats import higher_is_better, latency_summary, percentile, summarize
from tests.bench.tls_family import paired_metrics
from tests.bench.wire import scan_acks
from tests.support.server import config_xml

# -- statistics ----------------------------------------------------------------------------


def test_summarize_median_and_spread() -> None:
    s = summarize([100.0, 120.0, 80.0])
    assert s.median == 100.0
    assert (s.minimum, s.maximum) == (80.0, 120.0)
    assert s.spread_pct == pytest.approx(40.0)
    assert s.stdev == pytest.approx(20.0)
    assert s.values == (100.0, 120.0, 80.0)


def test_summarize_single_run_has_no_spread() -> None:
    s = summarize([42.0])
    assert (s.median, s.spread_pct, s.stdev) == (42.0, 0.0, 0.0)


def test_summarize_rejects_empty_and_non_finite() -> None:
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([1.0, math.nan])
    with pytest.raises(ValueError):
        summarize([math.inf])


def test_spread_with_zero_median_is_infinite_and_null_in_json() -> None:
    s = summarize([-1.0, 0.0, 1.0])
    assert s.spread_pct == math.inf
    assert s.as_dict()["spread_pct"] is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=300),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_percentile_is_nearest_rank(values: list[int], q: float) -> None:
    ordered = sorted(values)
    p = percentile(ordered, q)
    assert p in ordered
    n = len(ordered)
    # nearest rank: at least q of the samples are <= p, and fewer than q are < p
    assert sum(v <= p for v in ordered) >= q * n - 1e-9
    assert sum(v < p for v in ordered) < max(q * n, 1)


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


def test_latency_summary_in_milliseconds() -> None:
    samples = [i * 1_000_000 for i in range(1, 1001)]  # 1..1000 ms
    out = latency_summary(samples)
    assert out["p50_ms"] == 500.0
    assert out["p99_ms"] == 990.0
    assert out["p999_ms"] == 999.0
    assert out["max_ms"] == 1000.0
    assert out["mean_ms"] == pytest.approx(500.5)
    assert out["samples"] == 1000.0
    with pytest.raises(ValueError):
        latency_summary([])


def test_metric_direction_from_unit_suffix() -> None:
    assert higher_is_better("msgs_per_s") is True
    assert higher_is_better("p99_ms") is False
    assert higher_is_better("stop_restart_s") is False
    assert higher_is_better("rss_kib_per_connection") is False
    assert higher_is_better("samples") is None


def test_format_number() -> None:
    assert format_number(123456.7) == "123,457"
    assert format_number(1.23456) == "1.23"
    assert format_number(0) == "0"
    assert format_number(math.nan) == "nan"


# -- catalog -------------------------------------------------------------------------------


def test_scenario_names_unique_and_targets_shown() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names))
    for spec in SCENARIOS:
        for t in spec.targets:
            assert t.metric in spec.headline, (spec.name, t.metric)


def test_comparisons_name_existing_scenarios() -> None:
    names = {s.name for s in SCENARIOS}
    for c in COMPARISONS:
        assert c.spool in names and c.peer in names, c


def test_issue_targets_are_present() -> None:
    by_name = {s.name: s for s in SCENARIOS}
    wanted = {
        ("spool.fanout.1to1.100B", "delivered_msgs_per_s", 100_000),
        ("spool.fanout.1to100.100B", "delivered_msgs_per_s", 300_000),
        ("spool.latency.10k.100B", "p99_ms", 5),
        ("spool.publish.persisted.100B", "msgs_per_s", 100_000),
        ("spool.persisted_ack_latency.20k.100B", "p99_ms", 10),
        ("spool.restart.100B", "stop_restart_s", 3),
        ("spool.replay.epoch.100B", "msgs_per_s", 300_000),
        ("spool.replay.filter10.100B", "scanned_msgs_per_s", 300_000),
    }
    for name, metric, value in wanted:
        assert any(t.metric == metric and t.value == value for t in by_name[name].targets)


def test_select_only_and_skip() -> None:
    chosen = select(SCENARIOS, only=["^spool\\.replay"], skip=["1KB"])
    assert [s.name for s in chosen] == ["spool.replay.epoch.100B", "spool.replay.filter10.100B"]
    assert select(SCENARIOS) == list(SCENARIOS)


def test_target_verdict() -> None:
    assert Target("msgs_per_s", ">=", 10, "x").met(10)
    assert not Target("msgs_per_s", ">=", 10, "x").met(9.9)
    assert Target("p99_ms", "<", 5, "x").met(4.9)
    assert not Target("p99_ms", "<", 5, "x").met(5)


# -- results and report --------------------------------------------------------------------

_SPEC = ScenarioSpec(
    "spool.publish.persisted.100B",
    "publish",
    "t",
    {"body_bytes": 100},
    ("msgs_per_s",),
    (Target("msgs_per_s", ">=", 100_000, "persisted publishing"),),
)
_PEER = ScenarioSpec("redis.xadd.everysec.100B", "redis", "t", {}, ("msgs_per_s",))


def _record(results: list[ScenarioResult]) -> dict[str, Any]:
    scenarios = [r.as_dict() for r in results]
    return {
        "started_at": "2030-01-01T00:00:00+00:00",
        "duration_s": 12.0,
        "quick": True,
        "machine": {"cpu_model": "cpu", "logical_cpus": 2, "memory_bytes": 2**34},
        "git": {"commit": "abc", "dirty": False},
        "scenarios": scenarios,
        "comparisons": compare(scenarios),
    }


def test_scenario_result_metrics_and_verdicts() -> None:
    res = ScenarioResult(_SPEC, runs=[{"msgs_per_s": 90_000.0}, {"msgs_per_s": 110_000.0}])
    res.runs.append({"msgs_per_s": 120_000.0})
    assert res.metrics()["msgs_per_s"].median == 110_000.0
    ((target, observed, met),) = res.target_verdicts()
    assert (target.metric, observed, met) == ("msgs_per_s", 110_000.0, True)
    d = res.as_dict()
    assert d["metrics"]["msgs_per_s"]["values"] == [90_000.0, 110_000.0, 120_000.0]
    assert d["targets"][0]["met"] is True


def test_compare_ratio_goal_and_missing_side() -> None:
    spool = ScenarioResult(_SPEC, runs=[{"msgs_per_s": 150.0}])
    peer = ScenarioResult(_PEER, runs=[{"msgs_per_s": 100.0}])
    rows = {r["label"]: r for r in compare([spool.as_dict(), peer.as_dict()])}
    row = rows["persisted publish 100B vs Redis everysec"]
    assert row["ratio"] == pytest.approx(1.5)
    assert row["goal_met"] is True
    missing = ScenarioResult(_PEER, status="missing", reason="redis-server not found")
    rows = {r["label"]: r for r in compare([spool.as_dict(), missing.as_dict()])}
    row = rows["persisted publish 100B vs Redis everysec"]
    assert row["ratio"] is None and "redis-server not found" in row["reason"]


_TLS_REPLAY = next(sp for sp in SCENARIOS if sp.name == "spool.tls.replay.epoch.100B")
_PAIRED = "replay from start 100B over wss:// vs ws:// (alternating runs, same load)"


def test_paired_tls_replay_is_its_own_peer() -> None:
    """The TLS replay's goal ratio divides its TLS rate by the plain rate measured in the
    same runs, not by the replay family's figure of another time."""
    runs = [
        paired_metrics(
            {"msgs_per_s": tls, "broker_cpu_us": 1.2, "client_cpu_us": 0.4},
            {"msgs_per_s": plain, "broker_cpu_us": 1.0, "client_cpu_us": 0.3},
        )
        for tls, plain in ((800.0, 1000.0), (900.0, 1000.0), (700.0, 1000.0))
    ]
    assert [r["vs_plain"] for r in runs] == pytest.approx([0.8, 0.9, 0.7])
    assert runs[0]["plain_broker_cpu_us"] == 1.0 and runs[0]["broker_cpu_us"] == 1.2
    assert runs[0]["plain_client_cpu_us"] == 0.3
    assert runs[0]["cpu_vs_plain"] == pytest.approx(1.3 / 1.6)
    tls = ScenarioResult(_TLS_REPLAY, runs=runs)
    rows = {r["label"]: r for r in compare([tls.as_dict()])}
    row = rows[_PAIRED]
    assert (row["spool_value"], row["peer_value"]) == (800.0, 1000.0)
    assert row["ratio"] == pytest.approx(0.8) and row["goal_met"] is True
    assert row["peer_metric"] == "plain_msgs_per_s"
    # the cross-family line needs the replay family: not selected, nothing said
    assert not any("replay family" in label for label in rows)
    slow = ScenarioResult(_TLS_REPLAY, runs=[{**runs[2]}])
    (row,) = [r for r in compare([slow.as_dict()]) if r["label"] == _PAIRED]
    assert row["ratio"] == pytest.approx(0.7) and row["goal_met"] is False


_SYNC = next(sp for sp in SCENARIOS if sp.name == "spool.replication.persisted.sync.100B")
_SYNC_PAIRED = (
    "replicated (sync) vs unreplicated persisted publish 100B (alternating runs, same load)"
)


def test_paired_sync_publish_is_its_own_peer() -> None:
    """The sync goal divides the replicated rate by the unreplicated rate of the same runs;
    the median of each side over the runs, as every goal ratio."""
    runs = [
        {"msgs_per_s": sync, "unreplicated_msgs_per_s": plain, "vs_unreplicated": sync / plain}
        for sync, plain in ((180.0, 300.0), (150.0, 200.0), (120.0, 310.0))
    ]
    rows = {r["label"]: r for r in compare([ScenarioResult(_SYNC, runs=runs).as_dict()])}
    row = rows[_SYNC_PAIRED]
    assert (row["spool_value"], row["peer_value"]) == (150.0, 300.0)
    assert row["ratio"] == pytest.approx(0.5) and row["goal_met"] is False
    assert row["peer_metric"] == "unreplicated_msgs_per_s"
    fast = [{**r, "msgs_per_s": r["msgs_per_s"] * 1.3} for r in runs]
    (row,) = [
        r
        for r in compare([ScenarioResult(_SYNC, runs=fast).as_dict()])
        if r["label"] == _SYNC_PAIRED
    ]
    assert row["ratio"] == pytest.approx(0.65) and row["goal_met"] is True


def test_every_scenario_has_a_family_runner() -> None:
    assert {s.family for s in SCENARIOS} <= set(FAMILIES)
    assert FAMILIES["triggers"] is triggers_family.run_triggers


def test_the_delayed_family_is_selected_by_its_prefix_and_holds_the_p99_goal() -> None:
    chosen = select(SCENARIOS, only=[r"spool\.delayed"])
    assert [s.name for s in chosen] == [
        "spool.delayed.lateness.paced",
        "spool.delayed.lateness.burst",
    ]
    assert FAMILIES["delayed"] is delayed_family.run_delayed
    (goal,) = chosen[0].targets
    assert (goal.metric, goal.op, goal.value) == ("p99_ms", "<", 50.0)


def test_delayed_lateness_counts_early_deliveries_and_the_burst_drains_from_its_due() -> None:
    lateness = [-1_000_000, 2_000_000, 3_000_000, 40_000_000]
    out = delayed_family.lateness_metrics(lateness)
    assert out["p50_ms"] == 2.0 and out["max_ms"] == 40.0
    assert out["min_ms"] == -1.0 and out["early"] == 1.0 and out["samples"] == 4.0
    due_us = 1_000_000
    sub = {"count": 4, "lateness_ns": lateness, "first_ns": due_us * 1000 + 1_000_000,
           "last_ns": due_us * 1000 + 500_000_000}  # fmt: skip
    burst = delayed_family.burst_metrics(sub, {"due_us": due_us, "stored_ahead_s": 3.5})
    assert burst["first_ms"] == 1.0 and burst["last_ms"] == 500.0
    assert burst["drain_msgs_per_s"] == 8.0 and burst["stored_ahead_s"] == 3.5


def _triggers_on() -> dict[str, tuple[OnPublishMessage, PublishMessage]]:
    """The trigger and step of each action of the ``triggers-on`` broker, by name."""
    config = parse_config(
        config_xml(Path("/nonexistent/data"), actions=triggers_family.actions_xml())
    )
    out = {}
    for action in config.actions:
        (trigger,) = action.triggers
        (step,) = action.steps
        assert isinstance(trigger, OnPublishMessage) and isinstance(step, PublishMessage)
        out[action.name] = (trigger, step)
    return out


def test_the_triggers_brokers_actions_match_only_their_own_cases_topics() -> None:
    """The acceptance case's sixteen actions never match a topic the family publishes; the
    filtered ones match their case's topics and their filter holds for no bench body; the
    derive action matches its case's topics and what it derives matches no action."""
    actions = _triggers_on()
    n = triggers_family.ACTIONS_EACH
    assert len(actions) == 2 * n + 1
    published = [f"{prefix}/r7" for prefix in triggers_family.TOPICS.values()]
    assert published[0] == "bench/pub/r7"  # the publish family's topics
    bodies = body_pool(100, 1)
    for i in range(n):
        trigger, _ = actions[f"nomatch-{i}"]
        assert not any(trigger.topic.matches(t) for t in published)
        trigger, _ = actions[f"filtered-{i}"]
        assert [trigger.topic.matches(t) for t in published] == [False, True, False]
        assert trigger.filter is not None
        flt = compile_filter(trigger.filter)
        assert flt.select([published[1]] * len(bodies), bodies, range(len(bodies))) == []
    trigger, step = actions["derive"]
    assert [trigger.topic.matches(t) for t in published] == [False, False, True]
    assert trigger.filter is None
    assert not any(t.topic.matches(step.topic.text) for t, _ in actions.values())


_TRIGGERS = next(sp for sp in SCENARIOS if sp.name == "spool.triggers.publish.persisted.100B")
_TRIGGERS_PAIRED = (
    "persisted publish 100B with actions whose triggers match nothing vs without "
    "(alternating runs, same load)"
)


def test_the_triggers_goal_divides_by_the_rate_without_actions_of_the_same_runs() -> None:
    assert Target("vs_triggers_off", ">=", 0.97, "message-driven actions") in _TRIGGERS.targets
    runs = [
        triggers_family.paired_metrics(
            {"msgs_per_s": on, "elapsed_s": 5.0}, {"msgs_per_s": off, "elapsed_s": 4.0}
        )
        for on, off in ((97.0, 100.0), (90.0, 100.0), (99.0, 100.0))
    ]
    assert [r["vs_triggers_off"] for r in runs] == pytest.approx([0.97, 0.9, 0.99])
    assert runs[0]["elapsed_s"] == 5.0 and runs[0]["triggers_off_msgs_per_s"] == 100.0
    rows = {r["label"]: r for r in compare([ScenarioResult(_TRIGGERS, runs=runs).as_dict()])}
    row = rows[_TRIGGERS_PAIRED]
    assert (row["spool_value"], row["peer_value"]) == (97.0, 100.0)
    assert row["ratio"] == pytest.approx(0.97) and row["goal_met"] is True
    assert row["peer_metric"] == "triggers_off_msgs_per_s"
    ((_, observed, met),) = ScenarioResult(_TRIGGERS, runs=runs).target_verdicts()
    assert observed == pytest.approx(0.97) and met


def test_action_tallies_are_summed_by_name_and_differenced() -> None:
    listed: list[dict[str, object]] = [
        {"name": "filtered-0", "events": {"offered": 10, "dropped": 2, "matched": 0}},
        {"name": "filtered-1", "events": {"offered": 10, "dropped": 0, "matched": 0}},
        {"name": "derive", "events": {"offered": 5, "runs": 5}},
        {"name": "retention", "events": None},
    ]
    assert triggers_family.tally(listed, "filtered-") == {"offered": 20, "dropped": 2, "matched": 0}
    assert triggers_family.tally(listed, "")["offered"] == 25
    assert triggers_family.moved({"offered": 5, "runs": 1}, {"offered": 9, "runs": 4}) == {
        "offered": 4,
        "runs": 3,
    }


def test_the_derive_case_waits_for_every_message_to_be_fired_dropped_or_cut() -> None:
    settled = triggers_family.derive_settled
    assert not settled({"offered": 90, "runs": 90}, 100)  # not all offered yet
    assert not settled({"offered": 100, "runs": 60, "dropped": 30}, 100)  # 10 still queued
    assert settled({"offered": 100, "runs": 60, "dropped": 30, "loop_cut": 10}, 100)
    metrics = triggers_family.derive_metrics(
        1000, 2.0, 4.0, {"derived": 800, "dropped": 200, "failed": 0}
    )
    assert metrics["msgs_per_s"] == 500.0 and metrics["derived_per_s"] == 200.0
    assert (metrics["dropped"], metrics["catch_up_s"]) == (200.0, 2.0)


def test_paired_tls_replays_run_abba_and_alternate_which_side_goes_first() -> None:
    assert pair_order(0) == (False, True, True, False)
    assert pair_order(1) == (True, False, False, True)
    assert pair_order(2) == pair_order(0)


def test_paired_tls_replays_combine_rates_harmonically() -> None:
    """Two replays of the same log: the side's rate is all messages over all the time."""
    one = combined([{"msgs_per_s": 1000.0, "broker_cpu_us": 1.0},
                    {"msgs_per_s": 500.0, "broker_cpu_us": 2.0}])  # fmt: skip
    assert one["msgs_per_s"] == pytest.approx(2 / (1 / 1000 + 1 / 500))
    assert one["broker_cpu_us"] == pytest.approx(1.5)


def test_table_and_markdown_show_values_targets_and_failures() -> None:
    ok = ScenarioResult(_SPEC, runs=[{"msgs_per_s": 90_000.0}, {"msgs_per_s": 80_000.0}])
    bad = ScenarioResult(_PEER, status="missing", reason="redis-server not found")
    record = _record([ok, bad])
    table = format_table(record)
    assert "spool.publish.persisted.100B" in table
    assert "85,000" in table
    assert ">= 100,000 MISSED" in table
    assert re.search(r"redis\.xadd\.everysec\.100B +MISSING: redis-server not found", table)
    assert "QUICK" in table
    md = format_markdown(record)
    assert "| `spool.publish.persisted.100B` | msgs_per_s | 85,000 |" in md
    assert "MISSING" in md


def test_append_run_keeps_history(tmp_path: Path) -> None:
    out = tmp_path / "bench-results.json"
    assert append_run(out, {"n": 1}) is None
    assert append_run(out, {"n": 2, "x": math.inf}) is None
    runs = load_runs(out)
    assert runs == [{"n": 1}, {"n": 2, "x": None}]
    json.loads(out.read_text(), parse_constant=_no_constants)  # strict JSON
    assert not list(tmp_path.glob("*.tmp"))


def _no_constants(name: str) -> None:
    raise AssertionError(f"non-standard JSON constant {name}")


def test_append_run_moves_unreadable_file_aside(tmp_path: Path) -> None:
    out = tmp_path / "bench-results.json"
    out.write_text("{not json")
    moved = append_run(out, {"n": 1})
    assert moved is not None and moved.read_text() == "{not json"
    assert load_runs(out) == [{"n": 1}]


# -- profiles ------------------------------------------------------------------------------


def test_collapsed_stack_summary(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    text = "\n".join(
        [
            f"run (/usr/lib/python3.11/asyncio/base_events.py:1);"
            f"receive ({root}/server/session.py:10);parse_frame ({root}/server/protocol/frame.py:5) 6",
            f"run (/usr/lib/python3.11/asyncio/base_events.py:1);"
            f"receive ({root}/server/session.py:10);receive ({root}/server/session.py:12) 2",
            "send (/x/site-packages/websockets/protocol.py:3) 2",
        ]
    )
    s = summarize_collapsed(text, root=root)
    assert s.samples == 10
    top = {h.key: h for h in s.by_self}
    assert top["server/protocol/frame.py:parse_frame"].self_pct == pytest.approx(60.0)
    assert top["websockets/protocol.py:send"].self_pct == pytest.approx(20.0)
    assert top["server/session.py:receive"].self_pct == pytest.approx(20.0)
    # the recursive frame counts once per stack for the inclusive share
    assert top["server/session.py:receive"].inclusive_pct == pytest.approx(80.0)
    proj = {h.key: h.self_pct for h in s.by_project}
    # library time is charged to the innermost project frame; stacks without one to nobody
    assert proj == {
        "server/protocol/frame.py:parse_frame": pytest.approx(60.0),
        "server/session.py:receive": pytest.approx(20.0),
    }
    assert frame_key("f (/usr/lib/python3.11/json/decoder.py:3)") == "stdlib/json/decoder.py:f"
    assert summarize_collapsed("").samples == 0


# -- bodies and codecs ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [100, 1024])
def test_bodies_exact_size_json_and_filter_field(size: int) -> None:
    pool = body_pool(size, seed=7)
    assert len(pool) == POOL
    assert pool == body_pool(size, seed=7)  # fixed seed, same bytes
    assert pool != body_pool(size, seed=8)
    for i, body in enumerate(pool):
        assert len(body) == size
        assert orjson.loads(body)["k"] == i % 10
    with pytest.raises(ValueError):
        make_body(0, 50, __import__("random").Random(1))


def test_publish_frames_parse_with_the_protocol_codec() -> None:
    pool = body_pool(100, seed=1)
    enc = PublishEncoder("bench/t", persisted=True)
    frame = enc.frame(11, pool, 998, 5)
    parsed = parse_frame(frame)
    assert parsed.error is None
    assert [m.header["s"] for m in parsed.messages] == [11, 12, 13, 14, 15]
    assert all(m.header["t"] == "bench/t" and m.header["a"] == "persisted" for m in parsed.messages)
    assert [m.body for m in parsed.messages] == [pool[998], pool[999], pool[0], pool[1], pool[2]]
    plain = parse_frame(PublishEncoder("x", persisted=False).message(1, b"{}")).messages[0]
    assert "a" not in plain.header


def test_stamped_bodies_are_found_in_a_frame() -> None:
    bodies = [stamped_body(1_000_000 + i, i, 100) for i in range(3)]
    assert all(len(b) == 100 for b in bodies)
    frame = b"".join(
        b'{"c":"publish","t":"x","sids":"l1","ts":"2030-01-01T00:00:00Z","l":100}' + b
        for b in bodies
    )
    assert [int(x) for x in STAMP_RE.findall(frame)] == [1_000_000, 1_000_001, 1_000_002]


def test_scan_acks_finds_acks_between_deliveries() -> None:
    frame = (
        b'{"c":"publish","t":"x","sids":"s1","l":2}{}'
        b'{"c":"ack","a":"processed","cid":"s1","status":"failure","reason":"bad filter",'
        b'"detail":"unexpected \'}\'"}'
        b'{"c":"publish","t":"x","sids":"s1","l":2}{}'
    )
    (ack,) = scan_acks(frame)
    assert ack["reason"] == "bad filter" and ack["detail"] == "unexpected '}'"
    assert scan_acks(b'{"c":"publish","t":"x","l":2}{}') == []


def test_mqtt_packets() -> None:
    # MQTT 3.1.1 section 2.2.3: 127 -> 0x7F, 128 -> 0x80 0x01, 16384 -> 0x80 0x80 0x01
    pkt = mqtt_publish_packet(b"a/b", 7, b"x" * 121)  # remaining = 2+3+2+121 = 128
    assert pkt[:3] == b"\x32\x80\x01"
    assert pkt[3:5] == b"\x00\x03" and pkt[5:8] == b"a/b" and pkt[8:10] == b"\x00\x07"
    assert len(pkt) == 3 + 128
    big = mqtt_publish_packet(b"t", 1, b"y" * (16384 - 5))
    assert big[:4] == b"\x32\x80\x80\x01"
    conn = mqtt_connect_packet("c1")
    assert conn[0] == 0x10 and conn[2:10] == b"\x00\x04MQTT\x04\x02"
    assert conn[1] == len(conn) - 2


# -- feature modules -----------------------------------------------------------------------


def test_feature_output_parsing() -> None:
    assert parse_output('noise\n@@SPOOL-BENCH-RESULT@@{"a_per_s": 5, "b_ms": 1.5}\n') == {
        "a_per_s": 5.0,
        "b_ms": 1.5,
    }
    for bad in ("", "@@SPOOL-BENCH-RESULT@@[1]", '@@SPOOL-BENCH-RESULT@@{"a": "x"}'):
        with pytest.raises(FeatureBenchError):
            parse_output(bad)


def test_discover_lists_bench_modules(tmp_path: Path) -> None:
    for name in ("bench_b.py", "bench_a.py", "helper.py", "__init__.py"):
        (tmp_path / name).write_text("")
    assert discover(tmp_path) == ["bench_a", "bench_b"]


# -- worker processes ----------------------------------------------------------------------


def _echo(gate: Gate, *, value: int) -> dict[str, Any]:
    gate.open()
    return {"value": value * 2}


def _boom(gate: Gate) -> dict[str, Any]:
    raise RuntimeError("worker exploded")


def test_run_tasks_gates_and_collects_in_order() -> None:
    seen: list[str] = []
    out = run_tasks(
        [Task(_echo, {"value": 1}), Task(_echo, {"value": 2})],
        timeout=60,
        on_ready=lambda: seen.append("ready"),
    )
    assert out == [{"value": 2}, {"value": 4}]
    assert seen == ["ready"]


def test_run_tasks_reports_worker_failure() -> None:
    with pytest.raises(WorkerError, match="worker exploded"):
        run_tasks([Task(_echo, {"value": 1}), Task(_boom)], timeout=60)


@pytest.mark.parametrize("module", discover())
def test_feature_bench_modules_run_in_quick_mode(module: str) -> None:
    """Every feature benchmark still runs against the current code (a smoke run, no
    timing asserted): a renamed API must break `make test`, not the next `make bench`."""
    metrics = run_module(module, quick=True, timeout=max(240.0, quick_timeout(module)))
    assert metrics
    assert all(math.isfinite(v) for v in metrics.values()), metrics


def test_a_feature_module_may_ask_for_a_longer_quick_run(tmp_path: Path) -> None:
    (tmp_path / "bench_slow.py").write_text(
        "QUICK_TIMEOUT_S = 420\n\ndef run(quick=False):\n    return {}\n"
    )
    (tmp_path / "bench_plain.py").write_text("X = 1\n")
    assert quick_timeout("bench_slow", tmp_path) == 420.0
    assert quick_timeout("bench_plain", tmp_path) == 120.0
    assert quick_timeout("bench_pipeline") > 120.0
