"""The hand-written OTLP encoder, checked by decoding its bytes with the official protobufs.

Every test decodes with ``opentelemetry.proto``'s generated classes, so the encoder is held
to what a collector reads, not to our own idea of the wire format. The property test builds
the expected request independently, with the generated classes, and compares whole messages.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    InstrumentationScope,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1 import trace_pb2

from adk_mesh.telemetry._data import (
    CUMULATIVE,
    DELTA,
    FLAG_HAS_IS_REMOTE,
    FLAG_IS_REMOTE,
    HistogramPoint,
    MetricData,
    NumberPoint,
    Scope,
    SpanEvent,
    SpanLink,
)
from adk_mesh.telemetry._otlp import MetricsEncoder, TraceEncoder
from tests.strategies import INT64, texts

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331
PARENT_ID = 0x00F067AA0BA902B7
START = 1_700_000_000_123_456_789
END = START + 2_500_000
SCOPE = Scope("adk_mesh", "0.1.0")


@dataclass
class Span:
    """A finished span as the encoder reads it (the recorder's spans have these names)."""

    name: str = "invoke_agent root"
    scope: Scope = SCOPE
    trace_id: int = TRACE_ID
    span_id: int = SPAN_ID
    parent_span_id: int = 0
    trace_state: str = ""
    flags: int = 0x01 | FLAG_HAS_IS_REMOTE
    kind: int = 1
    start_time: int = START
    end_time: int = END
    attributes: Mapping[str, Any] = field(default_factory=dict)
    events: Sequence[SpanEvent] = ()
    links: Sequence[SpanLink] = ()
    status_code: int = 0
    status_message: str = ""
    dropped_attributes_count: int = 0
    dropped_events_count: int = 0
    dropped_links_count: int = 0


def decode_spans(data: bytes) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(data)


def only_span(data: bytes) -> trace_pb2.Span:
    request = decode_spans(data)
    assert len(request.resource_spans) == 1
    (scope_spans,) = request.resource_spans[0].scope_spans
    (span,) = scope_spans.spans
    return span


def encoded_attributes(attributes: Mapping[str, Any]) -> Any:
    """``attributes`` as the encoder writes them on a span, decoded."""
    return only_span(TraceEncoder({}).encode([Span(attributes=attributes)])).attributes


def any_value(value: Any) -> AnyValue:
    """The AnyValue OTLP expects for ``value``, built with the generated classes."""
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, Mapping):
        return AnyValue(kvlist_value=KeyValueList(values=key_values(value)))
    return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))


def key_values(attributes: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]


def strictly(value: AnyValue) -> tuple[str | None, Any]:
    """An AnyValue as (which field is set, its value): ``True`` never passes for ``1``."""
    kind = value.WhichOneof("value")
    return kind, getattr(value, kind) if kind else None


# -- spans -----------------------------------------------------------------------------------


def test_every_span_field_is_encoded() -> None:
    event = SpanEvent("retry", START + 10, {"attempt": 2}, dropped_attributes_count=1)
    link = SpanLink(
        trace_id=0x1,
        span_id=0x2,
        trace_state="vendor=x",
        flags=0x01 | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE,
        attributes={"why": "follows"},
        dropped_attributes_count=3,
    )
    span = Span(
        parent_span_id=PARENT_ID,
        trace_state="congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
        flags=0x01 | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE,
        kind=2,
        attributes={"rpc.system": "grpc", "server.port": 50051},
        events=[event],
        links=[link],
        status_code=2,
        status_message="boom",
        dropped_attributes_count=4,
        dropped_events_count=5,
        dropped_links_count=6,
    )

    decoded = only_span(TraceEncoder({}).encode([span]))

    assert decoded.trace_id == TRACE_ID.to_bytes(16, "big")
    assert decoded.span_id == SPAN_ID.to_bytes(8, "big")
    assert decoded.parent_span_id == PARENT_ID.to_bytes(8, "big")
    assert decoded.trace_state == span.trace_state
    assert decoded.flags == 0x301
    assert decoded.name == "invoke_agent root"
    assert decoded.kind == trace_pb2.Span.SPAN_KIND_SERVER
    assert decoded.start_time_unix_nano == START
    assert decoded.end_time_unix_nano == END
    assert list(decoded.attributes) == key_values({"rpc.system": "grpc", "server.port": 50051})
    assert decoded.dropped_attributes_count == 4
    assert decoded.dropped_events_count == 5
    assert decoded.dropped_links_count == 6
    assert decoded.status == trace_pb2.Status(
        code=trace_pb2.Status.STATUS_CODE_ERROR, message="boom"
    )
    (decoded_event,) = decoded.events
    assert decoded_event == trace_pb2.Span.Event(
        time_unix_nano=START + 10,
        name="retry",
        attributes=key_values({"attempt": 2}),
        dropped_attributes_count=1,
    )
    (decoded_link,) = decoded.links
    assert decoded_link == trace_pb2.Span.Link(
        trace_id=(1).to_bytes(16, "big"),
        span_id=(2).to_bytes(8, "big"),
        trace_state="vendor=x",
        attributes=key_values({"why": "follows"}),
        dropped_attributes_count=3,
        flags=0x301,
    )


