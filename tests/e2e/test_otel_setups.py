"""adk-mesh in the OpenTelemetry setups operators use, checked at a real OTLP backend.

The test is the backend: an OTLP/gRPC receiver on 127.0.0.1 serving the trace, metrics and logs
services, which keeps every resource, scope and span it is sent. Each process under test is a
real OS process that exports to it:

* ``opentelemetry-instrument adk-mesh serve agent|tools``: the SDK pipeline the distro installs
  (adk-mesh joins it), the contrib gRPC and httpx instrumentations next to adk-mesh's own; and a
  served agent called with a mesh caller's baggage, whose model calls must not pass it on;
* a script running one invocation in process after ``configure_telemetry`` and exiting without
  shutting it down;
* ``OTEL_TRACES_EXPORTER=console`` and ``OTEL_TRACES_EXPORTER=none``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from adk_mesh import codec
from adk_mesh.testing.fake_providers import (
    FakeGemini,
    RecordedRequest,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.e2e.conftest import REPO_ROOT, Service, service_env

pytestmark = pytest.mark.e2e

INVOCATION_ID = "adk_mesh.invocation_id"
SERVER = trace_pb2.Span.SPAN_KIND_SERVER
CLIENT = trace_pb2.Span.SPAN_KIND_CLIENT
WAIT_SECONDS = 20.0
ADK_MESH_SCOPE = "adk_mesh"
GRPC_SCOPE = "opentelemetry.instrumentation.grpc"
HTTPX_SCOPE = "opentelemetry.instrumentation.httpx"
INSTRUMENT = str(Path(sys.executable).parent / "opentelemetry-instrument")
RUN = "adk_mesh.v1.AgentService/Run"
LIST_TOOLS = "adk_mesh.v1.ToolService/ListTools"
CALL_TOOL = "adk_mesh.v1.ToolService/CallToolInteractive"
ANSWER = "21 °C and sunny in Porto"


# --- the backend ----------------------------------------------------------------------------


def _value(value: common_pb2.AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value") or "string_value")


def _attributes(items: Iterable[common_pb2.KeyValue]) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


@dataclass(frozen=True)
class Resource:
    """A resource an export request named, with the signal it came with."""

    signal: str
    attributes: dict[str, Any]

    @property
    def service(self) -> str:
        return str(self.attributes.get("service.name", ""))

    @property
    def pid(self) -> int | None:
        pid = self.attributes.get("process.pid")
        return int(pid) if pid is not None else None


@dataclass(frozen=True)
class Received:
    """One span as the backend received it: with its resource and instrumentation scope."""

    resource: Resource
    scope: str
    span: trace_pb2.Span

    @property
    def service(self) -> str:
        return self.resource.service

    @property
    def name(self) -> str:
        # The contrib gRPC instrumentation names its spans after the full method, "/pkg.S/M".
        return self.span.name.lstrip("/")

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
        return _attributes(self.span.attributes).get(key)


@dataclass(frozen=True)
class LogRecord:
    resource: Resource
    record: logs_pb2.LogRecord

    @property
    def service(self) -> str:
        return self.resource.service

    @property
    def body(self) -> Any:
        return _value(self.record.body)

    def attribute(self, key: str) -> Any:
        return _attributes(self.record.attributes).get(key)


@dataclass
class Backend:
    """What the receiver was sent: every resource (of every signal), span and log record."""

    endpoint: str = ""
    spans: list[Received] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    resources: list[Resource] = field(default_factory=list)

    def keep(self, signal: str, resource: resource_pb2.Resource) -> Resource:
        kept = Resource(signal, _attributes(resource.attributes))
        self.resources.append(kept)
        return kept

    def of(self, service: str) -> list[Received]:
        return [span for span in self.spans if span.service == service]


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        for resource_spans in request.resource_spans:
            resource = self.backend.keep("traces", resource_spans.resource)
            for scope_spans in resource_spans.scope_spans:
                self.backend.spans.extend(
                    Received(resource, scope_spans.scope.name, span) for span in scope_spans.spans
                )
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def Export(
        self,
        request: metrics_service_pb2.ExportMetricsServiceRequest,
        context: grpc.aio.ServicerContext,
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        for resource_metrics in request.resource_metrics:
            self.backend.keep("metrics", resource_metrics.resource)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):  # type: ignore[misc]
    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def Export(
        self,
        request: logs_service_pb2.ExportLogsServiceRequest,
        context: grpc.aio.ServicerContext,
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        for resource_logs in request.resource_logs:
            resource = self.backend.keep("logs", resource_logs.resource)
            for scope_logs in resource_logs.scope_logs:
                self.backend.logs.extend(
                    LogRecord(resource, record) for record in scope_logs.log_records
                )
        return logs_service_pb2.ExportLogsServiceResponse()


@pytest.fixture
async def backend() -> AsyncIterator[Backend]:
    kept = Backend()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(kept), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(kept), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(kept), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    kept.endpoint = f"http://127.0.0.1:{port}"
    try:
        yield kept
    finally:
        await server.stop(None)


# --- processes ------------------------------------------------------------------------------


def otel_env(directory: Path, **settings: str) -> dict[str, str]:
    """This environment without any OpenTelemetry or adk-mesh tracing setting, plus
    ``settings`` (``OTEL_*`` names, or ``ADK_E2E_*`` targets in lower case)."""
    env = service_env(directory)
    for key in list(env):
        if key.startswith("OTEL_") or key in ("ADK_MESH_TRACE_DIR", "ADK_MESH_CAPTURE_CONTENT"):
            del env[key]
    for key, value in settings.items():
        env[key if key.isupper() else f"ADK_E2E_{key.upper()}"] = value
    return env


def start_service(
    directory: Path, name: str, args: list[str], env: dict[str, str], *, instrumented: bool
) -> Service:
    launcher = [INSTRUMENT] if instrumented else []
    return Service(name, args, env, directory / f"{name}.log", launcher=launcher)


async def stop(*services: Service) -> None:
    """SIGTERM each service and wait until it exited cleanly (after flushing its telemetry)."""
    for service in services:
        if service.process.poll() is None:
            service.process.terminate()
    for service in services:
        code = await asyncio.to_thread(service.process.wait, WAIT_SECONDS)
        assert code == 0, f"{service.name} exited with {code}: {service.stderr()}"


@dataclass(frozen=True)
class Finished:
    stdout: str
    stderr: str


async def run_script(module: str, env: dict[str, str]) -> Finished:
    """Run ``python -m module`` to its end (off the event loop: the receiver must answer it)."""

    def run() -> Finished:
        process = subprocess.Popen(
            [sys.executable, "-m", module],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            raise AssertionError(f"{module} did not finish: {stderr}") from None
        assert process.returncode == 0, f"{module} exited with {process.returncode}: {stderr}"
        return Finished(stdout, stderr)

    return await asyncio.to_thread(run)


async def run_once(
    target: str, text: str = "Porto?", metadata: tuple[tuple[str, str], ...] = ()
) -> tuple[str, str]:
    """One root Run; returns the invocation id and the final answer."""
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        events = [
            codec.event_from_proto(response.event)
            async for response in stub.Run(request, metadata=metadata, timeout=WAIT_SECONDS)
        ]
    invocation_ids = {event.invocation_id for event in events}
    assert len(invocation_ids) == 1, invocation_ids
    return invocation_ids.pop(), events[-1].text


def _tree(spans: list[Received]) -> str:
    ordered = sorted(spans, key=lambda s: s.span.start_time_unix_nano)
    return "\n".join(
        f"{s.service:12} {s.scope:36} {s.name:40} {s.span.kind} {s.trace_id[:8]} "
        f"{s.span_id} <- {s.parent_span_id or '-'} {s.attribute(INVOCATION_ID)}"
        for s in ordered
    )


# --- (a) opentelemetry-instrument adk-mesh serve ------------------------------------------------


def _gemini_answer(request: RecordedRequest) -> ScriptedTurn:
    """Call ``lookup`` first; answer once its result is in the conversation."""
    answered = any(
        "functionResponse" in part
        for content in request.json().get("contents", [])
        for part in content.get("parts", [])
    )
    if answered:
        return ScriptedTurn(text=ANSWER)
    return ScriptedTurn(tool_calls=[ScriptedToolCall("lookup", {"city": "Porto"})])


async def test_opentelemetry_instrument_serve_is_one_pipeline_and_one_trace(
    backend: Backend, tmp_path: Path
) -> None:
    settings = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": backend.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        # process.pid on every resource: which process sent what.
        "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "process",
    }
    async with FakeGemini(handler=_gemini_answer) as gemini:
        tools = start_service(
            tmp_path,
            "tools",
            ["tools", "tests.e2e.apps.tools:tools"],
            otel_env(tmp_path, OTEL_SERVICE_NAME="otel-tools", **settings),
            instrumented=True,
        )
        agent: Service | None = None
        try:
            tools_target = await asyncio.to_thread(tools.wait_ready)
            agent = start_service(
                tmp_path,
                "agent",
                ["agent", "tests.e2e.tracing_apps.forecaster:build"],
                otel_env(
                    tmp_path,
                    OTEL_SERVICE_NAME="otel-agent",
                    tools=tools_target,
                    gemini=gemini.url,
                    **settings,
                ),
                instrumented=True,
            )
            target = await asyncio.to_thread(agent.wait_ready)
            invocation_id, answer = await run_once(target)
            assert answer == ANSWER
            await stop(agent, tools)
        finally:
            for service in (agent, tools):
                if service is not None:
                    await asyncio.to_thread(service.stop)
        model_calls = len(gemini.requests)
    assert model_calls == 2, gemini.requests
    # The model calls continue the trace at the provider; the invocation's ids (user, session)
    # do not go along as baggage.
    for request in gemini.requests:
        assert "traceparent" in request.headers, request.headers
        assert "baggage" not in request.headers, request.headers
    assert agent is not None
    processes = {agent.process.pid: "otel-agent", tools.process.pid: "otel-tools"}
    spans = backend.spans
    tree = _tree(spans)

    # One pipeline per process: every resource a process sent (spans, metrics, logs) names
    # the service it was told to be.
    assert spans, "no spans arrived"
    for resource in backend.resources:
        assert not resource.service.startswith("unknown_service"), resource
        assert resource.pid in processes, resource
        assert resource.service == processes[resource.pid], resource
    for pid, service in processes.items():
        traced = {r.service for r in backend.resources if r.signal == "traces" and r.pid == pid}
        assert traced == {service}, tree
    assert {r.signal for r in backend.resources} >= {"traces", "metrics"}, backend.resources
    # Under opentelemetry-instrument, Python's warnings are log records sent here: a second
    # pipeline (the SDK's "Overriding of current TracerProvider is not allowed") or a nameless
    # one (adk-mesh's "set OTEL_SERVICE_NAME") would say so.
    warnings = [(r.service, r.body) for r in backend.logs if r.record.severity_number >= 13]
    assert not warnings, warnings

    # Every span once.
    assert len({(s.trace_id, s.span_id) for s in spans}) == len(spans), tree

    # One trace per invocation: the only thing that ran is the invocation, so every span the
    # two processes sent is in its trace and carries its id, whoever made the span.
    assert {s.trace_id for s in spans} == {spans[0].trace_id}, tree
    for span in spans:
        assert span.attribute(INVOCATION_ID) == invocation_id, f"{span.name}\n{tree}"
    by_id = {s.span_id: s for s in spans}
    roots = [s for s in spans if s.parent_span_id not in by_id]
    assert [(r.service, r.name, r.span.kind, r.parent_span_id) for r in roots] == [
        ("otel-agent", RUN, SERVER, "")
    ], tree

    # The three instrumentations made spans: adk-mesh's, and the contrib gRPC ones in both
    # services and httpx ones (one per model call) in the agent's.
    scopes = Counter((s.service, s.scope) for s in spans)
    assert scopes[("otel-agent", ADK_MESH_SCOPE)] > 0, tree
    assert scopes[("otel-tools", ADK_MESH_SCOPE)] > 0, tree
    assert scopes[("otel-agent", GRPC_SCOPE)] > 0, tree
    assert scopes[("otel-tools", GRPC_SCOPE)] > 0, tree
    assert scopes[("otel-agent", HTTPX_SCOPE)] == model_calls, tree
    assert set(scopes) <= {
        (service, scope)
        for service in processes.values()
        for scope in (ADK_MESH_SCOPE, GRPC_SCOPE, HTTPX_SCOPE)
    }, tree

    # adk-mesh's own spans: the invocation's tree in the agent, the tool in the tool service.
    names = Counter((s.service, s.name) for s in spans if s.scope == ADK_MESH_SCOPE)
    assert names[("otel-agent", "invoke_agent forecaster")] == 1, tree
    assert names[("otel-agent", "chat gemini-2.5-flash")] == model_calls, tree
    assert names[("otel-tools", "execute_tool lookup")] == 1, tree
    assert names[("otel-agent", "invoke_workflow forecaster")] == 1, tree
    # Each HTTP request is a child of the model call's span.
    for request in (s for s in spans if s.scope == HTTPX_SCOPE):
        assert by_id[request.parent_span_id].name.startswith("chat "), tree

    # No RPC traced twice: every RPC span is the contrib instrumentation's (adk-mesh's stand
    # aside); one SERVER span per call in the callee, one CLIENT span per call in the caller,
    # each server span the child of its own client span, no RPC span inside another of its kind.
    rpcs = [s for s in spans if s.name in (RUN, LIST_TOOLS, CALL_TOOL)]
    assert {s.scope for s in rpcs} == {GRPC_SCOPE}, tree
    kinds = Counter((s.service, s.name, s.span.kind) for s in rpcs)
    list_calls = kinds[("otel-agent", LIST_TOOLS, CLIENT)]
    assert list_calls >= 1, tree
    assert kinds == {
        ("otel-agent", RUN, SERVER): 1,
        ("otel-agent", LIST_TOOLS, CLIENT): list_calls,
        ("otel-tools", LIST_TOOLS, SERVER): list_calls,
        ("otel-agent", CALL_TOOL, CLIENT): 1,
        ("otel-tools", CALL_TOOL, SERVER): 1,
    }, tree
    clients = sorted(s.span_id for s in rpcs if s.span.kind == CLIENT)
    servers = [s for s in rpcs if s.span.kind == SERVER and s.name != RUN]
    assert sorted(s.parent_span_id for s in servers) == clients, tree
    for server in servers:
        assert by_id[server.parent_span_id].name == server.name, tree
    for rpc in rpcs:
        parent = by_id.get(rpc.parent_span_id)
        assert parent is None or (parent.name, parent.span.kind) != (rpc.name, rpc.span.kind)


@pytest.mark.parametrize(
    "disabled",
    [
        pytest.param("", id="contrib-grpc-spans"),
        # adk-mesh's own RPC spans next to the contrib httpx instrumentation.
        pytest.param("grpc_aio_server,grpc_aio_client,grpc_server,grpc_client", id="own-rpc-spans"),
    ],
)
async def test_a_callees_model_calls_carry_no_mesh_baggage_under_opentelemetry_instrument(
    backend: Backend, tmp_path: Path, disabled: str
) -> None:
    """A served agent called by another mesh service (traceparent and the caller's ids as
    baggage): its spans carry the caller's ids, its model provider's HTTP calls do not."""
    async with FakeGemini(ScriptedTurn(text=ANSWER)) as gemini:
        agent = start_service(
            tmp_path,
            "agent",
            ["agent", "tests.e2e.tracing_apps.forecaster:build"],
            otel_env(
                tmp_path,
                OTEL_SERVICE_NAME="otel-callee",
                OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=disabled,
                OTEL_EXPORTER_OTLP_ENDPOINT=backend.endpoint,
                OTEL_METRICS_EXPORTER="none",
                OTEL_LOGS_EXPORTER="none",
                OTEL_BSP_SCHEDULE_DELAY="50",
                gemini=gemini.url,
            ),
            instrumented=True,
        )
        try:
            target = await asyncio.to_thread(agent.wait_ready)
            trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
            metadata = (
                ("traceparent", f"00-{trace_id}-00f067aa0ba902b7-01"),
                (
                    "baggage",
                    "adk_mesh.invocation_id=e-caller,adk_mesh.user_id=u1,"
                    "adk_mesh.session_id=s-caller,tenant=acme",
                ),
            )
            _, answer = await run_once(target, metadata=metadata)
            assert answer == ANSWER
            await stop(agent)
        finally:
            await asyncio.to_thread(agent.stop)
    (request,) = gemini.requests
    assert request.headers["traceparent"].split("-")[1] == trace_id, request.headers
    # The application's own baggage goes on; the caller's invocation ids stay in the mesh.
    assert request.headers.get("baggage") == "tenant=acme", request.headers
    spans = backend.spans
    tree = _tree(spans)
    assert {s.trace_id for s in spans} == {trace_id}, tree
    (server,) = [s for s in spans if s.name == RUN]
    assert server.scope == (ADK_MESH_SCOPE if disabled else GRPC_SCOPE), tree
    assert server.attribute(INVOCATION_ID) == "e-caller", tree
    assert server.attribute("adk_mesh.user_id") == "u1", tree
    (http,) = [s for s in spans if s.scope == HTTPX_SCOPE]
    assert http.attribute(INVOCATION_ID) not in (None, "e-caller"), tree


# --- (c) in process, exiting without shutdown ---------------------------------------------------

# The spans of tests.e2e.tracing_apps.in_process's invocation.
IN_PROCESS_SPANS = {
    "invoke_workflow weather-app": 1,
    "invoke_agent weather": 1,
    "chat scripted": 2,
    "execute_tool lookup": 1,
}


async def test_spans_still_buffered_at_exit_are_exported(backend: Backend, tmp_path: Path) -> None:
    finished = await run_script(
        "tests.e2e.tracing_apps.in_process",
        otel_env(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=backend.endpoint,
            OTEL_SERVICE_NAME="in-process",
            # Nothing is exported on a schedule during the run: only the exit handler can.
            OTEL_BSP_SCHEDULE_DELAY="60000",
            OTEL_METRIC_EXPORT_INTERVAL="60000",
        ),
    )
    invocation_id = finished.stdout.strip()
    spans = backend.spans
    tree = _tree(spans)
    assert Counter(s.name for s in spans) == IN_PROCESS_SPANS, tree
    assert {s.service for s in spans} == {"in-process"}, tree
    assert {s.trace_id for s in spans} == {spans[0].trace_id}, tree
    assert {s.attribute(INVOCATION_ID) for s in spans} == {invocation_id}, tree
    assert {r.service for r in backend.resources} == {"in-process"}


# --- (d) OTEL_TRACES_EXPORTER=console and =none -------------------------------------------------


def _json_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects printed one after another in ``text`` (other lines skipped)."""
    decoder = json.JSONDecoder()
    objects: list[dict[str, Any]] = []
    position = text.find("{")
    while position >= 0:
        try:
            value, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            end = position + 1
        else:
            objects.append(value)
        position = text.find("{", end)
    return objects


