"""Webhook delivery (server/actions/webhooks.py).

The dispatcher runs on a virtual clock against a scripted port that answers on the loop,
so retry and backoff times are asserted exactly. The production port runs its posts on
real threads against ``httpx.MockTransport`` (headers, signature, redirects, retry
classes) and, for the real-time timeout and connect errors, against sockets on 127.0.0.1.
Where a webhook may post is tested with its rule (tests/unit/config/test_webhookurls.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import random
import socket
import threading
from collections import deque
from collections.abc import Iterator
from urllib.parse import unquote

import httpx
import pytest

from spool.server import __version__
from spool.server.actions.webhooks import (
    JITTER,
    MAX_DELAY,
    REPORT_INTERVAL,
    ThreadedWebhooks,
    WebhookOutcome,
    WebhookRequest,
    WebhookResponse,
    Webhooks,
    retry_delay,
)
from spool.server.clock import SYSTEM_CLOCK, VirtualClock

SECRET = "s3cr3t-header-value"
KEY = b"k3y-of-signing"
QUERY = "t0ken-in-query"
PASSWORD = "pw-in-userinfo"
URL = f"https://hooks.example.com/spool/big?token={QUERY}"
SEED = 7

Answer = int | WebhookResponse | BaseException


def request(event_id: str = "e1", **options: object) -> WebhookRequest:
    fields: dict[str, object] = {
        "action": "a",
        "url": URL,
        "body": b'{"qty": 10000}',
        "event_id": event_id,
        "backoff": 1.0,
    }
    fields.update(options)
    return WebhookRequest(**fields)  # type: ignore[arg-type]


class Events:
    """The event log, recorded."""

    def __init__(self) -> None:
        self.got: list[tuple[str, str, str, dict[str, object]]] = []

    def emit(self, level: str, category: str, event: str, **fields: object) -> None:
        self.got.append((level, category, event, fields))


class ScriptedPort:
    """A port on the loop: answers each event id's script in turn (then ``default``),
    each post taking ``takes`` seconds of the virtual clock."""

    def __init__(
        self,
        clock: VirtualClock,
        script: dict[str, list[Answer]] | None = None,
        *,
        default: Answer = 200,
        takes: float = 0.0,
    ) -> None:
        self.clock = clock
        self.script = {key: deque(answers) for key, answers in (script or {}).items()}
        self.default = default
        self.takes = takes
        self.posts: list[tuple[float, str]] = []
        self.gate: asyncio.Event | None = None
        self.in_flight = 0
        self.most_in_flight = 0

    async def post(self, req: WebhookRequest) -> WebhookResponse:
        self.posts.append((self.clock.monotonic(), req.event_id))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.takes:
                await self.clock.sleep(self.takes)
        finally:
            self.in_flight -= 1
        queue = self.script.get(req.event_id)
        answer = queue.popleft() if queue else self.default
        if isinstance(answer, BaseException):
            raise answer  # a port should not raise: the dispatcher copes all the same
        if isinstance(answer, int):
            return WebhookResponse.answered(answer)
        return answer

    def times(self, event_id: str | None = None) -> list[float]:
        return [t for t, e in self.posts if event_id is None or e == event_id]


def expected_delays(count: int, backoff: float = 1.0, seed: int = SEED) -> list[float]:
    """The delays a dispatcher seeded with ``seed`` waits before its retries 1..count."""
    rng = random.Random(seed)
    return [retry_delay(backoff, n, rng) for n in range(1, count + 1)]


def accumulate(start: float, delays: list[float]) -> list[float]:
    times = [start]
    for delay in delays:
        times.append(times[-1] + delay)
    return times


def balanced(hooks: Webhooks) -> bool:
    """Every request submitted is counted exactly once."""
    done = hooks.sent + hooks.failed + hooks.dropped + hooks.cancelled
    return hooks.submitted == done + hooks.pending


# -- retries, on the virtual clock ------------------------------------------------------


@pytest.mark.parametrize(
    ("answers", "result", "attempts", "error"),
    [
        ([500, 200], "sent", 2, None),
        ([503, 502, 200], "sent", 3, None),
        ([429, 200], "sent", 2, None),
        ([404], "failed", 1, "HTTP 404"),
        ([400], "failed", 1, "HTTP 400"),
        ([302], "failed", 1, "HTTP 302"),
        ([httpx.ConnectError("refused"), 200], "sent", 2, None),
        ([httpx.ReadTimeout("slow"), 200], "sent", 2, None),
        ([httpx.ConnectTimeout("slow"), httpx.ReadError("reset"), 200], "sent", 3, None),
        ([httpx.RemoteProtocolError("closed"), 200], "sent", 2, None),
        ([httpx.UnsupportedProtocol("ftp")], "failed", 1, "UnsupportedProtocol"),
        ([httpx.LocalProtocolError("bad header")], "failed", 1, "LocalProtocolError"),
        ([ValueError("a defect")], "failed", 1, "ValueError"),
        ([500, 500, 500, 500], "failed", 4, "HTTP 500"),
        ([httpx.ConnectError("x")] * 4, "failed", 4, "ConnectError"),
    ],
)
def test_what_is_retried_and_what_is_final(
    answers: list[Answer], result: str, attempts: int, error: str | None
) -> None:
    """Connect errors, timeouts, other network errors, 429 and 5xx are retried (3
    retries by default); any other answer is final at once."""

    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock, {"e1": answers})
        hooks = Webhooks(port, clock, Events(), rng=random.Random(SEED))
        outcomes: list[WebhookOutcome] = []
        assert hooks.submit(request(), outcomes.append)
        await clock.advance(600)
        [outcome] = outcomes
        assert (outcome.result, outcome.attempts, outcome.error) == (result, attempts, error)
        assert len(port.posts) == attempts
        assert hooks.retries == attempts - 1
        assert (hooks.sent, hooks.failed) == ((1, 0) if result == "sent" else (0, 1))
        assert hooks.pending == 0 and balanced(hooks)

    asyncio.run(scenario())


def test_backoff_doubles_with_jitter_up_to_the_cap_at_exact_virtual_times() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock, default=503)
        hooks = Webhooks(port, clock, Events(), rng=random.Random(SEED))
        outcomes: list[WebhookOutcome] = []
        hooks.submit(request(retries=9, backoff=1.0), outcomes.append)
        await clock.advance(1000)
        delays = expected_delays(9)
        assert port.times() == pytest.approx(accumulate(0.0, delays))
        for n, delay in enumerate(delays, start=1):
            base = 2 ** (n - 1)
            if base * (1 - JITTER) >= MAX_DELAY:
                assert delay == MAX_DELAY
            else:
                assert base * (1 - JITTER) <= delay <= min(base * (1 + JITTER), MAX_DELAY)
        assert delays[-1] == MAX_DELAY == 60.0  # 256 s of backoff, capped
        [outcome] = outcomes
        assert (outcome.result, outcome.attempts, outcome.status) == ("failed", 10, 503)

    asyncio.run(scenario())


class Extreme(random.Random):
    """A Random whose uniform draws are always the low or the high bound."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


