"""``spool-action-do-webhook`` run by actions on the in-process engine (virtual clock), its
posts answered by a port on the loop: a run of its own waits for the outcome, retries at
the times the destination asks for and sets ``AMPS_WEBHOOK_STATUS``; a firing of an
on-publish action only queues its post, with the source's bookmark as ``Spool-Event-Id``;
the stop cuts off what is left and counts it; no secret is ever shown.

A real Broker (tests/support/engine.py); only the HTTP port is a fake (the real one, with
a socket, is tests/integration/test_actions_webhooks.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path
from typing import Any

import orjson

from spool.server.actions.service import WEBHOOK_STOP_BUDGET
from spool.server.actions.webhooks import WebhookRequest, WebhookResponse, signature
from spool.server.clock import VirtualClock
from tests.support.engine import EngineHarness, scenario
from tests.support.server import config_xml

KEY = "signing-key-0123456789"
TOKEN = "header-token-9876543210"
QUERY = "query-token-5555555555"
SECRETS = (KEY, TOKEN, QUERY)
ALLOW = "<Webhooks><Allow>https://hooks.example.com/spool/</Allow></Webhooks>"

#: an answer of the port: a status, or (status, Retry-After)
Answer = int | tuple[int, str]


class ScriptedPort:
    """Answers posts in turn from ``script`` (then 200), on the loop; ``gate``, when set,
    holds every post until it opens."""

    def __init__(self, clock: VirtualClock, *script: Answer) -> None:
        self.clock = clock
        self.script: deque[Answer] = deque(script)
        self.posts: list[tuple[float, WebhookRequest]] = []
        self.gate: asyncio.Event | None = None

    async def post(self, request: WebhookRequest) -> WebhookResponse:
        self.posts.append((self.clock.monotonic(), request))
        if self.gate is not None:
            await self.gate.wait()
        answer = self.script.popleft() if self.script else 200
        if isinstance(answer, tuple):
            return WebhookResponse.answered(answer[0], answer[1])
        return WebhookResponse.answered(answer)

    def times(self) -> list[float]:
        return [t for t, _ in self.posts]


def hook(options: str = "") -> str:
    return f"""
  <Do><Module>spool-action-do-webhook</Module><Options>
    <Url>https://hooks.example.com/spool/{{{{AMPS_ACTION_NAME}}}}?token={QUERY}</Url>
    <Header>Authorization: Bearer {TOKEN}</Header>
    <SigningKey>{KEY}</SigningKey>
    <Body>{{"action":"{{{{AMPS_ACTION_NAME}}}}","data":{{{{AMPS_DATA}}}}}}</Body>
    {options}</Options></Do>"""


def on_demand(options: str = "") -> str:
    return f"""{ALLOW}
<Action><Name>notify</Name>
  <On><Module>amps-action-on-admin</Module></On>
  {hook(options).replace("{{AMPS_DATA}}", "{}")}
  <Do><Module>amps-action-do-publish-message</Module><Options>
    <Topic>status</Topic><Data>{{"status":"{{{{AMPS_WEBHOOK_STATUS}}}}"}}</Data></Options></Do>
</Action>"""


PER_ORDER = f"""{ALLOW}
<Action><Name>per-order</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>^orders/</Topic></Options></On>
  {hook()}