async def test_console_exporter_prints_the_spans_of_a_served_agent(tmp_path: Path) -> None:
    service = start_service(
        tmp_path,
        "researcher",
        ["agent", "tests.e2e.apps.researcher:root_agent"],
        otel_env(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="50"),
        instrumented=False,
    )
    try:
        target = await asyncio.to_thread(service.wait_ready)
        assert service.process.stdout is not None
        # Read to the end while it runs (it must never block on a full pipe).
        rest = asyncio.ensure_future(asyncio.to_thread(service.process.stdout.read))
        invocation_id, answer = await run_once(target)
        assert answer == "sunny in Porto"
        await stop(service)
        printed = (await asyncio.wait_for(rest, WAIT_SECONDS)).decode()
    finally:
        await asyncio.to_thread(service.stop)
    spans = [item for item in _json_objects(printed) if "context" in item and "name" in item]
    names = Counter(span["name"] for span in spans)
    assert names["invoke_agent researcher"] == 1, printed
    assert names[RUN] == 1, printed
    assert names["chat researcher-model"] == 1, printed
    for span in spans:
        assert span["attributes"][INVOCATION_ID] == invocation_id, span
        assert span["resource"]["attributes"]["service.name"] == "researcher", span
    assert len({span["context"]["trace_id"] for span in spans}) == 1, printed


