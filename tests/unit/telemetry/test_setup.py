"""configure_telemetry from the standard variables; the OTLP JSON lines file exporter; reading
the files back and printing span trees."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util._once import Once

from adk_mesh.errors import ConfigError
from adk_mesh.telemetry import (
    TRACE_DIR_ENV,
    SpanRecord,
    _providers,
    _setup,
    configure_telemetry,
    format_span_trees,
    read_trace_files,
    records_from_otlp_json,
)
from adk_mesh.telemetry._file_exporter import JsonLinesSink
from adk_mesh.telemetry._tracer import LeanTracerProvider, Sampler, SpanLimits

# --- isolation ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets configures telemetry."""
    for key in list(os.environ):
        if key.startswith("OTEL_") or key == TRACE_DIR_ENV:
            monkeypatch.delenv(key)
    # Metrics have no receiver here; each test opts in to what it checks.
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")


@pytest.fixture(autouse=True)
def _restore_opentelemetry_globals() -> Iterator[None]:
    """configure_telemetry installs OpenTelemetry's set-once global providers when nobody has:
    put back the globals (and adk_mesh's own provider slots) as they were."""
    saved_trace = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    saved_metrics = (metrics_internal._METER_PROVIDER, metrics_internal._METER_PROVIDER_SET_ONCE)
    saved_own = (_providers._tracer_provider, _providers._meter_provider)
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    try:
        yield
    finally:
        handle = _setup._handle
        if handle is not None:
            handle.shutdown()
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved_trace
        metrics_internal._METER_PROVIDER, metrics_internal._METER_PROVIDER_SET_ONCE = saved_metrics
        _providers.set_tracer_provider(saved_own[0])
        _providers.set_meter_provider(saved_own[1])


def _emit_one_span(name: str = "work") -> None:
    tracer = _providers.get_tracer()
    assert tracer is not None
    tracer.start_span(name).end()


# --- real receivers ---------------------------------------------------------------------------


@dataclass
class Received:
    """What a receiver got: each request's headers and its spans' names by service."""

    headers: list[dict[str, str]] = field(default_factory=list)
    requests: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
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


