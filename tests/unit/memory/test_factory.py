"""memory_service_from_url and the public exports of adk_mesh.memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import adk_mesh.memory
from adk_mesh.errors import ConfigError
from adk_mesh.memory import InMemoryMemoryService, SqliteMemoryService, memory_service_from_url
from tests.unit.memory.test_contract import search, session_with


def test_public_exports() -> None:
    assert sorted(adk_mesh.memory.__all__) == [
        "InMemoryMemoryService",
        "MemoryEntry",
        "MemoryService",
        "SqliteMemoryService",
        "check_memory_store_url",
        "memory_service_from_url",
    ]


def test_memory_url() -> None:
    assert isinstance(memory_service_from_url("memory://"), InMemoryMemoryService)
    assert isinstance(memory_service_from_url("MEMORY://"), InMemoryMemoryService)


async def test_relative_sqlite_url_is_relative_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    service = memory_service_from_url("sqlite:///data/memory.db")

    assert isinstance(service, SqliteMemoryService)
    assert service.path == "data/memory.db"
    try:
        await service.add_session_to_memory(session_with("kept in a file"))
    finally:
        await service.close()
    assert (tmp_path / "data" / "memory.db").is_file()


async def test_absolute_sqlite_url_with_escapes(tmp_path: Path) -> None:
    target = tmp_path / "a b" / "memory.db"

    service = memory_service_from_url(f"sqlite:///{tmp_path}/a%20b/memory.db")

    assert isinstance(service, SqliteMemoryService)
    assert service.path == str(target)
    try:
        await service.add_session_to_memory(session_with("kept in a file"))
        assert await search(service, "file") == ["kept in a file"]
    finally:
        await service.close()
    assert target.is_file()


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
        memory_service_from_url(url)

    message = str(raised.value)
    assert "memory store" in message and url in message
    if url.startswith(("redis", "no-scheme")):
        assert "memory://" in message and "sqlite:///" in message and "postgresql://" in message


def test_postgres_urls_load_their_backend_only_when_used() -> None:
    """Importing the package (or using another scheme) never loads the PostgreSQL backend;
    a PostgreSQL URL without it is a ConfigError that says what to install, and never shows
    the password."""
    code = """
import sys
import adk_mesh.memory as memory
from adk_mesh.errors import ConfigError
memory.memory_service_from_url("sqlite:///:memory:")
assert "adk_mesh.memory.postgres" not in sys.modules, "loaded too early"
assert "asyncpg" not in sys.modules, "asyncpg loaded too early"
sys.modules["adk_mesh.memory.postgres"] = None  # as if it were not installed
for url in ("postgresql://app:s3cret@db/memory", "postgres://db/memory"):
    try:
        memory.memory_service_from_url(url)
    except ConfigError as error:
        print(error.message)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )

    first, second = result.stdout.splitlines()
    assert "pip install 'adk-mesh[postgres]'" in first
    assert "postgresql://app:***@db/memory" in first and "s3cret" not in first
    assert "postgres://db/memory" in second


@pytest.mark.postgres
async def test_a_postgres_url_opens_the_postgres_store(postgres_url: str) -> None:
    service = memory_service_from_url(postgres_url)

    assert type(service).__name__ == "PostgresMemoryService"
    try:
        await service.add_session_to_memory(session_with("kept in a database"))
        assert await search(service, "database") == ["kept in a database"]
    finally:
        await service.close()
