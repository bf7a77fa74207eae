"""Draining: refuse new calls while the running ones finish, then stop.

:class:`CallGate` is a server interceptor that counts the calls in flight and, once
:meth:`CallGate.close` is called, refuses new ones with UNAVAILABLE (an
:class:`~adk_mesh.errors.AdkIOError`, so clients read a clear message). Health and reflection
stay open, so a probe still reads ``NOT_SERVING`` during the drain instead of a dead port.

:class:`HttpGate` does the refusing for an HTTP port (the A2A and MCP doors): uvicorn's
shutdown closes the listener and the connections open at that moment, but one accepted in the
same turn of the event loop escapes it and would go on serving keep-alive requests, new runs
and tool calls included, through the whole drain.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, NoReturn

import grpc
import grpc.aio

from adk_mesh.errors import AdkIOError, ServerBusyError
from adk_mesh.mesh._handlers import Behaviour, WrappingInterceptor, closing_inner
from adk_mesh.mesh._status import abort_with_error, refuse_stream

__all__ = ["CallGate", "HttpGate"]

#: JSON-RPC's first implementation-defined server error (A2A and MCP speak JSON-RPC).
_SERVER_ERROR = -32000


class CallGate(WrappingInterceptor):
    """Counts calls in flight; refuses new ones once closed (except the ``exempt`` services),
    and refuses one beyond ``limit`` calls at once with RESOURCE_EXHAUSTED
    (:class:`~adk_mesh.errors.ServerBusyError`: nothing of it ran, send it again later).

    The limit is the gate's, not gRPC's ``maximum_concurrent_rpcs``: that one counts every
    call, health checks and watches included, so a server busy with ``limit`` runs answered
    its probes RESOURCE_EXHAUSTED (a liveness probe then kills a healthy, busy replica, and a
    drain's NOT_SERVING could not be read).

    Each method's handler is wrapped once and kept (:class:`WrappingInterceptor`): a handler
    made per call would also be kept anew per call by the tracing interceptor in front of the
    gate, which keeps one wrapped handler per handler it is given."""

    def __init__(self, exempt: Iterable[str] = (), *, limit: int | None = None) -> None:
        super().__init__()
        self._exempt = tuple(f"/{service}/" for service in exempt)
        #: Calls run at once (``None``: no limit); more are refused with RESOURCE_EXHAUSTED.
        self.limit = limit
        self._in_flight = 0
        self._closed = False
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def close(self) -> None:
        """Refuse every new call from now on; running calls go on."""
        self._closed = True

    async def wait_idle(self, seconds: float | None) -> bool:
        """Wait until no call is in flight; False when ``seconds`` passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), seconds)
        except TimeoutError:
            return False
        return True

    def _enter(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def _busy(self) -> bool:
        return self.limit is not None and self._in_flight >= self.limit

    async def _refuse_busy(
        self, context: grpc.aio.ServicerContext, requests: AsyncIterator[Any] | None = None
    ) -> NoReturn:
        # Refused before any of the call ran: ServerBusyError (SERVER_BUSY, with its retry
        # delay and gRPC's pushback) tells a client that sending it again is safe, which no
        # other RESOURCE_EXHAUSTED does. A calling service still reads "overloaded"
        # (error_from_downstream), as when this refusal had no ErrorInfo.
        error = ServerBusyError(
            f"busy: this server runs {self.limit} calls at once; send it again later"
        )
        if requests is not None:
            # A bidirectional call: refused once its first message came (see refuse_stream).
            await refuse_stream(requests, context, error)
        await abort_with_error(context, error)

    def _exit(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if not self._closed:
            # Tracked, the handler wrapped once per method and kept (a client-streaming one
            # passes through untracked, as below).
            return await super().intercept_service(continuation, handler_call_details)
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not self.applies(method):
            return handler
        if handler.request_streaming and handler.stream_stream is None:
            # The mesh serves no client-streaming method; pass such a method through untracked.
            return handler
        return _refusing(handler, method)

    def applies(self, method: str) -> bool:
        return not method.startswith(self._exempt)

    def wrap_unary_unary(self, behaviour: Behaviour, method: str) -> Behaviour:
        return self._track_unary(behaviour)

    def wrap_unary_stream(self, behaviour: Behaviour, method: str) -> Behaviour:
        return self._track_stream(behaviour)

    def wrap_stream_stream(self, behaviour: Behaviour, method: str) -> Behaviour:
        # A bidirectional call (``CallToolInteractive``, ``RunDelegated``) is in flight like a
        # server-streaming one: the behaviour's first argument is its requests.
        return self._track_bidirectional(behaviour)

    def _track_unary(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def tracked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if self._busy():
                await self._refuse_busy(context)
            self._enter()
            try:
                return await behaviour(request, context)
            finally:
                self._exit()

        return tracked

    def _track_bidirectional(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        return self._track_stream(behaviour, bidirectional=True)

    def _track_stream(
        self, behaviour: Callable[..., Any], *, bidirectional: bool = False
    ) -> Callable[..., Any]:
        if not inspect.isasyncgenfunction(behaviour):

            async def tracked_writer(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if self._busy():
                    await self._refuse_busy(context, request if bidirectional else None)
                self._enter()
                try:
                    return await behaviour(request, context)
                finally:
                    self._exit()

            return tracked_writer

        async def tracked(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if self._busy():
                await self._refuse_busy(context, request if bidirectional else None)
            self._enter()
            try:
                async with closing_inner(behaviour(request, context)) as responses:
                    async for response in responses:
                        yield response
            finally:
                self._exit()

        return tracked


def _refusing(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    error = AdkIOError(f"the server is shutting down and accepts no new calls ({method})")

    if handler.response_streaming:
        bidirectional = handler.request_streaming

        async def refused_stream(
            request: Any, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            if bidirectional:  # ``request`` is the caller's messages
                await refuse_stream(request, context, error)
            else:
                await abort_with_error(context, error)
            yield  # pragma: no cover - makes this an async generator

        make = (
            grpc.stream_stream_rpc_method_handler
            if handler.request_streaming
            else grpc.unary_stream_rpc_method_handler
        )
        return make(
            refused_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await abort_with_error(context, error)

    return grpc.unary_unary_rpc_method_handler(
        refuse,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class HttpGate:
    """ASGI middleware: once :meth:`close` is called, every HTTP request gets 503, an error
    saying the server is shutting down, ``retry-after: 1`` and ``connection: close`` (so the
    client's next attempt opens a connection, to another replica). The error is JSON-RPC's
    (A2A, MCP) or, with ``jsonrpc=False``, ``{"detail": ...}`` as a REST API's (the gateway)."""

    def __init__(self, app: Callable[..., Awaitable[None]], *, jsonrpc: bool = True) -> None:
        self._app = app
        self._jsonrpc = jsonrpc
        self._closed = False

    def close(self) -> None:
        """Refuse every request from now on; those already running go on."""
        self._closed = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self._closed or scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        message = f"the server is shutting down and accepts no new calls ({scope['path']})"
        error: dict[str, Any] = (
            {"jsonrpc": "2.0", "id": None, "error": {"code": _SERVER_ERROR, "message": message}}
            if self._jsonrpc
            else {"detail": message}
        )
        body = json.dumps(error).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", b"1"),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})
