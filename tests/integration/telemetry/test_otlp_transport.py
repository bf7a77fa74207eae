"""OTLP transports against real collectors on 127.0.0.1: a gRPC server implementing the OTLP
trace and metrics services, and a stdlib HTTP server, each scripted to fail as collectors do.

Backoff is made short (``backoff_base``) so that retries take milliseconds; where a test
shows that a server-requested delay is honoured, the backoff is made huge instead, so that
only the requested delay lets the retry happen in time.
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from adk_mesh import __version__
from adk_mesh.telemetry._transport import (
    OtlpSettings,
    Transport,
    _Warnings,
    open_transport,
    transport_from_env,
)

FAST = 0.01  # seconds: the backoff base when retries should be quick
NEVER = 1000.0  # seconds: a backoff base so long that only a server-set delay allows a retry

# The transports send whatever bytes they are given; these are small valid requests.
SPAN_REQUEST = trace_service_pb2.ExportTraceServiceRequest(
    resource_spans=[
        trace_pb2.ResourceSpans(
            scope_spans=[
                trace_pb2.ScopeSpans(
                    spans=[trace_pb2.Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="s")]
                )
            ]
        )
    ]
).SerializeToString()
METRICS_REQUEST = metrics_service_pb2.ExportMetricsServiceRequest(
    resource_metrics=[
        metrics_pb2.ResourceMetrics(
            scope_metrics=[metrics_pb2.ScopeMetrics(metrics=[metrics_pb2.Metric(name="calls")])]
        )
    ]
).SerializeToString()


@pytest.fixture
def transports() -> Iterator[Callable[..., Transport]]:
    """Opens transports for a test and closes them after it."""
    opened: list[Transport] = []

    def open_(backoff_base: float = FAST, **settings: Any) -> Transport:
        settings.setdefault("signal", "traces")
        transport = open_transport(OtlpSettings(**settings), backoff_base=backoff_base)
        opened.append(transport)
        return transport

    yield open_
    for transport in opened:
        transport.close()


# -- the gRPC collector ----------------------------------------------------------------------

#: How the collector answers one call: a response, or ``context.abort`` to fail it.
GrpcReply = Callable[[grpc.ServicerContext, type], Any]


def accept(context: grpc.ServicerContext, response_type: type) -> Any:
    return response_type()


def fail(code: grpc.StatusCode, retry_delay: float | None = None) -> GrpcReply:
    def reply(context: grpc.ServicerContext, response_type: type) -> Any:
        if retry_delay is None:
            context.abort(code, f"scripted {code.name}")
        else:
            delay = duration_pb2.Duration(nanos=int(retry_delay * 1e9))
            detail = any_pb2.Any()
            detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
            status = status_pb2.Status(code=code.value[0], message="slow down", details=[detail])
            context.abort_with_status(rpc_status.to_status(status))

    return reply


def partially(rejected: int, message: str) -> GrpcReply:
    def reply(context: grpc.ServicerContext, response_type: type) -> Any:
        response = response_type()
        field_name = response.partial_success.DESCRIPTOR.fields[0].name
        setattr(response.partial_success, field_name, rejected)
        response.partial_success.error_message = message
        return response

    return reply


@dataclass
class GrpcCollector:
    """Records each call (the decoded request and its metadata) and answers it from
    ``replies`` in order, then with ``default``."""

    port: int = 0
    replies: list[GrpcReply] = field(default_factory=list)
    default: GrpcReply = accept
    requests: list[Any] = field(default_factory=list)
    metadata: list[dict[str, str]] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def handle(self, request: Any, context: grpc.ServicerContext, response_type: type) -> Any:
        self.requests.append(request)
        self.metadata.append(dict(context.invocation_metadata()))
        reply = self.replies.pop(0) if self.replies else self.default
        return reply(context, response_type)


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, collector: GrpcCollector) -> None:
        self.collector = collector

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.collector.handle(request, context, trace_service_pb2.ExportTraceServiceResponse)


class MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, collector: GrpcCollector) -> None:
        self.collector = collector

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self.collector.handle(
            request, context, metrics_service_pb2.ExportMetricsServiceResponse
        )


@pytest.fixture
def start_grpc_collector() -> Iterator[Callable[..., GrpcCollector]]:
    """Starts gRPC collectors on 127.0.0.1 and stops them after the test."""
    servers: list[grpc.Server] = []

    def start(
        options: tuple[tuple[str, Any], ...] = (),
        credentials: grpc.ServerCredentials | None = None,
    ) -> GrpcCollector:
        collector = GrpcCollector()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            TraceService(collector), server
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(  # type: ignore[no-untyped-call]
            MetricsService(collector), server
        )
        if credentials is None:
            collector.port = server.add_insecure_port("127.0.0.1:0")
        else:
            collector.port = server.add_secure_port("127.0.0.1:0", credentials)
        server.start()
        servers.append(server)
        return collector

    yield start
    for server in servers:
        server.stop(grace=None).wait()


@pytest.fixture
def grpc_collector(start_grpc_collector: Callable[..., GrpcCollector]) -> GrpcCollector:
    return start_grpc_collector()


# -- the HTTP collector ----------------------------------------------------------------------


@dataclass
class HttpReply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class HttpRequest:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HttpCollector:
    """Records each POST and answers it from ``replies`` in order, then with ``default``."""

    url: str = ""
    replies: list[HttpReply] = field(default_factory=list)
    default: HttpReply = field(default_factory=HttpReply)
    requests: list[HttpRequest] = field(default_factory=list)

    def traces_url(self) -> str:
        return f"{self.url}/v1/traces"


def _handler(collector: HttpCollector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            headers = {name.lower(): value for name, value in self.headers.items()}
            collector.requests.append(HttpRequest(self.path, headers, body))
            reply = collector.replies.pop(0) if collector.replies else collector.default
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def start_http_collector() -> Iterator[Callable[..., HttpCollector]]:
    """Starts HTTP collectors on 127.0.0.1, each serving from a thread, stopped after the test."""
    servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def start(tls: ssl.SSLContext | None = None) -> HttpCollector:
        collector = HttpCollector()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(collector))
        scheme = "http"
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
            scheme = "https"
        collector.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.start()
        servers.append((server, thread))
        return collector

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def http_collector(start_http_collector: Callable[..., HttpCollector]) -> HttpCollector:
    return start_http_collector()


def rpc_status_body(message: str) -> bytes:
    body: bytes = status_pb2.Status(code=3, message=message).SerializeToString()
    return body


def protobuf(body: bytes) -> HttpReply:
    return HttpReply(200, {"Content-Type": "application/x-protobuf"}, body)


# -- gRPC ------------------------------------------------------------------------------------


def test_grpc_sends_the_bytes_with_headers_and_user_agent(
    grpc_collector: GrpcCollector, transports: Callable[..., Transport]
) -> None:
    transport = transports(
        endpoint=grpc_collector.endpoint, headers=(("X-Api-Key", "s3cret"), ("tenant", "a"))
    )

    assert transport.send(SPAN_REQUEST, timeout=5)

    (request,) = grpc_collector.requests
    assert request == trace_service_pb2.ExportTraceServiceRequest.FromString(SPAN_REQUEST)
    (metadata,) = grpc_collector.metadata
    assert metadata["x-api-key"] == "s3cret"
    assert metadata["tenant"] == "a"
    assert metadata["user-agent"].startswith(f"adk-mesh/{__version__} ")


def test_grpc_sends_metrics_to_the_metrics_service(
    grpc_collector: GrpcCollector, transports: Callable[..., Transport]
) -> None:
    transport = transports(signal="metrics", endpoint=grpc_collector.endpoint)

    assert transport.send(METRICS_REQUEST, timeout=5)

    (request,) = grpc_collector.requests
    assert isinstance(request, metrics_service_pb2.ExportMetricsServiceRequest)
    assert request == metrics_service_pb2.ExportMetricsServiceRequest.FromString(METRICS_REQUEST)


def test_grpc_gzip_compresses_the_request(
    start_grpc_collector: Callable[..., GrpcCollector], transports: Callable[..., Transport]
) -> None:
    accepting = start_grpc_collector()
    # A collector that only accepts uncompressed messages proves the compression happened.
    identity_only = start_grpc_collector(
        options=(("grpc.compression_enabled_algorithms_bitset", 1),)
    )

    assert transports(endpoint=accepting.endpoint, gzip=True).send(SPAN_REQUEST, timeout=5)
    assert accepting.requests[0] == trace_service_pb2.ExportTraceServiceRequest.FromString(
        SPAN_REQUEST
    )
    assert transports(endpoint=identity_only.endpoint).send(SPAN_REQUEST, timeout=5)
    assert not transports(endpoint=identity_only.endpoint, gzip=True).send(SPAN_REQUEST, timeout=5)


def test_grpc_retries_unavailable_then_succeeds(
    grpc_collector: GrpcCollector, transports: Callable[..., Transport]
) -> None:
    grpc_collector.replies = [fail(grpc.StatusCode.UNAVAILABLE)]
    transport = transports(endpoint=grpc_collector.endpoint)

    assert transport.send(SPAN_REQUEST, timeout=5)

    assert len(grpc_collector.requests) == 2


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.DATA_LOSS,
    ],
)
def test_grpc_retries_every_retryable_code(
    grpc_collector: GrpcCollector, transports: Callable[..., Transport], code: grpc.StatusCode
) -> None:
    grpc_collector.replies = [fail(code)]

    assert transports(endpoint=grpc_collector.endpoint).send(SPAN_REQUEST, timeout=5)
    assert len(grpc_collector.requests) == 2


def test_grpc_gives_up_when_the_time_runs_out(
    grpc_collector: GrpcCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
) -> None:
    grpc_collector.default = fail(grpc.StatusCode.UNAVAILABLE)
    transport = transports(endpoint=grpc_collector.endpoint)

    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert not transport.send(SPAN_REQUEST, timeout=0.5)
    elapsed = time.monotonic() - started

    # Within the budget, give or take one attempt on a loaded machine (never much longer).
    assert elapsed < 0.5 + 1.5
    assert len(grpc_collector.requests) >= 2
    (record,) = caplog.records
    assert record.getMessage().startswith(
        f"otlp/grpc {grpc_collector.endpoint}: export failed "
        f"({len(grpc_collector.requests)} attempts in "
    )
    assert "UNAVAILABLE scripted UNAVAILABLE" in record.getMessage()


def test_a_dead_collector_costs_one_warning_not_one_per_batch(
    grpc_collector: GrpcCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
) -> None:
    grpc_collector.default = fail(grpc.StatusCode.UNAVAILABLE)
    transport = transports(endpoint=grpc_collector.endpoint)

    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert not transport.send(SPAN_REQUEST, timeout=0.1)

    assert len(caplog.records) == 1


def test_grpc_retries_when_nothing_listens(transports: Callable[..., Transport]) -> None:
    transport = transports(endpoint="http://127.0.0.1:1")

    started = time.monotonic()
    assert not transport.send(SPAN_REQUEST, timeout=0.3)
    assert time.monotonic() - started < 0.3 + 1.5  # the budget, with room for a loaded machine


def test_grpc_honours_the_retry_info_delay(
    grpc_collector: GrpcCollector, transports: Callable[..., Transport]
) -> None:
    grpc_collector.replies = [fail(grpc.StatusCode.RESOURCE_EXHAUSTED, retry_delay=0.2)]
    transport = transports(endpoint=grpc_collector.endpoint, backoff_base=NEVER)

    started = time.monotonic()
    assert transport.send(SPAN_REQUEST, timeout=5)

    assert time.monotonic() - started >= 0.2
    assert len(grpc_collector.requests) == 2


def test_grpc_does_not_retry_a_request_the_collector_refuses(
    grpc_collector: GrpcCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
) -> None:
    grpc_collector.default = fail(grpc.StatusCode.INVALID_ARGUMENT)
    transport = transports(endpoint=grpc_collector.endpoint)

    with caplog.at_level(logging.WARNING):
        assert not transport.send(SPAN_REQUEST, timeout=5)

    assert len(grpc_collector.requests) == 1
    assert "export failed" in caplog.text
    assert "INVALID_ARGUMENT scripted INVALID_ARGUMENT" in caplog.text


@pytest.mark.parametrize(
    ("signal", "body", "noun"),
    [("traces", SPAN_REQUEST, "spans"), ("metrics", METRICS_REQUEST, "data points")],
)
def test_grpc_partial_success_is_a_warning(
    grpc_collector: GrpcCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
    signal: str,
    body: bytes,
    noun: str,
) -> None:
    grpc_collector.replies = [partially(3, "attribute too long")]
    transport = transports(signal=signal, endpoint=grpc_collector.endpoint)

    with caplog.at_level(logging.WARNING):
        assert transport.send(body, timeout=5)

    assert len(grpc_collector.requests) == 1
    assert f"the collector rejected 3 {noun}: attribute too long" in caplog.text


def test_close_interrupts_a_retry_wait_and_later_sends_drop(
    grpc_collector: GrpcCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
) -> None:
    grpc_collector.default = fail(grpc.StatusCode.UNAVAILABLE)
    # The first retry would come after 5 to 10 s.
    transport = transports(endpoint=grpc_collector.endpoint, backoff_base=10.0)
    threading.Timer(0.2, transport.close).start()

    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert not transport.send(SPAN_REQUEST, timeout=30)
        assert time.monotonic() - started < 3.0
        assert not transport.send(SPAN_REQUEST, timeout=30)

    assert len(grpc_collector.requests) == 1
    assert "is closed" in caplog.text
    transport.close()  # idempotent


# -- HTTP ------------------------------------------------------------------------------------


def test_http_posts_the_bytes_with_headers(
    http_collector: HttpCollector, transports: Callable[..., Transport]
) -> None:
    transport = transports(
        protocol="http/protobuf",
        endpoint=http_collector.traces_url(),
        headers=(("X-Api-Key", "s3cret"),),
    )

    assert transport.send(SPAN_REQUEST, timeout=5)

    (request,) = http_collector.requests
    assert request.path == "/v1/traces"
    assert request.body == SPAN_REQUEST
    assert trace_service_pb2.ExportTraceServiceRequest.FromString(request.body).resource_spans
    assert request.headers["content-type"] == "application/x-protobuf"
    assert request.headers["x-api-key"] == "s3cret"
    assert request.headers["user-agent"] == f"adk-mesh/{__version__}"
    assert "content-encoding" not in request.headers


def test_http_metrics(http_collector: HttpCollector, transports: Callable[..., Transport]) -> None:
    transport = transports(
        signal="metrics", protocol="http/protobuf", endpoint=f"{http_collector.url}/v1/metrics"
    )

    assert transport.send(METRICS_REQUEST, timeout=5)

    (request,) = http_collector.requests
    assert request.path == "/v1/metrics"
    assert metrics_service_pb2.ExportMetricsServiceRequest.FromString(request.body).resource_metrics


def test_http_gzip(http_collector: HttpCollector, transports: Callable[..., Transport]) -> None:
    transport = transports(
        protocol="http/protobuf", endpoint=http_collector.traces_url(), gzip=True
    )

    assert transport.send(SPAN_REQUEST, timeout=5)

    (request,) = http_collector.requests
    assert request.headers["content-encoding"] == "gzip"
    assert gzip.decompress(request.body) == SPAN_REQUEST


def test_http_honours_retry_after(
    http_collector: HttpCollector, transports: Callable[..., Transport]
) -> None:
    http_collector.replies = [HttpReply(503, {"Retry-After": "0.2"})]
    transport = transports(
        protocol="http/protobuf", endpoint=http_collector.traces_url(), backoff_base=NEVER
    )

    started = time.monotonic()
    assert transport.send(SPAN_REQUEST, timeout=5)

    assert time.monotonic() - started >= 0.2
    assert len(http_collector.requests) == 2


def test_http_gives_up_at_once_when_retry_after_outlasts_the_timeout(
    http_collector: HttpCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
) -> None:
    http_collector.default = HttpReply(429, {"Retry-After": "120"})
    transport = transports(protocol="http/protobuf", endpoint=http_collector.traces_url())

    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert not transport.send(SPAN_REQUEST, timeout=5)

    assert time.monotonic() - started < 2.0  # at once, not after the 120 s asked for
    assert len(http_collector.requests) == 1
    assert "export failed (1 attempts in " in caplog.text
    assert "HTTP 429 Too Many Requests" in caplog.text


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_http_retries_retryable_statuses(
    http_collector: HttpCollector, transports: Callable[..., Transport], status: int
) -> None:
    http_collector.replies = [HttpReply(status), HttpReply(status)]
    transport = transports(protocol="http/protobuf", endpoint=http_collector.traces_url())

    assert transport.send(SPAN_REQUEST, timeout=5)

    assert len(http_collector.requests) == 3


def test_http_gives_up_when_the_time_runs_out(
    http_collector: HttpCollector, transports: Callable[..., Transport]
) -> None:
    http_collector.default = HttpReply(503)
    transport = transports(protocol="http/protobuf", endpoint=http_collector.traces_url())

    started = time.monotonic()
    assert not transport.send(SPAN_REQUEST, timeout=0.5)

    assert time.monotonic() - started < 0.5 + 1.5
    assert len(http_collector.requests) >= 2


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (
            HttpReply(400, {"Content-Type": "application/x-protobuf"}, rpc_status_body("bad span")),
            "HTTP 400 Bad Request: bad span",
        ),
        (
            HttpReply(401, {"Content-Type": "text/plain"}, b"who are you"),
            "HTTP 401 Unauthorized: who",
        ),
        (HttpReply(500), "HTTP 500 Internal Server Error: (no body)"),
        (
            HttpReply(404, {"Content-Type": "application/x-protobuf"}, b"\xff\xff"),
            "HTTP 404 Not Found: \ufffd\ufffd",
        ),
    ],
)
def test_http_does_not_retry_other_failures(
    http_collector: HttpCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
    reply: HttpReply,
    reason: str,
) -> None:
    http_collector.default = reply
    transport = transports(protocol="http/protobuf", endpoint=http_collector.traces_url())

    with caplog.at_level(logging.WARNING):
        assert not transport.send(SPAN_REQUEST, timeout=5)

    assert len(http_collector.requests) == 1
    assert reason in caplog.text


def test_http_partial_success_is_a_warning(
    http_collector: HttpCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
) -> None:
    response = trace_service_pb2.ExportTraceServiceResponse()
    response.partial_success.rejected_spans = 2
    http_collector.replies = [protobuf(response.SerializeToString())]
    transport = transports(protocol="http/protobuf", endpoint=http_collector.traces_url())

    with caplog.at_level(logging.WARNING):
        assert transport.send(SPAN_REQUEST, timeout=5)

    assert "the collector rejected 2 spans: (no reason given)" in caplog.text


def test_http_a_response_that_is_not_otlp_still_means_success(
    http_collector: HttpCollector,
    transports: Callable[..., Transport],
    caplog: pytest.LogCaptureFixture,
) -> None:
    http_collector.replies = [protobuf(b"\xff\xff\xff")]
    transport = transports(protocol="http/protobuf", endpoint=http_collector.traces_url())

    with caplog.at_level(logging.DEBUG, logger="adk_mesh.telemetry._transport"):
        assert transport.send(SPAN_REQUEST, timeout=5)

    assert "not an OTLP export response" in caplog.text


def test_http_retries_when_nothing_listens(transports: Callable[..., Transport]) -> None:
    transport = transports(protocol="http/protobuf", endpoint="http://127.0.0.1:1/v1/traces")

    started = time.monotonic()
    assert not transport.send(SPAN_REQUEST, timeout=0.3)
    assert time.monotonic() - started < 0.3 + 1.5  # the budget, with room for a loaded machine


# -- configured from the environment --------------------------------------------------------


@pytest.fixture
def otlp_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The environment, without any OTLP exporter variable of the machine's own."""
    for name in list(os.environ):
        if name.startswith("OTEL_EXPORTER_OTLP_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_http_from_the_environment(
    http_collector: HttpCollector, otlp_env: pytest.MonkeyPatch
) -> None:
    otlp_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    otlp_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"{http_collector.url}/base/")
    otlp_env.setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "Authorization=Bearer%20t0ken")
    otlp_env.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    transport = transport_from_env("metrics")
    try:
        assert transport.send(METRICS_REQUEST, timeout=5)
    finally:
        transport.close()

    (request,) = http_collector.requests
    assert request.path == "/base/v1/metrics"
    assert request.headers["authorization"] == "Bearer t0ken"
    assert gzip.decompress(request.body) == METRICS_REQUEST


