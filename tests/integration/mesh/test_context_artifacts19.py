"""Artifacts larger than one message of the mesh through the caller-context protocol.

A remote tool (``CallToolInteractive``) or a delegated run (``RunDelegated``) loads and saves
its caller's artifacts with ``ContextRequest`` / ``ContextResponse`` messages on the call. An
artifact that does not fit one message goes as a header (the Part without its data, its size)
followed by chunks of ``ARTIFACT_CHUNK_BYTES``, in both directions, and only to a peer that
said it reassembles them; a small one still goes in one message. The receiver bounds what it
takes: an announced size over its limit, chunks that carry more or fewer bytes than announced,
and chunks of an unknown request are refused with an error the tool (or the callee) reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf.json_format import MessageToDict

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import ToolContext
from adk_mesh.errors import AdkError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import channel_options, open_channel
from adk_mesh.mesh._session_service import ARTIFACT_CHUNK_BYTES, DEFAULT_MAX_ARTIFACT_BYTES
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Blob, Content, Event, Part
from adk_mesh.v1 import content_pb2, tool_pb2, tool_pb2_grpc

MIB = 1024 * 1024
PATTERN = bytes(range(256))


def data_of(mebibytes: int) -> bytes:
    """``mebibytes`` MiB holding every byte value, cheap to make."""
    return PATTERN * (mebibytes * MIB // len(PATTERN))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


BIG = data_of(40)
SMALL = data_of(4)
# 36 MiB of UTF-8 whose characters are 3 bytes each: the chunks cut through characters.
BIG_TEXT = "\u20ac" * (12 * MIB)


async def measure(tool_context: ToolContext, filename: str) -> dict[str, Any]:
    """Load an artifact of the caller and describe it."""
    try:
        part = await tool_context.load_artifact(filename)
    except AdkError as error:
        return {"error": error.message, "kind": type(error).__name__}
    if part is None:
        return {"missing": True}
    if part.inline_data is not None:
        data, mime_type = part.inline_data.data, part.inline_data.mime_type
    else:
        data, mime_type = (part.text or "").encode(), "text"
    return {"length": len(data), "sha256": digest(data), "mime_type": mime_type}


async def produce(tool_context: ToolContext, filename: str, mebibytes: int) -> dict[str, Any]:
    """Save an artifact of that many MiB in the caller's store."""
    part = Part(inline_data=Blob(mime_type="application/pdf", data=data_of(mebibytes)))
    try:
        version = await tool_context.save_artifact(filename, part)
    except AdkError as error:
        return {"error": error.message, "kind": type(error).__name__}
    return {"version": version}


TOOLS = [FunctionTool(measure), FunctionTool(produce)]


@pytest.fixture
async def tool_target() -> AsyncIterator[str]:
    server = ToolServer(TOOLS, name="files")
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await server.stop(None)


class _CountedCall:
    """A ``CallToolInteractive`` call that records what crosses it."""

    def __init__(self, call: Any, sent: list[Any], received: list[Any]) -> None:
        self._call = call
        self._sent = sent
        self._received = received

    async def write(self, message: Any) -> None:
        self._sent.append(message)
        await self._call.write(message)

    async def _read(self) -> AsyncIterator[Any]:
        async for message in self._call:
            self._received.append(message)
            yield message

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._read()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


