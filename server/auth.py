"""Authentication and topic entitlements of the ``Users`` configuration (docs/configuration.md).

A user logs on with a password (stored as an scrypt hash) or a token. The websocket
logon (docs/protocol.md ``user_id`` / ``pw``), the REST API (``Authorization: Bearer``) and the
dashboard login all go through :class:`UserAuthenticator`, so there is one place that
compares secrets, and it does so in constant time.

Password hashes have the form ``scrypt$N$r$p$SALT$HASH`` (salt and hash base64); that
format (hash, parse, verify) is :mod:`spool.server.passwords`, and ``spool passwd`` (registered
here) prints a new one. Verifying costs tens of milliseconds by design; code on the event
loop uses :meth:`UserAuthenticator.authenticate_async`, which runs scrypt on the bounded
password-check pool (:mod:`spool.server.scryptpool`), never on the loop's default executor.

Over mutual TLS a verified client certificate whose subject is a user's
``CertificateSubject`` identifies that user (:meth:`UserAuthenticator.by_certificate`).

Entitlements: ``Read`` / ``Write`` are regexes matched with ``re.search`` semantics against
the topic, in linear time (server/regex.py: RE2); a user without any has none. ``Admin`` grants the REST actions, not topics. With no
``Users`` configured authentication is disabled and everything is allowed (the broker then
only listens on loopback, see docs/configuration.md).

Errors: :class:`InvalidEntitlement` (a ``SpoolError``) for a Read/Write pattern that is
not a regex; malformed hashes are :class:`spool.server.passwords.InvalidPasswordHash`, raised by
the config loader, and simply never verify here.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import hmac
import secrets
import sys
from typing import Final

from spool.server.config import UserConfig
from spool.server.passwords import hash_password, verify_password
from spool.server.protocol.errors import SpoolError
from spool.server.regex import Regex, RegexRefused, compile_regex
from spool.server.scryptpool import ScryptPool

_ENTITLEMENT_CACHE_MAX: Final = 65536


class InvalidEntitlement(SpoolError):
    """A ``Read`` / ``Write`` entitlement that is not a valid regular expression.

    Attributes:
        user: the user whose entitlement is wrong.
        pattern: the offending pattern.
    """

    def __init__(self, user: str, pattern: str, error: str) -> None:
        super().__init__(f"user {user!r}: bad entitlement regex {pattern!r}: {error}")
        self.user = user
        self.pattern = pattern


def _digest(secret: str) -> bytes:
    """Fixed-length digest so token comparisons do not leak the token's length."""
    return hashlib.sha256(secret.encode("utf-8")).digest()


def _compile(user: str, patterns: tuple[str, ...]) -> tuple[Regex, ...]:
    compiled: list[Regex] = []
    for pattern in patterns:
        try:
            compiled.append(compile_regex(pattern))
        except RegexRefused as exc:
            raise InvalidEntitlement(user, pattern, exc.reason) from None
    return tuple(compiled)


