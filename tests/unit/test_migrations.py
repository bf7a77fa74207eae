"""``adk-mesh migrate`` and the versioned migrations of the stores (adk_mesh._migrations).

The command runs in subprocesses, as an operator (or a deployment's migration job) runs it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from adk_mesh._migrations import STORES, migrate_url
from adk_mesh._store_urls import redact_url
from adk_mesh.artifacts.postgres import SCHEMA_VERSION as ARTIFACTS_VERSION
from adk_mesh.errors import ConfigError
from adk_mesh.memory.postgres import SCHEMA_VERSION as MEMORY_VERSION
from adk_mesh.memory.sqlite import SCHEMA_VERSION as SQLITE_MEMORY_VERSION
from adk_mesh.sessions.postgres import SCHEMA_VERSION as SESSIONS_VERSION
from adk_mesh.sessions.sqlite import SCHEMA_VERSION as SQLITE_SESSIONS_VERSION

VERSIONS = {
    "sessions": SESSIONS_VERSION,
    "artifacts": ARTIFACTS_VERSION,
    "memory": MEMORY_VERSION,
}


def adk_mesh_command(
    *arguments: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``adk-mesh ARGUMENTS``, with no store URL in its environment but those of ``env``."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ADK_MESH_SESSIONS", "ADK_MESH_ARTIFACTS", "ADK_MESH_MEMORY")
    }
    return subprocess.run(
        [sys.executable, "-m", "adk_mesh", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**environment, **(env or {})},
    )


def with_password(url: str) -> str:
    """The test server trusts 127.0.0.1, so a password in the URL is ignored: what shows is
    whether the command prints it."""
    return url.replace("postgresql://postgres@", "postgresql://postgres:s3cret@", 1)


async def recorded_versions(url: str) -> list[tuple[str, int]]:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        rows = await connection.fetch(
            "SELECT store, version FROM adk_schema_migrations ORDER BY store, version"
        )
    finally:
        await connection.close()
    return [(row["store"], row["version"]) for row in rows]


def expected_rows(*stores: str) -> list[tuple[str, int]]:
    return sorted((store, version) for store in stores for version in range(1, VERSIONS[store] + 1))


@pytest.mark.postgres
async def test_migrate_creates_every_store_and_reports_its_version(postgres_url: str) -> None:
    url = with_password(postgres_url)

    first = await asyncio.to_thread(adk_mesh_command, "migrate", url)
    again = await asyncio.to_thread(adk_mesh_command, "migrate", url)

    for result in (first, again):
        assert result.returncode == 0, result.stderr
        shown = url.replace(":s3cret@", ":***@")
        assert result.stdout.splitlines() == [
            f"{shown}: {store} at schema version {VERSIONS[store]}" for store in STORES
        ]
        assert "s3cret" not in result.stdout + result.stderr
    assert await recorded_versions(postgres_url) == expected_rows(*STORES)


@pytest.mark.postgres
async def test_migrate_only_the_stores_asked_for(postgres_url: str) -> None:
    result = await asyncio.to_thread(
        adk_mesh_command, "migrate", postgres_url, "--store", "sessions", "--store", "memory"
    )

    assert result.returncode == 0, result.stderr
    assert [line.rsplit(": ", 1)[1] for line in result.stdout.splitlines()] == [
        f"sessions at schema version {SESSIONS_VERSION}",
        f"memory at schema version {MEMORY_VERSION}",
    ]
    assert await recorded_versions(postgres_url) == expected_rows("sessions", "memory")


@pytest.mark.postgres
async def test_migrate_processes_started_together_all_succeed(postgres_url: str) -> None:
    results = await asyncio.gather(
        *(asyncio.to_thread(adk_mesh_command, "migrate", postgres_url) for _ in range(3))
    )

    for result in results:
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.splitlines()) == len(STORES)
    assert await recorded_versions(postgres_url) == expected_rows(*STORES)


@pytest.mark.postgres
async def test_stores_migrate_concurrently_in_one_process(postgres_url: str) -> None:
    results = await asyncio.gather(*(migrate_url(postgres_url) for _ in range(4)))

    assert all(result == [(store, VERSIONS[store]) for store in STORES] for result in results)
    assert await recorded_versions(postgres_url) == expected_rows(*STORES)


@pytest.mark.postgres
async def test_a_failed_migration_writes_nothing(postgres_url: str) -> None:
    """A step that fails rolls back the whole migration: no table, no recorded version."""
    import asyncpg

    from adk_mesh._migrations import Migration, apply_migrations
    from adk_mesh.errors import SessionError

    broken = (
        Migration("a table", ("CREATE TABLE adk_probe (id int)",)),
        Migration("a mistake", ("CREATE TABLE adk_probe (id int)",)),
    )
    connection = await asyncpg.connect(postgres_url)
    try:
        with pytest.raises(asyncpg.DuplicateTableError):
            await apply_migrations(connection, "probe", broken, error=SessionError)
        assert await connection.fetchval("SELECT to_regclass('adk_probe')") is None
        assert await connection.fetchval("SELECT to_regclass('adk_schema_migrations')") is None
        assert await apply_migrations(connection, "probe", broken[:1], error=SessionError) == 1
    finally:
        await connection.close()


def test_migrate_an_unreachable_server_exits_1_with_the_reason() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://app:s3cret@127.0.0.1:{port}/db"

    result = adk_mesh_command("migrate", url)

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: SessionError: cannot connect to the PostgreSQL")
    assert f"postgresql://app:***@127.0.0.1:{port}/db" in result.stderr
    assert "s3cret" not in result.stderr


@pytest.mark.parametrize(
    "arguments",
    [
        ["memory://"],
        ["redis://host"],
        ["postgresql://db:port/x"],
        ["sqlite:///x.db", "--store", "artifacts"],
    ],
)
def test_migrate_urls_it_cannot_migrate_exit_2(arguments: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "adk_mesh", "migrate", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )

    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert len(result.stderr.splitlines()) == 1


def test_migrate_needs_a_url_or_a_store_in_the_environment() -> None:
    result = adk_mesh_command("migrate", env={"ADK_MESH_ARTIFACTS": "file:/tmp/x"})

    assert result.returncode == 2
    assert result.stderr == (
        "error: no store URL given, and none of $ADK_MESH_SESSIONS, $ADK_MESH_ARTIFACTS, "
        "$ADK_MESH_MEMORY names a store with a schema\n"
    )


async def test_migrate_reads_the_store_urls_from_the_environment(
    postgres_url: str, tmp_path: Path
) -> None:
    # The URL with its password stays out of the process list: a secret in the environment.
    memory = tmp_path / "memory.db"
    result = await asyncio.to_thread(
        adk_mesh_command,
        "migrate",
        env={
            "ADK_MESH_SESSIONS": postgres_url,
            "ADK_MESH_ARTIFACTS": postgres_url,
            "ADK_MESH_MEMORY": f"sqlite:///{memory}",
        },
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{postgres_url}: sessions at schema version {SESSIONS_VERSION}",
        f"{postgres_url}: artifacts at schema version 1",
        f"sqlite:///{memory}: memory at schema version {SQLITE_MEMORY_VERSION}",
    ]


def test_migrate_a_sqlite_file_creates_its_session_and_memory_tables(tmp_path: Path) -> None:
    path = tmp_path / "data" / "store.db"

    result = adk_mesh_command(
        "migrate", f"sqlite:///{path}", "--store", "sessions", "--store", "memory"
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"sqlite:///{path}: sessions at schema version {SQLITE_SESSIONS_VERSION}",
        f"sqlite:///{path}: memory at schema version {SQLITE_MEMORY_VERSION}",
    ]
    with closing(sqlite3.connect(path)) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SQLITE_SESSIONS_VERSION
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"sessions", "events", "memory_entries"} <= tables


async def test_migrate_url_refuses_an_unknown_store() -> None:
    with pytest.raises(ConfigError, match="unknown store"):
        await migrate_url("postgresql://db/x", ["nonsense"])


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/x", "postgresql://app:***@db:5432/x"),
        ("postgresql://app:s3cret@db?sslmode=require", "postgresql://app:***@db?sslmode=require"),
        (
            "postgresql://app@db/x?password=s3cret&sslmode=x",
            "postgresql://app@db/x?password=***&sslmode=x",
        ),
        ("postgresql://db/x", "postgresql://db/x"),
        ("sqlite:///x.db", "sqlite:///x.db"),
    ],
)
def test_redact_url_hides_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown
