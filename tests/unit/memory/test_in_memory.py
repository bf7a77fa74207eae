"""InMemoryMemoryService: keyword recall scoped by app and user."""

from __future__ import annotations

import adk_mesh.memory
from adk_mesh.memory import InMemoryMemoryService, MemoryEntry
from adk_mesh.sessions import Session
from adk_mesh.types import Content, Event, Part


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


def entry_texts(entries: list[MemoryEntry]) -> list[str]:
    return [entry.content.text for entry in entries]


def test_public_exports() -> None:
    assert sorted(adk_mesh.memory.__all__) == [
        "InMemoryMemoryService",
        "MemoryEntry",
        "MemoryService",
    ]


async def test_search_finds_events_sharing_words_best_first() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(
        session_with(
            "I like hiking in the mountains",
            "The weather in Lisbon is sunny",
            "Mountains weather today: snow in the mountains",
            "Nothing relevant here",
        )
    )

    found = await memory.search_memory(
        app_name="app", user_id="alice", query="Mountains WEATHER forecast"
    )

    assert entry_texts(found) == [
        "Mountains weather today: snow in the mountains",
        "I like hiking in the mountains",
        "The weather in Lisbon is sunny",
    ]


async def test_entries_carry_author_time_and_session() -> None:
    memory = InMemoryMemoryService()
    session = session_with("remember the blue door", session_id="s42")
    await memory.add_session_to_memory(session)

    (entry,) = await memory.search_memory(app_name="app", user_id="alice", query="door")

    assert entry.session_id == "s42"
    assert entry.author == "user"
    assert entry.timestamp == session.events[0].timestamp
    assert entry.content == session.events[0].content


async def test_words_match_case_insensitively_and_as_whole_words() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(session_with("Café com leite, por favor!", "catalogue"))

    assert entry_texts(
        await memory.search_memory(app_name="app", user_id="alice", query="CAFÉ?")
    ) == ["Café com leite, por favor!"]
    assert await memory.search_memory(app_name="app", user_id="alice", query="cat") == []


async def test_search_is_scoped_by_app_and_user() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(session_with("secret plan", user_id="alice"))
    await memory.add_session_to_memory(session_with("secret recipe", user_id="bob"))
    await memory.add_session_to_memory(session_with("secret code", app_name="other"))

    assert entry_texts(
        await memory.search_memory(app_name="app", user_id="alice", query="secret")
    ) == ["secret plan"]
    assert entry_texts(
        await memory.search_memory(app_name="app", user_id="bob", query="secret")
    ) == ["secret recipe"]
    assert await memory.search_memory(app_name="app", user_id="carol", query="secret") == []


async def test_searches_span_the_users_sessions() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(session_with("trip to Porto", session_id="s1"))
    await memory.add_session_to_memory(session_with("Porto wine tasting", session_id="s2"))

    found = await memory.search_memory(app_name="app", user_id="alice", query="porto")

    assert sorted(entry.session_id or "" for entry in found) == ["s1", "s2"]


async def test_adding_a_session_again_replaces_its_entries() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(session_with("old fact about zebras"))
    await memory.add_session_to_memory(session_with("new fact about zebras", "zebras run"))

    found = await memory.search_memory(app_name="app", user_id="alice", query="zebras fact")

    assert entry_texts(found) == ["new fact about zebras", "zebras run"]


async def test_events_without_text_are_not_ingested() -> None:
    memory = InMemoryMemoryService()
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

    found = await memory.search_memory(app_name="app", user_id="alice", query="tool")

    assert entry_texts(found) == ["call the tool"]


async def test_empty_or_wordless_queries_find_nothing() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(session_with("anything at all"))

    assert await memory.search_memory(app_name="app", user_id="alice", query="") == []
    assert await memory.search_memory(app_name="app", user_id="alice", query="?! ...") == []


async def test_entries_share_nothing_with_the_session_or_callers() -> None:
    memory = InMemoryMemoryService()
    session = session_with("keep this text")
    await memory.add_session_to_memory(session)
    content = session.events[0].content
    assert content is not None
    content.parts[0].text = "mutated in the session"

    (entry,) = await memory.search_memory(app_name="app", user_id="alice", query="keep")
    entry.content.parts[0].text = "mutated by a caller"

    (again,) = await memory.search_memory(app_name="app", user_id="alice", query="keep")
    assert again.content.text == "keep this text"
