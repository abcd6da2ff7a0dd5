"""The suite runner: settings per mode, warm-up and repeated runs, brokers, profiling.

A family runner (spool_families.py, peer_families.py, features.py) calls
:meth:`Suite.measure` with a function that performs *one* run of a scenario and returns
its metrics. ``measure`` runs it ``warmup`` times (discarded: JIT-less Python still warms
caches, the page cache, allocator arenas and TCP buffers), then ``runs`` times, records the
per-run metrics and, under ``--profile``, one more run with py-spy attached to the broker.
A failing scenario is recorded as an error with its traceback and the suite goes on.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import psutil

from tests.bench.catalog import ScenarioSpec, format_number
from tests.bench.profiling import PySpyRecorder, find_py_spy
from tests.bench.results import ScenarioResult, Status
from tests.support.certs import TestCA
from tests.support.server import SpoolProcess, config_xml

#: tuning of the benchmark brokers: a deep outbound buffer, so a burst that outruns a
#: subscriber measures delivery throughput instead of tripping the slow-client policy
#: (which has its own tests).
BENCH_TUNING = (
    "<SlowClientBufferLimit>1GB</SlowClientBufferLimit>"
    "<MaxSubscriptionsPerConnection>100000</MaxSubscriptionsPerConnection>"
)
#: the burst family's broker: a 1 MB outbound buffer, so a burst spills to the log
BURST_TUNING = "<SlowClientBufferLimit>1MB</SlowClientBufferLimit>"
BURST_TRANSPORT = "<MaxMessageSize>256KB</MaxMessageSize>"


@dataclass(frozen=True, slots=True)
class Settings:
    """Counts and repetitions of one suite run (``--quick`` shrinks the counts)."""

    quick: bool
    warmup: int
    runs: int
    seed: int
    publish_count: int
    fanout_count: int
    fanout_wide_count: int
    fanout_subscribers: int
    latency_seconds: float
    replay_count: int
    memory_connections: int
    memory_subscriptions: int
    redis_publish_count: int
    mosquitto_count: int
    window: int
    per_frame: int
    feature_runs: int
    worker_timeout: float
    install_peers: bool
    profile: bool

    @classmethod
    def for_mode(
        cls,
        quick: bool,
        *,
        seed: int = 20240607,
        runs: int | None = None,
        warmup: int | None = None,
        install_peers: bool = True,
        profile: bool = False,
    ) -> Settings:
        if quick:
            return cls(
                quick=True,
                warmup=1 if warmup is None else warmup,
                runs=2 if runs is None else runs,
                seed=seed,
                publish_count=30_000,
                fanout_count=30_000,
                fanout_wide_count=2_000,
                fanout_subscribers=100,
                latency_seconds=1.0,
                replay_count=100_000,
                memory_connections=200,
                memory_subscriptions=200,
                redis_publish_count=30_000,
                mosquitto_count=10_000,
                window=10_000,
                per_frame=100,
                feature_runs=1,
                worker_timeout=120.0,
                install_peers=install_peers,
                profile=profile,
            )
        return cls(
            quick=False,
            warmup=1 if warmup is None else warmup,
            runs=3 if runs is None else runs,
            seed=seed,
            publish_count=500_000,
            fanout_count=500_000,
            fanout_wide_count=20_000,
            fanout_subscribers=100,
            latency_seconds=8.0,
            replay_count=1_000_000,
            memory_connections=1000,
            memory_subscriptions=1000,
            redis_publish_count=500_000,
            mosquitto_count=200_000,
            window=10_000,
            per_frame=100,
            feature_runs=3,
            worker_timeout=300.0,
            install_peers=install_peers,
            profile=profile,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Suite:
    """State of one suite run: settings, the scratch directory, results, the log."""

    def __init__(
        self, settings: Settings, workdir: Path, *, profile_dir: Path, out: TextIO = sys.stderr
    ) -> None:
        self.settings = settings
        self.workdir = workdir
        self.profile_dir = profile_dir
        self.results: list[ScenarioResult] = []
        self.peers: dict[str, dict[str, Any]] = {}
        self._out = out
        self._ids = itertools.count(1)
        self._py_spy = find_py_spy() if settings.profile else None

    # -- helpers -------------------------------------------------------------------------

    def log(self, text: str) -> None:
        print(text, file=self._out, flush=True)

    def next_id(self) -> str:
        """A short id unique in this suite run (topics and client names use it)."""
        return f"r{next(self._ids)}"

    def record(
        self,
        spec: ScenarioSpec,
        status: Status,
        reason: str,
        *,
        params: dict[str, Any] | None = None,
        detail: dict[str, Any] | None = None,
    ) -> ScenarioResult:
        """Record a scenario that did not run (missing peer, broker that did not start)."""
        res = ScenarioResult(
            spec, status, reason, {**spec.params, **(params or {})}, detail=detail or {}
        )
        self.results.append(res)
        self.log(f"  {spec.name}: {status.upper()}: {reason}")
        return res

    def record_all(
        self,
        specs: Sequence[ScenarioSpec],
        status: Status,
        reason: str,
        detail: dict[str, Any] | None = None,
    ) -> None:
        for spec in specs:
            self.record(spec, status, reason, detail=detail)

    # -- measuring -----------------------------------------------------------------------

    def measure(
        self,
        spec: ScenarioSpec,
        once: Callable[[], dict[str, float]],
        *,
        params: dict[str, Any] | None = None,
        profile_pid: Callable[[], int] | None = None,
        warmup: int | None = None,
        runs: int | None = None,
    ) -> ScenarioResult:
        """Warm up, run, record (see the module docstring)."""
        s = self.settings
        res = ScenarioResult(spec, params={**spec.params, **(params or {})})
        n_warm = (
            warmup if warmup is not None else (spec.warmup if spec.warmup is not None else s.warmup)
        )
        n_runs = runs if runs is not None else s.runs
        started = time.monotonic()
        self.log(f"  {spec.name}: {n_warm} warm-up + {n_runs} runs")
        try:
            for _ in range(n_warm):
                _settle_disk()
                once()
            for i in range(n_runs):
                _settle_disk()
                metrics = once()
                res.runs.append(metrics)
                self.log(f"    run {i + 1}: " + _brief(spec, metrics))
            if s.profile and spec.profile and profile_pid is not None:
                self._profile(spec, once, profile_pid(), res)
        except Exception as exc:  # a broken scenario must not stop the suite
            res.status = "error"
            res.reason = reason_of(exc)
            res.detail["traceback"] = traceback.format_exc()[-4000:]
            self.log(f"    ERROR {res.reason}")
        res.seconds = time.monotonic() - started
        res.detail["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        self.results.append(res)
        return res

    def _profile(
        self,
        spec: ScenarioSpec,
        once: Callable[[], dict[str, float]],
        pid: int,
        res: ScenarioResult,
    ) -> None:
        if self._py_spy is None:
            res.detail["profile_error"] = "py-spy not found (pip install py-spy)"
            return
        out = self.profile_dir / f"{spec.name}.{time.strftime('%Y%m%dT%H%M%S')}.txt"
        recorder = PySpyRecorder(self._py_spy, pid, out)
        try:
            once()
        finally:
            try:
                summary = recorder.stop()
            except RuntimeError as exc:
                res.detail["profile_error"] = str(exc)
            else:
                res.detail["profile"] = {"file": str(out), **summary.as_dict()}
                self.log(f"    profiled: {summary.samples} samples -> {out}")

    def wait_idle(self, timeout: float, busy_limit: float = 25.0) -> bool:
        """Wait until other work on the machine leaves the CPUs mostly idle (system-wide
        CPU busy under ``busy_limit`` percent over two seconds), at most ``timeout``
        seconds; returns whether it did. On a shared machine this keeps a neighbour's test
        run out of the numbers."""
        deadline = time.monotonic() + timeout
        while True:
            busy = psutil.cpu_percent(interval=2.0)
            if busy < busy_limit:
                return True
            if time.monotonic() >= deadline:
                self.log(f"  machine still busy ({busy:.0f}% CPU): measuring anyway")
                return False
            self.log(f"  machine busy ({busy:.0f}% CPU): waiting")

    # -- brokers -------------------------------------------------------------------------

    @contextlib.contextmanager
    def spool_broker(
        self,
        label: str,
        *,
        tuning: str = BENCH_TUNING,
        transport_extra: str = "",
        sow: str = "",
        actions: str = "",
    ) -> Iterator[SpoolProcess]:
        """A fresh broker (own data directory) for a family; stopped at the end.

        Args:
            tuning: the ``<Tuning>`` elements (default: the deep buffer of BENCH_TUNING).
            transport_extra: more elements of the websocket transport.
            sow: ``SOW/Topic`` elements of its configuration, if any.
            actions: ``Action`` elements of its configuration, if any.

        Raises:
            RuntimeError / TimeoutError: it did not start (the message holds its log).
        """
        d = self.workdir / f"spool-{label}"
        xml = config_xml(
            d / "data",
            name=f"bench-{label}",
            admin_interval="10s",
            tuning=tuning,
            transport_extra=transport_extra,
            sow=sow,
            actions=actions,
        )
        proc = SpoolProcess(d, xml)
        proc.start(timeout=120)
        try:
            yield proc
        finally:
            code = proc.stop()
            if code not in (0, None, -signal.SIGTERM):  # uvicorn re-raises SIGTERM
                self.log(f"  broker {label} exited with {code}; log: {proc.log_path}")

    @contextlib.contextmanager
    def spool_tls_broker(self, label: str) -> Iterator[tuple[SpoolProcess, str]]:
        """A fresh broker serving TLS (a throwaway CA's certificate for 127.0.0.1), and the
        CA file its clients verify it with; stopped at the end."""
        d = self.workdir / f"spool-{label}"
        pki = TestCA(d / "pki", "bench")
        pair = pki.issue_server("server")
        xml = config_xml(
            d / "data",
            name=f"bench-{label}",
            admin_interval="10s",
            tuning=BENCH_TUNING,
            admin_extra=(
                f"<Certificate>{pair.cert_path}</Certificate>"
                f"<PrivateKey>{pair.key_path}</PrivateKey>"
            ),
        )
        proc = SpoolProcess(d, xml, tls=True)
        proc.start(timeout=120)
        try:
            yield proc, str(pki.cert_path)
        finally:
            code = proc.stop()
            if code not in (0, None, -signal.SIGTERM):
                self.log(f"  broker {label} exited with {code}; log: {proc.log_path}")


def _brief(spec: ScenarioSpec, metrics: dict[str, float]) -> str:
    names = spec.headline or tuple(metrics)
    return ", ".join(f"{n}={format_number(metrics[n])}" for n in names if n in metrics)


def reason_of(exc: BaseException) -> str:
    """``Type: last line of the message`` (a worker's traceback ends with the cause)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def _settle_disk() -> None:
    """Write back every dirty page before a run (``sync``).

    A run that fills the page cache (a 1M-message log, a publish burst) leaves the
    kernel writing back for seconds afterwards; the next run's fsyncs would queue behind
    that writeback and measure the previous run. Runs start on a settled disk instead.
    """
    os.sync()
