"""The ArtifactService contract, run over every backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.artifacts import ArtifactService, FileArtifactService, InMemoryArtifactService
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.types import Part

APP = "app"
USER = "alice"
SESSION = "s1"


@pytest.fixture(params=["memory", "file", pytest.param("postgres", marks=pytest.mark.postgres)])
async def service(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ArtifactService]:
    backend: ArtifactService
    if request.param == "memory":
        backend = InMemoryArtifactService()
    elif request.param == "file":
        backend = FileArtifactService(tmp_path / "artifacts")
    else:
        from adk_mesh.artifacts.postgres import PostgresArtifactService

        backend = PostgresArtifactService(request.getfixturevalue("postgres_url"))
    try:
        yield backend
    finally:
        await backend.close()


def where(**overrides: str) -> dict[str, str]:
    scope = {"app_name": APP, "user_id": USER, "session_id": SESSION}
    scope.update(overrides)
    return scope


async def save(service: ArtifactService, filename: str, part: Part, **overrides: str) -> int:
    return await service.save_artifact(filename=filename, artifact=part, **where(**overrides))


async def load(service: ArtifactService, filename: str, **kwargs: Any) -> Part | None:
    version = kwargs.pop("version", None)
    return await service.load_artifact(filename=filename, version=version, **where(**kwargs))


async def test_versions_count_up_from_one(service: ArtifactService) -> None:
    versions = [await save(service, "notes.txt", Part.from_text(f"v{i}")) for i in (1, 2, 3)]

    assert versions == [1, 2, 3]
    assert await service.list_versions(filename="notes.txt", **where()) == [1, 2, 3]


async def test_load_gives_the_latest_or_the_version_asked_for(service: ArtifactService) -> None:
    for i in (1, 2, 3):
        await save(service, "notes.txt", Part.from_text(f"v{i}"))

    assert await load(service, "notes.txt") == Part.from_text("v3")
    assert await load(service, "notes.txt", version=1) == Part.from_text("v1")
    assert await load(service, "notes.txt", version=2) == Part.from_text("v2")
    assert await load(service, "notes.txt", version=4) is None
    with pytest.raises(InvalidArgumentError):
        await load(service, "notes.txt", version=0)


async def test_absent_artifacts(service: ArtifactService) -> None:
    assert await load(service, "missing.txt") is None
    assert await load(service, "missing.txt", version=1) is None
    assert await service.list_versions(filename="missing.txt", **where()) == []
    assert await service.list_artifact_keys(**where()) == []
    await service.delete_artifact(filename="missing.txt", **where())


async def test_text_and_binary_parts_round_trip(service: ArtifactService) -> None:
    binary = bytes(range(256)) * 4
    text = "héllo\nwörld \U0001f600 \x00 not a name, just content"

    await save(service, "image.png", Part.from_inline_data("image/png", binary))
    await save(service, "note.md", Part.from_text(text))
    await save(service, "empty.bin", Part.from_inline_data("application/octet-stream", b""))
    await save(service, "empty.txt", Part.from_text(""))

    assert await load(service, "image.png") == Part.from_inline_data("image/png", binary)
    assert await load(service, "note.md") == Part.from_text(text)
    assert await load(service, "empty.bin") == Part.from_inline_data(
        "application/octet-stream", b""
    )
    assert await load(service, "empty.txt") == Part.from_text("")


async def test_only_text_or_inline_data_can_be_saved(service: ArtifactService) -> None:
    with pytest.raises(InvalidArgumentError):
        await save(service, "call", Part.from_function_call("tool", {"a": 1}))
    assert await service.list_artifact_keys(**where()) == []


async def test_list_keys_is_sorted_and_includes_the_users_names(service: ArtifactService) -> None:
    await save(service, "zeta.txt", Part.from_text("z"))
    await save(service, "alpha.txt", Part.from_text("a"))
    await save(service, "alpha.txt", Part.from_text("a2"))
    await save(service, "dir/inner.txt", Part.from_text("d"))
    await save(
        service, "user:profile.png", Part.from_inline_data("image/png", b"p"), session_id="s0"
    )
    await save(service, "other-session.txt", Part.from_text("o"), session_id="s2")

    assert await service.list_artifact_keys(**where()) == [
        "alpha.txt",
        "dir/inner.txt",
        "user:profile.png",
        "zeta.txt",
    ]
    assert await service.list_artifact_keys(**where(session_id="s2")) == [
        "other-session.txt",
        "user:profile.png",
    ]


async def test_names_with_separators_do_not_collide_with_versions(
    service: ArtifactService,
) -> None:
    await save(service, "a", Part.from_text("plain a"))
    await save(service, "a/1", Part.from_text("a slash 1"))
    await save(service, "a-2F1", Part.from_text("escaped-looking name"))
    await save(service, "ab:c", Part.from_text("colon"))

    assert await load(service, "a") == Part.from_text("plain a")
    assert await load(service, "a/1") == Part.from_text("a slash 1")
    assert await load(service, "a-2F1") == Part.from_text("escaped-looking name")
    assert await service.list_versions(filename="a", **where()) == [1]
    assert await service.list_artifact_keys(**where()) == ["a", "a-2F1", "a/1", "ab:c"]


async def test_delete_removes_every_version(service: ArtifactService) -> None:
    await save(service, "notes.txt", Part.from_text("v1"))
    await save(service, "notes.txt", Part.from_text("v2"))
    await save(service, "keep.txt", Part.from_text("k"))

    await service.delete_artifact(filename="notes.txt", **where())

    assert await load(service, "notes.txt") is None
    assert await service.list_versions(filename="notes.txt", **where()) == []
    assert await service.list_artifact_keys(**where()) == ["keep.txt"]
    # A new save after a delete starts again at 1.
    assert await save(service, "notes.txt", Part.from_text("again")) == 1


async def test_user_names_are_shared_by_the_users_sessions(service: ArtifactService) -> None:
    assert await save(service, "user:cv.pdf", Part.from_text("v1"), session_id="s1") == 1
    assert await save(service, "user:cv.pdf", Part.from_text("v2"), session_id="s2") == 2

    assert await load(service, "user:cv.pdf", session_id="s3") == Part.from_text("v2")
    assert await service.list_versions(filename="user:cv.pdf", **where(session_id="s9")) == [1, 2]
    await service.delete_artifact(filename="user:cv.pdf", **where(session_id="s4"))
    assert await load(service, "user:cv.pdf", session_id="s1") is None


async def test_user_names_are_not_shared_with_other_users_or_apps(
    service: ArtifactService,
) -> None:
    await save(service, "user:cv.pdf", Part.from_text("alice"))

    assert await load(service, "user:cv.pdf", user_id="bob") is None
    assert await load(service, "user:cv.pdf", app_name="other") is None
    assert await service.list_artifact_keys(**where(user_id="bob")) == []


async def test_session_names_are_private_to_the_session(service: ArtifactService) -> None:
    await save(service, "draft.txt", Part.from_text("s1"))

    assert await load(service, "draft.txt", session_id="s2") is None
    assert await service.list_artifact_keys(**where(session_id="s2")) == []


async def test_a_session_named_user_keeps_its_names_apart(service: ArtifactService) -> None:
    await save(service, "draft.txt", Part.from_text("session"), session_id="user")
    await save(service, "user:cv.pdf", Part.from_text("user"), session_id="user")

    assert await service.list_artifact_keys(**where(session_id="user")) == [
        "draft.txt",
        "user:cv.pdf",
    ]
    assert await service.list_artifact_keys(**where(session_id="s1")) == ["user:cv.pdf"]


async def test_concurrent_saves_get_distinct_versions(service: ArtifactService) -> None:
    versions = await asyncio.gather(
        *(save(service, "log.txt", Part.from_text(str(i))) for i in range(10))
    )

    assert sorted(versions) == list(range(1, 11))
    for version in versions:
        loaded = await load(service, "log.txt", version=version)
        assert loaded is not None and loaded.text == str(versions.index(version))


async def test_close_is_idempotent(service: ArtifactService) -> None:
    await save(service, "notes.txt", Part.from_text("v1"))

    await service.close()
    await service.close()


async def test_loaded_parts_share_nothing_with_the_store(service: ArtifactService) -> None:
    part = Part.from_text("original")
    await save(service, "notes.txt", part)
    part.text = "changed after save"

    loaded = await load(service, "notes.txt")
    assert loaded == Part.from_text("original")
    assert loaded is not None
    loaded.text = "changed after load"
    assert await load(service, "notes.txt") == Part.from_text("original")


BAD_NAMES = [
    "",
    "user:",
    "../x",
    "/etc/passwd",
    "a/../../b",
    "a/./b",
    "a//b",
    "trailing/",
    "nul\x00byte",
    "new\nline",
    "C:\\x",
    "back\\slash",
    "user:../escape",
    "..",
    ".hidden",
    "dir/.hidden",
    "trailing.",
    "a%2F1",
    "with space.txt",
    "caf\u00e9.txt",
    "x" * 129,
    "user:" + "x" * 124,
    "x" * 10_000_000,
]


def _shown_param(value: str) -> str:
    return repr(value) if len(value) <= 20 else f"{len(value)}-chars"


@pytest.mark.parametrize("name", BAD_NAMES, ids=_shown_param)
async def test_names_that_could_escape_are_refused_by_every_call(
    service: ArtifactService, name: str
) -> None:
    with pytest.raises(InvalidArgumentError):
        await save(service, name, Part.from_text("x"))
    with pytest.raises(InvalidArgumentError):
        await load(service, name)
    with pytest.raises(InvalidArgumentError):
        await service.list_versions(filename=name, **where())
    with pytest.raises(InvalidArgumentError):
        await service.delete_artifact(filename=name, **where())


BAD_IDS = [
    "",
    ".",
    "..",
    ".hidden",
    "trailing.",
    "a/b",
    "../x",
    "/abs",
    "back\\slash",
    "nul\x00",
    "tab\t",
    "sp ace",
    "caf\u00e9",
    "x" * 129,
    "x" * 10_000_000,
]


@pytest.mark.parametrize("field", ["app_name", "user_id", "session_id"])
@pytest.mark.parametrize("value", BAD_IDS, ids=_shown_param)
async def test_ids_that_could_escape_are_refused(
    service: ArtifactService, field: str, value: str
) -> None:
    scope: dict[str, Any] = where(**{field: value})
    with pytest.raises(InvalidArgumentError):
        await service.save_artifact(filename="ok.txt", artifact=Part.from_text("x"), **scope)
    with pytest.raises(InvalidArgumentError):
        await service.load_artifact(filename="ok.txt", **scope)
    with pytest.raises(InvalidArgumentError):
        await service.list_artifact_keys(**scope)
    with pytest.raises(InvalidArgumentError):
        await service.list_versions(filename="ok.txt", **scope)
    with pytest.raises(InvalidArgumentError):
        await service.delete_artifact(filename="ok.txt", **scope)


LONGEST_NAMES = [
    "n" * 128,
    "user:" + "n" * 123,
    "/".join(["a"] * 64) + "b",
    ":" * 128,
    "C:x",
    "Az09._-@:+=.txt",
]


@pytest.mark.parametrize("name", LONGEST_NAMES, ids=_shown_param)
async def test_every_name_the_rule_allows_is_stored(service: ArtifactService, name: str) -> None:
    """The file store holds every name the id rule allows, the longest and the most escaped
    included, exactly as the memory store does."""
    assert await save(service, name, Part.from_text("kept")) == 1
    assert await load(service, name) == Part.from_text("kept")
    assert name in await service.list_artifact_keys(**where())


async def test_the_longest_ids_hold_artifacts(service: ArtifactService) -> None:
    longest = {"app_name": "a" * 128, "user_id": "u" * 128, "session_id": "s" * 128}
    await service.save_artifact(filename="ok.txt", artifact=Part.from_text("x"), **longest)

    assert await service.list_artifact_keys(**longest) == ["ok.txt"]
