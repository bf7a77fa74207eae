"""One exception tree for everything adk-mesh raises.

::

    AdkError                        any adk-mesh failure
    ├── ConfigError                 a developer mistake: bad wiring, unknown model prefix, ...
    ├── InvalidArgumentError        a bad request: empty message, malformed args, bad names
    ├── UnauthenticatedError        the caller proved no identity (no, bad or expired token)
    ├── PermissionDeniedError       the caller may not do this (a mesh-door call from a non-peer)
    ├── AlreadyExistsError          creating something that exists (a session id)
    ├── NotFoundError               something named does not exist
    │   ├── SessionNotFoundError
    │   ├── AgentNotFoundError
    │   ├── ToolNotFoundError
    │   └── ArtifactNotFoundError
    ├── AgentError                  an agent failed while running
    │   ├── DelegationError         delegation too deep, a transfer cycle, a call-path cycle
    │   └── LlmCallLimitError       the invocation used up its model calls (max_llm_calls)
    ├── ToolError                   a tool failed (the model sees the message and can react)
    ├── ModelError                  an LLM provider failed: 5xx, connection, bad response
    │   ├── ModelAuthError          the provider refused our key (HTTP 401, 403)
    │   ├── ModelRateLimitError     the provider's rate limit or quota (HTTP 429)
    │   └── ModelRequestError       the provider refused the request (other HTTP 4xx)
    ├── SessionError                the session store failed
    │   └── StateConflictError      a write rejected by RejectConflicts
    │       └── SessionConflictError    a stale append: the session changed since it was loaded
    ├── ArtifactError               the artifact store failed
    ├── AdkIOError                  file or network I/O failed
    ├── AdkJSONError                a value is not (or cannot be carried as) JSON
    ├── InvocationCancelledError    the caller cancelled the invocation
    └── DeadlineExceededError       the invocation ran out of time

Control flow never uses these: a transfer or an escalation is an :class:`EventActions` field.

Every class has a stable ``reason`` (sent as ``google.rpc.ErrorInfo.reason`` with
``domain="adk-mesh"``) and a gRPC status code in :data:`GRPC_STATUS`, the one table the mesh
uses to map errors to statuses and back. The table names codes as strings so the in-process
runtime never imports grpc; :mod:`adk_mesh.mesh` turns them into ``grpc.StatusCode``.

Model errors say whether trying again can help: UNAVAILABLE (``ModelError``: the provider is
down, overloaded or unreachable; retry later), RESOURCE_EXHAUSTED (``ModelRateLimitError``:
retry after a while), FAILED_PRECONDITION (``ModelAuthError``: the service's own key is
wrong or lacks access; an operator must fix it, retrying cannot) and INTERNAL
(``ModelRequestError``: the provider refused the request as built). :func:`model_error` picks
the class from the provider's HTTP status.

``caller_fault`` tells a service's log apart: a failure the caller caused (a bad request, a
limit it reached, its own cancellation or deadline) is logged as a warning, any other as an
error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "ERROR_DOMAIN",
    "GRPC_STATUS",
    "HTTP_STATUS_BY_GRPC",
    "AdkError",
    "AdkIOError",
    "AdkJSONError",
    "AgentError",
    "AgentNotFoundError",
    "AlreadyExistsError",
    "ArtifactError",
    "ArtifactNotFoundError",
    "ConfigError",
    "DeadlineExceededError",
    "DelegationError",
    "InvalidArgumentError",
    "InvocationCancelledError",
    "LlmCallLimitError",
    "ModelAuthError",
    "ModelError",
    "ModelRateLimitError",
    "ModelRequestError",
    "NotFoundError",
    "PermissionDeniedError",
    "SessionConflictError",
    "SessionError",
    "SessionNotFoundError",
    "StateConflictError",
    "ToolError",
    "ToolNotFoundError",
    "UnauthenticatedError",
    "error_class_for_reason",
    "http_status_for",
    "model_error",
    "status_name_for",
]

ERROR_DOMAIN = "adk-mesh"


class AdkError(Exception):
    """Base of every adk-mesh error.

    Args:
        message: what went wrong, written for the person (or model) who reads it.
        metadata: machine-readable details; travels in ``ErrorInfo.metadata``.
    """

    reason: ClassVar[str] = "ADK_ERROR"
    #: The caller caused it (a bad request, a limit it reached): logged as a warning, not as
    #: an error of the service.
    caller_fault: ClassVar[bool] = False

    def __init__(self, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata: dict[str, str] = dict(metadata or {})
        #: Raised from a tool: end the invocation instead of reporting the error to the model.
        self.propagate = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class ConfigError(AdkError):
    reason = "CONFIG_ERROR"


class InvalidArgumentError(AdkError):
    reason = "INVALID_ARGUMENT"
    caller_fault = True


class UnauthenticatedError(AdkError):
    reason = "UNAUTHENTICATED"
    caller_fault = True


class PermissionDeniedError(AdkError):
    reason = "PERMISSION_DENIED"
    caller_fault = True


class AlreadyExistsError(AdkError):
    reason = "ALREADY_EXISTS"
    caller_fault = True


class NotFoundError(AdkError):
    reason = "NOT_FOUND"
    caller_fault = True


class SessionNotFoundError(NotFoundError):
    reason = "SESSION_NOT_FOUND"


class AgentNotFoundError(NotFoundError):
    reason = "AGENT_NOT_FOUND"


class ToolNotFoundError(NotFoundError):
    reason = "TOOL_NOT_FOUND"


class ArtifactNotFoundError(NotFoundError):
    reason = "ARTIFACT_NOT_FOUND"


class AgentError(AdkError):
    reason = "AGENT_ERROR"


class DelegationError(AgentError):
    reason = "DELEGATION_ERROR"


class LlmCallLimitError(AgentError):
    """The invocation reached ``max_llm_calls``: the caller's, or the server's when lower."""

    reason = "LLM_CALL_LIMIT"
    caller_fault = True


class ToolError(AdkError):
    reason = "TOOL_ERROR"


class ModelError(AdkError):
    """An LLM provider failed. ``status_code`` is the provider's HTTP status, when there was one."""

    reason = "MODEL_ERROR"

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        merged = dict(metadata or {})
        if status_code is not None:
            merged.setdefault("status_code", str(status_code))
        elif merged.get("status_code", "").isdecimal():
            # Rebuilt from a peer's ErrorInfo: a value that is no number (another
            # implementation's, a proxy's) leaves the status unknown, not a ValueError.
            status_code = int(merged["status_code"])
        super().__init__(message, metadata=merged)
        self.status_code = status_code


