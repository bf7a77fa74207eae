"""A paged listing never skips a session, also after the user's latest one was deleted.

``list_sessions_page`` pages by ``(create_time, id)``: a page token is the position of the last
session the client saw. So a new session's create time must be after every create time a
listing may already have passed, including those of sessions deleted since: a client that saw
the deleted session on its previous page continues after it. The stores keep, per app and
user, the latest create time ever stored (a mark that deletions do not lower); a new session
comes after it even when the clock stepped back (a time correction; a PostgreSQL failover to a
server whose clock is behind).

Before, the create time came after the user's latest *existing* session only: delete the latest
ones, let the clock step back, and the next session landed behind the client's position.

Real parts: SQLite files, a PostgreSQL database of the test's own, ``adk-mesh migrate`` as a
subprocess; only the clock is scripted (for PostgreSQL a ``clock_timestamp()`` that the
connections' ``search_path`` finds before ``pg_catalog``'s, with an offset the test sets).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.errors import SessionError
from adk_mesh.sessions import SessionService, SqliteSessionService, _common
from adk_mesh.sessions import sqlite as sqlite_store
from tests.unit.test_migrations import adk_mesh_command

APP = "app"
USER = "ada"
HOUR = 3600.0

#: The last SQLite and PostgreSQL schema versions without the marks of create times.
SQLITE_PREVIOUS_VERSION = 4
POSTGRES_PREVIOUS_VERSION = 2

#: A schema of the test's own that holds the PostgreSQL test clock.
CLOCK_SCHEMA = "adk_test_clock"
#: The search path of the stores under test: tables in public, and the test's
#: ``clock_timestamp()`` found before ``pg_catalog``'s (named explicitly, so searched last).
CLOCK_SEARCH_PATH = f"public, {CLOCK_SCHEMA}, pg_catalog"


async def _page_through(store: SessionService, token: str | None) -> list[str]:
    """The ids a client sees paging one session at a time from ``token`` to the end."""
    seen: list[str] = []
    while True:
        page = await store.list_sessions_page(
            app_name=APP, user_id=USER, page_size=1, page_token=token
        )
        seen.extend(session.id for session in page.sessions)
        if page.next_page_token is None:
            return seen
        token = page.next_page_token


async def _token_past(store: SessionService, session_id: str) -> tuple[list[str], str]:
    """Page one session at a time up to ``session_id``: the ids seen and the next token."""
    seen: list[str] = []
    token: str | None = None
    while session_id not in seen:
        page = await store.list_sessions_page(
            app_name=APP, user_id=USER, page_size=1, page_token=token
        )
        seen.extend(session.id for session in page.sessions)
        assert page.next_page_token is not None, seen
        token = page.next_page_token
    assert token is not None
    return seen, token


async def _delete_the_latest_then_step_back(
    store: SessionService, step_back: Callable[[], Awaitable[None]], *, keep_first: bool
) -> None:
    """The scenario: a client's listing passes s1; s1 and s2 (the user's latest sessions)
    are deleted; the clock steps back an hour; s3 is created. The client, paging on from its
    token, must see s3."""
    ids = ["s0", "s1", "s2"] if keep_first else ["s1", "s2"]
    for session_id in ids:
        await store.create_session(app_name=APP, user_id=USER, session_id=session_id)
    seen, token = await _token_past(store, "s1")
    assert seen == ids[:-1]
    for session_id in ("s1", "s2"):
        await store.delete_session(app_name=APP, user_id=USER, session_id=session_id)
    await step_back()

    await store.create_session(app_name=APP, user_id=USER, session_id="s3")

    assert await _page_through(store, token) == ["s3"]
    whole = await store.list_sessions(app_name=APP, user_id=USER)
    assert [session.id for session in whole] == [*ids[:-2], "s3"]


# --- SQLite ------------------------------------------------------------------------------------


class _SteppableClock:
    """The wall clock, less an offset the test sets (a clock stepped back)."""

    def __init__(self) -> None:
        self.behind = 0.0
        self._real = _common.now

    def __call__(self) -> float:
        return self._real() - self.behind


@pytest.fixture
def sqlite_clock(monkeypatch: pytest.MonkeyPatch) -> _SteppableClock:
    clock = _SteppableClock()
    monkeypatch.setattr(_common, "now", clock)
    return clock


@pytest.mark.parametrize("keep_first", [False, True], ids=["no-survivor", "an-earlier-survives"])
async def test_sqlite_a_session_created_after_deletions_and_a_clock_step_back_is_listed(
    tmp_path: Path, sqlite_clock: _SteppableClock, keep_first: bool
) -> None:
    store = SqliteSessionService(tmp_path / "sessions.db")

    async def step_back() -> None:
        sqlite_clock.behind = HOUR

    try:
        await _delete_the_latest_then_step_back(store, step_back, keep_first=keep_first)
    finally:
        await store.close()


def _sqlite_file_of_the_previous_version(path: Path, rows: list[tuple[str, str, float]]) -> None:
    """A session file as the previous adk-mesh left it: its schema steps, its version, and
    sessions (user, id, create time) written as it wrote them."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        for step in sqlite_store.MIGRATIONS[:SQLITE_PREVIOUS_VERSION]:
            for statement in step:
                connection.execute(statement)
        connection.execute(f"PRAGMA user_version = {SQLITE_PREVIOUS_VERSION}")
        connection.executemany(
            "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) "
            "VALUES (?, ?, ?, '{}', ?, ?)",
            [(APP, user, session_id, time, time) for user, session_id, time in rows],
        )
    finally:
        connection.close()


