"""Loads and saves of artifacts in chunks that end badly, over real servers.

A remote tool (``CallToolInteractive``) or a delegated run (``RunDelegated``) loads its caller's
artifacts over the call; one larger than a message comes as a header and chunks. Two ways such
a transfer can end badly are pinned here:

* the callee stops waiting for a load after its header came (the tool's own timeout, the run's
  failure, the caller cancelling) while the caller still writes its chunks: the call must end
  with the status it should have (the tool's result, the run's error), never under the caller's
  writes (which gRPC reports as INTERNAL on the caller's side), and the bytes counted for the
  load come back;
* the sender goes silent between two chunks: the receiver gives up after a bounded wait
  (``CallerChannel.chunk_stall_seconds``, ``ContextAnswers.chunk_stall_seconds``), the reader
  of the artifact gets an ArtifactError saying how far it came, and the chunks that still come
  are dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf.json_format import MessageToDict

from adk_mesh.agents.base import BaseAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext, ToolContext
from adk_mesh.errors import AdkError, AgentError
from adk_mesh.mesh import AgentServer, RemoteAgent, ToolServer
from adk_mesh.mesh._artifact_budget import ArtifactBudget
from adk_mesh.mesh._caller_contexts import CallerChannel, ContextAnswers
from adk_mesh.mesh._channel import channel_options, open_channel
from adk_mesh.mesh._session_service import ARTIFACT_CHUNK_BYTES
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Event
from adk_mesh.v1 import content_pb2, tool_pb2, tool_pb2_grpc
from tests.integration.mesh.test_context_artifacts19 import (
    BIG,
    MIB,
    _ids,
    _pdf,
    _remote_tool,
    _saving,
    _turn,
    data_of,
)

#: The wait between chunks the tests allow (the default is 30 s): a sender that stalls is
#: given up on quickly, and a sender that does not stall sends each chunk well within it.
STALL_SECONDS = 0.5
#: The timeout of a tool that stops in the middle of a load (the caller waits for it to pass).
TOOL_TIMEOUT_SECONDS = 0.5


def _load_header(request_id: int, size: int) -> tool_pb2.ContextResponse:
    response = tool_pb2.ContextResponse(request_id=request_id)
    loaded = response.loaded_artifact
    loaded.artifact.CopyFrom(content_pb2.Part(inline_data=content_pb2.Blob(mime_type="a/b")))
    loaded.size_bytes = size
    loaded.chunks_follow = True
    return response


def _load_chunk(request_id: int, data: bytes) -> tool_pb2.CallToolInteractiveRequest:
    return tool_pb2.CallToolInteractiveRequest(
        context_response=tool_pb2.ContextResponse(request_id=request_id, artifact_chunk=data)
    )


def _answering(response: tool_pb2.ContextResponse) -> tool_pb2.CallToolInteractiveRequest:
    return tool_pb2.CallToolInteractiveRequest(context_response=response)


class RawCaller:
    """A ``CallToolInteractive`` call written by hand: the test decides what the caller sends
    and when, as a caller in another language (or a slow one) might."""

    def __init__(self, target: str, tool: str, args: dict[str, Any]) -> None:
        self.channel = open_channel(target, tls=None)
        self.call = tool_pb2_grpc.ToolServiceStub(self.channel).CallToolInteractive(timeout=60)
        self.request = tool_pb2.CallToolRequest(tool_name=tool)
        context = self.request.context
        context.app_name, context.user_id, context.session_id = "app", "u", "s"
        self.request.args.update(args)

    async def open(self) -> None:
        await self.call.write(
            tool_pb2.CallToolInteractiveRequest(call=self.request, accepts_artifact_chunks=True)
        )

    async def next_request(self) -> tool_pb2.ContextRequest:
        message = await self.call.read()
        assert message is not grpc.aio.EOF and message.HasField("context_request"), message
        request: tool_pb2.ContextRequest = message.context_request
        return request

    async def result(self) -> tool_pb2.ToolResult:
        """The tool's result (the call's last message); the call must end with OK after it."""
        message = await self.call.read()
        assert message is not grpc.aio.EOF and message.response.HasField("result"), message
        assert await self.call.read() is grpc.aio.EOF
        assert await self.call.code() == grpc.StatusCode.OK
        result: tool_pb2.ToolResult = message.response.result
        return result

    async def close(self) -> None:
        await self.channel.close()


async def _serve_tools(*tools: FunctionTool) -> tuple[ToolServer, str]:
    server = ToolServer(list(tools), name="files")
    port = await server.start("127.0.0.1:0")
    return server, f"127.0.0.1:{port}"


# --- 1. a load the callee stops waiting for after its header --------------------------------


async def test_a_tool_stopped_by_its_timeout_mid_load_gets_its_result_to_the_caller() -> None:
    # The tool waits for a 3-chunk artifact; its own timeout stops it after the header and the
    # first chunk came. The caller, unaware, writes the rest: the call ends with the tool's
    # timeout as its result once the last chunk is in, never under the caller's writes, and
    # the bytes counted for the load come back as soon as nobody waits for it.
    stopped = asyncio.Event()
    held_when_stopped: list[int] = []
    servers: list[ToolServer] = []

    async def hold(tool_context: ToolContext, filename: str) -> dict[str, Any]:
        try:
            await tool_context.load_artifact(filename)
        except asyncio.CancelledError:
            held_when_stopped.append(servers[0].artifact_budget.held)
            stopped.set()
            raise
        raise AssertionError("the load must not finish before the timeout")

    server, target = await _serve_tools(FunctionTool(hold, timeout=TOOL_TIMEOUT_SECONDS))
    servers.append(server)
    caller = RawCaller(target, "hold", {"filename": "f.pdf"})
    try:
        await caller.open()
        request = await caller.next_request()
        size = 3 * ARTIFACT_CHUNK_BYTES
        await caller.call.write(_answering(_load_header(request.request_id, size)))
        await caller.call.write(_load_chunk(request.request_id, b"x" * ARTIFACT_CHUNK_BYTES))
        await stopped.wait()
        for _ in range(2):
            await caller.call.write(_load_chunk(request.request_id, b"x" * ARTIFACT_CHUNK_BYTES))
        result = await caller.result()
    finally:
        await caller.close()
        await server.stop(None)
    assert result.error.reason == "TOOL_ERROR"
    assert "did not finish within" in result.error.message
    assert held_when_stopped == [0]
    assert server.artifact_budget.held == 0


class FailsMidLoad(BaseAgent):
    """Starts loading ``filename`` from its caller and fails (AgentError) once the header of
    the load is in (``header_in`` is set when the service counts its bytes), while the caller
    still writes the chunks."""

    def __init__(self, name: str, filename: str, header_in: asyncio.Event) -> None:
        super().__init__(name=name)
        self.filename = filename
        self.header_in = header_in

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        assert ctx.artifact_service is not None
        load = asyncio.ensure_future(
            ctx.artifact_service.load_artifact(
                app_name=ctx.app_name,
                user_id=ctx.user_id,
                session_id=ctx.session_id,
                filename=self.filename,
            )
        )
        try:
            await self.header_in.wait()
        finally:
            load.cancel()
        raise AgentError("the delegated run failed on its own")
        yield  # pragma: no cover  (an async generator)


def _observe_takes(
    budget: ArtifactBudget, taken: asyncio.Event, monkeypatch: pytest.MonkeyPatch
) -> asyncio.Event:
    """``taken``, set once ``budget`` counts a transfer's bytes (the real count goes on)."""
    take = budget.take

    def observed(size: int, what: str, metadata: dict[str, str]) -> None:
        take(size, what, metadata)
        taken.set()

    monkeypatch.setattr(budget, "take", observed)
    return taken


