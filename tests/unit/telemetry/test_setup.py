"""configure_telemetry: the OpenTelemetry SDK from the standard variables, or the application's
own pipeline joined; the invocation processors; the OTLP JSON lines file exporter."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry import _logs, context, trace
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import ConfigError
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry import (
    TRACE_DIR_ENV,
    InvocationLogFormatter,
    OtlpJsonFileSpanExporter,
    _metrics,
    _providers,
    _setup,
    configure_telemetry,
    read_trace_files,
)
from adk_mesh.telemetry._propagation import with_invocation
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Part
from tests.http_servers import QuietHandler, serve_http

# --- isolation ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets configures telemetry (the shared fixture resets the globals)."""
    for key in list(os.environ):
        if key.startswith("OTEL_") or key == TRACE_DIR_ENV:
            monkeypatch.delenv(key)
    # A short batch delay: a test that waits for an export does not wait five seconds.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def _emit_one_span(name: str = "work") -> None:
    tracer = _providers.get_tracer()
    assert tracer is not None
    tracer.start_span(name).end()


INVOCATION_IDS = {
    "adk_mesh.invocation_id": "e-42",
    "adk_mesh.app_name": "travel",
    "adk_mesh.user_id": "alice",
    "adk_mesh.session_id": "s-1",
    "gen_ai.conversation.id": "s-1",
}


# --- real receivers ---------------------------------------------------------------------------


