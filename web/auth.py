"""Authentication of the HTTP side: bearer tokens for /api, login sessions for the dashboard.

Model (docs/admin-api.md, "Authentication and authorisation"):

- **Users configured** (``<Users>``): ``/api`` needs ``Authorization: Bearer TOKEN`` (a
  user's ``<Token>``) or the dashboard's session cookie; actions (every ``POST``) need a
  user with ``<Admin>``. A POST made with the cookie must carry the session's CSRF token in
  ``X-CSRF-Token`` (forms: a ``csrf_token`` field). Dashboard pages redirect to ``/login``.
  Failures on /api are JSON: ``401 {"error": "unauthorized"}`` / ``403 {"error":
  "forbidden"}``.
- **No users**: only loopback clients are served, and only when the ``Host`` header names
  a loopback host too (a web page cannot reach the API through DNS rebinding). Everyone
  served is an admin.
- ``/healthz``, ``/readyz`` and ``/metrics`` are readable without credentials from loopback
  (from anywhere with ``Admin/MetricsPublic``); elsewhere they need a token.
- Browser POSTs (cookie or no-auth mode) are refused when ``Origin`` names a foreign origin
  (neither the broker's own nor one of ``Admin/AllowedOrigins``: web/origins.py), or, with
  no ``Origin``, when ``Sec-Fetch-Site`` says ``cross-site``: a page on another site cannot
  drive actions with what the browser supplies by itself.
- Websockets (``/amps/json``, ``/replication``) pass through untouched: the protocol logon
  authenticates them, after the origin check of the websocket endpoint (web/transport.py).
- Mutual TLS: a client certificate the TLS layer verified whose subject is a user's
  ``<CertificateSubject>`` identifies that user (``via: certificate``), after a bearer
  token and a dashboard session. A browser presents it on its own, like a cookie, so its
  POSTs get the same cross-origin check as the session's.

Sessions are kept server-side in memory (a random 256-bit id in an HttpOnly,
SameSite=Strict cookie; nothing to forge or decode), expire after 8 h idle or 24 h, and die
with the process. Cookie names carry the server port, so two instances on one host do not
log each other out. Failed logins are throttled by the instance's logon guard
(server/logons.py), the same policy object as the websocket logon: per client address
and per user name. Cookies are ``Secure`` on a TLS listener. Secrets are never logged.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from urllib.parse import quote, urlsplit

from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from spool.server.auth import UserAuthenticator
from spool.server.clock import SYSTEM_CLOCK, Clock
from spool.server.config import UserConfig, is_loopback
from spool.server.logons import LogonGuard
from spool.server.resources import TEMPLATES, resource_dir
from spool.server.scryptpool import PoolBusy
from spool.web.api_errors import ApiError, Forbidden, TooManyRequests, Unauthorized
from spool.web.origins import OriginPolicy
from spool.web.tls import tls_of

SESSION_IDLE_TIMEOUT: Final = 8 * 3600.0
SESSION_MAX_AGE: Final = 24 * 3600.0
MAX_SESSIONS: Final = 10_000
LOGIN_CSRF_MAX_AGE: Final = 3600
CSRF_HEADER: Final = "x-csrf-token"
CSRF_FIELD: Final = "csrf_token"
FORM_MAX_BYTES: Final = 16 * 1024  # login/logout forms are a few hundred bytes

_SCOPE_STATE: Final = "spool.auth_state"
_SCOPE_CONTEXT: Final = "spool.auth"
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_PROBES: Final = frozenset({"/healthz", "/readyz", "/metrics"})
_PUBLIC: Final = frozenset({"/login", "/logout", "/favicon.ico"})

Via = Literal["token", "session", "certificate", "local", "anonymous"]


@dataclass(slots=True)
class LoginSession:
    """A dashboard login: who, its CSRF token, and when it was made and last used."""

    id: str = field(repr=False)
    user: str
    csrf: str = field(repr=False)
    created: float
    last_seen: float


class SessionStore:
    """Server-side sessions keyed by a random id (monotonic clock for expiry).

    Args:
        clock: time source.
        idle_timeout: seconds of inactivity after which a session ends.
        max_age: seconds after which a session ends regardless.
        max_sessions: bound on memory; the least recently used session goes first.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        idle_timeout: float = SESSION_IDLE_TIMEOUT,
        max_age: float = SESSION_MAX_AGE,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self._clock = clock
        self._idle = idle_timeout
        self._max_age = max_age
        self._max = max_sessions
        self._sessions: dict[str, LoginSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, user: str) -> LoginSession:
        """A new session for ``user`` (a fresh id on every login: no session fixation)."""
        now = self._clock.monotonic()
        while len(self._sessions) >= self._max:
            oldest = min(self._sessions.values(), key=lambda s: s.last_seen)
            del self._sessions[oldest.id]
        session = LoginSession(secrets.token_urlsafe(32), user, secrets.token_urlsafe(32), now, now)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> LoginSession | None:
        """The live session with this id (refreshing its idle timer), or None."""
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            return None
        now = self._clock.monotonic()
        if now - session.last_seen > self._idle or now - session.created > self._max_age:
            del self._sessions[session_id]
            return None
        session.last_seen = now
        return session

    def delete(self, session_id: str) -> None:
        """End a session (logout)."""
        self._sessions.pop(session_id, None)


