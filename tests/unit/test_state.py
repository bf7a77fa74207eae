"""Session state: key scopes, splitting a delta by scope, and the State view."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh.state import (
    ScopedDelta,
    State,
    StateScope,
    merge_scoped_state,
    scope_of,
    split_by_scope,
)


@pytest.mark.parametrize(
    ("key", "scope"),
    [
        ("app:theme", StateScope.APP),
        ("user:name", StateScope.USER),
        ("temp:scratch", StateScope.TEMP),
        ("cart", StateScope.SESSION),
        ("", StateScope.SESSION),
        ("app:", StateScope.APP),
        # Only a leading prefix counts, and prefixes are case-sensitive.
        ("my_app:x", StateScope.SESSION),
        ("App:x", StateScope.SESSION),
        ("app", StateScope.SESSION),
        ("user:app:x", StateScope.USER),
    ],
)
def test_scope_of(key: str, scope: StateScope) -> None:
    assert scope_of(key) is scope


def test_split_by_scope_strips_app_and_user_prefixes_only() -> None:
    delta = {
        "app:theme": "dark",
        "user:name": "Ada",
        "user:app:nested": 1,
        "temp:scratch": [1],
        "cart": {"items": 2},
        "": None,
    }
    assert split_by_scope(delta) == ScopedDelta(
        app={"theme": "dark"},
        user={"name": "Ada", "app:nested": 1},
        session={"cart": {"items": 2}, "": None},
        temp={"temp:scratch": [1]},
    )


def test_split_by_scope_of_nothing() -> None:
    assert split_by_scope({}) == ScopedDelta()


def test_merge_scoped_state_prefixes_app_and_user_keys() -> None:
    merged = merge_scoped_state(
        app={"theme": "dark"}, user={"name": "Ada"}, session={"cart": 2, "app:theme": "stale"}
    )
    # The app store is authoritative for app: keys, even if a session copy exists.
    assert merged == {"cart": 2, "app:theme": "dark", "user:name": "Ada"}


def test_split_then_merge_restores_the_persisted_keys() -> None:
    delta = {"app:a": 1, "user:b": 2, "c": 3, "temp:d": 4}
    scoped = split_by_scope(delta)
    assert merge_scoped_state(scoped.app, scoped.user, scoped.session) == {
        "app:a": 1,
        "user:b": 2,
        "c": 3,
    }


# --- State view ----------------------------------------------------------------------------


def _state(value: dict[str, Any] | None = None, delta: dict[str, Any] | None = None) -> State:
    return State(value if value is not None else {}, delta if delta is not None else {})


def test_reads_see_the_delta_first() -> None:
    state = _state({"a": 1, "b": 2}, {"a": 10})
    assert state["a"] == 10
    assert state["b"] == 2
    assert state.get("missing") is None
    assert state.get("a") == 10
    with pytest.raises(KeyError):
        state["missing"]


def test_writes_are_recorded_in_the_delta_and_visible_at_once() -> None:
    value: dict[str, Any] = {"a": 1}
    delta: dict[str, Any] = {}
    state = State(value, delta)
    assert not state.has_delta()

    state["a"] = 2
    state["temp:t"] = None
    assert state["a"] == 2
    assert state["temp:t"] is None
    assert "temp:t" in state
    assert state.delta == {"a": 2, "temp:t": None}
    assert state.delta is delta
    assert state.has_delta()
    assert state.to_dict() == {"a": 2, "temp:t": None}


def test_setdefault_and_update_go_through_the_delta() -> None:
    state = _state({"a": 1})
    assert state.setdefault("a", 5) == 1
    assert state.setdefault("b", 5) == 5
    state.update({"c": 3})
    assert state.delta == {"b": 5, "c": 3}


def test_contains_sees_both_layers() -> None:
    state = _state({"a": 1}, {"b": 2})
    assert "a" in state
    assert "b" in state
    assert "c" not in state


def test_iteration_and_len_count_each_key_once() -> None:
    state = _state({"a": 1, "b": 2}, {"b": 20, "c": 30})
    assert list(state) == ["a", "b", "c"]
    assert len(state) == 3
    assert dict(state.items()) == {"a": 1, "b": 20, "c": 30}
    assert state.to_dict() == {"a": 1, "b": 20, "c": 30}
    assert len(_state()) == 0
    assert list(_state()) == []


def test_delete_is_refused() -> None:
    state = _state({"a": 1}, {"b": 2})
    with pytest.raises(TypeError, match="cannot be deleted"):
        del state["a"]
    with pytest.raises(TypeError):
        state.pop("b")
    with pytest.raises(TypeError):
        state.clear()
    assert state.to_dict() == {"a": 1, "b": 2}