def _sqlite_marks(path: Path) -> dict[tuple[str, str], float]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(
            "SELECT app_name, user_id, latest_create_time FROM session_creation_marks"
        ).fetchall()
    finally:
        connection.close()
    return {(app, user): time for app, user, time in rows}


def _read_user_version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        (version,) = connection.execute("PRAGMA user_version").fetchone()
    finally:
        connection.close()
    return int(version)


def _sessions_of_an_old_clock(now: float) -> list[tuple[str, str, float]]:
    """Ada's s1 and s2 were made while the clock was an hour ahead; s0 and bob's before."""
    return [
        (USER, "s0", now - 10.0),
        (USER, "s1", now + HOUR),
        (USER, "s2", now + HOUR + 1.0),
        ("bob", "b0", now - 5.0),
    ]


@pytest.mark.parametrize("upgrade", ["first-use", "adk-mesh-migrate"])
async def test_sqlite_a_file_of_the_previous_version_upgrades_with_its_marks(
    tmp_path: Path, upgrade: str
) -> None:
    """A store opens and upgrades an old file at its first call (as SQLite stores always
    have), and ``adk-mesh migrate sqlite:///...`` upgrades it too; either way the marks start
    at each user's latest existing session, so deleting that one right after the upgrade
    does not let a new session fall behind a listing that passed it."""
    path = tmp_path / "sessions.db"
    now = _common.now()
    rows = _sessions_of_an_old_clock(now)
    _sqlite_file_of_the_previous_version(path, rows)
    if upgrade == "adk-mesh-migrate":
        result = adk_mesh_command("migrate", f"sqlite:///{path}")
        assert result.returncode == 0, result.stderr
        assert f"sessions at schema version {sqlite_store.SCHEMA_VERSION}" in result.stdout
        assert _read_user_version(path) == sqlite_store.SCHEMA_VERSION
        assert _sqlite_marks(path) == {(APP, USER): now + HOUR + 1.0, (APP, "bob"): now - 5.0}

    store = SqliteSessionService(path)
    try:
        seen, token = await _token_past(store, "s1")
        assert seen == ["s0", "s1"]
        assert _read_user_version(path) == sqlite_store.SCHEMA_VERSION
        assert _sqlite_marks(path) == {(APP, USER): now + HOUR + 1.0, (APP, "bob"): now - 5.0}
        for session_id in ("s1", "s2"):
            await store.delete_session(app_name=APP, user_id=USER, session_id=session_id)
        # The real clock, now an hour behind the deleted sessions' times.
        await store.create_session(app_name=APP, user_id=USER, session_id="s3")
        assert await _page_through(store, token) == ["s3"]
        assert _sqlite_marks(path)[(APP, USER)] > now + HOUR + 1.0
    finally:
        await store.close()


async def test_sqlite_the_marks_follow_a_writer_that_does_not_know_them(tmp_path: Path) -> None:
    """A process of the previous version that opened the file before it was upgraded writes
    sessions without reading or writing the marks: the file keeps them on every insert."""
    path = tmp_path / "sessions.db"
    store = SqliteSessionService(path)
    try:
        await store.create_session(app_name=APP, user_id=USER, session_id="s0")
        ahead = _common.now() + HOUR
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute(
                "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) "
                "VALUES (?, ?, 'old-writer', '{}', ?, ?)",
                (APP, USER, ahead, ahead),
            )
        finally:
            connection.close()
        assert _sqlite_marks(path)[(APP, USER)] == ahead
        seen, token = await _token_past(store, "s0")
        assert seen == ["s0"]
        await store.delete_session(app_name=APP, user_id=USER, session_id="old-writer")
        await store.create_session(app_name=APP, user_id=USER, session_id="s1")
        assert await _page_through(store, token) == ["s1"]
    finally:
        await store.close()