@dataclass(frozen=True, slots=True)
class AuthContext:
    """Who is making a request.

    Attributes:
        user: the configured user, or None (anonymous, or auth disabled).
        via: how they were identified: bearer ``token``, dashboard ``session``, client
            ``certificate`` (mutual TLS), ``local`` (no users configured; loopback
            client) or ``anonymous``.
        admin: whether actions are allowed.
        session: the dashboard session when ``via == "session"``.
    """

    user: UserConfig | None
    via: Via
    admin: bool
    session: LoginSession | None = None

    @property
    def actor(self) -> str:
        """The name written to the event log for actions."""
        if self.user is not None:
            return self.user.name
        return "local" if self.via == "local" else "anonymous"


@dataclass(slots=True)
class AuthState:
    """What the middleware and the /login, /logout routes share (found in the ASGI scope)."""

    authenticator: UserAuthenticator
    sessions: SessionStore
    logons: LogonGuard
    metrics_public: bool
    clock: Clock


def _client_host(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


def _host_header_is_loopback(host_header: str) -> bool:
    host = host_header.strip()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    host = host.rstrip(".").lower()
    return is_loopback(host) or host.endswith(".localhost")


def cookie_names(scope: Scope) -> tuple[str, str, str]:
    """Names of the session, CSRF and login-form CSRF cookies for this server port."""
    server = scope.get("server")
    suffix = f"_{server[1]}" if server and server[1] else ""
    return f"spool_session{suffix}", f"spool_csrf{suffix}", f"spool_login{suffix}"


def _events(scope: Scope) -> Any:
    app = scope.get("app")
    broker = getattr(getattr(app, "state", None), "broker", None)
    return getattr(broker, "events", None)


def _emit(scope: Scope, level: str, event: str, **fields: Any) -> None:
    events = _events(scope)
    if events is not None:
        events.emit(level, "admin", event, remote=_client_host(scope), **fields)


def _trusted_page(request: HTTPConnection, origins: OriginPolicy) -> bool:
    """False when the browser says the request comes from a foreign page (web/origins.py).

    With an ``Origin`` the policy decides (an allowed origin is cross-site and trusted);
    without one, a browser that still says ``Sec-Fetch-Site: cross-site`` is believed.
    """
    headers = request.headers
    origin = headers.get("origin")
    if origin is None:
        return headers.get("sec-fetch-site", "") != "cross-site"
    return origins.verdict(origin, headers.get("host"), request.url.scheme).trusted


def _is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


class AuthMiddleware:
    """Pure ASGI middleware applying the model of the module docstring.

    Args:
        app: the wrapped application.
        authenticator: the users of the instance.
        logons: the logon throttle and counters (the broker's, shared with the websocket).
        metrics_public: serve /healthz, /readyz and /metrics without auth to anyone.
        clock: time source for sessions.
        origins: which pages may act with the cookie, a client certificate or the no-users
            trust (default: the broker's own origin only).
    """

    def __init__(
        self,
        app: ASGIApp,
        authenticator: UserAuthenticator,
        logons: LogonGuard,
        *,
        metrics_public: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        origins: OriginPolicy | None = None,
    ) -> None:
        self.app = app
        self.origins = origins or OriginPolicy((), auth_enabled=authenticator.enabled)
        self.state = AuthState(authenticator, SessionStore(clock), logons, metrics_public, clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[_SCOPE_STATE] = self.state
        request = HTTPConnection(scope)
        try:
            context = self._identify(request)
            scope[_SCOPE_CONTEXT] = context
            scope["user"] = context.user  # Starlette's convention (request.user)
            denial = self._authorize(request, context)
        except ApiError as exc:
            denial = self._deny(request, exc)
        if denial is not None:
            await denial(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _identify(self, request: HTTPConnection) -> AuthContext:
        auth = self.state.authenticator
        scope = request.scope
        if not auth.enabled:
            if not is_loopback(_client_host(scope)):
                raise Forbidden("no <Users> are configured, so only loopback clients are served")
            if not _host_header_is_loopback(request.headers.get("host", "")):
                raise Forbidden("no <Users> are configured: use a loopback host name")
            return AuthContext(None, "local", True)
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthorized("use Authorization: Bearer TOKEN")
            user = auth.by_token(token.strip())
            if user is None:
                _emit(scope, "warning", "auth_failure", path=scope.get("path", ""))
                raise Unauthorized("unknown token")
            return AuthContext(user, "token", user.admin)
        session_cookie, _, _ = cookie_names(scope)
        session = self.state.sessions.get(request.cookies.get(session_cookie))
        if session is not None:
            user = auth.user(session.user)
            if user is not None:
                return AuthContext(user, "session", user.admin, session)
        tls = tls_of(scope)
        if tls is not None:
            user = auth.by_certificate(tls.get("client_cert_name"))
            if user is not None:
                return AuthContext(user, "certificate", user.admin)
        return AuthContext(None, "anonymous", False)

    def _authorize(self, request: HTTPConnection, context: AuthContext) -> Response | None:
        path: str = request.scope.get("path", "")
        method: str = request.scope.get("method", "GET")
        enabled = self.state.authenticator.enabled
        if path in _PUBLIC or path.startswith("/static/"):
            return None
        if path in _PROBES:
            if context.user is not None or not enabled or self.state.metrics_public:
                return None
            if is_loopback(_client_host(request.scope)):
                return None
            raise Unauthorized("probes need a token from outside this host")
        if _is_api(path):
            if enabled and context.user is None:
                raise Unauthorized("send Authorization: Bearer TOKEN, or log in to the dashboard")
            if method not in _SAFE_METHODS:
                self._check_action(request, context)
            return None
        if enabled and context.user is None:
            if method in ("GET", "HEAD"):
                target = path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(target, safe='/')}", 303)
            raise Unauthorized("log in first")
        return None

    def _check_action(self, request: HTTPConnection, context: AuthContext) -> None:
        ambient = ("session", "certificate", "local")
        if context.via in ambient and not _trusted_page(request, self.origins):
            raise Forbidden(
                "cross-origin request refused (the page's origin is not the broker's own "
                "nor in Admin/AllowedOrigins)"
            )
        if context.session is not None:
            sent = request.headers.get(CSRF_HEADER, "")
            if not sent or not hmac.compare_digest(sent, context.session.csrf):
                raise Forbidden(f"missing or wrong CSRF token (send it in {CSRF_HEADER})")
        if not context.admin:
            _emit(
                request.scope,
                "warning",
                "forbidden",
                user=context.actor,
                path=request.scope.get("path", ""),
            )
            raise Forbidden(f"user {context.actor!r} is not an admin")

    @staticmethod
    def _deny(request: HTTPConnection, exc: ApiError) -> Response:
        path: str = request.scope.get("path", "")
        if (
            _is_api(path)
            or path in _PROBES
            or "application/json" in request.headers.get("accept", "")
        ):
            return exc.response()
        return PlainTextResponse(
            f"{exc.status} {exc.error}: {exc.detail}\n", exc.status, headers=exc.headers
        )


def auth_middleware(
    authenticator: UserAuthenticator,
    logons: LogonGuard,
    *,
    metrics_public: bool = False,
    clock: Clock = SYSTEM_CLOCK,
    origins: OriginPolicy | None = None,
) -> Callable[[ASGIApp], ASGIApp]:
    """The middleware factory for ``Middleware(auth_middleware(broker.auth, broker.logons))``.

    Args:
        authenticator: the instance's users (``broker.auth``).
        logons: the instance's logon guard (``broker.logons``).
        metrics_public: ``config.admin.metrics_public``.
        clock: time source for session expiry.
        origins: the instance's origin policy (``Admin/AllowedOrigins``).
    """

    def factory(app: ASGIApp) -> ASGIApp:
        return AuthMiddleware(
            app,
            authenticator,
            logons,
            metrics_public=metrics_public,
            clock=clock,
            origins=origins,
        )

    return factory


# --- helpers for route handlers -----------------------------------------------------------


def auth_context(request: HTTPConnection) -> AuthContext:
    """Who made ``request`` (set by :class:`AuthMiddleware`).

    Raises:
        RuntimeError: the middleware is not installed (a wiring bug, never a client error).
    """
    context = request.scope.get(_SCOPE_CONTEXT)
    if not isinstance(context, AuthContext):
        raise RuntimeError("spool.web.auth.AuthMiddleware is not installed")
    return context


def require_admin(request: HTTPConnection) -> AuthContext:
    """The caller's context if they may run actions.

    Raises:
        Forbidden: not an admin.
    """
    context = auth_context(request)
    if not context.admin:
        raise Forbidden(f"user {context.actor!r} is not an admin")
    return context


def csrf_token_for(request: HTTPConnection) -> str | None:
    """The CSRF token that POSTs of this session must send (None without a session)."""
    context = request.scope.get(_SCOPE_CONTEXT)
    if isinstance(context, AuthContext) and context.session is not None:
        return context.session.csrf
    return None


# --- /login and /logout --------------------------------------------------------------------

_templates: Jinja2Templates | None = None


def _login_templates() -> Jinja2Templates:
    global _templates
    if _templates is None:
        _templates = Jinja2Templates(directory=resource_dir(TEMPLATES))
    return _templates


def _state(request: HTTPConnection) -> AuthState:
    state = request.scope.get(_SCOPE_STATE)
    if not isinstance(state, AuthState):
        raise RuntimeError("spool.web.auth.AuthMiddleware is not installed")
    return state


def safe_next(value: str | None) -> str:
    """A local path to go to after login; anything else (other hosts, schemes) becomes ``/``."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    if any(ord(ch) < 0x20 or ch == "\\" for ch in value):
        return "/"
    if urlsplit(value).path in ("/login", "/logout"):
        return "/"
    return value


def _secure(request: HTTPConnection) -> bool:
    return request.url.scheme == "https"


def _render_login(
    request: Request,
    *,
    next_path: str,
    error: str | None,
    status: int = 200,
) -> Response:
    _, _, login_cookie = cookie_names(request.scope)
    token = request.cookies.get(login_cookie)
    if not token or len(token) > 128:
        token = secrets.token_urlsafe(32)
    response = _login_templates().TemplateResponse(
        request,
        "login.html",
        {"error": error, "next": next_path, "csrf_token": token},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )
    response.set_cookie(
        login_cookie,
        token,
        max_age=LOGIN_CSRF_MAX_AGE,
        path="/",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response


def _too_many(request: Request, next_path: str, wait: float) -> Response:
    """429 with the form again and ``Retry-After`` (the credentials were not checked)."""
    exc = TooManyRequests("too many failed logins", wait)
    response = _render_login(
        request,
        next_path=next_path,
        status=429,
        error=f"Too many failed attempts. Try again in {int(wait) + 1} seconds.",
    )
    response.headers.update(exc.headers)
    return response


async def login_page(request: Request) -> Response:
    """GET /login: the form (or straight to ``next`` when there is nothing to log into)."""
    next_path = safe_next(request.query_params.get("next"))
    state = _state(request)
    if not state.authenticator.enabled or auth_context(request).user is not None:
        return RedirectResponse(next_path, 303)
    return _render_login(request, next_path=next_path, error=None)


async def login_submit(request: Request) -> Response:
    """POST /login: check the form's CSRF token and the credentials; start a session."""
    state = _state(request)
    async with request.form(max_files=0, max_fields=8, max_part_size=4096) as form:
        username = str(form.get("username", "")).strip()
        password = str(form.get("password", ""))
        sent_token = str(form.get(CSRF_FIELD, ""))
        next_path = safe_next(str(form.get("next", "")) or None)
    if not state.authenticator.enabled:
        return RedirectResponse(next_path, 303)
    session_cookie, csrf_cookie, login_cookie = cookie_names(request.scope)
    expected = request.cookies.get(login_cookie, "")
    if not sent_token or not expected or not hmac.compare_digest(sent_token, expected):
        return _render_login(
            request,
            next_path=next_path,
            status=403,
            error="The login form expired. Please try again.",
        )
    host = _client_host(request.scope)
    wait = state.logons.admit("dashboard", host, username or None)
    if wait > 0:
        return _too_many(request, next_path, wait)
    started = time.monotonic()
    try:
        user = await state.authenticator.authenticate_async(username or None, password or None)
    except PoolBusy as busy:
        state.logons.refused("dashboard")
        return _too_many(request, next_path, busy.retry_after)
    if user is None or not username:
        state.logons.failed("dashboard", host, username or None)
        _emit(
            request.scope,
            "warning",
            "login_failed",
            user=username,
            check_ms=round((time.monotonic() - started) * 1000, 1),
        )
        return _render_login(request, next_path=next_path, error="Invalid user name or password.")
    state.logons.succeeded("dashboard", host, user.name)
    old = auth_context(request).session
    if old is not None:
        state.sessions.delete(old.id)
    session = state.sessions.create(user.name)
    _emit(request.scope, "info", "login", user=user.name)
    response = RedirectResponse(next_path, 303)
    response.set_cookie(
        session_cookie,
        session.id,
        max_age=int(SESSION_MAX_AGE),
        path="/",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    response.set_cookie(
        csrf_cookie,
        session.csrf,
        max_age=int(SESSION_MAX_AGE),
        path="/",
        httponly=False,
        samesite="strict",
        secure=_secure(request),
    )
    response.delete_cookie(login_cookie, path="/")
    return response


async def logout(request: Request) -> Response:
    """POST /logout: end the session (CSRF token in the form or the header)."""
    state = _state(request)
    context = auth_context(request)
    session_cookie, csrf_cookie, _ = cookie_names(request.scope)
    if context.session is not None:
        sent = request.headers.get(CSRF_HEADER, "")
        if not sent:
            async with request.form(max_files=0, max_fields=8, max_part_size=4096) as form:
                sent = str(form.get(CSRF_FIELD, ""))
        if not sent or not hmac.compare_digest(sent, context.session.csrf):
            return AuthMiddleware._deny(request, Forbidden("missing or wrong CSRF token"))
        state.sessions.delete(context.session.id)
        _emit(request.scope, "info", "logout", user=context.actor)
    response = RedirectResponse("/login", 303)
    response.delete_cookie(session_cookie, path="/")
    response.delete_cookie(csrf_cookie, path="/")
    return response


def auth_routes() -> list[BaseRoute]:
    """``GET /login`` (form), ``POST /login`` (credentials), ``POST /logout``."""
    return [
        Route("/login", login_page, methods=["GET"], name="login"),
        Route(
            "/login",
            login_submit,
            methods=["POST"],
            name="login_submit",
            max_body_size=FORM_MAX_BYTES,
        ),
        Route("/logout", logout, methods=["POST"], name="logout", max_body_size=FORM_MAX_BYTES),
    ]
