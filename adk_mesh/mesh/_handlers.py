"""Server interceptors that wrap a method's behaviour: the one way the mesh's interceptors
(tracing, the door keeper, the drain gate) rebuild a gRPC method handler around it.

The mesh's contract has unary, server-streaming and bidirectional methods (the last are
``CallToolInteractive`` and ``RunDelegated``: a subclass wraps them only if it overrides
``wrap_stream_stream``); a client-streaming handler is passed through unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, aclosing, nullcontext
from typing import Any, TypeVar

import grpc
import grpc.aio

__all__ = ["Behaviour", "WrappingInterceptor", "closing_inner", "rewrap"]

T = TypeVar("T")

#: A method's behaviour as a handler holds it: ``(request, context)`` to a result or a stream.
Behaviour = Callable[[Any, grpc.aio.ServicerContext], Any]

# A server has a handful of methods; the bound only guards against handlers made per call.
_MAX_KEPT = 1024


def closing_inner(stream: AsyncIterator[T]) -> AbstractAsyncContextManager[AsyncIterator[T]]:
    """``stream``, the wrapped behaviour's responses, closed when a wrapper relaying them is
    (``aclosing``): gRPC closes only the outermost generator of a cancelled call, and an inner
    one left open would run its ``finally`` later, from the garbage collector, after the
    wrappers counted the call done (the drain gate) or ended its span."""
    if hasattr(stream, "aclose"):
        return aclosing(stream)  # type: ignore[type-var]
    return nullcontext(stream)


def rewrap(
    handler: grpc.RpcMethodHandler,
    *,
    unary_unary: Callable[[Behaviour], Behaviour],
    unary_stream: Callable[[Behaviour], Behaviour],
    stream_stream: Callable[[Behaviour], Behaviour] | None = None,
) -> grpc.RpcMethodHandler:
    """``handler`` with its behaviour wrapped by the function for its kind."""
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            unary_unary(handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            unary_stream(handler.unary_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.stream_stream is not None and stream_stream is not None:
        return grpc.stream_stream_rpc_method_handler(
            stream_stream(handler.stream_stream),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler


class WrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps each method's behaviour once — gRPC asks for the handler on every call — and
    keeps the wrapped handler. Subclasses say which methods they wrap and how."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int], tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def applies(self, method: str) -> bool:
        """Whether calls of ``method`` (``/package.Service/Method``) are wrapped."""
        return True

    def wrap_unary_unary(self, behaviour: Behaviour, method: str) -> Behaviour:
        raise NotImplementedError

    def wrap_unary_stream(self, behaviour: Behaviour, method: str) -> Behaviour:
        raise NotImplementedError

    def wrap_stream_stream(self, behaviour: Behaviour, method: str) -> Behaviour:
        """A bidirectional method (``(request_iterator, context)``): unchanged unless a
        subclass wraps it."""
        return behaviour

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not self.applies(method):
            return handler
        key = (method, id(handler))
        kept = self._kept.get(key)
        # The handler is kept with its wrapped version: its id cannot be reused meanwhile.
        if kept is not None and kept[0] is handler:
            return kept[1]
        wrapped = rewrap(
            handler,
            unary_unary=lambda behaviour: self.wrap_unary_unary(behaviour, method),
            unary_stream=lambda behaviour: self.wrap_unary_stream(behaviour, method),
            stream_stream=lambda behaviour: self.wrap_stream_stream(behaviour, method),
        )
        if len(self._kept) >= _MAX_KEPT:
            self._kept.clear()
        self._kept[key] = (handler, wrapped)
        return wrapped