# --- PostgreSQL --------------------------------------------------------------------------------


async def _install_test_clock(url: str) -> None:
    """``adk_test_clock.clock_timestamp()``: the server's clock less ``offset_seconds``."""
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        await connection.execute(
            f"""
            CREATE SCHEMA {CLOCK_SCHEMA};
            CREATE TABLE {CLOCK_SCHEMA}.settings (offset_seconds float8 NOT NULL);
            INSERT INTO {CLOCK_SCHEMA}.settings VALUES (0);
            CREATE FUNCTION {CLOCK_SCHEMA}.clock_timestamp() RETURNS timestamptz
                LANGUAGE sql VOLATILE
                AS $$ SELECT pg_catalog.clock_timestamp() - make_interval(secs =>
                    (SELECT offset_seconds FROM {CLOCK_SCHEMA}.settings)) $$;
            """
        )
    finally:
        await connection.close()


async def _set_clock_behind(url: str, seconds: float) -> None:
    import asyncpg

    connection = await asyncpg.connect(url, server_settings={"search_path": CLOCK_SEARCH_PATH})
    try:
        await connection.execute(f"UPDATE {CLOCK_SCHEMA}.settings SET offset_seconds = $1", seconds)
        # The stores' connections read this clock (their search path finds it first); the
        # two readings are microseconds apart.
        behind = await connection.fetchval(
            "SELECT extract(epoch FROM pg_catalog.clock_timestamp() - clock_timestamp())"
        )
        assert seconds - 1 < float(behind) < seconds + 1
    finally:
        await connection.close()


def _postgres_store(url: str, *, migrate: bool = True, lock_timeout: str | None = None) -> Any:
    """A PostgreSQL session store whose connections read the test clock."""
    from adk_mesh.sessions.postgres import PostgresSessionService

    settings = {"search_path": CLOCK_SEARCH_PATH}
    if lock_timeout is not None:
        settings["lock_timeout"] = lock_timeout
    return PostgresSessionService(url, migrate=migrate, pool_options={"server_settings": settings})


@pytest.fixture
async def clocked_postgres_url(postgres_url: str) -> AsyncIterator[str]:
    await _install_test_clock(postgres_url)
    yield postgres_url


@pytest.mark.postgres
@pytest.mark.parametrize("keep_first", [False, True], ids=["no-survivor", "an-earlier-survives"])
async def test_postgres_a_session_created_after_deletions_and_a_clock_step_back_is_listed(
    clocked_postgres_url: str, keep_first: bool
) -> None:
    store = _postgres_store(clocked_postgres_url)

    async def step_back() -> None:
        await _set_clock_behind(clocked_postgres_url, HOUR)

    try:
        await _delete_the_latest_then_step_back(store, step_back, keep_first=keep_first)
    finally:
        await store.close()


async def _postgres_database_of_the_previous_version(
    url: str, rows: list[tuple[str, str, float]]
) -> None:
    """The session tables as the previous adk-mesh migrated them (its steps, recorded), and
    sessions (user, id, create time) written as it wrote them."""
    import asyncpg

    from adk_mesh._migrations import apply_migrations
    from adk_mesh.sessions import postgres

    connection = await asyncpg.connect(url)
    try:
        version = await apply_migrations(
            connection,
            "sessions",
            postgres.MIGRATIONS[:POSTGRES_PREVIOUS_VERSION],
            error=SessionError,
        )
        assert version == POSTGRES_PREVIOUS_VERSION
        await connection.executemany(
            "INSERT INTO adk_sessions (app_name, user_id, id, state, create_time, update_time) "
            "VALUES ($1, $2, $3, '{}', $4, $4)",
            [(APP, user, session_id, time) for user, session_id, time in rows],
        )
    finally:
        await connection.close()


async def _postgres_marks(url: str) -> dict[tuple[str, str], float]:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(
            "SELECT app_name, user_id, latest_create_time FROM adk_session_creation_marks"
        )
    finally:
        await connection.close()
    return {(row["app_name"], row["user_id"]): row["latest_create_time"] for row in rows}


