"""RPC spans over real grpc.aio servers: every way a stream ends, on both sides."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind, StatusCode

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext
from adk_mesh.errors import ToolError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry import _providers
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2, tool_pb2, tool_pb2_grpc

RUN = "adk_mesh.v1.AgentService/Run"
#: A RemoteAgent's delegated runs when the caller has stores (the callee reaches the caller's
#: contexts over the call); without any, a RemoteAgent's run is a plain Run.
RUN_DELEGATED = "adk_mesh.v1.AgentService/RunDelegated"


class SpanWaiter(SpanProcessor):
    """A span processor: collects finished spans and lets a test wait for one by name and
    kind."""

    def __init__(self) -> None:
        self.finished: list[ReadableSpan] = []
        self._changed = asyncio.Condition()
        self._loop = asyncio.get_running_loop()

    def on_end(self, span: ReadableSpan) -> None:
        self.finished.append(span)
        self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._notify()))

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        pass

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _find(self, name: str, kind: SpanKind) -> ReadableSpan | None:
        return next((s for s in self.finished if s.name == name and s.kind is kind), None)

    async def wait(self, name: str, kind: SpanKind) -> ReadableSpan:
        async with asyncio.timeout(10), self._changed:
            await self._changed.wait_for(lambda: self._find(name, kind) is not None)
        found = self._find(name, kind)
        assert found is not None
        return found


def traced_by(processor: SpanWaiter) -> TracerProvider:
    provider = TracerProvider(resource=Resource({"service.name": "test"}), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    return provider


@pytest.fixture
async def waiter() -> AsyncIterator[SpanWaiter]:
    processor = SpanWaiter()
    provider = traced_by(processor)
    with _providers.use_tracer_provider(provider):
        yield processor
    provider.shutdown()


class Scripted(BaseAgent):
    """Yields one event, then ends, blocks forever or fails, as told."""

    def __init__(self, name: str, then: str, started: asyncio.Event | None = None) -> None:
        super().__init__(name=name)
        self.then = then
        self.started = started or asyncio.Event()

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield ctx.new_event(content=Content(role="model", parts=[Part(text="first")]))
        self.started.set()
        if self.then == "block":
            await asyncio.Event().wait()
        if self.then == "fail":
            raise ToolError("failed mid-stream")


@asynccontextmanager
async def serving(agent: BaseAgent) -> AsyncIterator[Any]:
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            yield agent_pb2_grpc.AgentServiceStub(channel)
    finally:
        await server.stop(None)


def root_request() -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")]),
        )
    )


def code_of(span: ReadableSpan) -> Any:
    assert span.attributes is not None
    return span.attributes["rpc.grpc.status_code"]


def assert_child(child: ReadableSpan, parent: ReadableSpan) -> None:
    assert child.parent is not None
    assert child.parent.span_id == parent.context.span_id
    assert child.context.trace_id == parent.context.trace_id


async def test_normal_end(waiter: SpanWaiter) -> None:
    async with serving(Scripted("solo", "end")) as stub:
        responses = [response async for response in stub.Run(root_request())]
    assert len(responses) == 1
    client = await waiter.wait(RUN, SpanKind.CLIENT)
    server = await waiter.wait(RUN, SpanKind.SERVER)
    agent = await waiter.wait("invoke_agent solo", SpanKind.INTERNAL)
    assert code_of(client) == code_of(server) == 0
    assert client.status.status_code is server.status.status_code is StatusCode.UNSET
    assert_child(server, client)
    workflow = await waiter.wait("invoke_workflow solo", SpanKind.INTERNAL)
    assert_child(workflow, server)
    assert_child(agent, workflow)
    # The root run's server span learns its invocation from the Runner.
    assert server.attributes is not None
    assert agent.attributes is not None
    assert server.attributes["adk_mesh.invocation_id"] == agent.attributes["adk_mesh.invocation_id"]


async def test_client_cancel(waiter: SpanWaiter) -> None:
    agent = Scripted("solo", "block")
    async with serving(agent) as stub:
        call = stub.Run(root_request())
        await call.read()
        await agent.started.wait()
        call.cancel()
        client = await waiter.wait(RUN, SpanKind.CLIENT)
        server = await waiter.wait(RUN, SpanKind.SERVER)
        inner = await waiter.wait("invoke_agent solo", SpanKind.INTERNAL)
    for span in (client, server):
        assert code_of(span) == grpc.StatusCode.CANCELLED.value[0]
        assert span.status.status_code is StatusCode.UNSET
        assert span.attributes is not None
        assert span.attributes["adk_mesh.cancelled"] is True
    assert inner.attributes is not None
    assert inner.attributes["adk_mesh.cancelled"] is True


@pytest.mark.parametrize("method", [RUN_DELEGATED, RUN])
async def test_client_abandons_the_stream(waiter: SpanWaiter, method: str) -> None:
    """The consumer stops reading a remote agent's events and closes the stream (a caller
    with an artifact store calls RunDelegated, one without any a plain Run)."""
    agent = Scripted("solo", "block")
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent("solo", f"127.0.0.1:{port}")
    try:
        service = InMemorySessionService()
        await service.create_session(app_name="app", user_id="u1", session_id="s1")
        runner = Runner(
            agent=remote,
            app_name="app",
            session_service=service,
            artifact_service=InMemoryArtifactService() if method == RUN_DELEGATED else None,
        )
        message = Content(role="user", parts=[Part(text="hi")])
        events = runner.run(user_id="u1", session_id="s1", new_message=message)
        await anext(events)
        await agent.started.wait()
        await events.aclose()
        client = await waiter.wait(method, SpanKind.CLIENT)
        server_span = await waiter.wait(method, SpanKind.SERVER)
        caller = await waiter.wait("invoke_agent solo", SpanKind.CLIENT)
    finally:
        await remote.close()
        await server.stop(None)
    assert code_of(client) == code_of(server_span) == grpc.StatusCode.CANCELLED.value[0]
    assert caller.attributes is not None
    assert caller.attributes["adk_mesh.closed_early"] is True
    assert caller.status.status_code is StatusCode.UNSET


async def test_deadline_exceeded(waiter: SpanWaiter) -> None:
    agent = Scripted("solo", "block")
    async with serving(agent) as stub:
        call = stub.Run(root_request(), timeout=0.5)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in call:
                pass
        assert raised.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        client = await waiter.wait(RUN, SpanKind.CLIENT)
        server = await waiter.wait(RUN, SpanKind.SERVER)
    for span in (client, server):
        assert code_of(span) == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["error.type"] == "DEADLINE_EXCEEDED"


async def test_server_error_mid_stream(waiter: SpanWaiter) -> None:
    async with serving(Scripted("solo", "fail")) as stub:
        call = stub.Run(root_request())
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in call:
                pass
    code = raised.value.code()
    assert code is not grpc.StatusCode.OK
    client = await waiter.wait(RUN, SpanKind.CLIENT)
    server = await waiter.wait(RUN, SpanKind.SERVER)
    agent = await waiter.wait("invoke_agent solo", SpanKind.INTERNAL)
    for span in (client, server):
        assert code_of(span) == code.value[0]
        assert span.status.status_code is StatusCode.ERROR
        assert "failed mid-stream" in (span.status.description or "")
    assert agent.status.status_code is StatusCode.ERROR
    assert agent.attributes is not None
    assert agent.attributes["error.type"] == "ToolError"


def shout(text: str) -> dict[str, Any]:
    """Shout the text."""
    return {"text": text.upper()}


async def test_remote_agent_and_remote_tool_continue_the_trace(waiter: SpanWaiter) -> None:
    """A delegated run and a remote tool call: the callee's spans under the caller's, with the
    caller's invocation id carried in baggage."""
    tools = ToolServer([FunctionTool(shout)], name="shouting")
    tools_port = await tools.start("127.0.0.1:0")
    remote_root = LlmAgent(name="specialist", model=ScriptedModel(["remote answer"]))
    agents = AgentServer(remote_root)
    agents_port = await agents.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{tools_port}")
    remote = RemoteAgent("specialist", f"127.0.0.1:{agents_port}")
    coordinator = LlmAgent(
        name="coordinator",
        model=ScriptedModel(
            [call("shout", {"text": "hi"}), call("transfer_to_agent", {"agent_name": "specialist"})]
        ),
        tools=[toolset],
        sub_agents=[remote],
    )
    try:
        service = InMemorySessionService()
        await service.create_session(app_name="app", user_id="u1", session_id="s1")
        # With an artifact store, the remote agent's run goes over RunDelegated.
        runner = Runner(
            agent=coordinator,
            app_name="app",
            session_service=service,
            artifact_service=InMemoryArtifactService(),
        )
        message = Content(role="user", parts=[Part(text="hi")])
        events = [e async for e in runner.run(user_id="u1", session_id="s1", new_message=message)]
        invocation_id = events[0].invocation_id
        remote_agent = await waiter.wait("invoke_agent specialist", SpanKind.INTERNAL)
        call_tool = await waiter.wait(
            "adk_mesh.v1.ToolService/CallToolInteractive", SpanKind.SERVER
        )
    finally:
        await toolset.close()
        await remote.close()
        await tools.stop(None)
        await agents.stop(None)
    finished = waiter.finished
    client_agent = next(
        s for s in finished if s.name == "invoke_agent specialist" and s.kind is SpanKind.CLIENT
    )
    run_client = next(s for s in finished if s.name == RUN_DELEGATED and s.kind is SpanKind.CLIENT)
    run_server = next(s for s in finished if s.name == RUN_DELEGATED and s.kind is SpanKind.SERVER)
    # The caller's execute_tool starts first; the tool service's runs under its
    # CallToolInteractive span.
    tool_span, served_tool = sorted(
        (s for s in finished if s.name == "execute_tool shout"), key=lambda s: s.start_time or 0
    )
    tool_client = next(
        s
        for s in finished
        if s.name == "adk_mesh.v1.ToolService/CallToolInteractive" and s.kind is SpanKind.CLIENT
    )
    assert client_agent.attributes is not None
    assert client_agent.attributes["server.port"] == agents_port
    assert tool_span.attributes is not None
    assert tool_span.attributes["gen_ai.tool.type"] == "extension"
    assert_child(run_client, client_agent)
    assert_child(run_server, run_client)
    assert_child(remote_agent, run_server)
    assert_child(tool_client, tool_span)
    assert_child(call_tool, tool_client)
    assert_child(served_tool, call_tool)
    assert served_tool.attributes is not None
    assert served_tool.attributes["gen_ai.tool.type"] == "function"
    assert len({span.context.trace_id for span in finished}) == 1
    for span in finished:
        assert span.attributes is not None
        assert span.attributes["adk_mesh.invocation_id"] == invocation_id, span.name