def test_a_root_span_has_no_parent_and_an_unset_status_no_status_message() -> None:
    data = TraceEncoder({}).encode([Span()])
    decoded = only_span(data)

    assert decoded.parent_span_id == b""
    assert not decoded.HasField("status")
    # A parent id of zeros is not written (receivers would see a parent).
    assert b"\x22\x08" + bytes(8) not in data


@pytest.mark.parametrize(
    ("code", "message"), [(1, ""), (2, ""), (2, "deadline exceeded"), (0, "odd but kept")]
)
def test_a_status_is_written_when_it_says_something(code: int, message: str) -> None:
    decoded = only_span(TraceEncoder({}).encode([Span(status_code=code, status_message=message)]))

    assert decoded.HasField("status")
    assert decoded.status == trace_pb2.Status(code=code, message=message)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [0, 1, 2, 3, 4, 5, 6])
def test_every_span_kind_round_trips(kind: int) -> None:
    assert only_span(TraceEncoder({}).encode([Span(kind=kind)])).kind == kind


def test_ids_are_big_endian_and_full_width() -> None:
    span = Span(trace_id=2**128 - 1, span_id=1, parent_span_id=2**64 - 1)

    decoded = only_span(TraceEncoder({}).encode([span]))

    assert decoded.trace_id == b"\xff" * 16
    assert decoded.span_id == bytes(7) + b"\x01"
    assert decoded.parent_span_id == b"\xff" * 8


def test_the_resource_and_its_schema_url() -> None:
    encoder = TraceEncoder(
        {"service.name": "svc", "service.instance.id": 7}, "https://opentelemetry.io/schemas/1.24.0"
    )

    request = decode_spans(encoder.encode([Span()]))

    (resource_spans,) = request.resource_spans
    assert resource_spans.resource == Resource(
        attributes=key_values({"service.name": "svc", "service.instance.id": 7})
    )
    assert resource_spans.schema_url == "https://opentelemetry.io/schemas/1.24.0"


def test_no_spans_is_an_empty_request() -> None:
    assert TraceEncoder({"service.name": "svc"}).encode([]) == b""


def test_spans_are_grouped_by_scope_in_first_seen_order() -> None:
    agents = Scope("adk_mesh.agents", "1.0", "https://example.com/schema", {"team": "core"})
    agents_again = Scope("adk_mesh.agents", "1.0", "https://example.com/schema", {"team": "core"})
    rpc = Scope("adk_mesh.rpc")
    spans = [
        Span(name="a1", scope=agents),
        Span(name="r1", scope=rpc),
        Span(name="a2", scope=agents_again),  # equal, not the same object: the same group
        Span(name="a3", scope=agents),
        Span(name="r2", scope=rpc),
    ]

    request = decode_spans(TraceEncoder({}).encode(spans))

    first, second = request.resource_spans[0].scope_spans
    assert first.scope == InstrumentationScope(
        name="adk_mesh.agents", version="1.0", attributes=key_values({"team": "core"})
    )
    assert first.schema_url == "https://example.com/schema"
    assert [s.name for s in first.spans] == ["a1", "a2", "a3"]
    assert second.scope == InstrumentationScope(name="adk_mesh.rpc")
    assert second.schema_url == ""
    assert [s.name for s in second.spans] == ["r1", "r2"]