@pytest.mark.postgres
@pytest.mark.parametrize("upgrade", ["first-use", "adk-mesh-migrate"])
async def test_postgres_a_database_of_the_previous_version_upgrades_with_its_marks(
    postgres_url: str, upgrade: str
) -> None:
    """A store built with ``migrate=False`` refuses the old schema (as it refuses any schema
    behind the code); ``adk-mesh migrate``, or a store that migrates at first use, upgrades
    it, and the marks start at each user's latest existing session."""
    from adk_mesh.sessions import postgres

    now = _common.now()
    await _postgres_database_of_the_previous_version(postgres_url, _sessions_of_an_old_clock(now))
    strict = _postgres_store(postgres_url, migrate=False)
    try:
        with pytest.raises(SessionError, match="adk-mesh migrate"):
            await strict.create_session(app_name=APP, user_id=USER, session_id="refused")
    finally:
        await strict.close()

    if upgrade == "adk-mesh-migrate":
        result = adk_mesh_command("migrate", postgres_url, "--store", "sessions")
        assert result.returncode == 0, result.stderr
        assert f"sessions at schema version {postgres.SCHEMA_VERSION}" in result.stdout
        store = _postgres_store(postgres_url, migrate=False)
    else:
        store = _postgres_store(postgres_url)
    try:
        seen, token = await _token_past(store, "s1")
        assert seen == ["s0", "s1"]
        assert await _postgres_marks(postgres_url) == {
            (APP, USER): now + HOUR + 1.0,
            (APP, "bob"): now - 5.0,
        }
        for session_id in ("s1", "s2"):
            await store.delete_session(app_name=APP, user_id=USER, session_id=session_id)
        # The server's real clock, an hour behind the deleted sessions' times.
        await store.create_session(app_name=APP, user_id=USER, session_id="s3")
        assert await _page_through(store, token) == ["s3"]
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_the_marks_follow_a_writer_that_does_not_know_them(
    postgres_url: str,
) -> None:
    """A replica of the previous version, whose pool was opened before the upgrade, inserts
    sessions without reading or writing the marks: the database keeps them on every insert."""
    import asyncpg

    store = _postgres_store(postgres_url)
    try:
        await store.create_session(app_name=APP, user_id=USER, session_id="s0")
        ahead = _common.now() + HOUR
        connection = await asyncpg.connect(postgres_url)
        try:
            await connection.execute(
                "INSERT INTO adk_sessions (app_name, user_id, id, state, create_time, "
                "update_time) VALUES ($1, $2, 'old-writer', '{}', $3, $3)",
                APP,
                USER,
                ahead,
            )
        finally:
            await connection.close()
        assert (await _postgres_marks(postgres_url))[(APP, USER)] == ahead
        seen, token = await _token_past(store, "s0")
        assert seen == ["s0"]
        await store.delete_session(app_name=APP, user_id=USER, session_id="old-writer")
        await store.create_session(app_name=APP, user_id=USER, session_id="s1")
        assert await _page_through(store, token) == ["s1"]
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_the_turns_path_does_not_touch_the_marks(postgres_url: str) -> None:
    """Appending, reading, listing and deleting never wait for the marks: with the marks'
    table locked by another transaction, they all complete (a statement that needed the
    table would fail on the lock timeout instead)."""
    import asyncpg

    from adk_mesh.types import Content, Event

    store = _postgres_store(postgres_url, lock_timeout="5s")
    locker = await asyncpg.connect(postgres_url)
    try:
        session = await store.create_session(app_name=APP, user_id=USER, session_id="s0")
        async with locker.transaction():
            await locker.execute("LOCK TABLE adk_session_creation_marks IN ACCESS EXCLUSIVE MODE")
            loaded = await store.get_session(app_name=APP, user_id=USER, session_id="s0")
            assert loaded is not None
            await store.append_event(
                loaded,
                Event.new(author="user", content=Content.from_text("user", "hi")),
            )
            shared = await store.get_session_shared(app_name=APP, user_id=USER, session_id="s0")
            assert shared is not None and len(shared.events) == 1
            page = await store.list_sessions_page(app_name=APP, user_id=USER, page_size=5)
            assert [s.id for s in page.sessions] == [session.id]
            await store.delete_session(app_name=APP, user_id=USER, session_id="s0")
    finally:
        await locker.close()
        await store.close()
