"""Artifacts larger than one message of the mesh (32 MiB), through a real AgentServer's
SessionService on 127.0.0.1: ``SaveArtifactStream`` and ``LoadArtifactStream`` carry them in
chunks, over each artifact store; a too-large one is refused naming the limit; a stream cut
short stores nothing; the streamed save passes the door keeper as the other calls do.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import pytest

from adk_mesh.artifacts import ArtifactService, FileArtifactService, InMemoryArtifactService
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.mesh._session_service import ARTIFACT_CHUNK_BYTES, DEFAULT_MAX_ARTIFACT_BYTES
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.mesh.auth import ApiKeyAuthenticator, new_api_key
from adk_mesh.mesh.security import ServerSecurity
from adk_mesh.types import Part
from adk_mesh.v1 import content_pb2, session_pb2
from gateway import GatewaySettings
from tests.gateway.conftest import serve_gateway
from tests.integration.mesh.test_session_service import APP, Served, serve, stop

IDS = {"user_id": "ada", "session_id": "s-1"}
MIME = "video/mp4"
SIZE = 40 * 1024 * 1024


def pattern(size: int) -> bytes:
    """Bytes whose order matters (a chunk out of place would show)."""
    return bytes(range(256)) * (size // 256) + bytes(range(size % 256))


def save_requests(
    data: bytes,
    *,
    filename: str = "video.mp4",
    mime_type: str | None = MIME,
    size: int | None = None,
    ids: dict[str, str] | None = None,
) -> Iterator[session_pb2.SessionServiceSaveArtifactStreamRequest]:
    described = (
        content_pb2.Part(inline_data=content_pb2.Blob(mime_type=mime_type))
        if mime_type is not None
        else content_pb2.Part(text="")
    )
    yield session_pb2.SessionServiceSaveArtifactStreamRequest(
        header=session_pb2.SaveArtifactStreamHeader(
            **(ids or IDS),
            filename=filename,
            artifact=described,
            size_bytes=len(data) if size is None else size,
        )
    )
    view = memoryview(data)
    for start in range(0, len(data), ARTIFACT_CHUNK_BYTES):
        yield session_pb2.SessionServiceSaveArtifactStreamRequest(
            data=bytes(view[start : start + ARTIFACT_CHUNK_BYTES])
        )


async def save_streamed(served: Served, data: bytes, **options: Any) -> int:
    metadata = options.pop("metadata", None)
    responses = [
        response
        async for response in served.stub.SaveArtifactStream(
            save_requests(data, **options), timeout=120, metadata=metadata
        )
    ]
    assert len(responses) == 1
    return responses[0].version


async def load_streamed(
    served: Served, filename: str = "video.mp4", version: int | None = None
) -> tuple[session_pb2.LoadArtifactStreamHeader, bytes]:
    request = session_pb2.SessionServiceLoadArtifactStreamRequest(**IDS, filename=filename)
    if version is not None:
        request.version = version
    responses = [
        response async for response in served.stub.LoadArtifactStream(request, timeout=120)
    ]
    assert responses[0].WhichOneof("chunk") == "header"
    assert all(r.WhichOneof("chunk") == "data" for r in responses[1:])
    assert all(len(r.data) <= ARTIFACT_CHUNK_BYTES for r in responses[1:])
    return responses[0].header, b"".join(r.data for r in responses[1:])


async def stored_versions(served: Served, filename: str = "video.mp4") -> list[int]:
    assert served.artifacts is not None
    return await served.artifacts.list_versions(app_name=APP, filename=filename, **IDS)


@contextlib.asynccontextmanager
async def serving(artifacts: ArtifactService) -> AsyncIterator[Served]:
    served = await serve(artifacts=artifacts)
    await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
    try:
        yield served
    finally:
        await stop(served)
        await artifacts.close()


@pytest.fixture(params=["memory", "file", pytest.param("postgres", marks=pytest.mark.postgres)])
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Served]:
    artifacts: ArtifactService
    if request.param == "memory":
        artifacts = InMemoryArtifactService()
    elif request.param == "file":
        artifacts = FileArtifactService(tmp_path / "artifacts")
    else:
        from adk_mesh.artifacts.postgres import PostgresArtifactService

        artifacts = PostgresArtifactService(request.getfixturevalue("postgres_url"))
    async with serving(artifacts) as served:
        yield served


@pytest.fixture
async def in_memory() -> AsyncIterator[Served]:
    async with serving(InMemoryArtifactService()) as served:
        yield served


# --- the defect: one message cannot carry it ---------------------------------------------


async def test_the_unary_save_cannot_carry_40_mib(in_memory: Served) -> None:
    request = session_pb2.SessionServiceSaveArtifactRequest(
        **IDS,
        filename="video.mp4",
        artifact=content_pb2.Part(inline_data=content_pb2.Blob(mime_type=MIME, data=b"x" * SIZE)),
    )
    assert request.ByteSize() > MAX_MESSAGE_BYTES

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await in_memory.stub.SaveArtifact(request, timeout=60)

    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await stored_versions(in_memory) == []


# --- streamed save and load ----------------------------------------------------------------


async def test_a_40_mib_artifact_is_saved_and_loaded_in_chunks(served: Served) -> None:
    data = pattern(SIZE)

    assert await save_streamed(served, data) == 1
    assert await save_streamed(served, data[:1000]) == 2

    header, loaded = await load_streamed(served, version=1)
    assert header.version == 1
    assert header.artifact.WhichOneof("data") == "inline_data"
    assert header.artifact.inline_data.mime_type == MIME
    assert header.artifact.inline_data.data == b""
    assert header.size_bytes == SIZE
    assert loaded == data
    # The latest, unnamed; and as the store holds it, for a tool in process.
    header, loaded = await load_streamed(served)
    assert (header.version, loaded) == (2, data[:1000])
    assert served.artifacts is not None
    part = await served.artifacts.load_artifact(
        app_name=APP, filename="video.mp4", version=1, **IDS
    )
    assert part is not None and part.inline_data is not None
    assert part.inline_data.mime_type == MIME
    assert part.inline_data.data == data


async def test_a_text_artifact_streams_as_utf8(in_memory: Served) -> None:
    text = "é" * (ARTIFACT_CHUNK_BYTES // 2) + "ok\u2603"  # a character split by a chunk
    data = text.encode()

    assert await save_streamed(in_memory, data, filename="notes.txt", mime_type=None) == 1
    header, loaded = await load_streamed(in_memory, "notes.txt")

    assert header.artifact.WhichOneof("data") == "text"
    assert header.size_bytes == len(data)
    assert loaded.decode() == text
    assert in_memory.artifacts is not None
    part = await in_memory.artifacts.load_artifact(app_name=APP, filename="notes.txt", **IDS)
    assert part == Part.from_text(text)


async def test_an_empty_artifact_streams(in_memory: Served) -> None:
    assert await save_streamed(in_memory, b"", filename="empty.bin") == 1

    header, loaded = await load_streamed(in_memory, "empty.bin")

    assert (header.size_bytes, loaded) == (0, b"")


async def test_a_stored_artifact_too_large_for_load_artifact_streams(in_memory: Served) -> None:
    data = pattern(MAX_MESSAGE_BYTES + 1024)
    assert in_memory.artifacts is not None
    await in_memory.artifacts.save_artifact(
        app_name=APP, filename="video.mp4", artifact=Part.from_inline_data(MIME, data), **IDS
    )
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await in_memory.stub.LoadArtifact(
            session_pb2.SessionServiceLoadArtifactRequest(**IDS, filename="video.mp4"), timeout=60
        )
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "LoadArtifactStream" in (raised.value.details() or "")

    header, loaded = await load_streamed(in_memory)

    assert header.version == 1
    assert loaded == data


async def test_loading_an_unknown_artifact_is_not_found(in_memory: Served) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await load_streamed(in_memory, "nothing.bin")

    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_from_rpc_error(raised.value).reason == "ARTIFACT_NOT_FOUND"


# --- refusals: nothing is stored ------------------------------------------------------------


async def test_an_artifact_over_the_limit_is_refused_naming_it(in_memory: Served) -> None:
    too_large = DEFAULT_MAX_ARTIFACT_BYTES + 1

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        # Only the header: the refusal comes before any byte is read.
        await save_streamed(in_memory, b"", size=too_large)

    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = error_from_rpc_error(raised.value)
    assert str(DEFAULT_MAX_ARTIFACT_BYTES) in error.message
    assert str(too_large) in error.message
    assert error.metadata["limit_bytes"] == str(DEFAULT_MAX_ARTIFACT_BYTES)
    assert error.metadata["filename"] == "video.mp4"
    assert await stored_versions(in_memory) == []


@pytest.mark.parametrize("sent", [SIZE // 2, SIZE + 1])
async def test_a_stream_whose_size_differs_from_its_header_stores_nothing(
    in_memory: Served, sent: int
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await save_streamed(in_memory, pattern(sent), size=SIZE)

    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nothing was stored" in (raised.value.details() or "")
    assert await stored_versions(in_memory) == []


async def test_a_stream_cut_in_the_middle_stores_nothing(in_memory: Served) -> None:
    half = asyncio.Event()

    async def requests() -> AsyncIterator[session_pb2.SessionServiceSaveArtifactStreamRequest]:
        for index, request in enumerate(save_requests(pattern(SIZE))):
            if index == 20:
                half.set()
                await asyncio.Event().wait()  # never sends the rest
            yield request

    call = in_memory.stub.SaveArtifactStream(requests(), timeout=120)
    read = asyncio.ensure_future(call.read())
    await half.wait()
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await read

    # The server saw the cancel: a later save of the name is its first version.
    assert await save_streamed(in_memory, b"whole") == 1
    header, loaded = await load_streamed(in_memory)
    assert (header.version, loaded) == (1, b"whole")


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [session_pb2.SessionServiceSaveArtifactStreamRequest(data=b"no header")],
        [
            session_pb2.SessionServiceSaveArtifactStreamRequest(
                header=session_pb2.SaveArtifactStreamHeader(**IDS, filename="x.bin", size_bytes=1)
            )
        ],
        [
            session_pb2.SessionServiceSaveArtifactStreamRequest(
                header=session_pb2.SaveArtifactStreamHeader(
                    **IDS,
                    filename="x.bin",
                    artifact=content_pb2.Part(
                        inline_data=content_pb2.Blob(mime_type=MIME, data=b"inline")
                    ),
                    size_bytes=0,
                )
            )
        ],
    ],
    ids=["empty", "no-header", "no-kind", "data-in-header"],
)
async def test_a_malformed_stream_is_invalid(
    in_memory: Served, messages: list[session_pb2.SessionServiceSaveArtifactStreamRequest]
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for _ in in_memory.stub.SaveArtifactStream(iter(messages), timeout=30):
            pass

    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_stream_into_an_unknown_session_is_not_found(in_memory: Served) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await save_streamed(in_memory, b"data", ids={"user_id": "ada", "session_id": "gone"})

    assert error_from_rpc_error(raised.value).reason == "SESSION_NOT_FOUND"


# --- the front door ---------------------------------------------------------------------------


async def test_the_streamed_save_binds_the_principal(tmp_path: Path) -> None:
    lines, keys = [], {}
    for user in ("ada", "bob"):
        key, line = new_api_key(user)
        lines.append(line)
        keys[user] = (("x-api-key", key),)
    (tmp_path / "keys").write_text("\n".join(lines) + "\n")
    security = ServerSecurity(authenticators=(ApiKeyAuthenticator(tmp_path / "keys"),))
    served = await serve(artifacts=InMemoryArtifactService(), security=security)
    try:
        await served.stub.CreateSession(
            session_pb2.CreateSessionRequest(**IDS), timeout=10, metadata=keys["ada"]
        )
        # No credential: UNAUTHENTICATED; another user's: PERMISSION_DENIED.
        for metadata, code in (
            (None, grpc.StatusCode.UNAUTHENTICATED),
            (keys["bob"], grpc.StatusCode.PERMISSION_DENIED),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await save_streamed(served, b"data", metadata=metadata)
            assert raised.value.code() == code
        # The user left empty becomes the principal.
        version = await save_streamed(
            served, b"data", ids={"user_id": "", "session_id": "s-1"}, metadata=keys["ada"]
        )
        assert version == 1
        assert await stored_versions(served) == [1]
    finally:
        await stop(served)


# --- the HTTP gateway -------------------------------------------------------------------------


async def test_the_gateway_saves_and_loads_a_40_mib_artifact(in_memory: Served) -> None:
    data = pattern(SIZE)
    settings = GatewaySettings(
        apps={APP: in_memory.target}, sse_ping_seconds=0, max_body_bytes=2 * SIZE
    )
    base = f"/apps/{APP}/users/ada/sessions/s-1/artifacts"
    body = {
        "filename": "video.mp4",
        "artifact": {"inlineData": {"mimeType": MIME, "data": base64.b64encode(data).decode()}},
    }
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=120) as client,
    ):
        saved = await client.post(base, json=body)
        loaded = await client.get(base + "/video.mp4")
        by_version = await client.get(base + "/video.mp4/versions/1")

    assert saved.status_code == 200, saved.text
    assert saved.json()["version"] == 1
    for answer in (loaded, by_version):
        assert answer.status_code == 200, answer.text[:500]
        inline = answer.json()["inlineData"]
        assert inline["mimeType"] == MIME
        assert base64.urlsafe_b64decode(inline["data"]) == data  # as google-adk encodes