@pytest.mark.parametrize("high", [False, True])
def test_retry_delay_jitter_bounds_and_cap(high: bool) -> None:
    factor = 1 + JITTER if high else 1 - JITTER
    rng = Extreme(high)
    assert retry_delay(1.0, 1, rng) == pytest.approx(factor)
    assert retry_delay(2.0, 3, rng) == pytest.approx(8 * factor)
    assert retry_delay(1.0, 8, rng) == MAX_DELAY  # 102.4 s at the least: capped
    assert retry_delay(1.0, 7, rng) == pytest.approx(min(64 * factor, MAX_DELAY))
    assert retry_delay(0.0, 5, rng) == 0.0
    seeded = random.Random(SEED)
    for n in range(1, 12):
        delay = retry_delay(0.5, n, seeded)
        base = 0.5 * 2 ** (n - 1)
        assert min(base * (1 - JITTER), MAX_DELAY) <= delay <= min(base * (1 + JITTER), MAX_DELAY)
    with pytest.raises(ValueError):
        retry_delay(1.0, 0, seeded)


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(
            clock,
            {
                "asks-30": [WebhookResponse.answered(429, "30"), 200],
                "asks-600": [WebhookResponse.answered(503, " 600 "), 200],
                "asks-0": [WebhookResponse.answered(429, "0"), 200],
                "asks-date": [WebhookResponse.answered(503, "Wed, 21 Oct 2015 07:28:00 GMT"), 200],
            },
        )
        hooks = Webhooks(
            port,
            clock,
            Events(),
            rng=random.Random(SEED),
            concurrency={"30": 1, "600": 1, "0": 1, "date": 1},
        )
        for name in ("30", "600", "0", "date"):
            hooks.submit(request(f"asks-{name}", action=name))
        await clock.advance(100)
        # one draw per retry, in submission order (every first attempt fails at t=0)
        rng = random.Random(SEED)
        draws = [retry_delay(1.0, 1, rng) for _ in range(4)]
        assert port.times("asks-30") == pytest.approx([0.0, 30.0])  # the ask, not ~1 s
        assert port.times("asks-600") == pytest.approx([0.0, MAX_DELAY])  # capped
        assert port.times("asks-0") == pytest.approx([0.0, draws[2]])  # never sooner
        assert port.times("asks-date") == pytest.approx([0.0, draws[3]])  # date form ignored
        assert hooks.sent == 4 and hooks.retries == 4

    asyncio.run(scenario())


