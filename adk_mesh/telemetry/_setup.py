"""Setting up export from the standard ``OTEL_*`` environment variables."""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace

from adk_mesh.telemetry import _providers

__all__ = ["TRACE_DIR_ENV", "TelemetryHandle", "configure_telemetry"]

#: With no OTLP endpoint configured, each process appends its spans as OTLP JSON lines to
#: ``$ADK_MESH_TRACE_DIR/<service.name>.jsonl`` (for demos and local runs).
TRACE_DIR_ENV = "ADK_MESH_TRACE_DIR"

_DEFAULT_SERVICE_NAME = "adk-mesh"

logger = logging.getLogger(__name__)


@dataclass
class TelemetryHandle:
    """What :func:`configure_telemetry` set up; :meth:`shutdown` flushes and stops it.

    Attributes:
        service_name: the ``service.name`` of this process's spans.
        exporter: ``"otlp/grpc"``, ``"otlp/http"``, ``"file"`` or ``"none"``.
        metrics_exported: whether metrics are exported (OTLP only).
    """

    service_name: str
    exporter: str = "none"
    metrics_exported: bool = False
    _tracer_provider: Any = field(default=None, repr=False)
    _meter_provider: Any = field(default=None, repr=False)
    _metric_export: Any = field(default=None, repr=False)
    _shut_down: bool = field(default=False, repr=False)

    @property
    def enabled(self) -> bool:
        """Whether spans are recorded and exported."""
        return self._tracer_provider is not None and not self._shut_down

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every finished span now; ``False`` if the timeout ran out."""
        flushed = True
        if self._tracer_provider is not None:
            flushed = bool(self._tracer_provider.force_flush(timeout_millis))
        if self._metric_export is not None:
            flushed = bool(self._metric_export.force_flush(timeout_millis)) and flushed
        return flushed

    def shutdown(self) -> None:
        """Flush the spans (and metrics) still buffered and stop exporting. Idempotent; call it
        on graceful shutdown, after the servers stopped."""
        global _handle
        with _lock:
            if self._shut_down:
                return
            self._shut_down = True
            if _handle is self:
                _handle = None
        # OpenTelemetry's global providers are set once: when the global one is this one, the
        # instrumentation is pointed at a no-op provider, so it is off again, as before.
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()
            if _providers._tracer_provider is self._tracer_provider:
                is_global = trace.get_tracer_provider() is self._tracer_provider
                _providers.set_tracer_provider(trace.NoOpTracerProvider() if is_global else None)
        if self._meter_provider is not None:
            if self._metric_export is not None:
                self._metric_export.shutdown()  # a last export, then the provider stops
            else:
                self._meter_provider.shutdown()
            if _providers._meter_provider is self._meter_provider:
                is_global = metrics.get_meter_provider() is self._meter_provider
                _providers.set_meter_provider(metrics.NoOpMeterProvider() if is_global else None)


_lock = threading.Lock()
_handle: TelemetryHandle | None = None


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def _env_flag(name: str) -> bool:
    return _env(name).lower() == "true"


def _resource(service_name: str | None) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (which wins); the
    # service's own name applies only when neither names the service.
    detected = Resource.create()
    current = str(detected.attributes.get(SERVICE_NAME, ""))
    if current.startswith("unknown_service"):
        return detected.merge(Resource({SERVICE_NAME: service_name or _DEFAULT_SERVICE_NAME}))
    return detected


def _file_name(service_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", service_name) or _DEFAULT_SERVICE_NAME


def configure_telemetry(service_name: str | None = None) -> TelemetryHandle:
    """Set up tracing and metrics export for this process from the standard variables.

    * ``OTEL_SDK_DISABLED=true``: nothing is set up.
    * ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``: spans go over
      OTLP, batched as ``OTEL_BSP_*`` say, by ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` —
      ``grpc`` (the default, as in the Python SDK) or ``http/protobuf`` — with the
      ``OTEL_EXPORTER_OTLP_[TRACES_]{HEADERS,TIMEOUT,COMPRESSION,CERTIFICATE,...}`` variables.
      Metrics go too, every ``OTEL_METRIC_EXPORT_INTERVAL``, when ``OTEL_EXPORTER_OTLP_ENDPOINT``
      or ``..._METRICS_ENDPOINT`` is set (and ``OTEL_METRICS_EXPORTER`` is not ``none``), with
      the temporality ``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`` asks for.
    * else ``ADK_MESH_TRACE_DIR``: spans are appended as OTLP JSON lines to
      ``<dir>/<service.name>.jsonl``.
    * else nothing: no exporter, and the instrumentation stays off (negligible overhead).

    ``service.name`` is ``OTEL_SERVICE_NAME`` if set, else the one in
    ``OTEL_RESOURCE_ATTRIBUTES``, else ``service_name``. Sampling follows
    ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG`` (default: parent-based always-on,
    so a caller's sampling decision is honoured); span limits follow ``OTEL_SPAN_*`` and
    ``OTEL_ATTRIBUTE_*``.

    Idempotent: while a configuration is active, later calls return the same handle.
    """
    global _handle
    with _lock:
        if _handle is not None:
            return _handle
        handle = _configure(service_name)
        _handle = handle
        return handle


def _configure(service_name: str | None) -> TelemetryHandle:
    from adk_mesh.telemetry._spans import refresh_capture_content

    refresh_capture_content()
    if _env_flag("OTEL_SDK_DISABLED"):
        return TelemetryHandle(service_name=service_name or _DEFAULT_SERVICE_NAME)
    traces_endpoint = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    trace_dir = _env(TRACE_DIR_ENV)
    if not traces_endpoint and not trace_dir:
        return TelemetryHandle(service_name=service_name or _DEFAULT_SERVICE_NAME)

    from opentelemetry.sdk.resources import SERVICE_NAME

    from adk_mesh.telemetry._export import OtlpBatchSink
    from adk_mesh.telemetry._tracer import LeanTracerProvider

    resource = _resource(service_name)
    name = str(resource.attributes.get(SERVICE_NAME, _DEFAULT_SERVICE_NAME))
    tracer_provider = LeanTracerProvider(resource)
    handle = TelemetryHandle(service_name=name, _tracer_provider=tracer_provider)
    if traces_endpoint:
        from adk_mesh.telemetry._otlp import TraceEncoder
        from adk_mesh.telemetry._transport import transport_from_env

        transport = transport_from_env("traces")
        encoder = TraceEncoder(resource.attributes, resource.schema_url)
        tracer_provider.add_sink(OtlpBatchSink(encoder, transport))
        handle.exporter = "otlp/grpc" if transport.protocol == "grpc" else "otlp/http"
    else:
        from adk_mesh.telemetry._file_exporter import JsonLinesSink

        path = os.path.join(trace_dir, f"{_file_name(name)}.jsonl")
        tracer_provider.add_sink(JsonLinesSink(path, resource.attributes))
        handle.exporter = "file"
    _providers.set_tracer_provider(tracer_provider)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(tracer_provider)

    metrics_endpoint = _env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or _env(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if metrics_endpoint and _env("OTEL_METRICS_EXPORTER").lower() != "none":
        from adk_mesh.telemetry._export import PeriodicMetricExport
        from adk_mesh.telemetry._meter import LeanMeterProvider, temporality_from_env
        from adk_mesh.telemetry._otlp import MetricsEncoder
        from adk_mesh.telemetry._transport import transport_from_env

        meter_provider = LeanMeterProvider(temporality_preference=temporality_from_env())
        handle._meter_provider = meter_provider
        handle._metric_export = PeriodicMetricExport(
            meter_provider,
            MetricsEncoder(resource.attributes, resource.schema_url),
            transport_from_env("metrics"),
        )
        handle.metrics_exported = True
        _providers.set_meter_provider(meter_provider)
        if _providers.get_global_meter_provider_unset():
            metrics.set_meter_provider(meter_provider)
    logger.debug("telemetry for %s: spans %s", name, handle.exporter)
    return handle
