"""Reading spans back: from OTLP JSON lines files (or any OTLP JSON object) into
:class:`SpanRecord`, and printing them as indented trees.

Pure Python over ``json``: usable by a demo or a test without the SDK.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SpanRecord", "format_span_trees", "read_trace_files", "records_from_otlp_json"]

_KIND_NAMES = {
    0: "UNSPECIFIED",
    1: "INTERNAL",
    2: "SERVER",
    3: "CLIENT",
    4: "PRODUCER",
    5: "CONSUMER",
}
_STATUS_NAMES = {0: "UNSET", 1: "OK", 2: "ERROR"}

# Attributes worth a glance in a tree line, in this order.
_KEY_ATTRIBUTES = (
    "gen_ai.provider.name",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.tool.call.id",
    "adk_mesh.control_flow",
    "adk_mesh.target_agent",
    "adk_mesh.branch",
    "rpc.grpc.status_code",
    "error.type",
    "adk_mesh.cancelled",
    "adk_mesh.closed_early",
)


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span as exported."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    service_name: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    status_code: str
    status_message: str = ""
    attributes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float:
        return (self.end_time_unix_nano - self.start_time_unix_nano) / 1e6

    @property
    def invocation_id(self) -> str | None:
        value = self.attributes.get("adk_mesh.invocation_id")
        return value if isinstance(value, str) else None


def _any_value(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_any_value(item) for item in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _attributes(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _any_value(item.get("value", {})) for item in items}


def _enum_name(value: Any, names: Mapping[int, str], prefix: str) -> str:
    if isinstance(value, int):
        return names.get(value, str(value))
    if isinstance(value, str):
        return value.removeprefix(prefix)
    return names[0]


def records_from_otlp_json(data: Mapping[str, Any]) -> list[SpanRecord]:
    """The spans of one OTLP JSON ``ExportTraceServiceRequest`` (or ``TracesData``)."""
    records: list[SpanRecord] = []
    for resource_spans in data.get("resourceSpans", []):
        resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
        service = str(resource.get("service.name", "unknown_service"))
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                status = span.get("status", {})
                records.append(
                    SpanRecord(
                        trace_id=span.get("traceId", ""),
                        span_id=span.get("spanId", ""),
                        parent_span_id=span.get("parentSpanId") or None,
                        name=span.get("name", ""),
                        kind=_enum_name(span.get("kind", 0), _KIND_NAMES, "SPAN_KIND_"),
                        service_name=service,
                        start_time_unix_nano=int(span.get("startTimeUnixNano", 0)),
                        end_time_unix_nano=int(span.get("endTimeUnixNano", 0)),
                        status_code=_enum_name(
                            status.get("code", 0), _STATUS_NAMES, "STATUS_CODE_"
                        ),
                        status_message=status.get("message", ""),
                        attributes=_attributes(span.get("attributes", [])),
                    )
                )
    return records


def read_trace_files(directory: str | Path) -> list[SpanRecord]:
    """Every span in the ``*.jsonl`` OTLP files of ``directory`` (one file per service),
    ordered by start time. A missing directory holds no spans; a torn last line (a process
    still writing) is skipped."""
    path = Path(directory)
    if not path.is_dir():
        return []
    records: list[SpanRecord] = []
    for file in sorted(path.glob("*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError:
                continue
            records.extend(records_from_otlp_json(data))
    records.sort(key=lambda record: record.start_time_unix_nano)
    return records


def _line(record: SpanRecord) -> str:
    parts = [
        record.name,
        f"[{record.service_name}]",
        record.kind.lower(),
        f"{record.duration_ms:.1f} ms",
        record.status_code,
    ]
    if record.status_message:
        parts.append(f"({record.status_message})")
    for key in _KEY_ATTRIBUTES:
        if key in record.attributes:
            parts.append(f"{key.rsplit('.', 1)[-1]}={record.attributes[key]}")
    return "  ".join(parts)


def _walk(
    children: Mapping[str | None, list[SpanRecord]],
    parent: str | None,
    depth: int,
    lines: list[str],
) -> None:
    for record in children.get(parent, []):
        lines.append("  " * depth + _line(record))
        _walk(children, record.span_id, depth + 1, lines)


def format_span_trees(spans: Iterable[SpanRecord], invocation_id: str | None = None) -> str:
    """Indented span trees, one per trace: name, service, kind, duration, status, key
    attributes. With ``invocation_id``, only the traces holding a span of that invocation."""
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for record in spans:
        by_trace[record.trace_id].append(record)
    if invocation_id is not None:
        by_trace = defaultdict(
            list,
            {
                trace_id: records
                for trace_id, records in by_trace.items()
                if any(record.invocation_id == invocation_id for record in records)
            },
        )
    blocks: list[str] = []
    ordered = sorted(
        by_trace.items(), key=lambda item: min(r.start_time_unix_nano for r in item[1])
    )
    for trace_id, records in ordered:
        ids = {record.span_id for record in records}
        children: dict[str | None, list[SpanRecord]] = defaultdict(list)
        for record in records:
            parent = record.parent_span_id if record.parent_span_id in ids else None
            children[parent].append(record)
        for siblings in children.values():
            siblings.sort(key=lambda record: record.start_time_unix_nano)
        invocations = sorted({r.invocation_id for r in records if r.invocation_id})
        header = f"trace {trace_id}"
        if invocations:
            header += f"  invocation {', '.join(invocations)}"
        lines = [header]
        _walk(children, None, 1, lines)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
