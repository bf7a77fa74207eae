"""What only the SQLite backend promises: durability, several writers on one file, migrations."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import textwrap
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.errors import AlreadyExistsError, SessionError
from adk_mesh.sessions import Session, SqliteSessionService
from adk_mesh.sessions.sqlite import MIGRATIONS, SCHEMA_VERSION
from adk_mesh.types import Content, Event, EventActions
from tests.processes import wait_until_ready

APP = "app"


def event_with(state_delta: dict[str, Any], text: str = "x") -> Event:
    return Event.new(
        author="agent",
        content=Content.from_text("model", text),
        actions=EventActions(state_delta=state_delta),
    )


def read_pragma(path: Path, pragma: str) -> object:
    with closing(sqlite3.connect(path)) as connection:
        return connection.execute(f"PRAGMA {pragma}").fetchone()[0]


async def test_data_survives_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "sessions.db"
    first = SqliteSessionService(path)
    try:
        session = await first.create_session(
            app_name=APP, user_id="u", session_id="s1", state={"user:name": "Ann"}
        )
        stored = await first.append_event(session, event_with({"k": 1, "app:a": [1, 2]}, "hi"))
    finally:
        await first.close()

    second = SqliteSessionService(path)
    try:
        loaded = await second.get_session(app_name=APP, user_id="u", session_id="s1")
    finally:
        await second.close()

    assert loaded is not None
    assert loaded.events == [stored]
    assert loaded.state == {"k": 1, "app:a": [1, 2], "user:name": "Ann"}


async def test_the_file_is_in_wal_mode_at_the_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    service = SqliteSessionService(path)
    try:
        await service.create_session(app_name=APP, user_id="u")
    finally:
        await service.close()

    assert read_pragma(path, "journal_mode") == "wal"
    assert read_pragma(path, "user_version") == SCHEMA_VERSION


async def test_two_services_on_one_file_do_not_lose_each_others_updates(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    services = [SqliteSessionService(path), SqliteSessionService(path)]
    try:
        sessions = [
            await service.create_session(app_name=APP, user_id="u", session_id=f"s{index}")
            for index, service in enumerate(services)
        ]

        async def writer(index: int) -> None:
            for step in range(1, 31):
                delta = {f"app:count_{index}": step, f"user:count_{index}": step}
                await services[index].append_event(sessions[index], event_with(delta))

        await asyncio.gather(writer(0), writer(1))
        loaded = await services[0].get_session(app_name=APP, user_id="u", session_id="s1")
    finally:
        for service in services:
            await service.close()

    assert loaded is not None
    assert len(loaded.events) == 30
    assert {key: value for key, value in loaded.state.items() if ":" in key} == {
        "app:count_0": 30,
        "app:count_1": 30,
        "user:count_0": 30,
        "user:count_1": 30,
    }


_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from adk_mesh.sessions import SqliteSessionService
    from adk_mesh.types import Event, EventActions

    async def main(path: str, worker: int, count: int) -> None:
        service = SqliteSessionService(path)
        try:
            session = await service.get_session(
                app_name="app", user_id="shared", session_id=f"s{worker}"
            )
            assert session is not None
            print("ready", flush=True)
            sys.stdin.readline()  # start together with the other process
            for step in range(1, count + 1):
                delta = {
                    f"app:count_{worker}": step,
                    f"user:count_{worker}": step,
                    "app:last": worker,
                    "count": step,
                }
                event = Event.new(author=f"w{worker}", actions=EventActions(state_delta=delta))
                await service.append_event(session, event)
        finally:
            await service.close()

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    """
)


async def test_two_processes_appending_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "processes.db"
    count = 150
    service = SqliteSessionService(path)
    try:
        for worker in range(2):
            await service.create_session(app_name=APP, user_id="shared", session_id=f"s{worker}")

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

        loaded = [
            await service.get_session(app_name=APP, user_id="shared", session_id=f"s{worker}")
            for worker in range(2)
        ]
    finally:
        await service.close()

    for worker, session in enumerate(loaded):
        assert session is not None
        assert len(session.events) == count
        assert [event.author for event in session.events] == [f"w{worker}"] * count
        assert session.state["count"] == count
        assert session.state["app:count_0"] == session.state["app:count_1"] == count
        assert session.state["user:count_0"] == session.state["user:count_1"] == count
        assert session.state["app:last"] in (0, 1)


