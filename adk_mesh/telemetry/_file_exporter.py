"""A span exporter that appends OTLP JSON lines to a file (the OTLP file-exporter format).

Each export appends one line: an ``ExportTraceServiceRequest`` in the protobuf JSON mapping
with the OTLP JSON rules (trace and span ids as hex, enums as integers). Imported only when
configured: it needs the SDK and the OTLP encoder.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["JsonLinesSpanExporter", "otlp_json"]

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hex_ids(value: Any) -> Any:
    """The protobuf JSON mapping writes bytes as base64; OTLP JSON wants ids as hex."""
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex()
            if key in _ID_KEYS and isinstance(item, str)
            else _hex_ids(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value


def otlp_json(request: Any) -> dict[str, Any]:
    """An OTLP protobuf message as its OTLP JSON object."""
    mapped = json_format.MessageToDict(request, use_integers_for_enums=True)
    result: dict[str, Any] = _hex_ids(mapped)
    return result


class JsonLinesSpanExporter(SpanExporter):
    """Appends each batch of spans to ``path`` as one OTLP JSON line."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        line = json.dumps(otlp_json(encode_spans(spans)), separators=(",", ":"))
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as file:
                file.write(line + "\n")
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._closed = True

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True
