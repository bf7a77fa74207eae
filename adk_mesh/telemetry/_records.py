"""Reading spans back: from OTLP JSON lines files (or any OTLP JSON object) into
:class:`SpanRecord`, and printing them as indented trees.

Pure Python over ``json``: usable by a demo or a test without the SDK.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

__all__ = ["SpanRecord", "format_span_trees", "read_trace_files", "records_from_otlp_json"]

# A service's current file, ``<service>.jsonl``, and its rotated ones, ``<service>.jsonl.<n>``
# (the higher ``n``, the newer): see ``_file_exporter``.
_TRACE_FILE = re.compile(r"(?P<current>.+\.jsonl)(?:\.(?P<generation>[1-9][0-9]{0,17}))?")

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


class TraceFile(NamedTuple):
    """One trace file, open for reading."""

    path: Path
    #: 0 for a service's current file, ``n`` for ``<service>.jsonl.<n>`` (the higher, the newer).
    generation: int
    file: BinaryIO
    status: os.stat_result


def _open_regular(path: Path) -> tuple[BinaryIO, os.stat_result] | None:
    # Non-blocking: a FIFO named *.jsonl must not hang the reader; it is then left out.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError:  # gone (rotated out), a dangling link, a directory, not readable
        return None
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        return None
    return os.fdopen(descriptor, "rb"), status


def _listing(directory: Path) -> dict[str, set[int]]:
    """Each service's current file name, with the generations of its files listed (0: the
    current file, always tried)."""
    generations: defaultdict[str, set[int]] = defaultdict(lambda: {0})
    try:
        names = os.listdir(directory)
    except OSError:  # missing, or not a directory
        names = []
    for name in names:
        match = _TRACE_FILE.fullmatch(name)
        # Hidden files are left out, as ``glob("*.jsonl")`` did.
        if match is not None and not name.startswith("."):
            generations[match["current"]].add(int(match["generation"] or 0))
    return generations


@contextmanager
def open_trace_files(directory: Path) -> Iterator[list[TraceFile]]:
    """The trace files of ``directory``, each service's rotated files (the oldest first) and
    its current file, open, each file once (closed on exit).

    A rotation while they are opened hides none that is there before and after: the exporter
    only ever renames a current file, to a number above every rotated file's, and never renames
    a rotated one. So a file rotated when the directory is listed is opened under the name
    listed; a file current then is opened as the current file, or, rotated before that, is
    under a name not listed, which a second listing, after, finds. A file opened under two
    names (current, then rotated) is given once: the same device and inode. An open file stays
    readable when it is renamed or removed.
    """
    with ExitStack() as stack:
        files: defaultdict[str, list[TraceFile]] = defaultdict(list)
        seen: set[tuple[int, int]] = set()
        tried: set[tuple[str, int]] = set()

        def add(current: str, generation: int) -> None:
            tried.add((current, generation))
            path = directory / (f"{current}.{generation}" if generation else current)
            opened = _open_regular(path)
            if opened is None:  # removed since the listing (or never a regular file)
                return
            file, status = opened
            stack.callback(file.close)
            if (status.st_dev, status.st_ino) not in seen:
                seen.add((status.st_dev, status.st_ino))
                files[current].append(TraceFile(path, generation, file, status))

        for current, generations in sorted(_listing(directory).items()):
            # The rotated files first: the current file may join them meanwhile.
            for generation in sorted(generations - {0}):
                add(current, generation)
            add(current, 0)
        for current, generations in sorted(_listing(directory).items()):
            for generation in sorted(generations):
                if (current, generation) not in tried:
                    add(current, generation)
        # Each service's files, the oldest first: by number, the current file last.
        yield [
            item
            for current in sorted(files)
            for item in sorted(
                files[current], key=lambda item: (not item.generation, item.generation)
            )
        ]


def read_trace_files(directory: str | Path) -> list[SpanRecord]:
    """Every span in the OTLP files of ``directory`` (``<service>.jsonl``, one per service,
    and the files rotated from it, ``<service>.jsonl.<n>``), ordered by start time. A
    missing directory holds no spans; a torn last line (a process still writing) is skipped;
    a rotation while the files are read doubles no span, and loses none of a file there before
    and after it (a file rotated out meanwhile, the oldest, may be gone before it is read)."""
    records: list[SpanRecord] = []
    with open_trace_files(Path(directory)) as files:
        for trace_file in files:
            for line in trace_file.file:
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
