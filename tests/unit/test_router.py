"""The subscription index against an oracle (a plain list scanned per topic)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.protocol.topic import compile_topic, is_regex_topic
from spool.server.router import Router


@dataclass(eq=False)
class FakeSub:
    topic: str
    pattern: re.Pattern[str] | None


TOPICS = ["orders", "orders.eu", "audit/login", "audit/logout", "md.ibm", "x"]
SUB_TOPICS = [*TOPICS, "^orders", "^audit/", "log(in|out)$", ".*", "^md\\.", "zzz"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(SUB_TOPICS)),
        st.tuples(st.just("remove"), st.integers(min_value=0, max_value=30)),
        st.tuples(st.just("match"), st.sampled_from(TOPICS)),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(ops)
def test_router_agrees_with_oracle(operations: list[tuple[str, object]]) -> None:
    router = Router()
    live: list[FakeSub] = []
    for op, arg in operations:
        if op == "add":
            assert isinstance(arg, str)
            sub = FakeSub(arg, compile_topic(arg) if is_regex_topic(arg) else None)
            router.add(sub)  # type: ignore[arg-type]
            live.append(sub)
        elif op == "remove" and live:
            assert isinstance(arg, int)
            sub = live.pop(arg % len(live))
            router.remove(sub)  # type: ignore[arg-type]
        elif op == "match":
            assert isinstance(arg, str)
            expected = {
                id(s)
                for s in live
                if (s.pattern.test(arg) if s.pattern is not None else s.topic == arg)
            }
            got = [id(s) for s in router.match(arg)]
            assert len(got) == len(set(got)), "no subscription twice"
            assert set(got) == expected
        assert len(router) == len(live)


def test_removing_unknown_subscription_is_harmless() -> None:
    router = Router()
    router.remove(FakeSub("x", None))  # type: ignore[arg-type]
    router.remove(FakeSub("^x", re.compile("^x")))  # type: ignore[arg-type]
    assert router.match("x") == []
