"""session_service_from_url and the public exports of adk_mesh.sessions."""

from __future__ import annotations

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
        "postgres://localhost/db",
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
    if url.startswith(("postgres", "redis", "no-scheme")):
        assert "memory://" in message and "sqlite:///" in message
