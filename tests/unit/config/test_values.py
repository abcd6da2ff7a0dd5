"""Reading values: empty values, ${VAR} expansion, names, booleans."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.config import (
    ConfigError,
    parse_config,
)
from tests.unit.config.helpers import (
    BASE,
    TOKEN,
    assert_refused,
    doc,
    parse,
)

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
    (
        "unsafe group",
        "<Group>a/b</Group>",
        "/SpoolConfig/Group",
        3,
        "'a/b' is not a valid group name",
    ),
    ("hidden group", "<Group>.g</Group>", "/SpoolConfig/Group", 3, "not starting with . or -"),
    ("empty value", "<Group></Group>", "/SpoolConfig/Group", 3, "<Group> must not be empty"),
    (
        "unknown variable",
        "<Group>${NOPE}</Group>",
        "/SpoolConfig/Group",
        3,
        "environment variable NOPE is not set (used as ${NOPE})",
    ),
    (
        "malformed variable",
        "<Group>${1x}</Group>",
        "/SpoolConfig/Group",
        3,
        "malformed ${...} reference",
    ),
    (
        "unterminated variable",
        "<Group>${X</Group>",
        "/SpoolConfig/Group",
        3,
        "malformed ${...} reference",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("true", True),
        ("True", True),
        ("YES", True),
        ("1", True),
        ("false", False),
        ("No", False),
        ("0", False),
        (" FALSE ", False),
    ],
)
def test_booleans(word: str, value: bool) -> None:
    body = f"<Admin><MetricsPublic>{word}</MetricsPublic></Admin>"
    assert parse(doc(body)).admin.metrics_public is value


def test_env_expansion() -> None:
    body = (
        "<DataDirectory>${ROOT}/data-${NAME}</DataDirectory>\n"
        "<TransactionLog><Topic><Name>$${literal}</Name></Topic>"
        "<Topic><Name>a$b</Name></Topic></TransactionLog>\n"
        "<Users><User><Name>${NAME}</Name><Token> ${TOK} </Token></User></Users>"
    )
    cfg = parse(doc(body), env={"ROOT": "/x", "NAME": "feed", "TOK": TOKEN})
    assert cfg.data_directory == Path("/x/data-feed")
    assert cfg.transaction_log is not None
    assert [t.name for t in cfg.transaction_log.topics] == ["${literal}", "a$b"]
    assert cfg.users[0].name == "feed" and cfg.users[0].token == TOKEN


def test_env_defaults_to_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOOL_TEST_GROUP", "from-env")
    cfg = parse_config(doc("<Group>${SPOOL_TEST_GROUP}</Group>"), base_dir=BASE)
    assert cfg.group == "from-env"


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(exclude_characters="$<&]\x00"), max_size=30))
def test_text_without_dollars_is_not_expanded(text: str) -> None:
    body = f"<TransactionLog><Topic><Name>x</Name></Topic></TransactionLog><Group>g{text}</Group>"
    try:
        cfg = parse(doc(body))
    except ConfigError as err:
        # Only the group-name rule (or XML itself) may object, never variable expansion.
        assert "variable" not in err.message and "${" not in err.message
    else:
        assert cfg.group == ("g" + text).strip()


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[A-Za-z0-9_.-]{1,20}", fullmatch=True))
def test_any_variable_value_is_substituted(value: str) -> None:
    cfg = parse(doc("<Group>g${V}</Group>"), env={"V": value})
    assert cfg.group == "g" + value
