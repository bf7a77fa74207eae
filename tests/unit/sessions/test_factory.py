"""session_service_from_url and the public exports of adk_mesh.sessions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import adk_mesh.sessions
from adk_mesh.errors import ConfigError
from adk_mesh.sessions import (
    InMemorySessionService,
    SessionService,
    SqliteSessionService,
    session_service_from_url,
)


def test_public_exports() -> None:
    assert sorted(adk_mesh.sessions.__all__) == [
        "InMemorySessionService",
        "Session",
        "SessionService",
        "SqliteSessionService",
        "check_session_store_url",
        "session_service_from_url",
    ]


async def test_memory_url() -> None:
    service = session_service_from_url("memory://")

    assert isinstance(service, InMemorySessionService)


async def _use(service: SessionService) -> None:
    try:
        await service.create_session(app_name="app", user_id="u")
    finally:
        await service.close()


async def test_relative_sqlite_url_is_relative_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    service = session_service_from_url("sqlite:///data/sessions.db")

    assert isinstance(service, SqliteSessionService)
    assert service.path == "data/sessions.db"
    await _use(service)
    assert (tmp_path / "data" / "sessions.db").is_file()


async def test_absolute_sqlite_url_creates_parent_directories(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "sessions.db"

    service = session_service_from_url(f"sqlite:///{target}")

    assert isinstance(service, SqliteSessionService)
    assert service.path == str(target)
    await _use(service)
    assert target.is_file()


async def test_percent_escapes_in_sqlite_paths_are_decoded(tmp_path: Path) -> None:
    service = session_service_from_url(f"sqlite:///{tmp_path}/with%20space.db")

    assert isinstance(service, SqliteSessionService)
    await _use(service)
    assert (tmp_path / "with space.db").is_file()


@pytest.mark.parametrize(
    "url",
    [
        "redis://x",
        "sqlite://host/file.db",
        "sqlite:///",
        "sqlite:///file.db?mode=ro",
        "memory://somewhere",
        "no-scheme.db",
    ],
)
def test_bad_urls_raise_config_error_naming_the_known_forms(url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        session_service_from_url(url)

    message = str(raised.value)
    assert url in message
    if url.startswith(("redis", "no-scheme")):
        assert "memory://" in message and "sqlite:///" in message
        assert "postgresql://" in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:secret@db.example:5432/sessions?sslmode=require",
        "postgres://db.example/sessions",
        "POSTGRESQL://db.example/sessions",
        "postgresql:///sessions",
    ],
)
async def test_postgres_urls_make_a_postgres_store_that_connects_only_when_used(url: str) -> None:
    from adk_mesh.sessions.postgres import PostgresSessionService

    service = session_service_from_url(url)

    assert isinstance(service, PostgresSessionService)
    assert "secret" not in service.url
    await service.close()  # never connected: nothing to reach


@pytest.mark.parametrize("url", ["postgresql://db:port/sessions", "postgres://db/sessions#part"])
def test_malformed_postgres_urls_raise_config_error(url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        session_service_from_url(url)

    assert "session store URL" in str(raised.value)


def test_the_postgres_backend_is_loaded_only_when_used_and_its_absence_is_explained() -> None:
    """Importing the package (or using another scheme) never loads the PostgreSQL backend
    or asyncpg; without asyncpg a PostgreSQL URL is a ConfigError naming the extra, and the
    password never shows."""
    code = """
import sys
import adk_mesh.sessions as sessions
from adk_mesh.errors import ConfigError
sessions.session_service_from_url("sqlite:///:memory:")
assert "adk_mesh.sessions.postgres" not in sys.modules, "backend loaded too early"
assert "asyncpg" not in sys.modules, "asyncpg loaded too early"
sys.modules["asyncpg"] = None  # as if it were not installed
for url in ("postgresql://app:s3cret@db/sessions", "postgres://db/sessions"):
    try:
        sessions.session_service_from_url(url)
    except ConfigError as error:
        print(error.message)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )

    first, second = result.stdout.splitlines()
    assert "pip install 'adk-mesh[postgres]'" in first
    assert "postgresql://app:***@db/sessions" in first and "s3cret" not in first
    assert "pip install 'adk-mesh[postgres]'" in second
