"""Tracing and metrics: OpenTelemetry GenAI spans for every invocation, in every service.

Spans (GenAI semantic conventions; ``gen_ai.operation.name`` on each)::

    invoke_workflow {app}      a Runner turn (INTERNAL)
    invoke_agent {agent}       an agent run: INTERNAL, or CLIENT for a remote agent
    chat {model}               a model call (CLIENT)
    execute_tool {tool}        a tool call (INTERNAL), with how control moves for AgentTool
                               (return_to_caller) and transfers (pass_control)
    add_session_to_memory {app}  a finished turn's session going into memory (INTERNAL)
    {service}/{method}         every mesh gRPC call, CLIENT and SERVER side

Every span carries ``adk_mesh.invocation_id`` (and app, user, session, branch;
``gen_ai.conversation.id`` is the session id); across services they travel as W3C baggage next
to ``traceparent``. Prompts, answers, tool arguments and results are recorded only with
``ADK_MESH_CAPTURE_CONTENT=true`` (secret-looking keys redacted even then); keys never.

The pipeline is the OpenTelemetry SDK with the official exporters, set up by
:func:`configure_telemetry` from the standard ``OTEL_*`` variables — or the SDK providers the
application (or ``opentelemetry-instrument``) installed, joined rather than doubled. With nothing
configured, nothing is installed and the instrumentation is off. :class:`InvocationSpanProcessor`
stamps the invocation's ids on every span made inside an invocation, other instrumentation's
too, and :class:`InvocationLogRecordProcessor` on every log record;
:class:`InvocationLogFormatter` shows them on a console line.

Each name below is loaded on first use: the SDK and the exporters load only when something is
configured (or asked for by name), so a service that exports nothing does not carry them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adk_mesh.telemetry._file_exporter import OtlpJsonFileSpanExporter
    from adk_mesh.telemetry._formatter import InvocationLogFormatter
    from adk_mesh.telemetry._processors import (
        InvocationLogRecordProcessor,
        InvocationSpanProcessor,
    )
    from adk_mesh.telemetry._records import (
        SpanRecord,
        format_span_trees,
        read_trace_files,
        records_from_otlp_json,
    )
    from adk_mesh.telemetry._setup import TRACE_DIR_ENV, TelemetryHandle, configure_telemetry
    from adk_mesh.telemetry._spans import CAPTURE_CONTENT_ENV

# Public name -> the module that defines it.
_EXPORTS = {
    "CAPTURE_CONTENT_ENV": "adk_mesh.telemetry._spans",
    "TRACE_DIR_ENV": "adk_mesh.telemetry._setup",
    "InvocationLogFormatter": "adk_mesh.telemetry._formatter",
    "InvocationLogRecordProcessor": "adk_mesh.telemetry._processors",
    "InvocationSpanProcessor": "adk_mesh.telemetry._processors",
    "OtlpJsonFileSpanExporter": "adk_mesh.telemetry._file_exporter",
    "SpanRecord": "adk_mesh.telemetry._records",
    "TelemetryHandle": "adk_mesh.telemetry._setup",
    "configure_telemetry": "adk_mesh.telemetry._setup",
    "format_span_trees": "adk_mesh.telemetry._records",
    "read_trace_files": "adk_mesh.telemetry._records",
    "records_from_otlp_json": "adk_mesh.telemetry._records",
}

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "TRACE_DIR_ENV",
    "InvocationLogFormatter",
    "InvocationLogRecordProcessor",
    "InvocationSpanProcessor",
    "OtlpJsonFileSpanExporter",
    "SpanRecord",
    "TelemetryHandle",
    "configure_telemetry",
    "format_span_trees",
    "read_trace_files",
    "records_from_otlp_json",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'adk_mesh.telemetry' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
