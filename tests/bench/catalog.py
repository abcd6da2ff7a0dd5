"""The named scenarios of the suite, their targets and the Spool/peer comparisons.

Names are stable across ``--quick`` and full runs (message counts live in the scenario's
parameters in the JSON), so a history of runs can be compared by name. A scenario belongs
to a *family*: the family runner starts what the scenarios share (one broker, one Redis)
and measures each selected scenario in turn.

Targets are the goals each feature was built to (delivery and batching, persisted
publish, replay, TLS within 0.8x of plain text). They are reported, never asserted: benchmarks are not tests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

Op = Literal[">=", "<"]

#: body sizes in bytes, by the label used in scenario names.
BODY_SIZES: Final[dict[str, int]] = {"100B": 100, "1KB": 1024}


@dataclass(frozen=True, slots=True)
class Target:
    """A goal for one metric, e.g. ``msgs_per_s >= 100000``."""

    metric: str
    op: Op
    value: float
    source: str

    def met(self, observed: float) -> bool:
        if self.op == ">=":
            return observed >= self.value
        return observed < self.value

    def describe(self) -> str:
        return f"{self.op} {format_number(self.value)}"

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "op": self.op, "value": self.value, "source": self.source}


@dataclass(frozen=True, slots=True)
class ScenarioSpec:
    """One named scenario.

    Attributes:
        name: dotted name, ``<system>.<workload>...<body>``.
        family: the runner that measures it (``publish``, ``fanout``, ``latency``,
            ``replay``, ``memory``, ``redis``, ``mosquitto``, ``feature``).
        title: one line for people.
        params: workload parameters that do not depend on the mode (body size, rate...).
        headline: the metrics printed in the table (all metrics go to the JSON).
        targets: goals from the issues.
        profile: profiled with py-spy under ``--profile`` (the top scenarios).
        warmup: runs discarded before measuring; None means the suite's default.
    """

    name: str
    family: str
    title: str
    params: Mapping[str, Any] = field(default_factory=dict)
    headline: tuple[str, ...] = ()
    targets: tuple[Target, ...] = ()
    profile: bool = False
    warmup: int | None = None


@dataclass(frozen=True, slots=True)
class Comparison:
    """A Spool scenario against a peer scenario on one metric (ratio Spool / peer).

    With ``goal`` the ratio is checked against ``goal_ratio`` (1.0: Spool at or above the
    peer; 0.8: TLS within 20% of the plain figure; 0.6: replicated publish against the
    unreplicated one).

    ``peer_metric`` names the peer's metric when it differs from ``metric``: a scenario
    that measures both sides itself (the paired TLS replay) is its own peer.
    """

    label: str
    spool: str
    peer: str
    metric: str
    goal: bool = False
    goal_ratio: float = 1.0
    peer_metric: str | None = None


def format_number(value: float) -> str:
    """Human-friendly number: thousands separators for big ones, 3 significant digits else."""
    if value != value:  # NaN
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == 0:
        return "0"
    return f"{value:.3g}"


def _spool_specs() -> list[ScenarioSpec]:
    specs: list[ScenarioSpec] = []
    for label, size in BODY_SIZES.items():
        specs.append(
            ScenarioSpec(
                f"spool.publish.noack.{label}",
                "publish",
                f"one publisher, {label} bodies, no acks, 100 messages per frame; ends at flush ack",
                {"body_bytes": size, "ack": "none"},
                ("msgs_per_s", "mb_per_s"),
                profile=label == "100B",
            )
        )
    for label, size in BODY_SIZES.items():
        targets: tuple[Target, ...] = ()
        if label == "100B":
            targets = (Target("msgs_per_s", ">=", 100_000, "persisted publishing"),)
        specs.append(
            ScenarioSpec(
                f"spool.publish.persisted.{label}",
                "publish",
                f"one publisher, {label} bodies, persisted acks (FlushInterval 1ms), "
                "10,000 unacked messages in flight",
                {"body_bytes": size, "ack": "persisted"},
                ("msgs_per_s", "mb_per_s"),
                targets,
                profile=label == "100B",
            )
        )
    specs.append(
        ScenarioSpec(
            "spool.persisted_ack_latency.20k.100B",
            "publish",
            "paced publisher at 20,000 msgs/s, persisted acks; send -> persisted ack latency",
            {"body_bytes": 100, "rate_per_s": 20_000},
            ("p50_ms", "p99_ms", "p999_ms", "achieved_msgs_per_s"),
            (Target("p99_ms", "<", 10, "persisted publishing"),),
        )
    )
    for label, size in BODY_SIZES.items():
        specs.append(
            ScenarioSpec(
                f"spool.fanout.1to1.{label}",
                "fanout",
                f"one publisher -> one live subscriber, {label} bodies",
                {"body_bytes": size, "subscribers": 1},
                ("delivered_msgs_per_s",),
                (Target("delivered_msgs_per_s", ">=", 100_000, "live delivery"),)
                if label == "100B"
                else (),
                profile=label == "100B",
            )
        )
    for label, size in BODY_SIZES.items():
        specs.append(
            ScenarioSpec(
                f"spool.fanout.1to100.{label}",
                "fanout",
                f"one publisher -> 100 live subscribers (100 connections), {label} bodies; "
                "aggregate deliveries",
                {"body_bytes": size, "subscribers": 100},
                ("delivered_msgs_per_s",),
                (Target("delivered_msgs_per_s", ">=", 300_000, "live delivery"),)
                if label == "100B"
                else (),
                profile=label == "100B",
            )
        )
    specs.append(
        ScenarioSpec(
            "spool.burst.spill.1KB",
            "burst",
            "one publisher -> one live subscriber through a 1MB outbound buffer (1KB bodies) "
            "that reads nothing until its subscription spilled, then everything: the rest "
            "arrives by the catch-up read of the log; compare spool.fanout.1to1.1KB",
            {"body_bytes": 1024},
            ("delivered_msgs_per_s", "read_msgs_per_s", "catch_up_s"),
            profile=True,
        )
    )
    for rate, rlabel in ((1_000, "1k"), (10_000, "10k"), (50_000, "50k")):
        specs.append(
            ScenarioSpec(
                f"spool.latency.{rlabel}.100B",
                "latency",
                f"paced publisher at {rate:,} msgs/s -> one live subscriber; publish-to-delivery",
                {"body_bytes": 100, "rate_per_s": rate},
                ("p50_ms", "p99_ms", "p999_ms", "achieved_msgs_per_s"),
                (Target("p99_ms", "<", 5, "live delivery"),) if rate == 10_000 else (),
            )
        )
    specs.append(
        ScenarioSpec(
            "spool.latency.10k.1KB",
            "latency",
            "paced publisher at 10,000 msgs/s -> one live subscriber, 1KB bodies",
            {"body_bytes": 1024, "rate_per_s": 10_000},
            ("p50_ms", "p99_ms", "p999_ms", "achieved_msgs_per_s"),
        )
    )
    for label, size in BODY_SIZES.items():
        specs.append(
            ScenarioSpec(
                f"spool.replay.epoch.{label}",
                "replay",
                f"bookmark subscription from EPOCH (0) over the whole log, {label} bodies",
                {"body_bytes": size, "filter": None},
                ("msgs_per_s", "mb_per_s"),
                (Target("msgs_per_s", ">=", 300_000, "bookmark replay"),)
                if label == "100B"
                else (),
                profile=label == "100B",
            )
        )
        specs.append(
            ScenarioSpec(
                f"spool.replay.filter10.{label}",
                "replay",
                f"replay from EPOCH with a content filter matching 10% ({label} bodies); "
                "scanned = log messages replayed per second",
                {"body_bytes": size, "filter": "/k = 7"},
                ("scanned_msgs_per_s", "delivered_msgs_per_s"),
                (Target("scanned_msgs_per_s", ">=", 300_000, "bookmark replay"),)
                if label == "100B"
                else (),
            )
        )
        specs.append(
            ScenarioSpec(
                f"spool.restart.{label}",
                "replay",
                f"restart of an instance holding the replay log ({label} bodies): process start "
                "to first logon ack, after SIGTERM and after SIGKILL",
                {"body_bytes": size},
                ("stop_restart_s", "kill_restart_s"),
                (
                    Target("stop_restart_s", "<", 3, "persisted publishing"),
                    Target("kill_restart_s", "<", 3, "persisted publishing"),
                )
                if label == "100B"
                else (),
                warmup=0,  # the log is already in the page cache from the replays
            )
        )
    for label, size in BODY_SIZES.items():
        specs.append(
            ScenarioSpec(
                f"client.publish.persisted.{label}",
                "publish",
                f"Spool's asyncio Client: publish_many() batches of 100, {label} bodies, "
                "persisted acks, 10,000 unacked at most; ends at the last persisted ack",
                {"body_bytes": size, "ack": "persisted", "client": "spool.server.client.Client"},
                ("msgs_per_s",),
            )
        )
        specs.append(
            ScenarioSpec(
                f"client.replay.epoch.{label}",
                "replay",
                f"Spool's asyncio Client: subscribe from EPOCH, async for batch in "
                f"sub.batches() reading every body, {label} bodies",
                {"body_bytes": size, "filter": None, "client": "spool.server.client.Client"},
                ("msgs_per_s",),
            )
        )
    specs.append(
        ScenarioSpec(
            "browser.replay.epoch.100B",
            "replay",
            "static/spool-client.js in Chromium (Playwright): subscribe from EPOCH with a "
            "batch callback, counting every message",
            {"body_bytes": 100, "filter": None, "client": "spool-client.js"},
            ("msgs_per_s",),
            (Target("msgs_per_s", ">=", 300_000, "compiled hot loops"),),
        )
    )
    specs.append(
        ScenarioSpec(
            "spool.tls.publish.persisted.100B",
            "tls",
            "spool.publish.persisted.100B over wss:// (TLS 1.3, P-256 certificate of a "
            "throwaway CA): one publisher, persisted acks, 10,000 in flight",
            {"body_bytes": 100, "ack": "persisted", "tls": True},
            ("msgs_per_s", "mb_per_s"),
            profile=True,
        )
    )
    specs.append(
        ScenarioSpec(
            "spool.tls.replay.epoch.100B",
            "tls",
            "spool.replay.epoch.100B over wss://: bookmark subscription from EPOCH over the "
            "whole log (populated over wss:// too); each run is two replays on it and two on "
            "a plain broker holding the same log, ABBA order (plain_msgs_per_s, vs_plain)",
            {"body_bytes": 100, "filter": None, "tls": True},
            (
                "msgs_per_s",
                "plain_msgs_per_s",
                "vs_plain",
                "cpu_vs_plain",
                "broker_cpu_us",
                "plain_broker_cpu_us",
                "client_cpu_us",
                "plain_client_cpu_us",
            ),
            profile=True,
        )
    )
    specs.append(
        ScenarioSpec(
            "spool.memory.idle_connection",
            "memory",
            "broker RSS growth per idle logged-on websocket connection",
            {},
            ("rss_kib_per_connection",),
            warmup=0,
        )
    )
    specs.append(
        ScenarioSpec(
            "spool.memory.subscription",
            "memory",
            "broker RSS growth per live subscription (distinct exact topics, one connection)",
            {},
            ("rss_kib_per_subscription",),
            warmup=0,
        )
    )
    return specs


def _replication_specs() -> list[ScenarioSpec]:
    specs = [
        ScenarioSpec(
            f"spool.replication.persisted.{mode}.100B",
            "replication",
            title,
            {"body_bytes": 100, "ack": "persisted", "mode": mode},
            ("msgs_per_s",)
            if mode == "unreplicated"
            else ("msgs_per_s", "unreplicated_msgs_per_s", "vs_unreplicated"),
            profile=mode == "sync",
        )
        for mode, title in (
            ("unreplicated", "persisted publish to an instance without replication (the "
             "baseline of the ratios, same run)"),
            ("sync", "persisted publish to an instance with one sync destination: an ack "
             "means fsynced here and at the destination; paired with the unreplicated "
             "instance in each run (ABBA)"),
            ("async", "persisted publish to the same instance with its destination downgraded "
             "to async; paired like sync"),
        )
    ]  # fmt: skip
    specs.append(
        ScenarioSpec(
            "spool.replication.lag.10k.100B",
            "replication",
            "paced publisher at 10,000 msgs/s on A -> live subscriber on its destination B: "
            "publish-to-delivery across the link",
            {"body_bytes": 100, "rate_per_s": 10_000, "mode": "lag"},
            ("p50_ms", "p99_ms", "p999_ms", "achieved_msgs_per_s"),
            (Target("p99_ms", "<", 20, "replication"),),
        )
    )
    specs.append(
        ScenarioSpec(
            "spool.replication.bootstrap.100B",
            "replication",
            "an empty instance bootstraps A's whole log (what the scenarios before it "
            "published) over loopback, until it is ready: copy rate",
            {"body_bytes": 100, "ack": "persisted", "mode": "bootstrap"},
            ("records_per_s", "records", "seconds"),
        )
    )
    return specs


def _scrub_specs() -> list[ScenarioSpec]:
    """The scrub's cost (tests/bench/scrub_family.py)."""
    return [
        ScenarioSpec(
            "spool.scrub.publish.persisted.100B",
            "scrub",
            "persisted publish (as spool.publish.persisted) and persisted-ack latency at "
            "2,000 msgs/s, on an instance whose log holds hundreds of MB of finished "
            "journals, with a scrub pass under way at the default pace against none; "
            "paired in each run (ABBA)",
            {"body_bytes": 100, "ack": "persisted", "latency_rate_per_s": 2_000},
            ("msgs_per_s", "scrub_off_msgs_per_s", "vs_scrub_off", "p99_ms",
             "scrub_off_p99_ms", "p99_vs_scrub_off", "scrub_mb_per_s"),
            (
                Target("vs_scrub_off", ">=", 0.9, "self-healing storage"),
                Target("p99_vs_scrub_off", "<", 2.0, "self-healing storage"),
            ),
            warmup=0,
        )
    ]  # fmt: skip


