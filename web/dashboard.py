"""The operator dashboard: HTML pages and the live Server-Sent-Events stream.

Pages are Jinja2 templates (templates/) with ES modules (static/js/) that read the REST
admin API; this module only renders the page shells and runs ``/live/events``.

Live stream: one :class:`DashboardFeed` per app samples ``broker.metrics_snapshot()`` once a
second, turns cumulative counters into rates (:class:`LivePointBuilder`) and fans the
encoded event out to every open dashboard, so ten open browsers cost one snapshot a
second, not ten. The feed runs while someone listens (and for :data:`IDLE_GRACE` after).
Each stream starts with the recent history (the last five minutes of points and the newest
event-log entries) so a page that opens or reconnects draws a full chart at once.

Wire format (``text/event-stream``)::

    retry: 2000                        reconnect delay for EventSource, ms
    event: history                     once, first: {"points": [...], "log": [...]}
    data: {"time": ..., "msgs_in": ...} every second: one point (the default event)
    event: log                         when the event log grew: [{"id": n, "entry": {...}}]

A stream ends when the client goes away, when the broker starts shutting down (so
uvicorn's graceful shutdown never waits on an open dashboard), when the client reads too
slowly to keep up, and after :data:`STREAM_MAX_SECONDS` (EventSource reconnects by itself
and gets a fresh history), which bounds how long any stream can hold a server shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, NotRequired, Protocol, TypedDict

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.templating import Jinja2Templates
from starlette.types import Receive, Scope, Send

from spool.server.alerts import Alert
from spool.server.clock import Clock
from spool.server.resources import TEMPLATES, resource_dir
from spool.server.stats.histogram import HistogramSnapshot
from spool.server.stats.rates import interval_histogram, rate
from spool.server.stats.snapshot import MetricsSnapshot
from spool.web.auth import auth_context, csrf_token_for
from spool.web.fabric import fabric_csp, fabric_peer_origins

templates: Final = Jinja2Templates(directory=resource_dir(TEMPLATES))

SAMPLE_INTERVAL: Final = 1.0
"""Seconds between two live points."""
HISTORY_POINTS: Final = 300
"""Points kept for a (re)connecting page: five minutes at one a second."""
LOG_HISTORY: Final = 200
"""Event-log entries sent in a stream's history."""
STREAM_MAX_SECONDS: Final = 60.0
"""A stream ends after this long; EventSource reconnects by itself after ``RETRY_MS``."""
SUBSCRIBER_QUEUE: Final = 32
"""Events buffered for one stream; a stream that falls this far behind is ended."""
IDLE_GRACE: Final = 60.0
"""Seconds the feed keeps sampling after the last stream closed, so that a page reloaded or
opened again soon after still gets a full history."""
RETRY_MS: Final = 2000
"""The ``retry`` sent to EventSource: how long a page waits before reconnecting, ms."""
EVENT_LOG_SCAN: Final = 500
"""How many of the event log's newest entries a tick looks at for new ones."""


# -- pages ------------------------------------------------------------------------------


def _recent_events(request: Request) -> dict[str, Any]:
    """The events page arrives with the newest entries, newest first (readable without JS)."""
    return {"events": list(reversed(request.app.state.broker.events.recent(LOG_HISTORY)))}


@dataclass(frozen=True, slots=True)
class Page:
    """One dashboard page.

    Attributes:
        path: URL path.
        name: identifier (navigation highlight, ``data-page``).
        title: shown in the navigation and the window title.
        template: file under templates/.
        extra: adds page-specific values to the template context.
        csp: the page's own Content-Security-Policy (web/headers.py's otherwise).
        nav: listed in the navigation (a page reached from another one is not).
    """

    path: str
    name: str
    title: str
    template: str
    extra: Callable[[Request], dict[str, Any]] | None = None
    csp: Callable[[Request], str] | None = None
    nav: bool = True


def _fabric_peers(request: Request) -> dict[str, Any]:
    """The fabric page's peers: the origins it may call (web/fabric.py)."""
    return {"fabric_peers": fabric_peer_origins(request.app.state.config)}


def _fabric_csp(request: Request) -> str:
    return fabric_csp(request.app.state.config)


