"""The itinerary writer: a workflow agent (LoopAgent) that drafts, reviews and refines.

``itinerary_writer`` loops over two LlmAgents, at most three rounds:

* ``drafter`` calls ``draft_itinerary`` and answers with the plan, which ``output_key`` saves
  as ``itinerary``; in later rounds the tool applies the reviewer's notes
  (``temp:review_notes``, scratch state of this invocation only);
* ``reviewer`` calls ``review_itinerary``; while it finds something to fix it writes its notes
  to ``temp:review_notes``, and once the plan passes it calls ``exit_loop``.

The service is only ever delegated to (the trip planner calls it through an AgentTool), so it
persists nothing. What the caller's policy lets it see (``user:pace``) shapes the plan; of
what it writes, the caller keeps ``itinerary`` alone.

Run it: ``python -m services.writer --port 50054`` or ``adk-mesh serve agent
services.writer:root_agent``.
"""

from __future__ import annotations

import argparse
from typing import Any

from adk_mesh import ExitLoopTool, FunctionTool, LlmAgent, LoopAgent, ToolContext
from adk_mesh.mesh import AgentServer
from adk_mesh.models.offline import model_from_env
from services._common import APP_NAME, agent_server, run_service
from services.catalog import CITIES, CityName, Interest

__all__ = ["build_server", "main", "root_agent"]

_TIP_NOTE = "add one local tip per day"


def draft_itinerary(
    destination: CityName,
    tool_context: ToolContext,
    days: int = 3,
    interests: list[Interest] | None = None,
) -> dict[str, Any]:
    """Draft a day-by-day itinerary for a city, shaped by the traveller's pace and the
    reviewer's notes. Keywords: plan, trip, itinerary, visit, holiday, vacation.

    Args:
        destination: the city to visit.
        days: how many days (1 to 7).
        interests: what the traveller enjoys most.
    """
    days = max(1, min(days, 7))
    city = CITIES[destination]
    chosen: list[str] = list(interests or ["food", "history", "art"])
    pace = str(tool_context.state.get("user:pace") or "balanced")
    per_day = {"relaxed": 2, "balanced": 3, "packed": 4}.get(pace, 3)
    notes = str(tool_context.state.get("temp:review_notes") or "")
    rounds = int(tool_context.state.get("temp:draft_round") or 0) + 1
    tool_context.state["temp:draft_round"] = rounds
    stops = [sight for interest in chosen for sight in city.sights[interest]]
    stops += [
        sight
        for interest, sights in city.sights.items()
        if interest not in chosen
        for sight in sights
    ]
    lines = [f"{days} days in {destination} ({pace} pace, for {', '.join(chosen)}):"]
    for day in range(days):
        todays = [stops[(day * per_day + i) % len(stops)] for i in range(per_day)]
        line = f"Day {day + 1}: {'; '.join(todays)}."
        if _TIP_NOTE in notes:
            line += f" Tip: {city.tips[day % len(city.tips)]}."
        lines.append(line)
    return {"itinerary": "\n".join(lines), "round": rounds, "summary": "\n".join(lines)}


def review_itinerary(tool_context: ToolContext) -> dict[str, Any]:
    """Review the current itinerary draft: it passes when every day has a local tip.
    Keywords: plan, trip, itinerary, visit, holiday, vacation.
    """
    draft = str(tool_context.state.get("itinerary") or "")
    day_lines = [line for line in draft.splitlines() if line.lstrip().startswith("Day ")]
    if not day_lines:
        tool_context.state["temp:review_notes"] = "write one line per day, starting 'Day N:'"
        return {"approved": False, "summary": "Review: the draft has no 'Day N:' lines yet."}
    missing = [line.split(":")[0].strip() for line in day_lines if "Tip:" not in line]
    if missing:
        tool_context.state["temp:review_notes"] = _TIP_NOTE
        return {
            "approved": False,
            "summary": f"Review: {', '.join(missing)} lack a local tip; {_TIP_NOTE}.",
        }
    return {"approved": True, "summary": "Review: approved, every day has a local tip."}


def build_agent() -> LoopAgent:
    model = model_from_env()
    drafter = LlmAgent(
        name="drafter",
        model=model,
        description="Drafts and refines the itinerary.",
        instruction=(
            "You write travel itineraries. Call draft_itinerary with the destination, the "
            "number of days and the interests from the request, then answer with the "
            "itinerary it returns (one line per day, starting 'Day N:'), adapted to the "
            "traveller's pace ({user:pace?}). Reviewer notes to apply: {temp:review_notes?}"
        ),
        tools=[FunctionTool(draft_itinerary)],
        output_key="itinerary",
    )
    reviewer = LlmAgent(
        name="reviewer",
        model=model,
        description="Reviews the itinerary and ends the loop when it is good.",
        instruction=(
            "You review the itinerary draft. Call review_itinerary. If it is approved, call "
            "exit_loop; otherwise say in one sentence what the drafter must change."
        ),
        tools=[FunctionTool(review_itinerary), ExitLoopTool()],
    )
    return LoopAgent(
        name="itinerary_writer",
        description=(
            "Writes a day-by-day trip itinerary (draft, review, refine). "
            "Keywords: plan, trip, itinerary, visit, holiday, vacation."
        ),
        sub_agents=[drafter, reviewer],
        max_iterations=3,
    )


root_agent = build_agent()


def build_server(args: argparse.Namespace | None = None) -> AgentServer:
    return agent_server(args, root_agent, app_name=APP_NAME)


def main(argv: list[str] | None = None) -> int:
    return run_service("writer", build_server, argv=argv, description=__doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
