"""The browser client's modules (``static/spool-*.js``), loadable by pages of any origin.

A page served from elsewhere imports the client as an ES module straight from the broker
(``import { SpoolClient } from "https://broker:9007/static/spool-client.js"``); a browser
loads a module of another origin only when its response allows it with CORS. These files
are public code and hold no data, so their responses carry
``Access-Control-Allow-Origin: *`` (no credentials). Whether such a page may then
*connect* is the websocket's origin check (web/origins.py, ``Admin/AllowedOrigins``), not
this. Every other response is left as it is.
"""

from __future__ import annotations

import re
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CLIENT_MODULE", "ClientModuleCors"]

#: the paths of the client modules (the dashboard's own scripts are under /static/js/)
CLIENT_MODULE: Final = re.compile(r"/static/spool-[a-z-]+\.js")
_ALLOW: Final = (b"access-control-allow-origin", b"*")


class ClientModuleCors:
    """Adds ``Access-Control-Allow-Origin: *`` to the responses of the client modules."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not CLIENT_MODULE.fullmatch(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def send_allowed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers") or [] if h[0].lower() != _ALLOW[0]]
                message = {**message, "headers": [*headers, _ALLOW]}
            await send(message)

        await self.app(scope, receive, send_allowed)
