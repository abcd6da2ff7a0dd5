"""The triggers family: what message-driven actions cost persisted publishers.

Two brokers are up for the whole family: ``triggers-off``, the publish family's
configuration, and ``triggers-on``, the same plus event-driven actions
(:func:`actions_xml`), each ``amps-action-on-publish-message`` with an
``amps-action-do-publish-message`` step:

- :data:`ACTIONS_EACH` actions ``nomatch-N`` whose Topic (``^bench/trig/nomatch/N/``)
  matches no topic published here;
- :data:`ACTIONS_EACH` actions ``filtered-N`` whose Topic matches the filtered case's
  topics (``^bench/trig/filtered/``) and whose Filter (``/nomatch = 1``) never holds on
  the bench bodies;
- one action ``derive`` that matches every message of the derive case's topics and
  publishes one message for each (the source's body wrapped with its bookmark).

The scenarios:

- ``persisted``: the ``spool.publish.persisted`` workload to ``bench/pub/<id>``, which no
  action's topic matches: the instance must cost what one without actions costs. Each run
  is **paired** (tests/bench/pairing.py, ABBA): two publishes to each broker,
  ``os.sync()`` between sides, and ``vs_triggers_off`` is the ratio of the two rates of
  that run. A run fails if any action was offered a message.
- ``filtered``: the same, paired the same way, to ``bench/trig/filtered/<id>``: every
  message goes into the lanes of the sixteen filtered actions and their workers evaluate
  the filter on each, in tasks of their own on the broker's event loop, between the
  publishes' work. ``dropped``: candidate messages the lanes had no room for. A run fails
  if the filter held for any message.
- ``derive``: the same workload to ``bench/trig/derive/<id>`` on ``triggers-on`` alone:
  ``derived_per_s`` is the derived messages stored over the time from the publish's start
  to the worker's last firing; ``dropped`` the candidates its lane had no room for (a
  full lane never holds the publisher back: what does not fit is dropped and counted).

The action counters come from ``GET /api/actions`` (each action's ``events`` tally).
After each measurement the family waits until the broker measured is idle (its CPU
nearly still): the workers of ``triggers-on`` have caught up, so their leftover work never
lands in the next side's measurement.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final

import httpx
import psutil

from tests.bench.catalog import ScenarioSpec
from tests.bench.pairing import combined, pair_order
from tests.bench.spool_families import _pid, _publish_once
from tests.bench.suite import Suite, reason_of
from tests.support.server import SpoolProcess

#: actions of each kind on ``triggers-on`` (the acceptance case's count)
ACTIONS_EACH: Final = 16
#: where each case publishes (a fresh topic per publish below it)
TOPICS: Final[dict[str, str]] = {
    "persisted": "bench/pub",
    "filtered": "bench/trig/filtered",
    "derive": "bench/trig/derive",
}
#: the filter of the filtered actions: the bench bodies have no ``nomatch`` field
NEVER: Final = "/nomatch = 1"
#: how often the derive case reads the tally while the worker catches up
POLL_S: Final = 0.02
#: the broker counts as idle when it used less CPU than this share of one core...
IDLE_SHARE: Final = 0.05
#: ...over this long
IDLE_WINDOW_S: Final = 0.25

_PAIRED = "each run: two publishes to each broker, with and without the actions, ABBA order"


def _action(name: str, topic: str, publish_to: str, flt: str = "", data: str = "") -> str:
    options = f"<Topic>{topic}</Topic>" + (f"<Filter>{flt}</Filter>" if flt else "")
    body = data or '{"action":"{{AMPS_ACTION_NAME}}","from":"{{AMPS_BOOKMARK}}"}'
    return (
        f"<Action><Name>{name}</Name>"
        "<On><Module>amps-action-on-publish-message</Module>"
        f"<Options>{options}</Options></On>"
        "<Do><Module>amps-action-do-publish-message</Module>"
        f"<Options><Topic>{publish_to}</Topic><Data>{body}</Data></Options></Do>"
        "</Action>"
    )


def actions_xml() -> str:
    """The ``Action`` elements of ``triggers-on`` (see the module docstring)."""
    nomatch = [
        _action(f"nomatch-{n}", f"^bench/trig/nomatch/{n}/", f"bench/trig/out/nomatch-{n}")
        for n in range(ACTIONS_EACH)
    ]
    filtered = [
        _action(f"filtered-{n}", f"^{TOPICS['filtered']}/", f"bench/trig/out/filtered-{n}", NEVER)
        for n in range(ACTIONS_EACH)
    ]
    derive = _action(
        "derive", f"^{TOPICS['derive']}/", "bench/trig/out/derived",
        data='{"from":"{{AMPS_BOOKMARK}}","order":{{AMPS_DATA}}}',
    )  # fmt: skip
    return "".join([*nomatch, *filtered, derive])


def tally(actions: Sequence[Mapping[str, object]], prefix: str) -> dict[str, int]:
    """The ``events`` tallies of the actions named ``prefix...``, summed (the ``actions``
    list of ``GET /api/actions``)."""
    out: dict[str, int] = {}
    for action in actions:
        events = action.get("events")
        if not str(action["name"]).startswith(prefix) or not isinstance(events, Mapping):
            continue
        for key, value in events.items():
            out[key] = out.get(key, 0) + int(value)
    return out


def moved(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """How much each counter moved from ``before`` to ``after``."""
    return {k: v - before.get(k, 0) for k, v in after.items()}


def derive_settled(delta: Mapping[str, int], published: int) -> bool:
    """Whether the derive action has seen and dealt with all ``published`` messages:
    each dropped, cut as a loop or fired (it has no filter: each message it takes fires)."""
    offered = delta.get("offered", 0)
    done = delta.get("dropped", 0) + delta.get("loop_cut", 0) + delta.get("runs", 0)
    return offered >= published and done >= offered


def paired_metrics(on: Mapping[str, float], off: Mapping[str, float]) -> dict[str, float]:
    """One paired run's metrics: the side with the actions, the rate without them
    (``triggers_off_msgs_per_s``) and the ratio of the two (``vs_triggers_off``)."""
    return {
        **on,
        "triggers_off_msgs_per_s": off["msgs_per_s"],
        "vs_triggers_off": on["msgs_per_s"] / off["msgs_per_s"],
    }


def derive_metrics(
    published: int, publish_s: float, derive_s: float, delta: Mapping[str, int]
) -> dict[str, float]:
    """The derive case's metrics: ``derive_s`` runs from the publish's start to the
    worker's last firing."""
    return {
        "msgs_per_s": published / publish_s,
        "derived_per_s": delta.get("derived", 0) / derive_s,
        "derived": float(delta.get("derived", 0)),
        "dropped": float(delta.get("dropped", 0)),
        "failed": float(delta.get("failed", 0)),
        "catch_up_s": max(derive_s - publish_s, 0.0),
    }


