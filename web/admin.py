"""The REST admin API (docs/admin-api.md): reads, actions, probes and /metrics.

Every endpoint is declared once in the table built by :func:`_operations` (an OpenAPI
:class:`~spool.web.openapi.Operation` plus its handler); routes and ``/api/openapi.json`` come
from that table. The layer is thin: handlers call the instance's admin surface
(:class:`spool.server.operations.Operations`) and turn its typed errors into the JSON bodies of
web/api_errors.py.

- Reads run on the event loop and only copy broker state; host metrics (psutil, directory
  scans) and SQLite queries run in threads.
- Actions are POST, need an admin (the auth middleware checks, and :func:`require_admin`
  again here), and each one is written to the event log with the user who asked:
  ``admin/action`` with ``user``, ``action``, ``target``, ``status``.
- Subsystems this instance does not have (replication when not configured, queues, SOW,
  delayed delivery without a transaction log) answer 404 with the reason, never made-up
  data. The configured actions are the
  instance's :class:`spool.server.actions.Actions` (their runs go through the same admin
  surface). The SOW's endpoints are web/sow_api.py, the queues' web/queues_api.py, delayed
  delivery's web/delayed_api.py, the topic list's web/topics_api.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.datastructures import URLPath
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, NoMatchFound, Route
from starlette.types import Receive, Scope, Send

from spool.server.actions import (
    ActionBusy,
    ActionNotFound,
    Actions,
    BadParameters,
    NotOnAdmin,
)
from spool.server.engine_errors import (
    AdminError,
    DelayedNotConfigured,
    StatsUnavailable,
    TlsNotConfigured,
)
from spool.server.eventlog import EventLog
from spool.server.metrics import AlertRuleGauges
from spool.server.operations import JOURNAL_ACTIONS, JournalAction, Operations
from spool.server.protocol.errors import InvalidOptions, SubIdNotFound
from spool.server.stats.host import HostProbe
from spool.server.stats.prometheus import make_registry
from spool.server.stats.query import UnknownMetric
from spool.server.stats.sampler import instance_directories
from spool.server.stats.timeparse import BadTimeValue, format_time
from spool.server.tls.errors import TlsError
from spool.server.txlog.errors import (
    JournalActive,
    JournalNotFound,
    JournalPinned,
    JournalUnfinished,
    PublishersUnsaved,
)
from spool.web.actions_schema import ACTION_SCHEMAS, ref
from spool.web.api_errors import (
    ActionFailed,
    ApiError,
    BadRequest,
    Conflict,
    InternalError,
    JSONResponse,
    MethodNotAllowed,
    NotFound,
    NotReady,
)
from spool.web.auth import auth_context, csrf_token_for, require_admin
from spool.web.delayed_api import DelayedApi
from spool.web.openapi import Operation, QueryParam, openapi_document
from spool.web.params import EVENTS_MAX, int_param, json_body
from spool.web.queues_api import QueuesApi, queue_error
from spool.web.replication_api import ReplicationApi, replication_error
from spool.web.sow_api import SowApi, sow_error
from spool.web.stats_api import StatsApi
from spool.web.topics_api import TopicsApi

PIN_OWNER: Final = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


Handler = Callable[[Request], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class ApiEndpoint:
    """One row of the route table: the documented operation and its handler."""

    op: Operation
    handler: Handler

    @property
    def is_action(self) -> bool:
        return self.op.method == "POST"


def _map_error(exc: Exception) -> ApiError:
    """The REST error for an exception raised by the broker or the stats code."""
    if isinstance(exc, ApiError):
        return exc
    sow = sow_error(exc)
    if sow is not None:
        return sow
    queue = queue_error(exc)
    if queue is not None:
        return queue
    replication = replication_error(exc)
    if replication is not None:
        return replication
    if isinstance(
        exc,
        AdminError
        | JournalNotFound
        | UnknownMetric
        | TlsNotConfigured
        | ActionNotFound
        | DelayedNotConfigured,
    ):
        return NotFound(str(exc))
    if isinstance(exc, BadParameters):
        return BadRequest(str(exc))
    if isinstance(exc, ActionBusy | NotOnAdmin):
        return Conflict(str(exc))
    if isinstance(exc, TlsError):
        # the files on disk cannot be used: the pair in service keeps serving
        return Conflict(f"{exc}; the current certificate keeps serving")
    if isinstance(exc, SubIdNotFound):
        return NotFound(exc.detail or "no such subscription")
    if isinstance(exc, InvalidOptions):
        # e.g. pausing a ``live`` subscription: its state does not allow the action
        return Conflict(exc.detail or exc.reason)
    if isinstance(exc, JournalPinned | JournalActive | JournalUnfinished | PublishersUnsaved):
        return Conflict(str(exc))
    if isinstance(exc, StatsUnavailable):
        return NotReady(str(exc))
    if isinstance(exc, BadTimeValue):
        return BadRequest(str(exc))
    return InternalError("unexpected error; see the event log")


class _PathEndpoint:
    """ASGI app for one path: dispatches on method, renders errors, logs actions."""

    def __init__(self, path: str, endpoints: Mapping[str, ApiEndpoint], events: EventLog):
        self.path = path
        self.endpoints = dict(endpoints)
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        method = "GET" if request.method == "HEAD" else request.method
        endpoint = self.endpoints.get(method)
        if endpoint is None:
            allowed = sorted(self.endpoints)
            response: Response = MethodNotAllowed(request.method, allowed).response()
        else:
            response = await self._run(endpoint, request)
        await response(scope, receive, send)

    async def _run(self, endpoint: ApiEndpoint, request: Request) -> Response:
        try:
            if endpoint.is_action:
                require_admin(request)
            result = await endpoint.handler(request)
            response = result if isinstance(result, Response) else JSONResponse(result)
        except Exception as exc:
            error = _map_error(exc)
            if isinstance(error, InternalError):
                self.events.emit(
                    "error",
                    "admin",
                    "internal_error",
                    path=request.url.path,
                    error=f"{type(exc).__name__}: {exc}",
                )
            response = error.response()
        if endpoint.is_action:
            params = request.path_params
            target = "/".join(str(v) for v in params.values()) or endpoint.op.tag
            self.events.emit(
                "info" if response.status_code < 400 else "warning",
                "admin",
                "action",
                user=auth_context(request).actor,
                action=_action_name(endpoint.op),
                target=target,
                status=response.status_code,
                remote=request.client.host if request.client else "",
            )
        return response


def _action_name(op: Operation) -> str:
    """``clients.disconnect``-style name of an action, from its path."""
    words = [w for w in op.path.removeprefix("/api/").split("/") if not w.startswith("{")]
    return ".".join(words)


class AdminApi:
    """Handlers of the admin API for one broker (one per app)."""

    def __init__(self, ops: Operations, actions: Actions) -> None:
        self.ops = ops
        self.actions = actions
        self.registry = make_registry(ops)
        if ops.alert_rules is not None:
            self.registry.register(AlertRuleGauges(ops.alert_rules))
        self.probe = HostProbe(instance_directories(ops.config))
        self._document: dict[str, Any] | None = None
        self.sow = SowApi(ops)
        self.queues = QueuesApi(ops)
        self.delayed = DelayedApi(ops)
        self.replication = ReplicationApi(ops)
        self.stats = StatsApi(ops)
        self.topics = TopicsApi(ops)
        self.endpoints = self._table()

    # -- helpers ---------------------------------------------------------------------------

    # -- probes ----------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Any:
        return self.ops.health()

    async def readyz(self, request: Request) -> Any:
        if not self.ops.ready:
            raise NotReady("recovery in progress or shutting down")
        return {"ready": True}

    async def metrics(self, request: Request) -> Any:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    # -- reads -----------------------------------------------------------------------------

    async def instance(self, request: Request) -> Any:
        return self.ops.instance_info()

    async def host(self, request: Request) -> Any:
        reading = await asyncio.to_thread(self.probe.sample)
        return {"time": format_time(self.ops.clock.time()), **reading}

    async def session(self, request: Request) -> Any:
        context = auth_context(request)
        return {
            "user": context.user.name if context.user is not None else None,
            "admin": context.admin,
            "via": context.via,
            "auth_enabled": self.ops.auth.enabled,
            "csrf_token": csrf_token_for(request),
        }

    async def alert_rules(self, request: Request) -> Any:
        require_admin(request)
        return {"rules": self.ops.alert_rules_info()}

    async def clients(self, request: Request) -> Any:
        return {"clients": self.ops.clients_info()}

    async def client(self, request: Request) -> Any:
        name = request.path_params["name"]
        info = self.ops.client_info(name)
        if info is None:
            raise NotFound(f"no client named {name!r}")
        return info

    async def subscriptions(self, request: Request) -> Any:
        subs = self.ops.subscriptions_info()
        client = request.query_params.get("client")
        if client is not None:
            subs = [s for s in subs if s.get("client") == client]
        return {"subscriptions": subs}

    async def transaction_log(self, request: Request) -> Any:
        info = self.ops.transaction_log_info()
        state = self.ops.journal_state()
        if info is None or state is None:
            raise NotFound("the transaction log is not configured on this instance")
        # which configured action will touch each journal next (the dashboard shows it)
        plan = self.actions.journal_plan(*state)
        return {
            **info,
            "journals": [
                {**j, "next_actions": plan.get(j["id"], []) if j["state"] != "preallocated" else []}
                for j in info["journals"]
            ],
        }

    async def transports(self, request: Request) -> Any:
        return {"transports": self.ops.transports_info()}

    async def events(self, request: Request) -> Any:
        limit = int_param(request, "limit", 200, 1, EVENTS_MAX)
        category = request.query_params.get("category")
        client = request.query_params.get("client")
        if not category and not client:
            return {"events": self.ops.events.recent(limit)}
        # a filter looks through every entry kept, then keeps the newest ``limit``
        events = [
            e
            for e in self.ops.events.recent(EVENTS_MAX)
            if (not category or e.get("category") == category)
            and (not client or e.get("client") == client)
        ]
        return {"events": events[-limit:]}

    async def actions_list(self, request: Request) -> Any:
        return {"actions": self.actions.info()}

    async def action(self, request: Request) -> Any:
        name = request.path_params["name"]
        info = self.actions.action_info(name)
        limit = int_param(request, "limit", 20, 1, EVENTS_MAX)
        return {**info, "history": await self.actions.history(name, limit)}

    async def action_runs(self, request: Request) -> Any:
        limit = int_param(request, "limit", 100, 1, EVENTS_MAX)
        before = request.query_params.get("before")
        before_id = None
        if before:
            if not before.isascii() or not before.isdigit():
                raise BadRequest(f"before must be a run id, got {before!r}")
            before_id = int(before)
        action = request.query_params.get("action") or None
        return {"runs": await self.actions.history(action, limit, before_id)}

    async def tls(self, request: Request) -> Any:
        return self.ops.listener_info()

    async def logons(self, request: Request) -> Any:
        return self.ops.logon_info()

    async def reload_tls(self, request: Request) -> Any:
        certificate = await self.ops.reload_tls(auth_context(request).actor)
        return {"ok": True, "certificate": certificate}

    def openapi_document(self) -> dict[str, Any]:
        """The OpenAPI document of this table (built once)."""
        if self._document is None:
            version = self.ops.instance_info()["version"]
            self._document = openapi_document(
                (e.op for e in self.endpoints), version=version, schemas=ACTION_SCHEMAS
            )
        return self._document

    async def openapi(self, request: Request) -> Any:
        return self.openapi_document()

    # -- actions ---------------------------------------------------------------------------

    async def disconnect(self, request: Request) -> Any:
        name = request.path_params["name"]
        if not await self.ops.disconnect_client(name, "disconnected by admin"):
            raise NotFound(f"no client named {name!r}")
        return {"ok": True, "client": name}

    async def pause(self, request: Request) -> Any:
        client, sub_id = request.path_params["client"], request.path_params["sub_id"]
        self.ops.pause_subscription(client, sub_id)
        return {"ok": True, "client": client, "sub_ids": [sub_id]}

    async def resume(self, request: Request) -> Any:
        client, sub_id = request.path_params["client"], request.path_params["sub_id"]
        body = await json_body(request)
        extra = body.get("sub_ids", [])
        if not isinstance(extra, list) or not all(isinstance(s, str) and s for s in extra):
            raise BadRequest("sub_ids must be a list of subscription ids")
        sub_ids = list(dict.fromkeys([sub_id, *extra]))
        self.ops.resume_subscriptions(client, sub_ids)
        return {"ok": True, "client": client, "sub_ids": sub_ids}

    def _transport(self, enabled: bool) -> Handler:
        async def handler(request: Request) -> Any:
            name = request.path_params["name"]
            self.ops.set_transport_enabled(name, enabled)
            return {"ok": True, "transport": name, "enabled": enabled}

        return handler

    def _journal(self, action: JournalAction) -> Handler:
        async def handler(request: Request) -> Any:
            text = request.path_params["id"]
            if not text.isascii() or not text.isdigit():
                raise BadRequest(f"journal id must be a non-negative integer, got {text!r}")
            journals = await self.ops.journal_action(action, int(text))
            return {"ok": True, "action": action, "journals": journals}

        return handler

    async def scrub(self, request: Request) -> Any:
        status = self.ops.scrub()
        if status is None:
            raise NotFound("the transaction log is not configured on this instance")
        return {"ok": True, **status}

    async def repair(self, request: Request) -> Any:
        progress = self.ops.repair()
        if progress is None:
            raise NotFound("this instance has no replication destination to repair from")
        return {"ok": True, "repair": progress}

    async def release_fence(self, request: Request) -> Any:
        text = request.path_params["first_seq"]
        if not text.isascii() or not text.isdigit():
            raise BadRequest(f"first_seq must be a non-negative integer, got {text!r}")
        fence = await self.ops.release_fence(int(text))
        if fence is None:
            raise NotFound(f"no fenced range starts at seq {text}")
        return {"ok": True, "released": fence}

    async def pins(self, request: Request) -> Any:
        return {"pins": self.ops.pins_info()}

    async def take_pin(self, request: Request) -> Any:
        body = await json_body(request)
        owner = body.get("owner")
        seq = body.get("seq")
        if not isinstance(owner, str) or not PIN_OWNER.fullmatch(owner):
            raise BadRequest(
                "owner must be 1 to 200 letters, digits, '_', '.', ':' or '-' "
                "(it names the pin in /api/transaction_log/pins/{owner}/release)"
            )
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise BadRequest("seq must be a non-negative integer (the first seq to keep)")
        return {"ok": True, **self.ops.take_pin(owner, seq)}

    async def release_pin(self, request: Request) -> Any:
        owner = request.path_params["owner"]
        self.ops.release_pin(owner)
        return {"ok": True, "owner": owner}

    async def run_action(self, request: Request) -> Any:
        name = request.path_params["name"]
        body = await json_body(request)
        unknown = sorted(set(body) - {"parameters"})
        if unknown:
            raise BadRequest(f'unknown field {unknown[0]!r}: the body is {{"parameters": {{...}}}}')
        parameters = body.get("parameters", {})
        if not isinstance(parameters, dict):
            raise BadRequest("parameters must be a JSON object of name: value")
        record = await self.actions.run_admin(name, parameters, auth_context(request).actor)
        run = record.to_dict()
        if record.outcome == "failed":
            raise ActionFailed(record.message, run)
        return {"ok": True, "run": run}

    # -- the table -------------------------------------------------------------------------

    def _table(self) -> list[ApiEndpoint]:
        def get(path: str, handler: Handler, summary: str, tag: str, **kw: Any) -> ApiEndpoint:
            return ApiEndpoint(Operation("GET", path, summary, tag, **kw), handler)

        def post(path: str, handler: Handler, summary: str, tag: str, **kw: Any) -> ApiEndpoint:
            kw.setdefault("access", "admin")
            return ApiEndpoint(Operation("POST", path, summary, tag, **kw), handler)

        return [
            get(
                "/healthz",
                self.healthz,
                "Liveness: ok, or degraded with the reasons (still 200)",
                "probes",
                access="public",
            ),
            get(
                "/readyz",
                self.readyz,
                "Readiness: recovery done, transports listening",
                "probes",
                access="public",
                errors=(503,),
            ),
            get(
                "/metrics",
                self.metrics,
                "Prometheus exposition",
                "probes",
                access="public",
                media_type="text/plain",
            ),
            get("/api/instance", self.instance, "Instance identity and uptime", "instance"),
            get("/api/host", self.host, "CPU, memory, disks, network, process", "instance"),
            get("/api/session", self.session, "Who am I; CSRF token for POSTs", "instance"),
            get(
                "/api/events",
                self.events,
                "Recent event log entries",
                "instance",
                query=(
                    QueryParam(
                        "limit",
                        "1..1000, default 200",
                        type="integer",
                        minimum=1,
                        maximum=EVENTS_MAX,
                    ),
                    QueryParam("category", "only this category, e.g. admin"),
                    QueryParam("client", "only the entries naming this client"),
                ),
            ),
            get(
                "/api/alerts/rules",
                self.alert_rules,
                "The operator's alert rules: state (inactive, pending, firing), since, value",
                "instance",
                access="admin",
            ),
            get("/api/clients", self.clients, "Connected clients", "clients"),
            get("/api/clients/{name}", self.client, "One client", "clients", errors=(404,)),
            post(
                "/api/clients/{name}/disconnect",
                self.disconnect,
                "Disconnect a client",
                "clients",
                errors=(404,),
            ),
            get(
                "/api/subscriptions",
                self.subscriptions,
                "Subscriptions",
                "subscriptions",
                query=(QueryParam("client", "only this client's"),),
            ),
            post(
                "/api/subscriptions/{client}/{sub_id}/pause",
                self.pause,
                "Pause a bookmark subscription",
                "subscriptions",
                errors=(404,),
            ),
            post(
                "/api/subscriptions/{client}/{sub_id}/resume",
                self.resume,
                "Resume bookmark subscriptions (several together with sub_ids)",
                "subscriptions",
                errors=(404,),
                body={
                    "type": "object",
                    "properties": {"sub_ids": {"type": "array", "items": {"type": "string"}}},
                },
            ),
            get(
                "/api/transaction_log",
                self.transaction_log,
                "Journal files, totals, flush latency",
                "transaction_log",
                errors=(404,),
            ),
            *(
                post(
                    f"/api/transaction_log/journals/{{id}}/{action}",
                    self._journal(action),
                    f"{action.capitalize()} this journal and all older ones",
                    "transaction_log",
                    errors=(404, 409),
                )
                for action in JOURNAL_ACTIONS
            ),
            post(
                "/api/transaction_log/scrub",
                self.scrub,
                "Read every journal back and check it now (a scrub); its status",
                "transaction_log",
                errors=(404,),
            ),
            post(
                "/api/transaction_log/repair",
                self.repair,
                "Ask the replication peers for the fenced (damaged) records now",
                "transaction_log",
                errors=(404,),
            ),
            post(
                "/api/transaction_log/fences/{first_seq}/release",
                self.release_fence,
                "Accept the loss of a fenced range: readers pass over it from now on",
                "transaction_log",
                errors=(400, 404),
            ),
            get(
                "/api/transaction_log/pins",
                self.pins,
                "Retention pins: who still needs which records",
                "transaction_log",
                errors=(404,),
            ),
            post(
                "/api/transaction_log/pins",
                self.take_pin,
                "Take or move a named retention pin (journals from seq on are kept)",
                "transaction_log",
                errors=(400, 404),
                body={
                    "type": "object",
                    "required": ["owner", "seq"],
                    "properties": {"owner": {"type": "string"}, "seq": {"type": "integer"}},
                },
            ),
            post(
                "/api/transaction_log/pins/{owner}/release",
                self.release_pin,
                "Release a retention pin taken over this API",
                "transaction_log",
                errors=(404,),
            ),
            get("/api/transports", self.transports, "Transports", "transports"),
            get(
                "/api/tls",
                self.tls,
                "The listener's TLS: certificate, expiry, client certificates; or plain text",
                "security",
            ),
            post(
                "/api/tls/reload",
                self.reload_tls,
                "Reload the certificate pair (new handshakes use it; connections stay)",
                "security",
                errors=(404, 409),
            ),
            get(
                "/api/logons",
                self.logons,
                "Logon outcomes, the throttle, the password-check pool",
                "security",
            ),
            post(
                "/api/transports/{name}/enable",
                self._transport(True),
                "Start accepting on a transport",
                "transports",
                errors=(404,),
            ),
            post(
                "/api/transports/{name}/disable",
                self._transport(False),
                "Stop accepting on a transport",
                "transports",
                errors=(404,),
            ),
            *(ApiEndpoint(op, handler) for op, handler in self.stats.operations()),
            get(
                "/api/actions",
                self.actions_list,
                "Configured actions: triggers, next run, steps, the run in progress, the last",
                "actions",
                response=_listing("actions", ref("Action")),
            ),
            get(
                "/api/actions/{name}",
                self.action,
                "One action and its recent runs",
                "actions",
                errors=(404,),
                response=ref("ActionWithRuns"),
                query=(
                    QueryParam(
                        "limit",
                        "runs shown, 1..1000, default 20",
                        type="integer",
                        minimum=1,
                        maximum=EVENTS_MAX,
                    ),
                ),
            ),
            post(
                "/api/actions/{name}",
                self.run_action,
                "Run a configured on-admin action now (parameters in the body); the run's record",
                "actions",
                errors=(400, 404, 409, 500),
                response={
                    "type": "object",
                    "required": ["ok", "run"],
                    "additionalProperties": False,
                    "properties": {"ok": {"const": True}, "run": ref("ActionRun")},
                },
                body={
                    "type": "object",
                    "properties": {
                        "parameters": {
                            "type": "object",
                            "additionalProperties": {"type": ["string", "number"]},
                        }
                    },
                },
            ),
            get(
                "/api/action_runs",
                self.action_runs,
                "The history of action runs, newest first",
                "actions",
                errors=(400, 404),
                response=_listing("runs", ref("ActionRun")),
                query=(
                    QueryParam("action", "only this action's runs"),
                    QueryParam(
                        "limit",
                        "1..1000, default 100",
                        type="integer",
                        minimum=1,
                        maximum=EVENTS_MAX,
                    ),
                    QueryParam(
                        "before",
                        "runs older than this run id (paging)",
                        type="integer",
                        minimum=0,
                    ),
                ),
            ),
            *(ApiEndpoint(op, handler) for op, handler in self.replication.operations()),
            *(ApiEndpoint(op, handler) for op, handler in self.queues.operations()),
            *(ApiEndpoint(op, handler) for op, handler in self.delayed.operations()),
            *(ApiEndpoint(op, handler) for op, handler in self.sow.operations()),
            *(ApiEndpoint(op, handler) for op, handler in self.topics.operations()),
            get("/api/openapi.json", self.openapi, "This document", "instance"),
        ]


class _UnknownApi(BaseRoute):
    """The last route: any method on any other ``/api`` path gets a JSON 404.

    A route of its own rather than ``Route("/api/{rest:path}")``: Starlette's path
    patterns do not match across a newline, so a path with an encoded ``%0A`` fell through
    to the plain-text 404 of the app (found by schemathesis).
    """

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == "/api" or path.startswith("/api/")):
            return Match.FULL, {}
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> URLPath:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        await NotFound(f"no API endpoint {path}").response()(scope, receive, send)


def _listing(key: str, item: dict[str, Any]) -> dict[str, Any]:
    """The schema of ``{key: [item, ...]}``."""
    return {
        "type": "object",
        "required": [key],
        "additionalProperties": False,
        "properties": {key: {"type": "array", "items": item}},
    }


def admin_routes(ops: Operations, actions: Actions) -> list[BaseRoute]:
    """Routes of the admin API, the probes and /metrics, for one broker (one per app).

    A last catch-all answers unknown ``/api/...`` paths with a JSON 404.
    """
    api = AdminApi(ops, actions)
    by_path: dict[str, dict[str, ApiEndpoint]] = {}
    for endpoint in api.endpoints:
        by_path.setdefault(endpoint.op.path, {})[endpoint.op.method] = endpoint
    routes: list[BaseRoute] = [
        Route(path, _PathEndpoint(path, methods, ops.events), name=f"api:{path}")
        for path, methods in by_path.items()
    ]
    routes.append(_UnknownApi())
    return routes
