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
"""

from __future__ import annotations

from adk_mesh.telemetry._file_exporter import OtlpJsonFileSpanExporter
from adk_mesh.telemetry._processors import (
    InvocationLogFormatter,
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
