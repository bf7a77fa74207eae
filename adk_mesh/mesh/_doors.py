"""The door keeper: which door a call came to, and whether its caller may use it.

* **Front door** — ``Describe``, root runs and the session API (``SessionService``). With
  authenticators, the caller must prove who they are (UNAUTHENTICATED otherwise); a root run or
  a session-API request may name no user or the principal, never another (PERMISSION_DENIED),
  and its user becomes the principal's id before the servicer runs. ``Describe`` (the agent's
  card, no user's data) also lets a mesh peer in without end-user credentials: a RemoteAgent
  reads its card to declare an AgentTool's parameters.
* **Mesh door** — delegated runs (``Run`` in delegated mode, ``RunDelegated``), ``ListTools``,
  ``CallTool`` and ``CallToolInteractive``. Only a peer gets in: with TLS,
  a client certificate (verified by the mesh door's port) naming an identity of the allow-list;
  without TLS, a process of this machine (loopback). Anyone else: PERMISSION_DENIED.
* Health and reflection are open to all.

Written as a server interceptor that wraps each handler once, like the tracing one: the
request is read before the check, since ``Run`` is one door or the other by its mode.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from adk_mesh.errors import AdkError, PermissionDeniedError
from adk_mesh.mesh._handlers import Behaviour, WrappingInterceptor, closing_inner
from adk_mesh.mesh._status import abort_with_error, refuse_stream
from adk_mesh.mesh.auth import authenticate
from adk_mesh.mesh.security import ServerSecurity, is_local_peer, peer_identities

__all__ = ["DoorKeeper"]

_RUN = "/adk_mesh.v1.AgentService/Run"
_DESCRIBE = "/adk_mesh.v1.AgentService/Describe"
#: Every request of the session API names its user in ``user_id`` (ListApps names none).
_SESSION_API = "/adk_mesh.v1.SessionService/"
_MESH_METHODS = frozenset(
    {
        "/adk_mesh.v1.ToolService/ListTools",
        "/adk_mesh.v1.ToolService/CallTool",
        "/adk_mesh.v1.ToolService/CallToolInteractive",
        "/adk_mesh.v1.AgentService/RunDelegated",
    }
)


def _is_mesh_call(method: str, request: Any) -> bool:
    if method == _RUN:
        return bool(request.WhichOneof("mode") == "delegated")
    return method in _MESH_METHODS


def _bind_user(request: Any, principal: str, what: str) -> None:
    """The request's ``user_id`` becomes the principal's; naming another user is refused."""
    if request.user_id and request.user_id != principal:
        raise PermissionDeniedError(f"{what} names another user than the one its credentials prove")
    request.user_id = principal


class _Checks:
    """The checks of one server's security, on one call."""

    def __init__(self, security: ServerSecurity) -> None:
        self.security = security

    def peer(self, method: str, context: grpc.aio.ServicerContext) -> None:
        if self.security.tls is None:
            if not is_local_peer(context.peer()):
                raise PermissionDeniedError(
                    f"{method.rsplit('/', 1)[-1]} is a mesh-door call, and without TLS this "
                    "service's mesh door is open to processes of its own machine only"
                )
            return
        identities = peer_identities(context.auth_context())
        if not identities:
            raise PermissionDeniedError(
                f"{method.rsplit('/', 1)[-1]} is a mesh-door call: call the mesh port with a "
                "client certificate of the mesh"
            )
        if not identities & self.security.allow_peers:
            raise PermissionDeniedError(
                f"peer {', '.join(sorted(identities))} is not in this service's allow-list"
            )

    async def principal(self, context: grpc.aio.ServicerContext) -> str | None:
        """The user the call's credentials prove; None without authenticators."""
        if not self.security.authenticators:
            return None
        metadata = {
            key.lower(): value
            for key, value in (context.invocation_metadata() or ())
            if isinstance(value, str)
        }
        return (await authenticate(self.security.authenticators, metadata)).user_id

    async def front(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        user_id = await self.principal(context)
        if user_id is None:
            return
        if method == _RUN:
            # Only a root run: writing to ``request.root`` of a request with no mode would
            # make it one (refused then for its missing message, not for its missing mode).
            if request.WhichOneof("mode") == "root":
                _bind_user(request.root, user_id, "this run")
        elif method.startswith(_SESSION_API) and "user_id" in request.DESCRIPTOR.fields_by_name:
            _bind_user(request, user_id, "this request")

    def is_peer(self, method: str, context: grpc.aio.ServicerContext) -> bool:
        try:
            self.peer(method, context)
        except PermissionDeniedError:
            return False
        return True

    async def check(self, method: str, request: Any, context: grpc.aio.ServicerContext) -> None:
        if _is_mesh_call(method, request):
            self.peer(method, context)
        elif not (method == _DESCRIBE and self.is_peer(method, context)):
            await self.front(method, request, context)


def _guard_unary_unary(
    behaviour: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]],
    method: str,
    checks: _Checks,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            await checks.check(method, request, context)
        except AdkError as error:
            await abort_with_error(context, error)
        return await behaviour(request, context)

    return handler