def _triggers_specs() -> list[ScenarioSpec]:
    """What message-driven actions cost publishers (tests/bench/triggers_family.py)."""
    paired = ("msgs_per_s", "triggers_off_msgs_per_s", "vs_triggers_off")
    return [
        ScenarioSpec(
            "spool.triggers.publish.persisted.100B",
            "triggers",
            "persisted publish (as spool.publish.persisted) to an instance with 16 "
            "on-publish actions whose topics match none of the published ones, against "
            "the same instance without actions; paired in each run (ABBA)",
            {"body_bytes": 100, "ack": "persisted", "case": "persisted"},
            paired,
            (Target("vs_triggers_off", ">=", 0.97, "message-driven actions"),),
        ),
        ScenarioSpec(
            "spool.triggers.publish.persisted.filtered.100B",
            "triggers",
            "the same to topics 16 on-publish actions watch, whose filter never holds: "
            "each message queued for each action and filtered by its worker; paired (ABBA)",
            {"body_bytes": 100, "ack": "persisted", "case": "filtered"},
            (*paired, "dropped"),
            (Target("vs_triggers_off", ">=", 0.9, "message-driven actions"),),
        ),
        ScenarioSpec(
            "spool.triggers.derive.100B",
            "triggers",
            "persisted publish to a topic one on-publish action watches with no filter: "
            "one derived message published per message; derived_per_s from the publish's "
            "start to the last firing, dropped: messages its queue had no room for",
            {"body_bytes": 100, "ack": "persisted", "case": "derive"},
            ("msgs_per_s", "derived_per_s", "dropped"),
        ),
    ]


