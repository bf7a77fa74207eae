"""RPC spans on both sides of every mesh call, and the trace context (``traceparent``,
``tracestate``, ``baggage`` with the invocation's ids) in the metadata: a traced channel on
the client (:class:`TracedChannel`, what :func:`~adk_mesh.mesh._channel.open_channel`
returns), a server interceptor on the server.

Written here rather than taken from ``opentelemetry-instrumentation-grpc`` because a streaming
call's span must end exactly when the stream does, with the right status, in every case:

* client: the span ends in the call's done-callback, which gRPC fires once the call is over —
  finished, failed, cancelled by the caller, past its deadline, or dropped (a call that is
  garbage-collected is cancelled) — and reads the final status there;
* server: the handler (an async generator for a streaming method) is wrapped; the span ends in
  its ``finally`` and the status comes from how it ended: returned (OK), aborted (the code the
  handler aborted with), cancelled (CANCELLED, or DEADLINE_EXCEEDED when the deadline passed),
  or failed (UNKNOWN).

Status: OK leaves the span UNSET (as instrumentations do); CANCELLED leaves it UNSET with
``adk_mesh.cancelled=true`` (the caller chose to stop); every other code is ERROR with
``CODE: details``. ``rpc.grpc.status_code`` always holds the numeric code.

The server span is the parent of everything the handler does: the handler runs with it (and
the caller's baggage) attached, around each step only, never across a ``yield``.

When opentelemetry-instrumentation-grpc already traces grpc.aio in this process (under
``opentelemetry-instrument``, say), its spans are the RPC spans and these stand aside, so no call
is traced twice; on the client side the invocation's ids are then put in the context's baggage
around the call, so its interceptor carries them to the next service.

On the server side, the invocation's ids the caller sent as baggage are moved out of the
baggage for the handler, into the context value the spans read (with either interceptor): they
stay on the spans and go on to the next mesh hop, but another instrumentation (httpx, say)
does not copy them onto the handler's calls outside the mesh (a model provider's API).
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import grpc
import grpc.aio
from grpc._common import CYGRPC_STATUS_CODE_TO_STATUS_CODE
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from adk_mesh.mesh._handlers import Behaviour, WrappingInterceptor, closing_inner
from adk_mesh.mesh.security import is_local_peer, peer_identities
from adk_mesh.telemetry import _metrics
from adk_mesh.telemetry._propagation import (
    attributes_from_baggage,
    current_invocation_attributes,
    extract_context,
    inject_context,
    invocation_as_baggage,
    invocation_from_baggage,
    without_invocation_baggage,
)
from adk_mesh.telemetry._providers import get_tracer, tracing_enabled
from adk_mesh.telemetry._spans import server_attributes

__all__ = ["TracedChannel", "server_interceptors"]

_CANCELLED_ATTRIBUTE = "adk_mesh.cancelled"
# Infrastructure calls (health probes, reflection) would bury the invocations' spans.
_UNTRACED_PREFIXES = ("/grpc.health.", "/grpc.reflection.")


def _traced_by_grpc_instrumentation(instrumentor: str) -> bool:
    """Whether opentelemetry-instrumentation-grpc's ``instrumentor`` (a singleton) is on.

    Read from the instrumentor's own state, without constructing it (its constructor resets
    the filter it was instrumented with) and without importing the package when it is absent.
    """
    module = sys.modules.get("opentelemetry.instrumentation.grpc")
    if module is None:
        return False
    instance = getattr(getattr(module, instrumentor, None), "_instance", None)
    return bool(getattr(instance, "is_instrumented_by_opentelemetry", False))


def _method_parts(method: str | bytes) -> tuple[str, str, str]:
    """``(full method, service, method)`` of ``/pkg.Service/Method``."""
    full = method.decode() if isinstance(method, bytes) else method
    service, _, name = full.lstrip("/").rpartition("/")
    return full, service, name


def _rpc_attributes(service: str, method: str) -> dict[str, AttributeValue]:
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}


# The numeric status codes, by member identity: an enum member's value is a property and its
# hash runs Python code, so both are paid once here.
_STATUS_NUMBERS = {id(code): code.value[0] for code in grpc.StatusCode}


def finish_rpc_span(span: Span, code: grpc.StatusCode, details: str | None) -> None:
    """Set the final status of an RPC span and end it."""
    span.set_attribute("rpc.grpc.status_code", _STATUS_NUMBERS[id(code)])
    if code is grpc.StatusCode.CANCELLED:
        span.set_attribute(_CANCELLED_ATTRIBUTE, True)
    elif code is not grpc.StatusCode.OK:
        span.set_status(Status(StatusCode.ERROR, f"{code.name}: {details or ''}".rstrip(": ")))
        span.set_attribute("error.type", code.name)
        _metrics.record_error("rpc", code.name)
    span.end()


# --- client ---------------------------------------------------------------------------------


def _final_status(call: Any) -> tuple[grpc.StatusCode, str | None]:
    """The status of a call that is done, read without awaiting (we are in its callback)."""
    status = getattr(getattr(call, "_cython_call", None), "_status", None)
    if status is not None:
        code = CYGRPC_STATUS_CODE_TO_STATUS_CODE.get(status.code())
        if code is not None:
            details = status.details()
            return code, details if isinstance(details, str) else None
    # Without the private status: what the public, synchronous API tells.
    if call.cancelled():
        return grpc.StatusCode.CANCELLED, None
    return grpc.StatusCode.UNKNOWN, None


class _TracedCall:
    """A traced multi-callable: a CLIENT span per call, the trace context in its metadata.

    A synchronous wrapper, not a ``grpc.aio`` client interceptor: an intercepted channel runs
    the interceptor chain in a task of its own per call, which cost more than the span. The
    call object gRPC returns is handed back unchanged; the span ends in its done-callback.
    """

    __slots__ = ("_inner", "_method", "_name", "_server", "_service")

    def __init__(self, inner: Any, full: str, server: dict[str, AttributeValue]) -> None:
        self._inner = inner
        _, self._service, self._method = _method_parts(full)
        self._name = full.lstrip("/")
        self._server = server

    def __call__(
        self,
        request: Any = None,
        *,
        timeout: float | None = None,
        metadata: Any = None,
        credentials: grpc.CallCredentials | None = None,
        wait_for_ready: bool | None = None,
        compression: grpc.Compression | None = None,
    ) -> Any:
        def call(headers: Any) -> Any:
            return self._inner(
                request,
                timeout=timeout,
                metadata=headers,
                credentials=credentials,
                wait_for_ready=wait_for_ready,
                compression=compression,
            )

        tracer = get_tracer()
        if tracer is None:
            return call(metadata)
        if _traced_by_grpc_instrumentation("GrpcAioInstrumentorClient"):
            # Its interceptor makes the span and injects the current context (in a task it
            # creates now, with a copy of this context): the ids go in as baggage.
            carried = invocation_as_baggage()
            if carried is None:
                return call(metadata)
            token = otel_context.attach(carried)
            try:
                return call(metadata)
            finally:
                otel_context.detach(token)
        attributes = _rpc_attributes(self._service, self._method)
        attributes.update(self._server)
        attributes.update(current_invocation_attributes())
        span = tracer.start_span(self._name, kind=SpanKind.CLIENT, attributes=attributes)
        headers = list(metadata or ())
        headers.extend(inject_context(trace.set_span_in_context(span)).items())
        try:
            started = call(headers)
        except BaseException as error:
            finish_rpc_span(span, grpc.StatusCode.UNKNOWN, f"{type(error).__name__}: {error}")
            raise

        def done(finished: Any) -> None:
            finish_rpc_span(span, *_final_status(finished))

        started.add_done_callback(done)
        return started


def _traced(multi_callable: Any, method: str, server: dict[str, AttributeValue]) -> Any:
    """``multi_callable`` traced, unless ``method`` is infrastructure (health, reflection)."""
    if method.startswith(_UNTRACED_PREFIXES):
        return multi_callable
    return _TracedCall(multi_callable, method, server)


class TracedChannel(grpc.aio.Channel):  # type: ignore[misc]
    """A ``grpc.aio`` channel whose stubs trace every unary, server-streaming and bidirectional
    call.

    Stubs ask their channel for one multi-callable per method; this channel hands out
    :class:`_TracedCall` wrappers around the real channel's (health and reflection calls
    excepted). Everything else is the real channel's. Tracing is decided per call, so a
    channel opened before telemetry was configured traces once it is.

    ``target`` (what the channel was opened to) goes on every call's span as
    ``server.address`` / ``server.port``, which the RPC conventions require of a CLIENT span.
    """

    def __init__(self, channel: grpc.aio.Channel, target: str = "") -> None:
        self._channel = channel
        self._server = server_attributes(target) if target else {}

    async def __aenter__(self) -> TracedChannel:
        await self._channel.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._channel.__aexit__(*exc_info)

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self._channel.channel_ready()

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> Any:
        return _traced(
            self._channel.unary_unary(
                method, request_serializer, response_deserializer, _registered_method
            ),
            method,
            self._server,
        )

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> Any:
        return _traced(
            self._channel.unary_stream(
                method, request_serializer, response_deserializer, _registered_method
            ),
            method,
            self._server,
        )

    def stream_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> Any:
        # Client-streaming methods: none in the mesh contract, so not traced.
        return self._channel.stream_unary(
            method, request_serializer, response_deserializer, _registered_method
        )

    def stream_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> Any:
        # Bidirectional methods (CallToolInteractive, RunDelegated) are called with no
        # request iterator: the caller writes on the call.
        return _traced(
            self._channel.stream_stream(
                method, request_serializer, response_deserializer, _registered_method
            ),
            method,
            self._server,
        )


# --- server ---------------------------------------------------------------------------------


def _server_outcome(
    error: BaseException, context: grpc.aio.ServicerContext
) -> tuple[grpc.StatusCode, str | None]:
    if isinstance(error, grpc.aio.AbortError):
        code = context.code()
        details = context.details()
        if isinstance(code, grpc.StatusCode):
            return code, details if isinstance(details, str) else None
        return grpc.StatusCode.UNKNOWN, None
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded"
        return grpc.StatusCode.CANCELLED, "cancelled by the client"
    return grpc.StatusCode.UNKNOWN, f"{type(error).__name__}: {error}"


def peer_attributes(peer: str) -> dict[str, AttributeValue]:
    """``network.peer.address`` and ``network.peer.port`` of gRPC's peer string
    (``ipv4:10.1.2.80:50051``, ``ipv6:%5B::1%5D:443``, ``unix:/path``): the conventions want
    the bare IP address (or socket path) and the port apart, as backends group by them."""
    scheme, _, address = peer.partition(":")
    if scheme in ("ipv4", "ipv6"):
        host, _, port = unquote(address).rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if host and port.isdigit():
            return {"network.peer.address": host, "network.peer.port": int(port)}
    elif scheme == "unix" and address:
        return {"network.peer.address": address}
    return {"network.peer.address": peer}


def _caller_context(
    received: otel_context.Context, context: grpc.aio.ServicerContext
) -> otel_context.Context:
    """``received`` (the caller's trace context and baggage), without the invocation's ids
    in its baggage unless the caller is of the mesh: a peer whose client certificate the
    server verified, or, on a plaintext server, a process of this machine (the peer address
    is checked: ``--insecure`` lets a plaintext server listen beyond loopback). Anyone else —
    a client of a TLS front door, a remote client of an insecure server — would otherwise
    write what it likes (another user's id, another invocation's) on this service's spans;
    its call is still a child of its span (``traceparent``), and the invocation's spans carry
    the ids this service gives them."""
    ids = without_invocation_baggage(received)
    if ids is received:  # no ids asserted: nothing to check (and no auth context to read)
        return received
    auth = context.auth_context() or {}
    if b"ssl" in auth.get("transport_security_type", ()):
        return received if peer_identities(auth) else ids
    return received if is_local_peer(context.peer()) else ids


def _start_server_span(
    full: str, service: str, method: str, context: grpc.aio.ServicerContext
) -> tuple[Span, otel_context.Context] | None:
    tracer = get_tracer()
    if tracer is None:
        return None
    parent = _caller_context(extract_context(context.invocation_metadata() or ()), context)
    attributes = _rpc_attributes(service, method)
    attributes.update(attributes_from_baggage(parent))
    peer = context.peer()
    if isinstance(peer, str) and peer:
        attributes.update(peer_attributes(peer))
    span = tracer.start_span(
        full.lstrip("/"), context=parent, kind=SpanKind.SERVER, attributes=attributes
    )
    return span, trace.set_span_in_context(span, invocation_from_baggage(parent))


def _handler_context(
    full: str, service: str, method: str, context: grpc.aio.ServicerContext, spans: bool
) -> tuple[Span | None, otel_context.Context] | None:
    """The server span (``None`` when another interceptor makes it) and the context the
    handler runs in; ``None``: the handler runs as it is."""
    if spans:
        return _start_server_span(full, service, method, context)
    # opentelemetry-instrumentation-grpc's interceptor (the outer one) made the span and
    # attached the caller's context, baggage and all: the invocation's ids leave the baggage.
    current = otel_context.get_current()
    scoped = invocation_from_baggage(_caller_context(current, context))
    return None if scoped is current else (None, scoped)


def _wrap_unary_unary(
    behaviour: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]], full: str, spans: bool
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    _, service, method = _method_parts(full)

    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started = _handler_context(full, service, method, context, spans)
        if started is None:
            return await behaviour(request, context)
        span, span_context = started
        token = otel_context.attach(span_context)
        try:
            response = await behaviour(request, context)
        except BaseException as error:
            if span is not None:
                finish_rpc_span(span, *_server_outcome(error, context))
            raise
        finally:
            otel_context.detach(token)
        if span is not None:
            finish_rpc_span(span, grpc.StatusCode.OK, None)
        return response

    return handler


def _wrap_unary_stream(
    behaviour: Callable[[Any, grpc.aio.ServicerContext], Any], full: str, spans: bool
) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
    _, service, method = _method_parts(full)

    async def handler(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        started = _handler_context(full, service, method, context, spans)
        result = behaviour(request, context)
        if started is None:
            if inspect.isawaitable(result):
                await result
                return
            async with closing_inner(result) as responses:
                async for response in responses:
                    yield response
            return
        span, span_context = started
        code, details = grpc.StatusCode.OK, None
        try:
            if inspect.isawaitable(result):
                # A handler that writes through context.write() and returns.
                token = otel_context.attach(span_context)
                try:
                    await result
                finally:
                    otel_context.detach(token)
                return
            while True:
                token = otel_context.attach(span_context)
                try:
                    response = await anext(result)
                except StopAsyncIteration:
                    break
                finally:
                    otel_context.detach(token)
                yield response
        except BaseException as error:
            if span is not None:
                code, details = _server_outcome(error, context)
            raise
        finally:
            try:
                close = getattr(result, "aclose", None)
                if close is not None:
                    token = otel_context.attach(span_context)
                    try:
                        await close()
                    finally:
                        otel_context.detach(token)
            finally:
                if span is not None:
                    finish_rpc_span(span, code, details)

    return handler


class _ServerInterceptor(WrappingInterceptor):
    """A SERVER span per call, child of the caller's context, current for the handler (with
    ``spans=False``, only the caller's ids moved out of the baggage, for the handler)."""

    def __init__(self, spans: bool = True) -> None:
        super().__init__()
        self._spans = spans

    def applies(self, method: str) -> bool:
        return not method.startswith(_UNTRACED_PREFIXES)

    def wrap_unary_unary(self, behaviour: Behaviour, method: str) -> Behaviour:
        return _wrap_unary_unary(behaviour, method, self._spans)

    def wrap_unary_stream(self, behaviour: Behaviour, method: str) -> Behaviour:
        return _wrap_unary_stream(behaviour, method, self._spans)

    def wrap_stream_stream(self, behaviour: Behaviour, method: str) -> Behaviour:
        # The request iterator is passed through like a request: the same wrapper serves.
        return _wrap_unary_stream(behaviour, method, self._spans)


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """The interceptors of a new server: none while tracing is off. While
    opentelemetry-instrumentation-grpc traces the server, its interceptor (put first) makes
    the spans, and this one only moves the caller's ids out of the baggage."""
    if not tracing_enabled():
        return []
    return [
        _ServerInterceptor(spans=not _traced_by_grpc_instrumentation("GrpcAioInstrumentorServer"))
    ]
