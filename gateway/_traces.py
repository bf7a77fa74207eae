"""One invocation's trace as JSON, for the web UI's waterfall.

The gateway includes the router :func:`create_router` makes (``gateway._app.mount_ui``) and
serves the UI's static files from :data:`UI_DIRECTORY` at ``/ui``::

    GET /debug/traces/{invocation_id}

answers every trace that holds a span of that invocation (every span of the mesh carries
``adk_mesh.invocation_id``), each as a flat, depth-first list of spans with their service,
nesting depth, start offset and duration in milliseconds, ready to draw. The caller is
authenticated as on every other route, and sees only invocations of its own user (the spans'
``adk_mesh.user_id``): another user's invocation reads as one with no spans, and a trace shared
with one (a client's own trace around several users' turns) is shown without its spans. Spans
come from:

* **the trace files of a local mesh** — the OTLP JSON lines ``adk-mesh up`` has every service
  append to ``<state_dir>/traces/<service>.jsonl`` (``ADK_MESH_TRACE_DIR``) and the files
  rotated from them (``<service>.jsonl.<n>``); read incrementally, only what was appended
  since the last request, and at most ``max_spans`` spans kept in memory
  (``ADK_MESH_TRACE_MEMORY_SPANS``, 50,000 by default; the oldest traces dropped whole);
* **an OTLP backend's query API**, where one is configured (``ADK_MESH_TRACE_QUERY_URL``): the
  Jaeger HTTP query API (``/api/services``, then ``/api/traces?service=...&tags=...`` per
  service, merged by trace id).

With neither configured the answer says so (``"source": "none"``) rather than failing: a
gateway in front of a remote mesh may have no trace source at all. A backend that cannot be
queried is a 502 problem.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import httpx
from fastapi import APIRouter, Depends, FastAPI
from fastapi import Path as PathParameter
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from adk_mesh.credentials._redaction import redact_http_logs
from adk_mesh.errors import ConfigError
from adk_mesh.telemetry import TRACE_DIR_ENV, SpanRecord, records_from_otlp_json
from adk_mesh.telemetry._records import TraceFile, open_trace_files
from gateway._problems import Problem

__all__ = [
    "DEFAULT_TRACE_MEMORY_SPANS",
    "TRACE_MEMORY_SPANS_ENV",
    "TRACE_PATH",
    "TRACE_QUERY_URL_ENV",
    "UI_DIRECTORY",
    "InvocationTrace",
    "TraceSources",
    "create_router",
    "invocation_trace",
    "records_from_jaeger",
    "trace_router",
]

logger = logging.getLogger("gateway")

#: The web UI's static files (HTML, CSS, JavaScript modules), served by the gateway at ``/ui``.
UI_DIRECTORY: Final = Path(__file__).resolve().parent / "ui"

#: The route of one invocation's trace.
TRACE_PATH: Final = "/debug/traces/{invocation_id}"

#: Base URL of a Jaeger query service (``http://localhost:16686``) to read traces from.
TRACE_QUERY_URL_ENV: Final = "ADK_MESH_TRACE_QUERY_URL"

#: How many spans read from trace files the gateway keeps in memory.
TRACE_MEMORY_SPANS_ENV: Final = "ADK_MESH_TRACE_MEMORY_SPANS"
#: About 2.6 KB a span of a dozen attributes (more with captured content): some 130 MB.
DEFAULT_TRACE_MEMORY_SPANS: Final = 50_000

INVOCATION_ATTRIBUTE: Final = "adk_mesh.invocation_id"
USER_ATTRIBUTE: Final = "adk_mesh.user_id"

_INVOCATION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
# Long attribute values (captured prompts, tool payloads) are cut for the page.
_MAX_ATTRIBUTE_CHARS = 2000
# OTLP times are fixed64 nanoseconds.
_UINT64_LIMIT = 2**64
# Jaeger's own services report spans of their own; they are never part of the mesh's traces.
_JAEGER_SERVICES = frozenset({"jaeger", "jaeger-query", "jaeger-all-in-one", "jaeger-collector"})
_JAEGER_KINDS = {
    "server": "SERVER",
    "client": "CLIENT",
    "producer": "PRODUCER",
    "consumer": "CONSUMER",
    "internal": "INTERNAL",
}


@dataclass(frozen=True, slots=True)
class TraceSources:
    """Where spans are read from.

    Attributes:
        trace_dir: directory of OTLP JSON lines files, one per service (``adk-mesh up``).
        query_url: base URL of a Jaeger query service.
        lookback_seconds: how far back a backend query searches.
        timeout_seconds: the budget of one backend query.
        max_spans: how many spans read from ``trace_dir`` are kept in memory; past it, the
            traces least recently added to are dropped, whole.
    """

    trace_dir: Path | None = None
    query_url: str | None = None
    lookback_seconds: float = 2 * 24 * 3600
    timeout_seconds: float = 10.0
    max_spans: int = DEFAULT_TRACE_MEMORY_SPANS

    def __post_init__(self) -> None:
        if isinstance(self.max_spans, bool) or not isinstance(self.max_spans, int):
            raise ConfigError(f"max_spans must be a whole number, not {self.max_spans!r}")
        if self.max_spans < 1:
            raise ConfigError(f"max_spans must be 1 or more, not {self.max_spans}")

    @classmethod
    def from_environment(
        cls,
        environment: Mapping[str, str] | None = None,
        *,
        trace_dir: Path | None = None,
        max_spans: int | None = None,
    ) -> TraceSources:
        """``ADK_MESH_TRACE_QUERY_URL``, ``ADK_MESH_TRACE_DIR`` and
        ``ADK_MESH_TRACE_MEMORY_SPANS`` (empty means unset); ``trace_dir`` and ``max_spans``,
        when given, before the environment's.

        Raises:
            ConfigError: ``ADK_MESH_TRACE_MEMORY_SPANS`` is not a whole number, 1 or more.
        """
        env = os.environ if environment is None else environment
        if trace_dir is None:
            directory = env.get(TRACE_DIR_ENV, "").strip()
            trace_dir = Path(directory) if directory else None
        if max_spans is None:
            text = env.get(TRACE_MEMORY_SPANS_ENV, "").strip()
            if text and (not text.isdecimal() or int(text) < 1):
                raise ConfigError(
                    f"{TRACE_MEMORY_SPANS_ENV} must be a whole number, 1 or more, not {text!r}"
                )
            max_spans = int(text) if text else DEFAULT_TRACE_MEMORY_SPANS
        query_url = env.get(TRACE_QUERY_URL_ENV, "").strip().rstrip("/")
        return cls(trace_dir=trace_dir, query_url=query_url or None, max_spans=max_spans)


class TraceUnavailableError(Exception):
    """The configured backend could not be queried."""


# -- trace files ----------------------------------------------------------------------------


def _well_formed(record: SpanRecord) -> bool:
    """Whether a span read back holds what an OTLP exporter writes: string ids (its user's
    too), name and status message, string attribute keys, times in OTLP's unsigned 64 bits. A
    span that does not (a corrupt or foreign line) would fail the whole answer (an unhashable
    id, a time too large for a float), so it is left out."""
    return (
        isinstance(record.trace_id, str)
        and isinstance(record.span_id, str)
        and (record.parent_span_id is None or isinstance(record.parent_span_id, str))
        and isinstance(record.name, str)
        and isinstance(record.status_message, str)
        and 0 <= record.start_time_unix_nano < _UINT64_LIMIT
        and 0 <= record.end_time_unix_nano < _UINT64_LIMIT
        and all(isinstance(key, str) for key in record.attributes)
        and isinstance(record.attributes.get(USER_ATTRIBUTE, ""), str)
    )


@dataclass
class _FileState:
    """How far one trace file was read, and the traces it holds spans of."""

    offset: int = 0
    # The length and the first line, to tell the file read before from a new one the file
    # system gave its inode (a rotation removes the oldest file and makes a new one), or the
    # same file truncated and written again.
    first_line: bytes = b""
    traces: set[str] = field(default_factory=set)


@dataclass
class _HeldTrace:
    records: list[SpanRecord] = field(default_factory=list)
    files: set[tuple[int, int]] = field(default_factory=set)


class _TraceFileReader:
    """The spans of a directory of OTLP trace files, re-reading only what was appended, at most
    ``max_spans`` of them.

    Each service's current file and its rotated ones are read (:func:`open_trace_files`), each
    up to its last complete line (a service may be writing the next one). A file is known by its
    inode, not its name: a file rotated (renamed) is read on from where it was, never again; a
    file replaced or truncated is read again from the start. Past ``max_spans``, the traces
    least recently added to are dropped, whole, and a later span of one is not kept (a trace
    shown in part would draw its spans as orphans). The traces of a file that is gone (rotated
    out, or the directory cleaned) are dropped whole too, their spans in other files with them.
    """

    def __init__(self, directory: Path, max_spans: int = DEFAULT_TRACE_MEMORY_SPANS) -> None:
        self.directory = directory
        self.max_spans = max_spans
        self.span_count = 0
        self._files: dict[tuple[int, int], _FileState] = {}
        # Least recently added to first: the first dropped.
        self._traces: OrderedDict[str, _HeldTrace] = OrderedDict()
        self._invocations: defaultdict[str, set[str]] = defaultdict(set)
        # Traces dropped past the cap (at most ``max_spans`` remembered), whose later spans
        # are not kept.
        self._dropped: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def spans(self, invocation_id: str) -> list[SpanRecord]:
        """The spans of every trace holding a span of ``invocation_id``."""
        with self._lock, open_trace_files(self.directory) as files:
            present = {(item.status.st_dev, item.status.st_ino): item for item in files}
            for gone in set(self._files) - set(present):
                self._forget_file(gone, remember=False)
            # The oldest files first, so the cap drops the oldest traces (a stable sort: each
            # service's files come oldest first).
            for identity, item in sorted(
                present.items(), key=lambda entry: entry[1].status.st_mtime_ns
            ):
                self._refresh(identity, item)
            return [
                record
                for trace_id in self._invocations.get(invocation_id, ())
                for record in self._traces[trace_id].records
            ]

    def _refresh(self, identity: tuple[int, int], item: TraceFile) -> None:
        state = self._files.get(identity)
        if state is not None and item.status.st_size == state.offset:
            return
        file = item.file
        if state is not None and (
            item.status.st_size < state.offset
            or file.read(len(state.first_line)) != state.first_line
        ):
            self._forget_file(identity, remember=False)
            state = None
        if state is None:
            state = self._files[identity] = _FileState()
        file.seek(state.offset)
        # Line by line: a large file is never all in memory at once.
        for line in file:
            if not line.endswith(b"\n"):
                break  # torn: a service is writing it; read again at the next request
            if not state.offset:
                state.first_line = line
            state.offset += len(line)
            if not line.strip():
                continue
            # A line that is not the exporter's OTLP JSON is skipped, not the end of the file.
            try:
                data = json.loads(line)
                records = records_from_otlp_json(data) if isinstance(data, dict) else []
            except (ValueError, TypeError, AttributeError, RecursionError):
                continue
            for record in records:
                if _well_formed(record):
                    self._add(record, identity, state)

    def _add(self, record: SpanRecord, identity: tuple[int, int], state: _FileState) -> None:
        trace_id = record.trace_id
        if trace_id in self._dropped:
            return
        held = self._traces.get(trace_id)
        if held is None:
            held = self._traces[trace_id] = _HeldTrace()
        else:
            self._traces.move_to_end(trace_id)
        held.records.append(record)
        held.files.add(identity)
        state.traces.add(trace_id)
        if record.invocation_id is not None:
            self._invocations[record.invocation_id].add(trace_id)
        self.span_count += 1
        while self.span_count > self.max_spans:
            self._drop(next(iter(self._traces)), remember=True)

    def _forget_file(self, identity: tuple[int, int], *, remember: bool) -> None:
        for trace_id in self._files.pop(identity).traces:
            self._drop(trace_id, remember=remember)

    def _drop(self, trace_id: str, *, remember: bool) -> None:
        held = self._traces.pop(trace_id, None)
        if held is None:
            return
        self.span_count -= len(held.records)
        for record in held.records:
            if record.invocation_id is not None:
                traces = self._invocations.get(record.invocation_id)
                if traces is not None:
                    traces.discard(trace_id)
                    if not traces:
                        del self._invocations[record.invocation_id]
        for identity in held.files:
            state = self._files.get(identity)
            if state is not None:
                state.traces.discard(trace_id)
        if remember:
            self._dropped[trace_id] = None
            while len(self._dropped) > self.max_spans:
                self._dropped.popitem(last=False)


_readers: dict[tuple[Path, int], _TraceFileReader] = {}
_readers_lock = threading.Lock()


def _file_spans(directory: Path, invocation_id: str, max_spans: int) -> list[SpanRecord]:
    with _readers_lock:
        reader = _readers.get((directory, max_spans))
        if reader is None:
            reader = _readers[directory, max_spans] = _TraceFileReader(directory, max_spans)
    return reader.spans(invocation_id)


# -- Jaeger query API ------------------------------------------------------------------------


def _jaeger_value(tag: Mapping[str, Any]) -> Any:
    value: Any = tag.get("value")
    kind = str(tag.get("type", "string")).lower()
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if kind == "int64":
        try:
            return int(value)
        except (TypeError, ValueError):
            return value
    if kind == "float64":
        try:
            return float(value)
        except (TypeError, ValueError):
            return value
    return value


def records_from_jaeger(data: Mapping[str, Any]) -> list[SpanRecord]:
    """The spans of a Jaeger query API answer (``{"data": [trace, ...]}``)."""
    records: list[SpanRecord] = []
    for trace in data.get("data") or []:
        processes = trace.get("processes") or {}
        for span in trace.get("spans") or []:
            tags = {str(tag.get("key")): _jaeger_value(tag) for tag in span.get("tags") or []}
            parent = next(
                (
                    str(reference.get("spanID"))
                    for reference in span.get("references") or []
                    if reference.get("refType") == "CHILD_OF"
                    and reference.get("traceID") == span.get("traceID")
                ),
                None,
            )
            status = str(tags.pop("otel.status_code", "") or "").upper()
            if not status:
                status = "ERROR" if tags.get("error") is True else "UNSET"
            start_us = int(span.get("startTime", 0))
            process = processes.get(span.get("processID"), {})
            records.append(
                SpanRecord(
                    trace_id=str(span.get("traceID", "")),
                    span_id=str(span.get("spanID", "")),
                    parent_span_id=parent,
                    name=str(span.get("operationName", "")),
                    kind=_JAEGER_KINDS.get(str(tags.pop("span.kind", "")), "INTERNAL"),
                    service_name=str(process.get("serviceName", "unknown_service")),
                    start_time_unix_nano=start_us * 1000,
                    end_time_unix_nano=(start_us + int(span.get("duration", 0))) * 1000,
                    status_code=status,
                    status_message=str(tags.pop("otel.status_description", "") or ""),
                    attributes={
                        key: value
                        for key, value in tags.items()
                        if not key.startswith("internal.") and key != "otel.scope.name"
                    },
                )
            )
    return records


async def _jaeger_spans(sources: TraceSources, invocation_id: str) -> list[SpanRecord]:
    assert sources.query_url is not None
    now_us = int(time.time() * 1e6)
    window = {
        "start": str(now_us - int(sources.lookback_seconds * 1e6)),
        "end": str(now_us),
        "limit": "20",
        "tags": json.dumps({INVOCATION_ATTRIBUTE: invocation_id}, separators=(",", ":")),
    }
    # httpx logs each request's URL: a key in the query URL shows redacted.
    redact_http_logs()
    try:
        async with httpx.AsyncClient(
            base_url=sources.query_url, timeout=sources.timeout_seconds
        ) as client:
            listing = await client.get("/api/services")
            listing.raise_for_status()
            services = [
                name
                for name in listing.json().get("data") or []
                if isinstance(name, str) and name not in _JAEGER_SERVICES
            ]
            answers = await asyncio.gather(
                *(
                    client.get("/api/traces", params={**window, "service": service})
                    for service in services
                )
            )
            records: list[SpanRecord] = []
            for answer in answers:
                answer.raise_for_status()
                records.extend(records_from_jaeger(answer.json()))
    # An answer that is not Jaeger's (of the wrong shape, an infinite time, nested past
    # what json reads) is the backend's failure, not ours.
    except (
        httpx.HTTPError,
        ValueError,
        TypeError,
        AttributeError,
        OverflowError,
        RecursionError,
    ) as error:
        raise TraceUnavailableError(
            f"the trace backend at {sources.query_url} could not be queried: {error}"
        ) from error
    # Each service's search answers whole traces: the same spans come back once per service.
    unique = {(record.trace_id, record.span_id): record for record in records}
    return list(unique.values())


# -- the waterfall ---------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class TraceSpan(_Model):
    """One span, placed on its trace's time axis."""

    span_id: str
    parent_span_id: str | None
    orphan: bool = Field(
        description="its parent is not in the trace (not ended yet, or exported elsewhere)"
    )
    name: str
    kind: str = Field(description="SERVER, CLIENT, INTERNAL, PRODUCER or CONSUMER")
    service: str
    depth: int = Field(description="0 for a root; its parent's depth + 1")
    start_ms: float = Field(description="milliseconds after the trace's first span started")
    duration_ms: float
    status: str = Field(description="UNSET, OK or ERROR")
    status_message: str
    invocation_id: str | None
    attributes: dict[str, Any] = Field(description="long strings cut at 2,000 characters")