def _delayed_specs() -> list[ScenarioSpec]:
    """How late delayed messages are delivered (tests/bench/delayed_family.py)."""
    return [
        ScenarioSpec(
            "spool.delayed.lateness.paced",
            "delayed",
            "publisher at 2,000 msgs/s for 10 s, each message deliver_at its send + 2 s; "
            "a subscriber's receive time minus the due time (ms); count must equal the sent",
            {"case": "paced", "rate_per_s": 2000, "seconds": 10.0, "delay_s": 2.0},
            ("p50_ms", "p99_ms", "p999_ms", "max_ms", "count"),
            (Target("p99_ms", "<", 50.0, "delayed delivery"),),
        ),
        ScenarioSpec(
            "spool.delayed.lateness.burst",
            "delayed",
            "50,000 messages published at once, all deliver_at one moment 15 s ahead: "
            "lateness of the last delivery and the drain rate from the due moment",
            {"case": "burst", "count": 50_000, "lead_s": 15.0},
            ("last_ms", "drain_msgs_per_s", "p50_ms", "count"),
            warmup=0,
        ),
    ]


def _peer_specs() -> list[ScenarioSpec]:
    specs: list[ScenarioSpec] = []
    for fsync in ("everysec", "always"):
        for label, size in BODY_SIZES.items():
            specs.append(
                ScenarioSpec(
                    f"redis.xadd.{fsync}.{label}",
                    "redis",
                    "Redis Streams XADD through a redis-py connection, pre-encoded, 100 per "
                    f"write, 10,000 replies outstanding; appendonly yes, appendfsync {fsync}",
                    {
                        "body_bytes": size,
                        "appendfsync": fsync,
                        "pipeline": 100,
                        "window": 10_000,
                        "client": "lean",
                    },
                    ("msgs_per_s", "mb_per_s"),
                )
            )
        for label, size in BODY_SIZES.items():
            if fsync == "always" and label != "100B":
                continue
            specs.append(
                ScenarioSpec(
                    f"redis.xadd.{fsync}.api.{label}",
                    "redis",
                    "Redis Streams XADD with the redis-py pipeline API (pipeline.xadd x100, "
                    f"execute), appendfsync {fsync}: the everyday idiom, client cost included",
                    {"body_bytes": size, "appendfsync": fsync, "pipeline": 100, "client": "api"},
                    ("msgs_per_s",),
                )
            )
    for label, size in BODY_SIZES.items():
        specs.append(
            ScenarioSpec(
                f"redis.xrange.epoch.{label}",
                "redis",
                "Redis Streams replay from the start: XRANGE COUNT 1000 pages through a "
                f"redis-py connection (hiredis parser, raw replies), {label} bodies",
                {"body_bytes": size, "appendfsync": "everysec", "batch": 1000, "client": "lean"},
                ("msgs_per_s", "mb_per_s"),
            )
        )
    for label, size in BODY_SIZES.items():
        specs.append(
            ScenarioSpec(
                f"redis.xrange.epoch.api.{label}",
                "redis",
                "Redis Streams replay from the start with redis-py's r.xrange() (entries "
                "become (id, dict)): the everyday idiom",
                {"body_bytes": size, "appendfsync": "everysec", "batch": 1000, "client": "api"},
                ("msgs_per_s",),
            )
        )
    for label, size in BODY_SIZES.items():
        specs.append(
            ScenarioSpec(
                f"mosquitto.qos1.publish.{label}",
                "mosquitto",
                f"Mosquitto QoS 1 publish, pre-encoded MQTT 3.1.1 packets over a socket, 100 per "
                f"write, 10,000 in flight, {label} bodies; ends at the last PUBACK",
                {
                    "body_bytes": size,
                    "qos": 1,
                    "inflight": 10_000,
                    "pipeline": 100,
                    "client": "raw",
                },
                ("msgs_per_s", "mb_per_s"),
            )
        )
    specs.append(
        ScenarioSpec(
            "mosquitto.qos1.paho.100B",
            "mosquitto",
            "Mosquitto QoS 1 publish through paho-mqtt (loop thread, 100 in flight): the usual "
            "Python client, for scale",
            {"body_bytes": 100, "qos": 1, "inflight": 100, "client": "paho-mqtt"},
            ("msgs_per_s",),
        )
    )
    return specs


