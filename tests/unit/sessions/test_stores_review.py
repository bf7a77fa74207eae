"""Review of the session stores and their shared code: what a user of replicas on one
PostgreSQL, or of a SQLite file, meets at the edges (URLs, files, ids, concurrency).

PostgreSQL tests share the session's throwaway cluster (``postgres_url``: a database each).
"""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

import pytest

from adk_mesh._migrations import migrate_url
from adk_mesh._store_urls import redact_url
from adk_mesh.artifacts import artifact_service_from_url
from adk_mesh.errors import (
    ConfigError,
    InvalidArgumentError,
    SessionConflictError,
    SessionError,
)
from adk_mesh.memory import memory_service_from_url
from adk_mesh.sessions import (
    SessionService,
    SqliteSessionService,
    session_service_from_url,
)
from adk_mesh.types import Content, Event, EventActions

APP = "app"
USER = "u"
IDS = {"app_name": APP, "user_id": USER, "session_id": "s1"}
PASSWORD = "s3cretpw"


def text_event(text: str = "x", **state: object) -> Event:
    return Event.new(
        author="agent",
        content=Content.from_text("model", text),
        actions=EventActions(state_delta=dict(state)),
    )


# --- store URLs: a bad one is a ConfigError that never shows the password --------------------


@pytest.mark.parametrize(
    "url",
    [
        # A mistyped scheme: the factory does not know it, and named the URL whole.
        f"postgressql://app:{PASSWORD}@db:5432/x",
        f"mysql://app:{PASSWORD}@db/x",
        # "://" missing: no scheme at all.
        f"postgresql:app:{PASSWORD}@db/x",
        # Passwords with a raw "/", "?" or "#" (they must be percent-encoded): the URL
        # parser then reads part of the password as the port, and said so verbatim.
        f"postgresql://app:{PASSWORD}/x@db/x",
        f"postgresql://app:{PASSWORD}?x@db/x",
        f"postgresql://app:{PASSWORD}#x@db/x",
        # Credentials where the store takes none.
        f"sqlite://app:{PASSWORD}@db/x.db",
        f"memory://app:{PASSWORD}@db",
    ],
)
def test_a_bad_store_url_is_a_config_error_without_the_password(url: str) -> None:
    for factory in (session_service_from_url, memory_service_from_url):
        with pytest.raises(ConfigError) as raised:
            factory(url)
        assert PASSWORD[:4] not in str(raised.value), str(raised.value)


