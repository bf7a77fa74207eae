"""The trace invariants operators rely on, checked over real servers on 127.0.0.1:0.

"OpenTelemetry traces each invocation end to end, across all services, through its
invocation_id": every scenario below (a remote transfer, a remote AgentTool child over ``Run``
and ``RunDelegated``, a remote tool, a ParallelAgent over remote children, a two-hop chain, a
model error, a tool error, a deadline at the second hop, a client cancel, an auth refusal, and
a polyglot client sending no trace context) runs several AgentServers and a ToolServer in this
process, sharing one TracerProvider, and checks:

* every span started is ended, exactly once (a processor of our own counts both);
* the spans of one invocation are one trace and one tree (one root, every parent a span of the
  trace), and every span a service makes carries ``adk_mesh.invocation_id``;
* a failure makes the failing span and its ancestors up to the RPC ERROR with ``error.type``;
  a cancelled span is not ERROR; no secret lands on a span;
* names and kinds follow the GenAI and RPC conventions (``invoke_agent X``, ``chat M``,
  ``execute_tool T``; RPC spans CLIENT/SERVER with ``rpc.system=grpc``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import ParallelAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext, ToolContext
from adk_mesh.errors import ModelError, ToolError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.auth import ApiKeyAuthenticator, new_api_key
from adk_mesh.mesh.security import ServerSecurity
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry import InvocationSpanProcessor, _providers
from adk_mesh.telemetry._spans import (
    CAPTURE_CONTENT_ENV,
    capture_content,
    refresh_capture_content,
)
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.base import Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

INVOCATION_ID = "adk_mesh.invocation_id"
RUN = "adk_mesh.v1.AgentService/Run"
RUN_DELEGATED = "adk_mesh.v1.AgentService/RunDelegated"
SECRET = "sk-live-do-not-trace-4242"


# --- the pipeline -----------------------------------------------------------------------------


class StartEndCounter(SpanProcessor):
    """Counts on_start and on_end per span (by span id), from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop = asyncio.get_running_loop()
        #: Set at each span's end (from whichever thread ends it).
        self.changed = asyncio.Event()
        self.started: Counter[int] = Counter()
        self.ended: Counter[int] = Counter()
        self.names: dict[int, str] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with self._lock:
            span_id = span.get_span_context().span_id
            self.started[span_id] += 1
            self.names[span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            assert span.context is not None
            self.ended[span.context.span_id] += 1
        self._loop.call_soon_threadsafe(self.changed.set)

    def reset(self) -> None:
        with self._lock:
            self.started.clear()
            self.ended.clear()
            self.names.clear()

    def open_spans(self) -> list[str]:
        with self._lock:
            return [self.names[i] for i in self.started if i not in self.ended]

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class Traced:
    provider: TracerProvider

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.counter = StartEndCounter()

    def reset(self) -> None:
        """Forget the spans recorded so far (all ended)."""
        self.counter.reset()
        self.exporter.clear()

    async def settled(self) -> list[ReadableSpan]:
        """The finished spans, once every span started has ended (servers end theirs after
        the client saw the call end). A span still open after 10 s is a leak."""
        try:
            async with asyncio.timeout(10):
                while True:
                    self.counter.changed.clear()
                    if not self.counter.open_spans():
                        break
                    await self.counter.changed.wait()
        except TimeoutError:
            pytest.fail(f"spans never ended: {self.counter.open_spans()}")
        for _ in range(10):  # a span started late, by a step still queued: open again, caught
            await asyncio.sleep(0)
        assert not self.counter.open_spans(), self.counter.open_spans()
        spans = list(self.exporter.get_finished_spans())
        assert self.counter.started.keys() == self.counter.ended.keys()
        assert set(self.counter.started.values()) <= {1}, "a span id started twice"
        assert set(self.counter.ended.values()) <= {1}, "a span ended twice"
        assert len(spans) == len(self.counter.started)
        return spans


#: How the root runs are sent: with streamed model answers (partial events relayed across
#: hops) when the ``traced`` fixture's mode says so.
_streaming = {"on": False}


@pytest.fixture(params=["plain", "capture-and-stream"])
async def traced(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Traced]:
    """Every scenario twice: as is, and with content capture on (a chat span then waits for
    the answer the agent used) and model answers streamed."""
    if request.param == "capture-and-stream":
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
        monkeypatch.setitem(_streaming, "on", True)
    refresh_capture_content()
    state = Traced()
    provider = TracerProvider(resource=Resource({"service.name": "mesh"}), shutdown_on_exit=False)
    provider.add_span_processor(InvocationSpanProcessor())
    provider.add_span_processor(state.counter)
    provider.add_span_processor(SimpleSpanProcessor(state.exporter))
    state.provider = provider
    with _providers.use_tracer_provider(provider):
        yield state
    provider.shutdown()


# --- servers and agents -----------------------------------------------------------------------


def answers(text: str) -> FunctionModel:
    return FunctionModel(lambda request: text, name="fn-model")


def failing_model(request: LlmRequest) -> LlmResponse:
    raise ModelError("the provider answered 500")


def shout(text: str) -> dict[str, Any]:
    """Shout the text."""
    return {"text": text.upper()}


def explode(text: str) -> dict[str, Any]:
    """Always fails."""
    raise ToolError("the tool broke")


class Blocking(BaseAgent):
    """Yields one event, then waits for ever (until cancelled)."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name)
        self.started = asyncio.Event()

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield ctx.new_event(content=Content(role="model", parts=[Part(text="first")]))
        self.started.set()
        await asyncio.Event().wait()


class Mesh:
    """Servers started for one test, stopped at its end."""

    def __init__(self, stack: AsyncExitStack) -> None:
        self._stack = stack

    async def agent(self, agent: BaseAgent, **options: Any) -> str:
        security = options.pop("security", None)
        server = AgentServer(agent, app_name="app", **options)
        port = await server.start("127.0.0.1:0", security=security)
        self._stack.push_async_callback(server.stop, None)
        return f"127.0.0.1:{port}"

    async def tools(self, *tools: Callable[..., Any]) -> str:
        server = ToolServer([FunctionTool(t) for t in tools], name="tools")
        port = await server.start("127.0.0.1:0")
        self._stack.push_async_callback(server.stop, None)
        return f"127.0.0.1:{port}"

    def remote(self, name: str, target: str, **options: Any) -> RemoteAgent:
        remote = RemoteAgent(name, target, **options)
        self._stack.push_async_callback(remote.close)
        return remote

    def toolset(self, target: str) -> RemoteToolset:
        toolset = RemoteToolset(target)
        self._stack.push_async_callback(toolset.close)
        return toolset


@pytest.fixture
async def mesh() -> AsyncIterator[Mesh]:
    async with AsyncExitStack() as stack:
        yield Mesh(stack)


def root_request(text: str = "hi", user_id: str = "u1") -> agent_pb2.RunRequest:
    streaming = agent_pb2.STREAMING_MODE_SSE if _streaming["on"] else agent_pb2.STREAMING_MODE_NONE
    return agent_pb2.RunRequest(
        run_config=agent_pb2.RunConfig(streaming_mode=streaming),
        root=agent_pb2.RootRun(
            user_id=user_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        ),
    )


async def run_root(
    target: str,
    *,
    metadata: Iterable[tuple[str, str]] = (),
    user_id: str = "u1",
    session_id: str = "",
) -> list[agent_pb2.RunResponse]:
    """A root Run from a traced client of the mesh (``open_channel``)."""
    async with open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        request = root_request(user_id=user_id)
        request.root.session_id = session_id
        return [r async for r in stub.Run(request, metadata=tuple(metadata))]


# --- the invariants ---------------------------------------------------------------------------


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def by_id(spans: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {s.context.span_id: s for s in spans if s.context is not None}


def is_test_client(span: ReadableSpan) -> bool:
    """The RPC span of this test's own client: outside any invocation (the service assigns
    the invocation id), so it is the one span that cannot carry it."""
    return span.parent is None and span.kind is SpanKind.CLIENT


def check_names_and_kinds(spans: list[ReadableSpan]) -> None:
    for span in spans:
        attributes = attrs(span)
        name = span.name
        operation, _, subject = name.partition(" ")
        if operation == "invoke_workflow":
            assert span.kind is SpanKind.INTERNAL, name
            assert attributes["gen_ai.operation.name"] == "invoke_workflow", name
        elif operation == "invoke_agent":
            assert attributes["gen_ai.operation.name"] == "invoke_agent", name
            assert attributes["gen_ai.agent.name"] == subject, name
            if "server.address" in attributes:
                assert span.kind is SpanKind.CLIENT, name
            else:
                assert span.kind is SpanKind.INTERNAL, name
        elif operation == "chat":
            assert span.kind is SpanKind.CLIENT, name
            assert attributes["gen_ai.operation.name"] == "chat", name
            assert attributes["gen_ai.request.model"] == subject, name
            assert attributes["gen_ai.provider.name"], name
        elif operation == "execute_tool":
            assert span.kind is SpanKind.INTERNAL, name
            assert attributes["gen_ai.operation.name"] == "execute_tool", name
            assert attributes["gen_ai.tool.name"] == subject, name
        else:
            service, _, method = name.partition("/")
            assert service.startswith("adk_mesh.v1.") and method, f"unexpected span {name!r}"
            assert span.kind in (SpanKind.CLIENT, SpanKind.SERVER), name
            assert attributes["rpc.system"] == "grpc", name
            assert attributes["rpc.service"] == service, name
            assert attributes["rpc.method"] == method, name
            assert isinstance(attributes["rpc.grpc.status_code"], int), name


def check_no_secret(spans: list[ReadableSpan], *secrets: str) -> None:
    for span in spans:
        texts = [repr(span.attributes), span.status.description or ""]
        texts += [repr(event.attributes) for event in span.events]
        for secret in secrets:
            assert all(secret not in text for text in texts), (span.name, secret)
        assert not [e for e in span.events if e.name == "exception"], span.name


def check_tree(spans: list[ReadableSpan]) -> ReadableSpan:
    """One trace, one tree: returns its root."""
    assert spans
    assert len({s.context.trace_id for s in spans if s.context}) == 1, "more than one trace"
    ids = by_id(spans)
    roots = [s for s in spans if s.parent is None or s.parent.span_id not in ids]
    assert len(roots) == 1, [(s.name, s.parent) for s in roots]
    assert roots[0].parent is None, "the root's parent is not a span of the trace"
    return roots[0]


def check_invocation(spans: list[ReadableSpan], invocation_id: str | None = None) -> str:
    """One trace, one tree, every span of a service carrying the one invocation id."""
    check_tree(spans)
    check_names_and_kinds(spans)
    check_no_secret(spans, SECRET)
    if capture_content():
        for span in named_like(spans, "chat "):
            assert "gen_ai.input.messages" in attrs(span), span.name
            if (
                span.status.status_code is not StatusCode.ERROR
                and "adk_mesh.cancelled" not in attrs(span)
            ):
                assert "gen_ai.output.messages" in attrs(span), tree(spans)
    seen = {attrs(s).get(INVOCATION_ID) for s in spans if not is_test_client(s)}
    assert None not in seen, [s.name for s in spans if INVOCATION_ID not in attrs(s)]
    assert len(seen) == 1, seen
    found = seen.pop()
    assert isinstance(found, str) and found
    if invocation_id is not None:
        assert found == invocation_id
    return found


def tree(spans: list[ReadableSpan]) -> str:
    """The spans as an indented tree (for failure messages)."""
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in children.get(parent, []):
            status = span.status.status_code.name
            lines.append(f"{'  ' * depth}{span.name} [{span.kind.name}] {status}")
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[ReadableSpan]:
    ids = by_id(spans)
    chain = [span]
    while chain[-1].parent is not None:
        chain.append(ids[chain[-1].parent.span_id])
    return chain


def check_failed_up_to_the_root(failing: ReadableSpan, spans: list[ReadableSpan]) -> None:
    for span in ancestors(failing, spans):
        assert span.status.status_code is StatusCode.ERROR, span.name
        assert attrs(span).get("error.type"), span.name


def named_like(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def named(spans: list[ReadableSpan], name: str, kind: SpanKind | None = None) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name and (kind is None or s.kind is kind)]


def one(spans: list[ReadableSpan], name: str, kind: SpanKind | None = None) -> ReadableSpan:
    found = named(spans, name, kind)
    assert len(found) == 1, (name, kind, [s.name for s in spans])
    return found[0]


def invocation_of(responses: list[agent_pb2.RunResponse]) -> str:
    return next(r.event.invocation_id for r in responses if r.HasField("event"))


def no_error(spans: list[ReadableSpan]) -> None:
    assert [s.name for s in spans if s.status.status_code is StatusCode.ERROR] == []


# --- the scenarios ----------------------------------------------------------------------------


async def test_a_remote_transfer(traced: Traced, mesh: Mesh) -> None:
    specialist = await mesh.agent(LlmAgent(name="specialist", model=answers("remote answer")))
    coordinator = LlmAgent(
        name="coordinator",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
        sub_agents=[mesh.remote("specialist", specialist)],
    )
    responses = await run_root(await mesh.agent(coordinator))
    spans = await traced.settled()
    check_invocation(spans, invocation_of(responses))
    no_error(spans)
    remote = one(spans, "invoke_agent specialist", SpanKind.CLIENT)
    served = one(spans, "invoke_agent specialist", SpanKind.INTERNAL)
    assert remote in ancestors(served, spans)
    assert attrs(remote)["server.address"] == "127.0.0.1"


@pytest.mark.parametrize("method", [RUN, RUN_DELEGATED])
async def test_a_remote_agent_tool_child(traced: Traced, mesh: Mesh, method: str) -> None:
    child = await mesh.agent(LlmAgent(name="child", model=answers("child says")))
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([call("child", {"request": "go"}), "parent done"]),
        tools=[AgentTool(mesh.remote("child", child))],
    )
    # A caller with an artifact store delegates over RunDelegated, one without over Run.
    stores = {"artifact_service": InMemoryArtifactService()} if method == RUN_DELEGATED else {}
    responses = await run_root(await mesh.agent(parent, **stores))
    spans = await traced.settled()
    check_invocation(spans, invocation_of(responses))
    no_error(spans)
    [client] = [s for s in named(spans, method, SpanKind.CLIENT) if not is_test_client(s)]
    tool = one(spans, "execute_tool child")
    served = one(spans, "invoke_agent child", SpanKind.INTERNAL)
    assert tool in ancestors(client, spans)
    assert client in ancestors(served, spans)


async def test_a_remote_tool(traced: Traced, mesh: Mesh) -> None:
    tools = await mesh.tools(shout)
    agent = LlmAgent(
        name="user_of_tools",
        model=ScriptedModel([call("shout", {"text": "hi"}), "done"]),
        tools=[mesh.toolset(tools)],
    )
    responses = await run_root(await mesh.agent(agent))
    spans = await traced.settled()
    check_invocation(spans, invocation_of(responses))
    no_error(spans)
    caller_tool, served_tool = sorted(
        named(spans, "execute_tool shout"), key=lambda s: s.start_time or 0
    )
    assert caller_tool in ancestors(served_tool, spans)
    assert attrs(caller_tool)["gen_ai.tool.type"] == "extension"


async def test_a_parallel_agent_over_remote_children(traced: Traced, mesh: Mesh) -> None:
    left = await mesh.agent(LlmAgent(name="left", model=answers("L")))
    right = await mesh.agent(LlmAgent(name="right", model=answers("R")))
    fan = ParallelAgent(
        name="fan", sub_agents=[mesh.remote("left", left), mesh.remote("right", right)]
    )
    responses = await run_root(await mesh.agent(fan))
    spans = await traced.settled()
    check_invocation(spans, invocation_of(responses))
    no_error(spans)
    parallel = one(spans, "invoke_agent fan", SpanKind.INTERNAL)
    for name in ("left", "right"):
        branch = one(spans, f"invoke_agent {name}", SpanKind.CLIENT)
        assert branch.parent is not None
        assert branch.parent.span_id == parallel.context.span_id
        assert attrs(one(spans, f"invoke_agent {name}", SpanKind.INTERNAL))["adk_mesh.branch"]


async def chain(mesh: Mesh, leaf: BaseAgent, **hop: Any) -> str:
    """A -> B -> C: A transfers to B, B transfers to ``leaf`` (C)."""
    leaf_target = await mesh.agent(leaf)
    middle = LlmAgent(
        name="middle",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": leaf.name})]),
        sub_agents=[mesh.remote(leaf.name, leaf_target, **hop)],
    )
    middle_target = await mesh.agent(middle)
    top = LlmAgent(
        name="top",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "middle"})]),
        sub_agents=[mesh.remote("middle", middle_target)],
    )
    return await mesh.agent(top)


async def test_a_two_hop_chain(traced: Traced, mesh: Mesh) -> None:
    top = await chain(mesh, LlmAgent(name="leaf", model=answers("from the leaf, streamed")))
    responses = await run_root(top)
    events = [e for r in responses for e in ([r.event] if r.HasField("event") else r.events)]
    # Streamed: the leaf's partial events crossed both hops (relayed as they came).
    assert any(e.llm_response.partial for e in events) is _streaming["on"]
    spans = await traced.settled()
    check_invocation(spans, invocation_of(responses))
    no_error(spans)
    leaf_chat = one(spans, "chat fn-model")
    path = [s.name for s in ancestors(leaf_chat, spans)]
    assert path.count(RUN) == 6, tree(spans)  # the client's call, and a client and a server
    # span for each hop; the Runner follows a transfer, so the target's span is a sibling of
    # the agent that transferred, under the turn's span.
    assert path[-4:] == ["invoke_agent middle", "invoke_workflow app", RUN, RUN], tree(spans)


async def test_a_model_error_at_a_remote_agent(traced: Traced, mesh: Mesh) -> None:
    failing = await mesh.agent(
        LlmAgent(name="specialist", model=FunctionModel(failing_model, name="fn-model"))
    )
    coordinator = LlmAgent(
        name="coordinator",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
        sub_agents=[mesh.remote("specialist", failing)],
    )
    with pytest.raises(grpc.aio.AioRpcError):
        await run_root(await mesh.agent(coordinator))
    spans = await traced.settled()
    check_invocation(spans)
    model_call = one(spans, "chat fn-model")
    assert attrs(model_call)["error.type"] == "ModelError"
    check_failed_up_to_the_root(model_call, spans)


async def test_a_remote_tool_error_on_both_sides(traced: Traced, mesh: Mesh) -> None:
    tools = await mesh.tools(explode)
    agent = LlmAgent(
        name="user_of_tools",
        model=ScriptedModel([call("explode", {"text": "x", "api_key": SECRET}), "sorry"]),
        tools=[mesh.toolset(tools)],
    )
    responses = await run_root(await mesh.agent(agent))
    spans = await traced.settled()
    check_invocation(spans, invocation_of(responses))
    # The failure became a response the model read: the tool's spans are ERROR, the turn
    # (and every RPC) is not.
    failed = sorted(
        (s for s in spans if s.status.status_code is StatusCode.ERROR), key=lambda s: s.name
    )
    assert [s.name for s in failed] == ["execute_tool explode"] * 2
    for span in failed:
        assert attrs(span)["error.type"] == "ToolError"


async def test_a_deadline_exceeded_at_the_second_hop(traced: Traced, mesh: Mesh) -> None:
    leaf = Blocking("leaf")
    top = await chain(mesh, leaf, timeout=0.5)
    with pytest.raises(grpc.aio.AioRpcError):
        await run_root(top)
    spans = await traced.settled()
    check_invocation(spans)
    # B's call to C (the deepest RPC), its CLIENT span, and everything above it failed.
    blocked = one(spans, "invoke_agent leaf", SpanKind.INTERNAL)
    leaf_server, hop_client = ancestors(blocked, spans)[1:3]
    assert (leaf_server.name, leaf_server.kind) == (RUN, SpanKind.SERVER)
    assert (hop_client.name, hop_client.kind) == (RUN, SpanKind.CLIENT)
    for span in (leaf_server, hop_client):
        assert attrs(span)["error.type"] == "DEADLINE_EXCEEDED", span.kind
    check_failed_up_to_the_root(hop_client, spans)
    check_failed_up_to_the_root(leaf_server, spans)
    # The agent the deadline stopped was cancelled, not failed.
    assert blocked.status.status_code is not StatusCode.ERROR


async def test_a_client_cancel_mid_stream(traced: Traced, mesh: Mesh) -> None:
    leaf = Blocking("leaf")
    top = await chain(mesh, leaf)
    async with open_channel(top) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        run = stub.Run(root_request())
        first = await run.read()
        await leaf.started.wait()
        run.cancel()
    spans = await traced.settled()
    check_invocation(spans, first.event.invocation_id or None)
    no_error(spans)
    for span in named(spans, RUN):
        assert attrs(span)["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0], span
    assert attrs(one(spans, "invoke_agent leaf", SpanKind.INTERNAL)).get("adk_mesh.cancelled")
    # Every span the cancel cut short says so; the others ended before it. A server's
    # workflow span learns of the cut either as its task's cancellation or as its stream
    # closed while it waited for gRPC to send; either way it says cancelled, never closed
    # early or ERROR (test_trace_gaps18 checks every span the cancel cut).
    for span in named(spans, RUN):
        assert attrs(span).get("adk_mesh.cancelled") is True, span.name
    for span in named_like(spans, "invoke_workflow "):
        assert attrs(span).get("adk_mesh.cancelled") is True, span.name
        assert "adk_mesh.closed_early" not in attrs(span), span.name


async def test_an_auth_refusal(traced: Traced, mesh: Mesh, tmp_path: Path) -> None:
    key, line = new_api_key("alice")
    keys = tmp_path / "keys.txt"
    keys.write_text(line + "\n", encoding="utf-8")
    security = ServerSecurity(authenticators=(ApiKeyAuthenticator(keys),))
    target = await mesh.agent(LlmAgent(name="guarded", model=answers("ok")), security=security)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await run_root(target, metadata=[("x-api-key", SECRET)], user_id="alice")
    assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
    spans = await traced.settled()
    check_tree(spans)
    check_names_and_kinds(spans)
    check_no_secret(spans, SECRET)
    server = one(spans, RUN, SpanKind.SERVER)
    assert attrs(server)["error.type"] == "UNAUTHENTICATED"
    check_failed_up_to_the_root(server, spans)
    # The key that is let in: the turn is traced as any other, the key nowhere.
    responses = await run_root(target, metadata=[("x-api-key", key)], user_id="alice")
    spans = await traced.settled()
    spans = [s for s in spans if s.context.trace_id != server.context.trace_id]
    check_invocation(spans, invocation_of(responses))
    check_no_secret(spans, key)


async def test_a_polyglot_client_without_trace_context(traced: Traced, mesh: Mesh) -> None:
    specialist = await mesh.agent(LlmAgent(name="specialist", model=answers("remote answer")))
    coordinator = LlmAgent(
        name="coordinator",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
        sub_agents=[mesh.remote("specialist", specialist)],
    )
    target = await mesh.agent(coordinator)
    # A bare grpc.aio channel: no span, no traceparent, no baggage.
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        responses = [r async for r in stub.Run(root_request())]
    spans = await traced.settled()
    check_invocation(spans, invocation_of(responses))
    no_error(spans)
    root = check_tree(spans)
    assert root.name == RUN and root.kind is SpanKind.SERVER


# --- more ways to stop --------------------------------------------------------------------------


async def test_a_client_cancel_during_a_remote_tool(traced: Traced, mesh: Mesh) -> None:
    started = asyncio.Event()

    async def wait_forever(text: str) -> dict[str, Any]:
        """Never answers."""
        started.set()
        await asyncio.Event().wait()
        return {}

    tools = await mesh.tools(wait_forever)
    agent = LlmAgent(
        name="user_of_tools",
        model=ScriptedModel([call("wait_forever", {"text": "x"})]),
        tools=[mesh.toolset(tools)],
    )
    target = await mesh.agent(agent, artifact_service=InMemoryArtifactService())
    async with open_channel(target) as channel:
        run = agent_pb2_grpc.AgentServiceStub(channel).Run(root_request())
        first = await run.read()
        await started.wait()
        run.cancel()
    spans = await traced.settled()
    check_invocation(spans, first.event.invocation_id or None)
    no_error(spans)


async def test_a_parallel_branch_fails_and_its_sibling_is_cancelled(
    traced: Traced, mesh: Mesh
) -> None:
    failing = await mesh.agent(
        LlmAgent(name="failing", model=FunctionModel(failing_model, name="fn-model"))
    )
    blocker = Blocking("blocker")
    blocking = await mesh.agent(blocker)
    fan = ParallelAgent(
        name="fan",
        sub_agents=[mesh.remote("blocker", blocking), mesh.remote("failing", failing)],
    )
    with pytest.raises(grpc.aio.AioRpcError):
        await run_root(await mesh.agent(fan))
    spans = await traced.settled()
    check_invocation(spans)
    check_failed_up_to_the_root(one(spans, "chat fn-model"), spans)
    for span in named(spans, "invoke_agent blocker"):
        assert span.status.status_code is not StatusCode.ERROR, tree(spans)


async def test_a_turn_that_first_asks_who_runs_behind_a_remote_agent(
    traced: Traced, mesh: Mesh
) -> None:
    """The conversation's last answer came from an agent behind a RemoteAgent that this
    caller's objects never ran (a restarted service, another replica): before the turn's agent
    is chosen, the RemoteAgent asks its service (``Describe``). Those spans are the turn's too."""
    helper = LlmAgent(name="helper", model=answers("helper answers"))
    specialist = LlmAgent(
        name="specialist",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "helper"})]),
        sub_agents=[helper],
    )
    behind = await mesh.agent(specialist)
    sessions = InMemorySessionService()

    async def coordinator_service() -> str:
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
            sub_agents=[mesh.remote("specialist", behind)],
        )
        return await mesh.agent(coordinator, session_service=sessions)

    first = await run_root(await coordinator_service())
    session_id = next(r.session_id for r in first if r.session_id)
    await traced.settled()
    traced.reset()
    # The same conversation, through a coordinator service started anew.
    second = await run_root(await coordinator_service(), session_id=session_id)
    spans = await traced.settled()
    assert named(spans, "adk_mesh.v1.AgentService/Describe", SpanKind.CLIENT), tree(spans)
    check_invocation(spans, invocation_of(second))