def _sow_specs() -> list[ScenarioSpec]:
    """The SOW scenarios (measured by tests/bench/sow_family.py)."""
    return [
        ScenarioSpec(
            "spool.sow.update.100k_keys.100B",
            "sow",
            "one publisher updating a persistent, journaled SOW topic of 100,000 keys "
            "(100-byte JSON bodies keyed by /id, 100 per frame); ends at a flush ack",
            {"body_bytes": 100, "keys": 100_000},
            ("updates_per_s",),
            (Target("updates_per_s", ">=", 100_000, "state of the world"),),
            profile=True,
        ),
        ScenarioSpec(
            "spool.sow.query.100k.100B",
            "sow",
            "a full sow query of 100,000 records (bs=1000) to one client; from the command "
            "to group_end",
            {"body_bytes": 100, "records": 100_000, "bs": 1000},
            ("records_per_s", "first_record_ms"),
            (Target("records_per_s", ">=", 500_000, "state of the world"),),
            profile=True,
        ),
        ScenarioSpec(
            "spool.sow.snapshot.100k.100B",
            "sow",
            "sow_and_subscribe over 100,000 records (bs=1000): the snapshot, from the "
            "command to group_end",
            {"body_bytes": 100, "records": 100_000, "bs": 1000},
            ("snapshot_s", "records_per_s"),
        ),
    ]


