"""Map adk-mesh errors to gRPC statuses and back, with ``google.rpc.ErrorInfo`` details.

The server side aborts a call with the status code from :data:`adk_mesh.errors.GRPC_STATUS`
and a rich status (``grpc-status-details-bin``) holding ``ErrorInfo(reason, domain="adk-mesh",
metadata)``. The client side reads that detail back and raises the same class with the same
message (for an application's own subclass, a class of its name under the same adk-mesh base:
:func:`~adk_mesh.errors.wire_metadata`); a status without our ErrorInfo maps by its code
alone. An error with a ``retry_delay`` also carries ``google.rpc.RetryInfo`` in that rich
status (and the error read back has it). A status the served call's own work raised (through
:func:`error_boundary`, past the doors) also carries the trailer
``adk-mesh-error-origin: served``: a calling service tells by it a policy's refusal of the
work (which comes back as it is) from the other service refusing *it* (an INTERNAL fault of
the mesh, :func:`error_from_downstream`).

A server at its limit of calls at once refuses a call before running any of it with
:class:`~adk_mesh.errors.ServerBusyError` (reason ``SERVER_BUSY``, no ``served`` trailer):
:func:`busy_refusal_delay` tells such a refusal apart from every other RESOURCE_EXHAUSTED,
which may follow effects, and :func:`wait_to_resend` is how a mesh client sends such a call
again, once. That refusal also carries gRPC's ``grpc-retry-pushback-ms`` trailer: grpc-core
honours it only for a method whose service config has a ``retryPolicy`` retrying
RESOURCE_EXHAUSTED, where it replaces the policy's own backoff. The mesh's channels give
``Run`` and ``CallTool`` no such policy (a code cannot tell a busy refusal from a limit reached
after effects), so for them it is a hint to clients in other languages that retry idempotent
calls by policy; no other refusal sends it, as none is known to have had no effect.

What a client is sent never holds internal addresses, host names or stack traces: our errors'
messages are written without them (the remote hops put the address they called in their own
log, :func:`error_from_downstream`), and a failure that is not an :class:`AdkError` reaches
the client as "internal error" only. The detail goes to the service's log, once, from
:func:`error_boundary`, with the invocation id and the trace id: a warning when the caller
caused it (:attr:`AdkError.caller_fault`), an error with its traceback otherwise.

Request bytes that do not parse are INVALID_ARGUMENT, not gRPC's UNKNOWN:
:func:`add_servicer` registers a servicer with deserializers that do not raise (and, for a
bidirectional method, with a request stream that raises InvalidArgumentError for a message
that does not parse, which the servicer's :func:`error_boundary` refuses).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import grpc
import grpc.aio
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry import trace

from adk_mesh.errors import (
    ERROR_DOMAIN,
    AdkError,
    AdkIOError,
    AgentError,
    AlreadyExistsError,
    ConfigError,
    DeadlineExceededError,
    InvalidArgumentError,
    InvocationCancelledError,
    NotFoundError,
    PermissionDeniedError,
    ServerBusyError,
    StateConflictError,
    UnauthenticatedError,
    default_retry_delay,
    error_from_wire,
    status_name_for,
    wire_metadata,
)
from adk_mesh.mesh._handlers import closing_inner
from adk_mesh.telemetry._propagation import INVOCATION_ID, current_invocation_attributes

__all__ = [
    "SESSION_ID_TRAILER",
    "ServedCall",
    "abort_with_error",
    "add_servicer",
    "busy_refusal_delay",
    "error_boundary",
    "error_from_downstream",
    "error_from_rpc_error",
    "error_to_status",
    "refuse_stream",
    "session_id_in",
    "status_code_for",
    "wait_to_resend",
]

logger = logging.getLogger("adk_mesh.mesh")

_DETAILS_KEY = "grpc-status-details-bin"

#: gRPC's retry pushback trailer (the gRPC retry design, A6): milliseconds to wait before the
#: next attempt, honoured by a client whose retry policy retries the status.
PUSHBACK_KEY = "grpc-retry-pushback-ms"
#: The longest delay a retry pushback can say: a signed 32-bit count of milliseconds.
_MAX_PUSHBACK_MS = 2**31 - 1
#: The longest ``google.protobuf.Duration`` (its documented range).
_MAX_DURATION_SECONDS = 315_576_000_000.0

# A status from a peer that is not adk-mesh (or a transport failure) maps by code alone.
# (A proxy's auth filter answers UNAUTHENTICATED or PERMISSION_DENIED so: the classes of
# those codes, which a client may catch to renew its credentials.)
_CLASS_FOR_CODE: dict[grpc.StatusCode, type[AdkError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: ConfigError,
    grpc.StatusCode.CANCELLED: InvocationCancelledError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.UNAVAILABLE: AdkIOError,
    grpc.StatusCode.ABORTED: StateConflictError,
}


def status_code_for(error: AdkError) -> grpc.StatusCode:
    code: grpc.StatusCode = getattr(grpc.StatusCode, status_name_for(error))
    return code


def error_to_status(error: AdkError) -> tuple[grpc.StatusCode, status_pb2.Status]:
    """The status code and rich ``google.rpc.Status`` for an error."""
    code = status_code_for(error)
    # With the name of a class of the application's own: see wire_metadata.
    info = error_details_pb2.ErrorInfo(
        reason=error.reason, domain=ERROR_DOMAIN, metadata=wire_metadata(error)
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    details = [detail]
    if error.retry_delay is not None and not math.isnan(error.retry_delay):
        # The standard detail for "retry after": read by any gRPC client's rich-status API.
        delay = duration_pb2.Duration()
        # Within what a Duration may hold (about 10,000 years), whatever the error was given.
        seconds = min(max(error.retry_delay, 0.0), _MAX_DURATION_SECONDS)
        delay.FromNanoseconds(round(seconds * 1e9))
        retry = any_pb2.Any()
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        details.append(retry)
    status = status_pb2.Status(code=code.value[0], message=error.message, details=details)
    return code, status


#: Trailer of a status the served call's own work raised (:func:`error_boundary`), past the
#: doors: a PERMISSION_DENIED or UNAUTHENTICATED with it is the work's refusal (a plugin's
#: policy, a callback), without it the service refusing its caller (see
#: :func:`error_from_downstream`).
_ORIGIN_KEY = "adk-mesh-error-origin"
_SERVED = "served"

#: Trailer of every root ``Run`` that loaded or created its session, success or failure: the
#: session's id. A run that creates a session and fails before its first response (which
#: carries ``RunResponse.session_id``) has stored the user's message there; this is how its
#: client learns where.
SESSION_ID_TRAILER = "adk-mesh-session-id"


def session_id_in(metadata: Any) -> str:
    """The session a root run named in its trailers (:data:`SESSION_ID_TRAILER`), or ""."""
    for key, value in metadata or ():
        if key == SESSION_ID_TRAILER and isinstance(value, str):
            return value
    return ""


async def abort_with_error(
    context: grpc.aio.ServicerContext, error: AdkError, *, served: bool = False
) -> NoReturn:
    """Abort the current call with the error's status code, message and ErrorInfo (and the
    trailing metadata the handler set before, which an abort would otherwise drop).

    ``served``: the served call's own work raised ``error`` (what :func:`error_boundary`
    says); a refusal at the door (a peer or credential check) leaves it unset."""
    code, status = error_to_status(error)
    earlier = tuple(context.trailing_metadata() or ())
    origin = ((_ORIGIN_KEY, _SERVED),) if served else ()
    pushback: tuple[tuple[str, str], ...] = ()
    if (
        isinstance(error, ServerBusyError)
        and not served
        and error.retry_delay is not None
        and math.isfinite(error.retry_delay)
    ):
        # Only a call refused before it ran is safe to send again at the transport level.
        milliseconds = min(math.ceil(error.retry_delay * 1000), _MAX_PUSHBACK_MS)
        pushback = ((PUSHBACK_KEY, str(max(milliseconds, 0))),)
    await context.abort(
        code,
        error.message,
        trailing_metadata=(
            *earlier,
            *origin,
            *pushback,
            (_DETAILS_KEY, status.SerializeToString()),
        ),
    )
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


#: How long a refused bidirectional call waits for the caller's first message (see
#: :func:`refuse_stream`): short, since a refused caller holds one of the server's calls
#: meanwhile; a grpc.aio client writes its first message as the call starts.
FIRST_MESSAGE_WAIT = 0.5


async def refuse_stream(
    requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, error: AdkError
) -> NoReturn:
    """Refuse a bidirectional call (see :func:`abort_with_error`) once its first message
    came (or :data:`FIRST_MESSAGE_WAIT` seconds passed): a grpc.aio client whose first
    ``write`` is still under way when the refusal's status arrives reports
    ``INTERNAL: Internal error from Core`` in its place (grpc/grpc#36066), which would turn a
    drain's UNAVAILABLE, or a PERMISSION_DENIED, into an error that blames the wrong side."""
    try:
        async with asyncio.timeout(FIRST_MESSAGE_WAIT):
            await anext(aiter(requests), None)
    except (TimeoutError, grpc.RpcError, DecodeError):
        pass
    await abort_with_error(context, error)


def _details(error: grpc.RpcError) -> Sequence[any_pb2.Any]:
    """The details of the status's ``google.rpc.Status`` (``grpc-status-details-bin``), as
    grpcio-status reads them; none without one, or when it does not parse or contradicts the
    call's own code and message (a peer's or a proxy's mistake: nothing in it can be trusted)."""
    if not hasattr(error, "trailing_metadata"):
        return ()
    try:
        status = rpc_status.from_call(error)
    except (ValueError, DecodeError):
        return ()
    return () if status is None else status.details


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    for detail in _details(error):
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == ERROR_DOMAIN:
            return info
    return None


def _retry_delay(error: grpc.RpcError) -> float | None:
    """The seconds of the status's ``google.rpc.RetryInfo`` (any peer's), or ``None``."""
    for detail in _details(error):
        info = error_details_pb2.RetryInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info):
            seconds = info.retry_delay.ToNanoseconds() / 1e9
            # A peer's nonsense (a negative wait) is no hint at all.
            return seconds if math.isfinite(seconds) and seconds >= 0 else None
    return None