async def test_adk_mesh_migrate_refuses_an_unknown_scheme_without_the_password() -> None:
    with pytest.raises(ConfigError) as raised:
        await migrate_url(f"mysql://app:{PASSWORD}@db/x")

    assert PASSWORD not in str(raised.value)
    assert "mysql://app:***@db/x" in str(raised.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:pa/ss@db/x", "postgresql://app:***@db/x"),
        ("postgresql://app:pa?ss@db/x", "postgresql://app:***@db/x"),
        ("postgresql://app:pa/s?s@db/x", "postgresql://app:***@db/x"),
        ("postgresql:app:pass@db/x", "postgresql:***@db/x"),
        ("postgresql://app:pass@h1:5432,h2:5433/x", "postgresql://app:***@h1:5432,h2:5433/x"),
        (
            "postgresql://app@db/x?application_name=a@b",
            "postgresql://app@db/x?application_name=a@b",
        ),
    ],
)
def test_redact_url_hides_passwords_the_url_parser_misreads(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_multi_host_postgres_url_is_accepted() -> None:
    """asyncpg (as libpq) takes ``host1:port1,host2:port2`` to fail over between servers;
    the URL check read the list as one port and refused it."""
    service = session_service_from_url("postgresql://app:pw@h1:5432,h2:5433/x")
    assert service.url == "postgresql://app:***@h1:5432,h2:5433/x"  # type: ignore[attr-defined]


def test_a_bad_port_in_a_multi_host_postgres_url_is_still_refused() -> None:
    with pytest.raises(ConfigError, match="port"):
        session_service_from_url("postgresql://app:pw@h1:5432,h2:notaport/x")


@pytest.mark.postgres
async def test_a_multi_host_url_fails_over_to_the_server_that_answers(postgres_url: str) -> None:
    prefix, _, rest = postgres_url.partition("://")
    credentials, _, location = rest.rpartition("@")
    hostport, _, database = location.partition("/")
    # Port 1 on loopback: nothing listens there, so the driver moves on to the real server.
    url = f"{prefix}://{credentials}@127.0.0.1:1,{hostport}/{database}"
    service = session_service_from_url(url)
    try:
        await service.create_session(**IDS)
        assert await service.get_session(**IDS) is not None
    finally:
        await service.close()


# --- SQLite: files that cannot be opened are a SessionError naming them -----------------------


async def test_a_sqlite_path_under_a_regular_file_is_a_session_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory")
    service = SqliteSessionService(tmp_path / "afile" / "sessions.db")
    try:
        with pytest.raises(SessionError, match="afile"):
            await service.create_session(**IDS)
        with pytest.raises(SessionError, match="afile"):
            async with service.claim_session(**IDS):
                pass
    finally:
        await service.close()


async def test_a_sqlite_path_that_is_a_directory_is_a_session_error(tmp_path: Path) -> None:
    service = SqliteSessionService(tmp_path)
    try:
        with pytest.raises(SessionError, match=str(tmp_path)):
            await service.create_session(**IDS)
    finally:
        await service.close()


# --- event ids every store keeps alike ---------------------------------------------------------


@pytest.mark.parametrize(
    "event_id",
    [
        # Random, so PostgreSQL cannot compress it into its index (2,704 bytes at most).
        secrets.token_hex(2048),
        # PostgreSQL text cannot hold NUL.
        "a\x00b",
    ],
    ids=["long", "nul"],
)
async def test_an_event_id_no_store_can_keep_is_refused_alike_by_every_store(
    session_store: SessionService, event_id: str
) -> None:
    session = await session_store.create_session(**IDS)
    event = text_event().model_copy(update={"id": event_id})

    with pytest.raises(InvalidArgumentError, match="event id"):
        await session_store.append_event(session, event)

    loaded = await session_store.get_session(**IDS)
    assert loaded is not None and loaded.events == []
    # Nothing was written: the session object is still current.
    await session_store.append_event(session, text_event())


async def test_an_event_id_of_the_longest_allowed_length_is_kept(
    session_store: SessionService,
) -> None:
    from adk_mesh.sessions._common import MAX_EVENT_ID_CHARS

    session = await session_store.create_session(**IDS)
    # Four-byte characters: the worst case for PostgreSQL's index.
    event_id = "\U0001f600" * MAX_EVENT_ID_CHARS
    stored = await session_store.append_event(
        session, text_event().model_copy(update={"id": event_id})
    )

    loaded = await session_store.get_session(**IDS)
    assert loaded is not None and [event.id for event in loaded.events] == [stored.id]


# --- replicas on one PostgreSQL: stale appends, re-created sessions --------------------------


@pytest.mark.postgres
async def test_an_append_through_a_session_deleted_and_created_again_elsewhere_conflicts(
    postgres_url: str,
) -> None:
    from adk_mesh.sessions.postgres import PostgresSessionService

    first, second = PostgresSessionService(postgres_url), PostgresSessionService(postgres_url)
    try:
        old = await first.create_session(**IDS)
        await first.append_event(old, text_event("before"))
        shared = await first.get_session_shared(**IDS)
        assert shared is not None
        await second.delete_session(**IDS)
        await second.create_session(**IDS)

        with pytest.raises(SessionConflictError):
            await first.append_event(old, text_event("lost?"))
        reread = await first.get_session_shared(**IDS)
        assert reread is not None and reread.events == []
    finally:
        await first.close()
        await second.close()


@pytest.mark.postgres
async def test_a_pool_of_one_serves_many_concurrent_calls(postgres_url: str) -> None:
    from adk_mesh.sessions.postgres import PostgresSessionService

    service = PostgresSessionService(postgres_url, min_size=0, max_size=1)
    try:
        sessions = await asyncio.gather(
            *(service.create_session(app_name=APP, user_id=USER) for _ in range(20))
        )
        await asyncio.gather(
            *(
                service.append_event(session, text_event("x", **{"user:n": 1}))
                for session in sessions
            )
        )
        listed = await service.list_sessions(app_name=APP, user_id=USER)
        assert len(listed) == 20
        assert all(session.events == [] for session in listed)
    finally:
        await service.close()


# --- pool options: asyncpg.create_pool's own ones must not break the connections outside it ---


@pytest.mark.postgres
@pytest.mark.parametrize(
    "pool_options",
    [{"max_inactive_connection_lifetime": 60.0}, {"max_queries": 1000}],
    ids=["max_inactive_connection_lifetime", "max_queries"],
)
async def test_pool_only_options_do_not_break_claims_or_migrate(
    postgres_url: str, pool_options: dict[str, object]
) -> None:
    """The README hands ``pool_options`` to ``asyncpg.create_pool``; the claims' connection
    and ``migrate()`` are opened with ``asyncpg.connect``, which has no such arguments."""
    from adk_mesh.sessions.postgres import PostgresSessionService

    service = PostgresSessionService(postgres_url, pool_options=pool_options)
    try:
        assert await service.migrate() >= 1
        async with service.claim_session(**IDS):
            await service.create_session(**IDS)
        assert await service.get_session(**IDS) is not None
    finally:
        await service.close()


@pytest.mark.postgres
async def test_connections_outside_the_pool_are_made_by_its_connect_function(
    postgres_url: str,
) -> None:
    """A ``connect`` function in ``pool_options`` (how a pool gets fresh credentials, an IAM
    token per connection, say) makes the claims' and ``migrate()``'s connections too."""
    import asyncpg

    from adk_mesh.sessions.postgres import PostgresSessionService

    real_database = postgres_url.rsplit("/", 1)[1]
    made: list[str] = []

    async def connect(dsn: str, **options: Any) -> asyncpg.Connection:  # type: ignore[type-arg]
        made.append(dsn)
        connection: asyncpg.Connection = await asyncpg.connect(  # type: ignore[type-arg]
            dsn, **{**options, "database": real_database}
        )
        return connection

    # The URL names a database that does not exist: only the connect function reaches one.
    url = postgres_url.rsplit("/", 1)[0] + "/no_such_database"
    service = PostgresSessionService(url, pool_options={"connect": connect})
    try:
        assert await service.migrate() >= 1
        async with service.claim_session(**IDS):
            await service.create_session(**IDS)
        assert await service.get_session(**IDS) is not None
    finally:
        await service.close()
    assert len(made) >= 3  # migrate, the claims, the pool


@pytest.mark.parametrize(
    "url",
    ["postgressql://app:s3cret-pw@db:5432/x", "mysql://app:s3cret-pw@db/x", "app:s3cret-pw@db"],
)
def test_a_bad_artifact_store_url_is_a_config_error_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        artifact_service_from_url(url)
    assert "s3cret-pw" not in raised.value.message