def test_a_scope_header_is_cached_but_a_new_scope_object_is_encoded_afresh() -> None:
    encoder = TraceEncoder({})
    encoder.encode([Span(scope=Scope("one"))])
    # A new Scope may reuse the id of one that was garbage collected: never its header.
    for name in ("two", "three"):
        request = decode_spans(encoder.encode([Span(scope=Scope(name))]))
        assert request.resource_spans[0].scope_spans[0].scope.name == name


# -- attribute values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "",
        "plain",
        "ünïcødé 😀 𝄞",
        True,
        False,
        0,
        1,
        -1,
        2**31,
        -(2**63),
        2**63 - 1,
        0.0,
        -2.5,
        1e300,
        math.inf,
        b"",
        b"\x00\xff",
        [],
        ["a", "b"],
        [1, True, 1.0, "1"],
        ("tuple", 2),
        [[1, [2]], {"k": [3]}],
        {},
        {"a": 1, "nested": {"b": [True, b"x"]}},
    ],
)
def test_every_value_kind_encodes_as_otlp_expects(value: Any) -> None:
    (decoded,) = encoded_attributes({"key": value})

    assert decoded == KeyValue(key="key", value=any_value(value))


def test_negative_ints_are_ten_byte_twos_complement_varints() -> None:
    data = TraceEncoder({}).encode([Span(attributes={"n": -1})])

    assert b"\x18" + b"\xff" * 9 + b"\x01" in data


def test_signed_zero_and_nan_keep_their_bits() -> None:
    values = {"zero": 0.0, "negative_zero": -0.0, "nan": math.nan}

    decoded = {kv.key: kv.value.double_value for kv in encoded_attributes(values)}

    assert math.copysign(1.0, decoded["zero"]) == 1.0
    assert math.copysign(1.0, decoded["negative_zero"]) == -1.0
    assert math.isnan(decoded["nan"])


def test_values_otlp_cannot_carry_degrade_instead_of_failing_the_batch() -> None:
    values = {"none": None, "huge": 2**64, "object": object, "surrogate": "a\ud800b"}

    decoded = {kv.key: kv.value for kv in encoded_attributes(values)}

    assert strictly(decoded["none"]) == (None, None)
    assert strictly(decoded["huge"]) == ("string_value", str(2**64))
    assert strictly(decoded["object"]) == ("string_value", str(object))
    assert strictly(decoded["surrogate"]) == ("string_value", "a?b")


def test_long_strings_are_encoded_but_not_cached() -> None:
    long = "x" * 10_000
    encoder = TraceEncoder({})

    for _ in range(2):
        (decoded,) = only_span(encoder.encode([Span(attributes={"prompt": long})])).attributes
        assert decoded.value.string_value == long
    assert not encoder._span_attributes._strings


def test_the_cache_never_confuses_bools_ints_floats_and_strings() -> None:
    encoder = TraceEncoder({})
    values: list[Any] = [True, 1, 1.0, "1", False, 0, 0.0, -0.0, "", "True"]

    # Twice over, so that the second round is served from the caches.
    for value in values * 2:
        span = Span(
            attributes={"k": value},
            events=[SpanEvent("e", START, {"k": value})],
            links=[SpanLink(1, 2, "", 0, {"k": value})],
        )
        decoded = only_span(encoder.encode([span]))
        expected = any_value(value)
        for kv in (decoded.attributes[0], decoded.events[0].attributes[0]):
            assert strictly(kv.value) == strictly(expected)
        assert strictly(decoded.links[0].attributes[0].value) == strictly(expected)
        if isinstance(value, float):
            assert math.copysign(1, decoded.attributes[0].value.double_value) == math.copysign(
                1, value
            )


def test_the_caches_stay_bounded() -> None:
    encoder = TraceEncoder({})

    for i in range(10_000):
        attributes = {"id": f"value-{i}", "n": i, "flag": i % 2 == 0}
        decoded = only_span(encoder.encode([Span(name=f"span {i}", attributes=attributes)]))
        assert decoded.name == f"span {i}"
        assert list(decoded.attributes) == key_values(attributes)

    writer = encoder._span_attributes
    assert 0 < len(writer._strings) <= 8192
    assert 0 < len(writer._ints) <= 8192
    assert len(writer._bools) == 2
    assert 0 < len(encoder._names) <= 8192


