"""server/auth.py (credentials, entitlements, `spool passwd`) and the pure parts of
web/auth.py (sessions, throttle, redirect targets). Hash format: test_passwords.py."""

from __future__ import annotations

import argparse
import asyncio
import io

import pytest

from spool.server.auth import InvalidEntitlement, UserAuthenticator, register
from spool.server.clock import VirtualClock
from spool.server.config import UserConfig
from spool.server.passwords import hash_password, verify_password
from spool.web.auth import SessionStore, safe_next

OPS_HASH = hash_password("correct horse")
USERS = (
    UserConfig(name="ops", password_hash=OPS_HASH, admin=True),
    UserConfig(name="feed", token="feed-token-123", read=("^orders$",), write=("^orders$",)),
    UserConfig(name="audit", token="audit-token", read=("^/audit/", "^orders")),
)


def test_authenticate_by_password_and_token() -> None:
    auth = UserAuthenticator(USERS)
    assert auth.enabled
    assert auth.authenticate("ops", "correct horse") is USERS[0]
    assert auth.authenticate("ops", "wrong") is None
    assert auth.authenticate("feed", "feed-token-123") is USERS[1]
    assert auth.authenticate(None, "feed-token-123") is USERS[1]  # the token names its user
    assert auth.authenticate("audit", "feed-token-123") is None  # someone else's token
    assert auth.authenticate("nobody", "correct horse") is None
    assert auth.authenticate("ops", None) is None
    assert auth.authenticate(None, "correct horse") is None  # passwords need a name
    assert auth.by_token("audit-token") is USERS[2]
    assert auth.by_token("audit-token ") is None
    assert auth.by_token("") is None
    assert auth.user("feed") is USERS[1] and auth.user("x") is None


def test_authenticate_async_matches_sync() -> None:
    auth = UserAuthenticator(USERS)

    async def main() -> list[UserConfig | None]:
        return list(
            await asyncio.gather(
                auth.authenticate_async("ops", "correct horse"),
                auth.authenticate_async("ops", "nope"),
                auth.authenticate_async(None, "feed-token-123"),
                auth.authenticate_async("ghost", "x"),
            )
        )

    assert asyncio.run(main()) == [USERS[0], None, USERS[1], None]


def test_entitlements_use_regex_search() -> None:
    auth = UserAuthenticator(USERS)
    feed, audit, ops = USERS[1], USERS[2], USERS[0]
    assert auth.can_read(feed, "orders") and auth.can_write(feed, "orders")
    assert not auth.can_read(feed, "orders2") and not auth.can_write(feed, "trades")
    assert auth.can_read(audit, "/audit/x") and auth.can_read(audit, "orders-eu")
    assert not auth.can_write(audit, "/audit/x")
    assert not auth.can_read(ops, "orders")  # Admin grants actions, not topics
    assert not auth.can_read(None, "orders")
    for _ in range(3):  # cached answers stay right
        assert auth.can_read(feed, "orders") and not auth.can_read(feed, "x")
    assert auth.is_admin(ops) and not auth.is_admin(feed) and not auth.is_admin(None)


def test_disabled_authentication_allows_everything() -> None:
    auth = UserAuthenticator(())
    assert not auth.enabled
    assert auth.authenticate("anyone", "anything") is None
    assert auth.can_read(None, "x") and auth.can_write(None, "x") and auth.is_admin(None)


def test_bad_entitlement_regex() -> None:
    with pytest.raises(InvalidEntitlement) as info:
        UserAuthenticator((UserConfig(name="u", token="t", read=("(",)),))
    assert info.value.user == "u" and info.value.pattern == "("


def test_passwd_command_reads_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="spool")
    register(parser.add_subparsers(dest="command", required=True))
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret pass\n"))
    args = parser.parse_args(["passwd", "--stdin"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out.strip()
    assert verify_password("s3cret pass", printed)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert args.func(args) == 2


def test_sessions_expire_when_idle_or_old() -> None:
    clock = VirtualClock()
    store = SessionStore(clock, idle_timeout=100, max_age=250)
    s = store.create("ops")
    assert store.get(s.id) is s and s.user == "ops" and s.csrf != s.id
    asyncio.run(clock.advance(90))
    assert store.get(s.id) is s  # refreshed
    asyncio.run(clock.advance(90))
    assert store.get(s.id) is s
    asyncio.run(clock.advance(90))  # 270 s old
    assert store.get(s.id) is None
    idle = store.create("ops")
    asyncio.run(clock.advance(101))
    assert store.get(idle.id) is None
    assert store.get("") is None and store.get("forged") is None


def test_session_store_is_bounded() -> None:
    clock = VirtualClock()
    store = SessionStore(clock, max_sessions=3)
    ids = [store.create(f"u{i}").id for i in range(5)]
    assert len(store) == 3
    assert store.get(ids[-1]) is not None
    store.delete(ids[-1])
    assert store.get(ids[-1]) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "/"),
        ("", "/"),
        ("/clients?x=1", "/clients?x=1"),
        ("//evil.example", "/"),
        ("/\\evil", "/"),
        ("https://evil.example/", "/"),
        ("/login", "/"),
        ("/a\nb", "/"),
        ("relative", "/"),
    ],
)
def test_safe_next(value: str | None, expected: str) -> None:
    assert safe_next(value) == expected
