"""One connection's command order: frames in, runs of publishes and commands out, in order.

A :class:`Dispatcher` is a connection's :class:`~spool.server.ports.FrameHandler`. For each frame
it takes runs of plain publishes straight to the publish pipeline (the hot path, no
:func:`~spool.server.protocol.commands.decode_command` per message), decodes everything else
and runs it through the broker's command table.

Some commands must wait for I/O before they can run: a ``logon`` whose credentials are
checked (scrypt, in a thread), a bookmark ``subscribe`` whose start must be looked up in
journal files. A command handler returns an awaitable for those; while it is pending, the
connection's later commands wait in a backlog and run afterwards, in order (a publish or an
unsubscribe sent in the same frame never overtakes them). Other connections are not held up.

One connection's commands take the event loop for at most about :data:`TURN_BUDGET`
seconds at a time: once a frame (or the backlog) has used it, the commands left wait in
the backlog, in order, and go on at the loop's next turn, after what other connections
sent meanwhile. A frame of a hundred subscribes with filters, which would take tens of
milliseconds in one go, yields every 2 ms. Runs of publishes are not cut (a run is one
pipeline call).

A command carrying a long content filter (over :data:`INLINE_FILTER_MAX` characters) that
the filter caches do not know yet waits the same way while the filter is compiled on the
one filter-compiling thread: the largest filter the budget allows (server/expr/budget.py)
takes hundreds of milliseconds to compile, which the event loop must not spend. Its
handler then finds the filter (or the reason it was refused) in the cache, so the checks
keep their order (an entitlement failure still comes before a filter's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from spool.server.clock import SYSTEM_CLOCK, Clock, time_us
from spool.server.expr import FilterSyntaxError, compile_filter, is_known
from spool.server.lifecycle import Lifecycle
from spool.server.ports import PublishRun
from spool.server.protocol.commands import Command, UnknownCommand, decode_command
from spool.server.protocol.errors import (
    InvalidCommand,
    InvalidMessage,
    InvalidOptions,
    LogonRequired,
    ProtocolFailure,
    ShuttingDown,
)
from spool.server.protocol.frame import FrameError, parse_frame
from spool.server.publishing import PublishPipeline, publish_due, refuse_options
from spool.server.session import CLOSE_INVALID_DATA, Session
from spool.server.stats.source import EventSink
from spool.server.txlog.format.record import RecordKind

#: a command handler: runs the command now (returns None) or returns what to await first
CommandHandler = Callable[[Session, Command], Awaitable[None] | None]

#: the interval of ``heartbeat`` with ``o=start`` and no number (seconds)
_DEFAULT_BEAT: Final = 30.0
#: the commands whose refusal carries their ``s``
_PUBLISHES: Final = frozenset({"publish", "delta_publish"})
#: seconds of one connection's commands before the loop is given to the others
TURN_BUDGET: Final = 0.002
#: longer filter texts are compiled off the event loop (about 1 ms of compiling at most
#: is spent on the loop for a filter this long)
INLINE_FILTER_MAX: Final = 1024

#: compiles long filters, one at a time: a second thread compiling Python would only
#: take more of the interpreter lock from the event loop
_COMPILER: Final = ThreadPoolExecutor(max_workers=1, thread_name_prefix="filter-compile")


def _compile_quietly(text: str, clock: Clock) -> None:
    """Compile ``text`` into the caches; a refusal is cached too, and reported by the
    command's handler when it runs."""
    try:
        compile_filter(text, clock=clock)
    except FilterSyntaxError:
        pass