@dataclass
class Received:
    """What a receiver got: each request's headers, the trace requests, the metric names and the
    log records."""

    headers: list[dict[str, str]] = field(default_factory=list)
    requests: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    metric_names: set[str] = field(default_factory=set)
    logs: list[Any] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)

    def add(self, headers: dict[str, str], request: Any) -> None:
        self.headers.append(headers)
        self.requests.append(request)
        self.arrived.set()

    def span_names(self) -> dict[str, list[str]]:
        names: dict[str, list[str]] = {}
        for request in self.requests:
            for resource_spans in request.resource_spans:
                attributes = {
                    item.key: item.value.string_value for item in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    names.setdefault(attributes["service.name"], []).extend(
                        span.name for span in scope_spans.spans
                    )
        return names


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.received.add(dict(context.invocation_metadata()), request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                self.received.metric_names.update(m.name for m in scope_metrics.metrics)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _LogsService(logs_service_pb2_grpc.LogsServiceServicer):  # type: ignore[misc]
    def __init__(self, received: Received) -> None:
        self.received = received

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                self.received.logs.extend(scope_logs.log_records)
        return logs_service_pb2.ExportLogsServiceResponse()


@pytest.fixture
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC receiver of traces, metrics and logs on 127.0.0.1 (threads: the SDK exports
    from its own threads)."""
    received = Received()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(received), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsService(received), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_LogsService(received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(None).wait()


@pytest.fixture
def http_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP (protobuf) receiver on 127.0.0.1: ``POST /v1/traces``."""
    received = Received()

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            headers = {key.lower(): value for key, value in self.headers.items()}
            headers[":path"] = self.path
            received.add(headers, request)
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.reply(answer, "application/x-protobuf")

    with serve_http(Handler) as url:
        yield url, received


# --- what gets installed --------------------------------------------------------------------


def test_nothing_configured_installs_nothing_and_tracing_stays_off() -> None:
    handle = configure_telemetry("coordinator")
    assert (handle.service_name, handle.pipeline, handle.enabled) == ("coordinator", "off", False)
    assert (handle.span_exporters, handle.metrics_exported, handle.logs_exported) == (
        (),
        False,
        False,
    )
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert _providers.get_tracer() is None
    assert _providers.get_meter() is None
    assert handle.force_flush()


def test_sdk_disabled_wins_over_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    handle = configure_telemetry("coordinator")
    assert (handle.pipeline, handle.enabled) == ("disabled", False)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_the_sdk_becomes_the_global_pipeline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    handle = configure_telemetry("coordinator")
    # One pipeline: other libraries' instrumentation (httpx, grpc, ...) exports through it too.
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    assert handle._tracer_provider is provider
    assert (handle.pipeline, handle.enabled, handle.span_exporters) == (
        "adk-mesh",
        True,
        ("otlp_json_file",),
    )
    assert provider.resource.attributes["telemetry.sdk.name"] == "opentelemetry"


def test_service_name_is_the_argument_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    handle = configure_telemetry("weather_tools")
    assert handle.service_name == "weather_tools"
    resource = handle._tracer_provider.resource
    assert resource.attributes["service.name"] == "weather_tools"
    assert resource.attributes["deployment.environment"] == "test"


def test_resource_attributes_name_the_service_over_the_argument(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,team=agents")
    handle = configure_telemetry("coordinator")
    assert handle.service_name == "from-attributes"
    assert handle._tracer_provider.resource.attributes["team"] == "agents"


def test_otel_service_name_wins_over_everything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    handle = configure_telemetry("coordinator")
    assert handle.service_name == "from-env"
    _emit_one_span()
    handle.shutdown()
    assert (tmp_path / "from-env.jsonl").is_file()


def test_no_name_at_all_is_adk_mesh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    assert configure_telemetry().service_name == "adk-mesh"


# --- exporters, by the SDK's own configuration ----------------------------------------------


@pytest.mark.parametrize("endpoint_variable", ["ENDPOINT", "TRACES_ENDPOINT"])
def test_an_endpoint_alone_means_otlp_over_grpc_with_the_headers(
    monkeypatch: pytest.MonkeyPatch,
    grpc_receiver: tuple[str, Received],
    endpoint_variable: str,
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv(f"OTEL_EXPORTER_OTLP_{endpoint_variable}", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret,x-team=a%20b")
    handle = configure_telemetry("coordinator")
    assert (handle.span_exporters, handle.enabled) == (("otlp_proto_grpc",), True)
    _emit_one_span()
    assert handle.force_flush(10_000)
    assert received.span_names() == {"coordinator": ["work"]}
    assert received.headers[0]["x-api-key"] == "s3cret"
    assert received.headers[0]["x-team"] == "a b"


def test_http_protobuf_posts_to_v1_traces_with_the_headers(
    monkeypatch: pytest.MonkeyPatch, http_receiver: tuple[str, Received]
) -> None:
    endpoint, received = http_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint + "/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20t0ken")
    handle = configure_telemetry("coordinator")
    assert handle.span_exporters == ("otlp_proto_http",)
    _emit_one_span()
    assert handle.force_flush(10_000)
    assert received.span_names() == {"coordinator": ["work"]}
    assert received.headers[0][":path"] == "/v1/traces"
    assert received.headers[0]["authorization"] == "Bearer t0ken"
    assert received.headers[0]["content-type"] == "application/x-protobuf"


def test_an_explicit_otlp_exporter_is_configured_once(
    monkeypatch: pytest.MonkeyPatch, grpc_receiver: tuple[str, Received]
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    handle = configure_telemetry("coordinator")
    assert handle.span_exporters == ("otlp",)
    _emit_one_span()
    assert handle.force_flush(10_000)
    assert received.span_names() == {"coordinator": ["work"]}  # not twice


CONSOLE_SCRIPT = """
from adk_mesh.telemetry import _providers, configure_telemetry
handle = configure_telemetry("coordinator")
assert handle.span_exporters == ("console",), handle
_providers.get_tracer().start_span("printed-span").end()
handle.shutdown()
"""


def test_console_exporter_prints_the_spans() -> None:
    # A process of its own: the SDK's console exporter holds the stdout of its import time.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = "console"
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    printed = json.loads(done.stdout)
    assert printed["name"] == "printed-span"
    assert printed["resource"]["attributes"]["service.name"] == "coordinator"


async def test_none_exports_no_spans_but_the_metrics_still_count(
    monkeypatch: pytest.MonkeyPatch, grpc_receiver: tuple[str, Received]
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    handle = configure_telemetry("desk")
    assert (handle.span_exporters, handle.metrics_exported) == ((), True)
    tracer = _providers.get_tracer()
    assert tracer is not None and not tracer.start_span("unsampled").is_recording()
    await run_one_invocation()
    handle.shutdown()
    assert received.requests == []
    assert {
        "adk_mesh.agent.invocation.duration",
        "adk_mesh.tool.duration",
        "gen_ai.client.operation.duration",
    } <= received.metric_names


def test_none_everywhere_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    for variable in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER"):
        monkeypatch.setenv(variable, "none")
    handle = configure_telemetry("desk")
    assert handle.pipeline == "off"
    assert _providers.get_tracer() is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_an_unknown_exporter_is_a_config_error_and_installs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin_typo")
    with pytest.raises(ConfigError, match="zipkin_typo"):
        configure_telemetry("coordinator")
    assert _setup._handle is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_an_unsupported_protocol_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/xml")
    with pytest.raises(ConfigError, match="http/xml"):
        configure_telemetry("coordinator")
    assert _setup._handle is None
    assert _providers.get_tracer() is None


def test_sampler_follows_the_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    sampler = configure_telemetry("coordinator")._tracer_provider.sampler
    assert isinstance(sampler, TraceIdRatioBased)
    assert sampler.rate == 0.25


def test_default_sampler_honours_the_callers_decision(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    sampler = configure_telemetry("coordinator")._tracer_provider.sampler
    assert isinstance(sampler, ParentBased)


def test_always_off_sampler_records_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    handle = configure_telemetry("coordinator")
    _emit_one_span()
    handle.shutdown()
    assert read_trace_files(tmp_path) == []


def test_metrics_go_to_the_endpoint_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, grpc_receiver: tuple[str, Received]
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
    # A traces endpoint alone says nothing about metrics: no instrument records.
    handle = configure_telemetry("coordinator")
    assert not handle.metrics_exported
    assert _providers.get_meter() is None
    handle.shutdown()

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    from tests.telemetry_fixtures import reset_global_providers

    reset_global_providers()
    handle = configure_telemetry("coordinator")
    assert handle.metrics_exported
    _metrics.record_agent_duration(0.25, "coordinator", None)
    _metrics.record_error("execute_tool", "ToolError")
    handle.shutdown()  # a last collection and export
    assert {"adk_mesh.agent.invocation.duration", "adk_mesh.errors"} <= received.metric_names


# --- lifecycle ------------------------------------------------------------------------------


def test_configure_is_idempotent_and_shutdown_turns_the_instrumentation_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    first = configure_telemetry("coordinator")
    assert configure_telemetry("other") is first
    assert _providers.get_tracer() is not None
    first.shutdown()
    first.shutdown()  # idempotent too
    assert not first.enabled
    assert _providers.get_tracer() is None


def test_shutdown_flushes_the_batched_spans(
    monkeypatch: pytest.MonkeyPatch, grpc_receiver: tuple[str, Received]
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    # The batch would wait a minute: only the shutdown can have sent it.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    handle = configure_telemetry("researcher")
    for name in ("first", "second"):
        _emit_one_span(name)
    assert not received.arrived.is_set()
    handle.shutdown()
    assert received.span_names() == {"researcher": ["first", "second"]}


# --- the application's own pipeline ----------------------------------------------------------


class Seen(SpanProcessor):
    """An application's span processor: what it saw start and end."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended: list[ReadableSpan] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started.append(span.name)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


def lookup_booking(reference: str) -> dict[str, str]:
    """A tool that queries a database, traced by the database driver's instrumentation."""
    with trace.get_tracer("app.db-driver").start_as_current_span("SELECT bookings"):
        return {"reference": reference, "status": "confirmed"}


async def run_one_invocation() -> str:
    agent = LlmAgent(
        name="desk",
        model=ScriptedModel([call("lookup_booking", {"reference": "B-7"}), "Confirmed."]),
        tools=[lookup_booking],
    )
    sessions = InMemorySessionService()
    await sessions.create_session(app_name="travel", user_id="alice", session_id="s-1")
    runner = Runner(agent=agent, app_name="travel", session_service=sessions)
    message = Content(role="user", parts=[Part(text="my booking?")])
    events = [e async for e in runner.run(user_id="alice", session_id="s-1", new_message=message)]
    return events[0].invocation_id


async def test_an_application_pipeline_is_joined_not_doubled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Set even though the application has its own pipeline: no second one may appear.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    exporter = InMemorySpanExporter()
    seen = Seen()
    application = TracerProvider(
        resource=Resource({"service.name": "booking-app"}), shutdown_on_exit=False
    )
    application.add_span_processor(seen)
    application.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(application)

    handle = configure_telemetry("desk")
    assert (handle.pipeline, handle.service_name, handle.enabled) == (
        "application",
        "booking-app",
        True,
    )
    assert trace.get_tracer_provider() is application
    invocation_id = await run_one_invocation()

    names = [span.name for span in seen.ended]
    for expected in ("invoke_workflow travel", "invoke_agent desk", "chat scripted"):
        assert expected in names
    assert names.count("execute_tool lookup_booking") == 1
    assert sorted(names) == sorted(seen.started)
    assert sorted(span.name for span in exporter.get_finished_spans()) == sorted(names)
    # Every span of the invocation carries its id — the database driver's span included.
    for span in seen.ended:
        assert span.attributes is not None
        assert span.attributes["adk_mesh.invocation_id"] == invocation_id, span.name
        assert span.attributes["adk_mesh.user_id"] == "alice", span.name
    (query,) = [span for span in seen.ended if span.name == "SELECT bookings"]
    assert query.instrumentation_scope is not None
    assert query.instrumentation_scope.name == "app.db-driver"

    # The application owns its pipeline: adk-mesh's shutdown flushes it and leaves it running.
    handle.shutdown()
    trace.get_tracer("app").start_span("after").end()
    assert exporter.get_finished_spans()[-1].name == "after"
    # Joining again (a new handle) does not stamp twice or add a second processor.
    assert configure_telemetry("desk").pipeline == "application"
    assert len(application._active_span_processor._span_processors) == 3


def test_joining_an_unnamed_pipeline_says_how_to_name_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trace.set_tracer_provider(TracerProvider(shutdown_on_exit=False))
    with caplog.at_level(logging.WARNING, logger="adk_mesh.telemetry._setup"):
        handle = configure_telemetry("desk")
    assert handle.service_name.startswith("unknown_service")
    assert "OTEL_SERVICE_NAME" in caplog.text


def test_the_trace_dir_joins_an_application_pipeline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    trace.set_tracer_provider(
        TracerProvider(resource=Resource({"service.name": "app"}), shutdown_on_exit=False)
    )
    assert configure_telemetry("desk").span_exporters == ("otlp_json_file",)
    _emit_one_span("filed")
    assert [record.name for record in read_trace_files(tmp_path)] == ["filed"]


# --- spans of other instrumentation, and logs --------------------------------------------------


def test_a_span_outside_any_invocation_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    handle = configure_telemetry("desk")
    tracer = trace.get_tracer("other.library")
    tracer.start_span("outside").end()
    token = context.attach(with_invocation(INVOCATION_IDS, context.get_current()))
    try:
        with tracer.start_as_current_span("inside", attributes={"adk_mesh.user_id": "kept"}):
            pass
    finally:
        context.detach(token)
    handle.shutdown()
    records = {record.name: record for record in read_trace_files(tmp_path)}
    assert "adk_mesh.invocation_id" not in records["outside"].attributes
    inside = records["inside"].attributes
    assert inside["adk_mesh.invocation_id"] == "e-42"
    assert inside["adk_mesh.session_id"] == "s-1"
    assert inside["adk_mesh.user_id"] == "kept"  # what a span already has stays


def test_logs_are_exported_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, grpc_receiver: tuple[str, Received]
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    handle = configure_telemetry("desk")
    assert not handle.logs_exported
    logging.getLogger("desk.app").warning("not exported")
    handle.shutdown()
    assert received.logs == []


def test_a_log_line_inside_an_invocation_carries_its_trace_and_invocation(
    monkeypatch: pytest.MonkeyPatch, grpc_receiver: tuple[str, Received]
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    monkeypatch.setenv("OTEL_LOGS_EXPORTER", "otlp")
    handle = configure_telemetry("desk")
    assert handle.logs_exported
    assert isinstance(_logs.get_logger_provider(), _logs.LoggerProvider)
    log = logging.getLogger("desk.app")
    log.warning("outside")
    tracer = _providers.get_tracer()
    assert tracer is not None
    with tracer.start_as_current_span("invoke_agent desk") as span:
        token = context.attach(with_invocation(INVOCATION_IDS, context.get_current()))
        try:
            log.warning("looking up %s", "B-7")
        finally:
            context.detach(token)
    handle.shutdown()
    by_body = {record.body.string_value: record for record in received.logs}
    assert set(by_body) >= {"outside", "looking up B-7"}
    inside = by_body["looking up B-7"]
    assert inside.trace_id == span.get_span_context().trace_id.to_bytes(16, "big")
    assert inside.span_id == span.get_span_context().span_id.to_bytes(8, "big")
    attributes = {item.key: item.value.string_value for item in inside.attributes}
    assert attributes["adk_mesh.invocation_id"] == "e-42"
    assert "adk_mesh.invocation_id" not in {item.key for item in by_body["outside"].attributes}
    # After shutdown the logging handler is gone: nothing writes to a stopped pipeline.
    assert not any("opentelemetry" in type(h).__module__ for h in logging.getLogger().handlers)


def test_the_console_formatter_says_where_a_line_was_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    configure_telemetry("desk")
    formatter = InvocationLogFormatter("%(levelname)s %(name)s: %(message)s")

    def line(message: str) -> str:
        record = logging.LogRecord("desk.app", logging.WARNING, __file__, 1, message, None, None)
        return formatter.format(record)

    assert line("outside") == "WARNING desk.app: outside"
    tracer = _providers.get_tracer()
    assert tracer is not None
    with tracer.start_as_current_span("invoke_agent desk") as span:
        token = context.attach(with_invocation(INVOCATION_IDS, context.get_current()))
        try:
            inside = line("inside")
        finally:
            context.detach(token)
    ids = span.get_span_context()
    assert inside == (
        f"WARNING desk.app [invocation_id=e-42 trace_id={ids.trace_id:032x} "
        f"span_id={ids.span_id:016x}]: inside"
    )


# --- the file exporter ----------------------------------------------------------------------


def _hex_ids_to_base64(value: Any) -> Any:
    """OTLP JSON writes ids as hex; the protobuf JSON mapping reads bytes as base64."""
    if isinstance(value, dict):
        return {
            key: base64.b64encode(bytes.fromhex(item)).decode()
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(item, str)
            else _hex_ids_to_base64(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids_to_base64(item) for item in value]
    return value


def test_trace_dir_writes_otlp_json_lines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path / "traces"))
    handle = configure_telemetry("weather tools/v1")
    assert handle.span_exporters == ("otlp_json_file",)
    tracer = _providers.get_tracer()
    assert tracer is not None
    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:
        parent.set_attribute("adk_mesh.invocation_id", "e-1")
        with tracer.start_as_current_span("child") as child:
            child.set_attributes({"count": 3, "ratio": 0.5, "ok": True, "tags": ["a", "b"]})
            child.set_status(Status(StatusCode.ERROR, "boom"))
    handle.shutdown()

    # One file per service, its name made safe for a file system.
    (path,) = (tmp_path / "traces").iterdir()
    assert path.name == "weather_tools_v1.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2  # one export (a span, simple processor) per line
    spans: list[Any] = []
    for line in lines:
        data = json.loads(line)
        request = json_format.ParseDict(
            _hex_ids_to_base64(data), trace_service_pb2.ExportTraceServiceRequest()
        )
        (resource_spans,) = request.resource_spans
        service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
        assert service["service.name"] == "weather tools/v1"
        for scope_spans in resource_spans.scope_spans:
            assert scope_spans.scope.name == "adk_mesh"
            spans.extend(scope_spans.spans)
        # Ids are hex (OTLP JSON), not base64 (the plain protobuf JSON mapping).
        raw = data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        assert len(raw["traceId"]) == 32 and len(raw["spanId"]) == 16
        int(raw["traceId"], 16)
        assert isinstance(raw["kind"], int)
    child_span, parent_span = spans  # the child ends first
    context = parent.get_span_context()
    assert parent_span.trace_id == context.trace_id.to_bytes(16, "big")
    assert parent_span.span_id == context.span_id.to_bytes(8, "big")
    assert child_span.parent_span_id == parent_span.span_id
    assert parent_span.kind == parent_span.SPAN_KIND_SERVER
    assert child_span.status.code == child_span.status.STATUS_CODE_ERROR
    assert child_span.status.message == "boom"

    (child_record, parent_record) = sorted(
        read_trace_files(tmp_path / "traces"), key=lambda record: record.name
    )
    assert child_record.attributes == {
        "count": 3,
        "ratio": 0.5,
        "ok": True,
        "tags": ["a", "b"],
    }
    assert (child_record.parent_span_id, child_record.status_code) == (
        parent_record.span_id,
        "ERROR",
    )
    assert parent_record.invocation_id == "e-1"
    assert (parent_record.kind, parent_record.service_name) == ("SERVER", "weather tools/v1")


def test_file_exporter_appends_a_line_per_export_and_stops_at_shutdown(tmp_path: Path) -> None:
    exporter = OtlpJsonFileSpanExporter(tmp_path / "nested")
    provider = TracerProvider(resource=Resource({"service.name": "svc"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    tracer.start_span("one").end()
    tracer.start_span("two").end()
    assert [r.name for r in read_trace_files(tmp_path / "nested")] == ["one", "two"]
    assert [r.service_name for r in read_trace_files(tmp_path / "nested")] == ["svc", "svc"]
    provider.shutdown()
    assert len((tmp_path / "nested" / "svc.jsonl").read_text().splitlines()) == 2