def _raised_by_served_call(error: grpc.RpcError) -> bool:
    """Whether the status came from the served call's work (see :data:`_ORIGIN_KEY`)."""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    return any(key == _ORIGIN_KEY and value == _SERVED for key, value in trailing or ())


def error_from_rpc_error(error: grpc.RpcError) -> AdkError:
    """Turn a failed call back into the adk-mesh error the server raised."""
    code: grpc.StatusCode = error.code()
    details = error.details()
    message: str = details if details is not None else code.name
    default = _CLASS_FOR_CODE.get(code, AgentError)
    info = _error_info(error)
    mapped = (
        default(message)
        if info is None
        else error_from_wire(info.reason, message, info.metadata, default=default)
    )
    delay = _retry_delay(error)
    if delay is not None:
        mapped.retry_delay = delay
    return mapped


def busy_refusal_delay(error: grpc.RpcError) -> float | None:
    """The delay to wait before sending a call again that a server refused, at its limit of
    calls at once, before running any of it (:class:`~adk_mesh.errors.ServerBusyError`
    without the ``served`` trailer), or ``None`` for any other failure: a SERVER_BUSY the
    served work raised itself came after the call ran."""
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or _raised_by_served_call(error):
        return None
    info = _error_info(error)
    if info is None or info.reason != ServerBusyError.reason:
        return None
    delay = _retry_delay(error)
    return delay if delay is not None else default_retry_delay(ServerBusyError)