class Dispatcher:
    """Runs one connection's frames, in order.

    Args:
        session: the connection.
        pipeline: where publishes go.
        commands: the command table (every command but ``publish`` and ``heartbeat``).
        lifecycle: whether the broker is stopping (then work is refused).
        events: where malformed frames are reported.
        clock: the clock filters are compiled with (the command handlers' clock).
        turn_budget: seconds of commands per loop turn (:data:`TURN_BUDGET`).
    """

    def __init__(
        self,
        session: Session,
        pipeline: PublishPipeline,
        commands: Mapping[str, CommandHandler],
        lifecycle: Lifecycle,
        events: EventSink,
        clock: Clock = SYSTEM_CLOCK,
        turn_budget: float = TURN_BUDGET,
    ) -> None:
        self._session = session
        self._clock = clock
        self._turn_budget = turn_budget
        self._pipeline = pipeline
        self._commands = commands
        self._lifecycle = lifecycle
        self._events = events
        #: a command being prepared off the loop; commands arriving meanwhile wait in
        #: _backlog, in order
        self._waiting: asyncio.Task[None] | None = None
        self._backlog: list[Command] = []

    def receive(self, data: bytes) -> None:
        """Handle one received frame; failures become failure acks (or a close), never
        exceptions."""
        session = self._session
        parsed = parse_frame(data)
        msgs = parsed.messages
        n = len(msgs)
        i = 0
        pipeline = self._pipeline
        lifecycle = self._lifecycle
        # the turn's budget: measured in CPU time of this thread, whatever the clock
        until = time.thread_time() + self._turn_budget
        while i < n:
            if session.closed:
                return
            if self._waiting is None and i and time.thread_time() > until:
                self._yield_turn()
            origin = session.origin
            if origin is not None and self._waiting is None and not lifecycle.stopping:
                # the hot path: runs of plain publishes
                j = pipeline.publish_frame(origin, session.pub_hash, msgs, i)
                if j > i:
                    i = j
                    continue
            msg = msgs[i]
            i += 1
            try:
                cmd = decode_command(msg)
            except UnknownCommand as exc:
                session.fail(exc.cid, InvalidCommand(exc.detail))
                continue
            except InvalidMessage as exc:
                session.fail(getattr(exc, "cid", None), InvalidMessage(exc.detail))
                continue
            self.dispatch(cmd)
        if parsed.error is not None:
            self._bad_frame(parsed.error)

    def _yield_turn(self) -> None:
        """The turn's budget is spent: what comes next waits in the backlog for the
        loop's next turn."""
        self._waiting = asyncio.get_running_loop().create_task(self._next_turn())

    async def _next_turn(self) -> None:
        await asyncio.sleep(0)
        self._waiting = None
        self._drain_backlog()

    def dispatch(self, cmd: Command) -> None:
        """Run one decoded command, after what is already waiting."""
        if self._waiting is not None:
            self._backlog.append(cmd)
            return
        if "received" in cmd.acks:
            self._session.ack("received", cmd.cid)
        self._run(cmd)

    def _run(self, cmd: Command) -> None:
        session = self._session
        try:
            if session.origin is None and cmd.name != "logon":
                raise LogonRequired("the first command must be logon")
            if self._lifecycle.stopping:
                raise ShuttingDown()
            if cmd.name == "publish":
                self._publish(cmd)
                return
            if cmd.name == "heartbeat":
                self._heartbeat(cmd)
                return
            text = cmd.filter
            if (
                type(text) is str
                and len(text) > INLINE_FILTER_MAX
                and not is_known(text, clock=self._clock)
            ):
                pending: Awaitable[None] | None = self._compile_then_run(cmd, text)
            else:
                pending = self._commands[cmd.name](session, cmd)
            if pending is not None:
                self._waiting = asyncio.get_running_loop().create_task(self._finish(cmd, pending))
        except ProtocolFailure as exc:
            self._failed(cmd, exc)

    async def _compile_then_run(self, cmd: Command, text: str) -> None:
        """Compile a long filter on the compiling thread, then run its command."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(_COMPILER, _compile_quietly, text, self._clock)
        if self._session.closed:
            return
        if self._lifecycle.stopping:
            raise ShuttingDown()
        pending = self._commands[cmd.name](self._session, cmd)
        if pending is not None:
            await pending

    def _publish(self, cmd: Command) -> None:
        """A publish the run path did not take (a correlation id, a SOW key, options, a
        first use of an ack string...): the same pipeline, as a run of one, once its
        options are read (a delayed publish is stored as a scheduled record)."""
        session = self._session
        origin = session.origin
        assert origin is not None
        try:
            due = publish_due(cmd, time_us(self._clock))
        except InvalidOptions as exc:
            refuse_options(session, cmd, exc)
            return
        kinds = cmd.acks - {"received"}  # already sent by dispatch()
        self._pipeline.publish(
            origin,
            PublishRun.one(
                cmd.topic or "",
                session.pub_hash,
                cmd.seq,
                cmd.body,
                acks=kinds,
                cid=cmd.cid,
                corr_id=cmd.field("x") or "",
                sow_key=cmd.field("k") or "",
                expiration=cmd.field("e"),
                publisher_name=origin.name,
                kind=RecordKind.PUBLISH if due is None else RecordKind.SCHEDULED,
                due_us=due,
            ),
        )

    def _heartbeat(self, cmd: Command) -> None:
        """``heartbeat``: ``o=beat`` (or nothing) is a beat, ``o=start,N`` starts beating."""
        session = self._session
        opts = (cmd.options or "").strip()
        if opts and opts != "beat":
            parts = [p.strip() for p in opts.split(",")]
            if parts[0] != "start":
                raise InvalidOptions(f"heartbeat options must be 'start,N' or 'beat', not {opts!r}")
            try:
                interval = float(parts[1]) if len(parts) > 1 else _DEFAULT_BEAT
            except ValueError as exc:
                raise InvalidOptions(f"bad heartbeat interval {parts[1]!r}") from exc
            session.start_heartbeat(interval)
        if "processed" in cmd.acks:
            session.ack("processed", cmd.cid)

    async def _finish(self, cmd: Command, pending: Awaitable[None]) -> None:
        """Await a command's I/O, then run what arrived meanwhile."""
        try:
            await pending
        except ProtocolFailure as exc:
            self._failed(cmd, exc)
        except Exception as exc:  # a defect must not wedge the connection's backlog
            self._events.emit(
                "error", "session", "command_failed",
                client=self._session.name, command=cmd.name, error=repr(exc),
            )  # fmt: skip
            self._failed(cmd, InvalidMessage(f"{cmd.name} failed: {exc}"))
        finally:
            self._waiting = None
        self._drain_backlog()

    def _failed(self, cmd: Command, exc: ProtocolFailure) -> None:
        session = self._session
        if cmd.seq is not None and cmd.name in _PUBLISHES:
            # a refused publish names its sequence, as the pipeline's refusals do
            session.fail(cmd.cid, exc, s=cmd.seq)
        else:
            session.fail(cmd.cid, exc)
        if cmd.name == "logon" and session.origin is None:
            session.close_soon(exc.reason, cause="logon_failed")

    def _drain_backlog(self) -> None:
        """Run what waited, in order, until one of them has to wait again or the turn's
        budget is spent."""
        until = time.thread_time() + self._turn_budget
        backlog = self._backlog
        ran = False  # at least one command a turn: the backlog always moves
        while backlog and self._waiting is None:
            if self._session.closed:
                backlog.clear()
                return
            if ran and time.thread_time() > until:
                self._yield_turn()
                return
            self.dispatch(backlog.pop(0))
            ran = True

    def _bad_frame(self, err: FrameError) -> None:
        session = self._session
        self._events.emit(
            "warning",
            "session",
            "invalid_frame",
            client=session.name,
            remote=session.remote,
            detail=err.detail,
        )
        if err.cid is not None:
            session.fail(err.cid, InvalidMessage(err.detail))
        else:
            session.close_soon(
                f"{InvalidMessage.reason}: {err.detail}"[:120],
                CLOSE_INVALID_DATA,
                cause="invalid_message",
            )