def _guard_unary_stream(
    behaviour: Callable[[Any, grpc.aio.ServicerContext], Any],
    method: str,
    checks: _Checks,
) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
    async def handler(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            await checks.check(method, request, context)
        except AdkError as error:
            await abort_with_error(context, error)
        result = behaviour(request, context)
        if not hasattr(result, "__aiter__"):
            await result  # a handler that writes through context.write()
            return
        async with closing_inner(result) as responses:
            async for response in responses:
                yield response

    return handler


def _guard_stream_stream(
    behaviour: Callable[[Any, grpc.aio.ServicerContext], Any],
    method: str,
    checks: _Checks,
) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
    """A bidirectional method: checked before its first message is read. A mesh method's
    requests come from other agents of the mesh, so it is a mesh-door call, whatever it
    sends; the session API's (``SaveArtifactStream``) is a front-door call, its credentials
    checked first and its header's ``user_id`` bound to the principal as it arrives."""

    async def handler(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            if method in _MESH_METHODS:
                checks.peer(method, context)
            elif method.startswith(_SESSION_API):
                user_id = await checks.principal(context)
                if user_id is not None:
                    requests = _bound_headers(requests, user_id)
            else:
                raise PermissionDeniedError(f"{method} is not a method of the mesh")
        except AdkError as error:
            await refuse_stream(requests, context, error)
        result = behaviour(requests, context)
        if not hasattr(result, "__aiter__"):
            await result
            return
        async with closing_inner(result) as responses:
            async for response in responses:
                yield response

    return handler


async def _bound_headers(requests: AsyncIterator[Any], user_id: str) -> AsyncIterator[Any]:
    """``requests`` with the ``user_id`` of each header bound to the principal (another user:
    PERMISSION_DENIED, raised to the servicer as it reads the header)."""
    async for request in requests:
        if request.WhichOneof("chunk") == "header":
            _bind_user(request.header, user_id, "this request")
        yield request


class DoorKeeper(WrappingInterceptor):
    """Checks each call of the mesh's services at its door (see the module docstring); health
    and reflection are open."""

    def __init__(self, security: ServerSecurity) -> None:
        super().__init__()
        self._checks = _Checks(security)

    def applies(self, method: str) -> bool:
        return method.startswith("/adk_mesh.")

    def wrap_unary_unary(self, behaviour: Behaviour, method: str) -> Behaviour:
        return _guard_unary_unary(behaviour, method, self._checks)

    def wrap_unary_stream(self, behaviour: Behaviour, method: str) -> Behaviour:
        return _guard_unary_stream(behaviour, method, self._checks)

    def wrap_stream_stream(self, behaviour: Behaviour, method: str) -> Behaviour:
        return _guard_stream_stream(behaviour, method, self._checks)