async def test_a_server_span_names_its_peer_as_the_conventions_do(
    traced: Traced, mesh: Mesh
) -> None:
    """``network.peer.address`` is the peer's IP address and ``network.peer.port`` its port
    (the RPC conventions), not gRPC's ``ipv4:host:port`` peer string."""
    target = await mesh.agent(LlmAgent(name="solo", model=answers("ok")))
    async with grpc.aio.insecure_channel(target) as channel:
        [_ async for _ in agent_pb2_grpc.AgentServiceStub(channel).Run(root_request())]
    spans = await traced.settled()
    server = attrs(one(spans, RUN, SpanKind.SERVER))
    assert server["network.peer.address"] == "127.0.0.1"
    assert isinstance(server["network.peer.port"], int) and server["network.peer.port"] > 0


@pytest.mark.parametrize(
    ("peer", "expected"),
    [
        ("ipv4:10.1.2.80:50051", {"network.peer.address": "10.1.2.80", "network.peer.port": 50051}),
        ("ipv6:[::1]:443", {"network.peer.address": "::1", "network.peer.port": 443}),
        ("ipv6:%5B::1%5D:443", {"network.peer.address": "::1", "network.peer.port": 443}),
        ("unix:/tmp/mesh.sock", {"network.peer.address": "/tmp/mesh.sock"}),
    ],
)
def test_grpc_peer_strings_become_address_and_port(peer: str, expected: dict[str, Any]) -> None:
    from adk_mesh.mesh._interceptors import peer_attributes

    assert peer_attributes(peer) == expected


