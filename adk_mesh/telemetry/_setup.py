"""Setting up the OpenTelemetry SDK pipeline from the standard ``OTEL_*`` environment variables.

One pipeline per process, and it is the SDK's: when the application (or
``opentelemetry-instrument``) already installed an SDK ``TracerProvider``, adk-mesh joins it;
otherwise it installs one through the SDK's own environment configuration — the code
``opentelemetry-instrument`` runs — so every standard variable means what it means everywhere.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

from opentelemetry import metrics, trace

from adk_mesh.errors import ConfigError
from adk_mesh.telemetry import _providers

__all__ = ["TRACE_DIR_ENV", "TelemetryHandle", "configure_telemetry"]

#: Each process also appends its spans as OTLP JSON lines to
#: ``$ADK_MESH_TRACE_DIR/<service.name>.jsonl`` (for demos and local runs).
TRACE_DIR_ENV = "ADK_MESH_TRACE_DIR"

_DEFAULT_SERVICE_NAME = "adk-mesh"

Signal = Literal["traces", "metrics", "logs"]
_EXPORTER_ENV: dict[Signal, str] = {
    "traces": "OTEL_TRACES_EXPORTER",
    "metrics": "OTEL_METRICS_EXPORTER",
    "logs": "OTEL_LOGS_EXPORTER",
}
# The OTLP exporters' entry-point names by protocol, as the SDK resolves ``otlp``.
_OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}

logger = logging.getLogger(__name__)


@dataclass
class TelemetryHandle:
    """What :func:`configure_telemetry` set up; :meth:`shutdown` flushes and stops it.

    Attributes:
        service_name: the ``service.name`` of this process's spans.
        pipeline: ``"adk-mesh"`` (adk-mesh installed the SDK providers), ``"application"``
            (it joined the providers the application or ``opentelemetry-instrument``
            installed), ``"off"`` (nothing configured: no instrumentation at all) or
            ``"disabled"`` (``OTEL_SDK_DISABLED=true``).
        span_exporters: the span exporters adk-mesh configured, by entry-point name
            (``otlp_proto_grpc``, ``otlp_proto_http``, ``console``, ...), plus
            ``otlp_json_file`` for ``ADK_MESH_TRACE_DIR``.
        metrics_exported: whether adk-mesh configured a metric exporter.
        logs_exported: whether adk-mesh configured a log exporter (and a logging handler).
    """

    service_name: str
    pipeline: str = "off"
    span_exporters: tuple[str, ...] = ()
    metrics_exported: bool = False
    logs_exported: bool = False
    _tracer_provider: Any = field(default=None, repr=False)
    _meter_provider: Any = field(default=None, repr=False)
    _logger_provider: Any = field(default=None, repr=False)
    _owned: bool = field(default=False, repr=False)
    # Providers the application installed before adk-mesh's (the API sets each once): used,
    # flushed, never shut down.
    _foreign: tuple[Any, ...] = field(default=(), repr=False)
    _shut_down: bool = field(default=False, repr=False)

    @property
    def enabled(self) -> bool:
        """Whether adk-mesh's spans are recorded."""
        return (
            not self._shut_down
            and self._tracer_provider is not None
            and _providers.tracing_enabled()
        )

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every finished span, metric point and log record now; ``False`` if the
        timeout ran out."""
        flushed = True
        for provider in (self._tracer_provider, self._meter_provider, self._logger_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flushed = bool(flush(timeout_millis)) and flushed
        return flushed

    def shutdown(self) -> None:
        """Flush what is still buffered and stop exporting. Idempotent; call it on graceful
        shutdown, after the servers stopped (at interpreter exit the SDK does it anyway).

        Providers the application installed are only flushed: their lifetime is the
        application's.
        """
        global _handle
        with _lock:
            if self._shut_down:
                return
            self._shut_down = True
            if _handle is self:
                _handle = None
        if not self._owned:
            self.force_flush()
            return
        if self.logs_exported:
            _stop_logging_handler()
        foreign = self._foreign
        for provider in (self._tracer_provider, self._meter_provider, self._logger_provider):
            if provider is None:
                continue
            if any(provider is other for other in foreign):
                flush = getattr(provider, "force_flush", None)
                if flush is not None:
                    flush()
            else:
                provider.shutdown()
        # OpenTelemetry's global providers are set once: the instrumentation is pointed at
        # no-op providers instead, so it is off again, as before.
        if self._tracer_provider is not None:
            _providers.set_tracer_provider(trace.NoOpTracerProvider())
        if self._meter_provider is not None and not any(
            self._meter_provider is other for other in foreign
        ):
            _providers.set_meter_provider(metrics.NoOpMeterProvider())


_lock = threading.Lock()
_handle: TelemetryHandle | None = None
# Providers that already have adk-mesh's processors (a provider is joined once).
_joined: weakref.WeakSet[Any] = weakref.WeakSet()


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def configure_telemetry(service_name: str | None = None) -> TelemetryHandle:
    """Set up tracing, metrics and logs for this process: one OpenTelemetry SDK pipeline.

    * ``OTEL_SDK_DISABLED=true``: nothing is set up.
    * An SDK ``TracerProvider`` is already installed (by the application, or by
      ``opentelemetry-instrument``): adk-mesh's spans go through it — its sampler, processors
      and exporters — and so do its metrics and logs through the installed meter and logger
      providers. adk-mesh adds only :class:`~adk_mesh.telemetry.InvocationSpanProcessor` (and
      :class:`~adk_mesh.telemetry.InvocationLogRecordProcessor`), which stamp the invocation's
      ids on the spans and log records of other instrumentation too.
    * Otherwise, when something asks for export, the SDK is configured by its own environment
      configuration (what ``opentelemetry-instrument`` runs): ``OTEL_TRACES_EXPORTER``,
      ``OTEL_METRICS_EXPORTER`` and ``OTEL_LOGS_EXPORTER`` (``otlp``, ``console``, ``none``, or
      any exporter registered by entry point), ``OTEL_TRACES_SAMPLER[_ARG]``,
      ``OTEL_RESOURCE_ATTRIBUTES`` and resource detectors, every ``OTEL_EXPORTER_OTLP_*``
      setting, ``OTEL_BSP_*``, ``OTEL_METRIC_EXPORT_*``. An OTLP endpoint
      (``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]ENDPOINT``) alone means ``otlp`` for traces and
      metrics; logs are exported only when ``OTEL_LOGS_EXPORTER`` asks (records of Python's
      ``logging``, through opentelemetry-instrumentation-logging's handler).
      ``ADK_MESH_TRACE_DIR`` adds OTLP JSON lines files, ``<dir>/<service.name>.jsonl``.
    * Nothing asks: nothing is installed and adk-mesh's instrumentation stays off (no cost).

    ``service.name`` is ``OTEL_SERVICE_NAME`` if set, else the one in
    ``OTEL_RESOURCE_ATTRIBUTES``, else ``service_name`` (``adk-mesh serve`` passes the agent's or
    toolset's name). Spans still buffered are exported at interpreter exit, as the SDK does, and
    by :meth:`TelemetryHandle.shutdown`.

    Idempotent: while a configuration is active, later calls return the same handle.

    Raises:
        ConfigError: the variables name an exporter, sampler or protocol that does not exist.
    """
    global _handle
    with _lock:
        if _handle is not None:
            return _handle
        handle = _configure(service_name or _DEFAULT_SERVICE_NAME)
        _handle = handle
        return handle


def _configure(service_name: str) -> TelemetryHandle:
    from adk_mesh.telemetry._propagation import propagate_module
    from adk_mesh.telemetry._spans import refresh_capture_content

    refresh_capture_content()
    try:
        # Mesh calls propagate with the API's propagators whatever the SDK does: an unknown
        # name is found here, at start, rather than at the first call.
        propagate_module()
    except ValueError as error:
        raise ConfigError(f"OTEL_PROPAGATORS: {error}") from error
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return TelemetryHandle(service_name=service_name, pipeline="disabled")
    installed = trace.get_tracer_provider()
    # An SDK provider exists only once its module is loaded: a process that configured
    # nothing never pays for importing the SDK just to find it is not there.
    sdk_trace = sys.modules.get("opentelemetry.sdk.trace")
    if sdk_trace is not None and isinstance(installed, sdk_trace.TracerProvider):
        return _join(installed, service_name)
    if not isinstance(installed, trace.ProxyTracerProvider):
        # NoOpTracerProvider (tracing switched off on purpose) or another API implementation:
        # adk-mesh's spans go wherever the API sends them, and nothing is added.
        name = service_name
        return TelemetryHandle(service_name=name, pipeline="application")
    return _install(service_name)


# --- joining the application's pipeline --------------------------------------------------


def _join(provider: Any, service_name: str) -> TelemetryHandle:
    from opentelemetry._logs import get_logger_provider
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from adk_mesh.telemetry._file_exporter import OtlpJsonFileSpanExporter
    from adk_mesh.telemetry._processors import (
        InvocationLogRecordProcessor,
        InvocationSpanProcessor,
    )

    exporters: tuple[str, ...] = ()
    if provider not in _joined:
        _joined.add(provider)
        provider.add_span_processor(InvocationSpanProcessor())
        trace_dir = _env(TRACE_DIR_ENV)
        if trace_dir:
            provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(trace_dir)))
            exporters = ("otlp_json_file",)
    logger_provider = get_logger_provider()
    if isinstance(logger_provider, LoggerProvider) and logger_provider not in _joined:
        _joined.add(logger_provider)
        logger_provider.add_log_record_processor(InvocationLogRecordProcessor())
    resource = getattr(provider, "resource", None)
    name = str(resource.attributes.get("service.name", "")) if resource is not None else ""
    if not name or name.startswith("unknown_service"):
        logger.warning(
            "the installed OpenTelemetry pipeline names this service %r: set OTEL_SERVICE_NAME "
            "(adk-mesh would have named it %r)",
            name,
            service_name,
        )
    return TelemetryHandle(
        service_name=name or service_name,
        pipeline="application",
        span_exporters=exporters,
        _tracer_provider=provider,
        _meter_provider=metrics.get_meter_provider(),
        _logger_provider=logger_provider,
    )


# --- installing the SDK from the environment ---------------------------------------------


def _exporters_asked(signal: Signal) -> bool:
    names = [name.strip().lower() for name in _env(_EXPORTER_ENV[signal]).split(",")]
    return any(name and name != "none" for name in names)


def _implicit_otlp(signal: Signal) -> list[str]:
    """``otlp`` for a signal whose exporter variable is unset but whose OTLP endpoint is set
    (the spec's default exporter, taken only when an endpoint says where to)."""
    if signal == "logs" or _env(_EXPORTER_ENV[signal]):
        return []
    endpoint = _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT") or _env(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return []
    protocol = (
        _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    )
    name = _OTLP_BY_PROTOCOL.get(protocol)
    if name is None:
        raise ConfigError(
            f"OTLP protocol {protocol!r} is not supported for {signal}: "
            f"use one of {', '.join(sorted(_OTLP_BY_PROTOCOL))}"
        )
    return [name]


def _resource_attributes(service_name: str) -> dict[str, str]:
    """``service.name`` for the SDK's resource, unless the variables already name one."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (which wins).
    detected = str(Resource.create().attributes.get(SERVICE_NAME, ""))
    if not detected or detected.startswith("unknown_service"):
        return {SERVICE_NAME: service_name}
    return {}


def _install(service_name: str) -> TelemetryHandle:
    trace_dir = _env(TRACE_DIR_ENV)
    implicit = {signal: _implicit_otlp(signal) for signal in _EXPORTER_ENV}
    asked = {signal: bool(implicit[signal]) or _exporters_asked(signal) for signal in implicit}
    if not (trace_dir or any(asked.values())):
        return TelemetryHandle(service_name=service_name)

    from opentelemetry._logs import get_logger_provider

    try:
        # The SDK reads some variables as its modules load (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT,
        # say) and raises ValueError on a bad one.
        from opentelemetry.sdk._configuration import _initialize_components
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk.resources import SERVICE_NAME
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    except ValueError as error:
        raise ConfigError(f"OpenTelemetry configuration: {error}") from error

    from adk_mesh.telemetry._file_exporter import OtlpJsonFileSpanExporter
    from adk_mesh.telemetry._processors import (
        InvocationLogRecordProcessor,
        InvocationSpanProcessor,
    )

    span_processors: list[Any] = [InvocationSpanProcessor()]
    if trace_dir:
        span_processors.append(SimpleSpanProcessor(OtlpJsonFileSpanExporter(trace_dir)))
    # An application may have installed a meter or logger provider (not a tracer provider):
    # the API keeps it (each is set once), so it stays the application's.
    meter_before = metrics.get_meter_provider()
    logger_before = get_logger_provider()
    try:
        # The SDK's environment configuration, as opentelemetry-instrument runs it: it reads
        # the OTEL_*_EXPORTER variables itself (the implicit ``otlp`` names come in addition),
        # the sampler, the resource and every exporter setting, and sets the global providers.
        _initialize_components(
            trace_exporter_names=implicit["traces"],
            metric_exporter_names=implicit["metrics"],
            log_exporter_names=[],
            resource_attributes=_resource_attributes(service_name),
            span_processors=span_processors,
            log_record_processors=[InvocationLogRecordProcessor()],
            setup_logging_handler=False,
        )
    except Exception as error:  # the SDK raises RuntimeError or ValueError for bad settings
        raise ConfigError(f"OpenTelemetry configuration: {error}") from error

    tracer_provider = trace.get_tracer_provider()
    meter_provider = metrics.get_meter_provider()
    logger_provider = get_logger_provider()
    span_exporters = tuple(
        implicit["traces"]
        + [name.strip() for name in _env("OTEL_TRACES_EXPORTER").split(",") if name.strip()]
    )
    span_exporters = tuple(name for name in span_exporters if name.lower() != "none")
    if trace_dir:
        span_exporters += ("otlp_json_file",)
    foreign = tuple(
        provider
        for provider, before in ((meter_provider, meter_before), (logger_provider, logger_before))
        if provider is before
    )
    if (
        logger_provider is logger_before
        and isinstance(logger_provider, LoggerProvider)
        and logger_provider not in _joined
    ):
        logger_provider.add_log_record_processor(InvocationLogRecordProcessor())
    _joined.update((tracer_provider, logger_provider))
    # Spans or metrics nobody exports are not made at all: the instrumentation is pointed at
    # other providers for them (the SDK's global ones stay, set once). Spans still drive the
    # metrics and carry the ids onto log records: with either exported, they are started but
    # never sampled (no recording, no export).
    if not span_exporters:
        if asked["metrics"] or asked["logs"]:
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

            unsampled = TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False)
            _providers.set_tracer_provider(unsampled)
        else:
            _providers.set_tracer_provider(trace.NoOpTracerProvider())
    if not asked["metrics"] and meter_provider is not meter_before:
        _providers.set_meter_provider(metrics.NoOpMeterProvider())
    if asked["logs"]:
        _start_logging_handler()
    resource = getattr(tracer_provider, "resource", None)
    name = resource.attributes.get(SERVICE_NAME) if resource is not None else None
    handle = TelemetryHandle(
        service_name=str(name or service_name),
        pipeline="adk-mesh",
        span_exporters=span_exporters,
        metrics_exported=asked["metrics"],
        logs_exported=asked["logs"],
        _tracer_provider=tracer_provider,
        _meter_provider=meter_provider,
        _logger_provider=logger_provider,
        _owned=True,
        _foreign=foreign,
    )
    logger.debug("telemetry for %s: %s", handle.service_name, handle)
    return handle


def _start_logging_handler() -> None:
    """Records of Python's ``logging`` become OpenTelemetry log records (at the levels the
    loggers let through), by opentelemetry-instrumentation-logging's handler."""
    from opentelemetry.instrumentation.logging import LoggingInstrumentor

    instrumentor = LoggingInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument(enable_log_auto_instrumentation=True)


def _stop_logging_handler() -> None:
    from opentelemetry.instrumentation.logging import LoggingInstrumentor

    instrumentor = LoggingInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
