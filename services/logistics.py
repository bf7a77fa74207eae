"""Logistics: time zones, unit conversions and arithmetic, with the tool service's tools.

``logistics`` (an LlmAgent, reached by transfer from the concierge) uses ``convert_time`` —
the reference MCP time server's tool (PyPI ``mcp-server-time``), which the tool service fronts
for the mesh through an ``McpToolset`` (see mesh.toml) — ``convert_units`` and ``calculate``.
Conversions without a target unit follow the user's preferred system, ``user:units``, which the
concierge remembers across sessions.

Run it: ``python -m services.logistics --port 50053`` or ``adk-mesh serve agent
services.logistics:root_agent``.
"""

from __future__ import annotations

import argparse

from adk_mesh import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.models.offline import model_from_env
from services._common import (
    APP_NAME,
    LOGISTICS_DESCRIPTION,
    agent_server,
    remote_tools,
    run_service,
)

__all__ = ["DESCRIPTION", "build_server", "main", "root_agent"]

DESCRIPTION = LOGISTICS_DESCRIPTION


def build_agent() -> LlmAgent:
    return LlmAgent(
        name="logistics",
        model=model_from_env(),
        description=DESCRIPTION,
        instruction=(
            "You handle travel logistics. Use convert_time for clocks and time zones (IANA "
            "names such as Europe/Lisbon and Asia/Tokyo, times as HH:MM), "
            "convert_units for conversions (leave to_unit out unless the user names one: the "
            "user's preferred units apply) and calculate for arithmetic. Answer in one or two "
            "sentences with the tools' results."
        ),
        tools=[remote_tools("convert_time", "convert_units", "calculate")],
    )


root_agent = build_agent()


def build_server(args: argparse.Namespace | None = None) -> AgentServer:
    return agent_server(args, root_agent, app_name=APP_NAME)


def main(argv: list[str] | None = None) -> int:
    return run_service("logistics", build_server, argv=argv, description=__doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