class ModelAuthError(ModelError):
    """The provider refused the service's credentials (HTTP 401 or 403): not retryable."""

    reason = "MODEL_AUTH_ERROR"


class ModelRateLimitError(ModelError):
    """The provider's rate limit or quota was hit (HTTP 429)."""

    reason = "MODEL_RATE_LIMITED"


class ModelRequestError(ModelError):
    """The provider refused the request as it was built (HTTP 4xx other than 401, 403, 408 and
    429): sending it again changes nothing."""

    reason = "MODEL_REQUEST_REJECTED"


def model_error(
    message: str, *, status_code: int | None = None, metadata: Mapping[str, str] | None = None
) -> ModelError:
    """The :class:`ModelError` for a provider's failure with HTTP status ``status_code``: 401
    and 403 are :class:`ModelAuthError`, 429 :class:`ModelRateLimitError`, other 4xx but 408
    :class:`ModelRequestError`; 408, 5xx and no status at all (a connection failure, a bad
    response) are the retryable :class:`ModelError` itself."""
    cls: type[ModelError] = ModelError
    if status_code in (401, 403):
        cls = ModelAuthError
    elif status_code == 429:
        cls = ModelRateLimitError
    elif status_code is not None and 400 <= status_code < 500 and status_code != 408:
        cls = ModelRequestError
    return cls(message, status_code=status_code, metadata=metadata)


