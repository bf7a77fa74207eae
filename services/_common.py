"""What every service of the reference mesh shares: where the others are, and how to serve."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Collection, Sequence
from typing import Any

from adk_mesh import BaseAgent, BaseTool, ConfigError, ReadonlyContext, Toolset
from adk_mesh.mesh import AgentServer, RemoteToolset
from adk_mesh.mesh.security import (
    add_server_security_arguments,
    grace_default,
    seconds_argument,
    server_security_from_arguments,
)
from adk_mesh.mesh.serve import BindError, PortTakenError, serve_until_signal
from adk_mesh.telemetry import configure_telemetry

__all__ = [
    "APP_NAME",
    "DEFAULT_PORTS",
    "LOGISTICS_DESCRIPTION",
    "PLANNER_DESCRIPTION",
    "OnlyTools",
    "agent_server",
    "remote_tools",
    "run_service",
    "target",
]

#: The app the travel desk's sessions belong to.
APP_NAME = "travel_desk"

#: Where each service listens when nothing else is said (as in mesh.toml).
DEFAULT_PORTS = {
    "concierge": 50051,
    "planner": 50052,
    "logistics": 50053,
    "writer": 50054,
    "tools": 50055,
}


#: How the concierge describes the planner service (one line: models read it to route).
PLANNER_DESCRIPTION = (
    "Plans trips: day-by-day itineraries, airline fares, and trip notes saved and read back. "
    "Keywords: plan, trip, itinerary, visit, holiday, fare, flight, ticket, note, save, read."
)


#: How the concierge describes the logistics service (one line: models read it to route).
LOGISTICS_DESCRIPTION = (
    "Travel logistics: time zones and clocks, unit conversions, budgets and arithmetic. "
    "Keywords: time, clock, zone, jet lag, convert, km, miles, kg, pounds, celsius, "
    "fahrenheit, calculate, compute, budget, total."
)


def target(service: str) -> str:
    """``host:port`` of another service: ``ADK_MESH_TARGET_<SERVICE>``, else its default port
    on 127.0.0.1."""
    value = os.environ.get(f"ADK_MESH_TARGET_{service.upper()}", "").strip()
    return value or f"127.0.0.1:{DEFAULT_PORTS[service]}"


class OnlyTools(Toolset):
    """The tools of another toolset whose names are listed, so each agent sees only its own."""

    def __init__(self, inner: Toolset, names: Collection[str]) -> None:
        super().__init__(inner.name)
        self._inner = inner
        self._names = frozenset(names)

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        return [tool for tool in await self._inner.tools(ctx) if tool.name in self._names]

    async def close(self) -> None:
        await self._inner.close()


def remote_tools(*names: str) -> OnlyTools:
    """These tools of the tool service (``services.tools``)."""
    return OnlyTools(RemoteToolset(target("tools"), name="travel_tools"), names)


def agent_server(args: argparse.Namespace | None, agent: BaseAgent, **options: Any) -> AgentServer:
    """The AgentServer of a reference agent service (``options``: its arguments), which also
    serves the agent over A2A when the service was started with ``--a2a-port`` (as ``adk-mesh
    serve agent`` does, and ``a2a_port`` in mesh.toml asks)."""
    a2a_port = getattr(args, "a2a_port", None)
    if a2a_port is None:
        return AgentServer(agent, **options)
    try:
        from adk_mesh.mesh.a2a_server import A2aAgentServer
    except ImportError as error:
        raise ConfigError(f"--a2a-port needs {error.name}: pip install 'adk-mesh[a2a]'") from None
    assert args is not None
    return A2aAgentServer(
        agent,
        a2a_address=f"{args.host}:{a2a_port}",
        public_url=args.a2a_url or None,
        announce=lambda line: print(line, flush=True),
        **options,
    )


def run_service(
    name: str,
    build_server: Callable[[argparse.Namespace], Any],
    *,
    argv: Sequence[str] | None = None,
    description: str = "",
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    """Parse ``--host``/``--port`` and the security flags of ``adk-mesh serve`` (``--tls-cert``,
    ``--tls-key``, ``--tls-client-ca``, ``--mesh-port``, ``--allow-peer``, ``--insecure``,
    ``--auth-*``) and ``--a2a-port``/``--a2a-url`` (agent services building their server with
    :func:`agent_server`), build the server, serve until SIGTERM or SIGINT.

    A mistake in the flags or files is one ``error:`` line on stderr and exit code 2.
    """
    parser = argparse.ArgumentParser(prog=f"python -m services.{name}", description=description)
    parser.add_argument("--host", default=os.environ.get("ADK_MESH_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=DEFAULT_PORTS[name], help="0 picks a free port")
    parser.add_argument(
        "--grace",
        type=seconds_argument,
        default=grace_default(5.0),
        help="seconds to drain on stop (default $ADK_MESH_GRACE, else 5)",
    )
    add_server_security_arguments(parser)
    parser.add_argument(
        "--a2a-port",
        type=int,
        help="an agent service: also serve it over A2A on this port (0: any free one)",
    )
    parser.add_argument("--a2a-url", help="the base URL of --a2a-port for the agent card")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        if args.a2a_url and args.a2a_port is None:
            raise ConfigError("--a2a-url goes with --a2a-port")
        security = server_security_from_arguments(args)
        telemetry = configure_telemetry(f"adk-mesh-{name}")
    except ConfigError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    try:
        server = build_server(args)
        if args.a2a_port is not None and not hasattr(server, "a2a_port"):
            raise ConfigError(f"--a2a-port: services.{name} does not serve an agent")
        asyncio.run(
            serve_until_signal(
                server,
                f"{args.host}:{args.port}",
                grace=args.grace,
                security=security,
                mesh_port=args.mesh_port,
            )
        )
    except PortTakenError as error:
        # The front door's port or the mesh door's: the message names the one.
        print(
            f"error: {error.message} on {args.host} by another process; stop it or pass "
            "another --port (or --mesh-port)",
            file=sys.stderr,
        )
        return 2
    except (BindError, ConfigError) as error:
        # ConfigError: plaintext beyond loopback without --insecure, among others.
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        telemetry.shutdown()
    return 0
