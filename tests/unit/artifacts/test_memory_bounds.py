"""InMemoryArtifactService is bounded: whole scopes, least recently used first, by count,
bytes and an optional TTL."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh.artifacts import InMemoryArtifactService, artifact_service_from_url
from adk_mesh.artifacts import memory as memory_module
from adk_mesh.artifacts.memory import DEFAULT_MAX_ARTIFACT_BYTES, DEFAULT_MAX_ARTIFACT_SCOPES
from adk_mesh.errors import ConfigError
from adk_mesh.types import Part

APP = "app"
USER = "alice"


async def save(service: InMemoryArtifactService, session: str, name: str, data: bytes) -> int:
    return await service.save_artifact(
        app_name=APP,
        user_id=USER,
        session_id=session,
        filename=name,
        artifact=Part.from_inline_data("application/octet-stream", data),
    )


async def load(service: InMemoryArtifactService, session: str, name: str) -> bytes | None:
    part = await service.load_artifact(
        app_name=APP, user_id=USER, session_id=session, filename=name
    )
    if part is None:
        return None
    assert part.inline_data is not None
    return part.inline_data.data


def scopes(service: InMemoryArtifactService) -> list[str | None]:
    return [key[2] for key in service._scopes]


def test_the_default_store_is_bounded() -> None:
    for store in (InMemoryArtifactService(), artifact_service_from_url("memory://")):
        assert isinstance(store, InMemoryArtifactService)
        assert store.max_scopes == DEFAULT_MAX_ARTIFACT_SCOPES
        assert store.max_bytes == DEFAULT_MAX_ARTIFACT_BYTES
        assert store.ttl is None


@pytest.mark.parametrize("kwargs", [{"max_scopes": 0}, {"max_bytes": 0}, {"ttl": 0}, {"ttl": -5.0}])
def test_bad_bounds_are_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        InMemoryArtifactService(**kwargs)


async def test_the_least_recently_used_scope_goes_whole_past_max_scopes() -> None:
    service = InMemoryArtifactService(max_scopes=2, max_bytes=None)
    await save(service, "s1", "a.bin", b"1")
    await save(service, "s1", "b.bin", b"1")
    await save(service, "s2", "a.bin", b"2")
    assert await load(service, "s1", "a.bin") == b"1"  # a load is a use: s2 is now the oldest
    await save(service, "s3", "a.bin", b"3")
    assert scopes(service) == ["s1", "s3"]
    assert await load(service, "s2", "a.bin") is None
    assert await service.list_artifact_keys(app_name=APP, user_id=USER, session_id="s1") == [
        "a.bin",
        "b.bin",
    ]


async def test_user_artifacts_are_a_scope_of_their_own() -> None:
    service = InMemoryArtifactService(max_scopes=2, max_bytes=None)
    await save(service, "s1", "user:profile.bin", b"p")
    await save(service, "s1", "a.bin", b"1")
    # Read through another session: the user's scope is used, s1's is not.
    assert await load(service, "s2", "user:profile.bin") == b"p"
    await save(service, "s3", "a.bin", b"3")
    assert scopes(service) == [None, "s3"]


async def test_bytes_bound_every_version_and_the_scope_just_saved_is_kept() -> None:
    service = InMemoryArtifactService(max_scopes=None, max_bytes=10)
    await save(service, "s1", "a.bin", b"12345")
    await save(service, "s2", "a.bin", b"123")
    await save(service, "s2", "a.bin", b"12")  # s2 holds 5 bytes in two versions
    assert service._bytes == 10
    await save(service, "s3", "a.bin", b"1")
    assert scopes(service) == ["s2", "s3"] and service._bytes == 6
    # Larger than the bound alone: kept, everything else goes.
    assert await save(service, "s4", "big.bin", b"x" * 50) == 1
    assert scopes(service) == ["s4"] and service._bytes == 50
    assert await load(service, "s4", "big.bin") == b"x" * 50

    await service.delete_artifact(app_name=APP, user_id=USER, session_id="s4", filename="big.bin")
    assert scopes(service) == [] and service._bytes == 0


async def test_text_counts_as_utf8() -> None:
    service = InMemoryArtifactService(max_bytes=None)
    await service.save_artifact(
        app_name=APP, user_id=USER, session_id="s", filename="t.md", artifact=Part.from_text("é")
    )
    assert service._bytes == 2


async def test_scopes_unused_for_the_ttl_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(memory_module, "_monotonic", lambda: now[0])
    service = InMemoryArtifactService(ttl=30)
    await save(service, "old", "a.bin", b"1")
    await save(service, "read", "a.bin", b"2")
    now[0] += 20
    assert await service.list_versions(
        app_name=APP, user_id=USER, session_id="read", filename="a.bin"
    ) == [1]
    now[0] += 20
    assert await load(service, "old", "a.bin") is None
    assert await load(service, "read", "a.bin") == b"2"
    assert service._bytes == 1
