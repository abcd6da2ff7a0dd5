"""Instance configuration: the AMPS-shaped XML file of CONFIG.md as frozen dataclasses.

The model (the dataclasses) is what the rest of the broker reads. :func:`load_config` parses
and validates a file, :func:`parse_config` the same from text, :func:`default_config` is the
embedded default used by ``spool serve`` without a file, and :func:`with_overrides` applies
the ``--listen`` / ``--data-dir`` command-line flags. Everything that is wrong is a
:class:`ConfigError` carrying the element's path and line: an operator fixes a file from the
message alone, and nothing is silently ignored (unknown elements, bad units, duplicates,
out-of-range values and contradictions are all refused at start-up).

Errors::

    SpoolError (server.protocol.errors)
    ├── ConfigError            a configuration that cannot run: .path, .line, .message
    ├── InetAddrError          an address that is not HOST:PORT (also a ValueError)
    ├── InvalidPasswordHash    (server.passwords) a PasswordHash that is not scrypt$N$r$p$salt$hash
    └── UnitError              (server.units) a size or duration that cannot be read

The XML is read with :mod:`xml.parsers.expat` directly (not ``ElementTree``) because every
element must know its line for the error messages. DOCTYPE declarations (and so entity
definitions) and processing instructions are refused: a configuration file has no use for
them and they are how XML parsers get attacked.

Decisions where CONFIG.md is silent are listed in docs/configuration.md.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final
from xml.parsers import expat

from server.passwords import InvalidPasswordHash, parse_password_hash
from server.protocol.errors import SpoolError
from server.units import UnitError, format_duration, format_size, parse_duration, parse_size

__all__ = [
    "BIND_REQUIRES_USERS",
    "EXPLICIT_ARCHIVE_DIRECTORY",
    "EXPLICIT_JOURNAL_DIRECTORY",
    "EXPLICIT_STATS_FILE",
    "REGEX_METACHARACTERS",
    "SHARED_ADDRESS",
    "AdminConfig",
    "Config",
    "ConfigError",
    "InetAddrError",
    "TopicRule",
    "TransactionLogConfig",
    "TransportConfig",
    "TuningConfig",
    "UserConfig",
    "default_config",
    "format_inet_addr",
    "is_loopback",
    "is_regex_topic",
    "load_config",
    "parse_config",
    "parse_inet_addr",
    "render_default_xml",
    "with_overrides",
]


# --------------------------------------------------------------------------- errors


class ConfigError(SpoolError):
    """A configuration that Spool refuses to run with.

    Attributes:
        path: the element, e.g. ``/SpoolConfig/TransactionLog/FlushInterval``; repeated
            siblings carry a 1-based index (``/SpoolConfig/Transports/Transport[2]/Type``);
            empty when the whole file is at fault (it cannot be read).
        line: the element's line in the file, or ``None`` when the value did not come from a
            file (the embedded default, a command-line override).
        message: what is wrong and, where it helps, what to do. Never contains a token or a
            password hash.
        source: the file name (or ``<string>``), for callers that want to show it.
    """

    def __init__(
        self, path: str, line: int | None, message: str, *, source: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.message = message
        self.source = source
        super().__init__(path, line, message)

    def __str__(self) -> str:
        if self.path:
            where = self.path if self.line is None else f"{self.path} (line {self.line})"
        elif self.line is not None:
            where = f"line {self.line}"
        else:
            return f"config error: {self.message}"
        return f"config error at {where}: {self.message}"


class InetAddrError(SpoolError, ValueError):
    """An address that is not ``HOST:PORT``, ``[IPv6]:PORT`` or ``PORT``."""


# --------------------------------------------------------------------------- model

_DEFAULT_MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """One listener. ``type`` is ``websocket`` (clients) or ``amps-replication``."""

    name: str
    type: str
    host: str
    port: int
    message_type: str = "json"
    per_message_deflate: bool = False
    max_message_size: int = _DEFAULT_MAX_MESSAGE_SIZE
    enabled: bool = True

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 in brackets), as shown by the admin API."""
        return format_inet_addr(self.host, self.port)


@dataclass(frozen=True, slots=True)
class AdminConfig:
    """REST admin + dashboard + /metrics; served on the web port."""

    host: str = "127.0.0.1"
    port: int = 9007
    stats_file: Path = Path("./data/stats.db")
    interval: float = 10.0  # seconds, >= 1
    authentication: str = "none"  # "none" | "token"
    stats_retention: float = 7 * 86400.0  # seconds of samples kept
    metrics_public: bool = False  # /healthz and /metrics readable without auth off-loopback

    @property
    def address(self) -> str:
        """``host:port`` (IPv6 in brackets)."""
        return format_inet_addr(self.host, self.port)


@dataclass(frozen=True, slots=True)
class TopicRule:
    """A TransactionLog/Topic: exact name or regex (a name with regex metacharacters)."""

    name: str
    message_type: str = "json"
    is_regex: bool = False


@dataclass(frozen=True, slots=True)
class _TopicMatcher:
    """The compiled form of a tuple of :class:`TopicRule` (see :func:`_matcher_for`)."""

    everything: bool
    exact: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]

    def matches(self, topic: str) -> bool:
        if self.everything or topic in self.exact:
            return True
        return any(pattern.search(topic) for pattern in self.patterns)


# Regexes that match every topic: the default configuration records ".*", and it would be a
# shame to run a regex search per publish for it.
_MATCH_ALL: Final[frozenset[str]] = frozenset({".*", "^.*", ".*$", "^.*$", "", "^", "(.*)"})


@functools.lru_cache(maxsize=256)
def _matcher_for(rules: tuple[TopicRule, ...]) -> _TopicMatcher:
    """Compile rules once per distinct tuple (``dataclasses.replace`` copies share it)."""
    json_rules = [rule for rule in rules if rule.message_type == "json"]
    regexes = [rule.name for rule in json_rules if rule.is_regex]
    return _TopicMatcher(
        everything=any(name in _MATCH_ALL for name in regexes),
        exact=frozenset(rule.name for rule in json_rules if not rule.is_regex),
        patterns=tuple(re.compile(name) for name in regexes),
    )


