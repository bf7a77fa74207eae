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
    │   ├── ArtifactTooLargeError   an artifact too large for one message of the mesh
    │   └── ArtifactsBusyError      the service holds all the artifact bytes it may in transfer
    ├── AdkIOError                  file or network I/O failed
    │   └── ServerBusyError         a server at its limit of calls refused one before running it
    ├── AdkJSONError                a value is not (or cannot be carried as) JSON
    ├── InvocationCancelledError    the caller cancelled the invocation
    └── DeadlineExceededError       the invocation ran out of time

Control flow never uses these: a transfer or an escalation is an :class:`EventActions` field.

Every class has a stable ``reason`` (sent as ``google.rpc.ErrorInfo.reason`` with
``domain="adk-mesh"``) and a gRPC status code in :data:`GRPC_STATUS`, the one table the mesh
uses to map errors to statuses and back. The table names codes as strings so the in-process
runtime never imports grpc; :mod:`adk_mesh.mesh` turns them into ``grpc.StatusCode``. An
application's own subclass crosses with its name and the reason of its adk-mesh base in the
metadata, and the other side raises a class of that name under that base
(:func:`wire_metadata`, :func:`error_from_wire`): it reads there as it reads in process.

Model errors say whether trying again can help: UNAVAILABLE (``ModelError``: the provider is
down, overloaded or unreachable; retry later), RESOURCE_EXHAUSTED (``ModelRateLimitError``:
retry after a while), FAILED_PRECONDITION (``ModelAuthError``: the service's own key is
wrong or lacks access; an operator must fix it, retrying cannot) and INTERNAL
(``ModelRequestError``: the provider refused the request as built). :func:`model_error` picks
the class from the provider's HTTP status.

Some refusals say when to try again: an error's ``retry_delay`` (seconds, or ``None``) crosses
the mesh as ``google.rpc.RetryInfo`` and becomes the gateway's ``Retry-After``. The delays the
mesh chooses itself are :data:`RETRY_DELAYS` (a busy server, the artifact budget); a model
provider's rate limit passes on the provider's own ``Retry-After`` when it sent one.

``caller_fault`` tells a service's log apart: a failure the caller caused (a bad request, a
limit it reached, its own cancellation or deadline) is logged as a warning, any other as an
error.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "ERROR_DOMAIN",
    "GRPC_STATUS",
    "HTTP_STATUS_BY_GRPC",
    "RETRY_DELAYS",
    "AdkError",
    "AdkIOError",
    "AdkJSONError",
    "AgentError",
    "AgentNotFoundError",
    "AlreadyExistsError",
    "ArtifactError",
    "ArtifactNotFoundError",
    "ArtifactTooLargeError",
    "ArtifactsBusyError",
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
    "ServerBusyError",
    "SessionConflictError",
    "SessionError",
    "SessionNotFoundError",
    "StateConflictError",
    "ToolError",
    "ToolNotFoundError",
    "UnauthenticatedError",
    "default_retry_delay",
    "error_class_for_reason",
    "error_from_wire",
    "http_status_for",
    "model_error",
    "status_name_for",
    "wire_metadata",
]

ERROR_DOMAIN = "adk-mesh"