# -- the property ----------------------------------------------------------------------------

_scalars = st.one_of(
    texts,
    st.booleans(),
    st.integers(*INT64),
    st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63), True, False, 1.0, 0.0]),
    st.floats(allow_nan=False),
    st.binary(max_size=8),
)
_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(texts, children, max_size=3),
    ),
    max_leaves=8,
)
_attributes = st.dictionaries(texts | st.sampled_from(["k", "rpc.system"]), _values, max_size=6)
_uint32 = st.integers(0, 2**32 - 1)
_uint64 = st.integers(0, 2**64 - 1)
_scopes = st.sampled_from(
    [
        SCOPE,
        Scope("adk_mesh", "0.1.0"),
        Scope("other", "", "https://example.com/s", {"a": 1}),
        Scope(""),
    ]
)
_events = st.builds(
    SpanEvent,
    name=texts,
    time_unix_nano=_uint64,
    attributes=_attributes,
    dropped_attributes_count=_uint32,
)
_links = st.builds(
    SpanLink,
    trace_id=st.integers(1, 2**128 - 1),
    span_id=st.integers(1, 2**64 - 1),
    trace_state=texts,
    flags=_uint32,
    attributes=_attributes,
    dropped_attributes_count=_uint32,
)
_spans = st.builds(
    Span,
    name=texts,
    scope=_scopes,
    trace_id=st.integers(1, 2**128 - 1),
    span_id=st.integers(1, 2**64 - 1),
    parent_span_id=st.just(0) | st.integers(1, 2**64 - 1),
    trace_state=texts,
    flags=_uint32,
    kind=st.integers(0, 5),
    start_time=_uint64,
    end_time=_uint64,
    attributes=_attributes,
    events=st.lists(_events, max_size=2),
    links=st.lists(_links, max_size=2),
    status_code=st.integers(0, 2),
    status_message=texts,
    dropped_attributes_count=_uint32,
    dropped_events_count=_uint32,
    dropped_links_count=_uint32,
)


def expected_request(
    resource: Mapping[str, Any], spans: Sequence[Span]
) -> ExportTraceServiceRequest:
    """The request the encoder must produce, built with the generated classes."""
    groups: list[tuple[Scope, list[trace_pb2.Span]]] = []
    for span in spans:
        group = next((g for scope, g in groups if scope == span.scope), None)
        if group is None:
            group = []
            groups.append((span.scope, group))
        group.append(
            trace_pb2.Span(
                trace_id=span.trace_id.to_bytes(16, "big"),
                span_id=span.span_id.to_bytes(8, "big"),
                trace_state=span.trace_state,
                parent_span_id=span.parent_span_id.to_bytes(8, "big")
                if span.parent_span_id
                else b"",
                flags=span.flags,
                name=span.name,
                kind=span.kind,  # type: ignore[arg-type]
                start_time_unix_nano=span.start_time,
                end_time_unix_nano=span.end_time,
                attributes=key_values(span.attributes),
                dropped_attributes_count=span.dropped_attributes_count,
                events=[
                    trace_pb2.Span.Event(
                        time_unix_nano=e.time_unix_nano,
                        name=e.name,
                        attributes=key_values(e.attributes),
                        dropped_attributes_count=e.dropped_attributes_count,
                    )
                    for e in span.events
                ],
                dropped_events_count=span.dropped_events_count,
                links=[
                    trace_pb2.Span.Link(
                        trace_id=link.trace_id.to_bytes(16, "big"),
                        span_id=link.span_id.to_bytes(8, "big"),
                        trace_state=link.trace_state,
                        attributes=key_values(link.attributes),
                        dropped_attributes_count=link.dropped_attributes_count,
                        flags=link.flags,
                    )
                    for link in span.links
                ],
                dropped_links_count=span.dropped_links_count,
                status=(
                    trace_pb2.Status(code=span.status_code, message=span.status_message)  # type: ignore[arg-type]
                    if span.status_code or span.status_message
                    else None
                ),
            )
        )
    return ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=Resource(attributes=key_values(resource)),
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=InstrumentationScope(
                            name=scope.name,
                            version=scope.version,
                            attributes=key_values(scope.attributes),
                        ),
                        spans=group,
                        schema_url=scope.schema_url,
                    )
                    for scope, group in groups
                ],
            )
        ]
    )


