"""What only the SQLite memory store promises: durability, several processes on one file,
FTS5 tokens (stems, diacritics), a file shared with the session store, its schema."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest

from adk_mesh.errors import AdkIOError
from adk_mesh.memory import SqliteMemoryService
from adk_mesh.memory.sqlite import MAX_QUERY_WORDS, SCHEMA_VERSION
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.types import Content, Event
from tests.processes import wait_until_ready
from tests.unit.memory.test_contract import search, session_with


async def test_memories_survive_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "memory.db"
    first = SqliteMemoryService(path)
    try:
        await first.add_session_to_memory(session_with("the spare key is under the mat"))
    finally:
        await first.close()

    second = SqliteMemoryService(path)
    try:
        (entry,) = await second.search_memory(app_name="app", user_id="alice", query="key")
    finally:
        await second.close()

    assert entry.content.text == "the spare key is under the mat"
    assert entry.session_id == "s1"


async def test_the_file_is_in_wal_mode_and_records_its_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    service = SqliteMemoryService(path)
    try:
        await service.add_session_to_memory(session_with("x"))
    finally:
        await service.close()

    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("SELECT version FROM memory_schema").fetchall() == [
            (SCHEMA_VERSION,)
        ]


async def test_a_file_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE memory_schema (version INTEGER NOT NULL)")
        connection.execute("INSERT INTO memory_schema VALUES (?)", (SCHEMA_VERSION + 1,))
    service = SqliteMemoryService(path)
    try:
        with pytest.raises(AdkIOError, match="newer than"):
            await service.search_memory(app_name="app", user_id="alice", query="anything")
    finally:
        await service.close()


async def test_one_file_holds_sessions_and_memory(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    sessions = SqliteSessionService(path)
    memory = SqliteMemoryService(path)
    try:
        session = await sessions.create_session(app_name="app", user_id="alice", session_id="s")
        await sessions.append_event(
            session, Event.new(author="user", content=Content.from_text("user", "tulips in May"))
        )
        await memory.add_session_to_memory(session)
        assert await search(memory, "tulips") == ["tulips in May"]
    finally:
        await memory.close()
        await sessions.close()

    reopened = SqliteSessionService(path)
    try:
        loaded = await reopened.get_session(app_name="app", user_id="alice", session_id="s")
    finally:
        await reopened.close()
    assert loaded is not None and [event.text for event in loaded.events] == ["tulips in May"]


async def test_words_are_stemmed_and_diacritics_ignored(tmp_path: Path) -> None:
    memory = SqliteMemoryService(tmp_path / "memory.db")
    try:
        await memory.add_session_to_memory(
            session_with("We went hiking near the café", "São Paulo has great coffee")
        )

        assert await search(memory, "hike") == ["We went hiking near the café"]
        assert await search(memory, "cafe") == ["We went hiking near the café"]
        assert await search(memory, "SAO paulo") == ["São Paulo has great coffee"]
    finally:
        await memory.close()


async def test_scripts_without_spaces_and_emoji_are_searchable(tmp_path: Path) -> None:
    memory = SqliteMemoryService(tmp_path / "memory.db")
    try:
        await memory.add_session_to_memory(session_with("東京 タワー", "Ελληνικά γράμματα"))

        assert await search(memory, "東京") == ["東京 タワー"]
        assert await search(memory, "ΕΛΛΗΝΙΚΆ") == ["Ελληνικά γράμματα"]
        assert await search(memory, "🍊") == []
    finally:
        await memory.close()


async def test_only_the_first_distinct_words_of_a_long_query_count(tmp_path: Path) -> None:
    memory = SqliteMemoryService(tmp_path / "memory.db")
    try:
        await memory.add_session_to_memory(session_with("needle early", "needle late"))
        filler = " ".join(f"w{index}" for index in range(MAX_QUERY_WORDS - 1))

        found = await search(memory, f"early {filler} {filler} late")

        assert found == ["needle early"]
    finally:
        await memory.close()


async def test_search_is_scoped_even_for_a_crafted_user_id(tmp_path: Path) -> None:
    memory = SqliteMemoryService(tmp_path / "memory.db")
    try:
        await memory.add_session_to_memory(session_with("private", user_id="alice"))

        for user_id in ('alice" OR "x', "alice\x00", "*", ""):
            assert await search(memory, "private", user_id=user_id) == []
    finally:
        await memory.close()


async def test_a_closed_service_refuses_calls(tmp_path: Path) -> None:
    memory = SqliteMemoryService(tmp_path / "memory.db")
    await memory.close()

    with pytest.raises(AdkIOError, match="closed"):
        await memory.add_session_to_memory(session_with("x"))
    with pytest.raises(AdkIOError, match="closed"):
        await search(memory, "x")
    with pytest.raises(AdkIOError, match="closed"):
        await search(memory, "")


async def test_a_private_in_memory_database_works() -> None:
    memory = SqliteMemoryService(":memory:")
    try:
        await memory.add_session_to_memory(session_with("ephemeral note"))
        assert await search(memory, "note") == ["ephemeral note"]
    finally:
        await memory.close()


_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from adk_mesh.memory import SqliteMemoryService
    from adk_mesh.sessions import Session
    from adk_mesh.types import Content, Event

    async def main(path: str, worker: int, count: int) -> None:
        memory = SqliteMemoryService(path)
        try:
            await memory.search_memory(app_name="app", user_id="alice", query="warm up")
            print("ready", flush=True)
            sys.stdin.readline()  # start together with the other process
            for step in range(count):
                # Each session is added twice: the second add replaces the first.
                for text in (f"draft {worker} {step}", f"shared note w{worker}s{step}"):
                    event = Event.new(author="user", content=Content.from_text("user", text))
                    session = Session(
                        id=f"w{worker}-s{step}", app_name="app", user_id="alice", events=[event]
                    )
                    await memory.add_session_to_memory(session)
        finally:
            await memory.close()

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    """
)


async def test_two_processes_adding_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    count = 60
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WORKER,
            str(path),
            str(worker),
            str(count),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for worker in range(2)
    ]
    await wait_until_ready(processes)
    results = await asyncio.gather(*(process.communicate(b"go\n") for process in processes))
    for process, (_, stderr) in zip(processes, results, strict=True):
        assert process.returncode == 0, stderr.decode()

    memory = SqliteMemoryService(path)
    try:
        shared = await memory.search_memory(app_name="app", user_id="alice", query="shared")
        drafts = await search(memory, "draft")
    finally:
        await memory.close()

    assert sorted(entry.session_id or "" for entry in shared) == sorted(
        f"w{worker}-s{step}" for worker in range(2) for step in range(count)
    )
    assert drafts == []
