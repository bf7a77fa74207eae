"""A span sink that appends OTLP JSON lines to a file (the OTLP file-exporter format).

Each ended span appends one line: an ``ExportTraceServiceRequest`` in the protobuf JSON
mapping with the OTLP JSON rules (trace and span ids as hex, enums as integers). One small
append per span, at once: the file is complete the moment a run ends, which is what a demo
reading it back needs. Imported only when configured.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from adk_mesh.telemetry._otlp import TraceEncoder

if TYPE_CHECKING:
    from adk_mesh.telemetry._tracer import LeanSpan

__all__ = ["JsonLinesSink", "otlp_json"]

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


class JsonLinesSink:
    """Appends each ended span to ``path`` as one OTLP JSON line."""

    def __init__(self, path: str | Path, resource_attributes: Mapping[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._encoder = TraceEncoder(resource_attributes)
        self._lock = threading.Lock()
        self._closed = False

    def on_end(self, span: LeanSpan) -> None:
        if self._closed:
            return
        request = ExportTraceServiceRequest.FromString(self._encoder.encode([span]))
        line = json.dumps(otlp_json(request), separators=(",", ":"))
        with self._lock, self.path.open("a", encoding="utf-8") as file:
            file.write(line + "\n")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        self._closed = True