def _client_detail(request: Request) -> dict[str, Any]:
    """The client page's client and, on a subscription's address, that subscription: the
    page's script reads them from the template (they may name a client that left)."""
    return {
        "client_name": request.path_params["name"],
        "sub_id": request.path_params.get("sub_id", ""),
    }


PAGES: Final[tuple[Page, ...]] = (
    Page("/", "overview", "Overview", "overview.html"),
    Page("/clients", "clients", "Clients", "clients.html"),
    # one client, connected or gone, and one of its subscriptions: reached from the
    # Clients and Subscriptions pages
    Page("/clients/{name}", "client", "Client", "client.html", extra=_client_detail, nav=False),
    Page(
        "/clients/{name}/subs/{sub_id}",
        "client-subscription",
        "Client",
        "client.html",
        extra=_client_detail,
        nav=False,
    ),
    Page("/subscriptions", "subscriptions", "Subscriptions", "subscriptions.html"),
    Page("/transaction-log", "transaction-log", "Transaction log", "transaction_log.html"),
    Page("/replication", "replication", "Replication", "replication.html"),
    Page("/fabric", "fabric", "Fabric", "fabric.html", extra=_fabric_peers, csp=_fabric_csp),
    Page("/actions", "actions", "Actions", "actions.html"),
    Page("/history", "history", "History", "history.html"),
    Page("/topics", "topics", "Topics", "topics.html"),
    Page("/query", "query", "Query", "query.html"),
    Page("/publish", "publish", "Publish", "publish.html"),
    Page("/sow", "sow", "SOW", "sow.html"),
    Page("/queues", "queues", "Queues", "queues.html"),
    # one queue's messages (?queue=NAME), reached from the Queues page
    Page("/queues/messages", "queue-messages", "Queue messages", "queue_messages.html", nav=False),
    # one queue's dead letters and their redrive (?queue=NAME), reached from the Queues page
    Page(
        "/queues/dead-letters",
        "queue-dead-letters",
        "Dead letters",
        "queue_dead_letters.html",
        nav=False,
    ),
    Page("/events", "events", "Events", "events.html", extra=_recent_events),
)


def page_context(request: Request, page: Page) -> dict[str, Any]:
    """What every page template gets: instance identity, navigation, user and whether they
    may act, CSRF token."""
    who = auth_context(request)
    state = request.app.state
    return {
        "page": page,
        "nav": [p for p in PAGES if p.nav],
        "instance": {
            "name": state.config.name,
            "group": state.config.group,
            "address": state.config.admin.address,
        },
        "csrf_token": csrf_token_for(request) or "",
        "auth_enabled": state.broker.auth.enabled,
        # AllowPlaintext on a non-loopback address: every page says so (docs/security.md)
        "plaintext_exposed": state.config.plaintext_exposed,
        # conditions every page shows until they end (a write outage...): server/alerts.py
        "alerts": state.broker.operations.alerts(),
        # set by spool.web.auth's middleware (Starlette's convention): a UserConfig or None
        "user_name": getattr(request.scope.get("user"), "name", None),
        # whether the user may act (every POST): the pages disable the buttons otherwise
        "admin": who.admin,
    }


def _page_endpoint(page: Page) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        context = page_context(request, page)
        if page.extra is not None:
            context.update(page.extra(request))
        headers = {"Cache-Control": "no-store"}
        if page.csp is not None:
            headers["Content-Security-Policy"] = page.csp(request)
        return templates.TemplateResponse(request, page.template, context, headers=headers)

    endpoint.__name__ = f"page_{page.name.replace('-', '_')}"
    return endpoint


# -- live points ------------------------------------------------------------------------


