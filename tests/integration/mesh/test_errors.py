"""What a failure sends to a client, and what it leaves in the service's log.

Real grpc.aio servers on 127.0.0.1, real fake providers speaking their HTTP wire format. A
client never reads an internal address, a host name or a stack trace; the service's log gets
the detail once, with the invocation id and the trace id (a warning when the caller caused
the failure, an error with the traceback when we did).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ReadonlyContext
from adk_mesh.errors import (
    AdkError,
    AdkIOError,
    ModelAuthError,
    ModelError,
    ModelRateLimitError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import abort_with_error, error_from_rpc_error
from adk_mesh.models import OpenAIModel, RetryPolicy
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.testing.fake_providers import ErrorReply, FakeOpenAI
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import LlmResponse
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2, tool_pb2, tool_pb2_grpc
from tests.telemetry_fixtures import _fresh_telemetry_configuration, spans

__all__ = ["_fresh_telemetry_configuration", "spans"]

MESH_LOGGER = "adk_mesh.mesh"
SECRET_ADDRESS = "10.1.2.3:5432"


def ping() -> str:
    """Ping."""
    return "pong"


@asynccontextmanager
async def serving(agent: BaseAgent) -> AsyncIterator[str]:
    server = AgentServer(agent, app_name="app")
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def root_run(text: str = "hi", **fields: Any) -> agent_pb2.RunRequest:
    fields.setdefault("user_id", "alice")
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)])
    return agent_pb2.RunRequest(root=agent_pb2.RootRun(new_message=message, **fields))


async def run(target: str, request: agent_pb2.RunRequest) -> list[agent_pb2.RunResponse]:
    async with open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        return [response async for response in stub.Run(request, timeout=30)]


async def refused(target: str, request: agent_pb2.RunRequest) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(target, request)
    return caught.value


def dead_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def boundary_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records the servicers' error handler wrote."""
    return [
        record
        for record in caplog.records
        if record.name == MESH_LOGGER and (" failed (" in record.msg or " refused (" in record.msg)
    ]


def assert_nothing_internal(text: str, *addresses: str) -> None:
    assert "Traceback" not in text
    assert 'File "' not in text
    for address in addresses:
        assert address not in text


# --- ours: unexpected failures ------------------------------------------------------------


class BrokenToolset(Toolset):
    """A toolset whose backing database is down: its exception names the database's address."""

    def __init__(self) -> None:
        super().__init__("broken")

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        raise RuntimeError(f"could not connect to postgres at {SECRET_ADDRESS}")


async def test_an_unexpected_failure_is_internal_error_for_the_client_and_logged_once(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    server = ToolServer(BrokenToolset())
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            stub = tool_pb2_grpc.ToolServiceStub(channel)
            caller = tool_pb2.CallerContext(app_name="app", user_id="u", invocation_id="e-42")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ListTools(tool_pb2.ListToolsRequest(context=caller), timeout=30)
    finally:
        await server.stop(None)

    error = caught.value
    assert error.code() == grpc.StatusCode.INTERNAL
    assert error.details() == "internal error (invocation e-42); the service's log has the details"
    assert_nothing_internal(str(error.trailing_metadata()), SECRET_ADDRESS, "RuntimeError")
    (record,) = boundary_records(caplog)
    assert record.levelno == logging.ERROR
    message = record.getMessage()
    assert "ListTools failed (INTERNAL)" in message
    assert "invocation=e-42" in message
    (server_span,) = [s for s in spans.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert f"trace={server_span.context.trace_id:032x}" in message
    assert record.exc_info is not None and SECRET_ADDRESS in str(record.exc_info[1])


async def test_a_failure_of_ours_is_an_error_with_its_traceback_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(request: LlmRequest) -> LlmResponse:
        raise ModelError("the model store is corrupt")

    async with serving(LlmAgent(name="a", model=FunctionModel(broken))) as target:
        error = await refused(target, root_run())

    assert error.code() == grpc.StatusCode.UNAVAILABLE
    (record,) = boundary_records(caplog)
    assert record.levelno == logging.ERROR
    assert "Run failed (UNAVAILABLE MODEL_ERROR)" in record.getMessage()
    assert "invocation=e-" in record.getMessage()
    assert record.exc_info is not None


# --- the caller's: warnings ---------------------------------------------------------------


async def test_a_bad_request_is_a_warning_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    async with serving(LlmAgent(name="a", model=ScriptedModel([]))) as target:
        error = await refused(target, root_run(user_id="not an id"))

    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    (record,) = boundary_records(caplog)
    assert record.levelno == logging.WARNING
    assert "Run refused (INVALID_ARGUMENT INVALID_ARGUMENT)" in record.getMessage()
    assert record.exc_info is None


# --- addresses of the mesh stay in the log ------------------------------------------------


async def test_a_dead_tool_service_reaches_the_model_and_client_without_its_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tool_server = ToolServer([FunctionTool(ping)])
    tool_port = await tool_server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{tool_port}")

    async def answer(request: LlmRequest) -> LlmResponse | str:
        last = request.contents[-1].parts[0]
        if last.function_response is None:
            # The tools were listed; the service goes away before the call.
            await tool_server.stop(None)
            return call("ping")
        return f"noted: {last.function_response.response['error']}"

    agent = LlmAgent(name="a", model=FunctionModel(answer), tools=[toolset])
    try:
        async with serving(agent) as target:
            responses = await run(target, root_run())
    finally:
        await toolset.close()

    sent = "\n".join(str(response) for response in responses)
    assert_nothing_internal(sent, f"127.0.0.1:{tool_port}", str(tool_port))
    final = codec.event_from_proto(responses[-1].event).text
    assert final == "noted: AdkIOError: tool service for 'ping': unavailable"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"127.0.0.1:{tool_port}" in logged


async def test_a_dead_remote_agent_fails_the_run_without_its_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = dead_port()
    helper = RemoteAgent("helper", f"127.0.0.1:{port}")
    coordinator = LlmAgent(
        name="coordinator",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "helper"})]),
        sub_agents=[helper],
    )
    try:
        async with serving(coordinator) as target:
            error = await refused(target, root_run())
    finally:
        await helper.close()

    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert error.details() == "remote agent 'helper': unavailable"
    assert isinstance(error_from_rpc_error(error), AdkIOError)
    assert_nothing_internal(str(error.trailing_metadata()), f"127.0.0.1:{port}", str(port))
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"127.0.0.1:{port}" in logged