async def test_every_client_rpc_span_names_the_server_it_calls(traced: Traced, mesh: Mesh) -> None:
    """``server.address`` and ``server.port`` are required on an RPC CLIENT span by the RPC
    conventions: a mesh call names the service it went to (an agent's and a tool's)."""
    tools = await mesh.tools(shout)
    child = await mesh.agent(LlmAgent(name="child", model=answers("child says")))
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel(
            [call("shout", {"text": "hi"}), call("child", {"request": "go"}), "ok"]
        ),
        tools=[mesh.toolset(tools), AgentTool(mesh.remote("child", child))],
    )
    target = await mesh.agent(parent)
    await run_root(target)
    spans = await traced.settled()
    ports = {int(t.rpartition(":")[2]) for t in (tools, child, target)}
    clients = [s for s in spans if s.kind is SpanKind.CLIENT and "/" in s.name]
    assert {s.name.rpartition("/")[2] for s in clients} >= {"Run", "ListTools", "Describe"}
    for span in clients:
        assert attrs(span).get("server.address") == "127.0.0.1", span.name
        assert attrs(span).get("server.port") in ports, span.name
    tool_calls = [s for s in clients if s.name.startswith("adk_mesh.v1.ToolService/")]
    assert {attrs(s)["server.port"] for s in tool_calls} == {int(tools.rpartition(":")[2])}


