"""Run a mesh server as a process: a ready line, then a graceful stop on SIGTERM or SIGINT.

The ready line, ``adk-mesh: serving <kind> <name> on <host>:<port>``, is printed to stdout and
flushed once the server accepts calls: supervisors (``adk-mesh up``, tests) wait for it, and it
holds the real port when ``--port 0`` was asked for.

Before it binds, an agent server's stores are opened (:func:`open_stores`): one that cannot be
used (a SQLite path that is a directory, a PostgreSQL server that cannot be reached, ...) stops
the process at start-up, never reporting healthy, rather than failing its first turn. Then the
server warms up (:meth:`MeshServer.warm_up`): the MCP servers its toolsets front are started
and their sessions opened, so the ready line and gRPC health SERVING (a readiness probe) come
once they are up and the first turn does not wait for them. One that cannot start is a
warning, not a stop: its first listing tries again. A signal during either stops the
start-up at once.

On SIGTERM or SIGINT the server drains (see :meth:`MeshServer.drain`): health turns
NOT_SERVING, new calls are refused with UNAVAILABLE, the runs in flight get ``grace`` seconds to
finish and are cancelled after that; a second signal changes nothing (the grace bounds the
drain; SIGKILL stops at once). Progress of the stop goes to stderr.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
import sys
from typing import TYPE_CHECKING

from adk_mesh import _interrupts
from adk_mesh.artifacts.file import FileArtifactService
from adk_mesh.errors import AdkError, AdkIOError, ConfigError
from adk_mesh.mesh._channel import (
    DEFAULT_MAX_CONCURRENT_CALLS,
    DEFAULT_MAX_CONNECTION_AGE,
    MeshServer,
)
from adk_mesh.mesh.agent_server import AgentServer
from adk_mesh.mesh.security import ServerSecurity, check_transport
from adk_mesh.mesh.tool_server import ToolServer

if TYPE_CHECKING:
    from adk_mesh.mesh.mcp_server import McpServer

__all__ = [
    "BindError",
    "PortTakenError",
    "describe_server",
    "open_stores",
    "serve_until_signal",
    "split_address",
]


class BindError(AdkIOError):
    """The address to serve on cannot be bound: not an address of this machine, a port that is
    taken, a host name that does not resolve, a privileged port."""


class PortTakenError(BindError):
    """The port to serve on is held by another process."""


def describe_server(server: MeshServer) -> tuple[str, str]:
    """``(kind, name)`` of a server for the ready line: ``("agent", "coordinator")``."""
    if isinstance(server, AgentServer):
        return "agent", server.agent.name
    if isinstance(server, ToolServer):
        return "tools", server.name
    return type(server).__name__, ""


def split_address(address: str) -> tuple[str, int]:
    """``("127.0.0.1", 8080)`` from ``127.0.0.1:8080`` (``[::1]:8080`` for IPv6)."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit():
        raise AdkIOError(f"address {address!r} has no port; write host:port")
    return host, int(port)


