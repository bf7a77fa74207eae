"""PostgresMemoryService beyond the shared memory contract (``tests/unit/memory``, whose
suite plays on it too): the same words as the SQLite store, deep content, concurrent adds,
migrations, a closed pool.

(Here rather than in ``tests/unit/memory/``, which another suite's owner keeps.)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh.errors import AdkIOError
from adk_mesh.memory.postgres import MAX_QUERY_WORDS, SCHEMA_VERSION, PostgresMemoryService
from adk_mesh.sessions import Session
from adk_mesh.types import Content, Event, FunctionResponse, Part

pytestmark = pytest.mark.postgres


@pytest.fixture
async def memory(postgres_url: str) -> AsyncIterator[PostgresMemoryService]:
    service = PostgresMemoryService(postgres_url)
    try:
        yield service
    finally:
        await service.close()


def session_with(*texts: str, session_id: str = "s1", user_id: str = "alice") -> Session:
    events = [Event.new(author="user", content=Content.from_text("user", text)) for text in texts]
    return Session(id=session_id, app_name="app", user_id=user_id, events=events)


async def search(memory: PostgresMemoryService, query: str) -> list[str]:
    found = await memory.search_memory(app_name="app", user_id="alice", query=query)
    return [entry.content.text for entry in found]


async def test_words_are_stemmed_and_diacritics_and_case_ignored(
    memory: PostgresMemoryService,
) -> None:
    await memory.add_session_to_memory(
        session_with("We went hiking near the café", "São Paulo has great coffee")
    )

    assert await search(memory, "hike") == ["We went hiking near the café"]
    assert await search(memory, "CAFE") == ["We went hiking near the café"]
    assert await search(memory, "SAO paulo") == ["São Paulo has great coffee"]
    # No stop words: every word counts, as in the SQLite store.
    assert await search(memory, "the") == ["We went hiking near the café"]


async def test_scripts_without_spaces_and_greek_are_searchable(
    memory: PostgresMemoryService,
) -> None:
    await memory.add_session_to_memory(session_with("東京 タワー", "Ελληνικά γράμματα"))

    assert await search(memory, "東京") == ["東京 タワー"]
    assert await search(memory, "ΕΛΛΗΝΙΚΆ") == ["Ελληνικά γράμματα"]
    assert await search(memory, "🍊") == []


async def test_only_the_first_distinct_words_of_a_long_query_count(
    memory: PostgresMemoryService,
) -> None:
    await memory.add_session_to_memory(session_with("needle early", "needle late"))
    filler = " ".join(f"w{index}" for index in range(MAX_QUERY_WORDS - 1))

    assert await search(memory, f"early {filler} {filler} late") == ["needle early"]


async def test_text_with_nul_characters_is_stored_and_found(
    memory: PostgresMemoryService,
) -> None:
    await memory.add_session_to_memory(session_with("before\x00after"))

    assert await search(memory, "after") == ["before\x00after"]


async def test_content_nested_deeply_reads_back(memory: PostgresMemoryService) -> None:
    value: Any = {"leaf": 1}
    for _ in range(230):
        value = {"k": value}
    content = Content(
        role="model",
        parts=[
            Part(text="the deep answer"),
            Part(function_response=FunctionResponse(id="c1", name="dig", response=value)),
        ],
    )
    session = Session(
        id="s1", app_name="app", user_id="alice", events=[Event.new(author="a", content=content)]
    )
    await memory.add_session_to_memory(session)

    (entry,) = await memory.search_memory(app_name="app", user_id="alice", query="deep")

    assert entry.content == content


async def test_concurrent_adds_of_one_session_leave_one_set_of_entries(
    memory: PostgresMemoryService,
) -> None:
    await asyncio.gather(
        *(
            memory.add_session_to_memory(session_with(f"version {index} of the zebra story"))
            for index in range(10)
        )
    )

    found = await search(memory, "zebra")

    assert len(found) == 1


async def test_a_closed_service_refuses_calls_and_close_is_idempotent(
    memory: PostgresMemoryService,
) -> None:
    await memory.add_session_to_memory(session_with("something"))
    await memory.close()
    await memory.close()

    with pytest.raises(AdkIOError, match="closed"):
        await search(memory, "something")
    with pytest.raises(AdkIOError, match="closed"):
        await search(memory, "")
    with pytest.raises(AdkIOError, match="closed"):
        await memory.add_session_to_memory(session_with("more"))


async def test_migrate_reports_the_schema_version(postgres_url: str) -> None:
    service = PostgresMemoryService(postgres_url, migrate=False)
    try:
        assert await service.migrate() == SCHEMA_VERSION
        assert await service.migrate() == SCHEMA_VERSION
        await service.add_session_to_memory(session_with("migrated first"))
    finally:
        await service.close()