def _make_version_1_file(path: Path) -> None:
    """A file as the first release wrote it, with one session, its state and one event."""
    event = Event.new(author="agent", content=Content.from_text("model", "from v1"))
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        for statement in MIGRATIONS[0]:
            connection.execute(statement)
        connection.execute("PRAGMA user_version = 1")
        connection.execute(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)",
            (APP, "u", "old", json.dumps({"k": "v"}), 1.0, 2.0),
        )
        connection.execute(
            "INSERT INTO app_states VALUES (?, ?, ?)", (APP, json.dumps({"theme": "dark"}), 1.0)
        )
        connection.execute(
            "INSERT INTO events (app_name, user_id, session_id, id, timestamp_us, event) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (APP, "u", "old", event.id, 1_000_000, event.model_dump_json()),
        )


async def test_opening_a_version_1_file_migrates_it(tmp_path: Path) -> None:
    assert SCHEMA_VERSION >= 2, "this test needs at least one migration after version 1"
    path = tmp_path / "v1.db"
    _make_version_1_file(path)

    service = SqliteSessionService(path)
    try:
        loaded = await service.get_session(app_name=APP, user_id="u", session_id="old")
        assert loaded is not None
        await service.append_event(loaded, event_with({"k": "new"}, "after migration"))
        again = await service.get_session(app_name=APP, user_id="u", session_id="old")
    finally:
        await service.close()

    assert again is not None
    assert [event.text for event in again.events] == ["from v1", "after migration"]
    assert again.state == {"k": "new", "app:theme": "dark"}
    assert read_pragma(path, "user_version") == SCHEMA_VERSION
    with closing(sqlite3.connect(path)) as connection:
        indexes = {
            name
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='index'")
        }
    assert "events_by_session_time" in indexes


async def test_a_file_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with closing(sqlite3.connect(path)) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")

    service = SqliteSessionService(path)
    try:
        with pytest.raises(SessionError, match="newer"):
            await service.get_session(app_name=APP, user_id="u", session_id="s")
    finally:
        await service.close()


async def test_close_is_idempotent_and_a_closed_service_refuses_calls(tmp_path: Path) -> None:
    service = SqliteSessionService(tmp_path / "closed.db")
    await service.create_session(app_name=APP, user_id="u")

    await service.close()
    await service.close()

    with pytest.raises(SessionError, match="closed"):
        await service.list_sessions(app_name=APP, user_id="u")


