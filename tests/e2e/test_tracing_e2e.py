"""One invocation across three ``adk-mesh serve`` processes is one trace in an OTLP backend.

The test is the backend: a real OTLP/gRPC ``TraceService`` receiver on 127.0.0.1. A coordinator
service calls a tool service and delegates through AgentTool to a researcher service; each
exports over OTLP/gRPC (batched) and flushes on SIGTERM.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from adk_mesh import codec
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.e2e.conftest import Service, service_env

pytestmark = pytest.mark.e2e

SERVICES = frozenset({"coordinator", "tools", "researcher"})
INVOCATION_ID = "adk_mesh.invocation_id"
SERVER = trace_pb2.Span.SPAN_KIND_SERVER
CLIENT = trace_pb2.Span.SPAN_KIND_CLIENT
WAIT_SECONDS = 20.0


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    span: trace_pb2.Span

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()

    @property
    def span_id(self) -> str:
        return self.span.span_id.hex()

    @property
    def parent_span_id(self) -> str:
        return self.span.parent_span_id.hex()

    def attribute(self, key: str) -> Any:
        for item in self.span.attributes:
            if item.key == key:
                return getattr(item.value, item.value.WhichOneof("value") or "string_value")
        return None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """An OTLP trace receiver that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.changed = asyncio.Condition()

    async def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            service = next(
                (
                    item.value.string_value
                    for item in resource_spans.resource.attributes
                    if item.key == "service.name"
                ),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(ReceivedSpan(service, span) for span in scope_spans.spans)
        async with self.changed:
            self.changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def services(self) -> set[str]:
        return {span.service for span in self.spans}


@dataclass
class TracedMesh:
    receiver: Receiver
    coordinator: str
    services: list[Service] = field(default_factory=list)

    async def stop(self) -> None:
        """SIGTERM every service and wait until each exited (after flushing its spans) and
        the receiver holds spans of all three."""
        for service in self.services:
            if service.process.poll() is None:
                service.process.terminate()
        for service in self.services:
            code = await asyncio.to_thread(service.process.wait, WAIT_SECONDS)
            assert code == 0, f"{service.name} exited with {code}: {service.stderr()}"
        async with asyncio.timeout(WAIT_SECONDS), self.receiver.changed:
            await self.receiver.changed.wait_for(lambda: self.receiver.services() >= SERVICES)


def _env(directory: Path, receiver_port: int, **targets: str) -> dict[str, str]:
    env = service_env(directory, **targets)
    for key in list(env):
        if key.startswith("OTEL_") or key in ("ADK_MESH_TRACE_DIR", "ADK_MESH_CAPTURE_CONTENT"):
            del env[key]
    env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            # The receiver serves traces only.
            "OTEL_METRICS_EXPORTER": "none",
        }
    )
    return env


@pytest.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[TracedMesh]:
    receiver = Receiver()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    started: list[Service] = []

    def start(name: str, *args: str, **targets: str) -> Service:
        service = Service(
            name, list(args), _env(tmp_path, port, **targets), tmp_path / f"{name}.log"
        )
        started.append(service)
        return service

    try:
        tools = start("tools", "tools", "tests.e2e.apps.tools:tools")
        researcher = start("researcher", "agent", "tests.e2e.apps.researcher:root_agent")
        targets = {
            "tools": await asyncio.to_thread(tools.wait_ready),
            "researcher": await asyncio.to_thread(researcher.wait_ready),
        }
        coordinator = start(
            "coordinator", "agent", "tests.e2e.tracing_apps.coordinator:build", **targets
        )
        target = await asyncio.to_thread(coordinator.wait_ready)
        yield TracedMesh(receiver, target, [coordinator, tools, researcher])
    finally:
        # Off the event loop: a service exporting its last spans needs the receiver to answer.
        for service in started:
            await asyncio.to_thread(service.stop)
        await server.stop(None)


async def run_once(target: str, metadata: tuple[tuple[str, str], ...] = ()) -> str:
    """One root Run on the coordinator; returns its invocation id."""
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text="Porto?")]),
        )
    )
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        events = [
            codec.event_from_proto(response.event)
            async for response in stub.Run(request, metadata=metadata, timeout=WAIT_SECONDS)
        ]
    assert events[-1].text == "21 °C and sunny in Porto", events
    invocation_ids = {event.invocation_id for event in events}
    assert len(invocation_ids) == 1, invocation_ids
    return invocation_ids.pop()


