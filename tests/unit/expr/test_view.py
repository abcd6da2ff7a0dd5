"""MessageView: lazy, parse-once, total."""

from __future__ import annotations

import orjson
import pytest

from spool.server.expr import MessageView, compile_filter


def test_body_is_parsed_lazily_and_once() -> None:
    view = MessageView("t", b'{"a": 1, "b": {"c": 2}}')
    assert not view.parsed
    before = MessageView.parse_count()
    assert compile_filter("TOPIC() = 't'").matches(view)
    assert not view.parsed  # no field read, no parse
    assert compile_filter("/a = 1").matches(view)
    assert compile_filter("/b/c = 2").matches(view)
    assert compile_filter("/a = 1 AND /b/c = 2").matches(view)
    assert view.document == {"a": 1, "b": {"c": 2}}
    assert view.parsed
    assert MessageView.parse_count() - before == 1


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[1, 2]", b'"text"', b"42", b"null", b'{"a": 1', b"\xff\xfe", b'{"a":NaN}'],
)
def test_bodies_that_are_not_json_objects_have_no_fields(body: bytes) -> None:
    view = MessageView("t", body)
    assert view.document == {}
    assert compile_filter("/a IS NULL").matches(view)
    assert not compile_filter("/a = 1").matches(view)
    assert not compile_filter("NOT /a = 1").matches(view)
    assert compile_filter("TOPIC() = 't'").matches(view)


def test_bodies_may_be_any_bytes_like() -> None:
    # Typed as bytes (the engine's type); a frame slice still works at run time.
    assert MessageView("t", bytearray(b'{"a": 1}')).document == {"a": 1}  # type: ignore[arg-type]
    assert MessageView("t", memoryview(b'{"a": 1}')).document == {"a": 1}  # type: ignore[arg-type]
    assert MessageView("t", "{}").document == {}  # type: ignore[arg-type]


def test_of_document_skips_parsing() -> None:
    before = MessageView.parse_count()
    view = MessageView.of_document("t", {"qty": 5})
    assert compile_filter("/qty = 5").matches(view)
    assert MessageView.parse_count() == before


def test_metadata_functions_read_the_view() -> None:
    view = MessageView(
        "md.ibm",
        b"{}",
        bookmark="7|9|",
        timestamp="2024-01-02T03:04:05.000000Z",
        client_name="publisher-a",
    )
    assert compile_filter("TOPIC() = 'md.ibm'").matches(view)
    assert compile_filter("BOOKMARK() = '7|9|'").matches(view)
    assert compile_filter("TIMESTAMP() BEGINS WITH ('2024-01-02')").matches(view)
    # CLIENT_NAME() is the publisher's name, not the subscriber's.
    assert compile_filter("CLIENT_NAME() = 'publisher-a'").matches(view)
    assert not view.parsed


def test_missing_metadata_is_null_to_operators() -> None:
    view = MessageView("t", b"{}")
    assert compile_filter("BOOKMARK() IS NULL").matches(view)
    assert compile_filter("CLIENT_NAME() IS NULL").matches(view)
    assert not compile_filter("TIMESTAMP() = ''").matches(view)


def test_large_body_with_one_field_filter() -> None:
    doc = {"sym": "IBM", "blob": ["x" * 100 for _ in range(10_000)]}
    view = MessageView("t", orjson.dumps(doc))
    assert compile_filter("/sym = 'IBM'").matches(view)
    assert repr(view).startswith("MessageView(topic='t'")
