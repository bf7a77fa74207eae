"""Bounds of the session API's artifacts, on real AgentServers on 127.0.0.1 (and the HTTP
gateway in front of one):

* ``LoadArtifact`` of an artifact too large for one message of the mesh (saved in process, by
  a tool, say) is refused with an error of ours that names the artifact, its size and the
  limit, not gRPC's own RESOURCE_EXHAUSTED; the gateway loads it with LoadArtifactStream
  (in chunks), and describes the version's metadata.
* ``SaveArtifact`` racing ``DeleteSession`` (interleaved deterministically through hooked
  stores) leaves nothing behind that a later session with the same id would inherit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest

from adk_mesh.artifacts import ArtifactService, FileArtifactService, InMemoryArtifactService
from adk_mesh.errors import ArtifactTooLargeError
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.types import Part
from adk_mesh.v1 import content_pb2, session_pb2
from gateway import GatewaySettings
from tests.gateway.conftest import serve_gateway
from tests.integration.mesh.test_session_service import APP, Served, refusal, serve, stop

IDS = {"user_id": "ada", "session_id": "s-1"}
MIME = "application/octet-stream"


def blob_of(size: int) -> Part:
    return Part.from_inline_data(MIME, b"\x07" * size)


def load_request(filename: str, version: int | None = None) -> Any:
    request = session_pb2.SessionServiceLoadArtifactRequest(**IDS, filename=filename)
    if version is not None:
        request.version = version
    return request


def response_bytes(data_size: int) -> int:
    """The encoded size of a LoadArtifact answer carrying a blob of ``data_size`` bytes."""
    return session_pb2.SessionServiceLoadArtifactResponse(
        artifact=content_pb2.Part(
            inline_data=content_pb2.Blob(mime_type=MIME, data=b"\x07" * data_size)
        ),
        version=1,
    ).ByteSize()


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    served = await serve(artifacts=InMemoryArtifactService())
    await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
    try:
        yield served
    finally:
        await stop(served)


async def save_in_process(served: Served, filename: str, part: Part) -> int:
    """Save as a tool of the served agent does: straight to the service's store."""
    assert served.artifacts is not None
    return await served.artifacts.save_artifact(
        app_name=APP, filename=filename, artifact=part, **IDS
    )


# --- LoadArtifact of an artifact larger than one message -----------------------------------


async def test_an_artifact_too_large_for_a_message_is_refused_naming_it(served: Served) -> None:
    size = MAX_MESSAGE_BYTES + 1024
    await save_in_process(served, "big.bin", blob_of(size))

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await served.stub.LoadArtifact(load_request("big.bin"), timeout=60)

    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    error = error_from_rpc_error(raised.value)
    assert isinstance(error, ArtifactTooLargeError)
    assert "big.bin" in error.message
    assert "version 1" in error.message
    assert str(response_bytes(size)) in error.message
    assert str(MAX_MESSAGE_BYTES) in error.message
    assert error.metadata["filename"] == "big.bin"
    assert error.metadata["version"] == "1"
    assert error.metadata["size_bytes"] == str(response_bytes(size))
    assert error.metadata["limit_bytes"] == str(MAX_MESSAGE_BYTES)
    assert error.metadata["mime_type"] == MIME
    # Naming the version gives the same answer; the other calls still work.
    assert await refusal(
        lambda: served.stub.LoadArtifact(load_request("big.bin", 1), timeout=60)
    ) == (grpc.StatusCode.FAILED_PRECONDITION, "ARTIFACT_TOO_LARGE")
    versions = await served.stub.ListArtifactVersions(
        session_pb2.SessionServiceListArtifactVersionsRequest(**IDS, filename="big.bin"),
        timeout=10,
    )
    assert list(versions.versions) == [1]


async def test_an_artifact_whose_answer_is_exactly_the_limit_loads(served: Served) -> None:
    size = MAX_MESSAGE_BYTES - 64
    size += MAX_MESSAGE_BYTES - response_bytes(size)
    assert response_bytes(size) == MAX_MESSAGE_BYTES
    await save_in_process(served, "edge.bin", blob_of(size))

    response = await served.stub.LoadArtifact(load_request("edge.bin"), timeout=60)

    assert response.version == 1
    assert len(response.artifact.inline_data.data) == size


async def test_the_gateway_loads_an_artifact_too_large_for_one_message(
    served: Served,
) -> None:
    size = MAX_MESSAGE_BYTES + 1024
    await save_in_process(served, "big.bin", blob_of(size))
    await save_in_process(served, "big.bin", Part.from_text("small now"))
    settings = GatewaySettings(apps={APP: served.target}, sse_ping_seconds=0)
    base = f"/apps/{APP}/users/ada/sessions/s-1/artifacts/big.bin"
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        loaded = await client.get(base, params={"version": 1})
        by_path = await client.get(base + "/versions/1")
        described = await client.get(base + "/versions/metadata")
        latest = await client.get(base)

    for answer in (loaded, by_path):
        assert answer.status_code == 200, answer.text[:500]
        assert answer.json()["inlineData"]["mimeType"] == MIME
    # The metadata of a version too large for one message is described too.
    assert described.status_code == 200, described.text
    assert [(v["version"], v.get("mimeType")) for v in described.json()] == [(1, MIME), (2, None)]
    assert latest.status_code == 200
    assert latest.json() == {"text": "small now"}


