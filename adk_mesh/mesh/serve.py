"""Run a mesh server as a process: a ready line, then a graceful stop on SIGTERM or SIGINT.

The ready line, ``adk-mesh: serving <kind> <name> on <host>:<port>``, is printed to stdout and
flushed once the server accepts calls: supervisors (``adk-mesh up``, tests) wait for it, and it
holds the real port when ``--port 0`` was asked for.

On SIGTERM or SIGINT the server drains (see :meth:`MeshServer.drain`): health turns
NOT_SERVING, new calls are refused with UNAVAILABLE, the runs in flight get ``grace`` seconds to
finish and are cancelled after that. Progress of the stop goes to stderr.
"""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
import sys

from adk_mesh.errors import AdkIOError
from adk_mesh.mesh._channel import MeshServer
from adk_mesh.mesh.agent_server import AgentServer
from adk_mesh.mesh.tool_server import ToolServer

__all__ = ["PortTakenError", "describe_server", "serve_until_signal", "split_address"]


class PortTakenError(AdkIOError):
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


def _port_is_taken(host: str, port: int) -> bool:
    if port == 0:
        return False
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As a server binds: connections of a stopped server lingering in TIME_WAIT do not
        # make the port "taken"; only a live listener does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


async def start_server(server: MeshServer, address: str) -> int:
    """Start ``server`` on ``address``; a port in use raises :class:`PortTakenError`."""
    host, port = split_address(address)
    # Checked first as well, so the common case gets our message without gRPC's bind log.
    if _port_is_taken(host, port):
        raise PortTakenError(f"port {port} is taken")
    try:
        return await server.start(address)
    except AdkIOError as error:
        if _port_is_taken(host, port):
            raise PortTakenError(f"port {port} is taken") from error
        raise


async def serve_until_signal(server: MeshServer, address: str, *, grace: float = 10.0) -> None:
    """Serve on ``address`` until SIGTERM or SIGINT, then drain for up to ``grace`` seconds.

    Raises:
        PortTakenError: the port is held by another process.
        AdkIOError: the address cannot be bound for another reason.
    """
    loop = asyncio.get_running_loop()
    port = await start_server(server, address)
    stopping = asyncio.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    for number in signals:
        loop.add_signal_handler(number, stopping.set)
    try:
        host, _ = split_address(address)
        kind, name = describe_server(server)
        print(f"adk-mesh: serving {kind} {name} on {host}:{port}", flush=True)
        await stopping.wait()
        print(f"adk-mesh: draining (grace {grace:g}s)", file=sys.stderr, flush=True)
    finally:
        for number in signals:
            loop.remove_signal_handler(number)
        await server.drain(grace)
    print("adk-mesh: stopped", file=sys.stderr, flush=True)
