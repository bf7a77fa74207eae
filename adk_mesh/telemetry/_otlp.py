"""OTLP protobuf encoding of finished spans and metric points, written straight to wire bytes.

The OpenTelemetry SDK encodes by building a protobuf message object per span, event, link,
attribute and value, then serialising the tree: tens of microseconds per span, more than the
rest of a span's life. The wire format is simple enough to write directly, so this module does:
each span becomes a few ``struct`` packs and byte strings joined once, and the output is a
serialized ``ExportTraceServiceRequest`` (or ``ExportMetricsServiceRequest``) that any OTLP
receiver decodes like the SDK's.

Where the time goes, and what is done about it:

* Attributes repeat: the same ``(key, value)`` pairs (``rpc.system=grpc``, an agent's name, a
  status code) come back on span after span. A whole encoded ``KeyValue`` entry, tag and
  length included, is cached per pair for strings, ints and bools, in one bounded cache per
  type: ``True == 1 == 1.0`` and they hash alike, so keying by value alone would send a bool
  as an int. Floats are not cached (``0.0 == -0.0`` too, and NaN never matches itself); they
  are cheap to pack anyway.
* Span names and instrumentation scopes repeat too: their encoded fields are cached.
* Nested messages need their length before their bytes, so every message is built as a list
  of parts and joined once; the outer levels only add up lengths, and the request is joined
  in one final ``b"".join``.

Values follow OTLP's ``AnyValue``: str, bool, int (int64; negative ones as 10-byte two's
complement varints), float, bytes, sequences (``ArrayValue``, nested) and mappings of str
(``KeyValueList``). ``None`` becomes an empty ``AnyValue`` (OTLP's null). An int outside
int64 is sent as its decimal string and any other object as its ``str()``: the recorder
should not let such values through, and losing a whole batch to one of them would be worse.
Strings that cannot be UTF-8 (lone surrogates) have the offending characters replaced, since
a receiver rejects the whole request over one invalid string.

Field numbers are those of ``opentelemetry/proto`` (``trace/v1/trace.proto``,
``metrics/v1/metrics.proto``, ``common/v1/common.proto``); tags are written as constants,
``(field << 3) | wire_type``, with the field named beside each.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

from adk_mesh.telemetry._data import (
    AnyValue,
    FinishedSpan,
    HistogramPoint,
    MetricData,
    NumberPoint,
    Scope,
    SpanEvent,
    SpanLink,
)

__all__ = ["MetricsEncoder", "TraceEncoder"]

#: Entries a cache holds before it is emptied and refilled by what is still in use.
_CACHE_LIMIT: Final = 8192
#: Longer strings are not cached: a few large values (prompts, payloads) would hold megabytes.
_CACHED_STRING_LIMIT: Final = 256

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64: Final = 2**64 - 1

_ONE_BYTE_VARINTS: Final = tuple(bytes((value,)) for value in range(0x80))

# Span fields 1 and 2 (trace_id, span_id) with their tags; Span.Link numbers them alike.
_IDS: Final = struct.Struct(">HQQHQ")
_TRACE_ID_TAG: Final = 0x0A10  # field 1, length-delimited, 16 bytes
_SPAN_ID_TAG: Final = 0x1208  # field 2, length-delimited, 8 bytes
# Span fields 7, 8 (start and end, fixed64) and 16 (flags, fixed32: a two-byte tag).
_SPAN_TIMES_AND_FLAGS: Final = struct.Struct("<BQBQHI")
_PARENT_SPAN_ID: Final = struct.Struct(">HQ")  # field 4, 8 bytes
_FIXED64_FIELD: Final = struct.Struct("<BQ")
_FIXED32_FIELD: Final = struct.Struct("<BI")
_DOUBLE_FIELD: Final = struct.Struct("<Bd")
_SFIXED64_FIELD: Final = struct.Struct("<Bq")
# NumberDataPoint and HistogramDataPoint fields 2 and 3 (start and time, fixed64).
_POINT_TIMES: Final = struct.Struct("<BQBQ")

# Span.kind (field 6) for the five kinds; UNSPECIFIED (0) is the default and is left out.
_SPAN_KINDS: Final = (b"", *(b"\x30" + bytes((kind,)) for kind in range(1, 6)))


def _varint(value: int) -> bytes:
    """A non-negative integer as a protobuf base-128 varint."""
    if value < 0x80:
        return _ONE_BYTE_VARINTS[value]
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _text(tag: bytes, value: str) -> bytes:
    return _length_delimited(tag, value.encode("utf-8", "replace"))


def _text_if_set(tag: bytes, value: str) -> bytes:
    return _text(tag, value) if value else b""


def _varint_if_set(tag: bytes, value: int) -> bytes:
    return tag + _varint(value) if value else b""


def _any_value(value: AnyValue) -> bytes:
    """The body of an ``AnyValue`` message (its one field set, or none for ``None``)."""
    if isinstance(value, str):
        return _text(b"\x0a", value)  # string_value = 1
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"  # bool_value = 2
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return b"\x18" + _varint(value & _UINT64)  # int_value = 3
        return _text(b"\x0a", str(value))
    if isinstance(value, float):
        return _DOUBLE_FIELD.pack(0x21, value)  # double_value = 4
    if isinstance(value, bytes | bytearray | memoryview):
        return _length_delimited(b"\x3a", bytes(value))  # bytes_value = 7
    if isinstance(value, Mapping):
        # kvlist_value = 6: a KeyValueList, whose values = 1 are KeyValues.
        entries = b"".join(_length_delimited(b"\x0a", _key_value(k, v)) for k, v in value.items())
        return _length_delimited(b"\x32", entries)
    if isinstance(value, Sequence):
        # array_value = 5: an ArrayValue, whose values = 1 are AnyValues.
        elements = b"".join(_length_delimited(b"\x0a", _any_value(v)) for v in value)
        return _length_delimited(b"\x2a", elements)
    if value is None:
        return b""
    return _text(b"\x0a", str(value))


def _key_value(key: str, value: AnyValue) -> bytes:
    """The body of a ``KeyValue`` message: key = 1, value = 2."""
    return _text(b"\x0a", key) + _length_delimited(b"\x12", _any_value(value))


class _AttributeWriter:
    """Writes an attribute mapping as the repeated ``KeyValue`` field ``tag`` of a message.

    Caches whole entries (tag, length and ``KeyValue``) per ``(key, value)``, one cache per
    value type so that ``True``, ``1`` and ``"1"`` never share an entry.
    """

    __slots__ = ("_bools", "_ints", "_strings", "_tag")

    def __init__(self, field_number: int) -> None:
        self._tag = _varint(field_number << 3 | 2)
        self._strings: dict[tuple[str, str], bytes] = {}
        self._ints: dict[tuple[str, int], bytes] = {}
        self._bools: dict[tuple[str, bool], bytes] = {}

    def write(self, parts: list[bytes], attributes: Mapping[str, AnyValue]) -> None:
        """Append the encoded entries of ``attributes`` to ``parts``."""
        tag = self._tag
        append = parts.append
        for key, value in attributes.items():
            kind = value.__class__
            cache: dict[Any, bytes]
            if kind is str:
                if len(value) > _CACHED_STRING_LIMIT:
                    append(_length_delimited(tag, _key_value(key, value)))
                    continue
                cache = self._strings
            elif kind is int:
                cache = self._ints
            elif kind is bool:
                cache = self._bools
            else:
                append(_length_delimited(tag, _key_value(key, value)))
                continue
            entry = cache.get((key, value))
            if entry is None:
                entry = _length_delimited(tag, _key_value(key, value))
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[key, value] = entry
            append(entry)


def _attributes(field_number: int, attributes: Mapping[str, AnyValue]) -> bytes:
    """Attributes encoded once (resource, scope), without caching their entries."""
    tag = _varint(field_number << 3 | 2)
    return b"".join(_length_delimited(tag, _key_value(k, v)) for k, v in attributes.items())


class _RequestWriter:
    """What trace and metrics requests share: the resource, scope headers, the framing.

    ``ExportTraceServiceRequest`` / ``ResourceSpans`` / ``ScopeSpans`` and their metrics
    counterparts use the same field numbers at every level, so one writer frames both.
    """

    def __init__(
        self, resource_attributes: Mapping[str, AnyValue], resource_schema_url: str
    ) -> None:
        # ResourceSpans / ResourceMetrics: resource = 1 (Resource: attributes = 1), schema_url = 3.
        self._resource = _length_delimited(b"\x0a", _attributes(1, resource_attributes))
        self._resource_schema_url = _text_if_set(b"\x1a", resource_schema_url)
        # id(scope) -> (scope, header); holding the scope keeps its id from being reused.
        self._scope_headers: dict[int, tuple[Scope, bytes]] = {}

    def _scope_header(self, scope: Scope) -> bytes:
        """ScopeSpans / ScopeMetrics fields scope = 1 and schema_url = 3, encoded."""
        cached = self._scope_headers.get(id(scope))
        if cached is not None and cached[0] is scope:
            return cached[1]
        # InstrumentationScope: name = 1, version = 2, attributes = 3.
        body = (
            _text_if_set(b"\x0a", scope.name)
            + _text_if_set(b"\x12", scope.version)
            + _attributes(3, scope.attributes)
        )
        header = _length_delimited(b"\x0a", body) + _text_if_set(b"\x1a", scope.schema_url)
        if len(self._scope_headers) >= _CACHE_LIMIT:
            self._scope_headers.clear()
        self._scope_headers[id(scope)] = (scope, header)
        return header

    def _request(self, scope_groups: Sequence[list[bytes]]) -> bytes:
        """The request around scope groups, each a list of a header and encoded entries.

        The groups are joined only once, in the request: the levels above just add lengths.
        """
        # ResourceSpans / ResourceMetrics: scope_spans / scope_metrics = 2.
        groups_size = 0
        group_lengths = []
        for parts in scope_groups:
            length = sum(map(len, parts))
            group_lengths.append(_varint(length))
            groups_size += 1 + len(group_lengths[-1]) + length
        resource_size = len(self._resource) + groups_size + len(self._resource_schema_url)
        # Export*ServiceRequest: resource_spans / resource_metrics = 1.
        out = [b"\x0a", _varint(resource_size), self._resource]
        for parts, length_prefix in zip(scope_groups, group_lengths, strict=True):
            out.append(b"\x12")
            out.append(length_prefix)
            out.extend(parts)
        out.append(self._resource_schema_url)
        return b"".join(out)


class TraceEncoder(_RequestWriter):
    """Encodes finished spans as a serialized OTLP ``ExportTraceServiceRequest``.

    One encoder per resource (process), used by the exporter thread.

    Args:
        resource_attributes: the resource's attributes (``service.name``, ...).
        resource_schema_url: the resource's schema URL, if any.
    """

    def __init__(
        self, resource_attributes: Mapping[str, AnyValue], resource_schema_url: str = ""
    ) -> None:
        super().__init__(resource_attributes, resource_schema_url)
        self._span_attributes = _AttributeWriter(9)
        self._event_attributes = _AttributeWriter(3)
        self._link_attributes = _AttributeWriter(4)
        self._names: dict[str, bytes] = {}

    def encode(self, spans: Sequence[FinishedSpan]) -> bytes:
        """The request carrying ``spans`` in one ``ResourceSpans``, one ``ScopeSpans`` per
        scope in first-seen order (equal scopes share one); ``b""`` when there are none."""
        encode_span = self.encode_span
        return self.frame([(span.scope, encode_span(span)) for span in spans])

    def frame(self, encoded: Sequence[tuple[Scope, bytes]]) -> bytes:
        """The request around spans already encoded by :meth:`encode_span`, grouped as
        :meth:`encode` groups them; ``b""`` when there are none.

        Encoding and framing are separate steps, so spans can be encoded whenever suits the
        caller (as each ends, say) and framed into one request later.
        """
        if not encoded:
            return b""
        groups: dict[bytes, list[bytes]] = {}
        last_scope: Scope | None = None
        group: list[bytes] = []
        for scope, body in encoded:
            if scope is not last_scope:
                header = self._scope_header(scope)
                group = groups.setdefault(header, [header])
                last_scope = scope
            group.append(b"\x12" + _varint(len(body)))  # ScopeSpans.spans = 2
            group.append(body)
        return self._request(list(groups.values()))

    def encode_span(self, span: FinishedSpan) -> bytes:
        """One ``Span`` message (its fields, without the enclosing tag and length)."""
        trace_id = span.trace_id
        parts = [
            _IDS.pack(_TRACE_ID_TAG, trace_id >> 64, trace_id & _UINT64, _SPAN_ID_TAG, span.span_id)
        ]
        if span.trace_state:
            parts.append(_text(b"\x1a", span.trace_state))  # trace_state = 3
        if span.parent_span_id:
            parts.append(_PARENT_SPAN_ID.pack(0x2208, span.parent_span_id))  # parent_span_id = 4
        name = self._names.get(span.name)
        if name is None:
            name = self._name_field(span.name)
        parts.append(name)
        kind = span.kind
        parts.append(_SPAN_KINDS[kind] if 0 <= kind < 6 else b"\x30" + _varint(kind & _UINT64))
        parts.append(
            # start_time_unix_nano = 7, end_time_unix_nano = 8, flags = 16
            _SPAN_TIMES_AND_FLAGS.pack(
                0x39, span.start_time, 0x41, span.end_time, 0x0185, span.flags
            )
        )
        self._span_attributes.write(parts, span.attributes)
        if span.dropped_attributes_count:
            parts.append(b"\x50" + _varint(span.dropped_attributes_count))  # = 10
        for event in span.events:
            parts.append(_length_delimited(b"\x5a", self._encode_event(event)))  # events = 11
        if span.dropped_events_count:
            parts.append(b"\x60" + _varint(span.dropped_events_count))  # = 12
        for link in span.links:
            parts.append(_length_delimited(b"\x6a", self._encode_link(link)))  # links = 13
        if span.dropped_links_count:
            parts.append(b"\x70" + _varint(span.dropped_links_count))  # = 14
        if span.status_code or span.status_message:
            parts.append(_status(span.status_code, span.status_message))
        return b"".join(parts)

    def _name_field(self, name: str) -> bytes:
        field = _text(b"\x2a", name)  # Span.name = 5
        if len(self._names) >= _CACHE_LIMIT:
            self._names.clear()
        self._names[name] = field
        return field

    def _encode_event(self, event: SpanEvent) -> bytes:
        # Span.Event: time_unix_nano = 1, name = 2, attributes = 3, dropped_attributes_count = 4
        parts = [_FIXED64_FIELD.pack(0x09, event.time_unix_nano), _text(b"\x12", event.name)]
        self._event_attributes.write(parts, event.attributes)
        parts.append(_varint_if_set(b"\x20", event.dropped_attributes_count))
        return b"".join(parts)

    def _encode_link(self, link: SpanLink) -> bytes:
        # Span.Link: trace_id = 1, span_id = 2, trace_state = 3, attributes = 4,
        # dropped_attributes_count = 5, flags = 6 (fixed32)
        trace_id = link.trace_id
        parts = [
            _IDS.pack(
                _TRACE_ID_TAG, trace_id >> 64, trace_id & _UINT64, _SPAN_ID_TAG, link.span_id
            ),
            _text_if_set(b"\x1a", link.trace_state),
        ]
        self._link_attributes.write(parts, link.attributes)
        parts.append(_varint_if_set(b"\x28", link.dropped_attributes_count))
        parts.append(_FIXED32_FIELD.pack(0x35, link.flags))
        return b"".join(parts)


# Span.status = 15 for the codes without a message (Status: message = 2, code = 3).
_STATUSES_WITHOUT_MESSAGE: Final = (b"", b"\x7a\x02\x18\x01", b"\x7a\x02\x18\x02")


def _status(code: int, message: str) -> bytes:
    if not message and 0 <= code < len(_STATUSES_WITHOUT_MESSAGE):
        return _STATUSES_WITHOUT_MESSAGE[code]
    return _length_delimited(
        b"\x7a", _text_if_set(b"\x12", message) + _varint_if_set(b"\x18", code)
    )


class MetricsEncoder(_RequestWriter):
    """Encodes metric points as a serialized OTLP ``ExportMetricsServiceRequest``.

    One encoder per resource (process), used by the exporter thread.

    Args:
        resource_attributes: the resource's attributes (``service.name``, ...).
        resource_schema_url: the resource's schema URL, if any.
    """

    def __init__(
        self, resource_attributes: Mapping[str, AnyValue], resource_schema_url: str = ""
    ) -> None:
        super().__init__(resource_attributes, resource_schema_url)
        self._number_attributes = _AttributeWriter(7)
        self._histogram_attributes = _AttributeWriter(9)

    def encode(self, scopes: Sequence[tuple[Scope, Sequence[MetricData]]]) -> bytes:
        """The request carrying each scope's metrics in one ``ScopeMetrics``, in the order
        given; ``b""`` when there are no scopes.

        Raises:
            ValueError: a metric's ``kind`` is not ``"sum"``, ``"gauge"`` or ``"histogram"``.
            TypeError: a point does not fit its metric's kind, or a number point's value is
                a bool.
        """
        if not scopes:
            return b""
        groups = []
        for scope, metrics in scopes:
            group = [self._scope_header(scope)]
            for metric in metrics:
                # ScopeMetrics.metrics = 2
                group.append(_length_delimited(b"\x12", self._encode_metric(metric)))
            groups.append(group)
        return self._request(groups)

    def _encode_metric(self, metric: MetricData) -> bytes:
        # Metric: name = 1, description = 2, unit = 3, gauge = 5, sum = 7, histogram = 9.
        # Sum: data_points = 1, aggregation_temporality = 2, is_monotonic = 3;
        # Gauge: data_points = 1; Histogram: data_points = 1, aggregation_temporality = 2.
        header = (
            _text(b"\x0a", metric.name)
            + _text_if_set(b"\x12", metric.description)
            + _text_if_set(b"\x1a", metric.unit)
        )
        points = []
        if metric.kind == "histogram":
            for point in metric.points:
                if not isinstance(point, HistogramPoint):
                    raise TypeError(f"histogram {metric.name!r} has a point {point!r}")
                points.append(_length_delimited(b"\x0a", self._encode_histogram_point(point)))
            points.append(b"\x10" + _varint(metric.temporality))
            return header + _length_delimited(b"\x4a", b"".join(points))
        if metric.kind not in ("sum", "gauge"):
            raise ValueError(f"metric {metric.name!r} has an unknown kind {metric.kind!r}")
        for point in metric.points:
            if not isinstance(point, NumberPoint):
                raise TypeError(f"{metric.kind} {metric.name!r} has a point {point!r}")
            points.append(_length_delimited(b"\x0a", self._encode_number_point(point)))
        if metric.kind == "gauge":
            return header + _length_delimited(b"\x2a", b"".join(points))
        points.append(b"\x10" + _varint(metric.temporality))
        if metric.monotonic:
            points.append(b"\x18\x01")
        return header + _length_delimited(b"\x3a", b"".join(points))

    def _encode_number_point(self, point: NumberPoint) -> bytes:
        # NumberDataPoint: start_time_unix_nano = 2, time_unix_nano = 3, as_double = 4,
        # as_int = 6 (sfixed64), attributes = 7
        parts = [_POINT_TIMES.pack(0x11, point.start_time_unix_nano, 0x19, point.time_unix_nano)]
        value = point.value
        if isinstance(value, bool):
            raise TypeError(f"a metric point's value must be an int or a float, not {value!r}")
        if isinstance(value, int):
            parts.append(_SFIXED64_FIELD.pack(0x31, value))
        else:
            parts.append(_DOUBLE_FIELD.pack(0x21, value))
        self._number_attributes.write(parts, point.attributes)
        return b"".join(parts)

    def _encode_histogram_point(self, point: HistogramPoint) -> bytes:
        # HistogramDataPoint: start_time_unix_nano = 2, time_unix_nano = 3, count = 4,
        # sum = 5, bucket_counts = 6 (packed fixed64), explicit_bounds = 7 (packed double),
        # attributes = 9, min = 11, max = 12
        parts = [
            _POINT_TIMES.pack(0x11, point.start_time_unix_nano, 0x19, point.time_unix_nano),
            _FIXED64_FIELD.pack(0x21, point.count),
            _DOUBLE_FIELD.pack(0x29, point.sum),
        ]
        if point.bucket_counts:
            counts = struct.pack(f"<{len(point.bucket_counts)}Q", *point.bucket_counts)
            parts.append(_length_delimited(b"\x32", counts))
        if point.explicit_bounds:
            bounds = struct.pack(f"<{len(point.explicit_bounds)}d", *point.explicit_bounds)
            parts.append(_length_delimited(b"\x3a", bounds))
        self._histogram_attributes.write(parts, point.attributes)
        # min and max mean nothing without a measurement (they would be +-inf): left out.
        if point.count:
            parts.append(_DOUBLE_FIELD.pack(0x59, point.min))
            parts.append(_DOUBLE_FIELD.pack(0x61, point.max))
        return b"".join(parts)
