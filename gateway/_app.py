"""The gateway's ASGI application: google-adk's api_server API over the mesh.

:func:`create_app` builds it from :class:`~gateway.GatewaySettings`. What it serves:

* ``GET /health``, ``GET /version``, ``GET /list-apps`` — open / open / authenticated;
* ``POST /run``, ``POST /run_sse`` (:mod:`gateway._runs`);
* the session and artifact routes under ``/apps/{app}/users/{user}/sessions``
  (:mod:`gateway._sessions`, over the contract's ``SessionService``);
* ``/openapi.json`` (OpenAPI 3.1) and ``/docs``;
* the web UI and its trace routes — see :func:`mount_ui`: the static files of
  ``gateway/ui/`` at ``/ui``, and the routers of ``gateway/_traces.py``.

Every error is ``application/problem+json`` (:mod:`gateway._problems`).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at run time,
# and they name dependencies local to the factory.

import asyncio
import importlib
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from adk_mesh import __version__
from adk_mesh.errors import AdkError, AdkIOError, DeadlineExceededError
from gateway._mesh import MeshClient
from gateway._models import ListAppsResponse, VersionBody
from gateway._problems import PROBLEM_JSON, Problem, problem, problem_response
from gateway._runs import run_router
from gateway._security import CORS_HEADERS, CORS_METHODS, BodyLimit, Caller, SecurityHeaders
from gateway._settings import GatewaySettings

__all__ = ["UI_DIRECTORY", "create_app", "mount_ui"]

logger = logging.getLogger("gateway")

#: The web UI's static files (owned by the UI; served at ``/ui``).
UI_DIRECTORY = Path(__file__).resolve().parent / "ui"

_DESCRIPTION = """\
google-adk's `api_server` REST and SSE API, served over an adk-mesh of gRPC agent services.

Authentication (when the gateway has authenticators): `Authorization: Bearer <JWT>` or
`X-API-Key: <key>`. The principal is the user: a path's `{user_id}` (or a run's `userId`) must be
the principal's, else 403. Errors are RFC 9457 `application/problem+json` whose `reason` is the
mesh's `google.rpc.ErrorInfo` reason.
"""


def create_app(settings: GatewaySettings, *, mesh: MeshClient | None = None) -> FastAPI:
    """The gateway for ``settings`` (``mesh``: the client to the agent services; by default one
    over ``settings.apps`` with ``settings.tls``, closed when the app shuts down)."""
    client = mesh if mesh is not None else MeshClient(settings.apps, settings.tls)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if mesh is None:
                await client.close()

    app = FastAPI(
        title="adk-mesh gateway",
        version=__version__,
        description=_DESCRIPTION,
        lifespan=lifespan,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.mesh = client
    _install_error_handlers(app)

    bearer = HTTPBearer(auto_error=False, bearerFormat="JWT", scheme_name="bearer")
    api_key = APIKeyHeader(name="x-api-key", auto_error=False, scheme_name="apiKey")

    async def caller(
        request: Request,
        _bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
        _api_key: Annotated[str | None, Depends(api_key)],
    ) -> Caller:
        """The authenticated caller (the security schemes above only document the headers:
        the mesh's authenticators read them)."""
        return await Caller.of(request, settings.authenticators)

    async def user_caller(user_id: str, who: Annotated[Caller, Depends(caller)]) -> Caller:
        """The caller of a route under ``/apps/{app}/users/{user_id}``: that user only."""
        who.check_user(user_id)
        return who

    app.state.caller = caller
    app.state.user_caller = user_caller

    @app.get("/health", tags=["service"], summary="Liveness")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/version", tags=["service"], response_model=VersionBody)
    async def version() -> dict[str, str]:
        info = sys.version_info
        return {
            "version": __version__,
            "language": "python",
            "language_version": f"{info.major}.{info.minor}.{info.micro}",
        }

    @app.get(
        "/list-apps",
        tags=["apps"],
        response_model=list[str] | ListAppsResponse,
        summary="The apps this gateway serves",
    )
    async def list_apps(
        who: Annotated[Caller, Depends(caller)],
        detailed: Annotated[
            bool, Query(description="Each app's root agent and description (Describe)")
        ] = False,
    ) -> Any:
        names = sorted(client.apps)
        if not detailed:
            return names
        answers = await asyncio.gather(
            *(client.describe(name, credentials=who.credentials) for name in names),
            return_exceptions=True,
        )
        apps = []
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, AdkIOError | DeadlineExceededError):
                # One app's service down (or too slow) leaves it out, not the others: a web
                # UI still lists what it can run. A refusal of the user is still the answer.
                logger.warning("list-apps: app %r left out: %s", name, answer.message)
                continue
            if isinstance(answer, BaseException):
                raise answer
            apps.append(
                {
                    "name": name,
                    "rootAgentName": answer.name,
                    "description": answer.description,
                    "language": "python",
                    "isComputerUse": False,
                }
            )
        return JSONResponse({"apps": apps})

    app.include_router(run_router(settings, client, caller))
    _include_session_routes(app, settings, client, user_caller)
    mount_ui(app, settings)

    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(SecurityHeaders)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=list(CORS_METHODS),
            # The headers the gateway hands to runs as request metadata too: a browser's
            # preflight for them would otherwise be refused.
            allow_headers=[*CORS_HEADERS, *settings.request_headers],
            max_age=600,
        )
    return app