@dataclass(frozen=True, slots=True)
class TransactionLogConfig:
    """Where and how the transaction log is written, and which topics it records.

    Attributes:
        journal_directory: active and preallocated journal files.
        archive_directory: where archived journals are moved.
        preallocated_files: journals created ahead of need (0 = create on demand).
        journal_size: bytes per journal file before rolling to the next.
        flush_interval: group-commit window in seconds (30us..100ms).
        topics: the recorded topics; see :meth:`records`.
        max_size: bytes of journals kept locally (active + preallocated + archived) before
            publishes fail with "txlog full"; 0 = unlimited.
    """

    journal_directory: Path
    archive_directory: Path
    preallocated_files: int = 2
    journal_size: int = 64 * 1024 * 1024
    flush_interval: float = 0.001  # seconds, 30us..100ms
    topics: tuple[TopicRule, ...] = ()
    # Maximum bytes of journals (active + preallocated + archived kept locally) before
    # publishes fail with "txlog full"; 0 = unlimited.
    max_size: int = 0
    _matcher: _TopicMatcher = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        # Frozen dataclass: the compiled matcher is derived state, set once here.
        object.__setattr__(self, "_matcher", _matcher_for(self.topics))

    def records(self, topic: str) -> bool:
        """Whether a json message published to ``topic`` goes into the transaction log.

        A rule with ``is_regex`` matches when ``re.search`` finds its pattern anywhere in the
        topic (anchor with ``^``/``$`` for whole names); any other rule matches the exact
        name. Regexes are compiled once per distinct rule tuple.
        """
        return self._matcher.matches(topic)


@dataclass(frozen=True, slots=True)
class TuningConfig:
    minimum_sync_destinations: int = 1
    slow_client_buffer_limit: int = 64 * 1024 * 1024
    heartbeat_default: float = 0.0  # seconds; 0 = client chooses
    persisted_ack_interval: float = 1.0  # periodic bookmark-position ack after replay


@dataclass(frozen=True, slots=True)
class UserConfig:
    """A user: password hash (scrypt$...) and/or token; topic entitlements as regexes."""

    name: str
    # Both are kept out of repr(): a hash in a log invites offline cracking.
    password_hash: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    admin: bool = False
    read: tuple[str, ...] = ()  # regexes; empty = nothing
    write: tuple[str, ...] = ()


#: Names recorded in :attr:`Config.explicit_paths` when the file set the path itself, so a
#: ``--data-dir`` override leaves it alone (otherwise it is re-derived under the new dir).
EXPLICIT_JOURNAL_DIRECTORY: Final = "TransactionLog/JournalDirectory"
EXPLICIT_ARCHIVE_DIRECTORY: Final = "TransactionLog/JournalArchiveDirectory"
EXPLICIT_STATS_FILE: Final = "Admin/FileName"


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    group: str
    data_directory: Path
    admin: AdminConfig
    transports: tuple[TransportConfig, ...]
    transaction_log: TransactionLogConfig | None
    tuning: TuningConfig = TuningConfig()
    users: tuple[UserConfig, ...] = ()
    source_path: Path | None = None
    # Which data-directory-derived paths the file gave explicitly (EXPLICIT_* names).
    explicit_paths: frozenset[str] = frozenset()

    @property
    def auth_enabled(self) -> bool:
        return bool(self.users)


# --------------------------------------------------------------------------- small helpers

#: Characters that make a topic name a regular expression (CONFIG.md: "a name with regex
#: metacharacters"). ``.`` is deliberately not one: dotted names (``orders.eu``) are common
#: exact topics, and the subscription router (server/router.py) draws the same line.
REGEX_METACHARACTERS: Final[frozenset[str]] = frozenset("^$*+?{}[]\\|()")


def is_regex_topic(name: str) -> bool:
    """Whether a topic name is a regular expression (contains a regex metacharacter)."""
    return any(ch in REGEX_METACHARACTERS for ch in name)


