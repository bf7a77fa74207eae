"""The trip planner: a specialist that delegates across services and uses the tool service.

``trip_planner`` (an LlmAgent, reached by transfer from the concierge) has:

* ``itinerary_writer`` — an **AgentTool** over the writer service (a RemoteAgent). Its
  policy matters: ``state_keys=["user:pace"]`` projects only the traveller's pace into the
  writer (nothing else of the session leaves this service), and
  ``output_state_keys=["itinerary"]`` writes back only the finished itinerary — the writer's
  scratch (``temp:review_notes``, ``temp:draft_round``) stays behind. The itinerary then
  lives in the session, where ``save_note`` finds it;
* ``check_fares`` (long-running, reports progress) and ``save_note`` from the tool service;
* ``load_artifacts`` to read saved notes back.

Delegated to only, it persists nothing; it reads notes from the shared artifact store
(``ADK_MESH_ARTIFACTS``). Run it: ``python -m services.planner --port 50052`` or
``adk-mesh serve agent services.planner:root_agent``.
"""

from __future__ import annotations

import argparse
import os

from adk_mesh import AgentTool, LlmAgent, LoadArtifactsTool
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.models.offline import model_from_env
from services._common import (
    APP_NAME,
    PLANNER_DESCRIPTION,
    agent_server,
    remote_tools,
    run_service,
    target,
)

__all__ = ["DESCRIPTION", "build_server", "main", "root_agent"]

DESCRIPTION = PLANNER_DESCRIPTION

_WRITER_DESCRIPTION = (
    "Writes a day-by-day trip itinerary (draft, review, refine). "
    "Keywords: plan, trip, itinerary, visit, holiday, vacation."
)


def build_agent() -> LlmAgent:
    writer = RemoteAgent("itinerary_writer", target("writer"), description=_WRITER_DESCRIPTION)
    return LlmAgent(
        name="trip_planner",
        model=model_from_env(),
        description=DESCRIPTION,
        instruction=(
            "You plan trips. For an itinerary, call itinerary_writer with the whole request "
            "(destination, number of days, interests). For prices, call check_fares. To keep "
            "something, call save_note (without text it saves the current itinerary); to "
            "read a note back, call load_artifacts with its file name. Answer briefly with "
            "what the tools returned."
        ),
        tools=[
            AgentTool(
                writer,
                state_keys=["user:pace"],
                output_state_keys=["itinerary"],
            ),
            remote_tools("check_fares", "save_note"),
            LoadArtifactsTool(),
        ],
    )


root_agent = build_agent()


def build_server(args: argparse.Namespace | None = None) -> AgentServer:
    return agent_server(
        args,
        root_agent,
        app_name=APP_NAME,
        artifact_service=os.environ.get("ADK_MESH_ARTIFACTS", "file:.adk-mesh/artifacts"),
    )


def main(argv: list[str] | None = None) -> int:
    return run_service("planner", build_server, argv=argv, description=__doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
