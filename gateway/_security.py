"""Who is calling, and what a request may be: authentication (the mesh's own authenticators),
the principal checked against the path's user, request size limits and CORS.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adk_mesh.errors import PermissionDeniedError, UnauthenticatedError
from adk_mesh.mesh.auth import Authenticator, Principal, authenticate
from gateway._json import check_unicode
from gateway._problems import Problem, problem_response

__all__ = [
    "CORS_HEADERS",
    "CORS_METHODS",
    "CREDENTIAL_HEADERS",
    "BodyLimit",
    "Caller",
    "SecurityHeaders",
    "StrictJsonRoute",
]

#: Headers that carry a user's credentials; forwarded to the agent services as call metadata.
CREDENTIAL_HEADERS = ("authorization", "x-api-key")


class Caller:
    """The caller of one request: the principal the authenticators established (``None`` when
    the gateway has none: development), and the credentials to forward to the mesh."""

    def __init__(self, principal: Principal | None, credentials: tuple[tuple[str, str], ...]):
        self.principal = principal
        self.credentials = credentials

    def check_user(self, user_id: str) -> None:
        """Refuse a request about another user than the principal.

        Raises:
            PermissionDeniedError: ``user_id`` is not the principal's.
        """
        if self.principal is not None and self.principal.user_id != user_id:
            raise PermissionDeniedError(
                f"the credentials are {self.principal.user_id!r}'s; this request is about user "
                f"{user_id!r}",
                metadata={"user": user_id},
            )

    @classmethod
    async def of(cls, request: Request, authenticators: Sequence[Authenticator]) -> Caller:
        """The caller of ``request``.

        Raises:
            UnauthenticatedError: the gateway has authenticators and the request carries no
                credential they know, or an invalid one; or a credential header holds what
                no credential does (and gRPC metadata cannot carry).
        """
        credentials = tuple(
            (name, value)
            for name in CREDENTIAL_HEADERS
            if (value := request.headers.get(name)) is not None
        )
        for name, value in credentials:
            # HTTP lets a header hold Latin-1 and tabs; gRPC metadata (where the credentials
            # go on to the services) only printable ASCII, as every bearer token and API key
            # is. Forwarded, such a value failed the call as the agent's INTERNAL error.
            if not all(" " <= character <= "~" for character in value):
                raise UnauthenticatedError(
                    f"{name} holds characters no credential has (only printable ASCII)"
                )
        if not authenticators:
            return cls(None, credentials)
        principal = await authenticate(authenticators, dict(credentials))
        return cls(principal, credentials)


#: Every response: no MIME sniffing (an artifact's bytes are never read as HTML or script).
_EVERY_RESPONSE = ((b"x-content-type-options", b"nosniff"),)
#: The web UI's pages besides: scripts, styles and connections of its own origin only,
#: images also from data: (artifact previews), no plugins, no <base>, never framed
#: (clickjacking), no referrer to links it shows.
_UI_POLICY = (
    b"default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    b"form-action 'self'; frame-ancestors 'none'"
)
_UI_RESPONSE = (
    (b"content-security-policy", _UI_POLICY),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
)


class SecurityHeaders:
    """Adds ``X-Content-Type-Options: nosniff`` to every response, and to the web UI's
    (``/ui``, ``/``) a Content-Security-Policy that keeps it to its own origin and out of
    frames. ``/docs`` (Swagger UI, whose scripts come from a CDN) gets no policy."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        extra = _EVERY_RESPONSE + (_UI_RESPONSE if path == "/" or path.startswith("/ui") else ())

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                message["headers"] = [
                    *message.get("headers", ()),
                    *(header for header in extra if header[0] not in present),
                ]
            await send(message)

        await self.app(scope, receive, with_headers)


class BodyLimit:
    """Refuse a request body larger than ``max_bytes`` with 413 (problem+json): at once when
    its Content-Length says so, else as soon as more than that has been read."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> Problem:
        return Problem(
            413,
            f"the request body is larger than this gateway's limit of {self.max_bytes} bytes",
            reason="REQUEST_TOO_LARGE",
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes or declared < 0:
                    await problem_response(self._too_large())(scope, receive, send)
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await problem_response(self._too_large())(scope, receive, send)


#: A JSON escape of a UTF-16 surrogate (half of a pair, or a lone one): only a body holding
#: one needs :func:`~gateway._json.check_unicode`'s walk.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class StrictJsonRoute(APIRoute):
    """A route whose JSON body is refused with 400, naming the member, when a string in it
    holds a lone surrogate (:func:`~gateway._json.check_unicode`), before the route reads it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def checked(request: Request) -> Response:
            if _SURROGATE_ESCAPE.search(await request.body()):
                try:
                    # Parsed once: the route reads the same request's cached JSON.
                    body = await request.json()
                except (ValueError, RecursionError):
                    pass  # not JSON: FastAPI answers it as it does any other (422, 400)
                else:
                    check_unicode(body)
            return await handle(request)

        return checked


class _BodyTooLarge(HTTPException):
    """Raised from the body's reader; FastAPI lets an HTTPException from there through to the
    app's handler (which answers problem+json), and :class:`BodyLimit` catches it elsewhere."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            413, f"the request body is larger than this gateway's limit of {max_bytes} bytes"
        )


#: What a browser on an allowed origin may send (CORS): the credentials headers, JSON, the
#: run's deadline, a PATCH's idempotency key and trace context; no cookies (credentials are
#: headers, not ambient).
CORS_METHODS = ("GET", "POST", "PATCH", "DELETE")
CORS_HEADERS = (
    "authorization",
    "x-api-key",
    "content-type",
    "x-request-timeout",
    "idempotency-key",
    "traceparent",
    "tracestate",
)