def test_retry_after_parsing() -> None:
    assert WebhookResponse.answered(429, "120").retry_after == 120.0
    assert WebhookResponse.answered(429, "1.5").retry_after is None
    assert WebhookResponse.answered(429, "-3").retry_after is None
    assert WebhookResponse.answered(429, "").retry_after is None
    assert WebhookResponse.answered(429, "١٢").retry_after is None  # not ASCII digits
    assert WebhookResponse.answered(429).retry_after is None


# -- queues, order and parallelism ------------------------------------------------------


def test_concurrency_1_delivers_in_submission_order_retries_included() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock, {"e2": [500, 200]}, takes=1.0)
        hooks = Webhooks(port, clock, Events(), rng=random.Random(SEED))
        done: list[str] = []
        for n in range(1, 5):
            hooks.submit(request(f"e{n}"), lambda o: done.append(o.event_id))
        await clock.advance(100)
        [delay] = expected_delays(1)
        assert [e for _, e in port.posts] == ["e1", "e2", "e2", "e3", "e4"]
        assert port.times() == pytest.approx([0, 1, 2 + delay, 3 + delay, 4 + delay])
        assert done == ["e1", "e2", "e3", "e4"]
        assert port.most_in_flight == 1

    asyncio.run(scenario())


def test_concurrency_above_1_posts_side_by_side_and_actions_run_apart() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock, takes=1.0)
        hooks = Webhooks(port, clock, Events(), concurrency={"wide": 3})
        for n in range(6):
            hooks.submit(request(f"w{n}", action="wide"))
        for n in range(2):
            hooks.submit(request(f"n{n}", action="narrow"))
        await clock.advance(10)
        starts = {e: t for t, e in port.posts}
        assert [starts[f"w{n}"] for n in range(6)] == [0, 0, 0, 1, 1, 1]
        assert [starts[f"n{n}"] for n in range(2)] == [0, 1]
        assert port.most_in_flight == 4  # three of "wide", one of "narrow"
        assert hooks.sent == 8 and hooks.pending == 0

    asyncio.run(scenario())


def test_a_full_queue_drops_at_once_and_says_so() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock)
        port.gate = asyncio.Event()  # the destination does not answer for now
        hooks = Webhooks(port, clock, Events(), depth=3, concurrency={"b": 2})
        outcomes: list[WebhookOutcome] = []
        accepted = [
            hooks.submit(request(f"e{n}", action="ab"[n % 2]), outcomes.append) for n in range(5)
        ]
        # the refusals are reported before submit returns, without a loop turn
        assert accepted == [True, True, True, False, False]
        assert [(o.event_id, o.result, o.error, o.attempts) for o in outcomes] == [
            ("e3", "dropped", "queue full", 0),
            ("e4", "dropped", "queue full", 0),
        ]
        assert (hooks.dropped, hooks.pending) == (2, 3) and balanced(hooks)
        await clock.wait_all_blocked()
        assert port.in_flight == 2  # e0 and e1; e2 waits behind e0 ("a" posts one at a time)
        port.gate.set()
        await clock.advance(1)
        assert sorted(o.event_id for o in outcomes if o.ok) == ["e0", "e1", "e2"]
        assert hooks.submit(request("e5"))  # room again
        await clock.advance(1)
        assert (hooks.sent, hooks.dropped, hooks.pending) == (4, 2, 0) and balanced(hooks)

    asyncio.run(scenario())


