"""One id finds everything of a user turn: the invocation's ids on every span and log record.

adk-mesh's own spans carry ``adk_mesh.invocation_id`` (and app, user, session, branch) from the
start. :class:`InvocationSpanProcessor` puts the same attributes on every *other* span started
inside an invocation — those of opentelemetry-instrumentation-httpx, -grpc, database drivers, an
application's own — and :class:`InvocationLogRecordProcessor` on every OpenTelemetry log record
emitted inside one. :class:`InvocationLogFormatter` (in :mod:`~adk_mesh.telemetry._formatter`,
which needs no SDK) shows them, with the trace and span ids, on a plain console log line.

Inside a process the ids are one value of the OpenTelemetry context, set by the invocation's
spans; in a service that received the call, they arrive as W3C baggage (see
:mod:`~adk_mesh.telemetry._propagation`). Both are read here, so a span or a log record made
anywhere below an invocation — in this process or downstream — is found by its id.
"""

from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.sdk._logs import LogRecordProcessor, ReadWriteLogRecord
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from adk_mesh.telemetry._formatter import InvocationLogFormatter
from adk_mesh.telemetry._propagation import INVOCATION_ID, current_invocation_attributes

__all__ = ["InvocationLogFormatter", "InvocationLogRecordProcessor", "InvocationSpanProcessor"]


class InvocationSpanProcessor(SpanProcessor):
    """Stamps the invocation's ids on every span started inside an invocation.

    Add it to an SDK ``TracerProvider`` (``provider.add_span_processor(...)``);
    :func:`~adk_mesh.telemetry.configure_telemetry` does so for the provider it installs and for
    one the application (or ``opentelemetry-instrument``) installed. It only adds attributes at
    a span's start: it exports nothing, holds nothing, and a span outside any invocation is left
    as it is. Attributes the span already has are kept.
    """

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        attributes = span.attributes
        if attributes is not None and INVOCATION_ID in attributes:
            return  # an adk-mesh span: stamped when it started
        ids = current_invocation_attributes(parent_context)
        if ids:
            if attributes:
                ids = {key: value for key, value in ids.items() if key not in attributes}
            span.set_attributes(ids)

    def on_end(self, span: ReadableSpan) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class InvocationLogRecordProcessor(LogRecordProcessor):
    """Stamps the invocation's ids on every OpenTelemetry log record emitted inside one.

    The record's trace and span ids come from the SDK (the context it was emitted in); this adds
    ``adk_mesh.invocation_id`` and the app, user, session and branch beside them. Add it to an
    SDK ``LoggerProvider`` before the exporting processors.
    """

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        record = log_record.log_record
        ids = current_invocation_attributes(record.context)
        if not ids:
            return
        attributes = record.attributes
        if attributes is None:
            record.attributes = ids
            return
        for key, value in ids.items():
            if key not in attributes:
                attributes[key] = value  # type: ignore[index]

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True
