"""What only the PostgreSQL session store promises: many services (pools, processes) on one
database, migrations, claims as advisory locks, clear errors, a pool that closes.

The contract itself runs on PostgreSQL through the shared ``session_store`` fixture.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import asyncpg
import pytest

from adk_mesh.errors import (
    AlreadyExistsError,
    ConfigError,
    SessionConflictError,
    SessionError,
)
from adk_mesh.sessions import Session, session_service_from_url
from adk_mesh.sessions.postgres import SCHEMA_VERSION, PostgresSessionService
from adk_mesh.types import Content, Event, EventActions

pytestmark = pytest.mark.postgres

APP = "app"
USER = "u"
IDS = {"app_name": APP, "user_id": USER, "session_id": "s1"}


def event_with(state_delta: dict[str, Any], text: str = "x") -> Event:
    return Event.new(
        author="agent",
        content=Content.from_text("model", text),
        actions=EventActions(state_delta=state_delta),
    )


@pytest.fixture
async def services(postgres_url: str) -> AsyncIterator[Callable[..., PostgresSessionService]]:
    """Makes services on the test's database (each with a pool of its own), closed after."""
    made: list[PostgresSessionService] = []

    def make(**options: Any) -> PostgresSessionService:
        service = PostgresSessionService(postgres_url, **options)
        made.append(service)
        return service

    try:
        yield make
    finally:
        for service in made:
            await service.close()