class Trace(_Model):
    """One trace: its spans depth first, children after their parent by start time."""

    trace_id: str
    start_time_unix_nano: str
    duration_ms: float
    services: list[str] = Field(description="in the order their first span appears")
    spans: list[TraceSpan]


class ControlFlowMove(_Model):
    """Where control moved at a tool: ``return_to_caller`` (an AgentTool delegation: the
    target runs and answers back) or ``pass_control`` (a transfer)."""

    mode: str
    target_agent: str | None
    tool: str | None
    tool_call_id: str | None
    service: str
    span_id: str


class InvocationTrace(_Model):
    """The answer of ``GET /debug/traces/{invocation_id}``."""

    invocation_id: str
    source: Literal["files", "jaeger", "none"]
    services: list[str]
    traces: list[Trace] = Field(description="every trace holding a span of the invocation")
    control_flow: list[ControlFlowMove]
    detail: str | None = Field(default=None, description="why there is no source, if none")


def _attribute(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _MAX_ATTRIBUTE_CHARS:
        return value[: _MAX_ATTRIBUTE_CHARS - 1] + "…"
    if isinstance(value, list):
        return [_attribute(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _attribute(item) for key, item in value.items()}
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return str(value)


def _trace(trace_id: str, records: Sequence[SpanRecord]) -> Trace:
    start = min(record.start_time_unix_nano for record in records)
    end = max(record.end_time_unix_nano for record in records)
    ids = {record.span_id for record in records}
    children: dict[str | None, list[SpanRecord]] = defaultdict(list)
    for record in records:
        parent = record.parent_span_id if record.parent_span_id in ids else None
        children[parent].append(record)
    for siblings in children.values():
        siblings.sort(key=lambda record: (record.start_time_unix_nano, record.span_id))
    spans: list[TraceSpan] = []
    services: list[str] = []
    # Depth first without recursion: a deep delegation chain must not hit the recursion limit.
    stack: list[tuple[SpanRecord, int]] = [(record, 0) for record in reversed(children[None])]
    while stack:
        record, depth = stack.pop()
        if record.service_name not in services:
            services.append(record.service_name)
        spans.append(
            TraceSpan(
                span_id=record.span_id,
                parent_span_id=record.parent_span_id,
                orphan=record.parent_span_id is not None and record.parent_span_id not in ids,
                name=record.name,
                kind=record.kind,
                service=record.service_name,
                depth=depth,
                start_ms=(record.start_time_unix_nano - start) / 1e6,
                duration_ms=max(record.duration_ms, 0.0),
                status=record.status_code,
                status_message=record.status_message,
                invocation_id=record.invocation_id,
                attributes={
                    key: _attribute(value) for key, value in sorted(record.attributes.items())
                },
            )
        )
        stack.extend((child, depth + 1) for child in reversed(children.get(record.span_id, [])))
    return Trace(
        trace_id=trace_id,
        start_time_unix_nano=str(start),
        duration_ms=(end - start) / 1e6,
        services=services,
        spans=spans,
    )


def _control_flow(records: Iterable[SpanRecord]) -> list[ControlFlowMove]:
    moves: list[ControlFlowMove] = []
    for record in sorted(records, key=lambda record: record.start_time_unix_nano):
        mode = record.attributes.get("adk_mesh.control_flow")
        if not isinstance(mode, str):
            continue
        target = record.attributes.get("adk_mesh.target_agent")
        tool = record.attributes.get("gen_ai.tool.name")
        call_id = record.attributes.get("gen_ai.tool.call.id")
        moves.append(
            ControlFlowMove(
                mode=mode,
                target_agent=None if target is None else str(target),
                tool=None if tool is None else str(tool),
                tool_call_id=None if call_id is None else str(call_id),
                service=record.service_name,
                span_id=record.span_id,
            )
        )
    return moves


def _without_other_users(records: list[SpanRecord], user_id: str) -> list[SpanRecord]:
    """``records`` without the spans naming another user, and the spans under those (another
    instrumentation's, which carry no user but belong to that user's turn)."""
    hidden = {
        record.span_id
        for record in records
        if record.attributes.get(USER_ATTRIBUTE, user_id) != user_id
    }
    if not hidden:
        return records
    children: dict[str, list[str]] = defaultdict(list)
    for record in records:
        if record.parent_span_id is not None:
            children[record.parent_span_id].append(record.span_id)
    pending = list(hidden)
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in hidden:
                hidden.add(child)
                pending.append(child)
    return [record for record in records if record.span_id not in hidden]


def invocation_trace(
    invocation_id: str,
    spans: Iterable[SpanRecord],
    *,
    source: Literal["files", "jaeger", "none"],
    user_id: str | None = None,
) -> InvocationTrace:
    """Every trace holding a span of the invocation, oldest first, its spans depth first.

    With ``user_id``, the invocation must be that user's: its spans name no other user in
    ``adk_mesh.user_id``, and at least one names this one; else it has no traces. A trace it
    shares with another user's invocation (a client running several users' turns under one
    trace of its own) is shown without that user's spans and the spans under them.

    A span that is not well formed is left out; one given twice (the same trace and span id,
    a copy of a trace file) is drawn once.
    """
    by_trace: dict[str, dict[str, SpanRecord]] = defaultdict(dict)
    for record in spans:
        if _well_formed(record):
            by_trace[record.trace_id].setdefault(record.span_id, record)
    matching = {
        trace_id: list(records.values())
        for trace_id, records in by_trace.items()
        if any(record.invocation_id == invocation_id for record in records.values())
    }
    if user_id is not None:
        users = {
            record.attributes.get(USER_ATTRIBUTE)
            for records in matching.values()
            for record in records
            if record.invocation_id == invocation_id and USER_ATTRIBUTE in record.attributes
        }
        if users != {user_id}:
            matching = {}
        matching = {
            trace_id: own
            for trace_id, records in matching.items()
            if (own := _without_other_users(records, user_id))
        }
    ordered = sorted(
        matching.items(),
        key=lambda item: min(record.start_time_unix_nano for record in item[1]),
    )
    traces = [_trace(trace_id, records) for trace_id, records in ordered]
    services: list[str] = []
    for trace in traces:
        services.extend(name for name in trace.services if name not in services)
    return InvocationTrace(
        invocation_id=invocation_id,
        source=source,
        services=services,
        traces=traces,
        control_flow=_control_flow(r for records in matching.values() for r in records),
    )


def _user_of(caller: Any) -> str | None:
    principal = getattr(caller, "principal", None)
    user_id = getattr(principal, "user_id", None)
    return user_id if isinstance(user_id, str) else None


async def _anonymous() -> None:
    return None


def trace_router(sources: TraceSources | None = None, caller: Any = None) -> APIRouter:
    """The trace route, reading ``sources`` (``None``: the environment, at each request).

    ``caller``: a dependency giving the authenticated caller (``gateway._security.Caller``);
    with a principal, only that user's invocations have spans. ``None``: no authentication
    (tests, development).
    """
    router = APIRouter(tags=["traces"])
    authenticated = caller if caller is not None else _anonymous

    @router.get(
        TRACE_PATH,
        response_model=InvocationTrace,
        # A debugging aid of the web UI, not part of the documented API (gateway/openapi.json,
        # which CI checks for drift, is the google-adk-compatible surface).
        include_in_schema=False,
        summary="An invocation's trace, for the web UI's waterfall",
        responses={502: {"description": "The trace backend could not be queried"}},
    )
    async def get_invocation_trace(
        invocation_id: Annotated[
            str,
            PathParameter(
                pattern=_INVOCATION_ID_PATTERN,
                description="the invocation id (1 to 128 letters, digits, '_', '.', ':', '-')",
            ),
        ],
        # A default, not Annotated[...]: FastAPI cannot resolve a string annotation naming
        # this closure's dependency.
        requester: Any = Depends(authenticated),  # noqa: B008
    ) -> InvocationTrace:
        user_id = _user_of(requester)
        configured = sources if sources is not None else TraceSources.from_environment()
        if configured.query_url is not None:
            try:
                spans = await _jaeger_spans(configured, invocation_id)
            except TraceUnavailableError as error:
                # Its address and its answer go to the log, not to the client (as a mesh
                # service's address never does).
                logger.warning("trace backend query failed: %s", error)
                raise Problem(
                    502,
                    "the trace backend could not be queried; the gateway's log has the details",
                    reason="TRACE_BACKEND_UNAVAILABLE",
                ) from error
            return invocation_trace(invocation_id, spans, source="jaeger", user_id=user_id)
        if configured.trace_dir is not None:
            spans = await asyncio.to_thread(
                _file_spans, configured.trace_dir, invocation_id, configured.max_spans
            )
            return invocation_trace(invocation_id, spans, source="files", user_id=user_id)
        answer = invocation_trace(invocation_id, (), source="none")
        answer.detail = (
            f"No trace source is configured: set {TRACE_DIR_ENV} (the trace files of a local "
            f"mesh) or {TRACE_QUERY_URL_ENV} (a Jaeger query service)."
        )
        return answer

    return router


def create_router(app: FastAPI, settings: Any) -> APIRouter:
    """The gateway's trace route: callers authenticated by ``app.state.caller``; spans from
    ``settings.trace_dir`` or ``ADK_MESH_TRACE_DIR``, or a Jaeger query service
    (``ADK_MESH_TRACE_QUERY_URL``)."""
    sources = TraceSources.from_environment(
        trace_dir=getattr(settings, "trace_dir", None),
        max_spans=getattr(settings, "trace_memory_spans", None),
    )
    return trace_router(sources, caller=getattr(app.state, "caller", None))
