"""Where a webhook may post, and how its URL is shown (server/config/webhookurls.py).

The allow rule is checked case by case and, with hypothesis, against a reference written
the plain way: remove the dot segments httpx removes, then for each way a server may read
escaped dots and slashes, decode them, remove dot segments again and compare segment lists.
Each URL is also checked in the form httpx sends it (``str(httpx.URL(url))``): the rule
reads the text the way the sender's client does, so both forms get one verdict.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.config.webhookurls import AllowList, parse_prefix, parse_url, redact_url

QUERY = "t0ken-in-query"
PASSWORD = "pw-in-userinfo"

# -- case by case ----------------------------------------------------------------------

ALLOW = AllowList(
    [
        "https://hooks.example.com/spool/",
        "http://plain.example:8080/in",
        "https://[::1]:8443/hooks",
        "https://root.example",
    ]
)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.example.com/spool/big", True),
        ("https://hooks.example.com/spool", True),  # the prefix's trailing / changes nothing
        ("https://hooks.example.com/spool/", True),
        ("https://hooks.example.com/spool/a/b/c?x=1#f", True),
        ("https://HOOKS.Example.COM/spool/big", True),
        ("HTTPS://hooks.example.com/spool/big", True),
        ("https://hooks.example.com:443/spool/big", True),
        ("HTTPS://hooks.example.com:443/spool/big", True),  # httpx keeps this 443
        ("https://hooks.example.com/Spool/big", False),  # paths are case-sensitive
        ("https://hooks.example.com/spoolx", False),  # whole segments
        ("https://hooks.example.com/spoo", False),
        ("https://hooks.example.com/", False),
        ("https://hooks.example.com:8443/spool/big", False),  # another port
        ("http://hooks.example.com/spool/big", False),  # http needs an http:// prefix
        ("http://hooks.example.com:443/spool/big", False),
        # dot segments
        ("https://hooks.example.com/spool/./big", True),
        ("https://hooks.example.com/other/../spool/big", True),
        ("https://hooks.example.com/spool/../admin", False),
        ("https://hooks.example.com/spool/big/../../admin", False),
        ("https://hooks.example.com/spool/%2e%2e/admin", False),
        ("https://hooks.example.com/spool/.%2E/admin", False),
        ("https://hooks.example.com/spool/%2e/big", True),
        ("https://hooks.example.com/spool/..;/admin", False),
        ("https://hooks.example.com/../../spool/big", True),  # .. stops at the root
        # encoded slashes
        ("https://hooks.example.com/spool/..%2Fadmin", False),
        ("https://hooks.example.com/spool/..%2fadmin", False),
        ("https://hooks.example.com/spool/a%2F..%2F..%2Fadmin", False),
        ("https://hooks.example.com/spool/..%5Cadmin", False),
        ("https://hooks.example.com/spool%2Fbig", False),  # one segment to some servers
        ("https://hooks.example.com/x/%2e%2e/spool/big", False),  # under /x to some
        ("https://hooks.example.com/spool/a%2Fb", True),
        ("https://hooks.example.com/spool/%7Euser", True),
        # userinfo and look-alike hosts
        ("https://user:pw@hooks.example.com/spool/big", False),
        ("https://hooks.example.com@evil.example/spool/big", False),
        ("https://hooks.example.com:443@evil.example/spool/big", False),
        ("https://evil.example#@hooks.example.com/spool/big", False),
        ("https://evil.example\\@hooks.example.com/spool/big", False),
        ("https://hooks.example.com.evil.example/spool/big", False),
        ("https://hooks.example.com%2Fspool/big", False),
        # other prefixes
        ("http://plain.example:8080/in/x", True),
        ("http://PLAIN.example:8080/in", True),
        ("https://plain.example:8080/in/x", False),
        ("http://plain.example/in/x", False),
        ("https://[::1]:8443/hooks/x", True),
        ("https://[0:0::1]:8443/hooks/x", False),  # an IPv6 address compares as written
        ("https://root.example/anything/at/all", True),
        ("https://root.example", True),
        ("https://root.example:443/", True),
        # not URLs that can be posted to
        ("ftp://hooks.example.com/spool/big", False),
        ("/spool/big", False),
        ("hooks.example.com/spool/big", False),
        ("", False),
        ("https://hooks.example.com:99999/spool/big", False),
        ("https://hooks.example.com:x/spool/big", False),
        ("https://hooks.example.com/spool/big\n", False),
        ("https://hööks.example.com/spool/big", False),  # a non-ASCII host is refused
        ("https://[::1:8443/hooks/x", False),
        ("https://[::g]:8443/hooks/x", False),
        ("https://[::1]x/hooks/x", False),
    ],
)
def test_allow_list_cases(url: str, allowed: bool) -> None:
    assert ALLOW.allows(url) is allowed
    if _parses(url):
        assert ALLOW.allows(str(httpx.URL(url))) is allowed


def _parses(url: str) -> bool:
    try:
        httpx.URL(url)
    except httpx.InvalidURL:
        return False
    return True


@pytest.mark.parametrize(
    ("prefix", "says"),
    [
        ("ftp://hooks.example.com/", "is a ftp:// URL"),
        ("/spool/", "is not an absolute http:// or https:// URL"),
        ("https:///spool", "names no host"),
        ("https://user:pw@hooks.example.com/spool/", "holds credentials"),
        (f"https://hooks.example.com/spool/?token={QUERY}", "has a query or a fragment"),
        ("https://hooks.example.com/spool/#frag", "has a query or a fragment"),
        ("https://hooks.example.com:x/", "a port that is not a number from 1 to 65535"),
        ("https://hooks.example.com:0/", "a port that is not a number from 1 to 65535"),
        ("https://hooks example.com/", "has a malformed host"),
    ],
)
def test_bad_allow_prefixes_are_refused_without_showing_a_query(prefix: str, says: str) -> None:
    with pytest.raises(ValueError, match=f"the allowed webhook prefix .* {says}") as refused:
        AllowList([prefix])
    assert QUERY not in str(refused.value)
    assert parse_prefix(prefix) == str(refused.value).partition("' ")[2]


def test_an_empty_allow_list_allows_nothing() -> None:
    empty = AllowList([])
    assert not empty and not empty.allows("https://hooks.example.com/")
    assert ALLOW and "AllowList([" in repr(ALLOW)


def test_prefixes_are_normalised() -> None:
    allow = AllowList(
        ["HTTPS://Hooks.Example.com:443/spool/./", "http://[::1]:8080/in", "https://root.example"]
    )
    assert allow.prefixes == (
        "https://hooks.example.com/spool/",
        "http://[::1]:8080/in",
        "https://root.example/",
    )
    place = parse_url("https://h:8443/a/../b c/é?q")
    assert not isinstance(place, str)
    assert (place.text(), place.origin) == ("https://h:8443/b%20c/%C3%A9", ("https", "h", 8443))


# -- why a URL is refused, and a URL known only up to a template ------------------------

HOOKS = AllowList(["https://hooks.example.com/spool/", "http://localhost:8080/hooks"])
NONE_OF = "is under no <Webhooks><Allow> prefix (allowed: https://hooks.example.com/spool/, "


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://hooks.example.com/spool/x", None),
        ("https://evil.example.com/spool/?t=1", f"'https://evil.example.com/spool/?…' {NONE_OF}"),
        ("https://u:p@hooks.example.com/spool/", "the Url holds credentials"),
        ("https://hooks.example.com/spool/..%2Fadmin", "the Url steps out of its <Webhooks>"),
        ("https://hooks.example.com/spool/%2e%2e/admin", "the Url steps out of its <Webhooks>"),
        ("https://hooks.example.com/x/%2e%2e/spool/", NONE_OF),
        ("http://hooks.example.com/spool/x", "the Url posts in plain http, and only an https://"),
        ("http://hooks.example.com:8080/spool/x", NONE_OF),
        ("https://hooks.example.com/spool/{{A}}", None),
        ("https://hooks.example.com/spool/x{{A}}/y", None),
        ("https://hooks.example.com/spool/?q={{A}}", None),
        ("https://hooks.example.com/spool?{{A}}", None),
        ("https://hooks.example.com/spool{{A}}", NONE_OF),  # might become /spoolx
        ("https://hooks.example.com/sp{{A}}", NONE_OF),
        ("http://localhost:8080/hooks{{A}}", NONE_OF),
        ("https://hooks.example.com/spool/..{{A}}", NONE_OF),
        ("https://hooks.example.com/{{A}}", NONE_OF),
        ("https://{{A}}.example.com/spool/", "the scheme, host and port of the Url are written"),
        ("https://hooks.example.com:{{A}}/spool/", "the scheme, host and port of the Url are"),
        ("{{A}}://hooks.example.com/spool/", "the scheme, host and port of the Url are written"),
        ("https://hooks.example.com{{A}}", "the scheme, host and port of the Url are written"),
    ],
)
def test_the_refusal_says_why(url: str, says: str | None) -> None:
    reference = url.find("{{")
    refusal = HOOKS.refusal(url, what="the Url", known=None if reference < 0 else reference)
    if says is None:
        assert refusal is None
    else:
        assert refusal is not None and says in refusal
        assert "u:p" not in refusal


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            f"https://user:{PASSWORD}@Hooks.Example.com:8443/a/b?token={QUERY}#f",
            "https://Hooks.Example.com:8443/a/b?…",
        ),
        (f"https://hooks.example.com/a#frag?token={QUERY}", "https://hooks.example.com/a"),
        ("https://hooks.example.com:443/a/./c/../b", "https://hooks.example.com:443/a/./c/../b"),
        ("https://hooks.example.com/a?", "https://hooks.example.com/a?…"),
        ("https://hooks.example.com", "https://hooks.example.com"),
        (f"https://{PASSWORD}@hooks.example.com", "https://hooks.example.com"),
        ("http://[::1]:8080/x?y", "http://[::1]:8080/x?…"),
        (f"https://hooks.example.com:x/?token={QUERY}", "https://hooks.example.com:x/?…"),
        (
            "https://hooks.example.com/spool/{{SYM}}?q={{SYM}}",
            "https://hooks.example.com/spool/{{SYM}}?…",
        ),
        ("/a/b@c?d", "/a/b@c?…"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


# -- the allow list against a plain reference -------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _remove_dots(segments: list[str]) -> list[str]:
    out: list[str] = []
    for segment in segments:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    return out


def _reference_paths(path: str) -> list[list[str]]:
    """The segments of ``path`` as sent, for each way a server may read escapes in it."""
    sent = "/".join(_remove_dots(path.split("/")[1:]))  # httpx removes literal dot segments
    readings = []
    for dots in (False, True):
        for slashes in (False, True):
            text = sent
            if slashes:
                text = text.replace("%2F", "/").replace("%2f", "/")
            if dots:
                text = text.replace("%2E", ".").replace("%2e", ".")
            readings.append(_remove_dots(text.split("/")))
    return readings


def _reference_allows(prefix: str, url: str) -> bool:
    p, u = urlsplit(prefix), urlsplit(url)
    if u.username is not None:
        return False
    p_scheme, u_scheme = p.scheme.lower(), u.scheme.lower()
    p_origin = (p_scheme, p.hostname, p.port or _DEFAULT_PORTS[p_scheme])
    if (u_scheme, u.hostname, u.port or _DEFAULT_PORTS[u_scheme]) != p_origin:
        return False
    readings = zip(_reference_paths(p.path), _reference_paths(u.path), strict=True)
    for allowed, segments in readings:
        if allowed and allowed[-1] == "":
            allowed.pop()
        if segments[: len(allowed)] != allowed:
            return False
    return True


_SCHEMES = st.sampled_from(["http", "https", "HTTPS"])
_HOSTS = st.sampled_from(["hooks.example.com", "HOOKS.example.com", "other.example"])
_PORTS = st.sampled_from(["", ":80", ":443", ":8443"])
_URL_SEGMENTS = st.lists(
    st.sampled_from(
        [
            "spool",
            "big",
            "spoolx",
            "",
            ".",
            "..",
            "%2e",
            "%2E%2e",
            ".%2E",
            "..%2F",
            "%2F",
            "a%2Fb",
            "%2f..",
            "x",
        ]
    ),
    max_size=6,
)


@st.composite
def _prefixes(draw: st.DrawFn) -> str:
    segments = draw(st.lists(st.sampled_from(["spool", "big", "x"]), max_size=2))
    slash = "/" if segments and draw(st.booleans()) else ""
    scheme = draw(st.sampled_from(["http", "https"]))
    return f"{scheme}://{draw(_HOSTS)}{draw(_PORTS)}/" + "/".join(segments) + slash


@st.composite
def _urls(draw: st.DrawFn) -> str:
    userinfo = draw(st.sampled_from(["", "", "", "user@", "u:p@"]))
    query = draw(st.sampled_from(["", "?q=1", "?next=/../admin"]))
    path = "/".join(draw(_URL_SEGMENTS))
    return f"{draw(_SCHEMES)}://{userinfo}{draw(_HOSTS)}{draw(_PORTS)}/{path}{query}"


@settings(max_examples=500)
@given(_prefixes(), _urls())
def test_allow_list_agrees_with_the_reference(prefix: str, url: str) -> None:
    allowed = AllowList([prefix]).allows(url)
    assert allowed == _reference_allows(prefix, url)
    assert AllowList([prefix]).allows(str(httpx.URL(url))) == allowed


@settings(max_examples=200)
@given(_prefixes(), _URL_SEGMENTS)
def test_whatever_is_appended_under_a_prefix_without_dots_stays_allowed(
    prefix: str, segments: list[str]
) -> None:
    plain = [s for s in segments if s in {"spool", "big", "spoolx", "x"}]
    url = prefix.rstrip("/") + "/" + "/".join(plain)
    assert AllowList([prefix]).allows(url)
