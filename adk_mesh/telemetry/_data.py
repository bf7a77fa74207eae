"""What the lean telemetry pipeline hands its OTLP encoder: finished spans and metric points.

The recorder (:mod:`~adk_mesh.telemetry._tracer`), the meter
(:mod:`~adk_mesh.telemetry._meter`) and the encoder (:mod:`~adk_mesh.telemetry._otlp`) meet
here and nowhere else. Values are already in OTLP's terms (span kinds, status codes, flags),
so encoding is a straight walk with no translation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

__all__ = [
    "CUMULATIVE",
    "DELTA",
    "FLAG_HAS_IS_REMOTE",
    "FLAG_IS_REMOTE",
    "FinishedSpan",
    "HistogramPoint",
    "MetricData",
    "NumberPoint",
    "Scope",
    "SpanEvent",
    "SpanLink",
]

# OTLP Span.flags bits above the W3C trace flags: whether the parent was remote is known, and
# whether it was.
FLAG_HAS_IS_REMOTE: Final = 0x100
FLAG_IS_REMOTE: Final = 0x200

# OTLP AggregationTemporality.
DELTA: Final = 1
CUMULATIVE: Final = 2

#: An attribute value as OpenTelemetry allows it: str, bool, int, float, bytes, a sequence of
#: values, or a mapping of str to values (OTLP AnyValue).
AnyValue = Any


@dataclass(frozen=True, slots=True)
class Scope:
    """The instrumentation scope a span or metric came from (a tracer's or meter's name)."""

    name: str
    version: str = ""
    schema_url: str = ""
    attributes: Mapping[str, AnyValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_unix_nano: int
    attributes: Mapping[str, AnyValue]
    dropped_attributes_count: int = 0


@dataclass(frozen=True, slots=True)
class SpanLink:
    trace_id: int
    span_id: int
    trace_state: str
    #: OTLP Link.flags: the linked context's trace flags | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE
    flags: int
    attributes: Mapping[str, AnyValue]
    dropped_attributes_count: int = 0


class FinishedSpan(Protocol):
    """A span that ended, as the encoder reads it (the recorder's span class has these;
    read-only here)."""

    @property
    def name(self) -> str: ...

    @property
    def scope(self) -> Scope: ...

    # 128 bits, never 0
    @property
    def trace_id(self) -> int: ...

    # 64 bits, never 0
    @property
    def span_id(self) -> int: ...

    # 0 for a root span
    @property
    def parent_span_id(self) -> int: ...

    # W3C tracestate header value, "" when none
    @property
    def trace_state(self) -> str: ...

    # W3C trace flags | FLAG_HAS_IS_REMOTE | (FLAG_IS_REMOTE if the parent is remote)
    @property
    def flags(self) -> int: ...

    # OTLP SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer
    @property
    def kind(self) -> int: ...

    # unix ns
    @property
    def start_time(self) -> int: ...

    # unix ns
    @property
    def end_time(self) -> int: ...

    @property
    def attributes(self) -> Mapping[str, AnyValue]: ...

    @property
    def events(self) -> Sequence[SpanEvent]: ...

    @property
    def links(self) -> Sequence[SpanLink]: ...

    # OTLP StatusCode: 0 unset, 1 ok, 2 error
    @property
    def status_code(self) -> int: ...

    @property
    def status_message(self) -> str: ...

    @property
    def dropped_attributes_count(self) -> int: ...

    @property
    def dropped_events_count(self) -> int: ...

    @property
    def dropped_links_count(self) -> int: ...


@dataclass(frozen=True, slots=True)
class NumberPoint:
    """One point of a sum or a gauge."""

    attributes: Mapping[str, AnyValue]
    start_time_unix_nano: int
    time_unix_nano: int
    value: int | float  # an int is encoded as_int, a float as_double


@dataclass(frozen=True, slots=True)
class HistogramPoint:
    """One point of an explicit-bucket histogram: ``len(bucket_counts) == len(bounds) + 1``."""

    attributes: Mapping[str, AnyValue]
    start_time_unix_nano: int
    time_unix_nano: int
    count: int
    sum: float
    min: float
    max: float
    bucket_counts: Sequence[int]
    explicit_bounds: Sequence[float]


@dataclass(frozen=True, slots=True)
class MetricData:
    """One instrument's points at a collection.

    ``kind`` is ``"sum"`` (NumberPoint; ``monotonic`` says whether it only grows),
    ``"gauge"`` (NumberPoint) or ``"histogram"`` (HistogramPoint). ``temporality`` (DELTA or
    CUMULATIVE) applies to sums and histograms.
    """

    name: str
    description: str
    unit: str
    kind: str
    points: Sequence[NumberPoint | HistogramPoint]
    temporality: int = CUMULATIVE
    monotonic: bool = False