async def test_traces_exporter_none_exports_no_span(backend: Backend, tmp_path: Path) -> None:
    common = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": backend.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        # The tool logs a warning: its record shows that the process reached the backend.
        "OTEL_LOGS_EXPORTER": "otlp",
    }
    silent, control = await asyncio.gather(
        run_script(
            "tests.e2e.tracing_apps.in_process",
            otel_env(tmp_path, OTEL_SERVICE_NAME="silent", OTEL_TRACES_EXPORTER="none", **common),
        ),
        run_script(
            "tests.e2e.tracing_apps.in_process",
            otel_env(tmp_path, OTEL_SERVICE_NAME="control", **common),
        ),
    )
    # Both processes exited: everything they were going to export has arrived.
    control_id = control.stdout.strip()
    assert silent.stdout.strip() and control_id
    tree = _tree(backend.spans)
    assert {s.service for s in backend.spans} == {"control"}, tree
    assert Counter(s.name for s in backend.spans) == IN_PROCESS_SPANS, tree
    assert {s.attribute(INVOCATION_ID) for s in backend.spans} == {control_id}, tree
    assert ("traces", "silent") not in {(r.signal, r.service) for r in backend.resources}
    # Both sent their log record, each with its invocation id; the silent one's span was
    # started (it still drives the metrics and the ids) but never sampled, so never exported.
    logs = {record.service: record for record in backend.logs}
    assert set(logs) == {"silent", "control"}, backend.logs
    assert logs["silent"].body == logs["control"].body == "looking up Porto"
    assert logs["control"].attribute(INVOCATION_ID) == control_id
    assert logs["silent"].attribute(INVOCATION_ID) == silent.stdout.strip()
    assert logs["control"].record.span_id.hex() in {
        s.span_id for s in backend.spans if s.name == "execute_tool lookup"
    }
    assert not logs["silent"].record.flags & 0x01  # not sampled