def _include_session_routes(
    app: FastAPI, settings: GatewaySettings, mesh: MeshClient, user_caller: Any
) -> None:
    try:
        from gateway._sessions import session_router
    except ImportError:  # pragma: no cover - before the contract has SessionService
        return
    app.include_router(session_router(settings, mesh, user_caller))


def mount_ui(app: FastAPI, settings: GatewaySettings) -> None:
    """Where the web UI plugs in (the UI's files are its own; this is the only place that
    knows them):

    * the static files of ``gateway/ui/`` are served at ``/ui`` (``/ui/`` serves its
      ``index.html``), and ``/`` redirects there;
    * ``gateway/_traces.py``, when present, contributes routes: its ``routes`` (a list of
      Starlette routes, or a ``fastapi.APIRouter``), or what its ``create_router(app,
      settings)`` returns (an ``APIRouter``, or a list of routes or routers). Routes that need a
      user authenticate with ``app.state.caller`` (a FastAPI dependency giving the
      :class:`~gateway._security.Caller`) or ``app.state.user_caller`` (for a path with
      ``{user_id}``: that user only), and reach the mesh through ``app.state.mesh``.
    """
    try:
        traces = importlib.import_module("gateway._traces")
    except ModuleNotFoundError as error:
        if error.name != "gateway._traces":
            raise
        traces = None
    if traces is not None:
        factory = getattr(traces, "create_router", None)
        found = factory(app, settings) if factory is not None else getattr(traces, "routes", [])
        for item in found if isinstance(found, list | tuple) else [found]:
            if isinstance(item, APIRouter):
                app.include_router(item)
            else:
                app.router.routes.append(item)
    if UI_DIRECTORY.is_dir():
        app.mount("/ui", StaticFiles(directory=UI_DIRECTORY, html=True), name="ui")

        @app.get("/", include_in_schema=False)
        async def to_ui() -> RedirectResponse:
            return RedirectResponse("/ui/")


def _install_error_handlers(app: FastAPI) -> None:
    async def adk_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, AdkError | Problem)
        return problem_response(error)

    async def invalid_body(_: Request, error: Exception) -> Response:
        assert isinstance(error, RequestValidationError)
        errors = [
            {"loc": list(item.get("loc", ())), "msg": item.get("msg", ""), "type": item.get("type")}
            for item in error.errors()
        ]
        body = problem(422, "the request does not validate; see errors", "INVALID_ARGUMENT")
        body["errors"] = errors
        return JSONResponse(body, status_code=422, media_type=PROBLEM_JSON)

    async def http_error(_: Request, error: Exception) -> Response:
        assert isinstance(error, StarletteHTTPException)
        reasons = {
            404: "NOT_FOUND",
            405: "METHOD_NOT_ALLOWED",
            413: "REQUEST_TOO_LARGE",
            401: "UNAUTHENTICATED",
            403: "PERMISSION_DENIED",
        }
        detail = error.detail if isinstance(error.detail, str) else str(error.detail)
        return problem_response(
            Problem(error.status_code, detail, reason=reasons.get(error.status_code, "HTTP_ERROR")),
            headers=dict(error.headers or {}),
        )

    app.add_exception_handler(AdkError, adk_error)
    app.add_exception_handler(Problem, adk_error)
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_exception_handler(StarletteHTTPException, http_error)
