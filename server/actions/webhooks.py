"""Webhooks: the HTTP POSTs of ``spool-action-do-webhook``, off the event loop and bounded.

An action step that calls a webhook hands a :class:`WebhookRequest` to the instance's
:class:`Webhooks` dispatcher and goes on: a destination that is slow, down or refusing
must never slow the broker, so nothing here blocks the loop or grows without bound.

The parts, from the bottom:

- :class:`WebhookPort` posts one attempt and answers a :class:`WebhookResponse`; it never
  raises for what the destination did. :class:`ThreadedWebhooks` is the production port:
  the POST (DNS, connect, TLS, writes, reads) runs on a small pool of its own threads,
  each with its own ``httpx.Client``, with a real-time timeout per request. Tests of the
  dispatcher inject a fake port that answers on the loop.
- :class:`Webhooks` queues, retries and reports. Each action has its own FIFO with at most
  ``Concurrency`` posts in flight (1: posts arrive in the order they were submitted,
  retries included); the whole instance queues at most ``depth`` requests, beyond which a
  request is dropped at once (counted, and the caller told) rather than waited for. A
  connect error, a timeout, another network error, 429 or a 5xx is retried after
  ``Backoff * 2**(n-1)`` seconds (+-20 % jitter, at most :data:`MAX_DELAY`, longer if the
  destination's ``Retry-After`` asks for more) on the injected clock; any other answer is
  final. Every request submitted gets exactly one :class:`WebhookOutcome`, through the
  callback given with it.
- where a webhook may post is :class:`spool.server.config.AllowList`, the rule the
  configuration checks each ``Url`` with (a runner checks the expanded URL with it), and
  :func:`spool.server.config.redact_url` is the only form of a URL that may be shown.

Secrets: header values may carry credentials, the signing key is one, and a URL's query
often holds a token. A request keeps its secret headers apart from the others and none
of its text forms (``repr``, ``str``) shows a header value, the key or the query. An
outcome's error is built from the status code or the exception's class name only, never
``str(exc)`` (httpx puts the whole URL into its messages). httpx's own INFO line for each
request names the URL: :class:`ThreadedWebhooks` installs a filter on the ``httpx``
logger that redacts it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

import httpx

from spool.server import __version__
from spool.server.clock import Clock, sleep_or_wake
from spool.server.config import (
    WEBHOOK_MAX_CONCURRENCY,
    WEBHOOK_MAX_RETRIES,
    WEBHOOK_SPOOL_HEADERS,
    WEBHOOK_TIMEOUT_RANGE,
    redact_url,
)
from spool.server.stats.source import EventSink

__all__ = [
    "DEFAULT_DEPTH",
    "JITTER",
    "MAX_DELAY",
    "REPORT_INTERVAL",
    "USER_AGENT",
    "OutcomeCallback",
    "OutcomeResult",
    "ThreadedWebhooks",
    "WebhookOutcome",
    "WebhookPort",
    "WebhookRequest",
    "WebhookResponse",
    "Webhooks",
    "retry_delay",
    "signature",
]

#: requests queued or being delivered at once in an instance (``<Webhooks><QueueDepth>``)
DEFAULT_DEPTH: Final = 10_000
#: longest wait before a retry, whatever the backoff or the destination's Retry-After ask
MAX_DELAY: Final = 60.0
#: the backoff is multiplied by a factor drawn uniformly from [1 - JITTER, 1 + JITTER], so
#: the retries of many requests failed together do not hit the destination together
JITTER: Final = 0.2
#: how often a raising outcome callback is reported in the event log at most (seconds)
REPORT_INTERVAL: Final = 60.0
#: the User-Agent sent with every post
USER_AGENT: Final = f"spool/{__version__}"
#: most bytes of a response body read (then discarded) so its connection can be reused;
#: a bigger or slower body closes the connection instead
_DRAIN_LIMIT: Final = 64 * 1024
#: a header name (RFC 9110 section 5.6.2)
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: visible ASCII but "%": what a Spool-* header value carries unencoded
_HEADER_SAFE: Final = frozenset(chr(c) for c in range(0x20, 0x7F)) - {"%"}


def _has_control(value: str) -> bool:
    """Whether ``value`` holds a character no header value may (CR, LF, NUL...)."""
    return any((ch < " " and ch != "\t") or ch == "\x7f" for ch in value)


def _check_header(name: str, value: str, what: str) -> None:
    """Refuse a header the port could not send as given; never quotes the value."""
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"{what} header name {name!r} is not an HTTP token")
    if name.lower() in WEBHOOK_SPOOL_HEADERS:
        raise ValueError(f"{what} header {name!r} is set by Spool itself")
    if _has_control(value):
        raise ValueError(f"{what} header {name!r} has a control character in its value")


def _header_text(value: str) -> str:
    """``value`` as a header value: visible ASCII as is, anything else (and "%")
    percent-encoded as UTF-8, so an action name in any script can be sent and read back
    (decode with ``urllib.parse.unquote``)."""
    if all(ch in _HEADER_SAFE for ch in value):
        return value
    return "".join(
        ch if ch in _HEADER_SAFE else "".join(f"%{b:02X}" for b in ch.encode()) for ch in value
    )


# -- what is sent -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, repr=False)
class WebhookRequest:
    """One webhook to deliver, with its delivery options.

    Args:
        action: the action posting it (a FIFO of its own; sent as ``Spool-Action``).
        url: where to post, query included. Shown only through
            :func:`~spool.server.config.redact_url`.
        body: the request body, as is.
        event_id: what identifies the event (sent as ``Spool-Event-Id``): a retry and a
            re-run after a restart carry the same one, so the receiver can drop repeats.
        headers: headers that may be shown (names and values).
        secret_headers: headers whose values are never shown (``Authorization: ...``).
        content_type: the ``Content-Type`` sent.
        timeout: real seconds each phase of one attempt may take (connect, write, each
            read), within :data:`~spool.server.config.WEBHOOK_TIMEOUT_RANGE`.
        retries: retries after the first attempt (0 to
            :data:`~spool.server.config.WEBHOOK_MAX_RETRIES`).
        backoff: seconds before the first retry, doubled for each next one.
        signing_key: when set, ``Spool-Signature: sha256=HEX`` is sent, the HMAC-SHA256 of
            the body under this key.

    Raises:
        ValueError: an option out of range, or a header that cannot be sent or that Spool
            sets itself (the message names the header, never its value).
    """

    action: str
    url: str
    body: bytes
    event_id: str
    headers: tuple[tuple[str, str], ...] = ()
    secret_headers: tuple[tuple[str, str], ...] = ()
    content_type: str = "application/json"
    timeout: float = 5.0
    retries: int = 3
    backoff: float = 1.0
    signing_key: bytes | None = None

    def __post_init__(self) -> None:
        low, high = WEBHOOK_TIMEOUT_RANGE
        if not low <= self.timeout <= high:
            raise ValueError(f"timeout {self.timeout} s is not within {low}-{high} s")
        if not 0 <= self.retries <= WEBHOOK_MAX_RETRIES:
            raise ValueError(f"retries {self.retries} is not within 0-{WEBHOOK_MAX_RETRIES}")
        if not 0 <= self.backoff <= MAX_DELAY:
            raise ValueError(f"backoff {self.backoff} s is not within 0-{MAX_DELAY:g} s")
        for name, value in self.headers:
            _check_header(name, value, "a")
        for name, value in self.secret_headers:
            _check_header(name, value, "a secret")
        if not self.content_type or _has_control(self.content_type):
            raise ValueError("the content type is empty or has a control character")
        if self.signing_key is not None and not self.signing_key:
            raise ValueError("an empty signing key signs nothing: give None instead")

    def __repr__(self) -> str:
        names = [name for name, _ in self.headers]
        return (
            f"WebhookRequest(action={self.action!r}, url={redact_url(self.url)!r}, "
            f"event_id={self.event_id!r}, body={len(self.body)} bytes, headers={names!r}, "
            f"secret_headers={len(self.secret_headers)}, signed={self.signing_key is not None})"
        )

    __str__ = __repr__


def signature(key: bytes, body: bytes) -> str:
    """The ``Spool-Signature`` value of ``body`` under ``key``: ``sha256=`` and the hex
    HMAC-SHA256. A receiver recomputes it over the raw body and compares in constant time."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def _wire_headers(request: WebhookRequest, user_agent: str) -> list[tuple[bytes, bytes]]:
    """Every header of ``request`` as sent, Spool's own first (values in UTF-8; names are
    ASCII tokens, checked by the request)."""
    headers: list[tuple[str, str]] = [
        ("Content-Type", request.content_type),
        ("User-Agent", user_agent),
        ("Spool-Event-Id", _header_text(request.event_id)),
        ("Spool-Action", _header_text(request.action)),
    ]
    if request.signing_key is not None:
        headers.append(("Spool-Signature", signature(request.signing_key, request.body)))
    headers.extend(request.headers)
    headers.extend(request.secret_headers)
    return [(name.encode("ascii"), value.encode()) for name, value in headers]


