"""The bound on per-client series: examples, then the rule checked over random histories."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from spool.server.stats.clientseries import ClientSeries, group_of

CLIENT_KEYS = (
    "msgs_in", "msgs_out", "bytes_in", "bytes_out", "msgs_in_rate", "msgs_out_rate",
    "bytes_in_rate", "bytes_out_rate", "queue_depth",
)  # fmt: skip


def tick_values(clients: dict[str, set[str]]) -> dict[str, float]:
    """One tick as the sampler sees it: instance series, each connected client's nine,
    one per subscription."""
    values = {"instance/msgs_in": 1.0, "topics/t/msgs_in": 2.0}
    for client, subs in clients.items():
        values.update({f"clients/{client}/{key}": 0.0 for key in CLIENT_KEYS})
        values.update({f"subscriptions/{client}/{sub}/seconds_behind": 0.0 for sub in subs})
    return values


def test_group_of() -> None:
    assert group_of("clients/a%2Fb/msgs_in") == "clients/a%2Fb"
    assert group_of("subscriptions/c/s1/seconds_behind") == "subscriptions/c/s1"
    assert group_of("instance/msgs_in") is None
    assert group_of("topics/clients/msgs_in") is None
    assert group_of("clients/short") is None


def test_a_connected_client_is_kept_however_long() -> None:
    series = ClientSeries(retention=60.0, limit=100)
    for t in range(0, 100_000, 10):
        got = series.admit(float(t), tick_values({"feed": {"s"}}))
        assert got.expired == [] and got.refused == []
    assert series.groups() == {"clients/feed": 99_990.0, "subscriptions/feed/s": 99_990.0}


def test_a_disconnected_client_goes_after_the_retention() -> None:
    series = ClientSeries(retention=60.0, limit=100)
    series.admit(0.0, tick_values({"cli": set(), "feed": set()}))
    assert series.admit(50.0, tick_values({"feed": set()})).expired == []
    expired = series.admit(60.0, tick_values({"feed": set()})).expired
    assert expired == sorted(f"clients/cli/{key}" for key in CLIENT_KEYS)
    assert list(series.groups()) == ["clients/feed"]
    assert series.count == 9


def test_a_flood_keeps_the_limit_and_pushes_out_the_oldest_idle_first() -> None:
    series = ClientSeries(retention=3600.0, limit=30)  # three clients' worth
    series.admit(0.0, tick_values({"feed": set()}))
    for i in range(1, 50):  # a short-lived client per tick, feed connected throughout
        got = series.admit(float(i), tick_values({"feed": set(), f"q{i:02}": set()}))
        assert got.refused == [] and series.count <= 30
    assert series.groups() == {"clients/feed": 49.0, "clients/q48": 48.0, "clients/q49": 49.0}


def test_live_clients_filling_the_limit_keep_newcomers_out() -> None:
    series = ClientSeries(retention=3600.0, limit=20)
    series.admit(0.0, tick_values({"a": set(), "b": set()}))
    got = series.admit(10.0, tick_values({"a": set(), "b": set(), "c": set()}))
    assert got.refused == ["clients/c"] and got.expired == []
    assert not any(p.startswith("clients/c/") for p in got.values)
    assert got.values["instance/msgs_in"] == 1.0
    # once b leaves and its series may go, c gets the room
    got = series.admit(20.0, tick_values({"a": set(), "c": set()}))
    assert got.refused == [] and got.expired == sorted(f"clients/b/{k}" for k in CLIENT_KEYS)


def test_restore_takes_the_newest_sample_of_each_group() -> None:
    series = ClientSeries(retention=100.0, limit=100)
    series.restore(
        [("clients/a/msgs_in", 5.0), ("clients/a/msgs_out", 9.0), ("instance/msgs_in", 1.0)]
    )
    assert series.groups() == {"clients/a": 9.0} and series.count == 2
    assert series.admit(108.0, {}).expired == []
    assert series.admit(109.0, {}).expired == ["clients/a/msgs_in", "clients/a/msgs_out"]


NAMES = [f"c{i}" for i in range(8)]
SUBS = ["s1", "s2"]
ticks = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=40),  # seconds since the previous tick
        st.dictionaries(st.sampled_from(NAMES), st.sets(st.sampled_from(SUBS)), max_size=6),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    retention=st.integers(min_value=0, max_value=120),
    limit=st.integers(min_value=0, max_value=60),
    history=ticks,
)
def test_the_rule_over_random_histories(
    retention: int, limit: int, history: list[tuple[int, dict[str, set[str]]]]
) -> None:
    series = ClientSeries(float(retention), limit)
    db: set[str] = set()  # the per-client series the database holds, by the sampler's hand
    now = 0.0
    for step, clients in history:
        now += step
        values = tick_values(clients)
        live = {g for p in values if (g := group_of(p)) is not None}
        before = series.groups()
        got = series.admit(now, values)

        # the database: deletions first, then the tick's write
        db -= set(got.expired)
        db |= {p for p in got.values if group_of(p) is not None}
        assert series.count == len(db) <= limit
        assert {group_of(p) for p in db} == set(series.groups())
        # every other series passes untouched
        assert {p: v for p, v in got.values.items() if group_of(p) is None} == {
            "instance/msgs_in": 1.0,
            "topics/t/msgs_in": 2.0,
        }
        # live groups are never deleted; a group kept before is never refused
        expired_groups = {group_of(p) for p in got.expired}
        assert not expired_groups & live
        assert not set(got.refused) & set(before)
        assert set(got.refused) <= live
        # idle groups kept are within the retention, and idle ones went oldest first
        kept_idle = {g: t for g, t in series.groups().items() if g not in live}
        assert all(now - t < retention for t in kept_idle.values())
        for gone in expired_groups:
            assert all(before[gone] <= t for t in kept_idle.values())
        # a newcomer is refused only when every idle group already made room
        if got.refused:
            assert not kept_idle
        # what was written is what the groups kept say
        for group, seen in series.groups().items():
            assert (seen == now) == (group in live)
