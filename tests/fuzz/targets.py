"""Fuzz targets: bytes in, and a bug is anything but the documented refusal.

Each target takes one input (bytes from the fuzzer, or a corpus file) and raises only
when the code under test misbehaves: an exception other than the refusal its contract
names, two implementations that disagree, a round trip that does not return. They are
plain functions, so the corpus replays under pytest without atheris
(tests/unit/test_fuzz_corpus.py) and every crash the fuzzer found stays a unit test.

| target | input | what must hold |
|---|---|---|
| ``frame`` | a websocket frame | the compiled parser and the pure-Python one (its oracle) return the same messages and the same error; the publish-run scanner's twins agree on what they take |
| ``command`` | a frame | every message decodes to a command or fails with a docs/protocol.md failure; so do its options, bookmark and filter, as the broker reads them |
| ``filter`` | ``EXPRESSION NUL BODY`` | compiling fails only with ``bad filter``; a compiled filter evaluates any body without raising, and agrees with the tree-walking reference |
| ``filter_budget`` | ``EXPRESSION NUL BODY`` | compiling and evaluating stay within the expression budget in work units: function calls linear in the tokens, memory within a bound of the body, the text and ``BUILD_MAX`` (server/expr/budget.py) |
| ``bookmark`` | a ``bm`` value | parsing fails only with ``invalid bookmark``; a parsed value formats back to text that parses to the same value |
| ``config`` | configuration XML | loading fails only with ``ConfigError`` naming a path |
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from spool.server.bookmarks import format_spec, parse_bookmark
from spool.server.clock import VirtualClock
from spool.server.config import ConfigError, parse_config
from spool.server.expr import MessageView, compile_filter, compile_value, evaluate_reference
from spool.server.protocol.commands import (
    _ACK_CACHE,
    Command,
    PublishScan,
    decode_command,
    take_publish_run_py,
)
from spool.server.protocol.errors import InvalidBookmark, ProtocolFailure
from spool.server.protocol.frame import FrameError, ParsedFrame, parse_frame_py
from spool.server.protocol.options import parse_subscribe_options
from tests.unit.expr.helpers import expression_work, same, work_memory_bound

__all__ = [
    "COMPILED",
    "TARGETS",
    "bookmark",
    "command",
    "config",
    "filter_",
    "filter_budget",
    "frame",
]

#: function calls one token of an expression may cost to compile, and to evaluate once
#: per nesting level (the unit test of the budget measures under a sixth of these)
_CALLS_PER_TOKEN: Final = 400


def _compiled() -> tuple[ModuleType | None, ModuleType | None]:
    try:
        from spool.server.protocol import _commands_c, _frame_c
    except ImportError:  # not built here: the frame target checks the Python parser alone
        return None, None
    return _frame_c, _commands_c


_FRAME_C, _COMMANDS_C = _compiled()
#: whether the compiled twins are there to be compared with their oracles
COMPILED = _FRAME_C is not None

_CLOCK = VirtualClock(start=1_700_000_000.25)
_CONFIG_DIR = Path(tempfile.gettempdir()) / "spool-fuzz-config"


def _shape(parsed: ParsedFrame) -> tuple[list[tuple[dict[str, Any], bytes]], object]:
    error = None
    if parsed.error is not None:
        error = (type(parsed.error), str(parsed.error), parsed.error.cid)
    return [(m.header, bytes(m.body)) for m in parsed.messages], error


def frame(data: bytes) -> None:
    """The compiled frame parser and publish-run scanner agree with their Python oracles."""
    expected = parse_frame_py(data)
    if _FRAME_C is None or _COMMANDS_C is None:
        return
    got = _FRAME_C.parse_frame(data)
    assert _shape(got) == _shape(expected), (data, _shape(got), _shape(expected))
    msgs = expected.messages
    start = 0
    while start < len(msgs):
        want = take_publish_run_py(msgs, start)
        have = _COMMANDS_C.take_publish_run(msgs, start, _ACK_CACHE, PublishScan)
        if want is None:
            assert have is None, (data, start, have)
            start += 1
            continue
        assert have is not None, (data, start, want)
        assert (have.topic, have.seqs, have.bodies, have.acks, have.end) == (
            want.topic,
            want.seqs,
            want.bodies,
            want.acks,
            want.end,
        ), (data, start)
        start = want.end


def command(data: bytes) -> None:
    """Every message of a frame decodes, or fails with a docs/protocol.md reason."""
    parsed = parse_frame_py(data)
    if parsed.error is not None:
        assert isinstance(parsed.error, FrameError)
    for msg in parsed.messages:
        try:
            cmd = decode_command(msg)
        except ProtocolFailure:
            continue
        _read_fields(cmd)


def _read_fields(cmd: Command) -> None:
    """What the broker reads of a command beyond its header: options, bookmark, filter."""
    reads: list[Callable[[], object]] = []
    if cmd.name == "subscribe":
        reads.append(partial(parse_subscribe_options, cmd.options))
    if isinstance(cmd.bookmark, str):
        reads.append(partial(parse_bookmark, cmd.bookmark))
    if isinstance(cmd.filter, str):
        reads.append(partial(compile_filter, cmd.filter))
    for read in reads:
        try:
            read()
        except ProtocolFailure:
            pass


def filter_(data: bytes) -> None:
    """A filter compiles or fails with ``bad filter``; evaluation never raises and the
    compiled closures agree with the tree-walking reference."""
    text_bytes, _, body = data.partition(b"\0")
    text = text_bytes.decode("utf-8", "replace")
    try:
        flt = compile_filter(text, clock=_CLOCK)
    except ProtocolFailure as exc:
        assert exc.reason == "bad filter", exc
        return
    view = MessageView("t.orders", body, bookmark="1|2|", client_name="pub")
    matched = flt.matches(view)
    assert isinstance(matched, bool)
    value = compile_value(text, clock=_CLOCK).evaluate(MessageView("t.orders", body))
    expected = evaluate_reference(text, MessageView("t.orders", body), clock=_CLOCK)
    assert same(value, expected), (text, body, value, expected)


def filter_budget(data: bytes) -> None:
    """Compiling and evaluating an expression stay within its budget, in work units."""
    text_bytes, _, body = data.partition(b"\0")
    text = text_bytes.decode("utf-8", "replace")
    tokens = len(text) + 1  # at most one token per character, and the end
    calls, peak, flt = expression_work(lambda: compile_filter(text, clock=_CLOCK))
    assert calls <= _CALLS_PER_TOKEN * tokens + 20_000, (calls, text[:200])
    assert peak <= work_memory_bound(text, body), (peak, text[:200])
    if isinstance(flt, ProtocolFailure):
        return
    calls, peak, _ = expression_work(lambda: flt.matches(MessageView("t", body)))
    assert calls <= _CALLS_PER_TOKEN * tokens * 64 + 10_000, (calls, text[:200])
    assert peak <= work_memory_bound(text, body), (peak, text[:200])


def bookmark(data: bytes) -> None:
    """``bm`` values parse or fail with ``invalid bookmark``; parsed ones round-trip."""
    text = data.decode("utf-8", "replace")
    try:
        spec = parse_bookmark(text)
    except InvalidBookmark:
        return
    again = parse_bookmark(format_spec(spec))
    assert again == spec, (text, spec, again)


def config(data: bytes) -> None:
    """Configuration XML loads or fails with a ``ConfigError``."""
    _CONFIG_DIR.mkdir(exist_ok=True)
    try:
        parse_config(data.decode("utf-8", "replace"), env={}, base_dir=_CONFIG_DIR)
    except ConfigError:
        pass


#: name -> target, as ``python -m tests.fuzz`` and the corpus replay know them
TARGETS: dict[str, Callable[[bytes], None]] = {
    "frame": frame,
    "command": command,
    "filter": filter_,
    "filter_budget": filter_budget,
    "bookmark": bookmark,
    "config": config,
}