class CountingToolset(RemoteToolset):
    """Records the messages of its ``CallToolInteractive`` calls, both ways."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.sent: list[tool_pb2.CallToolInteractiveRequest] = []
        self.received: list[tool_pb2.CallToolInteractiveResponse] = []

    def _stub(self) -> Any:
        stub = super()._stub()
        toolset = self

        class Counted:
            def CallToolInteractive(self, **options: Any) -> _CountedCall:
                return _CountedCall(
                    stub.CallToolInteractive(**options), toolset.sent, toolset.received
                )

            def __getattr__(self, name: str) -> Any:
                return getattr(stub, name)

        return Counted()

    def context_responses(self) -> list[tool_pb2.ContextResponse]:
        return [m.context_response for m in self.sent if m.HasField("context_response")]

    def context_requests(self) -> list[tool_pb2.ContextRequest]:
        return [m.context_request for m in self.received if m.HasField("context_request")]


async def _turn(
    agent: Any, artifacts: InMemoryArtifactService, prepare: Callable[[Session], Awaitable[None]]
) -> tuple[list[Event], Session]:
    sessions = InMemorySessionService()
    runner = Runner(
        agent=agent, app_name="app", session_service=sessions, artifact_service=artifacts
    )
    session = await sessions.create_session(app_name="app", user_id="u")
    await prepare(session)
    events = [
        event
        async for event in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", "go")
        )
    ]
    return events, session


def _ids(session: Session) -> dict[str, str]:
    return {"app_name": "app", "user_id": "u", "session_id": session.id}


async def _nothing(session: Session) -> None:
    return None


def _saving(filename: str, part: Part, artifacts: InMemoryArtifactService) -> Any:
    async def prepare(session: Session) -> None:
        await artifacts.save_artifact(**_ids(session), filename=filename, artifact=part)

    return prepare


async def _remote_tool(
    target: str,
    tool: str,
    args: dict[str, Any],
    artifacts: InMemoryArtifactService,
    prepare: Callable[[Session], Awaitable[None]] = _nothing,
    toolset: RemoteToolset | None = None,
) -> tuple[dict[str, Any], Session]:
    """Run one call of remote tool ``tool`` from a caller holding ``artifacts``."""
    toolset = toolset or RemoteToolset(target)
    agent = LlmAgent(
        name="caller", model=ScriptedModel([call(tool, args), "done"]), tools=[toolset]
    )
    try:
        events, session = await _turn(agent, artifacts, prepare)
    finally:
        await toolset.close()
    (response,) = [r.response for e in events for r in e.function_responses() if r.name == tool]
    return response, session


def _pdf(data: bytes) -> Part:
    return Part(inline_data=Blob(mime_type="application/pdf", data=data))


# --- a ToolServer and a RemoteToolset ---------------------------------------------------------


async def test_a_remote_tool_loads_a_40_mib_artifact_of_its_caller(tool_target: str) -> None:
    artifacts = InMemoryArtifactService()
    toolset = CountingToolset(tool_target)
    response, _ = await _remote_tool(
        tool_target,
        "measure",
        {"filename": "big.pdf"},
        artifacts,
        _saving("big.pdf", _pdf(BIG), artifacts),
        toolset,
    )
    assert response == {"length": len(BIG), "sha256": digest(BIG), "mime_type": "application/pdf"}
    # A header, then the bytes in chunks of ARTIFACT_CHUNK_BYTES, all answering one request.
    (request,) = toolset.context_requests()
    assert request.accepts_artifact_chunks
    header, *chunks = toolset.context_responses()
    assert header.loaded_artifact.size_bytes == len(BIG)
    assert header.loaded_artifact.chunks_follow
    assert header.loaded_artifact.artifact.inline_data.mime_type == "application/pdf"
    assert not header.loaded_artifact.artifact.inline_data.data
    assert len(chunks) == len(BIG) // ARTIFACT_CHUNK_BYTES
    assert {c.request_id for c in [header, *chunks]} == {request.request_id}
    assert all(len(c.artifact_chunk) == ARTIFACT_CHUNK_BYTES for c in chunks)


async def test_a_large_text_artifact_loads_whole_though_chunks_cut_its_characters(
    tool_target: str,
) -> None:
    artifacts = InMemoryArtifactService()
    response, _ = await _remote_tool(
        tool_target,
        "measure",
        {"filename": "big.txt"},
        artifacts,
        _saving("big.txt", Part.from_text(BIG_TEXT), artifacts),
    )
    encoded = BIG_TEXT.encode()
    assert response == {"length": len(encoded), "sha256": digest(encoded), "mime_type": "text"}


async def test_a_remote_tool_saves_a_40_mib_artifact_in_its_callers_store(
    tool_target: str,
) -> None:
    artifacts = InMemoryArtifactService()
    toolset = CountingToolset(tool_target)
    response, session = await _remote_tool(
        tool_target, "produce", {"filename": "out.pdf", "mebibytes": 40}, artifacts, toolset=toolset
    )
    assert response == {"version": 1}
    stored = await artifacts.load_artifact(**_ids(session), filename="out.pdf")
    assert stored is not None and stored.inline_data is not None
    assert stored.inline_data.mime_type == "application/pdf"
    assert stored.inline_data.data == BIG
    # The call said it reassembles; the save came as a header and chunks of one request.
    assert toolset.sent[0].accepts_artifact_chunks
    header, *chunks = toolset.context_requests()
    assert header.save_artifact.size_bytes == len(BIG) and header.save_artifact.chunks_follow
    assert len(chunks) == len(BIG) // ARTIFACT_CHUNK_BYTES
    assert {c.request_id for c in chunks} == {header.request_id}
    (answer,) = toolset.context_responses()
    assert answer.saved_version == 1


async def test_an_artifact_under_one_message_still_travels_in_one_message(
    tool_target: str,
) -> None:
    artifacts = InMemoryArtifactService()
    loading = CountingToolset(tool_target)
    response, _ = await _remote_tool(
        tool_target,
        "measure",
        {"filename": "small.pdf"},
        artifacts,
        _saving("small.pdf", _pdf(SMALL), artifacts),
        loading,
    )
    assert response["sha256"] == digest(SMALL)
    (answer,) = loading.context_responses()
    assert answer.loaded_artifact.artifact.inline_data.data == SMALL
    assert not answer.loaded_artifact.chunks_follow

    saving = CountingToolset(tool_target)
    response, session = await _remote_tool(
        tool_target, "produce", {"filename": "s.pdf", "mebibytes": 4}, artifacts, toolset=saving
    )
    assert response == {"version": 1}
    stored = await artifacts.load_artifact(**_ids(session), filename="s.pdf")
    assert stored is not None and stored.inline_data is not None
    assert stored.inline_data.data == SMALL
    (request,) = saving.context_requests()
    assert request.save_artifact.artifact.inline_data.data == SMALL
    assert not request.save_artifact.chunks_follow


# --- a delegated run: an AgentServer and a RemoteAgent ----------------------------------------


async def _delegated(
    tool: str,
    args: dict[str, Any],
    artifacts: InMemoryArtifactService,
    prepare: Callable[[Session], Awaitable[None]] = _nothing,
    **server_options: Any,
) -> tuple[dict[str, Any], Session]:
    served = LlmAgent(name="filer", model=ScriptedModel([call(tool, args), "done"]), tools=TOOLS)
    server = AgentServer(served, app_name="app", **server_options)
    port = await server.start("127.0.0.1:0")
    agent = RemoteAgent("filer", f"127.0.0.1:{port}")
    try:
        events, session = await _turn(agent, artifacts, prepare)
    finally:
        await agent.close()
        await server.stop(None)
    (response,) = [r.response for e in events for r in e.function_responses() if r.name == tool]
    return response, session


async def test_a_delegated_run_loads_a_40_mib_artifact_of_its_caller() -> None:
    artifacts = InMemoryArtifactService()
    response, _ = await _delegated(
        "measure", {"filename": "big.pdf"}, artifacts, _saving("big.pdf", _pdf(BIG), artifacts)
    )
    assert response == {"length": len(BIG), "sha256": digest(BIG), "mime_type": "application/pdf"}


async def test_a_delegated_run_refuses_a_load_over_its_services_artifact_limit() -> None:
    # The limit is the receiver's: the serving side's, as for its session API's streams.
    limit = 36 * MIB
    artifacts = InMemoryArtifactService()
    response, _ = await _delegated(
        "measure",
        {"filename": "big.pdf"},
        artifacts,
        _saving("big.pdf", _pdf(BIG), artifacts),
        max_artifact_bytes=limit,
    )
    assert response["kind"] == "ArtifactError"
    assert "'big.pdf'" in response["error"] and f"over the {limit} bytes" in response["error"]


async def test_a_delegated_run_saves_a_40_mib_artifact_in_its_callers_store() -> None:
    artifacts = InMemoryArtifactService()
    response, session = await _delegated(
        "produce", {"filename": "out.pdf", "mebibytes": 40}, artifacts
    )
    assert response == {"version": 1}
    stored = await artifacts.load_artifact(**_ids(session), filename="out.pdf")
    assert stored is not None and stored.inline_data is not None
    assert stored.inline_data.data == BIG


# --- the caller's side refuses bad chunk streams (a callee that breaks the protocol) ----------


class ScriptedToolService(tool_pb2_grpc.ToolServiceServicer):  # type: ignore[misc]
    """A callee that sends the context requests of its script, records the caller's answers
    until it has ``expect`` of them, then answers the call."""

    def __init__(self, script: list[tool_pb2.ContextRequest], expect: int) -> None:
        self.script = script
        self.expect = expect
        self.first: tool_pb2.CallToolInteractiveRequest | None = None
        self.answers: list[tool_pb2.ContextResponse] = []

    async def ListTools(
        self, request: tool_pb2.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> tool_pb2.ListToolsResponse:
        return tool_pb2.ListToolsResponse(tools=[tool_pb2.ToolDeclaration(name="scripted")])

    async def CallToolInteractive(
        self,
        requests: AsyncIterator[tool_pb2.CallToolInteractiveRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[tool_pb2.CallToolInteractiveResponse]:
        incoming = aiter(requests)
        self.first = await anext(incoming)
        for request in self.script:
            yield tool_pb2.CallToolInteractiveResponse(context_request=request)
        while len(self.answers) < self.expect:
            self.answers.append((await anext(incoming)).context_response)
        result = tool_pb2.ToolResult()
        result.response.update({"ok": True})
        yield tool_pb2.CallToolInteractiveResponse(
            response=tool_pb2.CallToolResponse(result=result)
        )


async def _scripted_callee(
    script: list[tool_pb2.ContextRequest], expect: int
) -> tuple[ScriptedToolService, Session, InMemoryArtifactService]:
    service = ScriptedToolService(script, expect)
    server = grpc.aio.server(options=channel_options())
    tool_pb2_grpc.add_ToolServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    artifacts = InMemoryArtifactService()
    try:
        response, session = await _remote_tool(f"127.0.0.1:{port}", "scripted", {}, artifacts)
    finally:
        await server.stop(None)
    assert response == {"ok": True}
    return service, session, artifacts


def _save_header(request_id: int, filename: str, size: int) -> tool_pb2.ContextRequest:
    request = tool_pb2.ContextRequest(request_id=request_id)
    request.save_artifact.filename = filename
    request.save_artifact.artifact.inline_data.mime_type = "application/pdf"
    request.save_artifact.size_bytes = size
    request.save_artifact.chunks_follow = True
    return request


def _chunk(request_id: int, data: bytes) -> tool_pb2.ContextRequest:
    return tool_pb2.ContextRequest(request_id=request_id, artifact_chunk=data)


def _list_keys(request_id: int) -> tool_pb2.ContextRequest:
    return tool_pb2.ContextRequest(
        request_id=request_id, list_artifact_keys=tool_pb2.ListArtifactKeysRequest()
    )


async def test_a_save_whose_chunks_carry_fewer_bytes_than_announced_stores_nothing() -> None:
    script = [
        _save_header(1, "short.pdf", 3 * MIB),
        _chunk(1, data_of(1)),
        _chunk(1, data_of(1)),
        # Chunks follow their header at once: another request ends them.
        _list_keys(2),
    ]
    service, session, artifacts = await _scripted_callee(script, expect=2)
    # The caller said on its first message that it reassembles saves sent in chunks.
    assert service.first is not None and service.first.accepts_artifact_chunks
    refused, listed = service.answers
    assert refused.request_id == 1 and refused.WhichOneof("result") == "error"
    assert refused.error.reason == "ARTIFACT_ERROR"
    assert f"after {2 * MIB} of the {3 * MIB} bytes" in refused.error.message
    assert "nothing was stored" in refused.error.message
    assert listed.request_id == 2 and list(listed.artifact_keys.filenames) == []
    assert await artifacts.list_artifact_keys(**_ids(session)) == []


async def test_a_save_whose_chunks_carry_more_bytes_than_announced_stores_nothing() -> None:
    script = [
        _save_header(1, "long.pdf", 10),
        _chunk(1, b"x" * 6),
        _chunk(1, b"x" * 6),  # past the 10 bytes announced: refused here
        _chunk(1, b"x" * 6),  # of a refused save: dropped
        _list_keys(2),
    ]
    service, session, artifacts = await _scripted_callee(script, expect=2)
    refused, listed = service.answers
    assert refused.request_id == 1 and refused.error.reason == "ARTIFACT_ERROR"
    assert "more than the 10 bytes" in refused.error.message
    assert listed.request_id == 2
    assert await artifacts.list_artifact_keys(**_ids(session)) == []


async def test_a_save_announced_over_the_limit_and_stray_chunks_are_refused() -> None:
    script = [
        _save_header(1, "huge.pdf", DEFAULT_MAX_ARTIFACT_BYTES + 1),
        _chunk(1, b"dropped: the save was refused on its header"),
        _chunk(7, b"of no request"),
        _list_keys(2),
    ]
    service, session, artifacts = await _scripted_callee(script, expect=3)
    refused, stray, listed = service.answers
    assert refused.request_id == 1 and refused.error.reason == "ARTIFACT_ERROR"
    assert str(DEFAULT_MAX_ARTIFACT_BYTES) in refused.error.message
    assert stray.request_id == 7 and stray.error.reason == "ARTIFACT_ERROR"
    assert "no artifact is being sent" in stray.error.message
    assert listed.request_id == 2
    assert await artifacts.list_artifact_keys(**_ids(session)) == []


async def test_an_older_callee_gets_the_error_not_chunks_for_a_large_load() -> None:
    request = tool_pb2.ContextRequest(request_id=1)
    request.load_artifact.filename = "big.pdf"  # accepts_artifact_chunks unset: an older peer
    service = ScriptedToolService([request], expect=1)
    server = grpc.aio.server(options=channel_options())
    tool_pb2_grpc.add_ToolServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    artifacts = InMemoryArtifactService()
    try:
        await _remote_tool(
            f"127.0.0.1:{port}",
            "scripted",
            {},
            artifacts,
            _saving("big.pdf", _pdf(BIG), artifacts),
        )
    finally:
        await server.stop(None)
    (answer,) = service.answers
    assert answer.error.reason == "ARTIFACT_ERROR"
    assert "cannot receive it" in answer.error.message


# --- the callee's side refuses bad chunk streams (a caller that breaks the protocol) ----------


async def _raw_call(
    target: str, tool: str, args: dict[str, Any], *, accepts_chunks: bool
) -> tuple[Any, Any]:
    channel = open_channel(target, tls=None)
    stub = tool_pb2_grpc.ToolServiceStub(channel)
    call = stub.CallToolInteractive(timeout=30)
    request = tool_pb2.CallToolRequest(tool_name=tool)
    request.context.app_name, request.context.user_id, request.context.session_id = "app", "u", "s"
    request.args.update(args)
    await call.write(
        tool_pb2.CallToolInteractiveRequest(call=request, accepts_artifact_chunks=accepts_chunks)
    )
    return channel, call


async def _result_after(
    call: Any, answer: Callable[[tool_pb2.ContextRequest], list[tool_pb2.ContextResponse]]
) -> tuple[dict[str, Any], list[tool_pb2.ContextRequest]]:
    """Answer each context request of the call with ``answer``'s messages; the tool's result
    and the requests seen."""
    asked: list[tool_pb2.ContextRequest] = []
    async for message in call:
        if message.HasField("context_request"):
            asked.append(message.context_request)
            for response in answer(message.context_request):
                await call.write(tool_pb2.CallToolInteractiveRequest(context_response=response))
            continue
        if message.response.HasField("result"):
            return MessageToDict(message.response.result.response), asked
    raise AssertionError("the call ended without a result")


def _load_header(request_id: int, size: int) -> tool_pb2.ContextResponse:
    response = tool_pb2.ContextResponse(request_id=request_id)
    loaded = response.loaded_artifact
    loaded.artifact.CopyFrom(content_pb2.Part(inline_data=content_pb2.Blob(mime_type="a/b")))
    loaded.size_bytes = size
    loaded.chunks_follow = True
    return response


async def test_a_load_whose_chunks_carry_more_than_announced_fails_the_tool_readably(
    tool_target: str,
) -> None:
    channel, call = await _raw_call(
        tool_target, "measure", {"filename": "f.pdf"}, accepts_chunks=True
    )
    try:
        result, asked = await _result_after(
            call,
            lambda request: [
                _load_header(request.request_id, 10),
                tool_pb2.ContextResponse(request_id=request.request_id, artifact_chunk=b"x" * 11),
            ],
        )
    finally:
        await channel.close()
    assert asked[0].accepts_artifact_chunks
    assert result["kind"] == "ArtifactError"
    assert "more than the 10 bytes" in result["error"]


async def test_a_load_announced_over_the_limit_fails_the_tool_before_any_byte(
    tool_target: str,
) -> None:
    channel, call = await _raw_call(
        tool_target, "measure", {"filename": "f.pdf"}, accepts_chunks=True
    )
    try:
        result, _ = await _result_after(
            call, lambda request: [_load_header(request.request_id, DEFAULT_MAX_ARTIFACT_BYTES + 1)]
        )
    finally:
        await channel.close()
    assert result["kind"] == "ArtifactError"
    assert str(DEFAULT_MAX_ARTIFACT_BYTES) in result["error"]


async def test_an_older_caller_gets_no_chunks_and_the_tool_reads_an_artifact_error(
    tool_target: str,
) -> None:
    channel, call = await _raw_call(
        tool_target, "produce", {"filename": "big.pdf", "mebibytes": 40}, accepts_chunks=False
    )
    try:
        result, asked = await _result_after(call, lambda request: [])
    finally:
        await channel.close()
    assert asked == []  # nothing sent: the caller could not have read it
    assert result["kind"] == "ArtifactError"
    assert "message limit" in result["error"]
