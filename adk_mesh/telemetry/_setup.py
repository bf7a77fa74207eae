"""Setting up export from the standard ``OTEL_*`` environment variables."""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace

from adk_mesh.errors import ConfigError
from adk_mesh.telemetry import _providers

__all__ = ["TRACE_DIR_ENV", "TelemetryHandle", "configure_telemetry"]

#: With no OTLP endpoint configured, each process appends its spans as OTLP JSON lines to
#: ``$ADK_MESH_TRACE_DIR/<service.name>.jsonl`` (for demos and local runs).
TRACE_DIR_ENV = "ADK_MESH_TRACE_DIR"

_DEFAULT_SERVICE_NAME = "adk-mesh"
_PROTOCOLS = ("grpc", "http/protobuf")

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
        if self._meter_provider is not None:
            flushed = bool(self._meter_provider.force_flush(timeout_millis)) and flushed
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


def _protocol(signal: str) -> str:
    protocol = _env(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
    protocol = protocol or "grpc"
    if protocol not in _PROTOCOLS:
        raise ConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r} is not supported; use one of "
            f"{', '.join(_PROTOCOLS)}"
        )
    return protocol


def _resource(service_name: str | None) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (which wins); the
    # service's own name applies only when neither names the service.
    detected = Resource.create()
    current = str(detected.attributes.get(SERVICE_NAME, ""))
    if current.startswith("unknown_service"):
        return detected.merge(Resource({SERVICE_NAME: service_name or _DEFAULT_SERVICE_NAME}))
    return detected


def _span_exporter(protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter()


def _metric_exporter(protocol: str) -> Any:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter()


def _exemplar_filter() -> Any:
    """No exemplars unless ``OTEL_METRICS_EXEMPLAR_FILTER`` asks for them (``None``: the SDK
    then follows the variable).

    The SDK's default (``trace_based``) offers every measurement taken inside a sampled span
    to an exemplar reservoir — on every invocation, several times — for exemplars that spans
    of the same invocation already provide (they carry the same ids and durations).
    """
    if _env("OTEL_METRICS_EXEMPLAR_FILTER"):
        return None
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter

    return AlwaysOffExemplarFilter()


def _file_name(service_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", service_name) or _DEFAULT_SERVICE_NAME


def configure_telemetry(service_name: str | None = None) -> TelemetryHandle:
    """Set up tracing and metrics export for this process from the standard variables.

    * ``OTEL_SDK_DISABLED=true``: nothing is set up.
    * ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``: spans go over
      OTLP (batched), by ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` — ``grpc`` (the default, as
      in the Python SDK) or ``http/protobuf`` — with ``OTEL_EXPORTER_OTLP_[TRACES_]HEADERS``.
      Metrics go too when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._METRICS_ENDPOINT`` is set
      (and ``OTEL_METRICS_EXPORTER`` is not ``none``).
    * else ``ADK_MESH_TRACE_DIR``: spans are appended as OTLP JSON lines to
      ``<dir>/<service.name>.jsonl``.
    * else nothing: no exporter, and the instrumentation stays off (negligible overhead).

    ``service.name`` is ``OTEL_SERVICE_NAME`` if set, else the one in
    ``OTEL_RESOURCE_ATTRIBUTES``, else ``service_name``. Sampling follows
    ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG`` (default: parent-based always-on,
    so a caller's sampling decision is honoured).

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
    if _env_flag("OTEL_SDK_DISABLED"):
        return TelemetryHandle(service_name=service_name or _DEFAULT_SERVICE_NAME)
    traces_endpoint = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    trace_dir = _env(TRACE_DIR_ENV)
    if not traces_endpoint and not trace_dir:
        return TelemetryHandle(service_name=service_name or _DEFAULT_SERVICE_NAME)

    from opentelemetry.sdk.resources import SERVICE_NAME
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = _resource(service_name)
    name = str(resource.attributes.get(SERVICE_NAME, _DEFAULT_SERVICE_NAME))
    tracer_provider = TracerProvider(resource=resource)
    handle = TelemetryHandle(service_name=name, _tracer_provider=tracer_provider)
    if traces_endpoint:
        protocol = _protocol("TRACES")
        tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(protocol)))
        handle.exporter = "otlp/grpc" if protocol == "grpc" else "otlp/http"
    else:
        from adk_mesh.telemetry._file_exporter import JsonLinesSpanExporter

        path = os.path.join(trace_dir, f"{_file_name(name)}.jsonl")
        # One small append per span: the file is complete the moment a run ends, which is
        # what a demo reading it back needs.
        tracer_provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
        handle.exporter = "file"
    _providers.set_tracer_provider(tracer_provider)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(tracer_provider)

    metrics_endpoint = _env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or _env(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if metrics_endpoint and _env("OTEL_METRICS_EXPORTER").lower() != "none":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        reader = PeriodicExportingMetricReader(_metric_exporter(_protocol("METRICS")))
        meter_provider = MeterProvider(
            resource=resource, metric_readers=[reader], exemplar_filter=_exemplar_filter()
        )
        handle._meter_provider = meter_provider
        handle.metrics_exported = True
        _providers.set_meter_provider(meter_provider)
        if _providers.get_global_meter_provider_unset():
            metrics.set_meter_provider(meter_provider)
    logger.debug("telemetry for %s: spans %s", name, handle.exporter)
    return handle