class InstrumentedArtifacts(InMemoryArtifactService):
    """An artifact store whose every save makes a span of its own, as an instrumented client
    library's would (httpx to a bucket, a database driver)."""

    def __init__(self, tracer: Any) -> None:
        super().__init__()
        self._tracer = tracer

    async def save_artifact(self, **kwargs: Any) -> int:
        with self._tracer.start_as_current_span("bucket.put", kind=SpanKind.CLIENT):
            return await super().save_artifact(**kwargs)


async def test_the_callers_store_answering_a_remote_child_is_in_the_invocation(
    traced: Traced, mesh: Mesh
) -> None:
    """A remote AgentTool child saves an artifact: the caller's store does the save, over
    RunDelegated; a span its (instrumented) client makes there is the invocation's too."""

    async def keep(text: str, tool_context: ToolContext) -> dict[str, Any]:
        """Keeps the text."""
        version = await tool_context.save_artifact("note.txt", Part(text=text))
        return {"version": version}

    child = await mesh.agent(
        LlmAgent(
            name="child",
            model=ScriptedModel([call("keep", {"text": "remember"}), "kept"]),
            tools=[FunctionTool(keep)],
        )
    )
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([call("child", {"request": "keep it"}), "done"]),
        tools=[AgentTool(mesh.remote("child", child), artifact_prefixes=["note"])],
    )
    store = InstrumentedArtifacts(traced.provider.get_tracer("bucket-client"))
    responses = await run_root(await mesh.agent(parent, artifact_service=store))
    spans = await traced.settled()
    put = one(spans, "bucket.put")
    names = [s.name for s in ancestors(put, spans)]
    assert "execute_tool child" in names, tree(spans)
    assert attrs(put)[INVOCATION_ID] == invocation_of(responses)
    # The bucket's span is not one of the mesh's: the conventions' checks skip it.
    check_invocation([s for s in spans if s is not put], invocation_of(responses))