</Action>"""


def harness(tmp_path: Path, actions: str, port: ScriptedPort) -> EngineHarness:
    xml = config_xml(tmp_path / "data", admin_interval="1d", actions=actions)
    return EngineHarness(tmp_path, xml=xml, clock=port.clock, webhooks=port)


def named(h: EngineHarness, event: str) -> list[dict[str, Any]]:
    return [e for e in h.broker.events.recent(1000)
            if e["category"] == "actions" and e["event"] == event]  # fmt: skip


def shown(h: EngineHarness) -> str:
    """Every text the instance shows of its actions: infos (describe lines, tallies), the
    history, the recent events."""
    return orjson.dumps(
        [h.broker.actions.info(), [r.to_dict() for r in h.broker.actions.runners["notify"].recent]
         if "notify" in h.broker.actions.runners else [], h.broker.events.recent(1000)]
    ).decode()  # fmt: skip


def event_log_text(tmp_path: Path) -> str:
    files = sorted((tmp_path / "data").glob("*.events.log*"))
    assert files, "the event log file is written"
    return "".join(f.read_text(errors="replace") for f in files)


@scenario
async def test_a_run_of_its_own_retries_when_asked_then_reads_the_status(tmp_path: Path) -> None:
    port = ScriptedPort(VirtualClock(), (429, "5"), (503, "7"), 200)
    async with harness(tmp_path, on_demand(), port) as h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "status", "sub_id": "s"}, b""))
        await h.settle()
        record = await h.run_admin("notify")
        assert record.outcome == "succeeded"
        first = port.times()[0]
        # Retry-After outweighs the backoff (1 s, then 2 s, each +-20 %): at +5 s, then +7 s
        assert [t - first for t in port.times()] == [0.0, 5.0, 12.0]
        hook_step, publish = record.steps
        assert hook_step.status == "ok" and hook_step.variables == {"AMPS_WEBHOOK_STATUS": "200"}
        assert hook_step.message == (
            "sent to https://hooks.example.com/spool/notify?\u2026 (HTTP 200, 3 attempts)"
        )
        assert publish.status == "ok"
        await h.drive(h.until(lambda: reader.deliveries("s")))
        assert orjson.loads(reader.deliveries("s")[0][1]) == {"status": "200"}
        requests = [r for _, r in port.posts]
        assert len({r.event_id for r in requests}) == 1  # a retry is the same event
        request = requests[0]
        assert request.url == f"https://hooks.example.com/spool/notify?token={QUERY}"
        assert request.secret_headers == (("Authorization", f"Bearer {TOKEN}"),)
        assert request.signing_key is not None
        assert signature(request.signing_key, request.body) == signature(KEY.encode(),
                                                                         b'{"action":"notify","data":{}}')  # fmt: skip
        assert h.broker.actions.action_info("notify")["webhooks"] == {
            "queued": 1, "sent": 1, "failed": 0, "dropped": 0, "retried": 2,
        }  # fmt: skip


@scenario
async def test_a_backoff_retry_comes_within_its_jitter_and_a_final_failure_fails_the_step(
    tmp_path: Path,
) -> None:
    port = ScriptedPort(VirtualClock(), 503, 503, 404)
    async with harness(tmp_path, on_demand("<Retries>5</Retries><Backoff>2s</Backoff>"), port) as h:
        record = await h.run_admin("notify")
        assert record.outcome == "failed"
        t0, t1, t2 = port.times()
        assert 1.6 <= t1 - t0 <= 2.4  # 2 s +-20 %
        assert 3.2 <= t2 - t1 <= 4.8  # then 4 s +-20 %; a 404 is final
        hook_step, publish = record.steps
        assert hook_step.status == "failed"
        assert hook_step.variables == {"AMPS_WEBHOOK_STATUS": "404"}
        assert hook_step.message == (
            "failed: HTTP 404 from https://hooks.example.com/spool/notify?\u2026 (3 attempts)"
        )
        assert publish.status == "not_run"
        assert h.broker.actions.action_info("notify")["webhooks"] == {
            "queued": 1, "sent": 0, "failed": 1, "dropped": 0, "retried": 2,
        }  # fmt: skip


@scenario
async def test_a_firing_queues_its_post_with_the_source_bookmark_and_never_waits(
    tmp_path: Path,
) -> None:
    port = ScriptedPort(VirtualClock())
    port.gate = asyncio.Event()  # the destination does not answer yet
    async with harness(tmp_path, PER_ORDER, port) as h:
        reader = await h.logon("reader")
        reader.send(({"c": "subscribe", "t": "^orders/", "sub_id": "o", "bm": "0"}, b""))
        pub = await h.logon("pub")
        pub.send(*[({"c": "publish", "t": "orders/1"}, orjson.dumps({"n": n})) for n in range(3)])
        runner = h.broker.actions.event_runners["per-order"]
        await h.drive(h.until(lambda: runner.counts()["runs"] == 3))
        events = runner.counts()
        # every firing ran to its end while the first post still waits for an answer
        assert (events["succeeded"], events["webhooks_queued"], events["webhooks_sent"]) == (
            3, 3, 0,
        )  # fmt: skip
        assert len(port.posts) == 1  # one at a time per action: in order
        port.gate.set()
        await h.drive(h.until(lambda: runner.counts()["webhooks_sent"] == 3))
        sources = [hd["bm"] for hd, _ in reader.deliveries("o")]
        requests = [r for _, r in port.posts]
        assert [r.event_id for r in requests] == [f"{bm}1" for bm in sources]
        assert [orjson.loads(r.body) for r in requests] == [
            {"action": "per-order", "data": {"n": n}} for n in range(3)
        ]
        info = h.broker.actions.action_info("per-order")
        assert info["webhooks"] == {
            "queued": 3, "sent": 3, "failed": 0, "dropped": 0, "retried": 0,
        }  # fmt: skip
        assert info["events"] is not None and info["events"]["webhooks_sent"] == 3
        window = await runner.close_window()
        assert window is not None and window.events is not None
        assert window.events["webhooks_sent"] == 3
        assert window.detail.endswith("; webhooks 3 sent")


@scenario
async def test_the_stop_cuts_off_the_posts_left_counts_and_reports_them(tmp_path: Path) -> None:
    port = ScriptedPort(VirtualClock())
    port.gate = asyncio.Event()  # never opens
    h = harness(tmp_path, PER_ORDER, port)
    async with h:
        pub = await h.logon("pub")
        pub.send(*[({"c": "publish", "t": "orders/1"}, b'{"n":1}') for _ in range(2)])
        runner = h.broker.actions.event_runners["per-order"]
        await h.drive(h.until(lambda: runner.counts()["runs"] == 2))
        stopping_at = h.clock.monotonic()
    assert h.clock.monotonic() - stopping_at >= WEBHOOK_STOP_BUDGET  # the budget was given
    assert h.broker.actions.action_info("per-order")["webhooks"] == {
        "queued": 2, "sent": 0, "failed": 0, "dropped": 2, "retried": 0,
    }  # fmt: skip
    (report,) = named(h, "webhooks_dropped")
    assert (report["level"], report["queued"], report["cut_off"]) == ("warning", 2, 2)
    last = runner.recent[-1]  # the last window, written at stop
    assert last.events is not None and last.events["webhooks_dropped"] == 2


@scenario
async def test_posts_a_stop_cut_off_are_made_again_after_the_restart_and_only_those(
    tmp_path: Path,
) -> None:
    port = ScriptedPort(VirtualClock(), 200)
    async with harness(tmp_path, PER_ORDER, port) as h:
        pub = await h.logon("pub")
        pub.send(({"c": "publish", "t": "orders/1"}, b'{"n":1}'))
        runner = h.broker.actions.event_runners["per-order"]
        await h.drive(h.until(lambda: runner.counts()["webhooks_sent"] == 1))
        port.gate = asyncio.Event()  # the next posts are never answered
        pub.send(*[({"c": "publish", "t": "orders/1"}, b'{"n":%d}' % n) for n in (2, 3)])
        await h.drive(h.until(lambda: runner.counts()["runs"] == 3))
    # one post at a time per action: the second waits at the gate, the third behind it
    sent, waiting = [r.event_id for _, r in port.posts]
    assert h.broker.actions.action_info("per-order")["webhooks"] == {
        "queued": 3, "sent": 1, "failed": 0, "dropped": 2, "retried": 0,
    }  # fmt: skip
    again = ScriptedPort(VirtualClock())
    async with harness(tmp_path, PER_ORDER, again) as h:
        runner = h.broker.actions.event_runners["per-order"]
        await h.drive(h.until(lambda: runner.counts()["webhooks_sent"] == 2))
        # the two cut off, the one that waited with the id it had; not the one answered
        assert [orjson.loads(r.body)["data"]["n"] for _, r in again.posts] == [2, 3]
        assert again.posts[0][1].event_id == waiting
    third = ScriptedPort(VirtualClock())
    async with harness(tmp_path, PER_ORDER, third) as h:
        await h.settle()
    assert third.posts == []  # all settled: nothing is made a third time
    assert sent not in [r.event_id for _, r in again.posts]


ON_LOGON = f"""{ALLOW}
<Action><Name>on-logon</Name>
  <On><Module>spool-action-on-logon-client</Module></On>
  {hook().replace("{{AMPS_DATA}}", '"{{AMPS_CLIENT_NAME}}"')}
