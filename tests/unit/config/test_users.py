"""The <Users> section: names, secrets (never quoted), entitlements."""

from __future__ import annotations

import pytest

from tests.unit.config.helpers import (
    DIGEST,
    SALT,
    TOKEN,
    TOKEN2,
    USERS,
    assert_refused,
    doc,
    parse,
)

# (id, body inside <SpoolConfig> after <Name>, path, line, fragment of the message)
REFUSED: list[tuple[str, str, str, int, str]] = [
    ("empty Users", "<Users>\n</Users>", "/SpoolConfig/Users", 3, "<Users> is empty"),
    (
        "user without credentials",
        "<Users>\n<User><Name>u</Name><Admin>true</Admin></User>\n</Users>",
        "/SpoolConfig/Users/User",
        4,
        "user 'u' needs a <PasswordHash>, a <Token> or a <CertificateSubject>",
    ),
    (
        "hash shape",
        "<Users><User><Name>u</Name>\n<PasswordHash>md5$abc</PasswordHash></User></Users>",
        "/SpoolConfig/Users/User/PasswordHash",
        4,
        "PasswordHash must have the form scrypt$N$r$p$salt_b64$hash_b64",
    ),
    (
        "hash N",
        f"<Users><User><Name>u</Name>\n<PasswordHash>scrypt$1000$8$1${SALT}${DIGEST}"
        "</PasswordHash></User></Users>",
        "/SpoolConfig/Users/User/PasswordHash",
        4,
        "N must be a power of two >= 2",
    ),
    (
        "hash base64",
        "<Users><User><Name>u</Name>\n<PasswordHash>scrypt$16384$8$1$!!!$"
        f"{DIGEST}</PasswordHash></User></Users>",
        "/SpoolConfig/Users/User/PasswordHash",
        4,
        "the salt is not base64",
    ),
    (
        "short token",
        "<Users><User><Name>u</Name>\n<Token>abc</Token></User></Users>",
        "/SpoolConfig/Users/User/Token",
        4,
        "the Token is too short: at least 16 characters",
    ),
    (
        "token with a space",
        "<Users><User><Name>u</Name>\n<Token>${T}</Token></User></Users>",
        "/SpoolConfig/Users/User/Token",
        4,
        "the Token must be printable ASCII without spaces",
    ),
    (
        "duplicate user",
        f"<Users>\n<User><Name>u</Name><Token>{TOKEN}</Token></User>\n"
        f"<User><Name>u</Name><Token>{TOKEN2}</Token></User>\n</Users>",
        "/SpoolConfig/Users/User[2]",
        5,
        "duplicate user 'u' (first at line 4)",
    ),
    (
        "duplicate token",
        f"<Users>\n<User><Name>u</Name><Token>{TOKEN}</Token></User>\n"
        f"<User><Name>v</Name>\n<Token>{TOKEN}</Token></User>\n</Users>",
        "/SpoolConfig/Users/User[2]/Token",
        6,
        "user 'v' has the same Token as user 'u'; tokens identify users and must be unique",
    ),
    (
        "bad Read regex",
        f"<Users><User><Name>u</Name><Token>{TOKEN}</Token>\n<Read>^a$</Read>\n<Read>[</Read>"
        "</User></Users>",
        "/SpoolConfig/Users/User/Read[2]",
        5,
        "'[' is not a valid regular expression",
    ),
    (
        "bad Write regex",
        f"<Users><User><Name>u</Name><Token>{TOKEN}</Token>\n<Write>*x</Write></User></Users>",
        "/SpoolConfig/Users/User/Write",
        4,
        "'*x' is not a valid regular expression",
    ),
    (
        "bad user name",
        f"<Users><User>\n<Name>a b</Name><Token>{TOKEN}</Token></User></Users>",
        "/SpoolConfig/Users/User/Name",
        4,
        "'a b' is not a valid user name",
    ),
    (
        "bad Admin flag",
        f"<Users><User><Name>u</Name><Token>{TOKEN}</Token>\n<Admin>sure</Admin></User></Users>",
        "/SpoolConfig/Users/User/Admin",
        4,
        "'sure' is not a boolean",
    ),
]


@pytest.mark.parametrize(
    ("body", "path", "line", "fragment"),
    [case[1:] for case in REFUSED],
    ids=[case[0] for case in REFUSED],
)
def test_refused(body: str, path: str, line: int, fragment: str) -> None:
    assert_refused(body, path, line, fragment)


def test_users_allow_any_address_and_imply_token_auth() -> None:
    cfg = parse(
        doc(
            "<Admin><InetAddr>0.0.0.0:9007</InetAddr><AllowPlaintext>true</AllowPlaintext>"
            f"</Admin>\n{USERS}"
        )
    )
    assert cfg.admin.authentication == "token"
    assert cfg.transports[0].host == "0.0.0.0"
    assert cfg.users[0].token == TOKEN
