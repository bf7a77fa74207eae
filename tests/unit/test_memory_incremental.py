"""The SQL memory stores add a session again by changing only what changed: entries of
events already indexed stay as they are, new events are added, events gone are dropped.

(Here rather than in ``tests/unit/memory/``, which another suite's owner keeps.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from pathlib import Path

import pytest

from adk_mesh.memory import MemoryService, SqliteMemoryService
from adk_mesh.memory import sqlite as sqlite_memory
from adk_mesh.sessions import Session
from adk_mesh.types import Content, Event

EntryIds = Callable[[], Awaitable[dict[str, int]]]


def text_event(text: str) -> Event:
    return Event.new(author="user", content=Content.from_text("user", text))


def session_of(*events: Event) -> Session:
    return Session(id="s1", app_name="app", user_id="alice", events=list(events))


async def search(memory: MemoryService, query: str) -> list[str]:
    found = await memory.search_memory(app_name="app", user_id="alice", query=query)
    return [entry.content.text for entry in found]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[MemoryService, EntryIds]]:
    """A SQL memory store, and a reader of its entries: event text -> entry row id."""
    if request.param == "sqlite":
        path = tmp_path / "memory.db"
        memory: MemoryService = SqliteMemoryService(path)

        async def entry_ids() -> dict[str, int]:
            with closing(sqlite3.connect(path)) as connection:
                rows = connection.execute(
                    "SELECT memory_entries.id, text FROM memory_entries "
                    "JOIN memory_index ON memory_index.rowid = memory_entries.id"
                ).fetchall()
            return {text: entry_id for entry_id, text in rows}

    else:
        import asyncpg

        from adk_mesh.memory.postgres import PostgresMemoryService

        url = request.getfixturevalue("postgres_url")
        memory = PostgresMemoryService(url)

        async def entry_ids() -> dict[str, int]:
            connection = await asyncpg.connect(url)
            try:
                rows = await connection.fetch("SELECT seq, event FROM adk_memory_entries")
            finally:
                await connection.close()
            return {Event.model_validate_json(row["event"]).text: row["seq"] for row in rows}

    try:
        yield memory, entry_ids
    finally:
        await memory.close()


async def test_adding_again_indexes_only_new_events_and_drops_gone_ones(
    store: tuple[MemoryService, EntryIds],
) -> None:
    memory, entry_ids = store
    first, second = text_event("zebras first"), text_event("zebras second")
    session = session_of(first, second)
    await memory.add_session_to_memory(session)
    before = await entry_ids()

    session.events.append(text_event("zebras third"))
    await memory.add_session_to_memory(session)
    after = await entry_ids()
    assert {text: after[text] for text in before} == before  # untouched
    assert await search(memory, "zebras") == ["zebras first", "zebras second", "zebras third"]

    del session.events[0]
    await memory.add_session_to_memory(session)
    assert await search(memory, "zebras") == ["zebras second", "zebras third"]
    await memory.add_session_to_memory(session_of())
    assert await search(memory, "zebras") == []


async def test_events_that_ids_do_not_tell_apart_are_indexed_afresh(
    store: tuple[MemoryService, EntryIds],
) -> None:
    memory, _ = store
    twice = text_event("zebras twice")
    await memory.add_session_to_memory(session_of(twice, twice))
    assert await search(memory, "zebras") == ["zebras twice", "zebras twice"]
    nameless = [text_event("zebras a"), text_event("zebras b")]
    for event in nameless:
        event.id = ""
    await memory.add_session_to_memory(session_of(*nameless))
    assert await search(memory, "zebras") == ["zebras a", "zebras b"]
    await memory.add_session_to_memory(session_of(nameless[1]))
    assert await search(memory, "zebras") == ["zebras b"]


async def test_entries_of_a_version_1_file_are_replaced_on_the_next_add(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    old_event = text_event("zebras of old")
    content = Content.from_text("user", "zebras of old").model_dump_json()
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("CREATE TABLE memory_schema (version INTEGER NOT NULL)")
        connection.execute("INSERT INTO memory_schema (version) VALUES (1)")
        for statement in sqlite_memory.MIGRATIONS[0]:
            connection.execute(statement)
        # An entry as version 1 wrote it: no event id.
        cursor = connection.execute(
            "INSERT INTO memory_entries (app_name, user_id, session_id, author, timestamp, "
            "content) VALUES ('app', 'alice', 's1', 'user', ?, ?)",
            (old_event.timestamp.isoformat(), content),
        )
        connection.execute(
            "INSERT INTO memory_index (rowid, scope, text) VALUES (?, ?, ?)",
            (cursor.lastrowid, sqlite_memory._scope("app", "alice"), old_event.text),
        )
        connection.commit()
    memory = SqliteMemoryService(path)
    try:
        assert await search(memory, "zebras") == ["zebras of old"]
        await memory.add_session_to_memory(session_of(old_event, text_event("zebras new")))
        assert sorted(await search(memory, "zebras")) == ["zebras new", "zebras of old"]
    finally:
        await memory.close()
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("SELECT version FROM memory_schema").fetchall() == [(2,)]
        assert connection.execute("SELECT count(*) FROM memory_entries").fetchone() == (2,)
