"""Getting finished spans and metric points out of the process.

* :class:`OtlpBatchSink` — the batch span processor of the lean recorder: ended spans go on a
  queue (an append, on the traced thread), a worker thread encodes them as OTLP
  (:class:`~adk_mesh.telemetry._otlp.TraceEncoder`) and sends them
  (:mod:`~adk_mesh.telemetry._transport`) every ``OTEL_BSP_SCHEDULE_DELAY`` or as soon as a
  batch is full. A full queue drops new spans (counted, and said once) rather than block the
  traced code.
* :class:`ExporterSink` — hands each ended span, as an SDK ``ReadableSpan``, to any SDK
  ``SpanExporter`` at once (the console exporter, tests' in-memory exporter).
* :class:`PeriodicMetricExport` — collects the lean meter every ``OTEL_METRIC_EXPORT_INTERVAL``
  and sends the points as OTLP.

Each worker is a daemon thread that flushes what it holds on :meth:`shutdown`; after a
``fork`` the child starts its own worker (the parent's thread does not exist there).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.trace import SpanContext, TraceFlags, TraceState

from adk_mesh.telemetry._data import FLAG_IS_REMOTE, MetricData, Scope
from adk_mesh.telemetry._env import env_int

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

    from adk_mesh.telemetry._tracer import LeanSpan

__all__ = [
    "BatchSettings",
    "ExporterSink",
    "OtlpBatchSink",
    "PeriodicMetricExport",
    "readable_span",
]

logger = logging.getLogger(__name__)


class _Sender(Protocol):
    def send(self, body: bytes, timeout: float) -> bool: ...

    def close(self) -> None: ...


class _SpanEncoder(Protocol):
    def encode(self, spans: Sequence[Any]) -> bytes: ...


class _MetricsEncoder(Protocol):
    def encode(self, scopes: Sequence[tuple[Scope, Sequence[MetricData]]]) -> bytes: ...


class BatchSettings:
    """The batch span processor's settings (``OTEL_BSP_*``; times in seconds)."""

    __slots__ = ("export_timeout", "max_batch", "max_queue", "schedule_delay")

    def __init__(
        self,
        *,
        schedule_delay: float = 5.0,
        export_timeout: float = 30.0,
        max_queue: int = 2048,
        max_batch: int = 512,
    ) -> None:
        if max_batch > max_queue:
            logger.warning(
                "a batch of %d spans cannot exceed the queue of %d: batches of %d",
                max_batch, max_queue, max_queue,
            )  # fmt: skip
            max_batch = max_queue
        self.schedule_delay = schedule_delay
        self.export_timeout = export_timeout
        self.max_queue = max_queue
        self.max_batch = max_batch

    @classmethod
    def from_env(cls) -> BatchSettings:
        return cls(
            schedule_delay=env_int("OTEL_BSP_SCHEDULE_DELAY", default=5000, minimum=1) / 1000,
            export_timeout=env_int("OTEL_BSP_EXPORT_TIMEOUT", default=30_000, minimum=1) / 1000,
            max_queue=env_int("OTEL_BSP_MAX_QUEUE_SIZE", default=2048, minimum=1),
            max_batch=env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", default=512, minimum=1),
        )


