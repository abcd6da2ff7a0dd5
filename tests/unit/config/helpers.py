"""Shared fixtures of the configuration tests: secrets, a document builder, the check that
every refusal names its element and line and never quotes a secret."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from spool.server.config import Config, ConfigError, parse_config

MB = 1024 * 1024
SALT = base64.b64encode(bytes(range(16))).decode()
DIGEST = base64.b64encode(bytes(range(100, 132))).decode()
HASH = f"scrypt$16384$8$1${SALT}${DIGEST}"
TOKEN = "tok-SECRET-0123456789abcdef"
TOKEN2 = "tok-OTHER-0123456789abcdef"
USERS = f"<Users><User><Name>ops</Name><Token>{TOKEN}</Token></User></Users>"
BASE = Path("/srv/spool")


def doc(body: str, root: str = "SpoolConfig") -> str:
    """A file whose body starts on line 3 (line 1 the root, line 2 the Name)."""
    return f"<{root}>\n<Name>t</Name>\n{body}\n</{root}>\n"


def parse(text: str, env: dict[str, str] | None = None) -> Config:
    return parse_config(text, base_dir=BASE, env=env if env is not None else {})


def txlog(*lines: str) -> str:
    """A TransactionLog whose first inner line is the body's line 2 (file line 4)."""
    return "\n".join(
        ["<TransactionLog>", *lines, "<Topic><Name>a</Name></Topic>", "</TransactionLog>"]
    )


def assert_refused(body: str, path: str, line: int, fragment: str) -> None:
    """``doc(body)`` is refused at ``path``/``line`` with ``fragment`` in the message."""
    with pytest.raises(ConfigError) as info:
        parse(doc(body), env={"T": "has a space in it, sixteen+"})
    err = info.value
    assert (err.path, err.line) == (path, line), err.message
    assert fragment in err.message
    assert str(err) == f"config error at {path} (line {line}): {err.message}"
    assert err.source == "<string>"
    # Secrets never reach a message, whatever went wrong.
    for secret in (TOKEN, TOKEN2, HASH, SALT, DIGEST):
        assert secret not in str(err)
