"""A server span per HTTP request, continuing the client's trace.

Only ``traceparent`` and ``tracestate`` are read from an HTTP client: its ``baggage`` is not
trusted (inside the mesh, baggage carries the invocation's user and session ids). The span is
current while the gRPC call is made, so the mesh's client spans, and every span of the run in
every service, are its children.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from fastapi import Request, Response
from opentelemetry import context as otel_context
from opentelemetry import trace

from adk_mesh.telemetry._propagation import extract_context
from adk_mesh.telemetry._providers import get_tracer
from gateway._security import StrictJsonRoute

__all__ = ["TracedRoute", "server_span"]

_TRACE_HEADERS = ("traceparent", "tracestate")


@contextlib.contextmanager
def server_span(request: Request, name: str, app: str = "") -> Iterator[None]:
    """A SERVER span named ``name`` around the block (nothing when tracing is off)."""
    tracer = get_tracer()
    if tracer is None:
        yield
        return
    carrier = {key: value for key in _TRACE_HEADERS if (value := request.headers.get(key))}
    parent = extract_context(carrier)
    attributes: dict[str, str] = {
        "http.request.method": request.method,
        "url.path": request.url.path,
    }
    if app:
        attributes["adk_mesh.app_name"] = app
    token = otel_context.attach(parent)
    try:
        with tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER, attributes=attributes):
            yield
    finally:
        otel_context.detach(token)


class TracedRoute(StrictJsonRoute):
    """A route whose request is a server span named ``METHOD /route/{template}`` (the route,
    not the path: one name per route however many sessions there are), around the handler,
    so the gRPC calls it makes (the session service's) are its children. The run routes open
    theirs themselves: an SSE stream's span lasts as long as the stream."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def traced(request: Request) -> Response:
            with server_span(
                request, f"{request.method} {self.path}", request.path_params.get("app_name", "")
            ):
                return await handle(request)

        return traced
