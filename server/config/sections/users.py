"""The ``<Users>`` section: who may log on, with what, and which topics they may use.

A user logs on with a password (``PasswordHash``), a ``Token``, or a client certificate
over mutual TLS (``CertificateSubject``: the certificate's subject as an RFC 4514 name,
kept in canonical form; unique among users).

Secrets are checked for shape here (a PasswordHash through
:func:`spool.server.passwords.parse_password_hash`, a Token for length and characters) so that a
broken user is refused at start-up rather than at the first logon. Error messages never
quote a token or a hash: they end up in logs.
"""

from __future__ import annotations

import re
from typing import Final

from spool.server.config.model import UserConfig
from spool.server.config.values import Context, read_bool, read_linear_regex, read_value
from spool.server.config.xmltree import Children, Spec, XmlNode, fail
from spool.server.passwords import InvalidPasswordHash, parse_password_hash
from spool.server.tls.certificate import InvalidName, canonical_name

__all__ = ["read_users"]

_USERS_SPEC: Final[Spec] = {"User": True}
_USER_SPEC: Final[Spec] = {
    "Name": False,
    "PasswordHash": False,
    "Token": False,
    "Admin": False,
    "Read": True,
    "Write": True,
    "CertificateSubject": False,
}
_MIN_TOKEN_LENGTH: Final = 16
_USER_NAME: Final = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")


def _user(node: XmlNode, ctx: Context) -> tuple[UserConfig, XmlNode | None, XmlNode | None]:
    """One user, and its Token and CertificateSubject elements (the uniqueness checks
    report at them)."""
    kids = Children(node, _USER_SPEC)
    name_node = kids.require("Name")
    name = read_value(name_node, ctx)
    if not _USER_NAME.fullmatch(name):
        raise fail(
            name_node, f"{name!r} is not a valid user name: use 1 to 128 of A-Z a-z 0-9 _ . @ + -"
        )
    password_hash = None
    if (hash_node := kids.one("PasswordHash")) is not None:
        password_hash = read_value(hash_node, ctx)
        try:
            parse_password_hash(password_hash)
        except InvalidPasswordHash as exc:
            raise fail(hash_node, str(exc)) from None
    token = None
    token_node = kids.one("Token")
    if token_node is not None:
        token = read_value(token_node, ctx)
        # Never quote the token: error messages end up in logs.
        if len(token) < _MIN_TOKEN_LENGTH:
            raise fail(
                token_node,
                f"the Token is too short: at least {_MIN_TOKEN_LENGTH} characters "
                "(generate one with `python -c 'import secrets; print(secrets.token_urlsafe())'`)",
            )
        if not token.isascii() or not token.isprintable() or " " in token:
            raise fail(token_node, "the Token must be printable ASCII without spaces")
    subject = None
    if (subject_node := kids.one("CertificateSubject")) is not None:
        try:
            subject = canonical_name(read_value(subject_node, ctx))
        except InvalidName as exc:
            raise fail(
                subject_node,
                f"not an RFC 4514 distinguished name ({exc}); write it as "
                "CN=alice,O=Example (most specific first)",
            ) from None
    if password_hash is None and token is None and subject is None:
        raise fail(
            node,
            f"user {name!r} needs a <PasswordHash>, a <Token> or a <CertificateSubject>",
        )
    admin = False
    if (admin_node := kids.one("Admin")) is not None:
        admin = read_bool(admin_node, ctx)
    read = tuple(read_linear_regex(read_node, ctx) for read_node in kids.many("Read"))
    write = tuple(read_linear_regex(write_node, ctx) for write_node in kids.many("Write"))
    user = UserConfig(
        name=name,
        password_hash=password_hash,
        token=token,
        admin=admin,
        read=read,
        write=write,
        certificate_subject=subject,
    )
    return user, token_node, subject_node


def read_users(node: XmlNode | None, ctx: Context) -> tuple[UserConfig, ...]:
    """Read ``<Users>`` (absent: no users); names and tokens must be unique."""
    if node is None:
        return ()
    user_nodes = Children(node, _USERS_SPEC).many("User")
    if not user_nodes:
        raise fail(
            node,
            "<Users> is empty: add at least one <User>, or remove <Users> to run without "
            "authentication (loopback only)",
        )
    users: list[UserConfig] = []
    names: dict[str, int] = {}
    tokens: dict[str, str] = {}
    subjects: dict[str, str] = {}
    for user_node in user_nodes:
        user, token_node, subject_node = _user(user_node, ctx)
        subject = user.certificate_subject
        if subject is not None and subject_node is not None:
            if subject in subjects:
                raise fail(
                    subject_node,
                    f"user {user.name!r} has the same CertificateSubject as user "
                    f"{subjects[subject]!r}; a certificate logs on as one user",
                )
            subjects[subject] = user.name
        if user.name in names:
            raise fail(
                user_node, f"duplicate user {user.name!r} (first at line {names[user.name]})"
            )
        names[user.name] = user_node.line
        if user.token is not None and token_node is not None:
            if user.token in tokens:
                raise fail(
                    token_node,
                    f"user {user.name!r} has the same Token as user {tokens[user.token]!r}; "
                    "tokens identify users and must be unique",
                )
            tokens[user.token] = user.name
        users.append(user)
    return tuple(users)