@settings(max_examples=200, deadline=None)
@given(resource=_attributes, batches=st.lists(st.lists(_spans, min_size=1, max_size=4), max_size=3))
def test_decoded_requests_equal_ones_built_with_the_generated_classes(
    resource: dict[str, Any], batches: list[list[Span]]
) -> None:
    # One encoder for every batch: later batches are served from the caches.
    encoder = TraceEncoder(resource)

    for spans in batches:
        decoded = decode_spans(encoder.encode(spans))

        assert decoded == expected_request(resource, spans)
        # Equality of AnyValues already tells True from 1 (different oneof fields); floats
        # must also keep their sign (-0.0 == 0.0 in any comparison).
        assert decoded.SerializeToString(deterministic=True) == expected_request(
            resource, spans
        ).SerializeToString(deterministic=True)


# -- metrics ---------------------------------------------------------------------------------


def decode_metrics(data: bytes) -> ExportMetricsServiceRequest:
    return ExportMetricsServiceRequest.FromString(data)


def test_sums_gauges_and_histograms() -> None:
    meter_scope = Scope("adk_mesh.metrics", "0.1.0", "https://example.com/m", {"x": "y"})
    calls = MetricData(
        name="adk.calls",
        description="calls made",
        unit="{call}",
        kind="sum",
        points=[
            NumberPoint({"agent": "root"}, 10, 20, 3),
            NumberPoint({"agent": "sub"}, 10, 20, -(2**63)),
        ],
        temporality=DELTA,
        monotonic=True,
    )
    level = MetricData(
        name="adk.level",
        description="",
        unit="",
        kind="gauge",
        points=[NumberPoint({}, 0, 30, 0.25), NumberPoint({"n": 1}, 0, 30, -0.0)],
    )
    updown = MetricData(
        name="adk.inflight", description="", unit="", kind="sum", points=[NumberPoint({}, 1, 2, 0)]
    )
    latency = MetricData(
        name="adk.latency",
        description="time taken",
        unit="s",
        kind="histogram",
        points=[
            HistogramPoint(
                {"agent": "root"},
                start_time_unix_nano=5,
                time_unix_nano=9,
                count=4,
                sum=3.5,
                min=0.25,
                max=2.0,
                bucket_counts=[1, 2, 0, 1],
                explicit_bounds=[0.5, 1.0, 1.5],
            ),
            HistogramPoint({}, 5, 9, 0, 0.0, math.inf, -math.inf, [0], []),
        ],
        temporality=CUMULATIVE,
    )
    encoder = MetricsEncoder({"service.name": "svc"}, "https://example.com/r")

    request = decode_metrics(encoder.encode([(meter_scope, [calls, level, updown, latency])]))

    (resource_metrics,) = request.resource_metrics
    assert resource_metrics.resource == Resource(attributes=key_values({"service.name": "svc"}))
    assert resource_metrics.schema_url == "https://example.com/r"
    (scope_metrics,) = resource_metrics.scope_metrics
    assert scope_metrics.scope == InstrumentationScope(
        name="adk_mesh.metrics", version="0.1.0", attributes=key_values({"x": "y"})
    )
    assert scope_metrics.schema_url == "https://example.com/m"
    sum_, gauge, updown_sum, histogram = scope_metrics.metrics

    assert (sum_.name, sum_.description, sum_.unit) == ("adk.calls", "calls made", "{call}")
    assert sum_.WhichOneof("data") == "sum"
    assert sum_.sum.aggregation_temporality == DELTA
    assert sum_.sum.is_monotonic
    first, second = sum_.sum.data_points
    assert list(first.attributes) == key_values({"agent": "root"})
    assert (first.start_time_unix_nano, first.time_unix_nano) == (10, 20)
    assert (first.WhichOneof("value"), first.as_int) == ("as_int", 3)
    assert (second.WhichOneof("value"), second.as_int) == ("as_int", -(2**63))

    assert gauge.WhichOneof("data") == "gauge"
    assert (gauge.description, gauge.unit) == ("", "")
    a, b = gauge.gauge.data_points
    assert (a.WhichOneof("value"), a.as_double, a.time_unix_nano) == ("as_double", 0.25, 30)
    assert b.WhichOneof("value") == "as_double"
    assert math.copysign(1.0, b.as_double) == -1.0

    assert updown_sum.sum.aggregation_temporality == CUMULATIVE
    assert not updown_sum.sum.is_monotonic
    assert updown_sum.sum.data_points[0].WhichOneof("value") == "as_int"

    assert histogram.WhichOneof("data") == "histogram"
    assert histogram.histogram.aggregation_temporality == CUMULATIVE
    full, empty = histogram.histogram.data_points
    assert list(full.attributes) == key_values({"agent": "root"})
    assert (full.start_time_unix_nano, full.time_unix_nano, full.count) == (5, 9, 4)
    assert (full.sum, full.min, full.max) == (3.5, 0.25, 2.0)
    assert list(full.bucket_counts) == [1, 2, 0, 1]
    assert list(full.explicit_bounds) == [0.5, 1.0, 1.5]
    assert empty.count == 0
    assert empty.HasField("sum")
    assert not empty.HasField("min")
    assert not empty.HasField("max")
    assert list(empty.bucket_counts) == [0]
    assert list(empty.explicit_bounds) == []