def _bind_problem(host: str, port: int) -> BindError | None:
    """Why ``host:port`` cannot be served on, found by binding it with a plain socket first;
    ``None`` when it can.

    gRPC reports a failed bind by logging from its C core to stderr (``E... Failed to add
    port``) before Python sees the error; binding first lets a command print one line of its
    own instead, and leaves gRPC's log on for failures nobody foresaw.
    """
    name = host.strip("[]")
    if not 0 <= port <= 65535:
        return BindError(f"port {port} is not a port number (0 to 65535)")
    try:
        addresses = socket.getaddrinfo(
            name or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as error:
        return BindError(f"cannot bind {host}:{port}: cannot resolve {name!r}: {error.strerror}")
    failures: list[OSError] = []
    for family, kind, protocol, _, socket_address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            # As a server binds: connections of a stopped server lingering in TIME_WAIT do not
            # make the port "taken"; only a live listener does.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(socket_address)
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    return PortTakenError(f"port {port} is taken")
                failures.append(error)
    # gRPC serves on every address the host resolves to that it can bind.
    if len(failures) < len(addresses):
        return None
    first = failures[0]
    hint = ""
    if first.errno == errno.EADDRNOTAVAIL:
        hint = f"; {name} is not an address of this machine"
    elif first.errno == errno.EACCES:
        hint = "; ports below 1024 need privileges"
    return BindError(f"cannot bind {host}:{port}: {first.strerror}{hint}")


#: The user and session a start-up read of the stores names: a valid id no client is given.
_CHECK_ID = "adk-mesh-start-up-check"


async def open_stores(server: MeshServer) -> None:
    """Open the stores of an :class:`AgentServer` now, as their first call would (SQLite files
    created and migrated, PostgreSQL pools connected within their connect timeout and migrated
    or checked, a file artifact store's directory created and written in); other servers
    have none. The stores themselves stay lazy for library use: serving calls this.

    Each is opened by a read through its contract (a session, artifact keys or memories no one
    has), so any backend opens as it does for real; nothing is written but what opening writes.

    Raises:
        ConfigError: a store that cannot be used: which one, and why (its own message names
            its file or URL). The stores the server opened are closed first.
    """
    if not isinstance(server, AgentServer):
        return
    app, user = server.app_name, _CHECK_ID
    sessions, artifacts, memory = (
        server.session_service,
        server.artifact_service,
        server.memory_service,
    )
    what = "session store"
    try:
        await sessions.get_session(app_name=app, user_id=user, session_id=_CHECK_ID)
        if artifacts is not None:
            what = "artifact store"
            if isinstance(artifacts, FileArtifactService):
                # Listing a directory that does not exist yet finds nothing and fails nothing.
                await artifacts.check_root()
            else:
                await artifacts.list_artifact_keys(app_name=app, user_id=user, session_id=_CHECK_ID)
        if memory is not None:
            what = "memory store"
            await memory.search_memory(app_name=app, user_id=user, query=_CHECK_ID)
    except AdkError as error:
        await server.stop()
        raise ConfigError(f"the {what} cannot be used: {error.message}") from error


async def start_server(
    server: MeshServer,
    address: str,
    *,
    security: ServerSecurity | None = None,
    mesh_address: str | None = None,
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
    max_connection_age: float | None = DEFAULT_MAX_CONNECTION_AGE,
) -> int:
    """Start ``server`` on ``address`` (and its mesh door on ``mesh_address``); an address
    that cannot be bound raises :class:`BindError` (:class:`PortTakenError` for a port in
    use)."""
    check_transport(address, security or ServerSecurity())
    addresses = [split_address(address)]
    if mesh_address is not None:
        addresses.append(split_address(mesh_address))
    for host, port in addresses:
        problem = _bind_problem(host, port)
        if problem is not None:
            raise problem
    try:
        return await server.start(
            address,
            security=security,
            mesh_address=mesh_address,
            max_concurrent_calls=max_concurrent_calls,
            max_connection_age=max_connection_age,
        )
    except AdkIOError as error:
        # Bound by someone else in between, or a failure the probe cannot see.
        for host, port in addresses:
            problem = _bind_problem(host, port)
            if problem is not None:
                raise problem from error
        raise BindError(error.message) from error


#: The longest a start-up waits for its server's warm-up: within what `adk-mesh up` (30 s)
#: and the Kubernetes startup probes (60 s) give a service to become ready. An MCP server
#: slower than that is left to connect on its first listing, as without a warm-up.
WARM_UP_SECONDS = 20.0


async def _warm_up(server: MeshServer) -> None:
    try:
        async with asyncio.timeout(WARM_UP_SECONDS):
            await server.warm_up()
    except TimeoutError:
        print(
            f"adk-mesh: the warm-up did not end within {WARM_UP_SECONDS:g}s; serving now (what "
            "it did not connect connects on its first listing)",
            file=sys.stderr,
            flush=True,
        )


async def serve_until_signal(
    server: MeshServer,
    address: str,
    *,
    grace: float = 10.0,
    security: ServerSecurity | None = None,
    mesh_port: int | None = None,
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
    max_connection_age: float | None = DEFAULT_MAX_CONNECTION_AGE,
    mcp_port: int | None = None,
) -> None:
    """Serve on ``address`` until SIGTERM or SIGINT, then drain for up to ``grace`` seconds.

    With ``mesh_port``, the mesh door listens on that port of the same host (mutual TLS: see
    :mod:`adk_mesh.mesh.security`); its line, ``adk-mesh: mesh door on <host>:<port>``, comes
    just before the ready line.

    With ``mcp_port`` (a :class:`ToolServer` only), its toolset is also served as a
    streamable-HTTP MCP server on that port of the same host, with the same TLS and
    authenticators (see :mod:`adk_mesh.mesh.mcp_server`); its line, ``adk-mesh: MCP on
    <url>``, comes before the ready line. On a signal it stops taking requests first.

    Before the server starts, its stores are opened (:func:`open_stores`) and it warms up
    (:meth:`MeshServer.warm_up`: the MCP servers of its toolsets started, their sessions
    opened), so it reports SERVING and prints its ready line only once they are. Code that
    serves a server itself calls ``await server.warm_up()`` before ``start``.

    Raises:
        ConfigError: a store of the server cannot be used (see :func:`open_stores`).
        PortTakenError: the port is held by another process.
        BindError: the address cannot be bound for another reason.
    """
    loop = asyncio.get_running_loop()
    host, _ = split_address(address)
    mesh_address = f"{host}:{mesh_port}" if mesh_port is not None else None
    stopping = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    # Before the signal handlers: Ctrl-C while a store connects ends the start-up at once.
    await open_stores(server)
    # Before the server starts, so that health is not SERVING (and no ready line comes)
    # while an MCP server still starts; before the signal handlers too, so that a signal
    # while it does ends the start-up at once, as during open_stores. A Ctrl-C CPython
    # swallowed while the command loaded skips it: the server only starts to stop.
    if not _interrupts.swallowed():
        try:
            await _warm_up(server)
        except BaseException:
            # Ctrl-C: the MCP servers already started (and the stores) are closed on the way.
            await server.stop()
            raise
    # Before the server starts: a signal while it starts then stops it once started, with a
    # drain. asyncio.run's own Ctrl-C handling would leave a started server behind, never
    # stopped (gRPC complains at exit), and SIGTERM would kill the process.
    for number in signals:
        loop.add_signal_handler(number, stopping.set)
    if _interrupts.swallowed():
        # A Ctrl-C CPython swallowed as the command started (adk_mesh._interrupts): stop as
        # for one that comes now.
        stopping.set()
    try:
        # A Ctrl-C that came before: asyncio.run's own handler cancelled this task, which
        # takes effect at its next wait. That is here, before a server starts that nothing
        # would stop, not inside the start.
        await asyncio.sleep(0)
        port = await start_server(
            server,
            address,
            security=security,
            mesh_address=mesh_address,
            max_concurrent_calls=max_concurrent_calls,
            max_connection_age=max_connection_age,
        )
        mcp = None
        if mcp_port is not None:
            mcp = await _start_mcp(server, host, mcp_port, security)
    except BaseException:
        for number in signals:
            loop.remove_signal_handler(number)
        raise
    try:
        kind, name = describe_server(server)
        if not stopping.is_set():
            # No ready line when a signal came during the start: it is stopping, not ready.
            if server.mesh_port is not None:
                print(f"adk-mesh: mesh door on {host}:{server.mesh_port} (mutual TLS)", flush=True)
            if mcp is not None:
                print(f"adk-mesh: MCP on {mcp.scheme}://{host}:{mcp.port}/mcp", flush=True)
            print(f"adk-mesh: serving {kind} {name} on {host}:{port}", flush=True)
        await stopping.wait()
        print(f"adk-mesh: draining (grace {grace:g}s)", file=sys.stderr, flush=True)
        # The handlers stay for the drain: without them a second SIGTERM would kill the
        # process (the runs in flight cut, spans lost) and a second Ctrl-C would raise
        # KeyboardInterrupt inside the event loop. The grace already bounds the drain.
        for number in signals:
            loop.add_signal_handler(number, _already_draining, grace)
    finally:
        if mcp is not None:
            await mcp.stop(grace)
        await server.drain(grace)
        for number in signals:
            loop.remove_signal_handler(number)
    print("adk-mesh: stopped", file=sys.stderr, flush=True)


def _already_draining(grace: float) -> None:
    print(
        f"adk-mesh: already draining: running calls get the rest of the grace ({grace:g}s); "
        "SIGKILL stops at once",
        file=sys.stderr,
        flush=True,
    )


async def _start_mcp(
    server: MeshServer, host: str, port: int, security: ServerSecurity | None
) -> McpServer:
    """The MCP server of a ToolServer's toolset on ``host:port``; the gRPC server is stopped
    again when it cannot start."""
    from adk_mesh.mesh.mcp_server import McpServer

    if not isinstance(server, ToolServer):
        await server.stop()
        raise ConfigError("--mcp-port serves a toolset: it goes with `adk-mesh serve tools`")
    mcp = McpServer(
        server.toolset,
        name=server.name,
        limits=server.limits,
        security=security,
        plugins=server.plugins,
    )
    try:
        await mcp.start(host, port)
    except BaseException:
        await server.stop()
        raise
    return mcp
