"""Tracing and metrics: OpenTelemetry GenAI spans for every invocation, in every service.

Spans (GenAI semantic conventions; ``gen_ai.operation.name`` on each)::

    invoke_workflow {app}      a Runner turn (INTERNAL)
    invoke_agent {agent}       an agent run: INTERNAL, or CLIENT for a remote agent
    chat {model}               a model call (CLIENT)
    execute_tool {tool}        a tool call (INTERNAL), with how control moves for AgentTool
                               (return_to_caller) and transfers (pass_control)
    {service}/{method}         every mesh gRPC call, CLIENT and SERVER side

Every span carries ``adk_mesh.invocation_id`` (and app, user, session, branch;
``gen_ai.conversation.id`` is the session id); across services they travel as W3C baggage next
to ``traceparent``. Prompts, answers, tool arguments and results are recorded only with
``ADK_MESH_CAPTURE_CONTENT=true`` (secret-looking keys redacted even then); keys never.

Nothing is exported until :func:`configure_telemetry` finds ``OTEL_*`` configuration (or
``ADK_MESH_TRACE_DIR``); unconfigured, the instrumentation is off. The instrumentation talks
only to the OpenTelemetry API. What :func:`configure_telemetry` installs behind it is a lean
pipeline of our own — a span recorder (``_tracer``), a meter (``_meter``), an OTLP protobuf
encoder (``_otlp``) and the OTLP/gRPC and OTLP/HTTP transports (``_transport``), batched off
the traced thread (``_export``) — because the SDK's costs more per span than a scripted agent
turn does. An application that installs its own SDK providers is traced through them instead.
"""

from __future__ import annotations

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
    "SpanRecord",
    "TelemetryHandle",
    "configure_telemetry",
    "format_span_trees",
    "read_trace_files",
    "records_from_otlp_json",
]
