"""Message data over REST: the read entitlement every answer that shows it checks.

The websocket checks a user's ``Read`` patterns on every subscription, query and replay;
the REST paths that show message data (a SOW topic's keys, which are values taken from
message bodies; a queue's leased messages) check the same patterns for the user of the
request, so REST never shows what the websocket would refuse. ``Admin`` grants actions,
not topics: an admin without a ``Read`` pattern for a topic is refused its data too.
Lists of topics (``GET /api/sow``, ``GET /api/queues``) leave out what the user may not
read. Without ``<Users>`` everything is allowed, as on the websocket.

docs/security.md has the table of every route and the check it makes; a test derives
the routes from the application and walks the table with a restricted user.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import HTTPConnection

from spool.server.auth import UserAuthenticator
from spool.web.api_errors import Forbidden
from spool.web.auth import auth_context

__all__ = ["read_check", "require_read"]


def read_check(request: HTTPConnection, auth: UserAuthenticator) -> Callable[[str], bool]:
    """Whether the user of ``request`` may read a topic (a function of the topic)."""
    if not auth.enabled:
        return lambda topic: True
    user = auth_context(request).user
    return lambda topic: auth.can_read(user, topic)


def require_read(request: HTTPConnection, auth: UserAuthenticator, topic: str) -> None:
    """Refuse (403) a request for data of ``topic`` its user may not read.

    Raises:
        Forbidden: the user has no ``Read`` entitlement matching ``topic``.
    """
    if read_check(request, auth)(topic):
        return
    raise Forbidden(f"user {auth_context(request).actor!r} may not read topic {topic!r}")