def test_grpc_from_the_environment(
    grpc_collector: GrpcCollector, otlp_env: pytest.MonkeyPatch
) -> None:
    otlp_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"127.0.0.1:{grpc_collector.port}")
    otlp_env.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "true")
    otlp_env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Tenant=a%2Cb")
    transport = transport_from_env("traces")
    try:
        assert transport.send(SPAN_REQUEST, timeout=5)
    finally:
        transport.close()

    assert grpc_collector.metadata[0]["tenant"] == "a,b"


# -- TLS -------------------------------------------------------------------------------------


@dataclass
class Certificate:
    cert: Path
    key: Path

    def context(self) -> ssl.SSLContext:
        """A server context presenting this certificate and requiring a client one it signed."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.cert)
        context.load_cert_chain(self.cert, self.key)
        context.verify_mode = ssl.CERT_REQUIRED
        return context


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for 127.0.0.1, also used as the client certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
            "-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout", str(key), "-out",
            str(cert), "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-addext", "extendedKeyUsage=serverAuth,clientAuth",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return Certificate(cert, key)


def tls_settings(certificate: Certificate) -> dict[str, Any]:
    return {
        "secure": True,
        "certificate": str(certificate.cert),
        "client_key": str(certificate.key),
        "client_certificate": str(certificate.cert),
    }


def test_grpc_mutual_tls(
    start_grpc_collector: Callable[..., GrpcCollector],
    transports: Callable[..., Transport],
    certificate: Certificate,
) -> None:
    credentials = grpc.ssl_server_credentials(
        [(certificate.key.read_bytes(), certificate.cert.read_bytes())],
        root_certificates=certificate.cert.read_bytes(),
        require_client_auth=True,
    )
    collector = start_grpc_collector(credentials=credentials)
    endpoint = f"https://127.0.0.1:{collector.port}"

    assert transports(endpoint=endpoint, **tls_settings(certificate)).send(SPAN_REQUEST, timeout=5)
    assert len(collector.requests) == 1


def test_http_mutual_tls(
    start_http_collector: Callable[..., HttpCollector],
    transports: Callable[..., Transport],
    certificate: Certificate,
) -> None:
    collector = start_http_collector(tls=certificate.context())
    transport = transports(
        protocol="http/protobuf", endpoint=collector.traces_url(), **tls_settings(certificate)
    )

    assert transport.send(SPAN_REQUEST, timeout=5)
    assert collector.requests[0].body == SPAN_REQUEST


# -- rate-limited warnings -------------------------------------------------------------------


def test_warnings_say_how_many_like_them_were_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warnings = _Warnings(interval=0.2)

    with caplog.at_level(logging.WARNING):
        for attempt in range(3):
            warnings.warn("collector down: %s", attempt)
        warnings.warn("another kind: %s", "x")
        time.sleep(0.25)
        warnings.warn("collector down: %s", "later")

    assert [r.getMessage() for r in caplog.records] == [
        "collector down: 0",
        "another kind: x",
        "collector down: later (and 2 more like it)",
    ]


# -- after a fork ---------------------------------------------------------------------------


def test_http_in_a_forked_child_sends_on_a_connection_of_its_own(
    http_collector: HttpCollector, transports: Callable[..., Transport]
) -> None:
    transport = transports(protocol="http/protobuf", endpoint=http_collector.traces_url())
    assert transport.send(SPAN_REQUEST, timeout=5)  # the parent's connection is open now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, b"1" if transport.send(SPAN_REQUEST, timeout=5) else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == b"1"
    assert transport.send(SPAN_REQUEST, timeout=5)  # the parent's connection still works
    assert len(http_collector.requests) == 3


def test_grpc_reconnects_when_the_process_id_changed(
    grpc_collector: GrpcCollector,
    transports: Callable[..., Transport],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # gRPC itself supports using it in a forked child only with GRPC_ENABLE_FORK_SUPPORT; the
    # transport's part is to open a channel of its own there, checked without forking.
    transport = transports(endpoint=grpc_collector.endpoint)
    assert transport.send(SPAN_REQUEST, timeout=5)
    inherited = transport._connection  # type: ignore[attr-defined]
    monkeypatch.setattr(os, "getpid", lambda: -1)
    assert transport.send(SPAN_REQUEST, timeout=5)
    assert transport._connection is not inherited  # type: ignore[attr-defined]
    assert transport._inherited == [inherited]  # type: ignore[attr-defined]
    assert len(grpc_collector.requests) == 2
