"""The admin API against its own OpenAPI document (schemathesis), on a real server with users.

Schemathesis reads ``/api/openapi.json`` from a running ``spool serve`` and sends
generated requests to every operation (path parameters, query strings, bodies), as an
administrator, as a user without ``<Admin>``, and without credentials. Every answer must:

- never be a 5xx (a crash of a handler is a bug whatever the input);
- have a status code that the document lists for that operation;
- have the documented content type, and a JSON body that matches its documented schema.

The administrator's pass is also run with schemathesis's negative data (values that break
the document's schemas): each must be answered with a documented 4xx.

The number of examples per operation is bounded (``EXAMPLES``) so the run takes seconds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from spool.server.client import SyncClient
from tests.support.server import SpoolProcess, config_xml

pytestmark = [pytest.mark.slow]

ADMIN_TOKEN = "fuzz-admin-token-0123456789"
VIEWER_TOKEN = "fuzz-viewer-token-0123456789"
FEED_TOKEN = "fuzz-feed-token-0123456789"
USERS = (
    f"<User><Name>ops</Name><Token>{ADMIN_TOKEN}</Token><Admin>true</Admin></User>"
    f"<User><Name>viewer</Name><Token>{VIEWER_TOKEN}</Token></User>"
    f"<User><Name>feed</Name><Token>{FEED_TOKEN}</Token><Read>.*</Read><Write>.*</Write></User>"
)
#: a message-driven action, so GET /api/actions answers with a live tally to validate
ACTIONS = """
<Action><Name>per-order</Name>
  <On><Module>amps-action-on-publish-message</Module><Options>
    <Topic>orders</Topic><Filter>/i &gt;= 10</Filter></Options></On>
  <Do><Module>amps-action-do-echo-message</Module><Options><Message>order {{AMPS_DATA}}</Message></Options></Do>
</Action>"""
EXAMPLES = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: status codes seen per role, for the report at the end of the module
SEEN: dict[str, Counter[int]] = {}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpoolProcess]:
    workdir = tmp_path_factory.mktemp("openapi-fuzz")
    xml = config_xml(
        workdir / "data", users=USERS, journal_size="1MB", topics=("orders",), actions=ACTIONS
    )
    proc = SpoolProcess(workdir, xml).start()
    # something for the read endpoints to show: a client, a subscription, recorded messages,
    # an action's tally
    with SyncClient(proc.ws_url, "feed", user_id="feed", password=FEED_TOKEN) as feed:
        for i in range(20):
            feed.publish("orders", {"i": i}, persisted=True)
        feed.flush()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def api_schema(server: SpoolProcess) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(
        server.http_url + "/api/openapi.json",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)


def _call(case: Case, server: SpoolProcess, role: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = case.call(base_url=server.http_url, headers=headers)
    case.validate_response(response, checks=CHECKS)
    SEEN.setdefault(role, Counter())[response.status_code] += 1
    return response.status_code


def _every_operation(
    api_schema: schemathesis.BaseSchema,
    check: Callable[[Case], None],
    mode: GenerationMode = GenerationMode.POSITIVE,
) -> list[str]:
    """Run ``check`` on ``EXAMPLES`` generated cases of every operation of the document.

    (Schemathesis's own pytest integration does not run under pytest 9 yet: its lazy
    fixture schema reads ``Function._nodeid``; this drives its strategies directly.)
    """
    seen: list[str] = []
    for result in api_schema.get_all_operations():
        operation = result.ok()
        seen.append(f"{operation.method.upper()} {operation.path}")

        @given(case=operation.as_strategy(mode))
        @_SETTINGS
        def run(case: Case) -> None:
            check(case)

        try:
            run()
        except Unsatisfiable:
            # negative data for an operation with no parameter and no body: nothing to break
            if mode is not GenerationMode.NEGATIVE:
                raise
    return seen


def test_as_an_administrator(api_schema: schemathesis.BaseSchema, server: SpoolProcess) -> None:
    ops = _every_operation(
        api_schema, lambda case: _call(case, server, "admin", ADMIN_TOKEN) and None
    )
    assert len(ops) >= 40, ops
    assert SEEN["admin"][200] > 0


def test_as_a_user_without_admin(api_schema: schemathesis.BaseSchema, server: SpoolProcess) -> None:
    def check(case: Case) -> None:
        status = _call(case, server, "viewer", VIEWER_TOKEN)
        if case.method == "POST":
            assert status in (400, 403, 404), (case.path, status)

    _every_operation(api_schema, check)
    assert SEEN["viewer"][403] > 0


def test_without_credentials(api_schema: schemathesis.BaseSchema, server: SpoolProcess) -> None:
    def check(case: Case) -> None:
        status = _call(case, server, "anonymous", None)
        if case.path.startswith("/api/"):
            assert status == 401, (case.path, status)

    _every_operation(api_schema, check)
    assert SEEN["anonymous"][401] > 0


def test_invalid_input_as_an_administrator_is_a_documented_4xx(
    api_schema: schemathesis.BaseSchema, server: SpoolProcess
) -> None:
    """Negative data (wrong types, out-of-range numbers, malformed bodies): a 4xx the
    document lists, never a 5xx."""

    def check(case: Case) -> None:
        _call(case, server, "admin-negative", ADMIN_TOKEN)

    _every_operation(api_schema, check, GenerationMode.NEGATIVE)
    assert sum(n for status, n in SEEN["admin-negative"].items() if 400 <= status < 500) > 0
