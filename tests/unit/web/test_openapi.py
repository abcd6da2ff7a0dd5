"""The OpenAPI document lists what a handler can answer (checked by schemathesis too).

An operation whose query
parameters the handler checks must list 400, and the bounds it enforces belong in the
parameter's schema so clients (and generators) know the valid range.
"""

from __future__ import annotations

from spool.web.openapi import Operation, QueryParam, openapi_document


def _doc(*query: QueryParam) -> dict[str, object]:
    op = Operation("GET", "/api/things", "things", "things", query=query)
    document = openapi_document([op], version="t")
    paths = document["paths"]
    assert isinstance(paths, dict)
    get = paths["/api/things"]["get"]
    assert isinstance(get, dict)
    return get


def test_a_checked_query_parameter_documents_400_and_its_bounds() -> None:
    op = _doc(QueryParam("limit", "1..1000", type="integer", minimum=1, maximum=1000))
    assert "400" in op["responses"]  # type: ignore[operator]
    (param,) = op["parameters"]  # type: ignore[misc]
    assert param["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000}


def test_a_read_with_free_text_parameters_only_cannot_be_a_400() -> None:
    op = _doc(QueryParam("category", "only this category"))
    assert set(op["responses"]) == {"200", "401"}  # type: ignore[arg-type]


def test_a_text_operation_documents_its_content_type() -> None:
    op = Operation("GET", "/metrics", "m", "probes", access="public", media_type="text/plain")
    paths = openapi_document([op], version="t")["paths"]
    assert isinstance(paths, dict)
    content = paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert content == {"text/plain": {"schema": {"type": "string"}}}


def test_every_error_status_an_operation_declares_resolves_to_a_component() -> None:
    """``POST /api/actions/{name}`` declares 500 (a failed step); every response the
    document refers to, such as ``#/components/responses/E500``, must exist, or
    schemathesis refuses to load the operation."""
    ops = [
        Operation("POST", "/api/x/{name}", "x", "x", errors=(400, 404, 409, 500)),
        Operation("GET", "/readyz", "r", "probes", access="public", errors=(503,)),
    ]
    document = openapi_document(ops, version="t")
    components = document["components"]
    assert isinstance(components, dict)
    defined = {f"#/components/responses/{name}" for name in components["responses"]}
    paths = document["paths"]
    assert isinstance(paths, dict)
    refs = [
        response["$ref"]
        for path in paths.values()
        for op in path.values()
        for response in op["responses"].values()
        if "$ref" in response
    ]
    assert refs and set(refs) <= defined, set(refs) - defined