def _ha_specs() -> list[ScenarioSpec]:
    """The HA client scenarios (measured by tests/bench/ha_family.py)."""
    return [
        *(
            ScenarioSpec(
                f"spool.ha.publish.{store}_store.100B",
                "ha",
                f"one HAClient publishing through a {store} publish store (persisted acks; "
                "the file store writes and fsyncs each batch in a thread before sending); "
                "ends at publish_flush",
                {"body_bytes": 100, "store": store},
                ("msgs_per_s",),
            )
            for store in ("memory", "file")
        ),
        ScenarioSpec(
            "spool.ha.replay.file_bookmarks.100B",
            "ha",
            "one HAClient bookmark subscription replaying from EPOCH through a "
            "FileBookmarkStore, discarding every message",
            {"body_bytes": 100},
            ("msgs_per_s",),
        ),
    ]


def _queue_specs() -> list[ScenarioSpec]:
    """The queue scenario (measured by tests/bench/queue_family.py)."""
    return [
        ScenarioSpec(
            "spool.queue.4consumers.100B",
            "queue",
            "publish + consume + ack through one queue with 4 consumers (max_backlog 500, "
            "one sow_delete ack per received frame); from the first publish to the last "
            "delivery",
            {"body_bytes": 100, "consumers": 4, "max_backlog": 500},
            ("msgs_per_s", "publish_msgs_per_s"),
            (Target("msgs_per_s", ">=", 50_000, "queues"),),
            profile=True,
        ),
        ScenarioSpec(
            "spool.queue.replicated.4consumers.100B",
            "queue_replicated",
            "the same through a replicated queue on two instances (sync both ways), two "
            "consumers and a publisher (half the messages) on each; each message received once",
            {"body_bytes": 100, "consumers": 4, "max_backlog": 500},
            ("msgs_per_s", "publish_msgs_per_s"),
            # the same with two replicated instances: the same target
            (Target("msgs_per_s", ">=", 50_000, "queues"),),
        ),
        ScenarioSpec(
            "spool.restart.queue.100B",
            "queue_restart",
            "restart of an instance whose queue took the replay count of messages (all "
            "acked, 10 left): process start to first logon ack after SIGTERM (from the "
            "queue checkpoint), after SIGTERM without the checkpoint (the whole log) and "
            "after SIGKILL; *_startup_s: the broker's own start-up (event log, starting to "
            "started)",
            {"body_bytes": 100},
            (
                "stop_restart_s",
                "full_replay_restart_s",
                "kill_restart_s",
                "stop_startup_s",
                "full_replay_startup_s",
            ),
            (Target("stop_restart_s", "<", 3, "queue liveness"),),
            warmup=0,
        ),
        ScenarioSpec(
            "spool.queue.bounded.4consumers.100B",
            "queue_bounded",
            "the single-instance queue run with TargetQueueDepth 4,000: messages beyond it "
            "wait in the log and are read back as acks make room",
            {"body_bytes": 100, "consumers": 4, "max_backlog": 500},
            ("msgs_per_s", "publish_msgs_per_s"),
            (),
        ),
        ScenarioSpec(
            "spool.queue.replicated.bounded.4consumers.100B",
            "queue_replicated_bounded",
            "the replicated queue run with TargetQueueDepth 4,000 on both instances: each "
            "window counts what its instance can deliver; ownership changes of inactive "
            "messages are applied at their activation",
            {"body_bytes": 100, "consumers": 4, "max_backlog": 500},
            ("msgs_per_s", "publish_msgs_per_s"),
            (),
        ),
    ]


