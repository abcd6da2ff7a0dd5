"""Subscribe and publish options (the ``o`` header): parse them into typed, frozen values.

docs/protocol.md "Subscribe options" lists what a subscription may ask for. The text is a
comma-separated list of ``name`` or ``name=value`` items; ``conflation_key=[/a,/b]`` holds
commas inside brackets, so items are split only on commas outside brackets. Empty items
(``live,,timestamp`` or a trailing comma) are ignored.

Values:

- durations (``rate_max_gap``, ``conflation``): a number with an optional unit ``ns``,
  ``us``, ``ms``, ``s``, ``m``, ``h`` or ``d`` (case-insensitive; no unit = seconds),
  e.g. ``10s``, ``100ms``, ``1.5m``; must be > 0.
- ``rate``: ``N`` messages/s, ``NKB`` / ``NMB`` / ``NGB`` bytes/s (binary units: 1 KB =
  1024 bytes) of message bodies, or ``NX`` times the original publish pace
  (``2X``, ``.5X``); N > 0.
- counts (``top_n``, ``max_backlog``): a positive integer.
- ``select``: a select list, ``[-/,+/a,+/b/c]`` or ``[-/secret]`` (its grammar and
  refusals: server/protocol/selection.py). Which commands and subscriptions may carry
  one is the handlers' decision, not this grammar's.

Rejected with :class:`~spool.server.protocol.errors.InvalidOptions` (the detail names the item):
unknown names, malformed or out-of-range values, a value on a flag or none on a valued
option, a valued option given twice, and contradictions: ``rate``, ``pause`` or ``resume``
with ``live`` (docs/protocol.md), ``live`` with ``fully_durable``, ``pause`` with ``resume``,
``rate_max_gap`` without ``rate=NX`` (only a time-scaled replay has gaps to skip), and
``conflation_key`` without ``conflation``.

Publish options (``publish``, ``delta_publish``; docs/protocol.md "Publish options") use
the same list syntax and :func:`parse_publish_options` reads them: ``deliver_at=MOMENT``
(the bookmarks' moment, ``YYYYmmddTHHMMSS[.f{1,6}][Z]``, UTC, read by
:func:`spool.server.bookmarks.parse_moment_us`) or ``deliver_after=DURATION`` (> 0). It
refuses any other name, both of them together, one given twice, a missing or malformed
value and either one without ``=``. What a broker does with valid ones is its own
decision (server/publishing.py ``refuse_publish_options``), not this grammar's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal, TypeAlias

from spool.server.bookmarks import format_time_bookmark, parse_moment_us
from spool.server.protocol.errors import InvalidOptions
from spool.server.protocol.selection import SelectList, parse_select

Durability: TypeAlias = Literal["live", "persisted", "fully_durable"]
NotFoundPolicy: TypeAlias = Literal["now", "epoch", "fail"]
RateKind: TypeAlias = Literal["msgs", "bytes", "multiplier"]

_FLAGS: Final = frozenset(
    {"live", "fully_durable", "pause", "resume", "replace", "timestamp", "oof", "no_sowkey"}
)
_VALUED: Final = frozenset(
    {
        "rate",
        "rate_max_gap",
        "conflation",
        "conflation_key",
        "top_n",
        "bookmark_not_found",
        "max_backlog",
        "select",
    }
)
_NUMBER: Final = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_DURATION_RE: Final = re.compile(rf"({_NUMBER})\s*(ns|us|ms|s|m|h|d)?", re.IGNORECASE)
_DURATION_UNITS: Final[dict[str, float]] = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_RATE_RE: Final = re.compile(rf"({_NUMBER})\s*(kb|mb|gb|x)?", re.IGNORECASE)
_RATE_BYTES: Final[dict[str, int]] = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}
_COUNT_RE: Final = re.compile(r"[0-9]{1,18}")
_PATH_RE: Final = re.compile(r"(?:/[^/,\[\]\s]+)+")
_MAX_OPTIONS_TEXT: Final = 64 * 1024
_POLICIES: Final[dict[str, NotFoundPolicy]] = {"now": "now", "epoch": "epoch", "fail": "fail"}


@dataclass(frozen=True, slots=True)
class Rate:
    """A replay pace.

    Attributes:
        kind: ``msgs`` (messages/s), ``bytes`` (body bytes/s) or ``multiplier`` (times the
            original publish pace, from the records' timestamps).
        value: the number (> 0).
    """

    kind: RateKind
    value: float

    def __str__(self) -> str:
        number = _format_number(self.value)
        if self.kind == "msgs":
            return number
        if self.kind == "multiplier":
            return f"{number}X"
        return f"{_format_number(self.value / 1024)}KB"


@dataclass(frozen=True, slots=True)
class SubscribeOptions:
    """Every subscribe option of docs/protocol.md, typed. The defaults are "not given".

    Attributes:
        live: deliver a message before it is persisted (lowest latency, may deliver a
            message a crash then loses).
        fully_durable: deliver only once every sync replication destination has it.
        rate: replay pace, or None for as fast as the consumer reads.
        rate_max_gap: seconds; the longest wait of a ``rate=NX`` replay between records.
        pause: create the subscription paused.
        resume: resume the paused subscriptions named in ``sub_id``.
        replace: replace the filter/options of an existing subscription with this sub id.
        timestamp: delivered messages carry ``ts``.
        conflation: seconds; conflation interval on the replay timeline.
        conflation_key: JSON paths (``/a/b``) whose values form the conflation key.
        top_n: deliver at most this many messages, then complete.
        bookmark_not_found: what an unknown start bookmark means.
        oof: send out-of-focus notices.
        no_sowkey: leave ``k`` off delivered messages.
        max_backlog: queue subscriptions: most unacknowledged messages leased at once.
        select: the fields to deliver (server/protocol/selection.py), None for whole
            messages.
        raw: the option text as received (for listings and logs).
    """

    live: bool = False
    fully_durable: bool = False
    rate: Rate | None = None
    rate_max_gap: float | None = None
    pause: bool = False
    resume: bool = False
    replace: bool = False
    timestamp: bool = False
    conflation: float | None = None
    conflation_key: tuple[str, ...] = ()
    top_n: int | None = None
    bookmark_not_found: NotFoundPolicy = "now"
    oof: bool = False
    no_sowkey: bool = False
    max_backlog: int | None = None
    select: SelectList | None = None
    raw: str = ""

    @property
    def durability(self) -> Durability:
        """When a live message may be delivered: before persistence, once persisted
        (the default), or once every sync replication destination has it."""
        if self.live:
            return "live"
        return "fully_durable" if self.fully_durable else "persisted"

    def to_text(self) -> str:
        """The canonical option text; ``parse_subscribe_options(o.to_text())`` equals ``o``
        except for :attr:`raw`."""
        items = [name for name in sorted(_FLAGS) if getattr(self, name)]
        if self.rate is not None:
            items.append(f"rate={self.rate}")
        if self.rate_max_gap is not None:
            items.append(f"rate_max_gap={_format_number(self.rate_max_gap)}s")
        if self.conflation is not None:
            items.append(f"conflation={_format_number(self.conflation)}s")
        if self.conflation_key:
            items.append(f"conflation_key=[{','.join(self.conflation_key)}]")
        if self.top_n is not None:
            items.append(f"top_n={self.top_n}")
        if self.bookmark_not_found != "now":
            items.append(f"bookmark_not_found={self.bookmark_not_found}")
        if self.max_backlog is not None:
            items.append(f"max_backlog={self.max_backlog}")
        if self.select is not None:
            items.append(f"select={self.select.to_text()}")
        return ",".join(items)


DEFAULT_OPTIONS: Final = SubscribeOptions()


def _format_number(value: float) -> str:
    """Shortest plain decimal (never an exponent) that reads back as the same float."""
    text = format(Decimal(repr(value)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _positive(value: float, item: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise InvalidOptions(f"{item!r}: the value must be greater than zero")
    return value


def parse_duration(text: str, item: str) -> float:
    """Seconds of a duration such as ``10s`` / ``100ms`` / ``2`` (seconds)."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise InvalidOptions(f"{item!r}: expected a duration such as 10s or 100ms")
    unit = (match.group(2) or "s").lower()
    return _positive(float(match.group(1)) * _DURATION_UNITS[unit], item)


def parse_rate(text: str, item: str) -> Rate:
    """``N`` (messages/s), ``NKB``/``NMB``/``NGB`` (bytes/s) or ``NX`` (pace multiplier)."""
    match = _RATE_RE.fullmatch(text.strip())
    if match is None:
        raise InvalidOptions(f"{item!r}: expected N, NKB, NMB or NX (e.g. 100, 10MB, 2X)")
    number = _positive(float(match.group(1)), item)
    unit = (match.group(2) or "").lower()
    if not unit:
        return Rate("msgs", number)
    if unit == "x":
        return Rate("multiplier", number)
    return Rate("bytes", number * _RATE_BYTES[unit])


def _parse_count(text: str, item: str) -> int:
    if _COUNT_RE.fullmatch(text.strip()) is None or int(text) <= 0:
        raise InvalidOptions(f"{item!r}: expected a positive integer")
    return int(text)


def _parse_keys(text: str, item: str) -> tuple[str, ...]:
    text = text.strip()
    if text.startswith("["):
        if not text.endswith("]"):
            raise InvalidOptions(f"{item!r}: unbalanced '['")
        text = text[1:-1]
    paths = tuple(part.strip() for part in text.split(","))
    if not paths or any(_PATH_RE.fullmatch(path) is None for path in paths):
        raise InvalidOptions(f"{item!r}: expected JSON paths such as [/id] or [/a,/b/c]")
    if len(set(paths)) != len(paths):
        raise InvalidOptions(f"{item!r}: a path is listed twice")
    return paths


def split_items(text: str, *, strict: bool = True) -> list[str]:
    """The stripped, non-empty items of ``text``, split on commas outside ``[...]``.

    ``strict``: an unbalanced bracket raises :class:`InvalidOptions`. Otherwise it splits
    as far as it can: reading a command's options never fails, and such text is not valid
    subscribe options, which :func:`parse_subscribe_options` reports.
    """
    items: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                if strict:
                    raise InvalidOptions(f"unbalanced ']' in options {text[:80]!r}")
                depth = 0
        elif char == "," and depth == 0:
            items.append(text[start:index])
            start = index + 1
    if depth != 0 and strict:
        raise InvalidOptions(f"unbalanced '[' in options {text[:80]!r}")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _check_text(text: object) -> None:
    """Refuse an ``o`` header that is not a string, or longer than the options may be."""
    if not isinstance(text, str):
        raise InvalidOptions("options are a comma-separated string")
    if len(text) > _MAX_OPTIONS_TEXT:
        raise InvalidOptions(f"options longer than {_MAX_OPTIONS_TEXT} characters")


def parse_subscribe_options(text: str | None) -> SubscribeOptions:
    """Parse the ``o`` header of a subscribe command (None or empty: all defaults).

    Raises:
        InvalidOptions: see the module docstring for every rejected case.
    """
    if text is None:
        return DEFAULT_OPTIONS
    _check_text(text)
    flags: set[str] = set()
    values: dict[str, str] = {}
    for item in split_items(text):
        name, has_value, value = item.partition("=")
        name = name.strip()
        if name in _FLAGS:
            if has_value:
                raise InvalidOptions(f"{item!r}: '{name}' takes no value")
            flags.add(name)
        elif name in _VALUED:
            if not has_value or not value.strip():
                raise InvalidOptions(f"{item!r}: '{name}' needs a value ({name}=...)")
            if name in values:
                raise InvalidOptions(f"'{name}' is given twice")
            values[name] = value.strip()
        else:
            raise InvalidOptions(f"unknown option {name[:80]!r}")
    options = _build(flags, values, text)
    _check_combinations(options)
    return options


def _build(flags: set[str], values: dict[str, str], raw: str) -> SubscribeOptions:
    def item(name: str) -> str:
        return f"{name}={values[name]}"

    policy = _POLICIES.get(values.get("bookmark_not_found", "now"))
    if policy is None:
        raise InvalidOptions(f"{item('bookmark_not_found')!r}: expected now, epoch or fail")
    return SubscribeOptions(
        live="live" in flags,
        fully_durable="fully_durable" in flags,
        rate=parse_rate(values["rate"], item("rate")) if "rate" in values else None,
        rate_max_gap=(
            parse_duration(values["rate_max_gap"], item("rate_max_gap"))
            if "rate_max_gap" in values
            else None
        ),
        pause="pause" in flags,
        resume="resume" in flags,
        replace="replace" in flags,
        timestamp="timestamp" in flags,
        conflation=(
            parse_duration(values["conflation"], item("conflation"))
            if "conflation" in values
            else None
        ),
        conflation_key=(
            _parse_keys(values["conflation_key"], item("conflation_key"))
            if "conflation_key" in values
            else ()
        ),
        top_n=_parse_count(values["top_n"], item("top_n")) if "top_n" in values else None,
        bookmark_not_found=policy,
        oof="oof" in flags,
        no_sowkey="no_sowkey" in flags,
        max_backlog=(
            _parse_count(values["max_backlog"], item("max_backlog"))
            if "max_backlog" in values
            else None
        ),
        select=parse_select(values["select"], item("select")) if "select" in values else None,
        raw=raw,
    )


def _check_combinations(o: SubscribeOptions) -> None:
    if o.live:
        for name, given in (("rate", o.rate), ("pause", o.pause), ("resume", o.resume)):
            if given:
                raise InvalidOptions(f"'{name}' cannot be combined with 'live'")
        if o.fully_durable:
            raise InvalidOptions("'live' and 'fully_durable' contradict each other")
    if o.pause and o.resume:
        raise InvalidOptions("'pause' and 'resume' contradict each other")
    if o.rate_max_gap is not None and (o.rate is None or o.rate.kind != "multiplier"):
        raise InvalidOptions("'rate_max_gap' applies only to a rate=NX replay")
    if o.conflation_key and o.conflation is None:
        raise InvalidOptions("'conflation_key' needs 'conflation'")


# -- publish options ----------------------------------------------------------------------

#: the publish options, each with the form of its value (for refusals)
_PUBLISH_VALUED: Final[dict[str, str]] = {"deliver_at": "MOMENT", "deliver_after": "DURATION"}


@dataclass(frozen=True, slots=True)
class PublishOptions:
    """The options of a ``publish`` or ``delta_publish``, typed. The defaults are "not
    given": an absent or empty ``o`` is an ordinary publish.

    Attributes:
        deliver_at_us: deliver at this moment (microseconds since the Unix epoch, UTC).
        deliver_after_s: deliver this many seconds (> 0) after the broker takes it.
        raw: the option text as received (for logs).
    """

    deliver_at_us: int | None = None
    deliver_after_s: float | None = None
    raw: str = ""

    @property
    def delayed(self) -> bool:
        """Whether the publish asks for delayed delivery (either option)."""
        return self.deliver_at_us is not None or self.deliver_after_s is not None

    def to_text(self) -> str:
        """The canonical option text; ``parse_publish_options(o.to_text())`` equals ``o``
        except for :attr:`raw`."""
        items: list[str] = []
        if self.deliver_at_us is not None:
            items.append(f"deliver_at={format_time_bookmark(self.deliver_at_us)}")
        if self.deliver_after_s is not None:
            items.append(f"deliver_after={_format_number(self.deliver_after_s)}s")
        return ",".join(items)


NO_PUBLISH_OPTIONS: Final = PublishOptions()


def parse_publish_options(text: str | None) -> PublishOptions:
    """Parse the ``o`` header of a publish command (None, empty or only commas and
    spaces: :data:`NO_PUBLISH_OPTIONS`, an ordinary publish).

    Raises:
        InvalidOptions: an unknown name, ``deliver_at`` with ``deliver_after``, an option
            given twice, a value missing or malformed (a moment that is not
            ``YYYYmmddTHHMMSS[.ffffff][Z]`` or not on the calendar, a duration that is
            not one or not > 0), an option without ``=``; the detail names the item.
    """
    if text is None:
        return NO_PUBLISH_OPTIONS
    _check_text(text)
    values: dict[str, str] = {}
    for item in split_items(text):
        name, has_value, value = item.partition("=")
        name = name.strip()
        form = _PUBLISH_VALUED.get(name)
        if form is None:
            raise InvalidOptions(f"unknown publish option {name[:80]!r}")
        if not has_value:
            raise InvalidOptions(f"'{name}' is not a flag: give it a value ({name}={form})")
        if not value.strip():
            raise InvalidOptions(f"{item!r}: the value is missing ({name}={form})")
        if name in values:
            raise InvalidOptions(f"'{name}' is given twice")
        values[name] = value.strip()
    if len(values) > 1:
        raise InvalidOptions("'deliver_at' and 'deliver_after' contradict each other: give one")
    if not values:
        return PublishOptions(raw=text)
    if "deliver_at" in values:
        return PublishOptions(deliver_at_us=_parse_moment(values["deliver_at"]), raw=text)
    item = f"deliver_after={values['deliver_after']}"
    return PublishOptions(deliver_after_s=parse_duration(values["deliver_after"], item), raw=text)


def _parse_moment(value: str) -> int:
    """The moment of ``deliver_at=value``, in microseconds since the Unix epoch."""
    try:
        return parse_moment_us(value)
    except ValueError as exc:
        raise InvalidOptions(f"'deliver_at={value}': {exc}") from exc