def test_send_waits_for_the_outcome_and_a_drop_answers_at_once() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock, {"e1": [500, 201]})
        hooks = Webhooks(port, clock, Events(), depth=1, rng=random.Random(SEED))
        waiting = asyncio.create_task(hooks.send(request("e1")))
        await clock.wait_all_blocked()
        dropped = await hooks.send(request("e2"))
        assert (dropped.result, dropped.error) == ("dropped", "queue full")
        await clock.advance(10)
        outcome = waiting.result()
        assert (outcome.result, outcome.status, outcome.attempts) == ("sent", 201, 2)
        assert (
            outcome.describe()
            == "sent to https://hooks.example.com/spool/big?… (HTTP 201, 2 attempts)"
        )

    asyncio.run(scenario())


# -- stopping ---------------------------------------------------------------------------


def test_stop_drains_within_its_budget_then_cancels_the_rest() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock, takes=1.0)
        hooks = Webhooks(port, clock, Events())
        outcomes: list[WebhookOutcome] = []
        for n in range(5):
            hooks.submit(request(f"e{n}"), outcomes.append)
        stopping = asyncio.create_task(hooks.stop(2.5))
        await clock.wait_all_blocked()
        assert not hooks.submit(request("late"), outcomes.append)  # refused while stopping
        await clock.advance(2.5)
        await stopping
        assert [(o.event_id, o.result, o.error) for o in outcomes] == [
            ("late", "dropped", "stopping"),
            ("e0", "sent", None),
            ("e1", "sent", None),
            ("e2", "cancelled", "stopped"),  # in flight when the budget ran out
            ("e3", "cancelled", "stopped"),
            ("e4", "cancelled", "stopped"),
        ]
        assert [o.attempts for o in outcomes[3:]] == [1, 0, 0]
        assert (hooks.sent, hooks.cancelled, hooks.dropped, hooks.pending) == (2, 3, 1, 0)
        assert balanced(hooks)
        await clock.wait_all_blocked()
        assert asyncio.all_tasks() == {asyncio.current_task()}  # no worker left

    asyncio.run(scenario())


def test_stop_returns_as_soon_as_the_queue_is_drained() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock, {"e0": [503, 200]}, takes=1.0)
        hooks = Webhooks(port, clock, Events(), rng=random.Random(SEED))
        for n in range(2):
            hooks.submit(request(f"e{n}"))
        stopping = asyncio.create_task(hooks.stop(30))
        await clock.advance(30)
        assert stopping.done()
        [delay] = expected_delays(1)
        assert port.times() == pytest.approx([0, 1 + delay, 2 + delay])
        assert (hooks.sent, hooks.cancelled) == (2, 0)
        await Webhooks(port, clock, Events()).stop(0)  # nothing pending: at once

    asyncio.run(scenario())


def test_stop_cancels_a_backoff_longer_than_its_budget() -> None:
    async def scenario() -> None:
        clock = VirtualClock()
        port = ScriptedPort(clock, {"e0": [WebhookResponse.answered(429, "50"), 200]})
        hooks = Webhooks(port, clock, Events())
        outcomes: list[WebhookOutcome] = []
        hooks.submit(request("e0"), outcomes.append)
        stopping = asyncio.create_task(hooks.stop(5))
        await clock.advance(5)
        await stopping
        [outcome] = outcomes
        assert (outcome.result, outcome.attempts, outcome.status) == ("cancelled", 1, 429)
        assert outcome.describe() == (
            "cancelled: stopped from https://hooks.example.com/spool/big?… (1 attempt)"
        )
        await clock.advance(100)
        assert len(port.posts) == 1  # the retry never happens

    asyncio.run(scenario())


