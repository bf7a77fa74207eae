"""The console log line of a service: which invocation, trace and span it was written in.

Apart from :mod:`~adk_mesh.telemetry._processors` because it needs only the OpenTelemetry API:
a service that exports nothing logs through it without loading the SDK.
"""

from __future__ import annotations

import logging

from opentelemetry import trace

from adk_mesh.telemetry._propagation import INVOCATION_ID, current_invocation_attributes

__all__ = ["InvocationLogFormatter"]


class InvocationLogFormatter(logging.Formatter):
    """A console line that says which invocation, trace and span it was written in::

        2026-12-01 15:44:44,123 WARNING adk_mesh.runner [invocation_id=e-1f… trace_id=4bf9…
        span_id=00f0…]: the message

    Outside an invocation and outside any span the brackets are left out. Nothing is added to
    the record itself, so other handlers (an OpenTelemetry log handler, say) see it unchanged.
    """

    def __init__(self, fmt: str | None = None, datefmt: str | None = None) -> None:
        super().__init__(fmt or "%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        where = _where()
        if not where:
            return line
        # Before the message: after the logger's name, where a reader looks for the source.
        head, separator, rest = line.partition(f"{record.name}: ")
        if not separator:
            return f"{line} [{where}]"
        return f"{head}{record.name} [{where}]: {rest}"


def _where() -> str:
    parts: list[str] = []
    invocation_id = current_invocation_attributes().get(INVOCATION_ID)
    if invocation_id:
        parts.append(f"invocation_id={invocation_id}")
    span_context = trace.get_current_span().get_span_context()
    if span_context.is_valid:
        parts.append(f"trace_id={span_context.trace_id:032x}")
        parts.append(f"span_id={span_context.span_id:016x}")
    return " ".join(parts)
