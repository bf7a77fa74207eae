"""InMemoryMemoryService: what it adds to the contract (tests/unit/memory/test_contract.py)."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.memory import InMemoryMemoryService, in_memory
from tests.unit.memory.test_contract import search, session_with


async def test_scores_are_distinct_shared_words_and_ties_keep_the_order_of_ingestion() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(
        session_with(
            "I like hiking in the mountains",
            "The weather in Lisbon is sunny",
            "Mountains weather today: snow in the mountains",
            "Nothing relevant here",
        )
    )

    assert await search(memory, "Mountains WEATHER forecast") == [
        "Mountains weather today: snow in the mountains",
        "I like hiking in the mountains",
        "The weather in Lisbon is sunny",
    ]


async def test_adding_a_session_again_moves_it_after_the_others() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(session_with("zebras first", session_id="s1"))
    await memory.add_session_to_memory(session_with("zebras second", session_id="s2"))
    await memory.add_session_to_memory(session_with("zebras first again", session_id="s1"))

    assert await search(memory, "zebras") == ["zebras second", "zebras first again"]


# --- bounds (issue 16 target 6) --------------------------------------------------------------


def test_the_default_store_is_bounded() -> None:
    from adk_mesh.memory import memory_service_from_url
    from adk_mesh.memory.in_memory import DEFAULT_MAX_MEMORY_SESSIONS

    for memory in (InMemoryMemoryService(), memory_service_from_url("memory://")):
        assert isinstance(memory, InMemoryMemoryService)
        assert (memory.max_sessions, memory.ttl) == (DEFAULT_MAX_MEMORY_SESSIONS, None)


@pytest.mark.parametrize("kwargs", [{"max_sessions": 0}, {"ttl": 0}])
def test_bad_bounds_are_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        InMemoryMemoryService(**kwargs)


async def test_the_session_added_least_recently_is_forgotten_across_users() -> None:
    memory = InMemoryMemoryService(max_sessions=2)
    await memory.add_session_to_memory(session_with("zebras one", session_id="s1"))
    await memory.add_session_to_memory(session_with("zebras two", session_id="s2", user_id="bob"))
    await memory.add_session_to_memory(session_with("zebras one again", session_id="s1"))
    await memory.add_session_to_memory(session_with("zebras three", session_id="s3"))

    assert await search(memory, "zebras") == ["zebras one again", "zebras three"]
    assert await search(memory, "zebras", user_id="bob") == []
    assert list(memory._entries) == [("app", "alice")]


async def test_sessions_not_added_again_for_the_ttl_are_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [10.0]
    monkeypatch.setattr(in_memory, "_monotonic", lambda: now[0])
    memory = InMemoryMemoryService(ttl=60)
    await memory.add_session_to_memory(session_with("zebras old", session_id="s1"))
    now[0] += 40
    await memory.add_session_to_memory(session_with("zebras new", session_id="s2"))
    now[0] += 30
    assert await search(memory, "zebras") == ["zebras new"]


async def test_adding_again_indexes_only_new_events_and_drops_missing_ones() -> None:
    memory = InMemoryMemoryService()
    session = session_with("zebras first", "zebras second")
    await memory.add_session_to_memory(session)
    first = memory._entries[("app", "alice")]["s1"]
    session.events.append(session_with("zebras third").events[0])
    await memory.add_session_to_memory(session)
    again = memory._entries[("app", "alice")]["s1"]
    assert [again[key] is first[key] for key in first] == [True, True]
    assert await search(memory, "zebras") == ["zebras first", "zebras second", "zebras third"]

    del session.events[0]
    await memory.add_session_to_memory(session)
    assert await search(memory, "zebras") == ["zebras second", "zebras third"]


async def test_events_whose_ids_do_not_tell_them_apart_are_all_indexed() -> None:
    memory = InMemoryMemoryService()
    session = session_with("zebras first", "zebras second", "zebras third")
    session.events[1].id = session.events[0].id
    session.events[2].id = ""
    await memory.add_session_to_memory(session)
    await memory.add_session_to_memory(session)
    assert await search(memory, "zebras") == ["zebras first", "zebras second", "zebras third"]