def test_a_raising_callback_is_reported_in_the_event_log_once_a_minute() -> None:
    def raising(outcome: WebhookOutcome) -> None:
        raise RuntimeError(outcome.target)

    async def scenario() -> None:
        clock = VirtualClock()
        events = Events()
        hooks = Webhooks(ScriptedPort(clock), clock, events)
        delivered: list[str] = []
        for n in range(3):
            hooks.submit(request(f"e{n}"), raising)
        hooks.submit(request("e3"), lambda o: delivered.append(o.event_id))
        await clock.advance(10)
        assert delivered == ["e3"]  # the raising callbacks stopped nothing
        assert (hooks.sent, hooks.callback_failures) == (4, 3)
        assert events.got == [
            (
                "error",
                "actions",
                "webhook_callback_failed",
                {"action": "a", "error": "RuntimeError", "failures": 1},
            )
        ]
        await clock.advance(REPORT_INTERVAL)
        hooks.submit(request("e4"), raising)
        await clock.advance(10)
        assert [fields["failures"] for *_, fields in events.got] == [1, 4]

    asyncio.run(scenario())


# -- requests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"timeout": 0.05}, "timeout"),
        ({"timeout": 61.0}, "timeout"),
        ({"retries": 11}, "retries"),
        ({"retries": -1}, "retries"),
        ({"backoff": -1.0}, "backoff"),
        ({"headers": (("Content-Type", "text/plain"),)}, "set by Spool"),
        ({"secret_headers": (("spool-signature", "sha256=00"),)}, "set by Spool"),
        ({"headers": (("Bad Name", "x"),)}, "not an HTTP token"),
        ({"secret_headers": (("Authorization", f"Bearer {SECRET}\r\nX: y"),)}, "control"),
        ({"content_type": "text/plain\n"}, "content type"),
        ({"signing_key": b""}, "signing key"),
    ],
)
def test_a_request_that_cannot_be_sent_is_refused_without_showing_values(
    options: dict[str, object], says: str
) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        request(**options)
    assert SECRET not in str(refused.value)


def test_a_request_shows_no_secret() -> None:
    req = request(
        url=f"https://user:{PASSWORD}@hooks.example.com/spool/big?token={QUERY}#frag",
        headers=(("X-Plain", "plain-value"),),
        secret_headers=(("Authorization", f"Bearer {SECRET}"),),
        signing_key=KEY,
    )
    for text in (repr(req), str(req), f"{req}", f"{req!r}"):
        assert "https://hooks.example.com/spool/big?…" in text
        assert "X-Plain" in text and "plain-value" not in text
        for secret in (SECRET, KEY.decode(), QUERY, PASSWORD, "frag"):
            assert secret not in text


# -- the threaded port, with httpx's mock transport -------------------------------------


@pytest.fixture
def threads() -> Iterator[list[ThreadedWebhooks]]:
    """Closes every port a test opens, and checks that no pool thread outlives it."""
    ports: list[ThreadedWebhooks] = []
    yield ports
    for port in ports:
        port.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("spool-webhook")]


def mock_port(
    ports: list[ThreadedWebhooks], transport: httpx.MockTransport, n: int = 2
) -> ThreadedWebhooks:
    port = ThreadedWebhooks(n, SYSTEM_CLOCK, transport=transport)
    ports.append(port)
    return port


def test_every_post_carries_spools_headers_and_a_verifiable_signature(
    threads: list[ThreadedWebhooks],
) -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(204)

    req = request(
        action="big-orders/é",
        event_id="0badc0ffee|42|",
        content_type="application/vnd.orders+json",
        headers=(("X-Tenant", "t1"),),
        secret_headers=(("Authorization", f"Bearer {SECRET}"),),
        signing_key=KEY,
    )

    async def scenario() -> WebhookResponse:
        return await mock_port(threads, httpx.MockTransport(handler)).post(req)

    response = asyncio.run(scenario())
    assert (response.status, response.ok, response.error) == (204, True, None)
    [sent] = seen
    assert sent.method == "POST" and str(sent.url) == URL  # the query is sent, of course
    assert sent.content == req.body
    headers = sent.headers
    assert headers["Content-Type"] == "application/vnd.orders+json"
    assert headers["User-Agent"] == f"spool/{__version__}"
    assert headers["Spool-Event-Id"] == "0badc0ffee|42|"
    assert unquote(headers["Spool-Action"]) == "big-orders/é"
    assert headers["Spool-Action"].isascii()
    assert headers["X-Tenant"] == "t1"
    assert headers["Authorization"] == f"Bearer {SECRET}"
    scheme, _, digest = headers["Spool-Signature"].partition("=")
    assert scheme == "sha256"
    assert hmac.compare_digest(digest, hmac.new(KEY, sent.content, hashlib.sha256).hexdigest())