class LivePoint(TypedDict):
    """One second of the instance, as sent on the live stream.

    Rates are per second over the last interval; ``ack_p50_ms`` / ``ack_p99_ms`` are the
    persisted-ack latency percentiles of the acks sent in that interval (None when there
    was none). ``catching_up`` is how many live subscriptions read the log after a burst
    now; ``spills``, ``catch_up_seconds`` and ``disconnects`` (by cause) are totals since
    the start. ``alerts`` are the conditions every page shows in a banner
    (server/alerts.py), added by the feed at each tick.
    """

    time: float
    msgs_in: float
    msgs_out: float
    bytes_in: float
    bytes_out: float
    connections: int
    subscriptions: int
    queue_depth: int
    lag_max: float
    durable_seq: int | None
    txlog_bytes: int | None
    acks: int
    ack_p50_ms: float | None
    ack_p99_ms: float | None
    catching_up: int
    spills: int
    catch_up_seconds: float
    disconnects: dict[str, int]
    alerts: NotRequired[list[Alert]]


@dataclass(frozen=True, slots=True)
class _Reading:
    """The cumulative counters of one snapshot, kept as the next interval's baseline.

    The histogram is copied (:meth:`LatencyHistogram.snapshot`): the snapshot holds the
    engine's live histogram, which keeps counting after the reading.
    """

    at: float
    msgs_in: int
    msgs_out: int
    bytes_in: int
    bytes_out: int
    acks: HistogramSnapshot

    @classmethod
    def of(cls, snapshot: MetricsSnapshot, at: float) -> _Reading:
        """Read ``snapshot`` (taken at monotonic time ``at``)."""
        return cls(
            at=at,
            msgs_in=snapshot["msgs_in"],
            msgs_out=snapshot["msgs_out"],
            bytes_in=snapshot["bytes_in"],
            bytes_out=snapshot["bytes_out"],
            acks=snapshot["persisted_ack_latency"].snapshot(),
        )


class LivePointBuilder:
    """Turns successive :class:`MetricsSnapshot` readings into :class:`LivePoint` rates.

    Counters in the snapshot are cumulative; a rate needs the previous reading, so the
    first snapshot only sets the baseline. Rates follow :mod:`spool.server.stats.rates`, the
    rule of the stats database too: a counter that went down was reset (the engine
    restarted) and counts from zero, never as a negative rate.
    """

    def __init__(self) -> None:
        self._prev: _Reading | None = None

    def reset(self) -> None:
        """Forget the baseline (after a pause, a rate over the gap would mislead)."""
        self._prev = None

    def update(self, snapshot: MetricsSnapshot, now: float) -> LivePoint | None:
        """Feed one snapshot taken at monotonic time ``now``; None for the first one."""
        cur = _Reading.of(snapshot, now)
        prev, self._prev = self._prev, cur
        if prev is None or cur.at <= prev.at:
            return None
        dt = cur.at - prev.at
        interval = interval_histogram(cur.acks, prev.acks)
        p50: float | None = None
        p99: float | None = None
        if interval.count > 0:
            p50 = round(interval.percentile(50) * 1000.0, 4)
            p99 = round(interval.percentile(99) * 1000.0, 4)
        txlog = snapshot["txlog"]
        return LivePoint(
            time=round(snapshot["time"], 3),
            msgs_in=round(rate(cur.msgs_in, prev.msgs_in, dt), 2),
            msgs_out=round(rate(cur.msgs_out, prev.msgs_out, dt), 2),
            bytes_in=round(rate(cur.bytes_in, prev.bytes_in, dt), 2),
            bytes_out=round(rate(cur.bytes_out, prev.bytes_out, dt), 2),
            connections=snapshot["connections"],
            subscriptions=snapshot["subscriptions"],
            queue_depth=sum(c["queue_depth"] for c in snapshot["clients"].values()),
            lag_max=round(
                max((s["seconds_behind"] for s in snapshot["subscriptions_detail"]), default=0.0),
                3,
            ),
            durable_seq=txlog["durable_seq"] if txlog is not None else None,
            txlog_bytes=int(txlog["bytes"]) if txlog is not None else None,
            acks=interval.count,
            ack_p50_ms=p50,
            ack_p99_ms=p99,
            catching_up=snapshot["spills"]["catching_up"],
            spills=snapshot["spills"]["spills"],
            catch_up_seconds=round(snapshot["spills"]["seconds"], 3),
            disconnects=dict(snapshot["disconnects"]),
        )


# -- the feed ---------------------------------------------------------------------------


class LogItem(TypedDict):
    """One event-log entry on the live stream, numbered by the feed (``id`` increases)."""

    id: int
    entry: dict[str, Any]


