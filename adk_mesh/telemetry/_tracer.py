"""A lean span recorder behind the OpenTelemetry tracing API.

Why not the SDK's ``TracerProvider``: here it costs ~35 µs to start and end one span (attribute
validation under a lock per value, sampler objects, span processors, ``ReadableSpan`` copies)
and its OTLP encoder ~58 µs more per span. An agent invocation makes five spans or more, and
the whole of a scripted invocation costs ~240 µs, so the SDK made tracing cost more than the
work it traced. This recorder keeps what a span must have and nothing else: a slotted span
object that *is* the finished record, no copy at the end, W3C ids from ``random.getrandbits``
(as the SDK does), the six standard samplers decided inline, attribute limits as the spec
sets them, and sinks that take each ended span — a batching OTLP exporter
(:mod:`~adk_mesh.telemetry._export`), the JSON-lines trace file, or any SDK ``SpanExporter``
(tests' in-memory exporter).

It implements the API (``opentelemetry.trace.TracerProvider``/``Tracer``/``Span``) in full, so
anything instrumented with OpenTelemetry — ours and other libraries' — records through it, and
an application that prefers the SDK can install its own provider instead: our instrumentation
only ever talks to the API.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.util._decorator import _agnosticcontextmanager
from opentelemetry.util.types import Attributes

from adk_mesh.telemetry._data import (
    FLAG_HAS_IS_REMOTE,
    FLAG_IS_REMOTE,
    Scope,
    SpanEvent,
    SpanLink,
)
from adk_mesh.telemetry._env import env_int

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

__all__ = [
    "LeanSpan",
    "LeanTracer",
    "LeanTracerProvider",
    "Sampler",
    "SpanLimits",
    "SpanSink",
    "sampler_from_env",
]

logger = logging.getLogger(__name__)

_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
# OTLP Span.flags of a recorded span (always sampled), with a local or a remote parent.
_SAMPLED_LOCAL: Final = TraceFlags.SAMPLED | FLAG_HAS_IS_REMOTE
_SAMPLED_REMOTE: Final = TraceFlags.SAMPLED | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE
_NOT_SAMPLED: Final = TraceFlags(TraceFlags.DEFAULT)
_EMPTY_TRACE_STATE: Final = TraceState()
# OTLP's SpanKind is the API's plus one (0 is UNSPECIFIED there); keyed by identity, since
# hashing an enum member runs Python code.
_OTLP_KIND: Final = {id(kind): kind.value + 1 for kind in SpanKind}
_OTLP_STATUS: Final = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}
_STATUS_OK: Final = 1
_STATUS_ERROR: Final = 2
_SIMPLE_TYPES: Final = frozenset({str, bool, int, float})
_MAX_64: Final = (1 << 64) - 1


# --- sampling ---------------------------------------------------------------------------------


class Sampler:
    """One of the six samplers ``OTEL_TRACES_SAMPLER`` names, decided without allocations.

    ``parent_based``: a span with a parent follows the parent's sampled flag (local or
    remote); a root span is decided by ``ratio`` (1.0 always on, 0.0 always off, else the
    trace-id ratio rule: the low 64 bits of the trace id below ``ratio * 2**64``).
    """

    __slots__ = ("_bound", "description", "parent_based", "ratio")

    def __init__(self, *, parent_based: bool = True, ratio: float = 1.0) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"a sampling ratio is between 0 and 1, not {ratio}")
        self.parent_based = parent_based
        self.ratio = ratio
        self._bound = round(ratio * (_MAX_64 + 1))
        root = {1.0: "always_on", 0.0: "always_off"}.get(ratio, f"traceidratio({ratio})")
        self.description = f"parentbased_{root}" if parent_based else root

    def sampled(self, parent_sampled: bool | None, trace_id: int) -> bool:
        """Whether to record a span of ``trace_id`` whose parent was sampled or not (``None``:
        a root span)."""
        if parent_sampled is not None and self.parent_based:
            return parent_sampled
        return (trace_id & _MAX_64) < self._bound

    def __repr__(self) -> str:
        return f"Sampler({self.description})"


def sampler_from_env() -> Sampler:
    """The sampler ``OTEL_TRACES_SAMPLER`` (+ ``_ARG``) asks for; parent-based always-on by
    default, and for a value that is not one of the six (with a warning)."""
    name = os.environ.get("OTEL_TRACES_SAMPLER", "").strip().lower() or "parentbased_always_on"
    fixed = {
        "always_on": Sampler(parent_based=False, ratio=1.0),
        "always_off": Sampler(parent_based=False, ratio=0.0),
        "parentbased_always_on": Sampler(parent_based=True, ratio=1.0),
        "parentbased_always_off": Sampler(parent_based=True, ratio=0.0),
    }
    if name in fixed:
        return fixed[name]
    if name in ("traceidratio", "parentbased_traceidratio"):
        raw = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
        ratio = 1.0
        if raw:
            try:
                ratio = float(raw)
            except ValueError:
                ratio = -1.0
            if not 0.0 <= ratio <= 1.0:
                logger.warning("OTEL_TRACES_SAMPLER_ARG=%r is not a ratio in [0, 1]: using 1", raw)
                ratio = 1.0
        return Sampler(parent_based=name.startswith("parentbased_"), ratio=ratio)
    logger.warning(
        "OTEL_TRACES_SAMPLER=%r is not supported (always_on, always_off, traceidratio, "
        "parentbased_always_on, parentbased_always_off, parentbased_traceidratio): using "
        "parentbased_always_on",
        name,
    )
    return fixed["parentbased_always_on"]


# --- limits -----------------------------------------------------------------------------------


class SpanLimits:
    """How much one span keeps (the spec's span limits, from ``OTEL_SPAN_*`` and
    ``OTEL_ATTRIBUTE_*``; ``None`` value length: unlimited)."""

    __slots__ = (
        "attribute_count",
        "attribute_value_length",
        "attributes_per_event",
        "attributes_per_link",
        "event_count",
        "link_count",
    )

    def __init__(
        self,
        *,
        attribute_count: int = 128,
        attribute_value_length: int | None = None,
        event_count: int = 128,
        link_count: int = 128,
        attributes_per_event: int = 128,
        attributes_per_link: int = 128,
    ) -> None:
        self.attribute_count = attribute_count
        self.attribute_value_length = attribute_value_length
        self.event_count = event_count
        self.link_count = link_count
        self.attributes_per_event = attributes_per_event
        self.attributes_per_link = attributes_per_link

    @classmethod
    def from_env(cls) -> SpanLimits:
        return cls(
            attribute_count=env_int(
                "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT", default=128
            ),
            attribute_value_length=env_int(
                "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                default=None,
            ),
            event_count=env_int("OTEL_SPAN_EVENT_COUNT_LIMIT", default=128),
            link_count=env_int("OTEL_SPAN_LINK_COUNT_LIMIT", default=128),
            attributes_per_event=env_int("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", default=128),
            attributes_per_link=env_int("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", default=128),
        )


# --- attribute values -------------------------------------------------------------------------

_INVALID: Final = object()


def _clean(value: Any, max_length: int | None) -> Any:
    """``value`` as an attribute may hold it, or ``_INVALID``.

    Strings are cut to ``max_length``; sequences become tuples (a caller's list mutated later
    does not change the span); mappings are copied. ``None`` and other objects are invalid.
    """
    kind = type(value)
    if kind is str:
        return value if max_length is None else value[:max_length]
    if kind in _SIMPLE_TYPES:
        return value
    if isinstance(value, str):  # a str subclass (an enum member, say): keep its text
        return _clean(str(value), max_length)
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value) if max_length is None else bytes(value[:max_length])
    if isinstance(value, Mapping):
        cleaned_map = {}
        for key, item in value.items():
            cleaned_item = _clean(item, max_length)
            if isinstance(key, str) and cleaned_item is not _INVALID:
                cleaned_map[key] = cleaned_item
        return cleaned_map
    if isinstance(value, Sequence):
        items = []
        for item in value:
            # Arrays may hold null entries (OTLP: an empty AnyValue); keep them as None.
            cleaned = None if item is None else _clean(item, max_length)
            if cleaned is _INVALID:
                return _INVALID
            items.append(cleaned)
        return tuple(items)
    return _INVALID


def _bounded_attributes(
    attributes: Attributes, count_limit: int, max_length: int | None
) -> tuple[dict[str, Any], int]:
    """A clean copy of ``attributes`` within the limits, and how many were dropped."""
    kept: dict[str, Any] = {}
    dropped = 0
    if not attributes:
        return kept, dropped
    for key, value in attributes.items():
        if len(kept) >= count_limit:
            dropped += 1
            continue
        cleaned = _clean(value, max_length)
        if cleaned is _INVALID:
            logger.warning(
                "attribute %r: invalid value type %s, dropped", key, type(value).__name__
            )
            continue
        kept[key] = cleaned
    return kept, dropped


# --- the span -----------------------------------------------------------------------------------


class SpanSink(Protocol):
    """Where ended spans go (in the order they end, from any thread)."""

    def on_end(self, span: LeanSpan) -> None: ...

    def force_flush(self, timeout_millis: int = 30_000) -> bool: ...

    def shutdown(self) -> None: ...


# Ending is the one step two threads must not both take (a span would be exported twice).
# One lock for every span: ending takes it for a moment, and a lock per span costs more.
_END_LOCK: Final = threading.Lock()


class LeanSpan(trace.Span):
    """A recording span; once ended, the finished record the sinks receive (its fields are
    the encoder's :class:`~adk_mesh.telemetry._data.FinishedSpan`).

    Its ids are kept as ints, and its ``SpanContext`` built only when asked for (propagating
    it, or a remote-style parent lookup): a span whose parent is another ``LeanSpan`` of this
    process starts from that span's fields directly.
    """

    __slots__ = (
        "_context",
        "_limits",
        "_parent",
        "_provider",
        "_trace_state",
        "attributes",
        "dropped_attributes_count",
        "dropped_events_count",
        "dropped_links_count",
        "end_time",
        "events",
        "flags",
        "kind",
        "links",
        "name",
        "parent_span_id",
        "scope",
        "span_id",
        "start_time",
        "status_code",
        "status_message",
        "trace_id",
        "trace_state",
    )

    def __init__(
        self,
        provider: LeanTracerProvider,
        scope: Scope,
        name: str,
        trace_id: int,
        span_id: int,
        trace_state: TraceState,
        trace_state_header: str,
        parent: LeanSpan | SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        dropped_attributes: int,
        links: list[SpanLink],
        dropped_links: int,
        start_time: int,
    ) -> None:
        self._provider = provider
        self._limits = provider.limits
        self._context: SpanContext | None = None
        self._parent = parent
        self._trace_state = trace_state
        self.scope = scope
        self.name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.trace_state = trace_state_header
        if parent is None:
            self.parent_span_id = 0
            self.flags = _SAMPLED_LOCAL
        elif isinstance(parent, LeanSpan):
            self.parent_span_id = parent.span_id
            self.flags = _SAMPLED_LOCAL
        else:
            self.parent_span_id = parent.span_id
            self.flags = _SAMPLED_REMOTE if parent.is_remote else _SAMPLED_LOCAL
        self.kind = _OTLP_KIND[id(kind)]
        self.start_time = start_time
        self.end_time = 0
        self.attributes = attributes
        self.dropped_attributes_count = dropped_attributes
        self.events: list[SpanEvent] = []
        self.dropped_events_count = 0
        self.links = links
        self.dropped_links_count = dropped_links
        self.status_code = 0
        self.status_message = ""

    # -- reading --

    def get_span_context(self) -> SpanContext:
        context = self._context
        if context is None:
            context = self._context = SpanContext(
                self.trace_id, self.span_id, False, _SAMPLED, self._trace_state
            )
        return context

    @property
    def parent(self) -> SpanContext | None:
        parent = self._parent
        if type(parent) is LeanSpan:
            return parent.get_span_context()
        return parent  # type: ignore[return-value]

    @property
    def span_kind(self) -> SpanKind:
        return SpanKind(self.kind - 1)

    @property
    def status(self) -> Status:
        code = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}[self.status_code]
        return Status(code, self.status_message or None)

    @property
    def resource(self) -> Resource:
        return self._provider.resource

    def is_recording(self) -> bool:
        return self.end_time == 0

    # -- writing --

    def set_attribute(self, key: str, value: Any) -> None:
        if self.end_time:
            logger.debug("attribute %r set on the ended span %r: ignored", key, self.name)
            return
        limits = self._limits
        if type(value) not in _SIMPLE_TYPES or limits.attribute_value_length is not None:
            cleaned = _clean(value, limits.attribute_value_length)
            if cleaned is _INVALID:
                logger.warning(
                    "attribute %r: invalid value type %s, dropped", key, type(value).__name__
                )
                return
            value = cleaned
        attributes = self.attributes
        if key not in attributes and len(attributes) >= limits.attribute_count:
            self.dropped_attributes_count += 1
            return
        attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        if self.end_time:
            return
        limits = self._limits
        kept, dropped = _bounded_attributes(
            attributes, limits.attributes_per_event, limits.attribute_value_length
        )
        if len(self.events) >= limits.event_count:
            self.dropped_events_count += 1
            return
        self.events.append(SpanEvent(name, timestamp or time.time_ns(), kept, dropped))

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        if self.end_time or not context.is_valid:
            return
        if len(self.links) >= self._limits.link_count:
            self.dropped_links_count += 1
            return
        self.links.append(self._provider._link(context, attributes))

    def update_name(self, name: str) -> None:
        if not self.end_time:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # The spec: OK is final, UNSET is never set over anything, ERROR carries a description.
        if self.end_time or self.status_code == _STATUS_OK:
            return
        if isinstance(status, Status):
            code, message = status.status_code, status.description
        else:
            code, message = status, description
        value = _OTLP_STATUS[code]
        if value == 0:
            return
        self.status_code = value
        self.status_message = (message or "") if value == _STATUS_ERROR else ""

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        kind = type(exception)
        qualified = kind.__qualname__
        module = kind.__module__
        event_attributes: dict[str, Any] = {
            "exception.type": qualified if module == "builtins" else f"{module}.{qualified}",
            "exception.message": str(exception),
            "exception.stacktrace": "".join(
                traceback.format_exception(kind, exception, exception.__traceback__)
            ),
            "exception.escaped": str(escaped),
        }
        if attributes:
            event_attributes.update(attributes)
        self.add_event("exception", event_attributes, timestamp)

    def end(self, end_time: int | None = None) -> None:
        with _END_LOCK:
            if self.end_time:
                logger.debug("span %r ended twice: the second end is ignored", self.name)
                return
            self.end_time = end_time or time.time_ns()
        for sink in self._provider._sinks:
            try:
                sink.on_end(self)
            except Exception:  # a sink's failure must never reach the traced code
                logger.exception("span sink %r failed", sink)

    def __repr__(self) -> str:
        return (
            f"LeanSpan({self.name!r}, trace_id={self.trace_id:032x}, span_id={self.span_id:016x})"
        )


# --- tracer and provider ----------------------------------------------------------------------


class LeanTracer(trace.Tracer):
    """Starts :class:`LeanSpan`s for one instrumentation scope."""

    def __init__(self, provider: LeanTracerProvider, scope: Scope) -> None:
        self._provider = provider
        self.scope = scope

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        provider = self._provider
        current = trace.get_current_span(context)
        parent: LeanSpan | SpanContext | None
        if type(current) is LeanSpan:
            # A recording span of this process: sampled, its ids at hand.
            parent = current
            trace_id = current.trace_id
            trace_state = current._trace_state
            header = current.trace_state
            sampled = provider.sampler.sampled(True, trace_id)
        else:
            parent = current.get_span_context()
            if parent is not None and parent.is_valid:
                trace_id = parent.trace_id
                trace_state = parent.trace_state
                header = trace_state.to_header() if trace_state else ""
                sampled = provider.sampler.sampled(parent.trace_flags.sampled, trace_id)
            else:
                parent = None
                trace_id = random.getrandbits(128) or 1
                trace_state = _EMPTY_TRACE_STATE
                header = ""
                sampled = provider.sampler.sampled(None, trace_id)
        span_id = random.getrandbits(64) or 1
        if not sampled or provider._shut_down:
            return NonRecordingSpan(
                SpanContext(trace_id, span_id, False, _NOT_SAMPLED, trace_state)
            )
        limits = provider.limits
        if attributes:
            kept, dropped = _fast_attributes(attributes, limits)
        else:
            kept, dropped = {}, 0
        span_links: list[SpanLink] = []
        dropped_links = 0
        if links:
            for link in links:
                if not link.context.is_valid:
                    continue
                if len(span_links) >= limits.link_count:
                    dropped_links += 1
                    continue
                span_links.append(provider._link(link.context, link.attributes))
        return LeanSpan(
            provider,
            self.scope,
            name,
            trace_id,
            span_id,
            trace_state,
            header,
            parent,
            kind,
            kept,
            dropped,
            span_links,
            dropped_links,
            start_time or time.time_ns(),
        )

    # The API's own decorator: the result also decorates sync and async functions, as the
    # SDK's does.
    @_agnosticcontextmanager
    def start_as_current_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        span = self.start_span(
            name, context, kind, attributes, links, start_time, record_exception,
            set_status_on_exception,
        )  # fmt: skip
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


def _fast_attributes(
    attributes: Mapping[str, Any], limits: SpanLimits
) -> tuple[dict[str, Any], int]:
    """The start attributes of a span: a plain copy when every value is a plain scalar (the
    common case), else the cleaning path."""
    if len(attributes) <= limits.attribute_count and limits.attribute_value_length is None:
        for value in attributes.values():
            if type(value) not in _SIMPLE_TYPES:
                break
        else:
            return dict(attributes), 0
    return _bounded_attributes(attributes, limits.attribute_count, limits.attribute_value_length)


class LeanTracerProvider(trace.TracerProvider):
    """The tracer provider :func:`~adk_mesh.telemetry.configure_telemetry` installs.

    ``resource`` is an SDK ``Resource`` (built from ``OTEL_RESOURCE_ATTRIBUTES`` and
    ``OTEL_SERVICE_NAME``); ``sinks`` receive every ended, sampled span.
    """

    def __init__(
        self,
        resource: Resource,
        *,
        sampler: Sampler | None = None,
        limits: SpanLimits | None = None,
        sinks: Sequence[SpanSink] = (),
    ) -> None:
        self.resource = resource
        self.sampler = sampler if sampler is not None else sampler_from_env()
        self.limits = limits if limits is not None else SpanLimits.from_env()
        self._sinks: tuple[SpanSink, ...] = tuple(sinks)
        self._tracers: dict[tuple[str, str, str], LeanTracer] = {}
        self._lock = threading.Lock()
        self._shut_down = False

    def add_sink(self, sink: SpanSink) -> None:
        with self._lock:
            self._sinks = (*self._sinks, sink)

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Attributes = None,
    ) -> trace.Tracer:
        key = (
            instrumenting_module_name or "",
            instrumenting_library_version or "",
            schema_url or "",
        )
        tracer = self._tracers.get(key)
        if tracer is None:
            scope_attributes, _ = _bounded_attributes(attributes, 128, None)
            with self._lock:
                tracer = self._tracers.setdefault(
                    key, LeanTracer(self, Scope(*key, attributes=scope_attributes))
                )
        return tracer

    def _link(self, context: SpanContext, attributes: Attributes) -> SpanLink:
        limits = self.limits
        kept, dropped = _bounded_attributes(
            attributes, limits.attributes_per_link, limits.attribute_value_length
        )
        trace_state = context.trace_state
        return SpanLink(
            context.trace_id,
            context.span_id,
            trace_state.to_header() if trace_state else "",
            context.trace_flags | FLAG_HAS_IS_REMOTE | (FLAG_IS_REMOTE if context.is_remote else 0),
            kept,
            dropped,
        )

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every ended span now; ``False`` if ``timeout_millis`` ran out first."""
        deadline = time.monotonic() + timeout_millis / 1000
        flushed = True
        for sink in self._sinks:
            remaining = max(0, int((deadline - time.monotonic()) * 1000))
            flushed = sink.force_flush(remaining) and flushed
        return flushed

    def shutdown(self) -> None:
        """Flush and stop every sink; spans started afterwards are not recorded."""
        with self._lock:
            if self._shut_down:
                return
            self._shut_down = True
        for sink in self._sinks:
            try:
                sink.shutdown()
            except Exception:
                logger.exception("span sink %r failed to shut down", sink)
