"""Tracing into memory for one test, and OpenTelemetry's set-once globals reset around it.

Shared by the telemetry test packages: their conftest files import these fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import _logs, metrics, trace
from opentelemetry._logs import _internal as logs_internal
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from adk_mesh.telemetry import InvocationSpanProcessor, _providers, _setup
from adk_mesh.telemetry._spans import refresh_capture_content


def reset_global_providers() -> None:
    """Forget the global tracer, meter and logger providers (OpenTelemetry sets each once per
    process), as temporalio's test helpers do."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    logs_internal._LOGGER_PROVIDER_SET_ONCE = Once()
    logs_internal._LOGGER_PROVIDER = None
    _providers.set_tracer_provider(None)
    _providers.set_meter_provider(None)
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not isinstance(metrics.get_meter_provider(), MeterProvider)
    assert not isinstance(_logs.get_logger_provider(), _logs.NoOpLoggerProvider)


def recording_provider(exporter: InMemorySpanExporter) -> TracerProvider:
    """An SDK provider as ``adk-mesh serve`` sets one up, exporting each span at once into
    ``exporter``."""
    provider = TracerProvider(resource=Resource({"service.name": "test"}), shutdown_on_exit=False)
    provider.add_span_processor(InvocationSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans recorded in the test, as the SDK's ``ReadableSpan``s."""
    exporter = InMemorySpanExporter()
    provider = recording_provider(exporter)
    with _providers.use_tracer_provider(provider):
        yield exporter
    provider.shutdown()


@pytest.fixture
def metric_reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    with _providers.use_meter_provider(provider):
        yield reader
    provider.shutdown()


@pytest.fixture(autouse=True)
def _fresh_telemetry_configuration() -> Iterator[None]:
    """configure_telemetry is idempotent per process: forget its handle and the global
    providers around each test; and read ADK_MESH_CAPTURE_CONTENT again (a test may set it)."""
    refresh_capture_content()
    yield
    refresh_capture_content()
    handle = _setup._handle
    if handle is not None:
        handle.shutdown()
    reset_global_providers()
