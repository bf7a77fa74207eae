"""The artifact bytes a real AgentServer's session API holds in transfer at once are bounded
(``max_artifact_bytes_in_flight``): a streamed save or load that does not fit beside those
under way is refused at once with RESOURCE_EXHAUSTED (``ArtifactsBusyError``), before its bytes
are read, and the bytes come back however a transfer ends (stored, refused, cancelled).

Before, nothing bounded the sum: clients saving large artifacts together held as much memory
as they liked (each save holds its artifact whole before the store takes it), past what the
service's container has.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.artifacts import InMemoryArtifactService
from adk_mesh.errors import ArtifactsBusyError, ArtifactTooLargeError, ConfigError
from adk_mesh.mesh import AgentServer, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._session_service import ARTIFACT_CHUNK_BYTES
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.types import Part
from adk_mesh.v1 import session_pb2, session_pb2_grpc
from tests.integration.mesh.test_session_service import APP, helper_agent
from tests.integration.test_large_artifacts18 import IDS, MIME, load_streamed, pattern

MiB = 1024 * 1024


class Served:
    def __init__(self, server: AgentServer, channel: grpc.aio.Channel) -> None:
        self.server = server
        self.channel = channel
        self.stub = session_pb2_grpc.SessionServiceStub(channel)
        self.artifacts = server.artifact_service


@contextlib.asynccontextmanager
async def serving(**options: Any) -> AsyncIterator[Served]:
    server = AgentServer(
        helper_agent(),
        app_name=APP,
        session_service=InMemorySessionService(),
        artifact_service=InMemoryArtifactService(),
        **options,
    )
    port = await server.start("127.0.0.1:0")
    channel = open_channel(f"127.0.0.1:{port}", tls=None)
    served = Served(server, channel)
    await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
    try:
        yield served
    finally:
        await channel.close()
        await server.stop(None)


def header(
    size: int, filename: str = "video.mp4"
) -> session_pb2.SessionServiceSaveArtifactStreamRequest:
    from adk_mesh.v1 import content_pb2

    return session_pb2.SessionServiceSaveArtifactStreamRequest(
        header=session_pb2.SaveArtifactStreamHeader(
            **IDS,
            filename=filename,
            artifact=content_pb2.Part(inline_data=content_pb2.Blob(mime_type=MIME)),
            size_bytes=size,
        )
    )


def chunk(data: bytes) -> session_pb2.SessionServiceSaveArtifactStreamRequest:
    return session_pb2.SessionServiceSaveArtifactStreamRequest(data=data)


async def versions(served: Served, filename: str) -> list[int]:
    assert served.artifacts is not None
    return await served.artifacts.list_versions(app_name=APP, filename=filename, **IDS)


async def save_whole(served: Served, data: bytes, filename: str) -> int:
    def requests() -> Any:
        yield header(len(data), filename)
        for start in range(0, len(data), ARTIFACT_CHUNK_BYTES):
            yield chunk(data[start : start + ARTIFACT_CHUNK_BYTES])

    responses = [r async for r in served.stub.SaveArtifactStream(requests(), timeout=60)]
    return responses[0].version


class HeldSave:
    """A save that sent its header and its first chunk and waits, its bytes counted."""

    def __init__(self, served: Served, size: int, filename: str) -> None:
        self.call = served.stub.SaveArtifactStream(timeout=60)
        self.served = served
        self.size = size
        self.filename = filename

    async def begin(self) -> None:
        await self.call.write(header(self.size, self.filename))
        await self.call.write(chunk(b"x" * MiB))
        # The server has read the first chunk once its bytes are counted as held.
        for _ in range(500):
            if self.served.server.artifact_budget.held >= self.size:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the server never counted the held save")

    async def finish(self) -> int:
        sent = MiB
        while sent < self.size:
            step = min(ARTIFACT_CHUNK_BYTES, self.size - sent)
            await self.call.write(chunk(b"x" * step))
            sent += step
        await self.call.done_writing()
        response = await self.call.read()
        assert response is not grpc.aio.EOF
        return response.version


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for _ in call:
            pass
    return raised.value


async def test_a_save_that_does_not_fit_beside_one_under_way_is_refused_at_once() -> None:
    async with serving(max_artifact_bytes=4 * MiB, max_artifact_bytes_in_flight=6 * MiB) as served:
        held = HeldSave(served, 4 * MiB, "first.bin")
        await held.begin()

        # Only its header: the service refuses before a byte of data is read.
        second = served.stub.SaveArtifactStream(iter([header(3 * MiB, "second.bin")]), timeout=10)
        error = await refused(second)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        mapped = error_from_rpc_error(error)
        assert isinstance(mapped, ArtifactsBusyError)
        assert "6291456" in mapped.message and "4194304 bytes of artifacts in transfer" in (
            mapped.message
        )
        assert mapped.metadata["limit_bytes"] == str(6 * MiB)
        assert mapped.metadata["in_flight_bytes"] == str(4 * MiB)
        assert await versions(served, "second.bin") == []

        # One that fits beside it goes through meanwhile.
        assert await save_whole(served, pattern(2 * MiB), "small.bin") == 1

        assert await held.finish() == 1
        assert served.server.artifact_budget.held == 0
        # The room is back: the refused save now goes through.
        assert await save_whole(served, pattern(3 * MiB), "second.bin") == 1


async def test_a_cancelled_or_refused_save_gives_its_bytes_back() -> None:
    async with serving(max_artifact_bytes=4 * MiB, max_artifact_bytes_in_flight=4 * MiB) as served:
        held = HeldSave(served, 4 * MiB, "cut.bin")
        await held.begin()
        held.call.cancel()
        for _ in range(500):
            if served.server.artifact_budget.held == 0:
                break
            await asyncio.sleep(0.01)
        assert served.server.artifact_budget.held == 0
        assert await versions(served, "cut.bin") == []

        # A stream that carries fewer bytes than its header said is refused, and frees them.
        short = served.stub.SaveArtifactStream(
            iter([header(4 * MiB, "short.bin"), chunk(b"x" * 10)]), timeout=10
        )
        assert (await refused(short)).code() == grpc.StatusCode.INVALID_ARGUMENT
        assert served.server.artifact_budget.held == 0

        assert await save_whole(served, pattern(4 * MiB), "whole.bin") == 1


async def test_a_load_is_counted_too() -> None:
    async with serving(max_artifact_bytes=4 * MiB, max_artifact_bytes_in_flight=6 * MiB) as served:
        assert await save_whole(served, pattern(3 * MiB), "video.mp4") == 1
        held = HeldSave(served, 4 * MiB, "other.bin")
        await held.begin()

        request = session_pb2.SessionServiceLoadArtifactStreamRequest(**IDS, filename="video.mp4")
        error = await refused(served.stub.LoadArtifactStream(request, timeout=10))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert isinstance(error_from_rpc_error(error), ArtifactsBusyError)

        await held.finish()
        loaded_header, loaded = await load_streamed(served)  # type: ignore[arg-type]
        assert loaded == pattern(3 * MiB) and loaded_header.size_bytes == 3 * MiB
        assert served.server.artifact_budget.held == 0


async def test_an_artifact_larger_than_the_whole_budget_is_too_large_not_busy() -> None:
    async with serving(max_artifact_bytes=1 * MiB, max_artifact_bytes_in_flight=2 * MiB) as served:
        # A tool in process saves any size; the session API cannot hold it at once.
        assert served.artifacts is not None
        await served.artifacts.save_artifact(
            app_name=APP,
            filename="huge.bin",
            artifact=Part.from_inline_data(MIME, b"x" * 3 * MiB),
            **IDS,
        )
        request = session_pb2.SessionServiceLoadArtifactStreamRequest(**IDS, filename="huge.bin")
        error = await refused(served.stub.LoadArtifactStream(request, timeout=10))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert isinstance(error_from_rpc_error(error), ArtifactTooLargeError)


def test_a_budget_below_the_largest_artifact_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="below max_artifact_bytes"):
        AgentServer(helper_agent(), max_artifact_bytes=4 * MiB, max_artifact_bytes_in_flight=MiB)


def test_serve_refuses_such_flags_with_one_error_line() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "adk_mesh",
            "serve",
            "agent",
            "tests.integration.mesh.test_session_service:helper_agent",
            "--port",
            "0",
            "--max-artifact-bytes",
            "2000",
            "--max-artifact-bytes-in-flight",
            "1000",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "max_artifact_bytes_in_flight is 1000, below max_artifact_bytes (2000)" in lines[0]


# --- the delegated runs' loads in chunks count in the same budget ------------------------------


async def _delegated_load(
    hold: int, artifacts: InMemoryArtifactService
) -> tuple[dict[str, Any], AgentServer]:
    from adk_mesh import LlmAgent
    from adk_mesh.mesh import RemoteAgent
    from adk_mesh.testing import ScriptedModel, call
    from tests.integration.mesh.test_context_artifacts19 import (
        BIG,
        TOOLS,
        _pdf,
        _saving,
        _turn,
    )

    served = LlmAgent(
        name="filer",
        model=ScriptedModel([call("measure", {"filename": "big.pdf"}), "done"]),
        tools=TOOLS,
    )
    server = AgentServer(
        served, app_name="app", max_artifact_bytes=48 * MiB, max_artifact_bytes_in_flight=64 * MiB
    )
    port = await server.start("127.0.0.1:0")
    agent = RemoteAgent("filer", f"127.0.0.1:{port}")
    # As if the session API were receiving an artifact of ``hold`` bytes meanwhile.
    server.artifact_budget.take(hold, "a save under way", {})
    try:
        events, _ = await _turn(agent, artifacts, _saving("big.pdf", _pdf(BIG), artifacts))
    finally:
        await agent.close()
        await server.stop(None)
    (response,) = [
        r.response for e in events for r in e.function_responses() if r.name == "measure"
    ]
    return response, server


async def test_a_delegated_runs_load_in_chunks_counts_in_the_services_budget() -> None:
    response, server = await _delegated_load(0, InMemoryArtifactService())
    assert response["length"] == 40 * MiB
    assert server.artifact_budget.held == 0  # given back once the last chunk was in

    response, server = await _delegated_load(30 * MiB, InMemoryArtifactService())
    assert response["kind"] == "ArtifactsBusyError", response
    assert "does not fit now" in response["error"] and "'big.pdf'" in response["error"]
    assert server.artifact_budget.held == 30 * MiB  # the refused load took nothing


# --- a tool service's loads: the same limits, its own budget ----------------------------------


async def _tool_load(hold: int, **server_options: Any) -> tuple[dict[str, Any], ToolServer]:
    from tests.integration.mesh.test_context_artifacts19 import (
        BIG,
        TOOLS,
        _pdf,
        _remote_tool,
        _saving,
    )

    server = ToolServer(TOOLS, name="files", **server_options)
    port = await server.start("127.0.0.1:0")
    server.artifact_budget.take(hold, "another load under way", {})
    artifacts = InMemoryArtifactService()
    try:
        response, _ = await _remote_tool(
            f"127.0.0.1:{port}",
            "measure",
            {"filename": "big.pdf"},
            artifacts,
            _saving("big.pdf", _pdf(BIG), artifacts),
        )
    finally:
        await server.stop(None)
    return response, server


async def test_a_tool_services_loads_are_bounded_one_by_one_and_together() -> None:
    response, server = await _tool_load(
        0, max_artifact_bytes=48 * MiB, max_artifact_bytes_in_flight=64 * MiB
    )
    assert response["length"] == 40 * MiB
    assert server.artifact_budget.held == 0

    response, _ = await _tool_load(
        30 * MiB, max_artifact_bytes=48 * MiB, max_artifact_bytes_in_flight=64 * MiB
    )
    assert response["kind"] == "ArtifactsBusyError", response

    response, _ = await _tool_load(0, max_artifact_bytes=36 * MiB)
    assert response["kind"] == "ArtifactError", response
    assert f"over the {36 * MiB} bytes" in response["error"]


def test_serve_tools_takes_the_artifact_flags() -> None:
    from adk_mesh.cli import build_parser

    args = build_parser().parse_args(
        [
            "serve",
            "tools",
            "tests.integration.mesh.test_context_artifacts19:TOOLS",
            "--port",
            "0",
            "--max-artifact-bytes",
            "1000",
            "--max-artifact-bytes-in-flight",
            "3000",
        ]
    )
    assert (args.max_artifact_bytes, args.max_artifact_bytes_in_flight) == (1000, 3000)
    from adk_mesh.cli import _tool_server
    from adk_mesh.mesh import ServerLimits

    server = _tool_server(
        args.reference, ServerLimits(), max_artifact_bytes=1000, max_artifact_bytes_in_flight=3000
    )
    assert (server.max_artifact_bytes, server.artifact_budget.limit) == (1000, 3000)
