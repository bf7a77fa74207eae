"""Defects found reviewing the artifact stores and LoadArtifactsTool, each pinned by a test."""

from __future__ import annotations

from pathlib import Path

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts import ArtifactService, FileArtifactService, InMemoryArtifactService
from adk_mesh.contexts import InvocationContext, ToolContext
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel
from adk_mesh.tools.builtin import LoadArtifactsTool
from adk_mesh.types import Part
from tests.unit.artifacts.test_contract import service  # noqa: F401 - the fixture

SCOPE = {"app_name": "app", "user_id": "alice", "session_id": "s1"}


async def test_text_that_utf8_cannot_hold_is_refused_as_invalid_argument(
    service: ArtifactService,  # noqa: F811 - the fixture
) -> None:
    """A lone surrogate (text a tool decoded with ``surrogateescape``, or a model's broken
    ``\\ud83d`` escape) cannot be stored as UTF-8: the save must be refused with an
    InvalidArgumentError saying so (INVALID_ARGUMENT on the wire), not a raw
    UnicodeEncodeError (INTERNAL), and nothing may be stored."""
    with pytest.raises(InvalidArgumentError, match="surrogate"):
        await service.save_artifact(
            filename="notes.txt", artifact=Part.from_text("ok \ud83d broken"), **SCOPE
        )

    assert await service.list_artifact_keys(**SCOPE) == []
    # The name is still free: the next good save is version 1.
    assert (
        await service.save_artifact(filename="notes.txt", artifact=Part.from_text("ok"), **SCOPE)
        == 1
    )


async def test_a_stray_file_in_a_scope_directory_does_not_break_listing(tmp_path: Path) -> None:
    """A file nobody saved through the store (``.DS_Store`` a file browser leaves, an
    operator's README) in a session's directory is not an artifact: listing the session's
    artifacts must skip it, not fail (a failed listing leaves load_artifacts' model without
    the names)."""
    store = FileArtifactService(tmp_path)
    await store.save_artifact(filename="notes.txt", artifact=Part.from_text("n"), **SCOPE)
    await store.save_artifact(filename="user:cv.txt", artifact=Part.from_text("c"), **SCOPE)
    (tmp_path / "app" / "alice" / "s1" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (tmp_path / "app" / "alice" / "user" / "README").write_text("artifacts of alice")

    assert await store.list_artifact_keys(**SCOPE) == ["notes.txt", "user:cv.txt"]


def tool_context(artifacts: ArtifactService, session_id: str) -> ToolContext:
    session_service = InMemorySessionService()
    session = Session(id=session_id, app_name="app", user_id="alice")
    invocation = InvocationContext(
        invocation_id="inv-1",
        agent=LlmAgent(name="reader", model=ScriptedModel([])),
        session=session,
        session_service=session_service,
        artifact_service=artifacts,
    )
    return ToolContext(invocation, function_call_id="call-1")


@pytest.mark.parametrize(
    "mime_type",
    [
        "application/json; charset=utf-8",
        "text/plain;charset=UTF-8",
        "Text/Plain",
        "APPLICATION/JSON",
        "application/ld+json",
        "application/vnd.api+json",
        "image/svg+xml",
        "application/atom+xml",
    ],
)
async def test_load_artifacts_reads_every_spelling_of_a_text_type_as_text(mime_type: str) -> None:
    """MIME types are case-insensitive, may carry parameters (``; charset=utf-8``, what most
    HTTP clients and ``mimetypes`` users write) and name JSON and XML formats by their
    ``+json`` / ``+xml`` suffix (RFC 6839). A JSON document saved as
    ``application/json; charset=utf-8`` must reach the model as its text, as plain
    ``application/json`` does, not as base64 the model cannot read."""
    artifacts = InMemoryArtifactService()
    await artifacts.save_artifact(
        filename="doc", artifact=Part.from_inline_data(mime_type, b'{"a": "caf\xc3\xa9"}'), **SCOPE
    )

    response = await LoadArtifactsTool().execute(
        tool_context(artifacts, "s1"), {"artifact_names": ["doc"]}
    )

    assert response == {"artifacts": [{"name": "doc", "content": '{"a": "café"}'}]}


async def test_load_artifacts_still_returns_binary_types_as_data() -> None:
    artifacts = InMemoryArtifactService()
    for name, mime_type in [("a.png", "image/png"), ("b.bin", "application/octet-stream")]:
        await artifacts.save_artifact(
            filename=name, artifact=Part.from_inline_data(mime_type, b"abc"), **SCOPE
        )

    response = await LoadArtifactsTool().execute(
        tool_context(artifacts, "s1"), {"artifact_names": ["a.png", "b.bin"]}
    )

    assert response == {
        "artifacts": [
            {"name": "a.png", "content": {"mime_type": "image/png", "data": "YWJj"}},
            {"name": "b.bin", "content": {"mime_type": "application/octet-stream", "data": "YWJj"}},
        ]
    }