</Action>"""


@scenario
async def test_an_action_a_client_logging_on_runs_posts_its_webhook(tmp_path: Path) -> None:
    port = ScriptedPort(VirtualClock())
    async with harness(tmp_path, ON_LOGON, port) as h:
        runner = h.broker.actions.event_runners["on-logon"]
        await h.logon("someone")
        await h.drive(h.until(lambda: runner.counts()["webhooks_sent"] >= 1))
        bodies = [orjson.loads(r.body) for _, r in port.posts]
        assert bodies == [{"action": "on-logon", "data": "someone"}]


@scenario
async def test_no_secret_in_records_descriptions_events_or_the_event_log_file(
    tmp_path: Path,
) -> None:
    port = ScriptedPort(VirtualClock(), 503, 200, 400)
    async with harness(tmp_path, on_demand() + PER_ORDER.replace(ALLOW, ""), port) as h:
        assert (await h.run_admin("notify")).outcome == "succeeded"
        assert (await h.run_admin("notify")).outcome == "failed"
        pub = await h.logon("pub")
        pub.send(({"c": "publish", "t": "orders/1"}, b'{"n":1}'))
        runner = h.broker.actions.event_runners["per-order"]
        await h.drive(h.until(lambda: runner.counts()["webhooks_sent"] == 1))
        await runner.close_window()
        history = await h.drive(h.broker.actions.history())
        descriptions = [s["description"] for a in h.broker.actions.info() for s in a["steps"]]
        assert (
            "post to https://hooks.example.com/spool/{{AMPS_ACTION_NAME}}?\u2026 (header "
            "Authorization, signed)"
        ) in descriptions
        texts = [shown(h), orjson.dumps(history).decode(), "\n".join(descriptions)]
        for text in texts:
            for secret in SECRETS:
                assert secret not in text
    log = event_log_text(tmp_path)
    assert "https://hooks.example.com/spool/notify?\u2026" in log  # shown, redacted
    for secret in SECRETS:
        assert secret not in log


@scenario
async def test_a_full_queue_fails_the_firing_and_counts_the_post_dropped(tmp_path: Path) -> None:
    port = ScriptedPort(VirtualClock())
    port.gate = asyncio.Event()
    actions = PER_ORDER.replace("</Allow>", "</Allow><QueueDepth>1</QueueDepth>").replace(
        "spool/{{AMPS_ACTION_NAME}}?", "spool/{{AMPS_TOPIC}}?"
    )
    async with harness(tmp_path, actions, port) as h:
        pub = await h.logon("pub")
        pub.send(*[({"c": "publish", "t": "orders/a b"}, b'{"n":1}') for _ in range(2)])
        runner = h.broker.actions.event_runners["per-order"]
        await h.drive(h.until(lambda: runner.counts()["runs"] == 2))
        events = runner.counts()
        assert (events["succeeded"], events["failed"]) == (1, 1)
        assert (events["webhooks_queued"], events["webhooks_dropped"]) == (1, 1)
        (failed,) = [r for r in runner.recent if r.outcome == "failed"]
        assert failed.steps[0].message == (
            "dropped: the instance's webhook queue holds 1 posts already "
            "(https://hooks.example.com/spool/orders%2Fa%20b?\u2026)"
        )
        # a variable's value is one part of the URL: its "/" and " " are encoded
        assert port.posts[0][1].url == (
            f"https://hooks.example.com/spool/orders%2Fa%20b?token={QUERY}"
        )
        port.gate.set()
        await h.drive(h.until(lambda: runner.counts()["webhooks_sent"] == 1))