# --- SaveArtifact racing DeleteSession ------------------------------------------------------


Hook = Callable[[], Awaitable[None]]


class _Hooks:
    """Run a hook once, inside a store call, to interleave another RPC there."""

    def __init__(self) -> None:
        self.after_listing: Hook | None = None
        self.before_saving: Hook | None = None

    async def fire_after_listing(self) -> None:
        hook, self.after_listing = self.after_listing, None
        if hook is not None:
            await hook()

    async def fire_before_saving(self) -> None:
        hook, self.before_saving = self.before_saving, None
        if hook is not None:
            await hook()


class HookedMemoryArtifacts(InMemoryArtifactService):
    def __init__(self) -> None:
        super().__init__()
        self.hooks = _Hooks()

    async def list_artifact_keys(self, **scope: Any) -> list[str]:
        keys = await super().list_artifact_keys(**scope)
        await self.hooks.fire_after_listing()
        return keys

    async def save_artifact(self, **fields: Any) -> int:
        await self.hooks.fire_before_saving()
        return await super().save_artifact(**fields)


class HookedFileArtifacts(FileArtifactService):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.hooks = _Hooks()

    async def list_artifact_keys(self, **scope: Any) -> list[str]:
        keys = await super().list_artifact_keys(**scope)
        await self.hooks.fire_after_listing()
        return keys

    async def save_artifact(self, **fields: Any) -> int:
        await self.hooks.fire_before_saving()
        return await super().save_artifact(**fields)


@pytest.fixture(params=["memory", "file"])
async def hooked(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Served]:
    artifacts: HookedMemoryArtifacts | HookedFileArtifacts = (
        HookedMemoryArtifacts()
        if request.param == "memory"
        else HookedFileArtifacts(tmp_path / "artifacts")
    )
    served = await serve(artifacts=artifacts)
    await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
    try:
        yield served
    finally:
        await stop(served)
        await artifacts.close()


def hooks_of(served: Served) -> _Hooks:
    artifacts: ArtifactService | None = served.artifacts
    assert isinstance(artifacts, HookedMemoryArtifacts | HookedFileArtifacts)
    return artifacts.hooks


def save_request(filename: str, text: str) -> session_pb2.SessionServiceSaveArtifactRequest:
    return session_pb2.SessionServiceSaveArtifactRequest(
        **IDS, filename=filename, artifact=content_pb2.Part(text=text)
    )


async def keys_of_a_new_session_with_the_same_id(served: Served) -> list[str]:
    await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
    keys = await served.stub.ListArtifactKeys(
        session_pb2.SessionServiceListArtifactKeysRequest(**IDS), timeout=10
    )
    return list(keys.filenames)


async def test_a_save_landing_after_delete_session_listed_the_artifacts_is_not_inherited(
    hooked: Served,
) -> None:
    stub = hooked.stub
    await stub.SaveArtifact(save_request("old.txt", "listed, deleted"), timeout=10)
    saved: list[int] = []

    async def save_in_between() -> None:
        # The session still exists: this save succeeds, after DeleteSession's listing.
        saved.append((await stub.SaveArtifact(save_request("late.txt", "x"), timeout=10)).version)

    hooks_of(hooked).after_listing = save_in_between
    await stub.DeleteSession(session_pb2.DeleteSessionRequest(**IDS), timeout=10)

    assert saved == [1]
    assert await keys_of_a_new_session_with_the_same_id(hooked) == []


async def test_a_save_whose_write_lands_after_delete_session_is_undone_and_refused(
    hooked: Served,
) -> None:
    stub = hooked.stub

    async def delete_first() -> None:
        # The save found the session; it is deleted before the save writes.
        await stub.DeleteSession(session_pb2.DeleteSessionRequest(**IDS), timeout=10)

    hooks_of(hooked).before_saving = delete_first

    assert await refusal(lambda: stub.SaveArtifact(save_request("late.txt", "x"), timeout=10)) == (
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
    )
    assert await keys_of_a_new_session_with_the_same_id(hooked) == []


async def test_a_user_artifact_saved_while_the_session_is_deleted_stays_the_users(
    hooked: Served,
) -> None:
    stub = hooked.stub
    await stub.SaveArtifact(save_request("user:prefs.txt", "v1"), timeout=10)

    async def delete_first() -> None:
        await stub.DeleteSession(session_pb2.DeleteSessionRequest(**IDS), timeout=10)

    hooks_of(hooked).before_saving = delete_first
    # A user: artifact belongs to every session of the user: the save stands (the user's
    # earlier version is not undone with it).
    await stub.SaveArtifact(save_request("user:prefs.txt", "v2"), timeout=10)

    assert await keys_of_a_new_session_with_the_same_id(hooked) == ["user:prefs.txt"]
    versions = await stub.ListArtifactVersions(
        session_pb2.SessionServiceListArtifactVersionsRequest(**IDS, filename="user:prefs.txt"),
        timeout=10,
    )
    assert list(versions.versions) == [1, 2]