#: The longest hinted delay a mesh client waits before sending a refused call again; a peer
#: that asks for more is not waited for (the refusal stands), so no peer stalls a run.
MAX_RESEND_WAIT = 10.0


async def wait_to_resend(error: grpc.RpcError, deadline: float | None) -> bool:
    """For a call that failed with ``error`` before any response: wait the hinted delay and
    return True when the call should be sent again (a busy refusal, see
    :func:`busy_refusal_delay`, whose delay ends before ``deadline``, the invocation's
    ``time.monotonic()`` deadline, with time to spare); False at once otherwise. A caller
    sends a call again at most once: a second refusal is its failure."""
    delay = busy_refusal_delay(error)
    if delay is None or delay > MAX_RESEND_WAIT:
        return False
    if deadline is not None and time.monotonic() + delay >= deadline:
        # Waiting would use up the time the call itself needs: the refusal is the answer.
        return False
    await _pause(delay)
    return True


async def _pause(seconds: float) -> None:
    """The wait before a call is sent again (its own function: a test stands in for the
    time, freeing the server's slot while the client waits)."""
    await asyncio.sleep(seconds)


@dataclasses.dataclass
class ServedCall:
    """What the error handler knows of the call it guards: the method, and the invocation
    once the servicer has read (or made) its id."""

    method: str
    invocation_id: str = ""

    def log_context(self) -> str:
        invocation = self.invocation_id or str(
            current_invocation_attributes().get(INVOCATION_ID, "") or "-"
        )
        span = trace.get_current_span().get_span_context()
        trace_id = format(span.trace_id, "032x") if span.is_valid else "-"
        return f"invocation={invocation} trace={trace_id}"


