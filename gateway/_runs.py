"""``POST /run`` and ``POST /run_sse``: one user turn over the mesh's streaming ``Run``.

``/run_sse`` writes each event as it arrives, one ``data:`` frame per event (``data: <JSON>``
and a blank line, the JSON compact as google-adk writes it); nothing is buffered. When the run
fails after the stream started, a last frame says so as google-adk's does::

    data: {"error": "ToolError: ...", "error_details": {"error_type": "ToolError",
           "error_message": "...", "timestamp": 1767225600.0, "reason": "TOOL_ERROR"}}

A client that goes away (closes the stream, or the connection of a ``/run``) cancels the
gRPC call, and with it the run in every service downstream. The run's deadline is the
gateway's ``run_timeout``, or less when the client sends ``X-Request-Timeout: <seconds>``;
it travels with the call (gRPC deadlines propagate through the mesh).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at run time,
# and they name dependencies local to the factory.

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import pydantic_core
from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse

from adk_mesh.errors import AdkError, InvalidArgumentError
from adk_mesh.ids import check_id
from adk_mesh.runner import check_new_message
from adk_mesh.types import Content, Event
from gateway._json import content_from_json, event_to_json
from gateway._mesh import MeshClient, RunStream
from gateway._models import ErrorFrame, EventBody, RunAgentRequest
from gateway._problems import Problem, documented_problems
from gateway._security import Caller, StrictJsonRoute
from gateway._settings import GatewaySettings
from gateway._tracing import server_span

__all__ = ["error_frame", "event_frames", "run_router"]

_PROBLEMS = documented_problems(
    (400, "A request the gateway or the agent service refuses"),
    (401, "No credentials, or invalid ones"),
    (403, "The credentials are another user's"),
    (404, "Unknown app (or session, for /run)"),
    (413, "Request body too large"),
    (422, "A body that does not validate"),
    (429, "The agent service is at its limit of calls at once, or a limit of the run was reached"),
    (503, "The agent service is unavailable"),
    (504, "The run's deadline passed"),
)


def event_frames(event: Event) -> list[bytes]:
    """The SSE frames of one event, as google-adk streams it: an event that carries content and
    saved artifacts goes out as two frames (the content without ``artifactDelta``, then the
    actions alone), which is how ADK Web renders both."""
    body = event_to_json(event)
    delta = body["actions"]["artifactDelta"]
    content = body.get("content")
    if delta and content and content.get("parts"):
        content_only = {**body, "actions": {**body["actions"], "artifactDelta": {}}}
        actions_only = {key: value for key, value in body.items() if key != "content"}
        return [_frame(content_only), _frame(actions_only)]
    return [_frame(body)]


def _frame(body: dict[str, Any]) -> bytes:
    return b"data: " + pydantic_core.to_json(body) + b"\n\n"


def error_frame(error: AdkError) -> bytes:
    """The frame that ends a failed stream, as google-adk writes it (``json.dumps``'s default
    separators, ``error_details`` with the ErrorInfo reason added)."""
    name = type(error).__name__
    details = {
        "error_type": name,
        "error_message": error.message,
        "timestamp": time.time(),
        "reason": error.reason,
    }
    text = json.dumps({"error": f"{name}: {error.message}", "error_details": details})
    return f"data: {text}\n\n".encode()


def _timeout(settings: GatewaySettings, header: str | None) -> float:
    if header is None:
        return settings.run_timeout
    try:
        asked = float(header)
    except ValueError:
        asked = -1.0
    if not 0 < asked < float("inf"):
        raise InvalidArgumentError(
            f"X-Request-Timeout is {header!r}; send a positive number of seconds"
        )
    return min(asked, settings.run_timeout)


def run_router(settings: GatewaySettings, mesh: MeshClient, caller: Any) -> APIRouter:
    """The run routes; ``caller`` is the dependency that authenticates a request."""
    router = APIRouter(tags=["runs"], route_class=StrictJsonRoute)

    def default_app(body: RunAgentRequest) -> str:
        if body.app_name:
            return body.app_name
        if len(settings.apps) == 1:
            return next(iter(settings.apps))
        raise InvalidArgumentError("appName is required: this gateway serves several apps")

    def start(
        body: RunAgentRequest,
        who: Caller,
        timeout_header: str | None,
        request: Request,
        *,
        streaming: bool,
    ) -> tuple[str, RunStream]:
        app = default_app(body)
        who.check_user(body.user_id)
        mesh.target(app)  # an unknown app is a 404 before anything starts
        if body.state_delta:
            raise Problem(
                400,
                "stateDelta on a run is not supported by adk-mesh: a run's state changes come "
                "from its agents",
                reason="UNSUPPORTED",
            )
        if body.invocation_id or body.function_call_event_id:
            raise Problem(
                400,
                "resuming an invocation (invocationId, functionCallEventId) is not supported "
                "by adk-mesh; send the function response as a new message",
                reason="UNSUPPORTED",
            )
        if body.new_message is None:
            raise InvalidArgumentError("newMessage is required: the user's message of the turn")
        message: Content = content_from_json(
            body.new_message.model_dump(by_alias=True, exclude_none=True)
        )
        # What the service would refuse at once, refused here too: /run_sse's 200 is sent
        # before the service answers, and a request that cannot start is a 400, not a stream.
        check_id("userId", body.user_id)
        if not body.session_id:
            # The service would start a session with a fresh id, but neither /run's list nor
            # /run_sse's frames tell the client that id: each such turn would start a session
            # nobody can find again. google-adk answers 404 for it.
            raise InvalidArgumentError(
                "sessionId is required: name the session of the turn (an id the app does not "
                "know yet starts that session), or create one with POST "
                "/apps/{app_name}/users/{user_id}/sessions"
            )
        check_id("sessionId", body.session_id)
        check_new_message(message)
        stream = mesh.run(
            app,
            user_id=body.user_id,
            session_id=body.session_id,
            message=message,
            streaming=streaming,
            credentials=who.credentials,
            timeout=_timeout(settings, timeout_header),
            request_metadata={
                name: request.headers[name]
                for name in settings.request_headers
                if name in request.headers
            },
        )
        return app, stream

    timeout_header = Annotated[
        str | None,
        Header(
            alias="X-Request-Timeout",
            description="Seconds the run may take (at most the gateway's run timeout).",
        ),
    ]

    @router.post(
        "/run",
        response_model=list[EventBody],
        response_model_exclude_none=True,
        responses=_PROBLEMS,
        summary="Run one user turn; all its events at once",
    )
    async def run(
        body: RunAgentRequest,
        request: Request,
        who: Annotated[Caller, Depends(caller)],
        x_request_timeout: timeout_header = None,
    ) -> Response:
        # google-adk's /run runs without streaming whatever the body says (its RunConfig
        # leaves streaming_mode NONE): partials in a list answered at once would only repeat
        # the final answer's text.
        app, stream = start(body, who, x_request_timeout, request, streaming=False)
        # The call starts in the collecting task, made inside the span: the span is its parent.
        with server_span(request, "POST /run", app):
            collect = asyncio.ensure_future(_collect(stream))
            watch = asyncio.ensure_future(_disconnected(request))
            try:
                await asyncio.wait((collect, watch), return_when=asyncio.FIRST_COMPLETED)
                if not collect.done():
                    # The client went away: cancelling the reader cancels the gRPC call.
                    collect.cancel()
                    with contextlib.suppress(asyncio.CancelledError, AdkError):
                        await collect
                    return Response(status_code=499)
                events = collect.result()
            finally:
                watch.cancel()
                collect.cancel()
        return JSONResponse([event_to_json(event) for event in events])

    @router.post(
        "/run_sse",
        response_class=EventSourceResponse,
        responses={
            200: {
                "description": "One `data:` frame per event (google-adk's Event JSON, as "
                "/run's items); a failure after the stream started ends it with an error "
                "frame.",
                "content": {
                    "text/event-stream": {
                        "schema": {
                            "oneOf": [
                                {"$ref": "#/components/schemas/EventBody"},
                                {"$ref": "#/components/schemas/ErrorFrame"},
                            ]
                        }
                    }
                },
            },
            **_PROBLEMS,
        },
        summary="Run one user turn; its events as a server-sent event stream",
        openapi_extra={"x-error-frame": ErrorFrame.model_json_schema()},
    )
    async def run_sse(
        body: RunAgentRequest,
        request: Request,
        who: Annotated[Caller, Depends(caller)],
        x_request_timeout: timeout_header = None,
    ) -> EventSourceResponse:
        app, stream = start(body, who, x_request_timeout, request, streaming=body.streaming)

        async def frames() -> AsyncIterator[bytes]:
            with server_span(request, "POST /run_sse", app):
                try:
                    async for event in stream.events():
                        for frame in event_frames(event):
                            yield frame
                except AdkError as error:
                    # A client that went away cancels this generator (asyncio.CancelledError,
                    # passed through); an InvocationCancelledError is the service's CANCELLED,
                    # which the client is told as any other failure.
                    yield error_frame(error)
                finally:
                    stream.cancel()

        return EventSourceResponse(
            frames(),
            ping=settings.sse_ping_seconds,
            sep="\n",
        )

    return router


async def _collect(stream: RunStream) -> list[Event]:
    return [event async for event in stream.events()]


async def _disconnected(request: Request) -> None:
    """Return once the client has gone away (the body is already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
