"""The root service: ``adk-mesh serve agent tests.e2e.apps.coordinator:build``.

Its tools, its AgentTool delegate and its transfer target are services named by
``$ADK_E2E_TOOLS``, ``$ADK_E2E_RESEARCHER`` and ``$ADK_E2E_SPECIALIST``.

Scenarios (the first user message): ``plan`` calls ``lookup`` on the tool service, asks the
researcher through AgentTool, then transfers to the specialist; ``block <token>`` calls a tool
that never answers and reports the error it gets; ``slow <token>`` transfers to the specialist,
which blocks; anything else is answered with ``hello``.
"""

from __future__ import annotations

import os

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import RemoteAgent, RemoteToolset
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import LlmResponse
from tests.e2e.apps._common import first_user_text, responses


def _answer(request: LlmRequest) -> LlmResponse | str:
    scenario = first_user_text(request)
    seen = responses(request)
    if scenario == "plan":
        if "lookup" not in seen:
            return call("lookup", {"city": "Porto"})
        if "researcher" not in seen:
            return call("researcher", {"request": "the weather in Porto"})
        return call("transfer_to_agent", {"agent_name": "specialist"})
    if scenario.startswith("block "):
        if "wait_forever" not in seen:
            return call("wait_forever", {"token": scenario.removeprefix("block ")})
        answer = seen["wait_forever"].response
        if "error" in answer:
            return f"the tool failed: {answer['error']}"
        return "the tool answered"
    if scenario.startswith("slow "):
        return call("transfer_to_agent", {"agent_name": "specialist"})
    return "hello"


def build() -> LlmAgent:
    return LlmAgent(
        name="coordinator",
        description="Plans and delegates.",
        model=FunctionModel(_answer, name="coordinator-model"),
        tools=[
            RemoteToolset(os.environ["ADK_E2E_TOOLS"], name="weather_tools"),
            AgentTool(
                RemoteAgent(
                    "researcher",
                    os.environ["ADK_E2E_RESEARCHER"],
                    description="Researches the weather.",
                )
            ),
        ],
        sub_agents=[
            RemoteAgent("specialist", os.environ["ADK_E2E_SPECIALIST"], description="Knows cities.")
        ],
    )
