"""Errors as RFC 9457 problem details (``application/problem+json``).

Every error the gateway answers is one problem object::

    {"type": "about:blank", "title": "Not Found", "status": 404,
     "detail": "session 's1' not found", "reason": "SESSION_NOT_FOUND", "domain": "adk-mesh"}

``reason`` and ``domain`` are the ``google.rpc.ErrorInfo`` of the mesh's error (the same
``reason`` an adk-mesh gRPC client reads), ``metadata`` its metadata when it has any; ``detail``
is the message (google-adk's clients read ``detail`` too: FastAPI's errors carry it). The HTTP
status follows the gRPC status of the error class (:data:`adk_mesh.errors.GRPC_STATUS`) by the
usual mapping of google.rpc codes to HTTP.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse

from adk_mesh.errors import (
    ERROR_DOMAIN,
    HTTP_STATUS_BY_GRPC,
    AdkError,
    http_status_for,
)

__all__ = [
    "HTTP_STATUS_BY_GRPC",
    "PROBLEM_JSON",
    "Problem",
    "http_status_for",
    "problem",
    "problem_response",
]

PROBLEM_JSON = "application/problem+json"


class Problem(Exception):
    """An error to answer as a problem object that is not one of the mesh's own errors (a body
    too large, a route's own refusal)."""

    def __init__(
        self, status: int, detail: str, *, reason: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.reason = reason
        self.headers = headers or {}


def _title(status: int) -> str:
    if status == 499:
        return "Client Closed Request"
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem(
    status: int, detail: str, reason: str, metadata: dict[str, str] | None = None
) -> dict[str, Any]:
    """The problem object of an error."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": _title(status),
        "status": status,
        "detail": detail,
        "reason": reason,
        "domain": ERROR_DOMAIN,
    }
    if metadata:
        body["metadata"] = metadata
    return body


def problem_response(
    error: AdkError | Problem, *, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The ``application/problem+json`` response for ``error``."""
    if isinstance(error, Problem):
        status, body = error.status, problem(error.status, error.detail, error.reason)
        headers = {**error.headers, **(headers or {})}
    else:
        status = http_status_for(error)
        body = problem(status, error.message, error.reason, error.metadata)
    if status == 401:
        headers = {"WWW-Authenticate": 'Bearer, ApiKey header="x-api-key"', **(headers or {})}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)