class SessionError(AdkError):
    reason = "SESSION_ERROR"


class StateConflictError(SessionError):
    reason = "STATE_CONFLICT"


class SessionConflictError(StateConflictError):
    """The session changed in its store since the caller loaded it (another turn, in this
    process or another, wrote to it), or another process holds it for a turn. Nothing was
    written: load the session again and retry."""

    reason = "SESSION_CONFLICT"
    caller_fault = True


class ArtifactError(AdkError):
    reason = "ARTIFACT_ERROR"


class AdkIOError(AdkError):
    reason = "IO_ERROR"


class AdkJSONError(AdkError):
    reason = "JSON_ERROR"


class InvocationCancelledError(AdkError):
    """The caller cancelled the invocation (named apart from ``asyncio.CancelledError``, which
    is control flow and always let through)."""

    reason = "CANCELLED"
    caller_fault = True


class DeadlineExceededError(AdkError):
    reason = "DEADLINE_EXCEEDED"
    caller_fault = True


#: The one table from error class to gRPC status code (by name). Subclasses not listed take
#: their nearest listed base's code.
GRPC_STATUS: dict[type[AdkError], str] = {
    AdkError: "INTERNAL",
    ConfigError: "FAILED_PRECONDITION",
    InvalidArgumentError: "INVALID_ARGUMENT",
    UnauthenticatedError: "UNAUTHENTICATED",
    PermissionDeniedError: "PERMISSION_DENIED",
    AlreadyExistsError: "ALREADY_EXISTS",
    NotFoundError: "NOT_FOUND",
    SessionNotFoundError: "NOT_FOUND",
    AgentNotFoundError: "NOT_FOUND",
    ToolNotFoundError: "NOT_FOUND",
    ArtifactNotFoundError: "NOT_FOUND",
    AgentError: "INTERNAL",
    DelegationError: "FAILED_PRECONDITION",
    LlmCallLimitError: "RESOURCE_EXHAUSTED",
    ToolError: "INTERNAL",
    ModelError: "UNAVAILABLE",
    ModelAuthError: "FAILED_PRECONDITION",
    ModelRateLimitError: "RESOURCE_EXHAUSTED",
    ModelRequestError: "INTERNAL",
    SessionError: "INTERNAL",
    StateConflictError: "ABORTED",
    SessionConflictError: "ABORTED",
    ArtifactError: "INTERNAL",
    AdkIOError: "UNAVAILABLE",
    AdkJSONError: "INVALID_ARGUMENT",
    InvocationCancelledError: "CANCELLED",
    DeadlineExceededError: "DEADLINE_EXCEEDED",
}

_BY_REASON: dict[str, type[AdkError]] = {cls.reason: cls for cls in GRPC_STATUS}


def status_name_for(error: AdkError) -> str:
    """The gRPC status code name of an error, from :data:`GRPC_STATUS`."""
    for cls in type(error).__mro__:
        code = GRPC_STATUS.get(cls)
        if code is not None:
            return code
    return "INTERNAL"


#: gRPC status name to HTTP status (google.rpc.Code's documented HTTP mapping; CANCELLED is
#: nginx's 499 "client closed request").
HTTP_STATUS_BY_GRPC: dict[str, int] = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
}


def http_status_for(error: AdkError) -> int:
    """The HTTP status an HTTP door answers for ``error`` (by its gRPC status code)."""
    return HTTP_STATUS_BY_GRPC.get(status_name_for(error), 500)


def error_class_for_reason(reason: str) -> type[AdkError] | None:
    """The error class whose ``reason`` this is, or ``None`` if it is not one of ours."""
    return _BY_REASON.get(reason)
