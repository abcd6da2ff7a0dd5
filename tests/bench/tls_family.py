"""The TLS scenarios: persisted publish and replay from EPOCH over ``wss://``.

The brokers serve a certificate of a throwaway CA made for the run; the clients verify it
(the same lean workers as the plain families, given the CA file).

- ``spool.tls.publish.persisted.100B``: a fresh TLS broker; the plain figure is the
  publish family's, the report prints the ratio.
- ``spool.tls.replay.epoch.100B``: **paired**. The family starts a fresh plain broker next
  to the fresh TLS one, fills both with the same 1,000,000 messages, and every run is two
  replays from EPOCH on each, in ABBA order (plain, TLS, TLS, plain; the next run TLS,
  plain, plain, TLS), each side's two combined (tests/bench/pairing.py).
  ``msgs_per_s`` is the TLS replay, ``plain_msgs_per_s`` the plain one of the same run,
  ``vs_plain`` their ratio; ``broker_cpu_us`` / ``client_cpu_us`` (and their ``plain_``
  twins) the CPU time per message of the broker process (user + system, its threads
  included) and of the subscriber process, and ``cpu_vs_plain`` the ratio of the two
  sides' total CPU per message (plain over TLS).

Why paired: dividing the TLS replay by the replay family's figure, measured minutes
earlier, compares different loads. On a shared two-core machine the load of other work
drifts by more than TLS costs in that time (unpaired runs spread by a third or more);
runs back to back under the same load, alternating which goes first,
compare like with like. CPU per message is printed because on a loaded machine it is the
steadier figure (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator, Sequence

from tests.bench.catalog import ScenarioSpec
from tests.bench.pairing import combined, pair_order
from tests.bench.spool_families import _pid, _populate, _publish_once, _replay_once
from tests.bench.suite import Suite, reason_of
from tests.support.server import SpoolProcess


def run_tls(suite: Suite, specs: Sequence[ScenarioSpec]) -> None:
    """Persisted publish and replay over wss:// against fresh TLS brokers (goal >= 0.8x
    the plain figures).

    Each half gets its own fresh broker, as the plain families do: replay from EPOCH reads
    the whole log, so on the publish scenarios' broker it also scanned their millions of
    records on other topics and measured 0.36-0.46x of a plain replay that read none.
    """
    publishes = [sp for sp in specs if "ack" in sp.params]
    replays = [sp for sp in specs if "ack" not in sp.params]
    if publishes:
        with _tls_broker(suite, "tls-publish", publishes) as started:
            if started is not None:
                broker, cafile = started
                for spec in publishes:
                    suite.measure(
                        spec,
                        functools.partial(_publish_once, suite, broker, spec, cafile),
                        params={
                            "count": suite.settings.publish_count,
                            "window": suite.settings.window,
                            "flush_interval": "1ms",
                        },
                        profile_pid=functools.partial(_pid, broker),
                    )
    if replays:
        with _replay_pair(suite, replays) as pair:
            if pair is not None:
                _paired_replays(suite, replays, *pair)


@contextlib.contextmanager
def _replay_pair(
    suite: Suite, specs: Sequence[ScenarioSpec]
) -> Iterator[tuple[SpoolProcess, str, SpoolProcess] | None]:
    """A fresh TLS broker and a fresh plain one, or None (every spec recorded as an error)
    when either cannot start."""
    with contextlib.ExitStack() as stack:
        try:
            tls, cafile = stack.enter_context(suite.spool_tls_broker("tls-replay"))
            plain = stack.enter_context(suite.spool_broker("tls-replay-plain"))
        except Exception as exc:
            suite.record_all(specs, "error", f"broker did not start: {reason_of(exc)}")
            yield None
            return
        yield tls, cafile, plain


def _paired_replays(
    suite: Suite,
    replays: Sequence[ScenarioSpec],
    tls: SpoolProcess,
    cafile: str,
    plain: SpoolProcess,
) -> None:
    s = suite.settings
    suite.log(f"  populating {s.replay_count:,} messages of 100 bytes over wss:// and ws://")
    try:
        fill = _populate(suite, tls, 100, cafile)
        plain_fill = _populate(suite, plain, 100)
    except Exception as exc:
        suite.record_all(replays, "error", f"populating the logs failed: {reason_of(exc)}")
        return
    for spec in replays:
        order = itertools.count()
        suite.measure(
            spec,
            functools.partial(_pair_once, suite, spec, tls, cafile, plain, order),
            params={
                "log_messages": s.replay_count,
                "populate": fill,
                "plain_populate": plain_fill,
                "paired": "each run: two replays on each broker, ABBA order, alternating A",
            },
            profile_pid=functools.partial(_pid, tls),
        )


def _pair_once(
    suite: Suite,
    spec: ScenarioSpec,
    tls: SpoolProcess,
    cafile: str,
    plain: SpoolProcess,
    order: Iterator[int],
) -> dict[str, float]:
    """Two replays on each broker in the order :func:`pair_order` gives for this call;
    each side's figures are :func:`combined` over its two."""
    measured: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for is_tls in pair_order(next(order)):
        broker = tls if is_tls else plain
        # _replay_once measures the broker's CPU per message (broker_cpu_us) too
        measured[is_tls].append(_replay_once(suite, broker, spec, cafile if is_tls else None))
    return paired_metrics(combined(measured[True]), combined(measured[False]))


def paired_metrics(tls: dict[str, float], plain: dict[str, float]) -> dict[str, float]:
    """One run's metrics: the TLS replay's, the plain one's rate and CPU per message, the
    ratio of the two rates (``vs_plain``) and of the two CPU costs (``cpu_vs_plain``: plain
    CPU per message, broker and client, over TLS's).

    ``cpu_vs_plain`` is the ratio the rates tend to when the broker and its client have
    the two cores to themselves and keep them busy; on a loaded machine the load of
    other work moves the rates far more than it moves the CPU per message.
    """
    tls_cpu = tls["broker_cpu_us"] + tls["client_cpu_us"]
    plain_cpu = plain["broker_cpu_us"] + plain["client_cpu_us"]
    return {
        **tls,
        "plain_msgs_per_s": plain["msgs_per_s"],
        "plain_broker_cpu_us": plain["broker_cpu_us"],
        "plain_client_cpu_us": plain["client_cpu_us"],
        "vs_plain": tls["msgs_per_s"] / plain["msgs_per_s"],
        "cpu_vs_plain": plain_cpu / tls_cpu,
    }


@contextlib.contextmanager
def _tls_broker(
    suite: Suite, label: str, specs: Sequence[ScenarioSpec]
) -> Iterator[tuple[SpoolProcess, str] | None]:
    """A fresh TLS broker, or None (every spec recorded as an error) when it cannot start."""
    with contextlib.ExitStack() as stack:
        try:
            started = stack.enter_context(suite.spool_tls_broker(label))
        except Exception as exc:
            suite.record_all(specs, "error", f"broker did not start: {reason_of(exc)}")
            started = None
        yield started
