"""delta_publish merges and delta_subscribe diffs, with property tests."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spool.server.sow.delta import diff, merge

leaves = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
names = st.sampled_from(["a", "b", "c", "d"])
values = st.recursive(
    leaves,
    lambda inner: st.dictionaries(names, inner, max_size=3) | st.lists(inner, max_size=2),
    max_leaves=8,
)
docs = st.dictionaries(names, values, max_size=4)


def test_merge_nested_objects_field_by_field() -> None:
    stored = {"id": 1, "px": {"bid": 10, "ask": 11}, "tags": ["a"], "qty": 5}
    update = {"px": {"ask": 12}, "tags": ["b"], "new": True}
    assert merge(stored, update) == {
        "id": 1, "px": {"bid": 10, "ask": 12}, "tags": ["b"], "qty": 5, "new": True,
    }  # fmt: skip
    assert stored["px"] == {"bid": 10, "ask": 11}  # inputs untouched


def test_diff_keeps_changed_fields_and_the_keys() -> None:
    old = {"id": 1, "px": {"bid": 10, "ask": 11}, "qty": 5}
    new = {"id": 1, "px": {"bid": 10, "ask": 12}, "qty": 5}
    assert diff(old, new, (("id",),)) == {"px": {"ask": 12}, "id": 1}
    assert diff(old, old, (("id",),)) == {}


def test_a_dropped_field_needs_the_whole_record() -> None:
    assert diff({"id": 1, "x": 1}, {"id": 1}) is None
    assert diff({"id": 1, "p": {"x": 1}}, {"id": 1, "p": {}}) is None


def test_type_changes_count_as_changes() -> None:
    assert diff({"a": 1}, {"a": 1.0}) == {"a": 1.0}
    assert diff({"a": 1}, {"a": True}) == {"a": True}
    assert diff({"a": [1]}, {"a": [True]}) == {"a": [True]}
    assert diff({"a": [1]}, {"a": [1.0]}) == {"a": [1.0]}


@given(docs, docs)
def test_merging_the_diff_gives_the_new_record(
    old: dict[str, object], new: dict[str, object]
) -> None:
    delta = diff(old, new)
    if delta is None:
        assert any(name not in new for name in old) or any(
            isinstance(old.get(n), dict) and isinstance(new.get(n), dict) for n in new
        )
        return
    assert merge(old, delta) == new


@given(docs, docs)
def test_merge_then_diff_is_within_the_update(
    old: dict[str, object], upd: dict[str, object]
) -> None:
    merged = merge(old, upd)
    delta = diff(old, merged)
    assert delta is not None  # a merge never drops a field
    assert merge(old, delta) == merged