@pytest.fixture
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC receiver on 127.0.0.1 (threads: the SDK exports from its own thread)."""
    received = Received()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(received), server)
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

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            headers = {key.lower(): value for key, value in self.headers.items()}
            headers[":path"] = self.path
            received.add(headers, request)
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# --- what gets configured -------------------------------------------------------------------


def test_nothing_configured_means_no_exporter_and_tracing_off() -> None:
    handle = configure_telemetry("coordinator")
    assert (handle.service_name, handle.exporter, handle.enabled) == ("coordinator", "none", False)
    assert not handle.metrics_exported
    assert not _providers.tracing_enabled()
    assert _providers.get_tracer() is None
    assert handle.force_flush()


def test_sdk_disabled_wins_over_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    handle = configure_telemetry("coordinator")
    assert (handle.exporter, handle.enabled) == ("none", False)
    assert _providers.get_tracer() is None


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


@pytest.mark.parametrize("endpoint_variable", ["ENDPOINT", "TRACES_ENDPOINT"])
def test_grpc_is_the_default_protocol_and_carries_the_headers(
    monkeypatch: pytest.MonkeyPatch,
    grpc_receiver: tuple[str, Received],
    endpoint_variable: str,
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv(f"OTEL_EXPORTER_OTLP_{endpoint_variable}", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=s3cret,x-team=a%20b")
    handle = configure_telemetry("coordinator")
    assert (handle.exporter, handle.enabled) == ("otlp/grpc", True)
    _emit_one_span()
    assert handle.force_flush(10_000)
    assert received.span_names() == {"coordinator": ["work"]}
    assert received.headers[0]["x-api-key"] == "s3cret"
    assert received.headers[0]["x-team"] == "a b"


def test_http_protobuf_posts_to_v1_traces_with_the_headers(
    monkeypatch: pytest.MonkeyPatch, http_receiver: tuple[str, Received]
) -> None:
    endpoint, received = http_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20t0ken")
    handle = configure_telemetry("coordinator")
    assert handle.exporter == "otlp/http"
    _emit_one_span()
    assert handle.force_flush(10_000)
    assert received.span_names() == {"coordinator": ["work"]}
    assert received.headers[0][":path"] == "/v1/traces"
    assert received.headers[0]["authorization"] == "Bearer t0ken"
    assert received.headers[0]["content-type"] == "application/x-protobuf"


def test_the_traces_protocol_overrides_the_general_one(
    monkeypatch: pytest.MonkeyPatch, http_receiver: tuple[str, Received]
) -> None:
    endpoint, _ = http_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint + "/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    assert configure_telemetry("coordinator").exporter == "otlp/http"


def test_an_unsupported_protocol_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigError, match="http/json"):
        configure_telemetry("coordinator")
    assert _setup._handle is None
    assert _providers.get_tracer() is None


def test_sampler_follows_the_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    sampler = configure_telemetry("coordinator")._tracer_provider.sampler
    assert (sampler.parent_based, sampler.ratio) == (False, 0.25)


def test_default_sampler_honours_the_callers_decision(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    sampler = configure_telemetry("coordinator")._tracer_provider.sampler
    assert sampler.description == "parentbased_always_on"


def test_always_off_sampler_records_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    handle = configure_telemetry("coordinator")
    _emit_one_span()
    handle.shutdown()
    assert read_trace_files(tmp_path) == []


def test_metrics_are_exported_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, grpc_receiver: tuple[str, Received]
) -> None:
    endpoint, _ = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
    monkeypatch.delenv("OTEL_METRICS_EXPORTER")
    # A traces endpoint alone says nothing about metrics.
    assert not configure_telemetry("coordinator").metrics_exported


# --- lifecycle ------------------------------------------------------------------------------


def test_configure_is_idempotent_until_shutdown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    first = configure_telemetry("coordinator")
    assert configure_telemetry("other") is first
    assert _providers.get_tracer() is not None
    first.shutdown()
    first.shutdown()  # idempotent too
    assert not first.enabled
    assert _providers.get_tracer() is None  # the instrumentation is off again
    second = configure_telemetry("other")
    assert second is not first
    assert second.service_name == "other"


def test_shutdown_flushes_the_batched_spans(
    monkeypatch: pytest.MonkeyPatch, grpc_receiver: tuple[str, Received]
) -> None:
    endpoint, received = grpc_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    # The batch would wait a minute: only the shutdown can have sent it.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")
    handle = configure_telemetry("researcher")
    for name in ("first", "second"):
        _emit_one_span(name)
    assert not received.arrived.is_set()
    handle.shutdown()
    assert received.span_names() == {"researcher": ["first", "second"]}
    assert _providers.get_tracer() is None


def test_the_first_configuration_becomes_the_global_provider(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    handle = configure_telemetry("coordinator")
    # So other libraries' instrumentation (httpx, ...) exports alongside adk_mesh's spans.
    assert trace.get_tracer_provider() is handle._tracer_provider


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
    assert handle.exporter == "file"
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


def test_file_sink_appends_a_line_per_span_and_stops_at_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "svc.jsonl"
    sink = JsonLinesSink(path, {"service.name": "svc"})
    provider = LeanTracerProvider(
        Resource({"service.name": "svc"}), sampler=Sampler(), limits=SpanLimits(), sinks=[sink]
    )
    tracer = provider.get_tracer("t")
    tracer.start_span("one").end()
    tracer.start_span("two").end()
    assert [r.name for r in read_trace_files(tmp_path / "nested")] == ["one", "two"]
    assert [r.service_name for r in read_trace_files(tmp_path / "nested")] == ["svc", "svc"]
    provider.shutdown()
    sink.on_end(tracer.start_span("late"))  # type: ignore[arg-type]  # after shutdown: dropped
    assert len(path.read_text().splitlines()) == 2


# --- reading back and printing --------------------------------------------------------------


def _attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(
    span_id: str,
    parent: str | None,
    name: str,
    kind: int,
    start_ms: int,
    end_ms: int,
    *,
    trace_id: str = "ab" * 16,
    status: dict[str, Any] | None = None,
    **attributes: Any,
) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start_ms * 1_000_000),
        "endTimeUnixNano": str(end_ms * 1_000_000),
        "attributes": [_attribute(key.replace("__", "."), v) for key, v in attributes.items()],
    }
    if parent:
        span["parentSpanId"] = parent
    if status:
        span["status"] = status
    return span


def _line(service: str, *spans: dict[str, Any]) -> str:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [_attribute("service.name", service)]},
                    "scopeSpans": [{"scope": {"name": "adk_mesh"}, "spans": list(spans)}],
                }
            ]
        }
    )


INVOCATION = {"adk_mesh__invocation_id": "e-42"}


def _write_known_tree(directory: Path) -> None:
    directory.mkdir()
    (directory / "coordinator.jsonl").write_text(
        "\n".join(
            [
                _line(
                    "coordinator",
                    _span("0000000000000003", "0000000000000002", "chat m", 3, 2, 3, **INVOCATION),
                ),
                _line(
                    "coordinator",
                    _span(
                        "0000000000000004",
                        "0000000000000002",
                        "adk_mesh.v1.ToolService/CallTool",
                        3,
                        4,
                        9,
                        rpc__grpc__status_code=0,
                        **INVOCATION,
                    ),
                    _span(
                        "0000000000000002",
                        "0000000000000001",
                        "invoke_agent coordinator",
                        1,
                        1,
                        10,
                        **INVOCATION,
                    ),
                    _span(
                        "0000000000000001",
                        None,
                        "adk_mesh.v1.AgentService/Run",
                        2,
                        0,
                        12,
                        **INVOCATION,
                    ),
                ),
                '{"resourceSpans": [{"torn',  # a process still writing
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    (directory / "tools.jsonl").write_text(
        _line(
            "tools",
            _span(
                "0000000000000005",
                "0000000000000004",
                "execute_tool lookup",
                1,
                5,
                8,
                status={"code": 2, "message": "ToolError: no such city"},
                gen_ai__tool__call__id="call-1",
                error__type="ToolError",
                **INVOCATION,
            ),
        )
        + "\n",
        encoding="utf-8",
    )
    (directory / "other.jsonl").write_text(
        _line(
            "other",
            _span("00000000000000aa", None, "unrelated", 1, 20, 21, trace_id="cd" * 16),
        )
        + "\n",
        encoding="utf-8",
    )
    (directory / "notes.txt").write_text("not a trace file", encoding="utf-8")


def test_read_trace_files_orders_every_service_by_start(tmp_path: Path) -> None:
    directory = tmp_path / "traces"
    _write_known_tree(directory)
    records = read_trace_files(directory)
    assert [r.name for r in records] == [
        "adk_mesh.v1.AgentService/Run",
        "invoke_agent coordinator",
        "chat m",
        "adk_mesh.v1.ToolService/CallTool",
        "execute_tool lookup",
        "unrelated",
    ]
    tool = records[4]
    assert tool == SpanRecord(
        trace_id="ab" * 16,
        span_id="0000000000000005",
        parent_span_id="0000000000000004",
        name="execute_tool lookup",
        kind="INTERNAL",
        service_name="tools",
        start_time_unix_nano=5_000_000,
        end_time_unix_nano=8_000_000,
        status_code="ERROR",
        status_message="ToolError: no such city",
        attributes={
            "gen_ai.tool.call.id": "call-1",
            "error.type": "ToolError",
            "adk_mesh.invocation_id": "e-42",
        },
    )
    assert tool.duration_ms == 3.0
    assert tool.invocation_id == "e-42"
    assert records[0].parent_span_id is None
    assert read_trace_files(tmp_path / "missing") == []


def test_format_span_trees_prints_the_known_tree(tmp_path: Path) -> None:
    directory = tmp_path / "traces"
    _write_known_tree(directory)
    records = read_trace_files(directory)
    assert format_span_trees(records, invocation_id="e-42") == "\n".join(
        [
            f"trace {'ab' * 16}  invocation e-42",
            "  adk_mesh.v1.AgentService/Run  [coordinator]  server  12.0 ms  UNSET",
            "    invoke_agent coordinator  [coordinator]  internal  9.0 ms  UNSET",
            "      chat m  [coordinator]  client  1.0 ms  UNSET",
            "      adk_mesh.v1.ToolService/CallTool  [coordinator]  client  5.0 ms  UNSET"
            "  status_code=0",
            "        execute_tool lookup  [tools]  internal  3.0 ms  ERROR"
            "  (ToolError: no such city)  id=call-1  type=ToolError",
        ]
    )
    everything = format_span_trees(records)
    assert everything.split("\n\n")[1] == "\n".join(
        [f"trace {'cd' * 16}", "  unrelated  [other]  internal  1.0 ms  UNSET"]
    )


def test_records_from_otlp_json_accepts_enum_names() -> None:
    data = json.loads(_line("svc", _span("0000000000000001", None, "n", 1, 0, 1)))
    span = data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["kind"] = "SPAN_KIND_CLIENT"
    span["status"] = {"code": "STATUS_CODE_OK"}
    (record,) = records_from_otlp_json(data)
    assert (record.kind, record.status_code) == ("CLIENT", "OK")
