"""JSON-aware expansion of option templates: which references sit inside JSON strings.

``Template.expand_json`` escapes a value inside a JSON string and inserts it as is in a
value position. The properties: bodies whose references are all inside strings expand as
with every value escaped; generated documents with references in strings and value
positions expand to the document with the values put in; a body that is JSON with every
value escaped expands to the same text; and the quote scan follows escaped quotes,
escaped backslashes and braces inside strings.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.config.template import Template, json_escape

JsonValue = Any

#: JSON values orjson reads back equal (no NaN or infinity, integers within 64 bits).
JSON_VALUES: st.SearchStrategy[JsonValue] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)

#: literal text inside strings: quotes, backslashes, braces and controls are the cases that
#: matter; ``{{`` would start a reference, so it is left out.
LITERALS = st.text(alphabet=st.sampled_from('ab"\\{}[],:\n\t é'), max_size=6).filter(
    lambda s: "{{" not in s
)


class Doc:
    """A template being built, with its variables and the document it should expand to."""

    def __init__(self) -> None:
        self.variables: dict[str, str] = {}

    def name(self, value: str) -> str:
        name = f"V{len(self.variables)}"
        self.variables[name] = value
        return name


@st.composite
def _string(draw: st.DrawFn, doc: Doc) -> tuple[str, str]:
    """A JSON string with references among its literal pieces: (template text, value)."""
    text, value = ['"'], []
    # a reference after every literal piece but the last: two pieces side by side could
    # make a "{{" that is no reference
    for _ in range(draw(st.integers(0, 3))):
        literal, inserted = draw(LITERALS), draw(st.text(max_size=6))
        text += [json_escape(literal), "{{" + doc.name(inserted) + "}}"]
        value += [literal, inserted]
    literal = draw(LITERALS)
    text += [json_escape(literal), '"']
    value.append(literal)
    return "".join(text), "".join(value)


@st.composite
def _node(draw: st.DrawFn, doc: Doc, value_refs: bool, depth: int) -> tuple[str, JsonValue]:
    """A JSON value as template text and as the document it expands to."""
    kinds = ["scalar", "string"] + (["reference"] if value_refs else [])
    if depth < 3:
        kinds += ["array", "object"]
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar":
        scalar = draw(st.none() | st.booleans() | st.integers(-1000, 1000))
        return orjson.dumps(scalar).decode(), scalar
    if kind == "string":
        text, value = draw(_string(doc))
        return text, value
    if kind == "reference":
        inserted = draw(JSON_VALUES)
        return "{{" + doc.name(orjson.dumps(inserted).decode()) + "}}", inserted
    if kind == "array":
        items = [draw(_node(doc, value_refs, depth + 1)) for _ in range(draw(st.integers(0, 3)))]
        return "[" + ",".join(t for t, _ in items) + "]", [v for _, v in items]
    keys = draw(st.lists(LITERALS, max_size=3, unique=True))
    members = [(key, draw(_node(doc, value_refs, depth + 1))) for key in keys]
    text = ",".join(f'"{json_escape(key)}":{t}' for key, (t, _) in members)
    return "{" + text + "}", {key: v for key, (_, v) in members}


@st.composite
def documents(draw: st.DrawFn, value_refs: bool) -> tuple[Template, dict[str, str], JsonValue]:
    """A template (a JSON document with references), its variables and its expansion."""
    doc = Doc()
    text, value = draw(_node(doc, value_refs, 0))
    return Template.parse(text), doc.variables, value


@settings(max_examples=300)
@given(documents(value_refs=False))
def test_references_all_inside_strings_expand_as_escaped_values(
    case: tuple[Template, dict[str, str], JsonValue],
) -> None:
    template, variables, value = case
    assert all(template.in_string)
    expanded = template.expand_json(variables)
    assert expanded == template.expand(variables, json_escape)
    assert orjson.loads(expanded) == value


@settings(max_examples=300)
@given(documents(value_refs=True))
def test_json_values_in_value_positions_give_the_document_with_them_put_in(
    case: tuple[Template, dict[str, str], JsonValue],
) -> None:
    template, variables, value = case
    assert orjson.loads(template.expand_json(variables)) == value


#: values a configuration may have put outside quotes: numbers, true, false, null (the only
#: ones that give JSON with every value escaped) and text that escaping changes or that
#: is not JSON at all.
LOOSE_VALUES = (
    st.integers().map(str)
    | st.sampled_from(["true", "false", "null", "-1.5e3", " 7\t"])
    | st.text(alphabet=st.sampled_from('0123456789-.e"\\\n\t {}[]a'), max_size=5)
)


@settings(max_examples=500)
@given(documents(value_refs=True), st.data())
def test_a_body_that_is_json_with_every_value_escaped_expands_the_same(
    case: tuple[Template, dict[str, str], JsonValue], data: st.DataObject
) -> None:
    template, variables, _ = case
    for name, position in zip(template.variables, template.in_string, strict=True):
        if not position:
            variables[name] = data.draw(LOOSE_VALUES)
    escaped = template.expand(variables, json_escape)
    try:
        orjson.loads(escaped)
    except orjson.JSONDecodeError:
        return
    assert template.expand_json(variables) == escaped


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from(['"', "\\", "{", "}", ":", ",", "1", "a", "{{X}}"]), max_size=12),
    st.text(alphabet=st.sampled_from('1"\\ a'), max_size=4),
)
def test_any_text_that_is_json_with_the_value_escaped_expands_the_same(
    pieces: list[str], value: str
) -> None:
    try:
        template = Template.parse("".join(pieces))
    except ValueError:
        return  # a stray "{{": refused at load
    variables = {"X": value}
    escaped = template.expand(variables, json_escape)
    try:
        orjson.loads(escaped)
    except orjson.JSONDecodeError:
        return
    assert template.expand_json(variables) == escaped


@pytest.mark.parametrize(
    ("text", "in_string"),
    [
        ('{"a":"{{X}}"}', (True,)),
        ('{"a":{{X}}}', (False,)),
        ('{"{{K}}":{{V}}}', (True, False)),
        # an escaped quote does not close the string; an escaped backslash does not escape
        # the quote after it
        ('{"a\\"b":{{X}}}', (False,)),
        ('{"a\\"{{X}}":1}', (True,)),
        ('{"a\\\\":{{X}}}', (False,)),
        ('{"a\\\\\\"{{X}}":{{Y}}}', (True, False)),
        # braces and brackets inside strings are text
        ('{"k":"}{[","v":{{X}},"w":"{{Y}}"}', (False, True)),
        ('["{{A}}",{{B}},"x\\"{{C}}\\"",{{D}}]', (True, False, True, False)),
        # a reference is opaque: it neither opens nor closes a string
        ('["{{A}}{{B}}",{{C}}{{D}}]', (True, True, False, False)),
        # a backslash right before a reference: the rest cannot be told, so it is escaped
        ('{"a":"\\{{X}}","b":{{Y}}}', (True, True)),
        ("{{X}}", (False,)),
        ('"{{X}}"', (True,)),
    ],
)
def test_the_quote_scan_follows_escapes_and_ignores_braces_in_strings(
    text: str, in_string: tuple[bool, ...]
) -> None:
    assert Template.parse(text).in_string == in_string


def test_a_value_with_a_quote_inside_a_string_does_not_end_it() -> None:
    template = Template.parse('{"a":"{{X}}","b":{{Y}},"c":"{{AMPS_BYTE_22}}","d":{{AMPS_BYTE_31}}}')
    expanded = template.expand_json({"X": 'say "hi" \\', "Y": '{"n":[1]}'})
    assert orjson.loads(expanded) == {"a": 'say "hi" \\', "b": {"n": [1]}, "c": '"', "d": 1}


def test_plain_expansion_is_unchanged() -> None:
    template = Template.parse('ops/{{A}} "{{B}}"')
    assert template.expand({"A": 'x"', "B": "y"}) == 'ops/x" "y"'
    assert template.expand({"A": 'x"', "B": "y"}, json_escape) == 'ops/x\\" "y"'