class UserAuthenticator:
    """Checks credentials and entitlements against the configured users.

    Args:
        users: the ``Users`` of the configuration; empty disables authentication.
        pool: where password checks run (a one-thread pool when not given).

    Raises:
        InvalidEntitlement: a Read/Write pattern does not compile.

    Thread-safety: :meth:`authenticate` may run in worker threads (it only reads); the
    entitlement cache is touched from the event loop only.
    """

    def __init__(self, users: tuple[UserConfig, ...], pool: ScryptPool | None = None) -> None:
        self._users = users
        self.pool = pool if pool is not None else ScryptPool()
        self._by_subject: dict[str, UserConfig] = {
            u.certificate_subject: u for u in users if u.certificate_subject
        }
        self._by_name: dict[str, UserConfig] = {u.name: u for u in users}
        self._tokens: tuple[tuple[bytes, UserConfig], ...] = tuple(
            (_digest(u.token), u) for u in users if u.token
        )
        self._read = {u.name: _compile(u.name, u.read) for u in users}
        self._write = {u.name: _compile(u.name, u.write) for u in users}
        self._cache: dict[tuple[str, str, str], bool] = {}
        self._dummy: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether any user is configured (otherwise everything is allowed)."""
        return bool(self._users)

    @property
    def users(self) -> tuple[UserConfig, ...]:
        """The configured users."""
        return self._users

    def user(self, name: str) -> UserConfig | None:
        """The configured user called ``name`` (sessions store names, not user objects)."""
        return self._by_name.get(name)

    def by_token(self, token: str | None) -> UserConfig | None:
        """The user whose ``Token`` is ``token``; every token is compared, in constant time."""
        if not self.enabled or not token:
            return None
        probe = _digest(token)
        found: UserConfig | None = None
        for digest, user in self._tokens:
            if hmac.compare_digest(probe, digest) and found is None:
                found = user
        return found

    def by_certificate(self, subject: str | None) -> UserConfig | None:
        """The user whose ``CertificateSubject`` is ``subject`` (the RFC 4514 subject of a
        client certificate the TLS layer verified), or None."""
        if not subject:
            return None
        return self._by_subject.get(subject)

    def _token_of(self, user_id: str | None, secret: str) -> UserConfig | None:
        """The user if ``secret`` is the token of ``user_id`` (or of anyone, without a name)."""
        if not user_id:
            return self.by_token(secret)
        user = self._by_name.get(user_id)
        if user is None or not user.token:
            return None
        return user if hmac.compare_digest(_digest(secret), _digest(user.token)) else None

    def _password_of(self, user_id: str | None, secret: str) -> UserConfig | None:
        """The user if ``secret`` is their password; always pays for one scrypt."""
        user = self._by_name.get(user_id) if user_id else None
        if user is None or not user.password_hash:
            # Same cost as a real check, so timing does not tell which names exist.
            verify_password(secret, self._dummy_hash())
            return None
        return user if verify_password(secret, user.password_hash) else None

    def _dummy_hash(self) -> str:
        if self._dummy is None:
            self._dummy = hash_password(secrets.token_urlsafe(16))
        return self._dummy

    def authenticate(self, user_id: str | None, secret: str | None) -> UserConfig | None:
        """The user for these credentials, or None.

        ``secret`` is the user's token or password. Without ``user_id`` only tokens are
        accepted (the token names its user). With authentication disabled this returns
        None: callers check :attr:`enabled` first.

        Blocking: a password check runs scrypt (tens of ms). On the event loop, use
        :meth:`authenticate_async`.
        """
        if not self.enabled or not secret:
            return None
        user = self._token_of(user_id, secret)
        if user is not None:
            return user
        if not user_id:
            return None
        return self._password_of(user_id, secret)

    async def authenticate_async(
        self, user_id: str | None, secret: str | None
    ) -> UserConfig | None:
        """:meth:`authenticate` for the event loop: tokens inline, scrypt on the pool.

        Raises:
            PoolBusy: too many password checks are already waiting.
        """
        if not self.enabled or not secret:
            return None
        user = self._token_of(user_id, secret)
        if user is not None or not user_id:
            return user
        return await self.pool.run(lambda: self._password_of(user_id, secret))

    def _allowed(
        self,
        kind: str,
        table: dict[str, tuple[Regex, ...]],
        user: UserConfig | None,
        topic: str,
    ) -> bool:
        if not self.enabled:
            return True
        if user is None:
            return False
        key = (kind, user.name, topic)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        allowed = any(p.test(topic) for p in table.get(user.name, ()))
        if len(self._cache) >= _ENTITLEMENT_CACHE_MAX:
            self._cache.clear()
        self._cache[key] = allowed
        return allowed

    def can_read(self, user: UserConfig | None, topic: str) -> bool:
        """Whether ``user`` may subscribe to / query ``topic`` (a concrete topic name)."""
        return self._allowed("r", self._read, user, topic)

    def can_write(self, user: UserConfig | None, topic: str) -> bool:
        """Whether ``user`` may publish / delete on ``topic``."""
        return self._allowed("w", self._write, user, topic)

    def is_admin(self, user: UserConfig | None) -> bool:
        """Whether ``user`` may run admin actions (everyone may when auth is disabled)."""
        if not self.enabled:
            return True
        return user is not None and user.admin


# --- `spool passwd` ---------------------------------------------------------------------


def _read_password(stdin: bool) -> str:
    """The new password: one line of stdin when piped, else prompted twice without echo."""
    if stdin or not sys.stdin.isatty():
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    first = getpass.getpass("Password: ")
    second = getpass.getpass("Repeat password: ")
    if first != second:
        raise SystemExit("spool passwd: passwords do not match")
    return first


def _cmd_passwd(args: argparse.Namespace) -> int:
    password = _read_password(bool(args.stdin))
    if not password:
        print("spool passwd: empty password refused", file=sys.stderr)
        return 2
    print(hash_password(password))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``spool passwd``: print a ``PasswordHash`` for a password read from stdin or a prompt.

    The handler is stored as ``func`` (``args.func(args) -> int`` exit status).
    """
    parser = subparsers.add_parser(
        "passwd",
        help="hash a password for <Users><User><PasswordHash>",
        description="Read a password (stdin when piped, else a prompt) and print its scrypt hash.",
    )
    parser.add_argument(
        "--stdin", action="store_true", help="read one line from stdin even on a terminal"
    )
    parser.set_defaults(func=_cmd_passwd)
