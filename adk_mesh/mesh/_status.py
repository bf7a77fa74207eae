"""Map adk-mesh errors to gRPC statuses and back, with ``google.rpc.ErrorInfo`` details.

The server side aborts a call with the status code from :data:`adk_mesh.errors.GRPC_STATUS`
and a rich status (``grpc-status-details-bin``) holding ``ErrorInfo(reason, domain="adk-mesh",
metadata)``. The client side reads that detail back and raises the same class with the same
message; a status without our ErrorInfo maps by its code alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import NoReturn

import grpc
import grpc.aio
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from adk_mesh.errors import (
    ERROR_DOMAIN,
    AdkError,
    AdkIOError,
    AgentError,
    ConfigError,
    DeadlineExceededError,
    InvalidArgumentError,
    InvocationCancelledError,
    NotFoundError,
    StateConflictError,
    error_class_for_reason,
    status_name_for,
)

__all__ = [
    "abort_with_error",
    "error_boundary",
    "error_from_rpc_error",
    "error_to_status",
    "status_code_for",
]

_DETAILS_KEY = "grpc-status-details-bin"

# A status from a peer that is not adk-mesh (or a transport failure) maps by code alone.
_CLASS_FOR_CODE: dict[grpc.StatusCode, type[AdkError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
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
    info = error_details_pb2.ErrorInfo(
        reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=error.message, details=[detail])
    return code, status


async def abort_with_error(context: grpc.aio.ServicerContext, error: AdkError) -> NoReturn:
    """Abort the current call with the error's status code, message and ErrorInfo."""
    code, status = error_to_status(error)
    await context.abort(
        code, error.message, trailing_metadata=((_DETAILS_KEY, status.SerializeToString()),)
    )
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key != _DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == ERROR_DOMAIN:
                return info
    return None


def error_from_rpc_error(error: grpc.RpcError) -> AdkError:
    """Turn a failed call back into the adk-mesh error the server raised."""
    code: grpc.StatusCode = error.code()
    details = error.details()
    message: str = details if details is not None else code.name
    info = _error_info(error)
    cls: type[AdkError] | None = None
    metadata: dict[str, str] = {}
    if info is not None:
        cls = error_class_for_reason(info.reason)
        metadata = dict(info.metadata)
    if cls is None:
        cls = _CLASS_FOR_CODE.get(code, AgentError)
    return cls(message, metadata=metadata)


@asynccontextmanager
async def error_boundary(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
    """The one error handler of every mesh servicer: an :class:`AdkError` aborts the call with
    its status and ErrorInfo; any other exception becomes INTERNAL with its type and message
    (never a bare UNKNOWN). Cancellation and aborts pass through untouched."""
    try:
        yield
    except grpc.aio.AbortError:
        raise
    except AdkError as error:
        await abort_with_error(context, error)
    except Exception as error:
        await abort_with_error(context, AdkError(f"{type(error).__name__}: {error}"))
