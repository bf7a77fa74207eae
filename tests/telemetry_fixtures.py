"""Tracing into memory for one test, without touching OpenTelemetry's set-once globals.

Shared by the telemetry test packages: their conftest files import these fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_mesh.telemetry import _providers, _setup
from adk_mesh.telemetry._export import ExporterSink
from adk_mesh.telemetry._spans import refresh_capture_content
from adk_mesh.telemetry._tracer import LeanTracerProvider, Sampler, SpanLimits


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans recorded in the test, by the recorder ``adk-mesh serve`` uses, as the SDK's
    ``ReadableSpan``s."""
    exporter = InMemorySpanExporter()
    provider = LeanTracerProvider(
        Resource({"service.name": "test"}),
        sampler=Sampler(),
        limits=SpanLimits(),
        sinks=[ExporterSink(exporter)],
    )
    with _providers.use_tracer_provider(provider):
        yield exporter
    provider.shutdown()


@pytest.fixture
def metric_reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    with _providers.use_meter_provider(provider):
        yield reader
    provider.shutdown()


@pytest.fixture(autouse=True)
def _fresh_telemetry_configuration() -> Iterator[None]:
    """configure_telemetry is idempotent per process: forget its handle around each test; and
    read ADK_MESH_CAPTURE_CONTENT again (a test may set it)."""
    refresh_capture_content()
    yield
    refresh_capture_content()
    handle = _setup._handle
    if handle is not None:
        handle.shutdown()