class _Worker:
    """A daemon thread that runs ``cycle(everything)`` every ``interval`` seconds, on a flush
    request and a last time on stop (``everything=True``), and when woken (``False``)."""

    def __init__(self, name: str, interval: float, cycle: Callable[[bool], None]) -> None:
        self._name = name
        self._interval = interval
        self._cycle = cycle
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._waiters: list[threading.Event] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._start()
        # The child of a fork has no worker thread: it starts its own.
        reference = weakref.WeakMethod(self._after_fork)
        os.register_at_fork(after_in_child=lambda: _call(reference))

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def _after_fork(self) -> None:
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._waiters = []
        if not self._stopping:
            self._start()

    def wake(self) -> None:
        if not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        # What this thread does is never traced itself (an instrumented HTTP client sending
        # the spans would otherwise make spans about sending spans).
        otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        while True:
            woken = self._wake.wait(self._interval)
            self._wake.clear()
            with self._lock:
                waiters, self._waiters = self._waiters, []
                stopping = self._stopping
            try:
                # Woken only because a batch filled up: send full batches, leave the rest to
                # the schedule. On the schedule, a flush or the stop: send everything.
                self._cycle(not woken or bool(waiters) or stopping)
            except Exception:  # the worker must outlive any one failure
                logger.exception("%s failed", self._name)
            for waiter in waiters:
                waiter.set()
            if stopping:
                return

    def flush(self, timeout: float) -> bool:
        """Run a cycle now and wait for it; ``False`` if ``timeout`` ran out first."""
        waiter = threading.Event()
        with self._lock:
            if self._stopping or self._thread is None or not self._thread.is_alive():
                return True
            self._waiters.append(waiter)
        self._wake.set()
        return waiter.wait(timeout)

    def stop(self, timeout: float) -> None:
        """Run a last cycle and end the thread (waiting at most ``timeout``)."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)


def _call(reference: weakref.WeakMethod[Callable[[], None]]) -> None:
    method = reference()
    if method is not None:
        method()


class OtlpBatchSink:
    """Batches ended spans and exports them over OTLP from a worker thread.

    The worker encodes, not the traced thread: in a service, the worker's encoding overlaps
    the main thread's waits on the network. (Encoding each span as it ended and queueing
    bytes was measured too: it made a single-process, CPU-bound loop faster — live spans
    held until the batch goes slow it down — but a deployed mesh 4 points slower.)
    """

    def __init__(
        self,
        encoder: _SpanEncoder,
        transport: _Sender,
        settings: BatchSettings | None = None,
    ) -> None:
        self._encoder = encoder
        self._transport = transport
        self._settings = settings if settings is not None else BatchSettings.from_env()
        self._queue: deque[LeanSpan] = deque()
        self._dropped = 0
        self._worker = _Worker("adk-mesh-span-export", self._settings.schedule_delay, self._export)

    @property
    def dropped(self) -> int:
        """Spans dropped because the queue was full."""
        return self._dropped

    def on_end(self, span: LeanSpan) -> None:
        queue = self._queue
        if len(queue) >= self._settings.max_queue:
            if not self._dropped:
                logger.warning(
                    "the span export queue is full (%d): spans are dropped until it drains",
                    self._settings.max_queue,
                )
            self._dropped += 1
            return
        queue.append(span)
        if len(queue) >= self._settings.max_batch:
            self._worker.wake()

    def _export(self, everything: bool) -> None:
        queue = self._queue
        max_batch = self._settings.max_batch
        # Spans keep arriving while a batch is sent: only full batches go unless asked for
        # everything, so a busy process sends few large requests, not many small ones.
        while len(queue) >= max_batch or (everything and queue):
            batch = [queue.popleft() for _ in range(min(max_batch, len(queue)))]
            body = self._encoder.encode(batch)
            self._transport.send(body, self._settings.export_timeout)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._worker.flush(timeout_millis / 1000)

    def shutdown(self) -> None:
        self._worker.stop(self._settings.export_timeout)
        self._transport.close()


def readable_span(span: LeanSpan) -> ReadableSpan:
    """``span`` as the SDK's ``ReadableSpan``, for SDK exporters."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link

    scope = span.scope
    return ReadableSpan(
        name=span.name,
        context=span.get_span_context(),
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes,
        events=[Event(e.name, e.attributes, e.time_unix_nano) for e in span.events],
        links=[
            Link(
                SpanContext(
                    link.trace_id,
                    link.span_id,
                    bool(link.flags & FLAG_IS_REMOTE),
                    TraceFlags(link.flags & 0xFF),
                    TraceState.from_header([link.trace_state]) if link.trace_state else None,
                ),
                link.attributes,
            )
            for link in span.links
        ],
        kind=span.span_kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=InstrumentationScope(
            scope.name, scope.version or None, scope.schema_url or None, scope.attributes
        ),
    )


class ExporterSink:
    """Each ended span goes to an SDK ``SpanExporter`` at once, on the thread that ended it
    (the SDK's simple span processor)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self._closed = False

    def on_end(self, span: LeanSpan) -> None:
        if not self._closed:
            self.exporter.export([readable_span(span)])

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self._closed = True
        self.exporter.shutdown()


class _Collectable(Protocol):
    def collect(self) -> list[tuple[Scope, list[MetricData]]]: ...

    def shutdown(self) -> None: ...


class PeriodicMetricExport:
    """Collects ``meter_provider`` every ``OTEL_METRIC_EXPORT_INTERVAL`` (default 60 s) and
    sends what it holds; a last time on :meth:`shutdown`."""

    def __init__(
        self,
        meter_provider: _Collectable,
        encoder: _MetricsEncoder,
        transport: _Sender,
        *,
        interval: float | None = None,
        timeout: float | None = None,
    ) -> None:
        self.meter_provider = meter_provider
        self._encoder = encoder
        self._transport = transport
        self._interval = (
            interval
            if interval is not None
            else env_int("OTEL_METRIC_EXPORT_INTERVAL", default=60_000, minimum=1) / 1000
        )
        self._timeout = (
            timeout
            if timeout is not None
            else env_int("OTEL_METRIC_EXPORT_TIMEOUT", default=30_000, minimum=1) / 1000
        )
        self._worker = _Worker("adk-mesh-metric-export", self._interval, self._export)

    def _export(self, everything: bool) -> None:
        scopes = [(scope, points) for scope, points in self.meter_provider.collect() if points]
        if scopes:
            self._transport.send(self._encoder.encode(scopes), self._timeout)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._worker.flush(timeout_millis / 1000)

    def shutdown(self) -> None:
        started = time.monotonic()
        self._worker.stop(self._timeout)
        self.meter_provider.shutdown()
        self._transport.close()
        logger.debug("metrics flushed in %.3f s", time.monotonic() - started)
