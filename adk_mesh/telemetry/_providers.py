"""Where the instrumentation finds its tracer and meter.

The runtime holds a tracer no longer than one invocation: an invocation asks :func:`get_tracer`
at its first span (:attr:`~adk_mesh.contexts.InvocationContext.tracer`) and a mesh server at
each call, so a test (or an embedding application) can swap the provider between invocations
with :func:`use_tracer_provider` without touching OpenTelemetry's set-once globals. ``None``
from :func:`get_tracer` means tracing is off (no recording provider anywhere): the
instrumentation then does nothing at all, which is what keeps an unconfigured process at its
untraced speed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import metrics, trace
from opentelemetry.metrics._internal import _ProxyMeterProvider

from adk_mesh._version import __version__

__all__ = [
    "INSTRUMENTATION_NAME",
    "get_meter",
    "get_tracer",
    "set_meter_provider",
    "set_tracer_provider",
    "tracing_enabled",
    "use_meter_provider",
    "use_tracer_provider",
]

INSTRUMENTATION_NAME = "adk_mesh"

_tracer_provider: trace.TracerProvider | None = None
_meter_provider: metrics.MeterProvider | None = None
_tracer_cache: tuple[trace.TracerProvider, trace.Tracer | None] | None = None
_meter_cache: tuple[metrics.MeterProvider, metrics.Meter | None] | None = None

# The API's placeholders: a process where nobody installed a recording provider.
_NO_TRACING = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_NO_METRICS = (metrics.NoOpMeterProvider, _ProxyMeterProvider)


def _current_tracer_provider() -> trace.TracerProvider:
    return _tracer_provider if _tracer_provider is not None else trace.get_tracer_provider()


def tracing_enabled() -> bool:
    """Whether a recording tracer provider (ours or an SDK one) is installed, here or globally."""
    return not isinstance(_current_tracer_provider(), _NO_TRACING)


def get_tracer() -> trace.Tracer | None:
    """The adk_mesh tracer, or ``None`` when tracing is off."""
    global _tracer_cache
    provider = _current_tracer_provider()
    # Asked for at every span: the answer for the provider of the moment is kept (``None``
    # too), so a lookup costs an identity check.
    cached = _tracer_cache
    if cached is not None and cached[0] is provider:
        return cached[1]
    tracer: trace.Tracer | None = None
    if not isinstance(provider, _NO_TRACING):
        tracer = provider.get_tracer(INSTRUMENTATION_NAME, __version__)
    _tracer_cache = (provider, tracer)
    return tracer


def get_meter() -> metrics.Meter | None:
    """The adk_mesh meter, or ``None`` when no metrics provider is installed."""
    global _meter_cache
    provider = _meter_provider if _meter_provider is not None else metrics.get_meter_provider()
    cached = _meter_cache
    if cached is not None and cached[0] is provider:
        return cached[1]
    meter: metrics.Meter | None = None
    if not isinstance(provider, _NO_METRICS):
        meter = provider.get_meter(INSTRUMENTATION_NAME, __version__)
    _meter_cache = (provider, meter)
    return meter


def set_tracer_provider(provider: trace.TracerProvider | None) -> None:
    """Use ``provider`` instead of the global one (``None``: the global one again)."""
    global _tracer_provider, _tracer_cache
    _tracer_provider = provider
    _tracer_cache = None


def set_meter_provider(provider: metrics.MeterProvider | None) -> None:
    global _meter_provider, _meter_cache
    _meter_provider = provider
    _meter_cache = None


@contextmanager
def use_tracer_provider(provider: trace.TracerProvider) -> Iterator[None]:
    """Trace with ``provider`` inside the block (tests: a provider with an in-memory
    exporter), then go back to the previous one."""
    previous = _tracer_provider
    set_tracer_provider(provider)
    try:
        yield
    finally:
        set_tracer_provider(previous)


@contextmanager
def use_meter_provider(provider: metrics.MeterProvider) -> Iterator[None]:
    previous = _meter_provider
    set_meter_provider(provider)
    try:
        yield
    finally:
        set_meter_provider(previous)