def test_no_signature_without_a_key(threads: list[ThreadedWebhooks]) -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200)

    async def scenario() -> None:
        await mock_port(threads, httpx.MockTransport(handler)).post(request())

    asyncio.run(scenario())
    assert "Spool-Signature" not in seen[0].headers
    assert seen[0].headers["Content-Type"] == "application/json"


def test_redirects_are_not_followed(threads: list[ThreadedWebhooks]) -> None:
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(str(req.url))
        return httpx.Response(307, headers={"Location": "https://elsewhere.example/"})

    async def scenario() -> WebhookOutcome:
        clock = VirtualClock()
        hooks = Webhooks(mock_port(threads, httpx.MockTransport(handler)), clock, Events())
        return await hooks.send(request())

    outcome = asyncio.run(scenario())
    assert (outcome.result, outcome.status, outcome.attempts) == ("failed", 307, 1)
    assert seen == [URL]


class Body(httpx.SyncByteStream):
    """A response body of ``chunks`` chunks of 16 KiB, then a reset when ``breaks``."""

    def __init__(self, chunks: int, breaks: bool = False) -> None:
        self.chunks = chunks
        self.breaks = breaks
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        for _ in range(self.chunks):
            self.sent += 1
            yield b"x" * 16384
        if self.breaks:
            raise httpx.ReadError("connection reset")


def test_the_answer_counts_whatever_its_body_does(threads: list[ThreadedWebhooks]) -> None:
    bodies = {"short": Body(1), "broken": Body(1, breaks=True), "huge": Body(100)}

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=bodies[req.headers["Spool-Event-Id"]])

    async def scenario() -> dict[str, WebhookResponse]:
        port = mock_port(threads, httpx.MockTransport(handler))
        return {name: await port.post(request(name)) for name in bodies}

    answers = asyncio.run(scenario())
    assert {name: (a.status, a.error) for name, a in answers.items()} == {
        "short": (200, None),
        "broken": (200, None),
        "huge": (200, None),
    }
    assert bodies["huge"].sent == 5  # 64 KiB read, then the connection is dropped


def test_retry_classes_through_the_threads(threads: list[ThreadedWebhooks]) -> None:
    script: dict[str, deque[int | Exception]] = {
        "500-then-200": deque([500, 200]),
        "404": deque([404]),
        "connect": deque([httpx.ConnectError("no route"), 200]),
        "timeout": deque([httpx.ReadTimeout("slow"), 200]),
        "429": deque([429, 200]),
    }

    def handler(req: httpx.Request) -> httpx.Response:
        answer = script[req.headers["Spool-Event-Id"]].popleft()
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(answer, headers={"Retry-After": "0"})

    async def scenario() -> dict[str, WebhookOutcome]:
        clock = VirtualClock()
        port = mock_port(threads, httpx.MockTransport(handler), n=3)
        hooks = Webhooks(port, clock, Events(), concurrency={name: 1 for name in script})
        names = list(script)
        outcomes = await asyncio.gather(
            *(hooks.send(request(name, action=name, backoff=0.0)) for name in names)
        )
        return dict(zip(names, outcomes, strict=True))

    outcomes = asyncio.run(scenario())
    summary = {name: (o.result, o.attempts, o.error) for name, o in outcomes.items()}
    assert summary == {
        "500-then-200": ("sent", 2, None),
        "404": ("failed", 1, "HTTP 404"),
        "connect": ("sent", 2, None),
        "timeout": ("sent", 2, None),
        "429": ("sent", 2, None),
    }


