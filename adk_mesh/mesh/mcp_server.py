"""Serve a Toolset as a streamable-HTTP MCP server (``adk-mesh serve tools ... --mcp-port P``).

Built on the official ``mcp`` SDK's low-level server (``pip install 'adk-mesh[mcp]'``), served
by uvicorn in the same event loop as the gRPC server, at ``http(s)://host:port/mcp``. Both
protocol eras are served: a 2025-11-25 client through the ``initialize`` handshake (with an
``Mcp-Session-Id``), a 2026-07-28 client sessionlessly.

* ``tools/list``: the toolset's tools for this caller, each with its declaration's JSON Schema
  as ``inputSchema`` (a tool without parameters takes an empty object).
* ``tools/call``: the tool runs as it would for a remote agent, with a
  :class:`~adk_mesh.contexts.ToolContext`, the server's tool timeout and its plugins' tool
  hooks; each of its progress updates becomes an MCP progress notification with its message,
  on one scale whose ``progress`` increases with each notification, as the specification
  requires (``progress`` = the fraction and ``total`` = 1 when the first update gives one,
  else the count of updates so far; a falling fraction never moves it back: see
  :class:`_ProgressScale`), its result the ``structuredContent`` and the same JSON as text,
  its error (a :class:`~adk_mesh.errors.ToolError` or any failure, a plugin hook's refusal
  included) an ``isError`` result whose text the caller's model reads. An unknown tool is
  the protocol error ``-32602``, as the MCP specification asks; a toolset whose listing
  fails, ``-32603`` (its cause only in the server's log).

**Who calls, in which session.** An MCP call carries no adk-mesh context, so the server
makes one: the app is the toolset's name; the user is the principal the credentials prove
(see below), else ``"mcp"``; the session is the MCP session (``Mcp-Session-Id``) when the
client has one, else a new id for each call; each call is an invocation of its own. The
state starts empty at each call and what a tool writes to it (or to ``ctx.actions``) is
dropped: an MCP client has no session of the mesh to write it into. There is no artifact or
memory store, so a tool that needs one fails with an ``isError`` result.

**Security**, the same as the service's gRPC front door:

* beyond loopback it serves TLS only, with the service's certificate and key (``--tls-cert``,
  ``--tls-key``), unless ``insecure`` (``--insecure``) says plaintext on a trusted network;
* with authenticators (``--auth-jwks``, ``--auth-api-keys``), every request needs the same
  credentials as the gRPC port: ``Authorization: Bearer <token>`` or ``X-API-Key: <key>``;
  anything else gets HTTP 401;
* beyond loopback it needs authenticators: on the gRPC port, tools are called only by mesh
  peers proving themselves with a certificate, and this port must not be an open door next
  to it. On loopback, without authenticators, it is open to this machine's processes;
* on loopback, requests must name a loopback ``Host`` (the SDK's DNS-rebinding protection).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from adk_mesh.contexts import InvocationContext, ReadonlyContext, ToolContext
from adk_mesh.errors import (
    AdkError,
    AdkIOError,
    ConfigError,
    UnauthenticatedError,
    http_status_for,
)
from adk_mesh.ids import check_id
from adk_mesh.mesh._drain import HttpGate
from adk_mesh.mesh._limits import ServerLimits
from adk_mesh.mesh.auth import Principal, authenticate
from adk_mesh.mesh.security import ServerSecurity, check_transport, is_loopback
from adk_mesh.mesh.tool_server import _CallerAgent
from adk_mesh.plugins._manager import PluginManager, execute_with_plugins
from adk_mesh.runner import new_invocation_id
from adk_mesh.sessions.base import Session
from adk_mesh.telemetry import _spans as telemetry
from adk_mesh.tools.base import BaseTool, Toolset

if TYPE_CHECKING:
    import uvicorn
    from mcp.server.context import ServerRequestContext
    from mcp.types import CallToolRequestParams, CallToolResult, ListToolsResult, Tool

__all__ = ["MCP_PATH", "MCP_USER", "McpServer"]

logger = logging.getLogger("adk_mesh.mesh")

#: Where the MCP endpoint is served.
MCP_PATH = "/mcp"
#: The user of a call when the server has no authenticators.
MCP_USER = "mcp"
#: The agent name a tool reads from its context when an MCP client calls it.
MCP_CALLER = "mcp-client"
_PRINCIPAL = "adk_mesh_principal"
_STARTUP_TIMEOUT = 30.0

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


class McpServer:
    """A :class:`Toolset` served over MCP's streamable HTTP (see the module docstring).

    Args:
        toolset: what to serve (a ToolServer's ``toolset``, to serve the same tools).
        name: the server's name in MCP, and the app name of its calls.
        limits: the tool timeout of each call (default: ``ServerLimits()``).
        security: TLS, authenticators and ``insecure``, as the gRPC server has them.
        plugins: the tool hooks run around each call (a ToolServer's ``plugins``).

    Example::

        mcp = McpServer(tool_server.toolset, name=tool_server.name)
        port = await mcp.start("127.0.0.1", 0)
        ...
        await mcp.stop(grace=5)
    """

    def __init__(
        self,
        toolset: Toolset,
        *,
        name: str,
        limits: ServerLimits | None = None,
        security: ServerSecurity | None = None,
        plugins: PluginManager | None = None,
    ) -> None:
        self.toolset = toolset
        self.plugins = plugins
        self.name = name
        self.limits = limits or ServerLimits()
        self.security = security or ServerSecurity()
        self.port: int | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._gate: HttpGate | None = None

    @property
    def scheme(self) -> str:
        return "http" if self.security.tls is None else "https"

    async def start(self, host: str, port: int) -> int:
        """Bind ``host:port`` (0: any free port), start serving and return the port.

        Raises:
            ConfigError: plaintext beyond loopback without ``insecure``, or beyond loopback
                without authenticators; the ``mcp`` extra is not installed.
            BindError: the address cannot be bound (``PortTakenError``: another process holds
                the port).
        """
        if self._server is not None:
            raise ConfigError("the MCP server is already started")
        security = self.security
        check_transport(f"{host}:{port}", security)
        if not is_loopback(host) and not security.authenticators:
            raise ConfigError(
                f"refusing to serve MCP on {host}, beyond this machine, to anyone: give end-user "
                "authentication (--auth-jwks or --auth-api-keys); the gRPC port lets only mesh "
                "peers call these tools"
            )
        try:
            import uvicorn
        except ModuleNotFoundError as error:  # pragma: no cover - installed with the mcp extra
            raise ConfigError("serving MCP needs the mcp extra: adk-mesh[mcp]") from error
        from adk_mesh.mesh.serve import _bind_problem

        problem = _bind_problem(host, port)
        if problem is not None:
            raise problem
        gate = HttpGate(self._app(host))
        listener = _bind(host, port)
        tls: dict[str, Any] = {}
        if security.tls is not None:
            tls = {
                "ssl_certfile": str(security.tls.cert_file),
                "ssl_keyfile": str(security.tls.key_file),
            }
        config = uvicorn.Config(
            gate,
            log_level="warning",
            access_log=False,
            lifespan="on",
            server_header=False,
            **tls,
        )
        server = _embedded_uvicorn()(config)
        task = asyncio.get_running_loop().create_task(server.serve(sockets=[listener]))
        started = asyncio.ensure_future(server.ready.wait())
        try:
            await asyncio.wait(
                (started, task), timeout=_STARTUP_TIMEOUT, return_when="FIRST_COMPLETED"
            )
        finally:
            started.cancel()
        if not server.ready.is_set():
            server.should_exit = True
            await _finish(task)
            listener.close()
            raise AdkIOError(f"the MCP server on {host}:{port} did not start")
        self._server, self._task, self._gate = server, task, gate
        self.port = int(listener.getsockname()[1])
        if not security.authenticators:
            logger.info(
                "MCP on %s:%s: no authenticator; calls run as user %r", host, self.port, MCP_USER
            )
        return self.port

    async def stop(self, grace: float = 5.0) -> None:
        """Stop taking requests; those running get ``grace`` seconds. Idempotent."""
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        if self._gate is not None:
            self._gate.close()
        server.config.timeout_graceful_shutdown = max(grace, 0.1)
        server.should_exit = True
        await _finish(task)

    # --- the MCP side --------------------------------------------------------------------

    def _app(self, host: str) -> _App:
        from mcp.server.lowlevel import Server

        server: Server[Any] = Server(
            self.name,
            version=_version(),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        app = server.streamable_http_app(
            streamable_http_path=MCP_PATH, host=host, transport_security=_rebinding_guard(host)
        )
        if self.security.authenticators:
            return _Authenticating(app, self.security)
        return app

    def _invocation(self, ctx: ServerRequestContext[Any, Any]) -> InvocationContext:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        request = ctx.request
        principal: Principal | None = None
        session_id = ""
        if request is not None:
            principal = getattr(request.state, _PRINCIPAL, None)
            # Only a handshake-era session is one the SDK opened and checks (an unknown id,
            # or one of another user, is answered 404 before this); sessionless, the header
            # is whatever the client asserts, and a call must not run in another's session.
            if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                session_id = request.headers.get("mcp-session-id", "")
        try:
            check_id("the MCP session id", session_id)
        except Exception:
            session_id = ""
        session = Session(
            id=session_id or f"mcp-{uuid.uuid4().hex}",
            app_name=self.name,
            user_id=principal.user_id if principal is not None else MCP_USER,
            state={},
        )
        return InvocationContext(
            invocation_id=new_invocation_id(),
            agent=_CallerAgent(MCP_CALLER),
            session=session,
            tool_timeout=self.limits.tool_timeout,
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: Any
    ) -> ListToolsResult:
        from mcp.types import ListToolsResult

        tools = await self._tools(self._invocation(ctx))
        return ListToolsResult(tools=[_declared(tool) for tool in tools])

    async def _tools(self, invocation: InvocationContext) -> list[BaseTool]:
        """The toolset's tools for this caller. A listing that fails is the JSON-RPC error
        ``-32603`` naming the toolset, its cause only in the server's log: the SDK would
        answer code 0 (not a JSON-RPC error code) with the exception's text, which can
        carry a backend's address or credentials."""
        from mcp import MCPError
        from mcp.types import INTERNAL_ERROR

        try:
            return await self.toolset.tools(ReadonlyContext(invocation))
        except Exception:
            logger.exception("MCP: listing the tools of %r failed", self.name)
            message = f"the tool service {self.name!r} could not list its tools"
            raise MCPError(code=INTERNAL_ERROR, message=message) from None

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        from mcp import MCPError
        from mcp.types import INVALID_PARAMS, CallToolResult, TextContent

        invocation = self._invocation(ctx)
        tools = await self._tools(invocation)
        tool = next((t for t in tools if t.name == params.name), None)
        if tool is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        args = dict(params.arguments or {})
        scale = _ProgressScale()

        async def report(message: str, data: dict[str, Any] | None, fraction: float | None) -> None:
            progress, total = scale.next(fraction)
            await ctx.session.report_progress(progress, total, message or None)

        tool_context = ToolContext(invocation, progress=report)
        with telemetry.trace_tool_call(tool.name, tool, None, args, invocation):
            try:
                response, error = await execute_with_plugins(self.plugins, tool, tool_context, args)
            except AdkError as failed:
                # A plugin's hook refused the call (a policy's PermissionDeniedError) or
                # failed (an AgentError naming it): the call's error, for the caller's model
                # to read, not a protocol error (code 0 from the SDK).
                response, error = None, failed
            if error is not None:
                telemetry.record_tool_error(error)
            else:
                telemetry.record_tool_result(response)
        if error is not None:
            return CallToolResult(content=[TextContent(text=error.message)], is_error=True)
        result = response if response is not None else {}
        try:
            text = json.dumps(result, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as unfit:
            message = f"tool {tool.name!r} returned what cannot be sent back: {unfit}"
            return CallToolResult(content=[TextContent(text=message)], is_error=True)
        return CallToolResult(content=[TextContent(text=text)], structured_content=result)


class _ProgressScale:
    """Maps a tool's progress updates onto MCP ``progress``/``total`` values that increase
    with each notification, as the MCP specification requires for a progress token, while
    every update still reaches the client with its message.

    The scale is chosen by the tool's first update:

    * it gives a fraction: ``progress`` is the fraction and ``total`` 1 (a client shows a
      percentage, an ``McpToolset`` reads the fraction back). A fraction below (or at) the
      last one sent, or an update without one, is sent as the smallest float above the last
      ``progress``: the bar never moves back, and the message is not dropped. (After 1 this
      exceeds ``total`` by a rounding error; the alternative was to drop the message.)
    * it does not: ``progress`` counts the updates so far, without a ``total``; once a
      fraction ``f`` is given, ``total`` is ``progress / f``, so their ratio is the fraction
      (a falling fraction raises the estimated total instead of lowering ``progress``).

    Fractions are clamped to [0, 1]; one that is not a finite number counts as none.
    """

    def __init__(self) -> None:
        self._counting: bool | None = None
        self._updates = 0
        self._last = -math.inf
        self._fraction: float | None = None

    def next(self, fraction: float | None) -> tuple[float, float | None]:
        """The ``(progress, total)`` of the next notification."""
        known = fraction is not None and math.isfinite(fraction)
        if fraction is not None and known:
            self._fraction = min(1.0, max(0.0, fraction))
        if self._counting is None:
            self._counting = not known
        self._updates += 1
        if self._counting:
            return self._counted()
        if known and self._fraction is not None and self._fraction > self._last:
            self._last = self._fraction
        else:
            self._last = math.nextafter(self._last, math.inf)
        return self._last, 1.0

    def _counted(self) -> tuple[float, float | None]:
        progress = float(self._updates)
        if not self._fraction:  # none yet, or 0: the total is unknown
            return progress, None
        return progress, progress / self._fraction


def _declared(tool: BaseTool) -> Tool:
    """The MCP declaration of a tool: its name, description and parameters' JSON Schema."""
    from mcp.types import Tool

    declaration = tool.declaration()
    schema = declaration.parameters_schema or {"type": "object", "properties": {}}
    return Tool(name=declaration.name, description=declaration.description, input_schema=schema)


class _Authenticating:
    """ASGI middleware: a request without credentials the service's authenticators accept
    gets HTTP 401; the principal of one that has them goes to the handlers in
    ``request.state``."""

    def __init__(self, app: _App, security: ServerSecurity) -> None:
        self._app = app
        self._authenticators = security.authenticators

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        metadata = {
            key.decode("latin-1").lower(): value.decode("latin-1")
            for key, value in scope.get("headers", ())
        }
        try:
            principal = await authenticate(self._authenticators, metadata)
        except UnauthenticatedError as error:
            body = json.dumps({"error": "unauthorized", "error_description": error.message})
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="adk-mesh"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
            return
        except AdkError as error:  # the credentials cannot be checked now, or a check broke
            body = json.dumps({"error": "server_error", "error_description": error.message})
            await send(
                {
                    "type": "http.response.start",
                    "status": http_status_for(error),
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
            return
        scope.setdefault("state", {})[_PRINCIPAL] = principal
        # The SDK binds an MCP session to the user that opened it (another credential with
        # its Mcp-Session-Id is answered 404) when it finds that user in the ASGI scope.
        scope["user"] = _session_owner(principal)
        await self._app(scope, receive, send)


def _rebinding_guard(host: str) -> Any:
    """On a loopback address, the SDK's DNS-rebinding protection: a request must name a
    loopback ``Host`` (and ``Origin``, when it sends one) — the address served among them. The
    SDK turns it on by itself only for three spellings of loopback (not ``127.0.0.2`` or
    ``[::1]``). None beyond loopback, where TLS or authenticators guard the door."""
    from mcp.server.transport_security import TransportSecuritySettings

    name = host.strip("[]")
    if not is_loopback(name):
        return None
    served = f"[{name}]" if ":" in name else name
    hosts = list(dict.fromkeys([f"{served}:*", "127.0.0.1:*", "localhost:*", "[::1]:*"]))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{allowed}" for allowed in hosts],
    )


def _session_owner(principal: Principal) -> Any:
    """The principal as the SDK's authenticated user, whose sessions only it may use."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    token = AccessToken(token="", client_id=principal.user_id, scopes=[], subject=principal.user_id)
    return AuthenticatedUser(token)


def _bind(host: str, port: int) -> socket.socket:
    name = host.strip("[]")
    family = socket.AF_INET6 if ":" in name else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((name, port))
    except OSError as error:
        listener.close()
        raise AdkIOError(f"cannot bind the MCP port {host}:{port}: {error.strerror}") from None
    listener.listen(128)
    listener.setblocking(False)
    return listener


async def _finish(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await task


def _version() -> str:
    from adk_mesh._version import __version__

    return __version__


def _embedded_uvicorn() -> Any:
    import uvicorn

    class Embedded(uvicorn.Server):
        """uvicorn in a loop it does not own: the process's signals stay with the mesh
        server's drain (``serve_until_signal``), and ``ready`` is set once it listens."""

        def __init__(self, config: uvicorn.Config) -> None:
            super().__init__(config)
            self.ready = asyncio.Event()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if not self.should_exit:
                self.ready.set()

    return Embedded