async def query(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetch(sql, *args)
    finally:
        await connection.close()


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --- several services on one database ---------------------------------------------------------


async def test_data_written_by_one_service_is_read_by_another(
    services: Callable[..., PostgresSessionService],
) -> None:
    first, second = services(), services()
    session = await first.create_session(**IDS, state={"user:name": "Ann"})
    stored = await first.append_event(session, event_with({"k": 1, "app:a": [1, 2]}, "hi"))

    loaded = await second.get_session(**IDS)

    assert loaded is not None
    assert loaded.events == [stored]
    assert loaded.state == {"k": 1, "app:a": [1, 2], "user:name": "Ann"}
    assert loaded.last_update_time == session.last_update_time


async def test_of_writers_on_many_pools_at_one_version_exactly_one_wins(
    services: Callable[..., PostgresSessionService],
) -> None:
    pools = [services() for _ in range(4)]
    session = await pools[0].create_session(**IDS, state={"counter": 0})
    holders: list[tuple[PostgresSessionService, Session]] = []
    for index in range(12):
        service = pools[index % len(pools)]
        loaded = await service.get_session(**IDS)
        assert loaded is not None
        holders.append((service, loaded))

    async def increment(service: PostgresSessionService, holder: Session) -> bool:
        try:
            await service.append_event(holder, event_with({"counter": holder.state["counter"] + 1}))
        except SessionConflictError:
            return False
        return True

    results = await asyncio.gather(*(increment(service, holder) for service, holder in holders))

    assert results.count(True) == 1
    loaded = await pools[1].get_session(**IDS)
    assert loaded is not None
    assert loaded.state["counter"] == 1
    assert len(loaded.events) == 1
    assert session.events == []


async def test_concurrent_writers_of_app_and_user_state_on_many_pools_merge(
    services: Callable[..., PostgresSessionService],
) -> None:
    """Sessions of one app and user, each written by its own pool: the app and user rows
    (made by the first writer, then locked by each) keep every key."""
    pools = [services() for _ in range(4)]
    sessions = [
        await pool.create_session(app_name=APP, user_id=USER, session_id=f"s{index}")
        for index, pool in enumerate(pools)
    ]

    async def writer(index: int) -> None:
        for step in range(5):
            await pools[index].append_event(
                sessions[index],
                event_with({f"app:w{index}": step, f"user:w{index}": step, "step": step}),
            )

    await asyncio.gather(*(writer(index) for index in range(len(pools))))

    loaded = await pools[0].get_session(app_name=APP, user_id=USER, session_id="s0")
    assert loaded is not None
    assert {key: value for key, value in loaded.state.items() if ":" in key} == {
        **{f"app:w{index}": 4 for index in range(4)},
        **{f"user:w{index}": 4 for index in range(4)},
    }


async def test_an_event_appended_through_two_pools_is_stored_once(
    services: Callable[..., PostgresSessionService],
) -> None:
    first, second = services(), services()
    session = await first.create_session(**IDS)
    other = await second.get_session(**IDS)
    assert other is not None
    event = event_with({"k": 1})
    await first.append_event(session, event)

    with pytest.raises(AlreadyExistsError):
        await second.append_event(other, event)  # the duplicate is said before staleness

    loaded = await second.get_session(**IDS)
    assert loaded is not None
    assert [stored.id for stored in loaded.events] == [event.id]


async def test_get_or_create_racing_across_pools_and_tasks_makes_one_session(
    services: Callable[..., PostgresSessionService],
) -> None:
    pools = [services() for _ in range(3)]

    sessions = await asyncio.gather(
        *(
            pools[index % len(pools)].get_or_create_session(
                **IDS, state={"by": index, "user:first": index}
            )
            for index in range(30)
        )
    )

    assert {session.id for session in sessions} == {"s1"}
    (winner,) = {session.state["by"] for session in sessions}
    listed = await pools[0].list_sessions(app_name=APP, user_id=USER)
    assert [session.id for session in listed] == ["s1"]
    # Only the creator's scoped state was written.
    assert listed[0].state == {"by": winner, "user:first": winner}


async def test_create_with_an_existing_id_leaves_the_connection_usable(
    services: Callable[..., PostgresSessionService],
) -> None:
    service = services(max_size=1)
    await service.create_session(**IDS)

    for _ in range(3):
        with pytest.raises(AlreadyExistsError):
            await service.create_session(**IDS)
    assert await service.get_session(**IDS) is not None


async def test_a_large_event_round_trips(services: Callable[..., PostgresSessionService]) -> None:
    service = services()
    session = await service.create_session(**IDS)
    event = event_with({"blob": "x" * (12 * 1024 * 1024)}, "big")

    await service.append_event(session, event)

    loaded = await service.get_session(**IDS)
    assert loaded is not None
    assert loaded.events == [event]


# --- migrations -------------------------------------------------------------------------------


async def test_migrations_are_recorded_once_and_idempotent(postgres_url: str) -> None:
    service = PostgresSessionService(postgres_url)
    try:
        assert await service.migrate() == SCHEMA_VERSION
        assert await service.migrate() == SCHEMA_VERSION
        await service.create_session(**IDS)  # the first use finds the schema current
    finally:
        await service.close()

    rows = await query(
        postgres_url,
        "SELECT store, version FROM adk_schema_migrations ORDER BY store, version",
    )
    assert [tuple(row) for row in rows] == [
        ("sessions", version) for version in range(1, SCHEMA_VERSION + 1)
    ]


async def test_concurrent_starters_migrate_once(
    services: Callable[..., PostgresSessionService],
) -> None:
    """Replicas starting together on an empty database: each first call migrates, under
    the advisory lock, and every one of them works."""
    replicas = [services(min_size=0) for _ in range(8)]

    await asyncio.gather(
        *(
            replica.create_session(app_name=APP, user_id=USER, session_id=f"s{index}")
            for index, replica in enumerate(replicas)
        )
    )

    listed = await replicas[0].list_sessions(app_name=APP, user_id=USER)
    assert len(listed) == len(replicas)


async def test_concurrent_migrate_calls_all_report_the_version(
    services: Callable[..., PostgresSessionService],
) -> None:
    versions = await asyncio.gather(*(services().migrate() for _ in range(6)))

    assert versions == [SCHEMA_VERSION] * 6


async def test_without_migrate_a_store_refuses_an_old_schema_until_migrated(
    services: Callable[..., PostgresSessionService],
) -> None:
    service = services(migrate=False)

    with pytest.raises(SessionError, match="adk-mesh migrate"):
        await service.create_session(**IDS)

    await services().migrate()
    await service.create_session(**IDS)


async def test_a_schema_newer_than_the_code_is_refused(
    postgres_url: str, services: Callable[..., PostgresSessionService]
) -> None:
    await services().migrate()
    await query(
        postgres_url,
        "INSERT INTO adk_schema_migrations (store, version, description) "
        "VALUES ('sessions', $1, 'from the future')",
        SCHEMA_VERSION + 1,
    )

    for service in (services(), services(migrate=False)):
        with pytest.raises(SessionError, match="newer"):
            await service.create_session(**IDS)
    with pytest.raises(SessionError, match="newer"):
        await services().migrate()


# --- the pool and errors ----------------------------------------------------------------------


async def test_close_closes_every_connection_and_later_calls_are_refused(
    postgres_url: str, services: Callable[..., PostgresSessionService]
) -> None:
    service = services(min_size=2, max_size=4)
    session = await service.create_session(**IDS)
    async with service.claim_session(**IDS):
        await service.append_event(session, event_with({"k": 1}))
    connected = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
    assert (await query(postgres_url, connected, "adk-mesh-sessions"))[0][0] >= 3

    await service.close()
    await service.close()

    assert (await query(postgres_url, connected, "adk-mesh-sessions"))[0][0] == 0
    with pytest.raises(SessionError, match="closed"):
        await service.get_session(**IDS)
    with pytest.raises(SessionError, match="closed"):
        service.claim_session(**IDS)


async def test_a_service_that_never_connected_closes(postgres_url: str) -> None:
    service = PostgresSessionService(postgres_url)

    await service.close()

    with pytest.raises(SessionError, match="closed"):
        await service.list_sessions(app_name=APP, user_id=USER)


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("mysql://host/db", {}),
        ("postgresql//host/db", {}),
        ("postgresql://host:notaport/db", {}),
        ("postgresql://host/db#fragment", {}),
        ("postgresql://host/db", {"min_size": 5, "max_size": 2}),
        ("postgresql://host/db", {"max_size": 0}),
    ],
)
def test_bad_urls_and_pool_sizes_are_config_errors(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        PostgresSessionService(url, **options)


def test_a_bad_url_through_the_factory_is_a_config_error_without_the_password() -> None:
    with pytest.raises(ConfigError) as raised:
        session_service_from_url("postgresql://app:s3cret@host:port/db")

    assert "s3cret" not in str(raised.value)
    assert "app:***@host:port" in str(raised.value)


async def test_an_unreachable_server_is_a_clear_error_without_the_password() -> None:
    url = f"postgresql://app:s3cret@127.0.0.1:{unused_port()}/sessions"
    service = PostgresSessionService(url, connect_timeout=5)
    try:
        with pytest.raises(SessionError) as raised:
            await service.create_session(**IDS)
        with pytest.raises(SessionError):
            await service.migrate()
    finally:
        await service.close()

    message = str(raised.value)
    assert "cannot connect to the PostgreSQL session store" in message
    assert "postgresql://app:***@127.0.0.1" in message
    assert "s3cret" not in message


async def test_a_missing_database_is_a_clear_error(postgres_url: str) -> None:
    service = PostgresSessionService(postgres_url.rsplit("/", 1)[0] + "/no_such_database")
    try:
        with pytest.raises(SessionError, match="no_such_database"):
            await service.get_session(**IDS)
    finally:
        await service.close()


async def test_url_query_parameters_reach_the_driver(postgres_url: str) -> None:
    service = session_service_from_url(f"{postgres_url}?sslmode=disable&application_name=mine")
    try:
        await service.create_session(**IDS)
        rows = await query(
            postgres_url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'mine'"
        )
        assert rows[0][0] >= 1
    finally:
        await service.close()


async def test_the_store_survives_its_connections_being_cut(
    postgres_url: str, services: Callable[..., PostgresSessionService]
) -> None:
    service = services(min_size=1, max_size=2)
    session = await service.create_session(**IDS)
    await query(
        postgres_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'adk-mesh-sessions'",
    )

    # A call on a cut connection may fail (as a SessionError); the pool then reconnects.
    for _ in range(3):
        try:
            await service.append_event(session, event_with({"k": 1}))
            break
        except SessionError:
            continue
    loaded = await service.get_session(**IDS)
    assert loaded is not None and len(loaded.events) == 1


# --- claims -----------------------------------------------------------------------------------


async def test_a_claim_admits_one_holder_across_services(
    services: Callable[..., PostgresSessionService],
) -> None:
    first, second = services(), services()

    async with first.claim_session(**IDS):
        with pytest.raises(SessionConflictError) as raised:
            async with second.claim_session(**IDS):
                pass
        with pytest.raises(SessionConflictError):
            async with first.claim_session(**IDS):
                pass
        # Other sessions are free.
        async with second.claim_session(app_name=APP, user_id=USER, session_id="s2"):
            pass

    assert raised.value.reason == "SESSION_CONFLICT"
    assert "busy with a turn in another process" in raised.value.message
    async with second.claim_session(**IDS):
        pass
    async with first.claim_session(**IDS):
        pass


async def test_a_claim_is_let_go_when_its_block_raises(
    services: Callable[..., PostgresSessionService],
) -> None:
    first, second = services(), services()

    with pytest.raises(RuntimeError):
        async with first.claim_session(**IDS):
            raise RuntimeError("the turn failed")

    async with second.claim_session(**IDS):
        pass


async def test_a_claim_cancelled_on_its_way_in_leaves_nothing_held(
    services: Callable[..., PostgresSessionService],
) -> None:
    first, second = services(), services()
    async with first.claim_session(app_name=APP, user_id=USER, session_id="warm"):
        pass  # the claims connection is open
    entered = asyncio.Event()

    async def hold() -> None:
        async with first.claim_session(**IDS):
            entered.set()
            await asyncio.Event().wait()

    for delay_steps in range(6):
        task = asyncio.create_task(hold())
        for _ in range(delay_steps):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Whatever the moment of the cancellation, the session is free again, in this
        # process and in another.
        async with first.claim_session(**IDS):
            pass
        async with second.claim_session(**IDS):
            pass


async def test_many_claims_share_one_connection(
    postgres_url: str, services: Callable[..., PostgresSessionService]
) -> None:
    service = services(min_size=0, max_size=2)
    async with AsyncExitStack() as stack:
        for index in range(20):
            await stack.enter_async_context(
                service.claim_session(app_name=APP, user_id=USER, session_id=f"s{index}")
            )
        # Appends still get pooled connections while every claim is held.
        session = await service.create_session(**IDS)
        await service.append_event(session, event_with({"k": 1}))
        rows = await query(
            postgres_url,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted",
        )
        assert rows[0][0] == 20
    rows = await query(
        postgres_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
    )
    assert rows[0][0] == 0


async def test_claims_work_again_after_their_connection_is_cut(
    postgres_url: str, services: Callable[..., PostgresSessionService]
) -> None:
    first, second = services(), services()
    async with first.claim_session(**IDS):
        pass
    await query(
        postgres_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'adk-mesh-sessions'",
    )

    claimed = False
    for _ in range(2):  # the first claim may meet the cut connection; the next reconnects
        try:
            async with first.claim_session(**IDS):
                claimed = True
                with pytest.raises(SessionConflictError):
                    async with second.claim_session(**IDS):
                        pass
            break
        except SessionConflictError:
            raise
        except SessionError:
            continue
    assert claimed


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from adk_mesh.sessions.postgres import PostgresSessionService

    async def main(url: str) -> None:
        service = PostgresSessionService(url)
        async with service.claim_session(app_name="app", user_id="u", session_id="s1"):
            print("held", flush=True)
            sys.stdin.readline()

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_a_claim_held_by_another_process_is_refused_until_that_process_dies(
    services: Callable[..., PostgresSessionService], postgres_url: str
) -> None:
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLDER,
        postgres_url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    service = services()
    try:
        assert holder.stdout is not None
        line = await holder.stdout.readline()
        assert line == b"held\n", (line, await holder.stderr.read() if holder.stderr else b"")

        with pytest.raises(SessionConflictError):
            async with service.claim_session(**IDS):
                pass

        holder.send_signal(signal.SIGKILL)  # no cleanup runs: the server drops its locks
        await holder.wait()
        # The server lets go once it sees the connection closed: wait for that, not a time.
        while True:
            try:
                async with service.claim_session(**IDS):
                    break
            except SessionConflictError:
                await asyncio.sleep(0.05)
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
