"""A span exporter that appends OTLP JSON lines to one file per service (the OTLP file format).

Each export appends one line per service to ``<directory>/<service.name>.jsonl``: an
``ExportTraceServiceRequest`` encoded by the official OTLP encoder
(``opentelemetry-exporter-otlp-proto-common``), written in the protobuf JSON mapping with the
OTLP JSON rules (trace and span ids as hex, enums as integers). Behind a
``SimpleSpanProcessor`` each ended span is one line at once, so the file is complete the moment
a run ends, which is what a demo reading it back needs.

A file is rotated before a line would take it past ``max_bytes`` (``ADK_MESH_TRACE_FILE_MAX_BYTES``,
32 MiB by default; 0 never rotates): ``<service>.jsonl`` is renamed ``<service>.jsonl.<n>``, ``n``
one more than the newest rotated file's (1 for the first), and only the newest ``backups`` of
them are kept (``ADK_MESH_TRACE_FILE_BACKUPS``, 3 by default), so a long-running service cannot
fill its disk. A rotated file is never renamed again, only removed, so a reader that listed the
files finds each under the name it listed, and the current file, if rotated meanwhile, under a
number it did not list (``open_trace_files``). Each line is one ``write`` on a file opened for
appending, so several processes may write one file (replicas of one service); a rotation holds
an exclusive ``flock`` on the file it renames, so they rotate it one at a time.
"""

from __future__ import annotations

import base64
import json
import os
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

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: rotation is safe within one process only
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_TRACE_FILE_BACKUPS",
    "DEFAULT_TRACE_FILE_MAX_BYTES",
    "TRACE_FILE_BACKUPS_ENV",
    "TRACE_FILE_MAX_BYTES_ENV",
    "OtlpJsonFileSpanExporter",
    "otlp_json",
]

#: The size (bytes) past which a service's trace file is rotated; 0: never.
TRACE_FILE_MAX_BYTES_ENV = "ADK_MESH_TRACE_FILE_MAX_BYTES"
#: How many rotated files (``<service>.jsonl.<n>``, the newest) a service keeps.
TRACE_FILE_BACKUPS_ENV = "ADK_MESH_TRACE_FILE_BACKUPS"
DEFAULT_TRACE_FILE_MAX_BYTES = 32 * 1024 * 1024
DEFAULT_TRACE_FILE_BACKUPS = 3

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


# The number of a rotated file: no leading zero (one file, one name), at most 18 digits (an int64).
# ``_records`` reads the same names.
_ROTATED_NUMBER = re.compile(r"[1-9][0-9]{0,17}")


def rotated_path(path: Path, number: int) -> Path:
    """``<service>.jsonl.<number>``: after the suffix, so that no service's own file
    (``svc.1.jsonl`` of service ``svc.1``) is ever taken for another's rotated one."""
    return path.with_name(f"{path.name}.{number}")


def rotated_numbers(path: Path) -> list[int]:
    """The numbers of the files rotated from ``path``, the oldest (lowest) first."""
    prefix = path.name + "."
    return sorted(
        int(name[len(prefix) :])
        for name in os.listdir(path.parent)
        if name.startswith(prefix) and _ROTATED_NUMBER.fullmatch(name[len(prefix) :])
    )


def _limit(value: int | None, name: str, variable: str, default: int) -> int:
    """``value``, else ``variable`` from the environment, else ``default``: 0 or more."""
    if value is None:
        text = os.environ.get(variable, "").strip()
        if not text:
            return default
        if not text.isdecimal():
            raise ConfigError(f"{variable} must be a whole number, 0 or more, not {text!r}")
        return int(text)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a whole number, 0 or more, not {value!r}")
    return value


class OtlpJsonFileSpanExporter(SpanExporter):
    """Appends spans as OTLP JSON lines to ``<directory>/<service.name>.jsonl``, rotated by size.

    Args:
        directory: where the files go (made if missing).
        max_bytes: rotate a file before a line would take it past this size; 0: never.
            Default: ``ADK_MESH_TRACE_FILE_MAX_BYTES``, else 32 MiB.
        backups: how many rotated files to keep, the newest; 0: a full file is started again.
            Default: ``ADK_MESH_TRACE_FILE_BACKUPS``, else 3.

    Raises:
        ConfigError: ``directory`` cannot be created (a file is in its way, no permission), or a
            limit is not a whole number, 0 or more.
    """

    def __init__(
        self, directory: str | Path, *, max_bytes: int | None = None, backups: int | None = None
    ) -> None:
        self.max_bytes = _limit(
            max_bytes, "max_bytes", TRACE_FILE_MAX_BYTES_ENV, DEFAULT_TRACE_FILE_MAX_BYTES
        )
        self.backups = _limit(
            backups, "backups", TRACE_FILE_BACKUPS_ENV, DEFAULT_TRACE_FILE_BACKUPS
        )
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
                    data = (line + "\n").encode("utf-8")
                    self._append(self.directory / file_name(service), data)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _open(self, path: Path) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        try:
            return os.open(path, flags, 0o666)
        except FileNotFoundError:
            # The directory was removed under a running service (its traces cleared): made
            # again, or this process would write no trace until it restarts.
            self.directory.mkdir(parents=True, exist_ok=True)
            return os.open(path, flags, 0o666)

    def _append(self, path: Path, data: bytes) -> None:
        descriptor = self._open(path)
        try:
            if self.max_bytes:
                size = os.fstat(descriptor).st_size
                if size and size + len(data) > self.max_bytes:
                    self._rotate(path, descriptor)
                    # Closing it releases the rotation's lock; the line goes to the new file.
                    os.close(descriptor)
                    descriptor = -1
                    descriptor = self._open(path)
            # One write of the whole line on a file opened for appending: another process's
            # line never lands inside it.
            while data:
                data = data[os.write(descriptor, data) :]
        finally:
            if descriptor >= 0:
                os.close(descriptor)

    def _rotate(self, path: Path, descriptor: int) -> None:
        """Rotate ``path``, open as ``descriptor``, under an exclusive lock on it."""
        if fcntl is not None:
            # Another process rotating this file waits here until this one closes it.
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        # Unless another process rotated it while this one waited: ``path`` is then a new
        # file, and rotating again would rename it over the one just rotated.
        if _same_file(path, descriptor):
            self._shift(path)

    def _shift(self, path: Path) -> None:
        if not self.backups:
            path.unlink(missing_ok=True)
            return
        # The current file is the only one ever renamed, to a number above every rotated
        # file's: no name is missing for a moment (as when each file moved one name up), and
        # a reader that listed the files knows that a name it did not list is a file rotated
        # since. The rotations of one file take turns (the lock), so the numbers only grow.
        numbers = rotated_numbers(path)
        os.replace(path, rotated_path(path, (numbers[-1] if numbers else 0) + 1))
        # Then the oldest beyond the newest ``backups`` (the one just rotated among them) go.
        for number in numbers[: max(len(numbers) + 1 - self.backups, 0)]:
            rotated_path(path, number).unlink(missing_ok=True)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        self._closed = True


def _same_file(path: Path, descriptor: int) -> bool:
    try:
        status = path.stat()
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (status.st_dev, status.st_ino) == (opened.st_dev, opened.st_ino)