def _by_name(spans: list[ReceivedSpan], service: str, name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.service == service and s.span.name == name]


def _tree(spans: list[ReceivedSpan]) -> str:
    return "\n".join(
        f"{s.service:12} {s.span.name:45} {s.span_id} <- {s.parent_span_id or '-'}" for s in spans
    )


def assert_one_connected_trace(spans: list[ReceivedSpan], invocation_id: str) -> ReceivedSpan:
    """The invocation's spans: one trace, all three services, every span carrying the
    invocation id, every parent present; each callee's server span is the child of the
    caller's client span of the same call. Returns the coordinator's root server span."""
    trace_ids = {s.trace_id for s in spans if s.attribute(INVOCATION_ID) == invocation_id}
    assert len(trace_ids) == 1, trace_ids
    (trace_id,) = trace_ids
    trace = sorted(
        (s for s in spans if s.trace_id == trace_id), key=lambda s: s.span.start_time_unix_nano
    )
    tree = _tree(trace)
    assert {s.service for s in trace} == SERVICES, tree
    for span in trace:
        assert span.attribute(INVOCATION_ID) == invocation_id, f"{span.span.name}\n{tree}"
    by_id = {s.span_id: s for s in trace}
    assert len(by_id) == len(trace), tree

    roots = [s for s in trace if s.parent_span_id not in by_id]
    assert len(roots) == 1, tree
    (root,) = roots
    assert (root.service, root.span.name, root.span.kind) == (
        "coordinator",
        "adk_mesh.v1.AgentService/Run",
        SERVER,
    ), tree

    def parent(span: ReceivedSpan) -> ReceivedSpan:
        return by_id[span.parent_span_id]

    # Every other server span continues a client span of the same method in another service.
    servers = [s for s in trace if s.span.kind == SERVER and s is not root]
    assert {(s.service, s.span.name) for s in servers} >= {
        ("tools", "adk_mesh.v1.ToolService/CallToolInteractive"),
        # The coordinator has no artifact or memory store: its delegation is a plain Run.
        ("researcher", "adk_mesh.v1.AgentService/Run"),
    }, tree
    for server in servers:
        caller = parent(server)
        assert caller.span.kind == CLIENT, tree
        assert caller.service == "coordinator", tree
        assert caller.span.name == server.span.name, tree

    # In the tool service, the tool runs under the server span of its call.
    (tool,) = _by_name(trace, "tools", "execute_tool lookup")
    assert parent(tool).span.name == "adk_mesh.v1.ToolService/CallToolInteractive", tree
    assert tool.attribute("gen_ai.tool.name") == "lookup"
    # In the researcher, its agent runs under the server span of the delegated Run.
    (agent,) = _by_name(trace, "researcher", "invoke_agent researcher")
    ancestor = parent(agent)
    while ancestor.span.kind != SERVER:
        ancestor = parent(ancestor)
    assert (ancestor.service, ancestor.span.name) == (
        "researcher",
        "adk_mesh.v1.AgentService/Run",
    ), tree
    # ... called from the coordinator's AgentTool, which returns to the caller.
    (agent_tool,) = _by_name(trace, "coordinator", "execute_tool researcher")
    assert agent_tool.attribute("adk_mesh.control_flow") == "return_to_caller", tree
    chain = parent(ancestor)
    while chain is not agent_tool and chain.parent_span_id in by_id:
        chain = parent(chain)
    assert chain is agent_tool, tree
    return root


async def test_one_invocation_is_one_trace_across_three_services(mesh: TracedMesh) -> None:
    invocation_id = await run_once(mesh.coordinator)
    await mesh.stop()
    root = assert_one_connected_trace(mesh.receiver.spans, invocation_id)
    assert root.parent_span_id == ""


async def test_a_callers_traceparent_is_continued(mesh: TracedMesh) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent_span_id = "00f067aa0ba902b7"
    traceparent = f"00-{trace_id}-{parent_span_id}-01"
    invocation_id = await run_once(mesh.coordinator, (("traceparent", traceparent),))
    await mesh.stop()
    root = assert_one_connected_trace(mesh.receiver.spans, invocation_id)
    assert root.trace_id == trace_id
    assert root.parent_span_id == parent_span_id
    assert {s.trace_id for s in mesh.receiver.spans} == {trace_id}