def _neighbour_specs() -> list[ScenarioSpec]:
    """The noisy-neighbour family (tests/bench/neighbour.py): a probe's publish latency
    alone and during one attack, on a broker with an 8 MB ``SlowClientBufferLimit``."""
    attacks = {
        # attack: (title, attacking connections: the memory target is per connection)
        "regex": ("regex filters that backtrack for ever in re, folded and per message", 1),
        "replays": ("30 replays of a 36 MB log on one connection that reads nothing", 1),
        "subscriptions": ("5,000 filtered subscriptions on the probe's topic, one connection", 1),
        "unauthenticated": ("2,000 sockets that never log on", 0),
    }
    out = []
    for attack, (title, connections) in attacks.items():
        targets = [Target("p99_vs_baseline", "<", 3.0, "noisy neighbour")]
        headline = ("baseline_p99_ms", "p99_ms", "p99_vs_baseline", "rss_growth_mib")
        if connections:
            targets.append(Target("rss_growth_vs_limit", "<", 1.0, "noisy neighbour"))
            headline += ("rss_growth_vs_limit",)
        out.append(
            ScenarioSpec(
                f"spool.neighbour.{attack}",
                "neighbour",
                "probe publish -> persisted ack at 200/s, alone then during: " + title,
                {
                    "attack": attack,
                    "connections": connections,
                    "probe_rate": 200,
                    "limit_mib": 8,
                },
                headline,
                tuple(targets),
                warmup=0,
            )
        )
    return out