class AdkError(Exception):
    """Base of every adk-mesh error.

    Args:
        message: what went wrong, written for the person (or model) who reads it.
        metadata: machine-readable details; travels in ``ErrorInfo.metadata``.

    Attributes:
        retry_delay: seconds to wait before sending the refused request again, when known
            (``None``: no hint). It starts as the class's :data:`RETRY_DELAYS` entry; a
            provider's ``Retry-After`` or a peer's ``google.rpc.RetryInfo`` replaces it.
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
        self.retry_delay: float | None = default_retry_delay(type(self))

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


class ArtifactTooLargeError(ArtifactError):
    """A stored artifact larger than one message of the mesh (a tool may save any size in
    process): the session API cannot send it. FAILED_PRECONDITION: the request is sound, and
    asking again cannot help."""

    reason = "ARTIFACT_TOO_LARGE"


class ArtifactsBusyError(ArtifactError):
    """The service already holds as many artifact bytes in transfer (saves and loads under
    way) as it allows at once, and this artifact does not fit beside them: its memory is
    bounded whatever its callers do. RESOURCE_EXHAUSTED: the same request succeeds once
    others have finished; retry after a while."""

    reason = "ARTIFACTS_BUSY"
    caller_fault = True  # a limit reached, not a fault of the service: a warning in its log


class AdkIOError(AdkError):
    reason = "IO_ERROR"


class ServerBusyError(AdkIOError):
    """A server at its limit of calls at once refused this call before running any of it
    (RESOURCE_EXHAUSTED, with a ``retry_delay``): nothing happened, so sending the same call
    again, to this replica or another, is safe. Set apart from the other RESOURCE_EXHAUSTED
    refusals (a limit the invocation reached, a message too large), which are not."""

    reason = "SERVER_BUSY"


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
    ArtifactTooLargeError: "FAILED_PRECONDITION",
    ArtifactsBusyError: "RESOURCE_EXHAUSTED",
    AdkIOError: "UNAVAILABLE",
    ServerBusyError: "RESOURCE_EXHAUSTED",
    AdkJSONError: "INVALID_ARGUMENT",
    InvocationCancelledError: "CANCELLED",
    DeadlineExceededError: "DEADLINE_EXCEEDED",
}

_BY_REASON: dict[str, type[AdkError]] = {cls.reason: cls for cls in GRPC_STATUS}

#: The one place for the delays the mesh itself tells a refused client to wait (seconds),
#: by error class (subclasses included). A busy server frees a call slot as soon as any of its
#: calls ends, so a short wait; the artifact budget frees bytes only when a whole transfer of
#: up to hundreds of MiB has ended, so a few seconds.
RETRY_DELAYS: dict[type[AdkError], float] = {
    ServerBusyError: 1.0,
    ArtifactsBusyError: 3.0,
}


def default_retry_delay(cls: type[AdkError]) -> float | None:
    """The :data:`RETRY_DELAYS` entry of ``cls`` or its nearest base that has one."""
    for base in cls.__mro__:
        delay = RETRY_DELAYS.get(base)
        if delay is not None:
            return delay
    return None


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


#: Metadata keys of an error whose class is not one of :data:`GRPC_STATUS` (an application's
#: own subclass) as it crosses to another service (:func:`wire_metadata`): the class's name,
#: and the reason of the nearest class of the table it derives from.
ERROR_CLASS_KEY = "adk_mesh_error_class"
ERROR_BASE_KEY = "adk_mesh_error_base"


def _table_class(cls: type[AdkError]) -> type[AdkError]:
    """The nearest class of :data:`GRPC_STATUS` that ``cls`` is (or derives from)."""
    for base in cls.__mro__:
        if base in GRPC_STATUS:
            return base
    return AdkError  # pragma: no cover - every AdkError derives from AdkError


def wire_metadata(error: AdkError) -> dict[str, str]:
    """The metadata an error crosses to another service with (``ErrorInfo.metadata``, a
    tool result's ``ErrorDetail.metadata``): its own, and for a class of the application's
    own, the class's name and the reason of the adk-mesh class it derives from. The class
    cannot cross; the other side raises a class of that name under that base
    (:func:`error_from_wire`), so what reads of the error there (``type(error).__name__`` in
    the text a model or a user reads, ``reason``, ``isinstance`` of adk-mesh's classes) reads
    as in process."""
    table_class = _table_class(type(error))
    if table_class is type(error):
        return error.metadata
    return {
        **error.metadata,
        ERROR_CLASS_KEY: type(error).__name__,
        ERROR_BASE_KEY: table_class.reason,
    }


def error_from_wire(
    reason: str, message: str, metadata: Mapping[str, str], *, default: type[AdkError]
) -> AdkError:
    """The error another service sent as ``reason``, ``message`` and ``metadata`` (see
    :func:`wire_metadata`): of the class its reason names (``default`` for a reason that is not
    ours), or for a class of the application's own there, of a stand-in class of its name."""
    metadata = dict(metadata)
    name = metadata.pop(ERROR_CLASS_KEY, "")
    base_reason = metadata.pop(ERROR_BASE_KEY, "")
    cls = error_class_for_reason(reason)
    if name:
        cls = _peer_class(name, error_class_for_reason(base_reason) or cls or default, reason)
    return (cls or default)(message, metadata=metadata)


#: The classes :func:`_peer_class` made, by name, base and reason: one for each error class of
#: the peers (errors of one class there are of one class here too). Bounded: a peer sends what
#: names it likes.
_PEER_CLASSES: dict[tuple[str, type[AdkError], str], type[AdkError]] = {}
_MAX_PEER_CLASSES = 256
_MAX_CLASS_NAME_CHARS = 128


def _peer_class(name: str, base: type[AdkError], reason: str) -> type[AdkError]:
    """The stand-in for another service's error class ``name``: a subclass of ``base`` (the
    adk-mesh class it derives from there) of that name, with that ``reason``. Nothing of it
    comes from the peer but the two strings, text it sends anyway (a name that is no Python
    class name is ignored: ``base`` it is), so the peer is trusted with nothing new."""
    if (
        len(name) > _MAX_CLASS_NAME_CHARS
        or not name.isidentifier()
        or keyword.iskeyword(name)
        or (name == base.__name__ and reason in ("", base.reason))
    ):
        return base
    reason = reason or base.reason
    key = (name, base, reason)
    cls = _PEER_CLASSES.get(key)
    if cls is None:
        if len(_PEER_CLASSES) >= _MAX_PEER_CLASSES:
            _PEER_CLASSES.clear()
        cls = type(
            name,
            (base,),
            {
                "__doc__": f"Error class {name!r} of another service (a {base.__name__} there).",
                "__module__": __name__,
                "reason": reason,
            },
        )
        _PEER_CLASSES[key] = cls
    return cls
