"""The concierge: the travel desk's root agent, the one service that persists.

``concierge`` greets the traveller and routes each request by **transfer across services** to
``trip_planner`` (services.planner) or ``logistics`` (services.logistics), both RemoteAgents.
It keeps state in every scope:

* ``user:pace`` and ``user:units`` — preferences set with ``remember_preferences`` and kept
  across all of the user's sessions (the writer plans at that pace, conversions use those
  units);
* ``app:requests_served`` — a counter of the whole app, counted before each turn;
* ``temp:turn_started`` — when this turn began, for this invocation only (never stored).

Root runs go through its Runner into the session store (``ADK_MESH_SESSIONS``, default
``sqlite:///.adk-mesh/sessions.db``) with artifacts in ``ADK_MESH_ARTIFACTS`` (default
``file:.adk-mesh/artifacts``), and turns into memory when ``ADK_MESH_MEMORY`` names a store
(none by default). Run it: ``python -m services.concierge --port 50051`` or
``adk-mesh serve agent services.concierge:root_agent``.
"""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from adk_mesh import CallbackContext, FunctionTool, LlmAgent, ToolContext
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.models.offline import model_from_env
from services._common import (
    APP_NAME,
    LOGISTICS_DESCRIPTION,
    PLANNER_DESCRIPTION,
    agent_server,
    run_service,
    target,
)

__all__ = ["build_server", "count_request", "main", "remember_preferences", "root_agent"]

DEFAULT_SESSIONS = "sqlite:///.adk-mesh/sessions.db"
DEFAULT_ARTIFACTS = "file:.adk-mesh/artifacts"


def remember_preferences(
    tool_context: ToolContext,
    pace: Literal["relaxed", "balanced", "packed"] | None = None,
    units: Literal["metric", "imperial"] | None = None,
) -> dict[str, Any]:
    """Remember the traveller's preferences for all their future sessions. Keywords:
    remember, prefer, preference, pace, units.

    Args:
        pace: how full the days of an itinerary should be.
        units: the measurement system conversions should use.
    """
    saved: dict[str, str] = {}
    if pace is not None:
        tool_context.state["user:pace"] = pace
        saved["pace"] = pace
    if units is not None:
        tool_context.state["user:units"] = units
        saved["units"] = units
    if not saved:
        return {"summary": "Tell me a pace (relaxed, balanced, packed) or units to remember."}
    said = " and ".join(f"{key} = {value}" for key, value in saved.items())
    return {"saved": saved, "summary": f"Noted for all your future trips: {said}."}


def count_request(callback_context: CallbackContext) -> None:
    """Before each turn: count it app-wide and stamp its start (invocation-only)."""
    state = callback_context.state
    state["app:requests_served"] = int(state.get("app:requests_served") or 0) + 1
    state["temp:turn_started"] = datetime.now(UTC).isoformat(timespec="seconds")


def build_agent() -> LlmAgent:
    return LlmAgent(
        name="concierge",
        model=model_from_env(),
        description="The travel desk's front door: greets, remembers preferences, routes.",
        instruction=(
            "You are the concierge of a travel desk. Remember preferences with "
            "remember_preferences (current pace: {user:pace?}; units: {user:units?}). Hand "
            "trip planning, fares and notes to trip_planner, and time zones, conversions and "
            "arithmetic to logistics, by transferring to them. Be brief."
        ),
        tools=[FunctionTool(remember_preferences)],
        sub_agents=[
            RemoteAgent("trip_planner", target("planner"), description=PLANNER_DESCRIPTION),
            RemoteAgent("logistics", target("logistics"), description=LOGISTICS_DESCRIPTION),
        ],
        before_agent_callback=count_request,
    )


root_agent = build_agent()


def build_server(args: argparse.Namespace | None = None) -> AgentServer:
    sessions = os.environ.get("ADK_MESH_SESSIONS", DEFAULT_SESSIONS)
    if sessions == DEFAULT_SESSIONS:
        Path(".adk-mesh").mkdir(exist_ok=True)
    return agent_server(
        args,
        root_agent,
        app_name=APP_NAME,
        session_service=sessions,
        artifact_service=os.environ.get("ADK_MESH_ARTIFACTS", DEFAULT_ARTIFACTS),
        # Long-term memory only when asked (``[mesh] memory`` of mesh.toml): each finished
        # turn is added to it.
        memory_service=os.environ.get("ADK_MESH_MEMORY") or None,
    )


def main(argv: list[str] | None = None) -> int:
    return run_service("concierge", build_server, argv=argv, description=__doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