class BrokenToolset(Toolset):
    """A toolset whose listing fails (its backend is down)."""

    def __init__(self) -> None:
        super().__init__("broken")

    async def tools(self, ctx: Any) -> list[Any]:
        raise ToolError("the tool backend is down")


async def test_a_remote_tool_listing_that_fails(traced: Traced, mesh: Mesh) -> None:
    server = ToolServer([BrokenToolset()], name="tools")
    tools = f"127.0.0.1:{await server.start('127.0.0.1:0')}"
    try:
        agent = LlmAgent(name="user_of_tools", model=answers("unused"), tools=[mesh.toolset(tools)])
        with pytest.raises(grpc.aio.AioRpcError):
            await run_root(await mesh.agent(agent))
        spans = await traced.settled()
    finally:
        await server.stop(None)
    check_invocation(spans)
    listing = one(spans, "adk_mesh.v1.ToolService/ListTools", SpanKind.SERVER)
    check_failed_up_to_the_root(listing, spans)


async def test_a_callee_service_that_stops_mid_run(traced: Traced, mesh: Mesh) -> None:
    """The service a remote agent runs on goes away mid-run (stopped, no grace): its spans
    end all the same, and the caller's failure is ERROR up to the client's call."""
    blocker = Blocking("blocker")
    callee = AgentServer(blocker, app_name="app")
    port = await callee.start("127.0.0.1:0")
    try:
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "blocker"})]),
            sub_agents=[mesh.remote("blocker", f"127.0.0.1:{port}")],
        )
        target = await mesh.agent(coordinator)
        async with open_channel(target) as channel:
            run = agent_pb2_grpc.AgentServiceStub(channel).Run(root_request())
            await blocker.started.wait()
            await callee.stop(None)
            with pytest.raises(grpc.aio.AioRpcError):
                async for _ in run:
                    pass
    finally:
        await callee.stop(None)
    spans = await traced.settled()
    check_invocation(spans)
    failed_client = one(spans, "invoke_agent blocker", SpanKind.CLIENT)
    check_failed_up_to_the_root(failed_client, spans)
