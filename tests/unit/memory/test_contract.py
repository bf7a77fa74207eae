"""The MemoryService contract, played on every backend: in memory, on a real SQLite file and
on a real PostgreSQL server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adk_mesh.memory import InMemoryMemoryService, MemoryEntry, MemoryService, SqliteMemoryService
from adk_mesh.sessions import Session
from adk_mesh.types import Content, Event, Part


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryService]:
    """Each memory backend in turn: in memory, on a real SQLite file, and on a real
    PostgreSQL database of the test's own."""
    service: MemoryService
    if request.param == "memory":
        service = InMemoryMemoryService()
    elif request.param == "sqlite":
        service = SqliteMemoryService(tmp_path / "memory.db")
    else:
        from adk_mesh.memory.postgres import PostgresMemoryService

        service = PostgresMemoryService(request.getfixturevalue("postgres_url"))
    try:
        yield service
    finally:
        await service.close()


def session_with(
    *texts: str, session_id: str = "s1", app_name: str = "app", user_id: str = "alice"
) -> Session:
    events = [
        Event.new(
            author="user" if index % 2 == 0 else "agent",
            content=Content.from_text("user" if index % 2 == 0 else "model", text),
        )
        for index, text in enumerate(texts)
    ]
    return Session(id=session_id, app_name=app_name, user_id=user_id, events=events)


def texts(entries: list[MemoryEntry]) -> list[str]:
    return [entry.content.text for entry in entries]


async def search(memory: MemoryService, query: str, user_id: str = "alice") -> list[str]:
    return texts(await memory.search_memory(app_name="app", user_id=user_id, query=query))


async def test_the_entry_sharing_the_most_words_comes_first(memory: MemoryService) -> None:
    await memory.add_session_to_memory(
        session_with(
            "we talked about kayaks yesterday",
            "the harbour was calm",
            "kayaks in the harbour at dawn, a lighthouse beyond",
            "nothing relevant here",
            "plain words about lunch",
            "more words about dinner",
        )
    )

    found = await search(memory, "kayaks harbour lighthouse")

    assert found[0] == "kayaks in the harbour at dawn, a lighthouse beyond"
    assert sorted(found[1:]) == ["the harbour was calm", "we talked about kayaks yesterday"]


async def test_entries_carry_author_time_session_and_content(memory: MemoryService) -> None:
    session = session_with("remember the blue door", session_id="s42")
    await memory.add_session_to_memory(session)

    (entry,) = await memory.search_memory(app_name="app", user_id="alice", query="door")

    assert entry.session_id == "s42"
    assert entry.author == "user"
    assert entry.timestamp == session.events[0].timestamp
    assert entry.content == session.events[0].content


async def test_words_match_without_case_and_as_whole_words(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("Café com leite, por favor!", "catalogue"))

    assert await search(memory, "CAFÉ?") == ["Café com leite, por favor!"]
    assert await search(memory, "LEITE") == ["Café com leite, por favor!"]
    assert await search(memory, "cat") == []


async def test_search_is_scoped_by_app_and_user(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("secret plan", user_id="alice"))
    await memory.add_session_to_memory(session_with("secret recipe", user_id="bob"))
    await memory.add_session_to_memory(session_with("secret code", app_name="other"))

    assert await search(memory, "secret") == ["secret plan"]
    assert await search(memory, "secret", user_id="bob") == ["secret recipe"]
    assert await search(memory, "secret", user_id="carol") == []
    found = await memory.search_memory(app_name="other", user_id="alice", query="secret")
    assert texts(found) == ["secret code"]


async def test_one_session_id_under_two_users_is_two_sessions(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("alpha notes", user_id="alice"))
    await memory.add_session_to_memory(session_with("bravo notes", user_id="bob"))

    assert await search(memory, "notes") == ["alpha notes"]
    assert await search(memory, "notes", user_id="bob") == ["bravo notes"]


async def test_searches_span_the_users_sessions(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("trip to Porto", session_id="s1"))
    await memory.add_session_to_memory(session_with("Porto wine tasting", session_id="s2"))

    found = await memory.search_memory(app_name="app", user_id="alice", query="porto")

    assert sorted(entry.session_id or "" for entry in found) == ["s1", "s2"]


async def test_adding_a_session_again_replaces_its_entries(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("old fact about zebras"))
    await memory.add_session_to_memory(session_with("new fact about zebras", "zebras run"))
    await memory.add_session_to_memory(session_with("zebras elsewhere", session_id="s2"))

    found = await search(memory, "zebras")

    assert sorted(found) == ["new fact about zebras", "zebras elsewhere", "zebras run"]


async def test_adding_a_session_with_no_text_left_forgets_it(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("short lived"))
    await memory.add_session_to_memory(session_with())

    assert await search(memory, "short lived") == []


async def test_events_without_text_are_not_ingested(memory: MemoryService) -> None:
    session = session_with("call the tool")
    session.events.append(
        Event.new(
            author="agent",
            content=Content.from_parts("model", Part.from_function_call("tool", {"q": "tool"})),
        )
    )
    session.events.append(Event.new(author="agent"))
    session.events.append(
        Event.new(author="agent", content=Content(role="model", parts=[Part(text="   ")]))
    )
    await memory.add_session_to_memory(session)

    assert await search(memory, "tool") == ["call the tool"]


async def test_empty_or_wordless_queries_find_nothing(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("anything at all"))

    assert await search(memory, "") == []
    assert await search(memory, "?! ...") == []


@pytest.mark.parametrize(
    "query",
    [
        'the "unbalanced quote',
        "orange AND NOT (",
        "orange OR",
        "NEAR(orange apple, 2)",
        "text: orange*",
        "^orange -apple +pear {scope} : ''",
        "orange'); DROP TABLE memory_entries; --",
        "\\ orange \x00 \U0001f34a",
    ],
)
async def test_what_users_and_models_write_is_searched_as_words(
    memory: MemoryService, query: str
) -> None:
    await memory.add_session_to_memory(session_with("an orange on the table"))

    assert await search(memory, query) == ["an orange on the table"]
    assert await search(memory, "orange") == ["an orange on the table"]


async def test_entries_share_nothing_with_the_session_or_callers(memory: MemoryService) -> None:
    session = session_with("keep this text")
    await memory.add_session_to_memory(session)
    content = session.events[0].content
    assert content is not None
    content.parts[0].text = "mutated in the session"

    (entry,) = await memory.search_memory(app_name="app", user_id="alice", query="keep")
    entry.content.parts[0].text = "mutated by a caller"

    (again,) = await memory.search_memory(app_name="app", user_id="alice", query="keep")
    assert again.content.text == "keep this text"


async def test_close_is_idempotent(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("something"))

    await memory.close()
    await memory.close()