@asynccontextmanager
async def error_boundary(
    context: grpc.aio.ServicerContext, method: str = ""
) -> AsyncIterator[ServedCall]:
    """The one error handler of every mesh servicer: an :class:`AdkError` aborts the call with
    its status and ErrorInfo; any other exception becomes INTERNAL with a message that says
    only that (never a bare UNKNOWN, never the exception's text). Either is logged once, with
    the invocation and trace ids: a warning when the caller caused it, else an error with the
    traceback. Cancellation and aborts pass through untouched.

    Yields the :class:`ServedCall`; set its ``invocation_id`` as soon as it is known.
    """
    call = ServedCall(method)
    try:
        yield call
    except grpc.aio.AbortError:
        raise
    except AdkError as error:
        code = status_name_for(error)
        if error.caller_fault:
            logger.warning(
                "%s refused (%s %s): %s [%s]",
                method,
                code,
                error.reason,
                error.message,
                call.log_context(),
            )
        else:
            logger.error(
                "%s failed (%s %s): %s [%s]",
                method,
                code,
                error.reason,
                error.message,
                call.log_context(),
                exc_info=error,
            )
        await abort_with_error(context, error, served=True)
    except Exception as error:
        where = call.log_context()
        logger.error(
            "%s failed (INTERNAL): unexpected %s [%s]",
            method,
            type(error).__name__,
            where,
            exc_info=error,
        )
        invocation = f" (invocation {call.invocation_id})" if call.invocation_id else ""
        await abort_with_error(
            context,
            AdkError(f"internal error{invocation}; the service's log has the details"),
            served=True,
        )


# Statuses that come without our ErrorInfo (a transport failure, a peer that is not
# adk-mesh): their details are gRPC's own text, which names addresses, so a hop says this.
_PLAIN_MESSAGES: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.UNAVAILABLE: "unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "deadline exceeded",
    grpc.StatusCode.CANCELLED: "cancelled",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "overloaded (too many calls at once)",
    grpc.StatusCode.UNAUTHENTICATED: "refused this service's credentials",
    grpc.StatusCode.PERMISSION_DENIED: "refused this service",
}