#: every built-in scenario, in the order the suite runs them.
SCENARIOS: Final[tuple[ScenarioSpec, ...]] = tuple(
    _spool_specs()
    + _neighbour_specs()
    + _replication_specs()
    + _sow_specs()
    + _ha_specs()
    + _queue_specs()
    + _scrub_specs()
    + _triggers_specs()
    + _delayed_specs()
    + _peer_specs()
)

#: Spool/peer ratios printed after the table. ``goal`` marks the issue's goal (Spool at or
#: above Redis Streams with appendfsync everysec, against the lean peer client).
COMPARISONS: Final[tuple[Comparison, ...]] = (
    *(
        c
        for label in BODY_SIZES
        for c in (
            Comparison(
                f"persisted publish {label} vs Redis everysec",
                f"spool.publish.persisted.{label}",
                f"redis.xadd.everysec.{label}",
                "msgs_per_s",
                goal=True,
            ),
            Comparison(
                f"persisted publish {label} vs Redis always",
                f"spool.publish.persisted.{label}",
                f"redis.xadd.always.{label}",
                "msgs_per_s",
            ),
            Comparison(
                f"persisted publish {label} vs Mosquitto QoS 1",
                f"spool.publish.persisted.{label}",
                f"mosquitto.qos1.publish.{label}",
                "msgs_per_s",
            ),
            Comparison(
                f"replay from start {label} vs Redis XRANGE",
                f"spool.replay.epoch.{label}",
                f"redis.xrange.epoch.{label}",
                "msgs_per_s",
                goal=True,
            ),
        )
    ),
    Comparison(
        "persisted publish 100B over wss:// vs ws://",
        "spool.tls.publish.persisted.100B",
        "spool.publish.persisted.100B",
        "msgs_per_s",
        goal=True,
        goal_ratio=0.8,
    ),
    Comparison(
        "replay from start 100B over wss:// vs ws:// (alternating runs, same load)",
        "spool.tls.replay.epoch.100B",
        "spool.tls.replay.epoch.100B",
        "msgs_per_s",
        goal=True,
        goal_ratio=0.8,
        peer_metric="plain_msgs_per_s",
    ),
    Comparison(
        "replay from start 100B over wss:// vs the replay family's ws://",
        "spool.tls.replay.epoch.100B",
        "spool.replay.epoch.100B",
        "msgs_per_s",
    ),
    Comparison(
        "persisted publish 100B vs Redis everysec, redis-py pipeline API",
        "spool.publish.persisted.100B",
        "redis.xadd.everysec.api.100B",
        "msgs_per_s",
    ),
    Comparison(
        "replay from start 100B vs Redis r.xrange()",
        "spool.replay.epoch.100B",
        "redis.xrange.epoch.api.100B",
        "msgs_per_s",
    ),
    *(
        c
        for label in BODY_SIZES
        for c in (
            Comparison(
                f"Client persisted publish {label} vs redis-py pipeline XADD everysec",
                f"client.publish.persisted.{label}",
                f"redis.xadd.everysec.api.{label}",
                "msgs_per_s",
                goal=True,
                goal_ratio=2.0,
            ),
            Comparison(
                f"Client replay from EPOCH {label} vs redis-py xrange (hiredis)",
                f"client.replay.epoch.{label}",
                f"redis.xrange.epoch.api.{label}",
                "msgs_per_s",
                goal=True,
                goal_ratio=1.5,
            ),
        )
    ),
    Comparison(
        "persisted publish 100B vs Mosquitto QoS 1 via paho-mqtt",
        "spool.publish.persisted.100B",
        "mosquitto.qos1.paho.100B",
        "msgs_per_s",
    ),
    Comparison(
        "replicated (sync) vs unreplicated persisted publish 100B (alternating runs, same load)",
        "spool.replication.persisted.sync.100B",
        "spool.replication.persisted.sync.100B",
        "msgs_per_s",
        goal=True,
        goal_ratio=0.6,
        peer_metric="unreplicated_msgs_per_s",
    ),
    Comparison(
        "replicated (async) vs unreplicated persisted publish 100B (alternating runs, same load)",
        "spool.replication.persisted.async.100B",
        "spool.replication.persisted.async.100B",
        "msgs_per_s",
        peer_metric="unreplicated_msgs_per_s",
    ),
    Comparison(
        "persisted publish 100B with the scrub running vs without (alternating runs, same load)",
        "spool.scrub.publish.persisted.100B",
        "spool.scrub.publish.persisted.100B",
        "msgs_per_s",
        goal=True,
        goal_ratio=0.9,
        peer_metric="scrub_off_msgs_per_s",
    ),
    Comparison(
        "persisted publish 100B with actions whose triggers match nothing vs without "
        "(alternating runs, same load)",
        "spool.triggers.publish.persisted.100B",
        "spool.triggers.publish.persisted.100B",
        "msgs_per_s",
        goal=True,
        goal_ratio=0.97,
        peer_metric="triggers_off_msgs_per_s",
    ),
    Comparison(
        "replicated (sync) vs the unreplicated scenario's persisted publish 100B",
        "spool.replication.persisted.sync.100B",
        "spool.replication.persisted.unreplicated.100B",
        "msgs_per_s",
    ),
)


def feature_spec(module: str) -> ScenarioSpec:
    """The scenario of a per-feature ``tests/bench/bench_<area>.py`` module."""
    return ScenarioSpec(
        f"feature.{module}",
        "feature",
        f"tests/bench/{module}.py run(quick) in its own process",
        {"module": f"tests.bench.{module}"},
        warmup=0,
    )


def select(
    specs: Iterable[ScenarioSpec], only: Sequence[str] = (), skip: Sequence[str] = ()
) -> list[ScenarioSpec]:
    """Scenarios whose name matches one ``only`` pattern (all when none) and no ``skip``.

    Patterns are regular expressions searched in the name (``--only replay`` works).

    Raises:
        re.error: a pattern is not a valid regular expression.
    """
    only_re = [re.compile(p) for p in only]
    skip_re = [re.compile(p) for p in skip]
    out = []
    for spec in specs:
        if only_re and not any(r.search(spec.name) for r in only_re):
            continue
        if any(r.search(spec.name) for r in skip_re):
            continue
        out.append(spec)
    return out