async def test_a_caller_without_baggage_still_finds_each_server_span_by_invocation(
    waiter: SpanWaiter,
) -> None:
    """A client in another language sends the ids in the request only: ListTools, CallTool and
    a delegated Run are found by the invocation id all the same."""
    tools = ToolServer([FunctionTool(shout)], name="shouting")
    agents = AgentServer(Scripted("solo", "end"))
    tools_port = await tools.start("127.0.0.1:0")
    agents_port = await agents.start("127.0.0.1:0")
    caller = tool_pb2.CallerContext(
        app_name="app", user_id="u1", session_id="s1", invocation_id="e-polyglot"
    )
    try:
        # Plain channels: no span, no traceparent, no baggage from this side.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{tools_port}") as channel:
            stub = tool_pb2_grpc.ToolServiceStub(channel)
            await stub.ListTools(tool_pb2.ListToolsRequest(context=caller))
            call_request = tool_pb2.CallToolRequest(context=caller, tool_name="shout")
            call_request.args.update({"text": "hi"})
            [_ async for _ in stub.CallTool(call_request)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{agents_port}") as channel:
            request = agent_pb2.RunRequest(
                delegated=agent_pb2.DelegatedRun(
                    invocation_id="e-polyglot",
                    session=agent_pb2.SessionView(app_name="app", user_id="u1", session_id="s1"),
                    user_content=content_pb2.Content(
                        role="user", parts=[content_pb2.Part(text="hi")]
                    ),
                )
            )
            [_ async for _ in agent_pb2_grpc.AgentServiceStub(channel).Run(request)]
        served = [
            await waiter.wait(name, SpanKind.SERVER)
            for name in (
                "adk_mesh.v1.ToolService/ListTools",
                "adk_mesh.v1.ToolService/CallTool",
                RUN,
            )
        ]
    finally:
        await tools.stop(None)
        await agents.stop(None)
    for span in served:
        assert span.attributes is not None
        assert span.attributes["adk_mesh.invocation_id"] == "e-polyglot", span.name
        assert span.attributes["adk_mesh.session_id"] == "s1", span.name


async def test_a_channel_opened_before_tracing_traces_once_it_is_on() -> None:
    """Tracing is decided per call: a long-lived channel picks it up (and drops it) later."""
    server = AgentServer(Scripted("solo", "end"))
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            [_ async for _ in stub.Run(root_request())]  # tracing off: nothing recorded
            processor = SpanWaiter()
            provider = traced_by(processor)
            with _providers.use_tracer_provider(provider):
                [_ async for _ in stub.Run(root_request(), metadata=(("x-caller", "test"),))]
                client = await processor.wait(RUN, SpanKind.CLIENT)
            [_ async for _ in stub.Run(root_request())]  # off again
    finally:
        await server.stop(None)
    assert code_of(client) == 0
    assert [s.name for s in processor.finished if s.kind is SpanKind.CLIENT] == [RUN]