#: In the details of gRPC's RESOURCE_EXHAUSTED for a message over the size limit ("Sent
#: message larger than max (N vs. M)", "Received message larger than max ...").
_TOO_LARGE = "message larger than max"

_REFUSED_THIS_SERVICE = frozenset(
    {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}
)


def error_from_downstream(error: grpc.RpcError, what: str, target: str) -> AdkError:
    """The error to raise for a failed call this service made to ``what`` at ``target``.

    An adk-mesh error the other service sent comes back as it is (its message is already fit
    for any client). A status without it — the peer unreachable, the deadline passed, a
    transport or TLS failure — gets a message naming ``what`` and the failure, not the
    address or gRPC's details: those go to this service's log. A refusal of this service
    (PERMISSION_DENIED, UNAUTHENTICATED at the other service's door, or from a peer that is
    not adk-mesh) is this mesh's fault, not the caller's: INTERNAL. The same codes raised
    by the served work itself (a plugin's or callback's policy refusing the run, marked by
    :func:`error_boundary`) come back as they are, as they would end the run in process.
    """
    mapped = error_from_rpc_error(error)
    code: grpc.StatusCode = error.code()
    info = _error_info(error)
    if code in _REFUSED_THIS_SERVICE and not (info is not None and _raised_by_served_call(error)):
        # The other service refused *this* one (its certificate, its allow-list): a fault of
        # the mesh's configuration, not of our caller, whose own status must not say it was
        # denied. Its message names peer identities: those go to the log.
        logger.error(
            "call to %s at %s refused this service: %s: %s",
            what,
            target,
            code.name,
            error.details() or "",
        )
        return AdkError(f"{what}: {_PLAIN_MESSAGES[code]}")
    gate_refusal = busy_refusal_delay(error) is not None
    if info is not None and not gate_refusal:
        return mapped
    # A busy peer's own refusal (SERVER_BUSY, before its call ran) reads for our caller as it
    # did before it had an ErrorInfo: this call's failure, not a refusal of our caller's.
    logger.warning(
        "call to %s at %s failed: %s: %s", what, target, code.name, error.details() or ""
    )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE in (error.details() or ""):
        # gRPC's own refusal of a message over the size limit (sent or received, either
        # side): the same call fails the same way again, so neither "overloaded" nor
        # retryable.
        return AdkError(f"{what}: a message of the call was too large to send")
    plain = _PLAIN_MESSAGES.get(code, f"failed ({code.name})")
    # A peer at its limit of concurrent calls: for our caller, a dependency that is
    # unavailable for now (retry later), not an error of the run.
    cls = AdkIOError if code == grpc.StatusCode.RESOURCE_EXHAUSTED else type(mapped)
    failure = cls(f"{what}: {plain}", metadata=mapped.metadata)
    # The peer's hint stays: our caller may wait as long before trying again.
    failure.retry_delay = mapped.retry_delay
    return failure


# --- registration: request bytes that do not parse are INVALID_ARGUMENT -------------------

# Set by the deserializer of the call being served (it runs in the call's own task, just
# before the handler): why its request did not parse, or None.
_malformed: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "adk_mesh_malformed_request", default=None
)


def _tolerant(deserializer: Callable[[bytes], Any], method: str) -> Callable[[bytes], Any]:
    """``deserializer`` that never raises: bytes that do not parse give an empty request and
    leave the reason for the handler, which refuses the call."""
    message_class = getattr(deserializer, "__self__", None)
    if message_class is None:  # pragma: no cover - generated handlers use Message.FromString
        return deserializer

    def deserialize(data: bytes) -> Any:
        try:
            request = deserializer(data)
        except (DecodeError, ValueError, TypeError) as error:
            _malformed.set(
                f"the request to {method} is not a valid {message_class.DESCRIPTOR.full_name} "
                f"message ({type(error).__name__}); send the protobuf encoding of the message"
            )
            return message_class()
        _malformed.set(None)
        return request

    return deserialize


