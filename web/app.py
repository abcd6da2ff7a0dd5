"""The Starlette application: one broker engine per app, in the server's event loop.

``create_app(config)`` builds the broker and the routes; the lifespan starts the broker
(recovery, sampler) before the first request and stops it after the last. The websocket
data path is a raw ASGI endpoint (web/transport.py); the REST admin (web/admin.py), the
auth layer (web/auth.py) and the dashboard (web/dashboard.py) are ordinary routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from spool.server import resources
from spool.server.clock import SYSTEM_CLOCK, Clock
from spool.server.config import Config
from spool.server.engine import Broker
from spool.web.admin import admin_routes
from spool.web.auth import auth_middleware, auth_routes
from spool.web.clientmodules import ClientModuleCors
from spool.web.dashboard import dashboard_routes
from spool.web.headers import SecurityHeadersMiddleware
from spool.web.origins import OriginPolicy
from spool.web.replication import ReplicationEndpoint
from spool.web.transport import WebsocketEndpoint


def create_app(
    config: Config,
    *,
    clock: Clock = SYSTEM_CLOCK,
    console_log: bool = True,
    broker: Broker | None = None,
) -> Starlette:
    """Build the app for one instance. The broker starts with the app's lifespan.

    Args:
        broker: the instance's engine (built from ``config`` when not given; ``spool
            serve`` builds it first so its shutdown can drain the broker's sessions).
    """
    if broker is None:
        broker = Broker(config, clock=clock, console_log=console_log)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await broker.start()
        try:
            yield
        finally:
            await broker.stop()

    origins = OriginPolicy(config.admin.allowed_origins, auth_enabled=broker.auth.enabled)
    routes: list[BaseRoute] = []
    served: list[str] = []  # the websocket paths of clients
    for transport in config.transports:
        if transport.type == "websocket":
            path = f"/amps/{transport.message_type}"
            served.append(path)
            routes.append(WebSocketRoute(path, WebsocketEndpoint(broker, transport.name, origins)))
        elif transport.type == "amps-replication":
            endpoint = ReplicationEndpoint(broker, transport.name)
            routes.append(WebSocketRoute("/replication", endpoint))
    # any other websocket path: 404, naming the paths clients use (not a 403 that reads
    # as an authentication problem)
    routes.append(WebSocketRoute("/{path:path}", _no_websocket_here(served)))
    routes.extend(auth_routes())
    routes.extend(admin_routes(broker.operations, broker.actions))
    routes.extend(dashboard_routes())
    for name, package in (("uplot", resources.UPLOT), ("cytoscape", resources.CYTOSCAPE)):
        vendored = resources.find_resource_dir(package)
        if vendored is not None:  # a checkout before `npm ci` has none: pages without charts
            routes.append(
                Mount(f"/static/vendor/{name}", StaticFiles(directory=vendored / "dist"), name=name)
            )
    static = StaticFiles(directory=resources.resource_dir(resources.STATIC))
    routes.append(Mount("/static", static, name="static"))
    middleware: list[Middleware] = [
        Middleware(SecurityHeadersMiddleware),
        Middleware(ClientModuleCors),
    ]
    if config.admin.allowed_origins:
        # pages of the allowed origins may read the API's answers (and send the headers
        # it needs); the origin checks themselves are web/origins.py's
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.admin.allowed_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "X-CSRF-Token"],
                max_age=600,
            )
        )
    middleware.append(
        Middleware(
            auth_middleware(
                broker.auth,
                broker.logons,
                metrics_public=config.admin.metrics_public,
                clock=clock,
                origins=origins,
            )
        )
    )
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.broker = broker
    app.state.config = config
    return app


def _no_websocket_here(served: list[str]) -> Callable[[WebSocket], Awaitable[None]]:
    """The endpoint of a websocket upgrade to a path nothing serves: HTTP 404 before the
    upgrade, its body naming the paths this broker serves (a client prints it)."""
    hint = f"use {' or '.join(served)}" if served else "this broker serves no websocket clients"

    async def refuse(websocket: WebSocket) -> None:
        text = f"no websocket endpoint at {websocket.url.path}: {hint}"
        await websocket.send_denial_response(PlainTextResponse(text, status_code=404))

    return refuse
