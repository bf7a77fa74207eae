"""A span exporter that appends OTLP JSON lines to one file per service (the OTLP file format).

Each export appends one line per service to ``<directory>/<service.name>.jsonl``: an
``ExportTraceServiceRequest`` encoded by the official OTLP encoder
(``opentelemetry-exporter-otlp-proto-common``), written in the protobuf JSON mapping with the
OTLP JSON rules (trace and span ids as hex, enums as integers). Behind a
``SimpleSpanProcessor`` each ended span is one line at once, so the file is complete the moment
a run ends, which is what a demo reading it back needs.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from adk_mesh.errors import ConfigError

__all__ = ["OtlpJsonFileSpanExporter", "otlp_json"]

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})
_DEFAULT_NAME = "adk-mesh"


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


def file_name(service_name: str) -> str:
    """The file a service's spans go to: its name with anything unsafe in a path replaced."""
    return (re.sub(r"[^A-Za-z0-9_.-]", "_", service_name) or _DEFAULT_NAME) + ".jsonl"


class OtlpJsonFileSpanExporter(SpanExporter):
    """Appends spans as OTLP JSON lines to ``<directory>/<service.name>.jsonl``.

    Raises:
        ConfigError: ``directory`` cannot be created (a file is in its way, no permission).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            # At a service's start (configure_telemetry): its one-line configuration error,
            # not a traceback.
            raise ConfigError(
                f"the trace directory {str(self.directory)!r} (ADK_MESH_TRACE_DIR) cannot be "
                f"created: {error.strerror or error}"
            ) from error
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        by_service: dict[str, list[ReadableSpan]] = defaultdict(list)
        for span in spans:
            name = span.resource.attributes.get("service.name") if span.resource else None
            by_service[str(name or _DEFAULT_NAME)].append(span)
        try:
            with self._lock:
                for service, group in by_service.items():
                    line = json.dumps(otlp_json(encode_spans(group)), separators=(",", ":"))
                    self._append(self.directory / file_name(service), line + "\n")
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _append(self, path: Path, line: str) -> None:
        try:
            file = path.open("a", encoding="utf-8")
        except FileNotFoundError:
            # The directory was removed under a running service (its traces cleared): made
            # again, or this process would write no trace until it restarts.
            self.directory.mkdir(parents=True, exist_ok=True)
            file = path.open("a", encoding="utf-8")
        with file:
            file.write(line)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        self._closed = True