def test_histogram_buckets_are_packed() -> None:
    point = HistogramPoint({}, 0, 1, 3, 6.0, 1.0, 3.0, [1, 1, 1], [1.5, 2.5])
    metric = MetricData("h", "", "", "histogram", [point])

    data = MetricsEncoder({}).encode([(Scope("s"), [metric])])

    assert b"\x32\x18" + struct.pack("<3Q", 1, 1, 1) in data
    assert b"\x3a\x10" + struct.pack("<2d", 1.5, 2.5) in data


def test_each_scope_gets_its_own_scope_metrics_in_order() -> None:
    gauge = MetricData("g", "", "", "gauge", [NumberPoint({}, 0, 1, 1)])

    request = decode_metrics(
        MetricsEncoder({}).encode([(Scope("b"), [gauge]), (Scope("a"), [gauge, gauge])])
    )

    scopes = request.resource_metrics[0].scope_metrics
    assert [(s.scope.name, len(s.metrics)) for s in scopes] == [("b", 1), ("a", 2)]


def test_no_metrics_is_an_empty_request() -> None:
    assert MetricsEncoder({"service.name": "svc"}).encode([]) == b""


def test_point_attributes_keep_bools_and_ints_apart() -> None:
    points = [NumberPoint({"v": v}, 0, 1, 1) for v in (1, True, 1, True)]
    metric = MetricData("m", "", "", "sum", points)

    request = decode_metrics(MetricsEncoder({}).encode([(Scope("s"), [metric])]))

    decoded = [
        strictly(p.attributes[0].value)
        for p in request.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points
    ]
    assert decoded == [("int_value", 1), ("bool_value", True)] * 2


def test_a_bool_is_not_a_point_value() -> None:
    metric = MetricData("m", "", "", "sum", [NumberPoint({}, 0, 1, True)])

    with pytest.raises(TypeError, match="int or a float"):
        MetricsEncoder({}).encode([(Scope("s"), [metric])])


def test_an_unknown_kind_is_refused() -> None:
    metric = MetricData("m", "", "", "summary", [NumberPoint({}, 0, 1, 1)])

    with pytest.raises(ValueError, match="unknown kind 'summary'"):
        MetricsEncoder({}).encode([(Scope("s"), [metric])])


@pytest.mark.parametrize(
    ("kind", "point"),
    [
        ("histogram", NumberPoint({}, 0, 1, 1)),
        ("sum", HistogramPoint({}, 0, 1, 0, 0.0, 0.0, 0.0, [0], [])),
        ("gauge", HistogramPoint({}, 0, 1, 0, 0.0, 0.0, 0.0, [0], [])),
    ],
)
def test_a_point_must_fit_its_metric(kind: str, point: NumberPoint | HistogramPoint) -> None:
    metric = MetricData("m", "", "", kind, [point])

    with pytest.raises(TypeError, match="has a point"):
        MetricsEncoder({}).encode([(Scope("s"), [metric])])