class RecentEvents(Protocol):
    """The event log as the feed sees it (spool.server.eventlog.EventLog)."""

    def recent(self, limit: int = 200) -> list[dict[str, Any]]: ...


class LiveSource(Protocol):
    """The part of the broker the feed reads (:class:`spool.server.operations.Operations`)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def events(self) -> RecentEvents: ...

    @property
    def stopping(self) -> bool: ...

    def metrics_snapshot(self) -> MetricsSnapshot: ...

    def alerts(self) -> list[Alert]: ...


def sse_event(data: bytes, event: str | None = None) -> bytes:
    """One SSE event. ``data`` must be one line (compact JSON is)."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + data + b"\n\n"


def _dumps(value: object) -> bytes:
    return orjson.dumps(value, default=str)


class LiveSubscriber:
    """One open stream's mailbox. ``None`` in the queue ends the stream."""

    __slots__ = ("queue",)

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(SUBSCRIBER_QUEUE)

    def offer(self, item: bytes | None) -> bool:
        """Queue an item; False (and the stream ended) if the reader fell behind."""
        try:
            self.queue.put_nowait(item)
            return True
        except asyncio.QueueFull:
            self.end()
            return False

    def end(self) -> None:
        """End the stream: drop what it has not read and queue the end marker."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)


class DashboardFeed:
    """Samples the broker once a second for every open stream (see the module docstring).

    Args:
        broker: what to sample.
        interval: seconds between points.
        idle_grace: seconds to keep sampling with no stream open.
    """

    def __init__(
        self,
        broker: LiveSource,
        *,
        interval: float = SAMPLE_INTERVAL,
        idle_grace: float = IDLE_GRACE,
    ) -> None:
        self._broker = broker
        self._clock = broker.clock
        self._interval = interval
        self._idle_grace = idle_grace
        self._subscribers: set[LiveSubscriber] = set()
        self._builder = LivePointBuilder()
        self._points: deque[LivePoint] = deque(maxlen=HISTORY_POINTS)
        self._log: deque[LogItem] = deque(maxlen=LOG_HISTORY)
        self._log_id = 0
        self._last_entry: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def subscribers(self) -> int:
        """Open streams."""
        return len(self._subscribers)

    @property
    def running(self) -> bool:
        """Whether the sampling task is alive."""
        return self._task is not None

    def _stopping(self) -> bool:
        return self._closed or self._broker.stopping

    def subscribe(self) -> LiveSubscriber:
        """Open a stream: its first item is the history; the sampler starts if needed."""
        sub = LiveSubscriber()
        if self._stopping():
            sub.end()
            return sub
        if self._task is None:
            self._start()
        self._subscribers.add(sub)
        history = {"points": list(self._points), "log": list(self._log)}
        sub.offer(sse_event(_dumps(history), "history"))
        return sub

    def unsubscribe(self, sub: LiveSubscriber) -> None:
        """Close a stream (the sampler stops :data:`IDLE_GRACE` after the last one)."""
        self._subscribers.discard(sub)

    def close(self) -> None:
        """End every stream and stop sampling for good."""
        self._closed = True
        self._end_all()
        if self._task is not None:
            self._task.cancel()

    def _end_all(self) -> None:
        for sub in self._subscribers:
            sub.end()
        self._subscribers.clear()

    def _start(self) -> None:
        # A restart after an idle spell: the old points end long ago, and a rate over the
        # whole gap would be an average nobody asked for.
        now = self._clock.time()
        if self._points and now - self._points[-1]["time"] > 3 * self._interval:
            self._points.clear()
        self._builder.reset()
        self._scan_log(broadcast=False)
        self._builder.update(self._broker.metrics_snapshot(), self._clock.monotonic())
        self._task = asyncio.get_running_loop().create_task(self._run(), name="live-feed")

    async def _run(self) -> None:
        idle_since: float | None = None
        try:
            while not self._stopping():
                if self._subscribers:
                    idle_since = None
                elif idle_since is None:
                    idle_since = self._clock.monotonic()
                elif self._clock.monotonic() - idle_since >= self._idle_grace:
                    break
                await self._clock.sleep(self._interval)
                if self._stopping():
                    break
                self.tick()
        finally:
            self._task = None
            if self._stopping():
                self._end_all()

    def tick(self) -> None:
        """Take one sample and send it (and any new event-log entries) to every stream."""
        point = self._builder.update(self._broker.metrics_snapshot(), self._clock.monotonic())
        out: list[bytes] = []
        if point is not None:
            point["alerts"] = self._broker.alerts()
            self._points.append(point)
            out.append(sse_event(_dumps(point)))
        fresh = self._scan_log(broadcast=True)
        if fresh:
            out.append(sse_event(_dumps(fresh), "log"))
        if not out:
            return
        payload = b"".join(out)
        for sub in list(self._subscribers):
            if not sub.offer(payload):
                self._subscribers.discard(sub)

    def _scan_log(self, *, broadcast: bool) -> list[LogItem]:
        """Entries added to the event log since the last scan, numbered for the pages.

        The event log keeps dicts in a bounded deque and hands out the same objects, so
        the newest entry seen last time is found again by identity; if it has been evicted
        every entry is new. The very first scan (``broadcast`` false, nothing seen yet)
        takes only the newest :data:`LOG_HISTORY` entries, the history a page gets.
        """
        entries = self._broker.events.recent(EVENT_LOG_SCAN)
        start = 0
        last = self._last_entry
        if last is not None:
            for i in range(len(entries) - 1, -1, -1):
                if entries[i] is last:
                    start = i + 1
                    break
        elif not broadcast:
            start = max(0, len(entries) - LOG_HISTORY)
        fresh: list[LogItem] = []
        for entry in entries[start:]:
            self._log_id += 1
            item = LogItem(id=self._log_id, entry=entry)
            self._log.append(item)
            fresh.append(item)
        if entries:
            self._last_entry = entries[-1]
        return fresh


def live_feed(request: Request) -> DashboardFeed:
    """The app's feed, created on first use (on the app's event loop)."""
    state = request.app.state
    feed: DashboardFeed | None = getattr(state, "live_feed", None)
    if feed is None:
        feed = DashboardFeed(state.broker.operations)
        state.live_feed = feed
    return feed


class EventStreamResponse(Response):
    """A ``text/event-stream`` response fed by one :class:`LiveSubscriber`.

    The stream listens for ``http.disconnect`` itself instead of finding out at the next
    failed write, so a closed tab frees its subscriber at once whatever the ASGI server's
    spec version.
    """

    media_type = "text/event-stream"

    def __init__(self, feed: DashboardFeed, *, max_seconds: float = STREAM_MAX_SECONDS) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self._feed = feed
        self._max_seconds = max_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sub = self._feed.subscribe()
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            writer = asyncio.ensure_future(self._write(send, sub))
            listener = asyncio.ensure_future(_until_disconnect(receive))
            try:
                await asyncio.wait({writer, listener}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (writer, listener):
                    task.cancel()
                results = await asyncio.gather(writer, listener, return_exceptions=True)
            for result in results:
                # OSError: the client went away under a write (uvicorn's ClientDisconnected)
                if isinstance(result, Exception) and not isinstance(result, OSError):
                    raise result
        finally:
            self._feed.unsubscribe(sub)

    async def _write(self, send: Send, sub: LiveSubscriber) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_seconds
        await send(
            {"type": "http.response.body", "body": b"retry: %d\n\n" % RETRY_MS, "more_body": True}
        )
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                item = await asyncio.wait_for(sub.queue.get(), remaining)
            except TimeoutError:
                break
            if item is None:
                break
            await send({"type": "http.response.body", "body": item, "more_body": True})
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _until_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def live_events(request: Request) -> Response:
    """GET /live/events: the live stream of the dashboard pages."""
    return EventStreamResponse(live_feed(request))


def dashboard_routes() -> list[BaseRoute]:
    """The pages (GET) and ``/live/events``; the app adds auth in front of them."""
    routes: list[BaseRoute] = [
        Route(page.path, _page_endpoint(page), methods=["GET"], name=f"page-{page.name}")
        for page in PAGES
    ]
    routes.append(Route("/live/events", live_events, methods=["GET"], name="live-events"))
    return routes