_HOST_LABEL: Final = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _check_host(host: str) -> str:
    """Return the canonical spelling of an IP literal or hostname, or raise InetAddrError."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if ":" in host:
        raise InetAddrError(f"{host!r} is not a valid IPv6 address")
    labels = host.rstrip(".").split(".")
    if len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise InetAddrError(f"{host!r} is neither an IP address nor a valid host name")
    if labels[-1].isdigit():
        raise InetAddrError(f"{host!r} is not a valid IPv4 address")
    return host.rstrip(".").lower()


def _check_port(port: int) -> int:
    if not 0 <= port <= 65535:
        raise InetAddrError(f"port {port} is out of range (0..65535; 0 lets the OS choose)")
    return port


def parse_inet_addr(text: str) -> tuple[str, int]:
    """Read ``HOST:PORT``, ``[IPv6]:PORT`` or a bare ``PORT`` (which means 127.0.0.1).

    Port 0 is accepted and means "let the operating system choose" (tests use it).

    Returns:
        ``(host, port)``; IPv6 hosts without brackets, IP literals in canonical form.

    Raises:
        InetAddrError: anything else, with the reason.
    """
    text = text.strip()
    if not text:
        raise InetAddrError("the address is empty (expected HOST:PORT)")
    if text.isdigit():
        return "127.0.0.1", _check_port(int(text))
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or not text[close + 1 :].startswith(":"):
            raise InetAddrError(f"{text!r} is not [IPv6]:PORT")
        host, port_text = text[1:close], text[close + 2 :]
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError(host)
        except ValueError as exc:
            raise InetAddrError(f"{host!r} inside brackets is not an IPv6 address") from exc
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise InetAddrError(f"{text!r} has no port (expected HOST:PORT)")
        if ":" in host:
            raise InetAddrError(f"{text!r}: an IPv6 address needs brackets, e.g. [::1]:9007")
        if not host:
            raise InetAddrError(f"{text!r} has no host (expected HOST:PORT)")
    if not port_text.isdigit() or not port_text.isascii():
        raise InetAddrError(f"port {port_text!r} is not a number")
    return _check_host(host), _check_port(int(port_text))


def format_inet_addr(host: str, port: int) -> str:
    """``host:port``, with IPv6 hosts in brackets (the inverse of :func:`parse_inet_addr`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # a host name may resolve to anything
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


# --------------------------------------------------------------------------- XML tree


@dataclass(eq=False, slots=True)
class _Node:
    """One element with the line it starts on; ``path`` is filled once the tree is built."""

    tag: str
    line: int
    attributes: tuple[str, ...] = ()
    children: list[_Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    path: str = ""


def _fail(node: _Node, message: str) -> ConfigError:
    return ConfigError(node.path, node.line, message)


def _parse_tree(data: bytes | str) -> _Node:
    """Parse XML into :class:`_Node` objects, refusing DOCTYPE and processing instructions."""
    # A str is already decoded: encode it ourselves and make expat ignore any encoding= in
    # the XML declaration.
    override = None
    if isinstance(data, str):
        decoded = data
        try:
            data = decoded.encode("utf-8")
        except UnicodeEncodeError as exc:
            line = decoded.count("\n", 0, exc.start) + 1
            column = exc.start - decoded.rfind("\n", 0, exc.start)
            raise ConfigError(
                "", line, f"the text has an unencodable character (column {column})"
            ) from None
        override = "utf-8"
    parser = expat.ParserCreate(encoding=override)
    parser.buffer_text = True
    stack: list[_Node] = []
    roots: list[_Node] = []

    def open_path() -> str:
        return "".join("/" + node.tag for node in stack)

    def start(tag: str, attributes: dict[str, str]) -> None:
        parent = stack[-1] if stack else None
        node = _Node(tag, parser.CurrentLineNumber, tuple(attributes))
        if parent is None:
            roots.append(node)
        else:
            parent.children.append(node)
        stack.append(node)

    def end(tag: str) -> None:
        stack.pop()

    def text(data: str) -> None:
        if stack:
            stack[-1].text.append(data)

    def doctype(name: str, *_: object) -> None:
        raise ConfigError(
            "", parser.CurrentLineNumber, "a DOCTYPE is not allowed in a configuration file"
        )

    def instruction(target: str, data: str) -> None:
        raise ConfigError(
            open_path(),
            parser.CurrentLineNumber,
            f"processing instruction <?{target}?> is not allowed in a configuration file",
        )

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    parser.StartDoctypeDeclHandler = doctype
    parser.ProcessingInstructionHandler = instruction
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise ConfigError(
            open_path(),
            exc.lineno,
            f"malformed XML: {expat.ErrorString(exc.code)} (column {exc.offset + 1})",
        ) from None
    root = roots[0]
    _assign_paths(root)
    return root


def _assign_paths(root: _Node) -> None:
    """Give every node its path; repeated siblings get an XPath-style ``[n]`` suffix."""
    root.path = "/" + root.tag
    pending = [root]
    while pending:
        node = pending.pop()
        counts: dict[str, int] = {}
        for child in node.children:
            counts[child.tag] = counts.get(child.tag, 0) + 1
        seen: dict[str, int] = {}
        for child in node.children:
            seen[child.tag] = seen.get(child.tag, 0) + 1
            index = f"[{seen[child.tag]}]" if counts[child.tag] > 1 else ""
            child.path = f"{node.path}/{child.tag}{index}"
            pending.append(child)


# --------------------------------------------------------------------------- reading values


@dataclass(frozen=True, slots=True)
class _Context:
    env: Mapping[str, str]
    base_dir: Path


_VARIABLE: Final = re.compile(r"\$(\$\{)|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{")


def _expand(node: _Node, text: str, env: Mapping[str, str]) -> str:
    """Expand ``${NAME}``; ``$${`` is a literal ``${``; an unset variable is an error."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "${"
        name = match.group(2)
        if name is None:
            raise _fail(
                node,
                "malformed ${...} reference: a variable name is letters, digits and _, "
                "not starting with a digit (write $${ for a literal ${)",
            )
        value = env.get(name)
        if value is None:
            raise _fail(node, f"environment variable {name} is not set (used as ${{{name}}})")
        return value

    return _VARIABLE.sub(substitute, text)


def _value(node: _Node, ctx: _Context) -> str:
    """The text of a leaf element, stripped and with ``${VAR}`` expanded."""
    if node.children:
        raise _fail(
            node.children[0],
            f"<{node.tag}> takes a value, not child elements (found <{node.children[0].tag}>)",
        )
    value = _expand(node, "".join(node.text).strip(), ctx.env).strip()
    if not value:
        raise _fail(node, f"<{node.tag}> must not be empty")
    return value


_TRUE: Final = frozenset({"true", "yes", "1"})
_FALSE: Final = frozenset({"false", "no", "0"})


def _bool(node: _Node, ctx: _Context) -> bool:
    value = _value(node, ctx).lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise _fail(node, f"{value!r} is not a boolean (use true/false, yes/no or 1/0)")


def _int(node: _Node, ctx: _Context, *, minimum: int, maximum: int) -> int:
    value = _value(node, ctx)
    if not (value.isascii() and value.isdigit()):
        raise _fail(node, f"{value!r} is not a whole number")
    number = int(value)
    if not minimum <= number <= maximum:
        raise _fail(node, f"{node.tag} must be between {minimum} and {maximum}, got {number}")
    return number


def _size(node: _Node, ctx: _Context, *, minimum: int, maximum: int, zero_ok: bool = False) -> int:
    try:
        size = parse_size(_value(node, ctx))
    except UnitError as exc:
        raise _fail(node, str(exc)) from None
    if zero_ok and size == 0:
        return 0
    if not minimum <= size <= maximum:
        zero = " (or 0)" if zero_ok else ""
        raise _fail(
            node,
            f"{node.tag} must be between {format_size(minimum)} and {format_size(maximum)}"
            f"{zero}, got {format_size(size)}",
        )
    return size


def _duration(
    node: _Node, ctx: _Context, *, minimum: float, maximum: float, zero_ok: bool = False
) -> float:
    try:
        seconds = parse_duration(_value(node, ctx))
    except UnitError as exc:
        raise _fail(node, str(exc)) from None
    if zero_ok and seconds == 0:
        return 0.0
    if not minimum <= seconds <= maximum:
        zero = " (or 0)" if zero_ok else ""
        raise _fail(
            node,
            f"{node.tag} must be between {format_duration(minimum)} and "
            f"{format_duration(maximum)}{zero}, got {format_duration(seconds)}",
        )
    return seconds


def _path(node: _Node, ctx: _Context) -> Path:
    value = _value(node, ctx)
    if "\x00" in value:
        raise _fail(node, "a path cannot contain a NUL character")
    path = Path(value)
    return path if path.is_absolute() else ctx.base_dir / path


_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def _safe_name(node: _Node, ctx: _Context, what: str) -> str:
    value = _value(node, ctx)
    if not _SAFE_NAME.fullmatch(value):
        raise _fail(
            node,
            f"{value!r} is not a valid {what}: use 1 to 64 of A-Z a-z 0-9 _ . - "
            "(not starting with . or -)",
        )
    return value


def _regex(node: _Node, ctx: _Context) -> str:
    value = _value(node, ctx)
    try:
        re.compile(value)
    except re.error as exc:
        raise _fail(node, f"{value!r} is not a valid regular expression: {exc}") from None
    return value


def _address(node: _Node, ctx: _Context) -> tuple[str, int]:
    try:
        return parse_inet_addr(_value(node, ctx))
    except InetAddrError as exc:
        raise _fail(node, str(exc)) from None


def _choice(node: _Node, ctx: _Context, allowed: Sequence[str], what: str) -> str:
    value = _value(node, ctx)
    if value not in allowed:
        raise _fail(node, f"{value!r} is not a valid {what} (allowed: {', '.join(allowed)})")
    return value


# --------------------------------------------------------------------------- structure

# Child element -> may it repeat?
_Spec = Mapping[str, bool]

_UNSUPPORTED: Final[Mapping[str, str]] = {
    "SOW": "the state-of-the-world store and queues",
    "Replication": "replication to other instances",
    "Bootstrap": "bootstrapping from another instance",
    "Actions": "scheduled and admin-triggered actions",
}


class _Children:
    """The children of one element, checked against what that element may contain."""

    def __init__(
        self, node: _Node, spec: _Spec, unsupported: Mapping[str, str] | None = None
    ) -> None:
        self.node = node
        self._by_tag: dict[str, list[_Node]] = {}
        if "".join(node.text).strip():
            raise _fail(node, f"<{node.tag}> holds elements, not text")
        for child in node.children:
            if child.tag not in spec:
                raise _unknown(child, node, spec, unsupported or {})
            siblings = self._by_tag.setdefault(child.tag, [])
            if siblings and not spec[child.tag]:
                raise _fail(
                    child,
                    f"<{child.tag}> may appear only once in <{node.tag}> "
                    f"(first at line {siblings[0].line})",
                )
            siblings.append(child)

    def one(self, tag: str) -> _Node | None:
        nodes = self._by_tag.get(tag)
        return nodes[0] if nodes else None

    def many(self, tag: str) -> list[_Node]:
        return self._by_tag.get(tag, [])

    def require(self, tag: str, why: str = "") -> _Node:
        node = self.one(tag)
        if node is None:
            raise _fail(self.node, f"<{self.node.tag}> needs a <{tag}>{why}")
        return node


def _unknown(
    child: _Node, parent: _Node, spec: _Spec, unsupported: Mapping[str, str]
) -> ConfigError:
    if child.tag in unsupported:
        return _fail(
            child,
            f"<{child.tag}> is not supported yet ({unsupported[child.tag]} arrive in a later "
            "version of Spool); remove this element",
        )
    allowed = sorted(spec)
    hint = ""
    folded = [tag for tag in allowed if tag.lower() == child.tag.lower()]
    if folded:
        hint = f"; element names are case-sensitive, did you mean <{folded[0]}>?"
    else:
        close = difflib.get_close_matches(child.tag, allowed, n=1, cutoff=0.75)
        if close:
            hint = f"; did you mean <{close[0]}>?"
    listing = ", ".join(allowed) if allowed else "nothing"
    return _fail(
        child, f"unknown element <{child.tag}> in <{parent.tag}> (allowed: {listing}){hint}"
    )


def _reject_attributes(root: _Node) -> None:
    pending = [root]
    while pending:
        node = pending.pop()
        if node.attributes:
            raise _fail(
                node,
                f"attributes are not used in Spool's configuration (found "
                f"{', '.join(node.attributes)}); write values as child elements",
            )
        pending.extend(reversed(node.children))


# --------------------------------------------------------------------------- sections

_ROOT_TAGS: Final = ("SpoolConfig", "AMPSConfig")
_ROOT_SPEC: Final[_Spec] = {
    "Name": False,
    "Group": False,
    "DataDirectory": False,
    "Admin": False,
    "Transports": False,
    "TransactionLog": False,
    "Tuning": False,
    "Users": False,
}
_ADMIN_SPEC: Final[_Spec] = {
    "InetAddr": False,
    "FileName": False,
    "Interval": False,
    "Authentication": False,
    "StatsRetention": False,
    "MetricsPublic": False,
}
_TRANSPORTS_SPEC: Final[_Spec] = {"Transport": True}
_TRANSPORT_SPEC: Final[_Spec] = {
    "Name": False,
    "Type": False,
    "InetAddr": False,
    "MessageType": False,
    "PerMessageDeflate": False,
    "MaxMessageSize": False,
    "Enabled": False,
}
_TXLOG_SPEC: Final[_Spec] = {
    "JournalDirectory": False,
    "JournalArchiveDirectory": False,
    "PreallocatedJournalFiles": False,
    "JournalSize": False,
    "FlushInterval": False,
    "MaxSize": False,
    "Topic": True,
}
_TOPIC_SPEC: Final[_Spec] = {"Name": False, "MessageType": False}
_TUNING_SPEC: Final[_Spec] = {
    "MinimumSyncDestinations": False,
    "SlowClientBufferLimit": False,
    "HeartbeatDefault": False,
    "PersistedAckInterval": False,
}
_USERS_SPEC: Final[_Spec] = {"User": True}
_USER_SPEC: Final[_Spec] = {
    "Name": False,
    "PasswordHash": False,
    "Token": False,
    "Admin": False,
    "Read": True,
    "Write": True,
}

_TRANSPORT_TYPES: Final = ("websocket", "amps-replication")
_MESSAGE_TYPES: Final = ("json",)
_AUTHENTICATION: Final = ("none", "token")
_DEFAULT_HOST: Final = "127.0.0.1"
_DEFAULT_PORT: Final = 9007
_DEFAULT_TRANSPORT: Final = "websocket-json"
_DEFAULT_NAME: Final = "spool"
_MIN_TOKEN_LENGTH: Final = 16
_USER_NAME: Final = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")
_TOPIC_NAME_MAX: Final = 1024

_KB: Final = 1024
_MB: Final = 1024 * 1024
_GB: Final = 1024 * 1024 * 1024
_DAY: Final = 86400.0

#: Messages callers may match on (the CLI, tests).
BIND_REQUIRES_USERS: Final = "binding a non-loopback address requires <Users> (authentication)"
SHARED_ADDRESS: Final = (
    "all transports and Admin must share one InetAddr in this version (one HTTP server "
    "serves /amps/json, /replication, /api and the dashboard)"
)


@dataclass(frozen=True, slots=True)
class _Bind:
    """An address given in the file, with the element that gave it."""

    host: str
    port: int
    node: _Node


@dataclass(frozen=True, slots=True)
class _AdminPart:
    bind: _Bind | None
    config: AdminConfig  # host/port still the defaults; filled once the address is settled
    authentication: _Node | None
    stats_explicit: bool


@dataclass(frozen=True, slots=True)
class _TransportPart:
    bind: _Bind | None
    config: TransportConfig
    node: _Node
    max_message_size: _Node | None


def _admin(node: _Node | None, ctx: _Context, data_dir: Path) -> _AdminPart:
    default = AdminConfig(stats_file=data_dir / "stats.db")
    if node is None:
        return _AdminPart(None, default, None, False)
    kids = _Children(node, _ADMIN_SPEC)
    bind = None
    if (addr := kids.one("InetAddr")) is not None:
        bind = _Bind(*_address(addr, ctx), addr)
    stats_node = kids.one("FileName")
    stats_file = _path(stats_node, ctx) if stats_node is not None else default.stats_file
    interval = default.interval
    if (interval_node := kids.one("Interval")) is not None:
        interval = _duration(interval_node, ctx, minimum=1.0, maximum=_DAY)
    retention = default.stats_retention
    if (retention_node := kids.one("StatsRetention")) is not None:
        retention = _duration(retention_node, ctx, minimum=1.0, maximum=3650 * _DAY)
        if retention < interval:
            raise _fail(
                retention_node,
                f"StatsRetention ({format_duration(retention)}) is shorter than the sampling "
                f"Interval ({format_duration(interval)}): no sample would be kept",
            )
    auth_node = kids.one("Authentication")
    authentication = default.authentication
    if auth_node is not None:
        authentication = _choice(auth_node, ctx, _AUTHENTICATION, "Authentication")
    metrics_public = default.metrics_public
    if (public_node := kids.one("MetricsPublic")) is not None:
        metrics_public = _bool(public_node, ctx)
    config = replace(
        default,
        stats_file=stats_file,
        interval=interval,
        authentication=authentication,
        stats_retention=retention,
        metrics_public=metrics_public,
    )
    return _AdminPart(bind, config, auth_node, stats_node is not None)


def _transport(node: _Node, ctx: _Context) -> _TransportPart:
    kids = _Children(node, _TRANSPORT_SPEC)
    name = _safe_name(kids.require("Name"), ctx, "transport name")
    kind = _choice(kids.require("Type"), ctx, _TRANSPORT_TYPES, "transport Type")
    bind = None
    if (addr := kids.one("InetAddr")) is not None:
        bind = _Bind(*_address(addr, ctx), addr)
    message_type = "json"
    if (type_node := kids.one("MessageType")) is not None:
        if kind == "amps-replication":
            raise _fail(
                type_node,
                "MessageType does not apply to an amps-replication transport (it carries "
                "every message type); remove it",
            )
        message_type = _choice(type_node, ctx, _MESSAGE_TYPES, "MessageType")
    deflate = False
    if (deflate_node := kids.one("PerMessageDeflate")) is not None:
        deflate = _bool(deflate_node, ctx)
    size_node = kids.one("MaxMessageSize")
    max_size = _DEFAULT_MAX_MESSAGE_SIZE
    if size_node is not None:
        max_size = _size(size_node, ctx, minimum=_KB, maximum=_GB)
    enabled = True
    if (enabled_node := kids.one("Enabled")) is not None:
        enabled = _bool(enabled_node, ctx)
    config = TransportConfig(
        name=name,
        type=kind,
        host=_DEFAULT_HOST,
        port=_DEFAULT_PORT,
        message_type=message_type,
        per_message_deflate=deflate,
        max_message_size=max_size,
        enabled=enabled,
    )
    return _TransportPart(bind, config, node, size_node)


def _transports(node: _Node, ctx: _Context) -> list[_TransportPart]:
    parts: list[_TransportPart] = []
    names: dict[str, _TransportPart] = {}
    kinds: dict[tuple[str, str], _TransportPart] = {}
    for transport_node in _Children(node, _TRANSPORTS_SPEC).many("Transport"):
        part = _transport(transport_node, ctx)
        config = part.config
        if (first := names.get(config.name)) is not None:
            raise _fail(
                transport_node,
                f"duplicate transport name {config.name!r} (first at line {first.node.line})",
            )
        names[config.name] = part
        kind = (config.type, config.message_type)
        if (first := kinds.get(kind)) is not None:
            what = (
                f"websocket transport for MessageType {config.message_type}"
                if config.type == "websocket"
                else "amps-replication transport"
            )
            raise _fail(
                transport_node,
                f"only one {what} in this version, the HTTP server has one endpoint for it "
                f"(first is {first.config.name!r} at line {first.node.line})",
            )
        kinds[kind] = part
        parts.append(part)
    return parts


def _topic(node: _Node, ctx: _Context) -> TopicRule:
    kids = _Children(node, _TOPIC_SPEC)
    name_node = kids.require("Name")
    name = _value(name_node, ctx)
    if len(name) > _TOPIC_NAME_MAX or any(ord(ch) < 32 for ch in name):
        raise _fail(
            name_node,
            f"a topic name is at most {_TOPIC_NAME_MAX} characters without control characters",
        )
    regex = is_regex_topic(name)
    if regex:
        name = _regex(name_node, ctx)
    message_type = "json"
    if (type_node := kids.one("MessageType")) is not None:
        message_type = _choice(type_node, ctx, _MESSAGE_TYPES, "MessageType")
    return TopicRule(name=name, message_type=message_type, is_regex=regex)


def _transaction_log(
    node: _Node, ctx: _Context, data_dir: Path
) -> tuple[TransactionLogConfig, frozenset[str]]:
    kids = _Children(node, _TXLOG_SPEC)
    explicit: set[str] = set()
    journal_dir = data_dir / "journal"
    if (journal_node := kids.one("JournalDirectory")) is not None:
        journal_dir = _path(journal_node, ctx)
        explicit.add(EXPLICIT_JOURNAL_DIRECTORY)
    archive_dir = data_dir / "archive"
    if (archive_node := kids.one("JournalArchiveDirectory")) is not None:
        archive_dir = _path(archive_node, ctx)
        explicit.add(EXPLICIT_ARCHIVE_DIRECTORY)
        if archive_dir == journal_dir:
            raise _fail(archive_node, "JournalArchiveDirectory must differ from JournalDirectory")
    elif archive_dir == journal_dir and journal_node is not None:
        raise _fail(journal_node, "JournalDirectory must differ from JournalArchiveDirectory")
    defaults = TransactionLogConfig(journal_dir, archive_dir)
    prealloc = defaults.preallocated_files
    if (prealloc_node := kids.one("PreallocatedJournalFiles")) is not None:
        prealloc = _int(prealloc_node, ctx, minimum=0, maximum=100)
    journal_size = defaults.journal_size
    if (size_node := kids.one("JournalSize")) is not None:
        journal_size = _size(size_node, ctx, minimum=_MB, maximum=1024 * _GB)
    flush = defaults.flush_interval
    if (flush_node := kids.one("FlushInterval")) is not None:
        flush = _duration(flush_node, ctx, minimum=30e-6, maximum=0.1)
    max_size = 0
    if (max_node := kids.one("MaxSize")) is not None:
        max_size = _size(max_node, ctx, minimum=_MB, maximum=1024**5, zero_ok=True)
        floor = journal_size * (prealloc + 1)
        if max_size and max_size < floor:
            raise _fail(
                max_node,
                f"MaxSize ({format_size(max_size)}) is smaller than the active and "
                f"preallocated journals (JournalSize x (PreallocatedJournalFiles + 1) = "
                f"{format_size(floor)}): every publish would fail; raise it or use 0",
            )
    topic_nodes = kids.many("Topic")
    if not topic_nodes:
        raise _fail(
            node,
            "<TransactionLog> needs at least one <Topic> (it would record nothing); "
            "remove <TransactionLog> to run without a transaction log",
        )
    topics: list[TopicRule] = []
    first_line: dict[tuple[str, str], int] = {}
    for topic_node in topic_nodes:
        rule = _topic(topic_node, ctx)
        key = (rule.name, rule.message_type)
        if key in first_line:
            raise _fail(
                topic_node, f"duplicate Topic {rule.name!r} (first at line {first_line[key]})"
            )
        first_line[key] = topic_node.line
        topics.append(rule)
    config = TransactionLogConfig(
        journal_directory=journal_dir,
        archive_directory=archive_dir,
        preallocated_files=prealloc,
        journal_size=journal_size,
        flush_interval=flush,
        topics=tuple(topics),
        max_size=max_size,
    )
    return config, frozenset(explicit)


def _tuning(node: _Node | None, ctx: _Context) -> tuple[TuningConfig, _Node | None]:
    """The Tuning section, and the SlowClientBufferLimit element for cross-checks."""
    tuning = TuningConfig()
    if node is None:
        return tuning, None
    kids = _Children(node, _TUNING_SPEC)
    if (sync_node := kids.one("MinimumSyncDestinations")) is not None:
        tuning = replace(
            tuning, minimum_sync_destinations=_int(sync_node, ctx, minimum=0, maximum=1000)
        )
    limit_node = kids.one("SlowClientBufferLimit")
    if limit_node is not None:
        limit = _size(limit_node, ctx, minimum=64 * _KB, maximum=1024 * _GB)
        tuning = replace(tuning, slow_client_buffer_limit=limit)
    if (heartbeat_node := kids.one("HeartbeatDefault")) is not None:
        heartbeat = _duration(heartbeat_node, ctx, minimum=1.0, maximum=3600.0, zero_ok=True)
        tuning = replace(tuning, heartbeat_default=heartbeat)
    if (ack_node := kids.one("PersistedAckInterval")) is not None:
        interval = _duration(ack_node, ctx, minimum=0.001, maximum=3600.0)
        tuning = replace(tuning, persisted_ack_interval=interval)
    return tuning, limit_node


def _user(node: _Node, ctx: _Context) -> tuple[UserConfig, _Node | None]:
    kids = _Children(node, _USER_SPEC)
    name_node = kids.require("Name")
    name = _value(name_node, ctx)
    if not _USER_NAME.fullmatch(name):
        raise _fail(
            name_node, f"{name!r} is not a valid user name: use 1 to 128 of A-Z a-z 0-9 _ . @ + -"
        )
    password_hash = None
    if (hash_node := kids.one("PasswordHash")) is not None:
        password_hash = _value(hash_node, ctx)
        try:
            parse_password_hash(password_hash)
        except InvalidPasswordHash as exc:
            raise _fail(hash_node, str(exc)) from None
    token = None
    token_node = kids.one("Token")
    if token_node is not None:
        token = _value(token_node, ctx)
        # Never quote the token: error messages end up in logs.
        if len(token) < _MIN_TOKEN_LENGTH:
            raise _fail(
                token_node,
                f"the Token is too short: at least {_MIN_TOKEN_LENGTH} characters "
                "(generate one with `python -c 'import secrets; print(secrets.token_urlsafe())'`)",
            )
        if not token.isascii() or not token.isprintable() or " " in token:
            raise _fail(token_node, "the Token must be printable ASCII without spaces")
    if password_hash is None and token is None:
        raise _fail(node, f"user {name!r} needs a <PasswordHash> or a <Token> (or both)")
    admin = False
    if (admin_node := kids.one("Admin")) is not None:
        admin = _bool(admin_node, ctx)
    read = tuple(_regex(read_node, ctx) for read_node in kids.many("Read"))
    write = tuple(_regex(write_node, ctx) for write_node in kids.many("Write"))
    user = UserConfig(
        name=name, password_hash=password_hash, token=token, admin=admin, read=read, write=write
    )
    return user, token_node


def _users(node: _Node | None, ctx: _Context) -> tuple[UserConfig, ...]:
    if node is None:
        return ()
    user_nodes = _Children(node, _USERS_SPEC).many("User")
    if not user_nodes:
        raise _fail(
            node,
            "<Users> is empty: add at least one <User>, or remove <Users> to run without "
            "authentication (loopback only)",
        )
    users: list[UserConfig] = []
    names: dict[str, int] = {}
    tokens: dict[str, str] = {}
    for user_node in user_nodes:
        user, token_node = _user(user_node, ctx)
        if user.name in names:
            raise _fail(
                user_node, f"duplicate user {user.name!r} (first at line {names[user.name]})"
            )
        names[user.name] = user_node.line
        if user.token is not None and token_node is not None:
            if user.token in tokens:
                raise _fail(
                    token_node,
                    f"user {user.name!r} has the same Token as user {tokens[user.token]!r}; "
                    "tokens identify users and must be unique",
                )
            tokens[user.token] = user.name
        users.append(user)
    return tuple(users)


def _settle_address(binds: Sequence[_Bind]) -> tuple[str, int]:
    """The one web address: every InetAddr given must agree; none given = 127.0.0.1:9007."""
    if not binds:
        return _DEFAULT_HOST, _DEFAULT_PORT
    first = binds[0]
    for bind in binds[1:]:
        if (bind.host, bind.port) != (first.host, first.port):
            raise _fail(
                bind.node,
                f"{SHARED_ADDRESS}: {format_inet_addr(bind.host, bind.port)} differs from "
                f"{format_inet_addr(first.host, first.port)} at {first.node.path} "
                f"(line {first.node.line})",
            )
    return first.host, first.port


def _build(root: _Node, ctx: _Context) -> Config:
    if root.tag not in _ROOT_TAGS:
        raise _fail(
            root, f"the root element must be <SpoolConfig> (or <AMPSConfig>), not <{root.tag}>"
        )
    _reject_attributes(root)
    kids = _Children(root, _ROOT_SPEC, _UNSUPPORTED)
    name = _safe_name(
        kids.require("Name", " (the instance name; it prefixes the instance's files)"),
        ctx,
        "instance name",
    )
    group = name
    if (group_node := kids.one("Group")) is not None:
        group = _safe_name(group_node, ctx, "group name")
    data_dir = ctx.base_dir / "data"
    if (data_node := kids.one("DataDirectory")) is not None:
        data_dir = _path(data_node, ctx)

    admin = _admin(kids.one("Admin"), ctx, data_dir)
    transports_node = kids.one("Transports")
    transports = _transports(transports_node, ctx) if transports_node is not None else None
    explicit: frozenset[str] = frozenset()
    txlog = None
    if (txlog_node := kids.one("TransactionLog")) is not None:
        txlog, explicit = _transaction_log(txlog_node, ctx, data_dir)
    tuning, limit_node = _tuning(kids.one("Tuning"), ctx)
    users = _users(kids.one("Users"), ctx)
    if admin.stats_explicit:
        explicit = explicit | {EXPLICIT_STATS_FILE}

    # Cross-checks, each reported at the element that makes the contradiction.
    binds = [bind for bind in [admin.bind] + [t.bind for t in transports or ()] if bind]
    host, port = _settle_address(binds)
    if not users and not is_loopback(host):
        raise _fail(
            binds[0].node,
            f"{BIND_REQUIRES_USERS}; {format_inet_addr(host, port)} is reachable from other machines",
        )
    authentication = admin.config.authentication
    if admin.authentication is None:
        authentication = "token" if users else "none"
    elif authentication == "token" and not users:
        raise _fail(
            admin.authentication,
            "Authentication token requires <Users> (tokens belong to users); add <Users> or "
            "use none",
        )
    elif authentication == "none" and users:
        raise _fail(
            admin.authentication,
            "Authentication none contradicts <Users>: with users configured every /api call "
            "needs a token (ADMIN_API.md); use token or remove the element",
        )
    if transports is None and limit_node is not None:
        implicit = _DEFAULT_MAX_MESSAGE_SIZE
        if implicit > tuning.slow_client_buffer_limit:
            raise _fail(
                limit_node,
                f"SlowClientBufferLimit ({format_size(tuning.slow_client_buffer_limit)}) is "
                f"smaller than the MaxMessageSize ({format_size(implicit)}) of the implicit "
                f"{_DEFAULT_TRANSPORT!r} transport; raise it or declare <Transports>",
            )
    for part in transports or ():
        if part.config.max_message_size > tuning.slow_client_buffer_limit:
            at = part.max_message_size or limit_node or part.node
            raise _fail(
                at,
                f"MaxMessageSize of transport {part.config.name!r} "
                f"({format_size(part.config.max_message_size)}) exceeds "
                f"Tuning/SlowClientBufferLimit ({format_size(tuning.slow_client_buffer_limit)}): "
                "one message would overflow a client's buffer",
            )

    if transports is None:
        transport_configs: tuple[TransportConfig, ...] = (
            TransportConfig(_DEFAULT_TRANSPORT, "websocket", host, port),
        )
    else:
        transport_configs = tuple(replace(t.config, host=host, port=port) for t in transports)
    return Config(
        name=name,
        group=group,
        data_directory=data_dir,
        admin=replace(admin.config, host=host, port=port, authentication=authentication),
        transports=transport_configs,
        transaction_log=txlog,
        tuning=tuning,
        users=users,
        explicit_paths=explicit,
    )


# --------------------------------------------------------------------------- public API


def _parse(
    data: bytes | str,
    *,
    source: str,
    base_dir: Path | None,
    env: Mapping[str, str] | None,
    source_path: Path | None,
) -> Config:
    base = (base_dir if base_dir is not None else Path.cwd()).absolute()
    ctx = _Context(env=os.environ if env is None else env, base_dir=base)
    try:
        config = _build(_parse_tree(data), ctx)
    except ConfigError as exc:
        exc.source = source
        raise
    return replace(config, source_path=source_path)


def parse_config(
    text: str,
    *,
    source: str = "<string>",
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Parse and validate configuration XML given as text.

    Args:
        text: the XML document.
        source: a name for the text, kept on errors as ``ConfigError.source``.
        base_dir: directory that relative paths resolve against; default the current
            working directory (resolved now, so the result holds absolute paths).
        env: variables for ``${NAME}`` expansion; default ``os.environ``.

    Returns:
        The validated configuration (``source_path`` is None).

    Raises:
        ConfigError: with the path and line of the first problem.
    """
    return _parse(text, source=source, base_dir=base_dir, env=env, source_path=None)


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> Config:
    """Read, parse and validate a configuration file.

    Relative paths inside the file resolve against the file's own directory, so an
    instance behaves the same whatever directory it is started from. This reads the file
    synchronously: call it before the event loop starts (or in a thread).

    Args:
        path: the file.
        env: variables for ``${NAME}`` expansion; default ``os.environ``.

    Raises:
        ConfigError: the file cannot be read (empty ``path``, no line) or is invalid.
    """
    file = Path(path).absolute()
    try:
        data = file.read_bytes()
    except OSError as exc:
        reason = exc.strerror or exc.__class__.__name__
        raise ConfigError("", None, f"cannot read {file}: {reason}", source=str(file)) from exc
    return _parse(data, source=str(file), base_dir=file.parent, env=env, source_path=file)


def _check_bind(config: Config, root: str = "/SpoolConfig") -> None:
    if not config.users and not is_loopback(config.admin.host):
        raise ConfigError(
            f"{root}/Admin/InetAddr",
            None,
            f"{BIND_REQUIRES_USERS}; {config.admin.address} is reachable from other machines",
        )


def _listen(listen: tuple[str, int]) -> tuple[str, int]:
    host, port = listen
    try:
        return _check_host(host), _check_port(port)
    except InetAddrError as exc:
        raise ConfigError("/SpoolConfig/Admin/InetAddr", None, str(exc)) from None


def default_config(
    *, data_dir: Path | None = None, listen: tuple[str, int] | None = None
) -> Config:
    """The embedded default (CONFIG.md): what ``spool serve`` runs without a file.

    Instance and group ``spool``; everything under ``./data`` (or ``data_dir``), made
    absolute against the current directory; every topic recorded in the transaction log
    (``.*``, json); one websocket transport ``websocket-json`` and the admin on
    127.0.0.1:9007 (or ``listen``); no users, hence loopback only.

    Raises:
        ConfigError: ``listen`` is not loopback (path ``/SpoolConfig/Admin/InetAddr``), or
            not a valid host/port.
    """
    root = Path(data_dir) if data_dir is not None else Path("data")
    data = root if root.is_absolute() else Path.cwd().absolute() / root
    host, port = _listen(listen) if listen is not None else (_DEFAULT_HOST, _DEFAULT_PORT)
    config = Config(
        name=_DEFAULT_NAME,
        group=_DEFAULT_NAME,
        data_directory=data,
        admin=AdminConfig(host=host, port=port, stats_file=data / "stats.db"),
        transports=(TransportConfig(_DEFAULT_TRANSPORT, "websocket", host, port),),
        transaction_log=TransactionLogConfig(
            journal_directory=data / "journal",
            archive_directory=data / "archive",
            topics=(TopicRule(".*", "json", is_regex=True),),
        ),
    )
    _check_bind(config)
    return config


def with_overrides(
    cfg: Config, *, listen: tuple[str, int] | None = None, data_dir: Path | None = None
) -> Config:
    """Apply the ``--listen`` / ``--data-dir`` command-line flags to a configuration.

    ``listen`` moves the Admin and every transport (they share one address). ``data_dir``
    (made absolute against the current directory) replaces DataDirectory and moves the
    journal, archive and stats paths under it unless the file set them explicitly.

    Raises:
        ConfigError: the result binds a non-loopback address without users, or ``listen``
            is not a valid host/port (path ``/SpoolConfig/Admin/InetAddr``, no line).
    """
    config = cfg
    if data_dir is not None:
        data = Path(data_dir)
        data = data if data.is_absolute() else Path.cwd().absolute() / data
        admin = config.admin
        if EXPLICIT_STATS_FILE not in config.explicit_paths:
            admin = replace(admin, stats_file=data / "stats.db")
        txlog = config.transaction_log
        if txlog is not None:
            if EXPLICIT_JOURNAL_DIRECTORY not in config.explicit_paths:
                txlog = replace(txlog, journal_directory=data / "journal")
            if EXPLICIT_ARCHIVE_DIRECTORY not in config.explicit_paths:
                txlog = replace(txlog, archive_directory=data / "archive")
            if txlog.journal_directory == txlog.archive_directory:
                raise ConfigError(
                    "/SpoolConfig/DataDirectory",
                    None,
                    "with --data-dir the journal and archive directories would be the same",
                )
        config = replace(config, data_directory=data, admin=admin, transaction_log=txlog)
    if listen is not None:
        host, port = _listen(listen)
        config = replace(
            config,
            admin=replace(config.admin, host=host, port=port),
            transports=tuple(replace(t, host=host, port=port) for t in config.transports),
        )
    _check_bind(config)
    return config


def render_default_xml() -> str:
    """The embedded default as an XML file (for the docs and ``spool config show-default``).

    Parsing it (with the current directory as base) gives exactly :func:`default_config`.
    """
    cfg = default_config()
    admin, tuning = cfg.admin, cfg.tuning
    transport = cfg.transports[0]
    txlog = cfg.transaction_log
    if txlog is None:  # pragma: no cover - default_config() always has a transaction log
        raise RuntimeError("the embedded default lost its transaction log")
    topic = txlog.topics[0]

    def boolean(value: bool) -> str:
        return "true" if value else "false"

    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Spool's embedded default: what `spool serve` runs without a configuration file.
     Relative paths resolve against the directory of this file. -->
<SpoolConfig>
  <Name>{cfg.name}</Name>
  <Group>{cfg.group}</Group>
  <DataDirectory>./data</DataDirectory>

  <Admin>
    <InetAddr>{admin.address}</InetAddr>
    <!-- <FileName> defaults to DataDirectory/stats.db -->
    <Interval>{format_duration(admin.interval)}</Interval>
    <Authentication>{admin.authentication}</Authentication>
    <StatsRetention>{format_duration(admin.stats_retention)}</StatsRetention>
    <MetricsPublic>{boolean(admin.metrics_public)}</MetricsPublic>
  </Admin>

  <Transports>
    <Transport>
      <Name>{transport.name}</Name>
      <Type>{transport.type}</Type>
      <InetAddr>{transport.address}</InetAddr>
      <MessageType>{transport.message_type}</MessageType>
      <PerMessageDeflate>{boolean(transport.per_message_deflate)}</PerMessageDeflate>
      <MaxMessageSize>{format_size(transport.max_message_size)}</MaxMessageSize>
      <Enabled>{boolean(transport.enabled)}</Enabled>
    </Transport>
  </Transports>

  <TransactionLog>
    <!-- <JournalDirectory> defaults to DataDirectory/journal and
         <JournalArchiveDirectory> to DataDirectory/archive -->
    <PreallocatedJournalFiles>{txlog.preallocated_files}</PreallocatedJournalFiles>
    <JournalSize>{format_size(txlog.journal_size)}</JournalSize>
    <FlushInterval>{format_duration(txlog.flush_interval)}</FlushInterval>
    <MaxSize>{txlog.max_size}</MaxSize>  <!-- 0 = unlimited -->
    <Topic><Name>{topic.name}</Name><MessageType>{topic.message_type}</MessageType></Topic>
  </TransactionLog>

  <Tuning>
    <MinimumSyncDestinations>{tuning.minimum_sync_destinations}</MinimumSyncDestinations>
    <SlowClientBufferLimit>{format_size(tuning.slow_client_buffer_limit)}</SlowClientBufferLimit>
    <!-- HeartbeatDefault 0 = the client chooses -->
    <HeartbeatDefault>{format_duration(tuning.heartbeat_default)}</HeartbeatDefault>
    <PersistedAckInterval>{format_duration(tuning.persisted_ack_interval)}</PersistedAckInterval>
  </Tuning>

  <!-- No <Users>: no authentication, so only loopback addresses may be bound. -->
</SpoolConfig>
"""
