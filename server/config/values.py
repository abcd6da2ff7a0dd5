"""Reading one element's value: text, ``${VAR}`` expansion, and each kind of value.

Every reader takes the element (for the path and line of its error) and the
:class:`Context` (environment and base directory), and either returns the value in the
model's units or raises a :class:`~spool.server.config.errors.ConfigError` at that element. Range
checks live with the reader (``minimum``/``maximum``) so that every range error reads the
same way; the section readers choose the bounds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from spool.server.config.errors import InetAddrError
from spool.server.config.netaddr import parse_inet_addr
from spool.server.config.xmltree import XmlNode, fail
from spool.server.expr import FilterSyntaxError, compile_filter, compile_value
from spool.server.regex import RegexRefused, compile_regex
from spool.server.units import UnitError, format_duration, format_size, parse_duration, parse_size

__all__ = [
    "DAY",
    "GB",
    "KB",
    "MB",
    "Bind",
    "Context",
    "read_bind",
    "read_bool",
    "read_choice",
    "read_duration",
    "read_int",
    "read_name",
    "read_path",
    "read_regex",
    "read_size",
    "read_value",
]

KB: Final = 1024
MB: Final = 1024 * 1024
GB: Final = 1024 * 1024 * 1024
DAY: Final = 86400.0


@dataclass(frozen=True, slots=True)
class Context:
    """What values are read against.

    Attributes:
        env: variables for ``${NAME}`` expansion.
        base_dir: absolute directory that relative paths resolve against.
    """

    env: Mapping[str, str]
    base_dir: Path


@dataclass(frozen=True, slots=True)
class Bind:
    """An address given in the file, with the element that gave it (for cross-checks)."""

    host: str
    port: int
    node: XmlNode


_VARIABLE: Final = re.compile(r"\$(\$\{)|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{")


def _expand(node: XmlNode, text: str, env: Mapping[str, str]) -> str:
    """Expand ``${NAME}``; ``$${`` is a literal ``${``; an unset variable is an error."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "${"
        name = match.group(2)
        if name is None:
            raise fail(
                node,
                "malformed ${...} reference: a variable name is letters, digits and _, "
                "not starting with a digit (write $${ for a literal ${)",
            )
        value = env.get(name)
        if value is None:
            raise fail(node, f"environment variable {name} is not set (used as ${{{name}}})")
        return value

    return _VARIABLE.sub(substitute, text)


def read_value(node: XmlNode, ctx: Context) -> str:
    """The text of a leaf element, stripped and with ``${VAR}`` expanded; never empty."""
    if node.children:
        raise fail(
            node.children[0],
            f"<{node.tag}> takes a value, not child elements (found <{node.children[0].tag}>)",
        )
    value = _expand(node, "".join(node.text).strip(), ctx.env).strip()
    if not value:
        raise fail(node, f"<{node.tag}> must not be empty")
    return value


_TRUE: Final = frozenset({"true", "yes", "1"})
_FALSE: Final = frozenset({"false", "no", "0"})


def read_bool(node: XmlNode, ctx: Context) -> bool:
    """``true``/``false``, ``yes``/``no`` or ``1``/``0``, any case."""
    value = read_value(node, ctx).lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise fail(node, f"{value!r} is not a boolean (use true/false, yes/no or 1/0)")


def read_int(node: XmlNode, ctx: Context, *, minimum: int, maximum: int) -> int:
    """Decimal digits (no sign) within ``minimum..maximum``."""
    value = read_value(node, ctx)
    if not (value.isascii() and value.isdigit()):
        raise fail(node, f"{value!r} is not a whole number")
    number = int(value)
    if not minimum <= number <= maximum:
        raise fail(node, f"{node.tag} must be between {minimum} and {maximum}, got {number}")
    return number


def read_size(
    node: XmlNode, ctx: Context, *, minimum: int, maximum: int, zero_ok: bool = False
) -> int:
    """A size (``64MB``) in bytes within ``minimum..maximum`` (or 0 when ``zero_ok``)."""
    return _read_quantity(node, ctx, parse_size, format_size, minimum, maximum, zero_ok)


def read_duration(
    node: XmlNode, ctx: Context, *, minimum: float, maximum: float, zero_ok: bool = False
) -> float:
    """A duration (``15s``) in seconds within ``minimum..maximum`` (or 0 when ``zero_ok``)."""
    return _read_quantity(node, ctx, parse_duration, format_duration, minimum, maximum, zero_ok)


#: a quantity with a unit: bytes (int) or seconds (float)
_Q = TypeVar("_Q", int, float)


def _read_quantity(
    node: XmlNode,
    ctx: Context,
    parse: Callable[[str], _Q],
    write: Callable[[_Q], str],
    minimum: _Q,
    maximum: _Q,
    zero_ok: bool,
) -> _Q:
    """A value with a unit, read by ``parse`` and written back in errors by ``write``,
    within ``minimum..maximum`` (or 0 when ``zero_ok``)."""
    try:
        value = parse(read_value(node, ctx))
    except UnitError as exc:
        raise fail(node, str(exc)) from None
    if zero_ok and value == 0:
        return value
    if not minimum <= value <= maximum:
        zero = " (or 0)" if zero_ok else ""
        raise fail(
            node,
            f"{node.tag} must be between {write(minimum)} and {write(maximum)}"
            f"{zero}, got {write(value)}",
        )
    return value


def read_path(node: XmlNode, ctx: Context) -> Path:
    """A path, made absolute against the context's base directory."""
    value = read_value(node, ctx)
    if "\x00" in value:
        raise fail(node, "a path cannot contain a NUL character")
    path = Path(value)
    return path if path.is_absolute() else ctx.base_dir / path


_SAFE_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def read_name(node: XmlNode, ctx: Context, what: str) -> str:
    """A name that is safe in file names and URLs (instance, group, transport)."""
    value = read_value(node, ctx)
    if not _SAFE_NAME.fullmatch(value):
        raise fail(
            node,
            f"{value!r} is not a valid {what}: use 1 to 64 of A-Z a-z 0-9 _ . - "
            "(not starting with . or -)",
        )
    return value


def read_regex(node: XmlNode, ctx: Context) -> str:
    """A pattern that compiles with :mod:`re` (returned as text)."""
    value = read_value(node, ctx)
    try:
        re.compile(value)
    except re.error as exc:
        raise fail(node, f"{value!r} is not a valid regular expression: {exc}") from None
    return value


def read_linear_regex(node: XmlNode, ctx: Context) -> str:
    """A pattern that compiles for linear-time matching (server/regex.py: RE2), returned
    as text: entitlement patterns are matched by RE2 on every new topic a user touches."""
    value = read_value(node, ctx)
    try:
        compile_regex(value)
    except RegexRefused as exc:
        raise fail(node, f"{value!r} is not a valid regular expression: {exc.reason}") from None
    return value


def read_bind(node: XmlNode, ctx: Context) -> Bind:
    """An ``InetAddr`` (see :func:`~spool.server.config.netaddr.parse_inet_addr`)."""
    try:
        host, port = parse_inet_addr(read_value(node, ctx))
    except InetAddrError as exc:
        raise fail(node, str(exc)) from None
    return Bind(host, port, node)


def read_choice(node: XmlNode, ctx: Context, allowed: Sequence[str], what: str) -> str:
    """One of ``allowed``, spelled exactly."""
    value = read_value(node, ctx)
    if value not in allowed:
        raise fail(node, f"{value!r} is not a valid {what} (allowed: {', '.join(allowed)})")
    return value


def read_expression(node: XmlNode, ctx: Context, *, value: bool = False) -> str:
    """A filter (or, ``value``, a value expression) that compiles, as written."""
    text = read_value(node, ctx)
    try:
        if value:
            compile_value(text)
        else:
            compile_filter(text)
    except FilterSyntaxError as exc:
        raise fail(node, f"the {node.tag} does not compile: {exc}") from None
    return text