async def test_closing_a_service_that_never_opened_the_file(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    service = SqliteSessionService(path)

    await service.close()

    assert not path.exists()


async def test_an_in_memory_database_works(tmp_path: Path) -> None:
    service = SqliteSessionService(":memory:")
    try:
        session = await service.create_session(app_name=APP, user_id="u")
        await service.append_event(session, event_with({"k": 1}))
        loaded = await service.get_session(app_name=APP, user_id="u", session_id=session.id)
    finally:
        await service.close()

    assert isinstance(loaded, Session)
    assert loaded.state == {"k": 1}


# --- stale appends across processes, event ids in old files ------------------------------------

_RACER = textwrap.dedent(
    """
    import asyncio, sys
    from adk_mesh.errors import SessionConflictError
    from adk_mesh.sessions import SqliteSessionService
    from adk_mesh.types import Event, EventActions

    async def main(path: str, worker: int) -> None:
        service = SqliteSessionService(path)
        try:
            while sys.stdin.readline().strip() == "load":
                session = await service.get_session(
                    app_name="app", user_id="u", session_id="race"
                )
                assert session is not None
                print("loaded", flush=True)
                sys.stdin.readline()  # both processes hold the same version now: go
                counter = session.state["counter"]
                event = Event.new(
                    author=f"w{worker}", actions=EventActions(state_delta={"counter": counter + 1})
                )
                try:
                    await service.append_event(session, event)
                except SessionConflictError as error:
                    print("lost", error.reason, flush=True)
                else:
                    print("won", flush=True)
        finally:
            await service.close()

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


async def test_two_processes_appending_through_one_version_never_both_win(
    tmp_path: Path,
) -> None:
    """Each round both processes load the session, then both append a read-modify-write of
    the counter: the check and the write are one transaction, so exactly one wins."""
    path = tmp_path / "race.db"
    rounds = 25
    service = SqliteSessionService(path)
    await service.create_session(app_name=APP, user_id="u", session_id="race", state={"counter": 0})
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _RACER,
            str(path),
            str(worker),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for worker in range(2)
    ]

    async def tell_all(line: bytes) -> list[bytes]:
        for process in processes:
            assert process.stdin is not None
            process.stdin.write(line)
            await process.stdin.drain()
        replies = []
        for process in processes:
            assert process.stdout is not None
            replies.append(await process.stdout.readline())
        return replies

    outcomes: list[list[bytes]] = []
    try:
        for _ in range(rounds):
            assert await tell_all(b"load\n") == [b"loaded\n", b"loaded\n"]
            outcomes.append(sorted(await tell_all(b"go\n")))
        results = await asyncio.gather(*(process.communicate(b"stop\n") for process in processes))
        for process, (_, stderr) in zip(processes, results, strict=True):
            assert process.returncode == 0, stderr.decode()
        loaded = await service.get_session(app_name=APP, user_id="u", session_id="race")
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        await service.close()

    assert outcomes == [[b"lost SESSION_CONFLICT\n", b"won\n"]] * rounds
    assert loaded is not None
    assert loaded.state["counter"] == rounds
    assert len(loaded.events) == rounds


def _make_version_2_file(path: Path) -> dict[str, Event]:
    """A file as release 2 wrote it: an event stored with id "", one appended twice, and two
    different events under one id."""
    events = {
        "empty": Event.new(author="agent", content=Content.from_text("model", "no id")),
        "twice": Event.new(author="agent", content=Content.from_text("model", "twice")),
        "reused": Event.new(author="agent", content=Content.from_text("model", "first")),
    }
    events["empty"].id = ""
    impostor = Event.new(author="agent", content=Content.from_text("model", "second"))
    impostor.id = events["reused"].id
    stored = [events["empty"], events["twice"], events["twice"], events["reused"], impostor]
    with closing(sqlite3.connect(path, isolation_level=None)) as connection:
        for step in MIGRATIONS[:2]:
            for statement in step:
                connection.execute(statement)
        connection.execute("PRAGMA user_version = 2")
        connection.execute(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?)", (APP, "u", "old", "{}", 1.0, 2.0)
        )
        for event in stored:
            connection.execute(
                "INSERT INTO events (app_name, user_id, session_id, id, timestamp_us, event) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (APP, "u", "old", event.id, 1_000_000, event.model_dump_json()),
            )
    return events


async def test_migration_3_gives_every_event_of_an_old_file_its_own_id(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    events = _make_version_2_file(path)

    service = SqliteSessionService(path)
    try:
        loaded = await service.get_session(app_name=APP, user_id="u", session_id="old")
        assert loaded is not None
        with pytest.raises(AlreadyExistsError):
            await service.append_event(loaded, events["twice"])
    finally:
        await service.close()

    assert [event.text for event in loaded.events] == ["no id", "twice", "first", "second"]
    ids = [event.id for event in loaded.events]
    assert len(set(ids)) == 4
    assert ids[0].startswith("migrated-")
    assert ids[1:3] == [events["twice"].id, events["reused"].id]
    assert ids[3].startswith(f"{events['reused'].id}~")
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("SELECT id FROM events ORDER BY seq").fetchall() == [
            (event_id,) for event_id in ids
        ]
    assert read_pragma(path, "user_version") == SCHEMA_VERSION