# -- one attempt ------------------------------------------------------------------------


def _transient(exc: BaseException) -> bool:
    """Whether a post that raised ``exc`` may pass if tried again: the destination was not
    reached or did not answer (connect error, timeout, a connection reset or closed before
    the answer). Not: a request httpx cannot make (bad URL, scheme, header)."""
    return isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError)


def _retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` in its seconds form; None for none or the date form."""
    if value is None:
        return None
    value = value.strip()
    if not value or not value.isascii() or not value.isdigit():
        return None
    return float(value)


@dataclass(frozen=True, slots=True)
class WebhookResponse:
    """The answer to one attempt.

    Attributes:
        status: the HTTP status, None when no answer came.
        error: the exception's class name when no answer came (never its message).
        transient: for no answer, whether trying again may help (see :func:`_transient`).
        retry_after: seconds the destination asked to wait (``Retry-After``), if any.
        elapsed: seconds the attempt took on the port's clock.
    """

    status: int | None = None
    error: str | None = None
    transient: bool = False
    retry_after: float | None = None
    elapsed: float = 0.0

    @classmethod
    def answered(
        cls, status: int, retry_after: str | None = None, elapsed: float = 0.0
    ) -> WebhookResponse:
        """An HTTP answer; ``retry_after`` is the raw header value (or None)."""
        return cls(status=status, retry_after=_retry_after(retry_after), elapsed=elapsed)

    @classmethod
    def failure(cls, exc: BaseException, elapsed: float = 0.0) -> WebhookResponse:
        """No answer: the post raised ``exc`` (kept as its class name only)."""
        return cls(error=type(exc).__name__, transient=_transient(exc), elapsed=elapsed)

    @property
    def ok(self) -> bool:
        """A 2xx answer: delivered. (Redirects are not followed: a 3xx fails.)"""
        return self.status is not None and 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        """429, a 5xx, or no answer for a transient reason."""
        if self.status is None:
            return self.transient
        return self.status == 429 or 500 <= self.status < 600


class WebhookPort(Protocol):
    """Posts one attempt of a webhook."""

    async def post(self, request: WebhookRequest) -> WebhookResponse:
        """Post ``request`` once and answer what came back; an attempt that got no answer
        is a :meth:`WebhookResponse.failure`, not an exception."""
        ...


# -- the production port ----------------------------------------------------------------


class _RedactUrls(logging.Filter):
    """Rewrites the URLs in httpx's log records (``HTTP Request: POST URL ...``) to their
    :func:`~spool.server.config.redact_url` form, so a query or userinfo never reaches a
    log handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(a, httpx.URL) for a in args):
            record.args = tuple(redact_url(str(a)) if isinstance(a, httpx.URL) else a for a in args)
        return True


_REDACT_HTTPX_LOG: Final = _RedactUrls("spool-webhook-redact")
_filter_lock = threading.Lock()


def _redact_httpx_log() -> None:
    """Install :class:`_RedactUrls` on the ``httpx`` logger, once per process."""
    with _filter_lock:
        logger = logging.getLogger("httpx")
        if _REDACT_HTTPX_LOG not in logger.filters:
            logger.addFilter(_REDACT_HTTPX_LOG)


class ThreadedWebhooks:
    """The production :class:`WebhookPort`: each POST on a thread of its own pool.

    The event loop owns the broker's state and must not block, and everything an HTTP
    request does may block: name resolution, connect, the TLS handshake, writes and reads.
    So each attempt runs on one of ``threads`` threads named ``spool-webhook_N``, created
    at the first post (an instance without webhooks has none). Each thread keeps its own
    ``httpx.Client`` (a client's connection pool is not shared across threads here, so no
    lock is held while a request waits), reused across posts for keep-alive. Redirects are
    not followed: a destination is allowed by its URL, and a redirect could lead anywhere.

    The timeout is real time (``httpx.Timeout(request.timeout)``, per connect, write and
    read): the attempt runs outside the loop, so the injected clock cannot bound it. The
    response body is read up to 64 KiB within the timeout and discarded (reading it lets
    the connection be reused); only the status and ``Retry-After`` matter.

    Args:
        threads: the pool's threads (at least 1).
        clock: times each attempt (``WebhookResponse.elapsed``).
        user_agent: the ``User-Agent`` sent.
        transport: the transport each thread's client uses (tests pass an
            ``httpx.MockTransport``); None: httpx's own.
    """

    def __init__(
        self,
        threads: int,
        clock: Clock,
        user_agent: str = USER_AGENT,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError(f"a webhook pool has at least one thread, not {threads}")
        self.threads = threads
        self.user_agent = user_agent
        self._clock = clock
        self._transport = transport
        self._executor: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._clients_lock = threading.Lock()
        self._closed = False
        _redact_httpx_log()

    def _pool(self) -> ThreadPoolExecutor:
        if self._closed:
            raise RuntimeError("the webhook threads are closed")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="spool-webhook")
        return self._executor

    async def post(self, request: WebhookRequest) -> WebhookResponse:
        """Post ``request`` once on a pool thread (see the class docstring)."""
        loop = asyncio.get_running_loop()
        started = self._clock.monotonic()
        try:
            status, retry_after = await loop.run_in_executor(self._pool(), self._post, request)
        except Exception as exc:  # the destination's failure, or a request httpx refused
            return WebhookResponse.failure(exc, self._clock.monotonic() - started)
        return WebhookResponse.answered(status, retry_after, self._clock.monotonic() - started)

    # -- on a pool thread ---------------------------------------------------------------

    def _client(self) -> httpx.Client:
        client: httpx.Client | None = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(follow_redirects=False, transport=self._transport)
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    def _post(self, request: WebhookRequest) -> tuple[int, str | None]:
        deadline = time.monotonic() + request.timeout
        with self._client().stream(
            "POST",
            request.url,
            content=request.body,
            headers=_wire_headers(request, self.user_agent),
            timeout=httpx.Timeout(request.timeout),
        ) as response:
            if not response.is_stream_consumed:  # a transport may hand the body read
                _drain(response, deadline)
            return response.status_code, response.headers.get("retry-after")

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop the threads and close their clients (and connections).

        Posts not started are cancelled; a post running on a thread is waited for (each
        phase is bounded by its timeout), so this blocks: on the loop, call
        :meth:`aclose` instead. No thread of the pool is left when it returns. Posting
        afterwards fails (``RuntimeError``).
        """
        self._closed = True
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the loop (it runs on a thread of its own)."""
        await asyncio.to_thread(self.close)


def _drain(response: httpx.Response, deadline: float) -> None:
    """Read and discard up to :data:`_DRAIN_LIMIT` bytes of ``response``'s body until the
    monotonic ``deadline``. The status already arrived: a body that breaks off, is too
    big or too slow only costs the connection (closing an unread response drops it),
    never the attempt's answer."""
    read = 0
    try:
        for chunk in response.iter_raw():
            read += len(chunk)
            if read > _DRAIN_LIMIT or time.monotonic() > deadline:
                return
    except (httpx.HTTPError, httpx.StreamError):
        return


# -- the dispatcher ---------------------------------------------------------------------

OutcomeResult = Literal["sent", "failed", "dropped", "cancelled"]


@dataclass(frozen=True, slots=True)
class WebhookOutcome:
    """What became of one submitted request.

    Attributes:
        action: the request's action.
        event_id: the request's event id.
        target: the URL as :func:`~spool.server.config.redact_url` shows it.
        result: ``sent`` (a 2xx answer), ``failed`` (a final answer or no answer after
            the last retry), ``dropped`` (never tried: the queue was full or the
            dispatcher stopping), ``cancelled`` (still queued or in delivery when the
            dispatcher's stop budget ran out).
        status: the last HTTP status, None when no answer came.
        attempts: posts tried.
        error: why it is not ``sent``: ``HTTP 503``, an exception's class name
            (``ConnectError``), ``queue full``, ``stopping``, ``stopped``. None when sent.
    """

    action: str
    event_id: str
    target: str
    result: OutcomeResult
    status: int | None = None
    attempts: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.result == "sent"

    def describe(self) -> str:
        """One line for a run record: ``sent to https://h/p?… (HTTP 200, 2 attempts)``."""
        tries = f"{self.attempts} attempt{'' if self.attempts == 1 else 's'}"
        if self.result == "sent":
            return f"sent to {self.target} (HTTP {self.status}, {tries})"
        if self.result == "dropped":
            return f"dropped ({self.error}): {self.target}"
        return f"{self.result}: {self.error} from {self.target} ({tries})"


def retry_delay(
    backoff: float, retry: int, rng: random.Random, retry_after: float | None = None
) -> float:
    """Seconds to wait before retry number ``retry`` (1 for the first retry).

    ``backoff * 2**(retry-1)`` times a factor drawn from ``rng`` within
    +-:data:`JITTER`; at least ``retry_after`` (the destination's ask: it knows when it
    will be ready, and retrying sooner only earns another 429); at most
    :data:`MAX_DELAY` whatever either says, so a retry is never postponed for long.
    """
    if retry < 1:
        raise ValueError(f"retries are numbered from 1, not {retry}")
    delay = backoff * 2.0 ** (retry - 1) * rng.uniform(1 - JITTER, 1 + JITTER)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return min(delay, MAX_DELAY)


OutcomeCallback = Callable[[WebhookOutcome], None]


@dataclass(slots=True, eq=False)
class _Job:
    request: WebhookRequest
    on_outcome: OutcomeCallback | None
    attempts: int = 0
    status: int | None = None


@dataclass(slots=True, eq=False)
class _Lane:
    """The FIFO of one action and how many of its posts are in delivery."""

    concurrency: int
    queue: deque[_Job] = field(default_factory=deque)
    active: int = 0


class Webhooks:
    """Delivers webhooks through a port: per-action FIFOs, one bound, retries, counters.

    See the module docstring. Everything runs on the event loop: :meth:`submit` is O(1)
    and never blocks; each action with queued requests has up to its ``Concurrency`` of
    worker tasks, which end when its FIFO is empty.

    Args:
        port: posts one attempt (:class:`ThreadedWebhooks` in production).
        clock: the backoff sleeps and the stop budget run on it.
        events: the event log, told of outcome callbacks that raise (at most once per
            :data:`REPORT_INTERVAL`, with the class name of the exception only).
        depth: requests queued or in delivery at most, instance-wide.
        rng: draws the jitter (tests seed it); None: a fresh ``random.Random()``.
        concurrency: posts of an action in flight at most, by action name (1 to
            :data:`~spool.server.config.WEBHOOK_MAX_CONCURRENCY`); an action not named has 1
            (ordered delivery).

    Attributes:
        submitted: requests submitted (``submitted == sent + failed + dropped +
            cancelled + pending`` at all times).
        sent: requests delivered (a 2xx answer).
        failed: requests that got a final error, or no answer after their last retry.
        retries: posts retried: attempts beyond each request's first (the sum of
            ``attempts - 1`` over the outcomes of the requests tried).
        dropped: requests refused by :meth:`submit`: the queue was full or stopping.
        cancelled: requests the stop budget did not leave time to finish.
        callback_failures: outcome callbacks that raised.
        accepting: False once :meth:`stop` was called.
    """

    def __init__(
        self,
        port: WebhookPort,
        clock: Clock,
        events: EventSink,
        *,
        depth: int = DEFAULT_DEPTH,
        rng: random.Random | None = None,
        concurrency: Mapping[str, int] | None = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"a webhook queue holds at least one request, not {depth}")
        limits = dict(concurrency or {})
        for action, limit in limits.items():
            if not 1 <= limit <= WEBHOOK_MAX_CONCURRENCY:
                raise ValueError(
                    f"action {action!r}: concurrency {limit} is not within "
                    f"1-{WEBHOOK_MAX_CONCURRENCY}"
                )
        self.depth = depth
        self.submitted = 0
        self.sent = 0
        self.failed = 0
        self.retries = 0
        self.dropped = 0
        self.cancelled = 0
        self.callback_failures = 0
        self.accepting = True
        self._port = port
        self._clock = clock
        self._events = events
        #: when a raising callback was last reported (the clock's monotonic time)
        self._reported_at: float | None = None
        self._rng = rng if rng is not None else random.Random()
        self._limits = limits
        self._lanes: dict[str, _Lane] = {}
        self._pending = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: set while nothing is pending: what a draining stop waits for
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def pending(self) -> int:
        """Requests queued or in delivery (at most ``depth``)."""
        return self._pending

    # -- submitting ---------------------------------------------------------------------

    def submit(self, request: WebhookRequest, on_outcome: OutcomeCallback | None = None) -> bool:
        """Queue ``request`` for delivery; never blocks. Returns whether it was queued.

        ``on_outcome`` is called exactly once with the request's :class:`WebhookOutcome`,
        on the loop: later for a queued request, at once (before this returns) for a
        refused one (``dropped``: the queue holds ``depth`` requests, or the dispatcher is
        stopping). A callback that raises is counted, reported in the event log and
        otherwise ignored.
        """
        self.submitted += 1
        job = _Job(request, on_outcome)
        if not self.accepting or self._pending >= self.depth:
            self._finish(job, "dropped", "stopping" if not self.accepting else "queue full")
            return False
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(request.action)
        if lane is None:
            lane = self._lanes[request.action] = _Lane(self._limits.get(request.action, 1))
        lane.queue.append(job)
        self._pending += 1
        self._idle.clear()
        if lane.active < lane.concurrency:
            lane.active += 1
            task = loop.create_task(self._work(lane))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return True

    async def send(self, request: WebhookRequest) -> WebhookOutcome:
        """Submit ``request`` and wait for its outcome (a run that reports the status).

        A dropped request answers at once. Cancelling the wait does not cancel the
        delivery."""
        future: asyncio.Future[WebhookOutcome] = asyncio.get_running_loop().create_future()

        def settle(outcome: WebhookOutcome) -> None:
            if not future.done():
                future.set_result(outcome)

        self.submit(request, settle)
        return await asyncio.shield(future)

    # -- delivering ---------------------------------------------------------------------

    async def _work(self, lane: _Lane) -> None:
        """Deliver the lane's requests oldest first until its FIFO is empty."""
        try:
            while lane.queue:
                job = lane.queue.popleft()
                try:
                    result, error = await self._deliver(job)
                except asyncio.CancelledError:
                    self._finish(job, "cancelled", "stopped", pending=True)
                    raise
                except Exception as exc:  # a defect here must not lose the outcome
                    result, error = "failed", type(exc).__name__
                self._finish(job, result, error, pending=True)
        finally:
            lane.active -= 1

    async def _deliver(self, job: _Job) -> tuple[OutcomeResult, str | None]:
        """Post ``job`` until it is delivered, refused for good, or out of retries."""
        request = job.request
        while True:
            job.attempts += 1
            if job.attempts > 1:
                self.retries += 1
            try:
                response = await self._port.post(request)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a port should answer failures, not raise them
                response = WebhookResponse.failure(exc)
            job.status = response.status
            if response.ok:
                return "sent", None
            error = response.error if response.status is None else f"HTTP {response.status}"
            if not response.retryable or job.attempts > request.retries:
                return "failed", error
            delay = retry_delay(request.backoff, job.attempts, self._rng, response.retry_after)
            await self._clock.sleep(delay)

    def _finish(
        self, job: _Job, result: OutcomeResult, error: str | None, *, pending: bool = False
    ) -> None:
        """Count ``job``'s outcome and tell its callback; ``pending``: it was queued."""
        if result == "sent":
            self.sent += 1
        elif result == "failed":
            self.failed += 1
        elif result == "dropped":
            self.dropped += 1
        else:
            self.cancelled += 1
        if pending:
            self._pending -= 1
            if self._pending == 0:
                self._idle.set()
        if job.on_outcome is None:
            return
        request = job.request
        outcome = WebhookOutcome(
            action=request.action,
            event_id=request.event_id,
            target=redact_url(request.url),
            result=result,
            status=job.status,
            attempts=job.attempts,
            error=error,
        )
        try:
            job.on_outcome(outcome)
        except Exception as exc:  # the caller's defect must not stop the deliveries
            self._callback_failed(request.action, exc)

    def _callback_failed(self, action: str, exc: Exception) -> None:
        """Count a raising outcome callback; report it unless one was reported within
        :data:`REPORT_INTERVAL`. Only the exception's class name is shown: its message
        may quote the URL or a header."""
        self.callback_failures += 1
        now = self._clock.monotonic()
        if self._reported_at is not None and now - self._reported_at < REPORT_INTERVAL:
            return
        self._reported_at = now
        self._events.emit(
            "error", "actions", "webhook_callback_failed", action=action,
            error=type(exc).__name__, failures=self.callback_failures,
        )  # fmt: skip

    # -- stopping -----------------------------------------------------------------------

    async def stop(self, budget: float) -> None:
        """Refuse new requests, let the pending ones finish for up to ``budget`` seconds of
        the clock, then cancel what is left (outcome ``cancelled``).

        A request in a backoff wait longer than the budget is cancelled, not hurried: a
        stop must not post faster than the destination asked. When this returns no
        worker task is left; a post already running on a thread of the port finishes
        there, unreported (the port's own close waits for it).
        """
        self.accepting = False
        if self._pending and budget > 0:
            await sleep_or_wake(self._clock, budget, self._idle)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for lane in self._lanes.values():
            while lane.queue:
                self._finish(lane.queue.popleft(), "cancelled", "stopped", pending=True)
