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
from fastapi.responses import StreamingResponse
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from starlette.types import Receive, Scope, Send

from adk_mesh.telemetry._propagation import extract_context
from adk_mesh.telemetry._providers import get_tracer
from gateway._security import StrictJsonRoute

__all__ = ["TracedRoute", "server_span"]

_TRACE_HEADERS = ("traceparent", "tracestate")


def _start_server_span(request: Request, name: str, app: str) -> tuple[trace.Span, Context] | None:
    """A started SERVER span named ``name`` and the client's context it continues (``None``
    when tracing is off)."""
    tracer = get_tracer()
    if tracer is None:
        return None
    carrier = {key: value for key in _TRACE_HEADERS if (value := request.headers.get(key))}
    parent = extract_context(carrier)
    attributes: dict[str, str] = {
        "http.request.method": request.method,
        "url.path": request.url.path,
    }
    if app:
        attributes["adk_mesh.app_name"] = app
    span = tracer.start_span(
        name, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
    )
    return span, parent


@contextlib.contextmanager
def _current(span: trace.Span, parent: Context, *, end: bool) -> Iterator[None]:
    """``span`` current in the block, in the client's context (not the server task's); an
    exception leaving the block is recorded on it."""
    token = otel_context.attach(parent)
    try:
        with trace.use_span(span, end_on_exit=end):
            yield
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def server_span(request: Request, name: str, app: str = "") -> Iterator[None]:
    """A SERVER span named ``name`` around the block (nothing when tracing is off)."""
    started = _start_server_span(request, name, app)
    if started is None:
        yield
        return
    with _current(*started, end=True):
        yield


class _SentInSpan(Response):
    """A streamed response sent with its request's span current, the span ended once it is
    sent (or failed, or the client went away): the calls its body makes while it is sent
    (a listing's later pages) are the span's children, and a failure there is on the span.

    The body is iterated in a task the response starts (Starlette's), which copies the
    context current when the response is called: this one.
    """

    def __init__(self, response: StreamingResponse, span: trace.Span, parent: Context) -> None:
        # Not Response.__init__: nothing to render, the wrapped response sends itself.
        self.status_code = response.status_code
        self.raw_headers = response.raw_headers
        self.background = None
        self._response = response
        self._span = span
        self._parent = parent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with _current(self._span, self._parent, end=True):
            await self._response(scope, receive, send)


class TracedRoute(StrictJsonRoute):
    """A route whose request is a server span named ``METHOD /route/{template}`` (the route,
    not the path: one name per route however many sessions there are), around the handler,
    so the gRPC calls it makes (the session service's) are its children. A streamed response
    (the session list) keeps the span open until it is sent: its later calls are children
    too. The run routes open theirs themselves: an SSE stream's span lasts as long as the
    stream."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def traced(request: Request) -> Response:
            started = _start_server_span(
                request, f"{request.method} {self.path}", request.path_params.get("app_name", "")
            )
            if started is None:
                return await handle(request)
            span, parent = started
            handed_over = False
            try:
                with _current(span, parent, end=False):
                    response = await handle(request)
                if isinstance(response, StreamingResponse):
                    handed_over = True
                    return _SentInSpan(response, span, parent)
                return response
            finally:
                if not handed_over:
                    span.end()

        return traced