def _actions(broker: SpoolProcess) -> list[dict[str, object]]:
    response = httpx.get(f"{broker.http_url}/api/actions", timeout=10)
    response.raise_for_status()
    actions: list[dict[str, object]] = response.json()["actions"]
    return actions


def _quiet(broker: SpoolProcess, timeout: float = 120.0) -> None:
    """Wait until the broker uses less than :data:`IDLE_SHARE` of a core over
    :data:`IDLE_WINDOW_S`: the workers have caught up with what their lanes hold."""
    proc = psutil.Process(_pid(broker))
    deadline = time.monotonic() + timeout
    while True:
        before = proc.cpu_times()
        time.sleep(IDLE_WINDOW_S)
        after = proc.cpu_times()
        used = (after.user + after.system) - (before.user + before.system)
        if used < IDLE_SHARE * IDLE_WINDOW_S:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the broker was still busy after {timeout:.0f}s")


def _measured_side(
    suite: Suite, on: SpoolProcess, spec: ScenarioSpec, case: str
) -> dict[str, float]:
    """One publish to ``triggers-on``, checked: in the ``persisted`` case no action may
    have been offered a message; in the ``filtered`` case the filter held for none."""
    listed = _actions(on)
    every, mine = tally(listed, ""), tally(listed, "filtered-")
    out = _publish_once(suite, on, spec, topic=TOPICS[case])
    _quiet(on)
    listed = _actions(on)
    if case == "persisted":
        offered = moved(every, tally(listed, "")).get("offered", 0)
        if offered:
            raise RuntimeError(f"the actions were offered {offered} messages: a topic matched")
        return out
    delta = moved(mine, tally(listed, "filtered-"))
    if delta.get("matched", 0):
        raise RuntimeError(f"the filter held for {delta['matched']} messages")
    out["dropped"] = float(delta.get("dropped", 0))
    return out


def _paired_once(
    suite: Suite,
    spec: ScenarioSpec,
    off: SpoolProcess,
    on: SpoolProcess,
    order: Iterator[int],
) -> dict[str, float]:
    """Two publishes to each broker in the order :func:`~tests.bench.pairing.pair_order`
    gives for this call, each side's two combined."""
    case = str(spec.params["case"])
    sides: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for with_actions in pair_order(next(order)):
        if sides[False] or sides[True]:
            os.sync()  # the other side's writeback must not land in this one's fsyncs
        if with_actions:
            sides[True].append(_measured_side(suite, on, spec, case))
        else:
            sides[False].append(_publish_once(suite, off, spec, topic=TOPICS[case]))
            _quiet(off)
    return paired_metrics(combined(sides[True]), combined(sides[False]))


def _derive_once(suite: Suite, spec: ScenarioSpec, on: SpoolProcess) -> dict[str, float]:
    """One publish the derive action fires for, then the wait for its worker to finish."""
    published = suite.settings.publish_count
    before = tally(_actions(on), "derive")
    out = _publish_once(suite, on, spec, topic=TOPICS["derive"])
    returned = time.monotonic()
    deadline = returned + suite.settings.worker_timeout
    while True:
        delta = moved(before, tally(_actions(on), "derive"))
        if derive_settled(delta, published):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the derive action had not dealt with every message: {delta}")
        time.sleep(POLL_S)
    derive_s = out["elapsed_s"] + (time.monotonic() - returned)
    _quiet(on)
    return derive_metrics(published, out["elapsed_s"], derive_s, delta)


@contextlib.contextmanager
def _brokers(suite: Suite) -> Iterator[tuple[SpoolProcess, SpoolProcess]]:
    with (
        suite.spool_broker("triggers-off") as off,
        suite.spool_broker("triggers-on", actions=actions_xml()) as on,
    ):
        yield off, on


def run_triggers(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    s = suite.settings
    params = {
        "count": s.publish_count, "per_frame": s.per_frame, "window": s.window,
        "flush_interval": "1ms", "actions_each": ACTIONS_EACH,
    }  # fmt: skip
    with contextlib.ExitStack() as stack:
        try:
            off, on = stack.enter_context(_brokers(suite))
        except Exception as exc:
            suite.record_all(specs, "error", f"broker did not start: {reason_of(exc)}")
            return
        pid = functools.partial(_pid, on)
        for spec in specs:
            once: Callable[[], dict[str, float]]
            if spec.params["case"] == "derive":
                once = functools.partial(_derive_once, suite, spec, on)
                extra = {}
            else:
                once = functools.partial(_paired_once, suite, spec, off, on, itertools.count())
                extra = {"paired": _PAIRED}
            suite.measure(spec, once, params={**params, **extra}, profile_pid=pid)