def test_no_secret_reaches_an_outcome_a_response_or_a_log_line(
    threads: list[ThreadedWebhooks], caplog: pytest.LogCaptureFixture
) -> None:
    """httpx puts the URL (query included) into its exception messages and logs it per
    request; what Spool shows is built from status codes and class names only."""
    caplog.set_level(logging.DEBUG)
    messages: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.headers["Spool-Event-Id"] == "fails":
            message = f"cannot reach {req.url}: {dict(req.headers)} {req.content!r}"
            messages.append(message)
            raise httpx.ConnectError(message)
        return httpx.Response(200)

    url = f"https://user:{PASSWORD}@hooks.example.com/spool/big?token={QUERY}"
    options = {
        "url": url,
        # not Authorization: httpx replaces it with the userinfo's Basic credentials
        "secret_headers": (("X-Api-Key", SECRET),),
        "signing_key": KEY,
        "retries": 1,
        "backoff": 0.0,
    }

    def raising_callback(outcome: WebhookOutcome) -> None:
        raise ValueError(f"the runner choked on {url} {SECRET}")

    events = Events()

    async def scenario() -> list[str]:
        clock = VirtualClock()
        port = mock_port(threads, httpx.MockTransport(handler))
        hooks = Webhooks(port, clock, events)
        response = await port.post(request("fails", **options))
        failed = await hooks.send(request("fails", **options))
        sent = await hooks.send(request("works", **options))
        hooks.submit(request("works", **options), raising_callback)
        await hooks.stop(10)
        assert (failed.result, failed.error, failed.attempts) == ("failed", "ConnectError", 2)
        assert (response.error, response.transient) == ("ConnectError", True)
        assert sent.ok
        return [
            repr(response),
            str(response),
            repr(failed),
            str(failed),
            failed.describe(),
            repr(sent),
            sent.describe(),
            str(failed.error),
        ]

    texts = asyncio.run(scenario())
    assert any(SECRET in m and QUERY in m for m in messages)  # the bait
    logged = caplog.text
    assert "HTTP Request: POST https://hooks.example.com/spool/big?…" in logged  # httpx's line
    reported = repr(events.got)
    assert "webhook_callback_failed" in reported and "ValueError" in reported
    for text in [*texts, logged, reported]:
        for secret in (SECRET, KEY.decode(), QUERY, PASSWORD):
            assert secret not in text, (secret, text)


# -- the threaded port, for real --------------------------------------------------------


def test_the_timeout_is_real_time_and_a_closed_port_is_a_connect_error(
    threads: list[ThreadedWebhooks], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listener that accepts (the kernel's backlog) but never answers: the read times
    out after the request's timeout; a closed port is a connect error. Both transient."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):  # straight to 127.0.0.1
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent_port = silent.getsockname()[1]
        with socket.create_server(("127.0.0.1", 0)) as gone:
            gone_port = gone.getsockname()[1]

        async def scenario() -> tuple[WebhookResponse, WebhookResponse]:
            port = ThreadedWebhooks(2, SYSTEM_CLOCK)
            threads.append(port)
            return await asyncio.gather(
                port.post(request(url=f"http://127.0.0.1:{silent_port}/hook", timeout=0.3)),
                port.post(request(url=f"http://127.0.0.1:{gone_port}/hook", timeout=0.3)),
            )

        timed_out, refused = asyncio.run(scenario())
    assert (timed_out.error, timed_out.transient, timed_out.retryable) == (
        "ReadTimeout",
        True,
        True,
    )
    assert 0.25 <= timed_out.elapsed < 5
    assert (refused.error, refused.transient) == ("ConnectError", True)


def test_close_leaves_no_thread_and_a_closed_port_fails_posts() -> None:
    def named() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("spool-webhook")]

    transport = httpx.MockTransport(lambda req: httpx.Response(200))
    idle = ThreadedWebhooks(2, SYSTEM_CLOCK, transport=transport)
    idle.close()  # never posted: never had a thread
    port = ThreadedWebhooks(3, SYSTEM_CLOCK, transport=transport)

    async def scenario() -> WebhookResponse:
        answers = await asyncio.gather(*(port.post(request(f"e{n}")) for n in range(9)))
        assert all(a.ok for a in answers)
        assert named()  # the pool's threads exist while it is open
        await port.aclose()
        return await port.post(request("late"))

    late = asyncio.run(scenario())
    assert named() == []
    assert (late.status, late.error, late.transient) == (None, "RuntimeError", False)
    port.close()  # twice is harmless