async def test_describe_of_a_dead_remote_agent_says_which_without_its_address() -> None:
    port = dead_port()
    helper = RemoteAgent("helper", f"127.0.0.1:{port}")
    root = LlmAgent(name="front", model=ScriptedModel([]), sub_agents=[helper])
    async with serving(root) as target, open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Describe(agent_pb2.DescribeRequest(agent_name="helper"), timeout=30)

    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert caught.value.details() == "remote agent 'helper': unavailable"


# --- provider errors map to what they mean ------------------------------------------------


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (401, grpc.StatusCode.FAILED_PRECONDITION, ModelAuthError),
        (403, grpc.StatusCode.FAILED_PRECONDITION, ModelAuthError),
        (429, grpc.StatusCode.RESOURCE_EXHAUSTED, ModelRateLimitError),
        (503, grpc.StatusCode.UNAVAILABLE, ModelError),
    ],
)
async def test_a_providers_failure_reaches_the_client_as_what_it_means(
    status: int, code: grpc.StatusCode, cls: type[ModelError], caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeOpenAI(ErrorReply(status, "no")) as provider:
        model = provider.make_model(retry=RetryPolicy(max_attempts=1))
        async with model, serving(LlmAgent(name="a", model=model)) as target:
            error = await refused(target, root_run())

    assert error.code() == code
    received = error_from_rpc_error(error)
    assert type(received) is cls
    assert received.metadata["status_code"] == str(status)
    assert_nothing_internal(error.details() or "", provider.base_url, "127.0.0.1")
    # The provider call's failure is logged, and the run's failure once, as ours.
    assert any("openai call failed" in r.getMessage() for r in caplog.records)
    (record,) = boundary_records(caplog)
    assert record.levelno == logging.ERROR


async def test_an_unreachable_provider_is_unavailable_without_its_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = dead_port()
    model = OpenAIModel(
        "m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", retry=RetryPolicy(max_attempts=1)
    )
    async with model, serving(LlmAgent(name="a", model=model)) as target:
        error = await refused(target, root_run())

    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert error.details() == "openai request failed: ConnectError"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"127.0.0.1:{port}" in logged


@asynccontextmanager
async def refusing_agent_service(error: AdkError) -> AsyncIterator[str]:
    """An agent service that refuses every Run as a door would, with ``error``."""

    async def run_refused(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await abort_with_error(context, error)
        yield b""  # pragma: no cover - makes this a stream handler

    handler = grpc.method_handlers_generic_handler(
        "adk_mesh.v1.AgentService",
        {
            "Run": grpc.unary_stream_rpc_method_handler(run_refused),
            "RunDelegated": grpc.stream_stream_rpc_method_handler(run_refused),
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.mark.parametrize(
    "refusal",
    [
        PermissionDeniedError("peer spiffe://mesh.internal/coordinator is not in the allow-list"),
        UnauthenticatedError("no client certificate from coordinator.mesh.internal"),
    ],
    ids=["permission-denied", "unauthenticated"],
)
async def test_a_peer_refusing_this_service_is_our_fault_not_the_callers(
    refusal: AdkError, caplog: pytest.LogCaptureFixture
) -> None:
    async with refusing_agent_service(refusal) as helper_target:
        helper = RemoteAgent("helper", helper_target)
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "helper"})]),
            sub_agents=[helper],
        )
        try:
            async with serving(coordinator) as target:
                error = await refused(target, root_run())
        finally:
            await helper.close()

    # The end user is not told they were denied, nor who the mesh's peers are.
    assert error.code() == grpc.StatusCode.INTERNAL
    assert error.details() is not None and error.details().startswith("remote agent 'helper': ")
    assert "mesh.internal" not in error.details()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "mesh.internal" in logged


async def test_an_overloaded_peer_is_unavailable_for_our_caller() -> None:
    """A peer at its limit of concurrent calls answers RESOURCE_EXHAUSTED without our
    ErrorInfo (gRPC's own refusal): our caller may retry later, as for any unavailable peer."""

    async def busy(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")
        yield b""  # pragma: no cover - makes this a stream handler

    handler = grpc.method_handlers_generic_handler(
        "adk_mesh.v1.AgentService",
        {
            "Run": grpc.unary_stream_rpc_method_handler(busy),
            "RunDelegated": grpc.stream_stream_rpc_method_handler(busy),
        },
    )
    peer = grpc.aio.server()
    peer.add_generic_rpc_handlers((handler,))
    port = peer.add_insecure_port("127.0.0.1:0")
    await peer.start()
    helper = RemoteAgent("helper", f"127.0.0.1:{port}")
    coordinator = LlmAgent(
        name="coordinator",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "helper"})]),
        sub_agents=[helper],
    )
    try:
        async with serving(coordinator) as target:
            error = await refused(target, root_run())
    finally:
        await helper.close()
        await peer.stop(None)

    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert error.details() == "remote agent 'helper': overloaded (too many calls at once)"
