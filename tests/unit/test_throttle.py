"""The logon throttle (server/throttle.py) against an oracle, the logon guard's counters
and events (server/logons.py), and the bounded password-check pool (server/scryptpool.py).

The oracle keeps every failure ever recorded and answers by brute force: a key is refused
while at least ``limit`` of its failures (less those a success forgave) are younger than
the window, until the one that brings the count below the limit leaves it.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from spool.server.clock import VirtualClock
from spool.server.logons import LogonGuard, LogonPath
from spool.server.scryptpool import PoolBusy, ScryptPool
from spool.server.throttle import LogonThrottle, ThrottlePolicy, address_key

POLICY = ThrottlePolicy(per_address=4, per_user=5, window=60.0, per_pair=2)
HOSTS = ("10.0.0.1", "10.0.0.2", "2001:db8::1", "2001:db8::2", "::ffff:10.0.0.1")
USERS = ("ops", "feed", None)


@dataclass
class Oracle:
    policy: ThrottlePolicy
    failures: list[tuple[float, str, str]] = field(default_factory=list)  # (t, addr, user)

    def _wait(self, now: float, entries: list[float], limit: int) -> float:
        live = sorted(t for t in entries if now - t < self.policy.window)
        if len(live) < limit:
            return 0.0
        return self.policy.window - (now - live[len(live) - limit])

    def retry_after(self, now: float, host: str, user: str | None) -> float:
        a = address_key(host)
        wait = self._wait(
            now, [t for t, fa, _ in self.failures if fa == a], self.policy.per_address
        )
        pair = [t for t, fa, fu in self.failures if (fa, fu) == (a, user or "")]
        wait = max(wait, self._wait(now, pair, self.policy.per_pair))
        if user:
            by_user = [t for t, _, fu in self.failures if fu == user]
            wait = max(wait, self._wait(now, by_user, self.policy.per_user))
        return wait

    def failed(self, now: float, host: str, user: str | None) -> None:
        self.failures.append((now, address_key(host), user or ""))

    def succeeded(self, host: str, user: str) -> None:
        a = address_key(host)
        self.failures = [f for f in self.failures if (f[1], f[2]) != (a, user)]


class ThrottleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = VirtualClock()
        self.now = 0.0
        self.throttle = LogonThrottle(POLICY, self.clock)
        self.oracle = Oracle(POLICY)

    @rule(seconds=st.sampled_from([0.0, 0.5, 1.0, 7.5, 30.0, 59.9, 60.0, 61.0]))
    def advance(self, seconds: float) -> None:
        asyncio.run(self.clock.advance(seconds))
        self.now += seconds

    @rule(host=st.sampled_from(HOSTS), user=st.sampled_from(USERS))
    def attempt_fails(self, host: str, user: str | None) -> None:
        # a path only records a failure for an attempt it was allowed to check
        if self.throttle.retry_after(host, user) == 0.0:
            self.throttle.failed(host, user)
            self.oracle.failed(self.now, host, user)

    @rule(host=st.sampled_from(HOSTS), user=st.sampled_from(("ops", "feed")))
    def attempt_succeeds(self, host: str, user: str) -> None:
        if self.throttle.retry_after(host, user) == 0.0:
            self.throttle.succeeded(host, user)
            self.oracle.succeeded(host, user)

    @invariant()
    def same_answers(self) -> None:
        for host in HOSTS:
            for user in USERS:
                got = self.throttle.retry_after(host, user)
                want = self.oracle.retry_after(self.now, host, user)
                assert got == pytest.approx(want), (host, user)


TestThrottleMachine = ThrottleMachine.TestCase
TestThrottleMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_per_address_limit_with_exact_retry_after() -> None:
    clock = VirtualClock()
    throttle = LogonThrottle(ThrottlePolicy(per_address=3, per_user=100, window=60), clock)
    for _ in range(3):
        assert throttle.retry_after("1.2.3.4", "ops") == 0.0
        throttle.failed("1.2.3.4", "ops")
    assert throttle.retry_after("1.2.3.4", "ops") == 60.0
    assert throttle.retry_after("1.2.3.4", "anyone") == 60.0  # the address is refused
    assert throttle.retry_after("5.6.7.8", "ops") == 0.0  # ops elsewhere is not
    asyncio.run(clock.advance(30))
    assert throttle.retry_after("1.2.3.4", None) == 30.0
    asyncio.run(clock.advance(30))
    assert throttle.retry_after("1.2.3.4", None) == 0.0
    assert throttle.blocked() == (0, 0)


def test_per_user_limit_spans_addresses() -> None:
    clock = VirtualClock()
    throttle = LogonThrottle(ThrottlePolicy(per_address=10, per_user=4, window=60), clock)
    for i in range(4):
        throttle.failed(f"10.0.0.{i}", "ops")
    assert throttle.retry_after("10.9.9.9", "ops") == 60.0
    assert throttle.retry_after("10.9.9.9", "feed") == 0.0
    assert throttle.blocked() == (0, 1)


def test_a_success_forgives_only_its_own_pair() -> None:
    clock = VirtualClock()
    throttle = LogonThrottle(ThrottlePolicy(per_address=3, per_user=30, window=60), clock)
    throttle.failed("1.1.1.1", "ops")
    throttle.failed("1.1.1.1", "ops")
    throttle.failed("1.1.1.1", "victim")
    assert throttle.retry_after("1.1.1.1", None) == 60.0
    # the guesser logs on as itself: its own typos go, the guesses at "victim" stay
    throttle.succeeded("1.1.1.1", "ops")
    assert throttle.retry_after("1.1.1.1", None) == 0.0
    throttle.failed("1.1.1.1", "victim")
    throttle.failed("1.1.1.1", "victim")
    assert throttle.retry_after("1.1.1.1", None) == 60.0


def test_ipv6_counts_by_64_and_mapped_ipv4_as_ipv4() -> None:
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::9")
    assert address_key("2001:db8:1:2::1") != address_key("2001:db8:1:3::1")
    assert address_key("::ffff:192.0.2.1") == "192.0.2.1"
    assert address_key("[::1]") == "::/64"
    assert address_key("not-an-ip") == "not-an-ip"


def test_memory_is_bounded() -> None:
    clock = VirtualClock()
    throttle = LogonThrottle(
        ThrottlePolicy(per_address=1, per_user=1, window=60), clock, max_keys=5
    )
    for i in range(20):
        throttle.failed(f"10.0.1.{i}", f"user{i}")
    assert throttle.blocked() == (5, 5)
    assert throttle.retry_after("10.0.1.19", None) > 0
    assert throttle.retry_after("10.0.1.0", None) == 0.0  # the oldest went first


class Events:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, str, dict[str, object]]] = []

    def emit(self, level: str, category: str, event: str, **fields: object) -> None:
        self.lines.append((level, category, event, fields))


def test_guard_counts_per_path_and_announces_a_refusal_once() -> None:
    clock = VirtualClock()
    events = Events()
    guard = LogonGuard(LogonThrottle(ThrottlePolicy(2, 100, 60), clock), events, clock)
    paths: tuple[LogonPath, ...] = ("websocket", "dashboard")
    for path in paths:  # both paths feed one throttle
        assert guard.admit(path, "1.2.3.4", "ops") == 0.0
        guard.failed(path, "1.2.3.4", "ops")
    for _ in range(50):
        assert guard.admit("websocket", "1.2.3.4", "ops") == 60.0
    assert guard.admit("dashboard", "1.2.3.4", "ops") == 60.0
    # a replication link's logon has a budget of its own
    assert guard.admit("replication", "1.2.3.4", "ops") == 0.0
    c = guard.counters()
    assert c["failures"] == {"websocket": 1, "dashboard": 1, "replication": 0}
    assert c["refused"] == {"websocket": 50, "dashboard": 1, "replication": 0}
    assert c["blocked_addresses"] == 1
    throttled = [e for e in events.lines if e[2] == "logon_throttled"]
    assert len(throttled) == 1 and throttled[0][3]["retry_after"] == 60.0
    asyncio.run(clock.advance(60))
    assert guard.admit("websocket", "1.2.3.4", "ops") == 0.0
    guard.succeeded("websocket", "1.2.3.4", "ops")
    assert guard.counters()["succeeded"]["websocket"] == 1


def test_pool_bounds_threads_and_waiting_checks() -> None:
    pool = ScryptPool(threads=1, max_pending=3)
    gate = threading.Event()
    running: list[int] = []
    peak = 0
    lock = threading.Lock()

    def check(i: int) -> int:
        nonlocal peak
        with lock:
            running.append(i)
            peak = max(peak, len(running))
        gate.wait(5)
        with lock:
            running.remove(i)
        return i

    async def main() -> None:
        tasks = [asyncio.create_task(pool.run(lambda i=i: check(i))) for i in range(3)]
        await asyncio.sleep(0)
        assert pool.pending == 3
        with pytest.raises(PoolBusy) as busy:
            await pool.run(lambda: check(99))
        assert busy.value.retry_after > 0
        gate.set()
        assert await asyncio.gather(*tasks) == [0, 1, 2]

    asyncio.run(main())
    pool.close()
    assert peak == 1  # one thread: checks never overlap
    assert (pool.checks, pool.refused, pool.pending) == (3, 1, 0)


def test_one_peer_with_wrong_credentials_does_not_lock_out_its_address() -> None:
    """A misconfigured program on a shared address uses up its own pair's budget; the
    other users behind that address still log on, up to the address's ceiling."""
    clock = VirtualClock()
    throttle = LogonThrottle(
        ThrottlePolicy(per_address=100, per_user=30, window=60, per_pair=10), clock
    )
    for _ in range(10):
        assert throttle.retry_after("127.0.0.1", None) == 0.0
        throttle.failed("127.0.0.1", None)  # a peer with no credentials at all
    assert throttle.retry_after("127.0.0.1", None) == 60.0
    assert throttle.retry_after("127.0.0.1", "ops") == 0.0
    assert throttle.retry_after("127.0.0.1", "feed") == 0.0
    assert throttle.blocked() == (1, 0)
    # a guesser trying many names from one address meets the ceiling
    for i in range(90):
        throttle.failed("127.0.0.1", f"name{i}")
    assert throttle.retry_after("127.0.0.1", "ops") == 60.0


def test_replication_links_have_a_budget_of_their_own() -> None:
    clock = VirtualClock()
    policy = ThrottlePolicy(per_address=3, per_user=3, window=60, per_pair=3)
    guard = LogonGuard(LogonThrottle(policy, clock), Events(), clock)
    for _ in range(3):
        guard.failed("replication", "127.0.0.1", None)
    assert guard.admit("replication", "127.0.0.1", None) > 0
    # the clients of that address are not refused, whatever their name
    assert guard.admit("websocket", "127.0.0.1", None) == 0.0
    assert guard.admit("dashboard", "127.0.0.1", "ops") == 0.0
    # and a guesser on the websocket does not lock a replication link out
    for _ in range(3):
        guard.failed("websocket", "10.0.0.9", "repl")
    assert guard.admit("websocket", "10.0.0.9", "repl") > 0
    assert guard.admit("replication", "10.0.0.9", "repl") == 0.0
    assert guard.counters()["blocked_addresses"] == 2