async def test_a_delegated_run_failing_mid_load_reports_its_own_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    header_in = asyncio.Event()
    server = AgentServer(FailsMidLoad("filer", "big.pdf", header_in), app_name="app")
    header_in = _observe_takes(server.artifact_budget, header_in, monkeypatch)
    port = await server.start("127.0.0.1:0")
    agent = RemoteAgent("filer", f"127.0.0.1:{port}")
    artifacts = InMemoryArtifactService()
    try:
        with pytest.raises(AdkError) as raised:
            await _turn(agent, artifacts, _saving("big.pdf", _pdf(BIG), artifacts))
    finally:
        await agent.close()
        await server.stop(None)
    # The run's own error, as the service raised it; not the call cut under the caller's
    # writes (INTERNAL), nor a failure of the caller's own.
    assert isinstance(raised.value, AgentError), raised.value
    assert "the delegated run failed on its own" in raised.value.message
    assert server.artifact_budget.held == 0


@pytest.mark.parametrize("ending", ["cancelled", "deadline"])
async def test_a_call_ended_by_its_caller_mid_load_lets_the_bytes_go(
    ending: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caller cancels the call, or its deadline passes, after the header of a load: the
    # call ends with that status at once (there is nobody left to write to), the tool is
    # cancelled, and the bytes counted for the load come back.
    stopped = asyncio.Event()

    async def hold(tool_context: ToolContext, filename: str) -> dict[str, Any]:
        try:
            await tool_context.load_artifact(filename)
        finally:
            stopped.set()
        raise AssertionError("the load must not finish")

    server, target = await _serve_tools(FunctionTool(hold))
    header_in = _observe_takes(server.artifact_budget, asyncio.Event(), monkeypatch)
    caller = RawCaller(target, "hold", {"filename": "f.pdf"})
    if ending == "deadline":
        caller.call = tool_pb2_grpc.ToolServiceStub(caller.channel).CallToolInteractive(
            timeout=2 * STALL_SECONDS
        )
    try:
        await caller.open()
        request = await caller.next_request()
        await caller.call.write(_answering(_load_header(request.request_id, 3 * MIB)))
        await caller.call.write(_load_chunk(request.request_id, data_of(1)))
        await header_in.wait()
        if ending == "cancelled":
            caller.call.cancel()
        code = await caller.call.code()
        await stopped.wait()
    finally:
        await caller.close()
        await server.stop(None)
    expected = "CANCELLED" if ending == "cancelled" else "DEADLINE_EXCEEDED"
    assert code == getattr(grpc.StatusCode, expected)
    assert server.artifact_budget.held == 0


# --- 2. a sender gone silent between two chunks -----------------------------------------------


async def test_a_caller_silent_mid_load_fails_the_load_after_the_stall_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(CallerChannel, "chunk_stall_seconds", STALL_SECONDS)
    servers: list[ToolServer] = []

    async def load_then_list(tool_context: ToolContext, filename: str) -> dict[str, Any]:
        try:
            await tool_context.load_artifact(filename)
        except AdkError as error:
            failure = {
                "kind": type(error).__name__,
                "error": error.message,
                "held": servers[0].artifact_budget.held,
            }
        else:
            raise AssertionError("the load must fail")
        # The call goes on: the next request is answered, the late chunks dropped.
        return {**failure, "keys": await tool_context.list_artifacts()}

    server, target = await _serve_tools(FunctionTool(load_then_list))
    servers.append(server)
    caller = RawCaller(target, "load_then_list", {"filename": "f.pdf"})
    try:
        await caller.open()
        load = await caller.next_request()
        await caller.call.write(_answering(_load_header(load.request_id, 3 * MIB)))
        await caller.call.write(_load_chunk(load.request_id, data_of(1)))
        # Silent from here: the tool's next request comes only once the load has failed.
        listing = await caller.next_request()
        assert listing.HasField("list_artifact_keys")
        # The caller wakes up and sends the rest of the load, then answers the listing.
        await caller.call.write(_load_chunk(load.request_id, data_of(1)))
        await caller.call.write(_load_chunk(load.request_id, data_of(1)))
        keys = tool_pb2.ContextResponse(request_id=listing.request_id)
        keys.artifact_keys.filenames.append("f.pdf")
        await caller.call.write(_answering(keys))
        result = MessageToDict((await caller.result()).response)
    finally:
        await caller.close()
        await server.stop(None)
    assert result["kind"] == "ArtifactError"
    assert result["error"].startswith(
        f"the caller stopped sending artifact 'f.pdf' after {MIB} of {3 * MIB} bytes"
    )
    assert result["held"] == 0  # given back when the load failed
    assert result["keys"] == ["f.pdf"]
    assert server.artifact_budget.held == 0


class StallingCallee(tool_pb2_grpc.ToolServiceServicer):  # type: ignore[misc]
    """A callee that starts saving a 3 MiB artifact in its caller's store, sends its header
    and first chunk, and goes silent until the caller answers; then sends a late chunk of it
    and lists the caller's artifacts, and answers the call with what it was told."""

    def __init__(self) -> None:
        self.answers: list[tool_pb2.ContextResponse] = []

    async def ListTools(
        self, request: tool_pb2.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> tool_pb2.ListToolsResponse:
        return tool_pb2.ListToolsResponse(tools=[tool_pb2.ToolDeclaration(name="stalling")])

    async def CallToolInteractive(
        self,
        requests: AsyncIterator[tool_pb2.CallToolInteractiveRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[tool_pb2.CallToolInteractiveResponse]:
        incoming = aiter(requests)
        await anext(incoming)
        header = tool_pb2.ContextRequest(request_id=1)
        header.save_artifact.filename = "out.pdf"
        header.save_artifact.artifact.inline_data.mime_type = "application/pdf"
        header.save_artifact.size_bytes = 3 * MIB
        header.save_artifact.chunks_follow = True
        yield tool_pb2.CallToolInteractiveResponse(context_request=header)
        yield self._chunk()
        self.answers.append((await anext(incoming)).context_response)
        yield self._chunk()  # late: dropped
        listing = tool_pb2.ContextRequest(
            request_id=2, list_artifact_keys=tool_pb2.ListArtifactKeysRequest()
        )
        yield tool_pb2.CallToolInteractiveResponse(context_request=listing)
        self.answers.append((await anext(incoming)).context_response)
        result = tool_pb2.ToolResult()
        result.response.update({"ok": True})
        yield tool_pb2.CallToolInteractiveResponse(
            response=tool_pb2.CallToolResponse(result=result)
        )

    @staticmethod
    def _chunk() -> tool_pb2.CallToolInteractiveResponse:
        return tool_pb2.CallToolInteractiveResponse(
            context_request=tool_pb2.ContextRequest(request_id=1, artifact_chunk=data_of(1))
        )


async def test_a_callee_silent_mid_save_gets_an_artifact_error_after_the_stall_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The caller's side (ContextAnswers, in a real RemoteToolset) bounds the wait between a
    # save's chunks the same way: the callee is answered once the bound passes, though it
    # sends nothing more, and nothing is stored.
    monkeypatch.setattr(ContextAnswers, "chunk_stall_seconds", STALL_SECONDS)
    callee = StallingCallee()
    server = grpc.aio.server(options=channel_options())
    tool_pb2_grpc.add_ToolServiceServicer_to_server(callee, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    artifacts = InMemoryArtifactService()
    try:
        response, session = await _remote_tool(f"127.0.0.1:{port}", "stalling", {}, artifacts)
    finally:
        await server.stop(None)
    assert response == {"ok": True}
    stalled, listed = callee.answers
    assert stalled.request_id == 1 and stalled.error.reason == "ARTIFACT_ERROR"
    assert stalled.error.message.startswith(
        f"the callee stopped sending artifact 'out.pdf' after {MIB} of {3 * MIB} bytes"
    )
    assert "nothing was stored" in stalled.error.message
    # The late chunk was dropped, not answered as a chunk of no save.
    assert listed.request_id == 2 and list(listed.artifact_keys.filenames) == []
    assert await artifacts.list_artifact_keys(**_ids(session)) == []