async def _refuse_malformed(context: grpc.aio.ServicerContext, method: str) -> None:
    problem = _malformed.get()
    if problem is None:
        return
    logger.warning("%s refused (INVALID_ARGUMENT): %s [%s]", method, problem, _log_peer(context))
    await abort_with_error(context, InvalidArgumentError(problem))


def _log_peer(context: grpc.aio.ServicerContext) -> str:
    span = trace.get_current_span().get_span_context()
    trace_id = format(span.trace_id, "032x") if span.is_valid else "-"
    return f"peer={context.peer()} trace={trace_id}"


def _guard_handler(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    deserializer = _tolerant(handler.request_deserializer, method)
    if handler.unary_unary is not None:
        behaviour = handler.unary_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await _refuse_malformed(context, method)
            return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream is not None:
        streaming = handler.unary_stream

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await _refuse_malformed(context, method)
            async with closing_inner(streaming(request, context)) as responses:
                async for response in responses:
                    yield response

        async def written(request: Any, context: grpc.aio.ServicerContext) -> None:
            await _refuse_malformed(context, method)
            await streaming(request, context)

        # A handler may stream by yielding or, as grpcio's health Watch does, by writing
        # (context.write in a coroutine): wrapped in its own style.
        return grpc.unary_stream_rpc_method_handler(
            written if inspect.iscoroutinefunction(streaming) else stream,
            request_deserializer=deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.stream_stream is not None:
        bidirectional = handler.stream_stream
        message_class = getattr(handler.request_deserializer, "__self__", None)

        def bidi(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
            return bidirectional(_ParsedRequests(requests, method, message_class), context)

        # The deserializer stays: an interceptor that refuses the call reads the raw
        # iterator and catches DecodeError itself (refuse_stream).
        return grpc.stream_stream_rpc_method_handler(
            bidi,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return handler  # pragma: no cover - the contract has no client-streaming methods


class _ParsedRequests:
    """The messages of a bidirectional call; one whose bytes do not parse raises
    InvalidArgumentError (gRPC's deserializer raises it into the servicer's read, which would
    report it as INTERNAL), so the servicer refuses the call as a unary one is refused."""

    __slots__ = ("_message_class", "_method", "_requests")

    def __init__(self, requests: AsyncIterator[Any], method: str, message_class: Any) -> None:
        self._requests = aiter(requests)
        self._method = method
        self._message_class = message_class

    def __aiter__(self) -> _ParsedRequests:
        return self

    async def __anext__(self) -> Any:
        try:
            return await anext(self._requests)
        except (DecodeError, ValueError, TypeError) as error:
            name = (
                self._message_class.DESCRIPTOR.full_name
                if self._message_class is not None
                else "request"
            )
            raise InvalidArgumentError(
                f"a message of the call to {self._method} is not a valid {name} message "
                f"({type(error).__name__}); send the protobuf encoding of the message"
            ) from None


class _Capture:
    """Stands in for the server while a generated ``add_*Servicer_to_server`` runs."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: Mapping[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        self.service, self.handlers = service, handlers


def add_servicer(
    add_to_server: Callable[[Any, Any], None], servicer: Any, server: grpc.aio.Server
) -> None:
    """Register ``servicer`` as the generated ``add_to_server`` would, with request
    deserializers that turn bytes that do not parse into INVALID_ARGUMENT (gRPC reports a
    deserializer that raises as UNKNOWN; a bidirectional method's servicer reads the
    InvalidArgumentError of :class:`_ParsedRequests` and refuses the call with it)."""
    capture = _Capture()
    add_to_server(servicer, capture)
    service = capture.service
    handlers = {name: _guard_handler(handler, name) for name, handler in capture.handlers.items()}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)
