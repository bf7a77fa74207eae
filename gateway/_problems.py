"""Errors as RFC 9457 problem details (``application/problem+json``).

Every error the gateway answers is one problem object::

    {"type": "about:blank", "title": "Not Found", "status": 404,
     "detail": "session 's1' not found", "reason": "SESSION_NOT_FOUND", "domain": "adk-mesh"}

``reason`` and ``domain`` are the ``google.rpc.ErrorInfo`` of the mesh's error (the same
``reason`` an adk-mesh gRPC client reads), ``metadata`` its metadata when it has any; ``detail``
is the message (google-adk's clients read ``detail`` too: FastAPI's errors carry it). The HTTP
status follows the gRPC status of the error class (:data:`adk_mesh.errors.GRPC_STATUS`) by the
usual mapping of google.rpc codes to HTTP.

A 429 or 503 whose error says when to try again (its ``retry_delay``: the ``google.rpc.RetryInfo``
of the mesh's status, e.g. a busy agent service's second or a provider's own ``Retry-After``)
carries ``Retry-After`` in whole seconds, rounded up and at least 1 (the header has no
fractions, and 0 would invite an immediate retry), and the exact delay as the metadata
``retry_delay_seconds``.
"""

from __future__ import annotations

import math
from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse

from adk_mesh.errors import (
    ERROR_DOMAIN,
    HTTP_STATUS_BY_GRPC,
    AdkError,
    http_status_for,
)
from gateway._models import ProblemBody

__all__ = [
    "HTTP_STATUS_BY_GRPC",
    "PROBLEM_JSON",
    "Problem",
    "documented_problems",
    "http_status_for",
    "problem",
    "problem_response",
]

PROBLEM_JSON = "application/problem+json"

#: The statuses that say "try again later", the only ones ``Retry-After`` goes with.
_RETRYABLE_STATUSES = frozenset({429, 503})


def documented_problems(*statuses: tuple[int, str]) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of a route's errors: each (status, description) a problem
    object, and a 429 or 503 documented with its ``Retry-After`` header."""
    responses: dict[int | str, dict[str, Any]] = {}
    for status, description in statuses:
        response: dict[str, Any] = {
            "model": ProblemBody,
            "content": {PROBLEM_JSON: {}},
            "description": description,
        }
        if status in _RETRYABLE_STATUSES:
            response["headers"] = {
                "Retry-After": {
                    "description": "Seconds to wait before sending the request again, when "
                    "the error says (also metadata.retry_delay_seconds)",
                    "schema": {"type": "integer", "minimum": 1},
                }
            }
        responses[status] = response
    return responses


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
        metadata = error.metadata
        delay = error.retry_delay
        if delay is not None and math.isfinite(delay) and status in _RETRYABLE_STATUSES:
            seconds = max(1, math.ceil(delay))
            headers = {"Retry-After": str(seconds), **(headers or {})}
            metadata = {**metadata, "retry_delay_seconds": f"{delay:g}"}
        body = problem(status, error.message, error.reason, metadata)
    if status == 401:
        headers = {"WWW-Authenticate": 'Bearer, ApiKey header="x-api-key"', **(headers or {})}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)
