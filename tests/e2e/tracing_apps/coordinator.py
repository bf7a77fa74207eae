"""The root service of the tracing test: ``adk-mesh serve agent
tests.e2e.tracing_apps.coordinator:build``.

Every turn calls ``lookup`` on the tool service (``$ADK_E2E_TOOLS``), then asks the researcher
service (``$ADK_E2E_RESEARCHER``) through AgentTool, then answers: three services in one
invocation, no transfer.
"""

from __future__ import annotations

import os

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import RemoteAgent, RemoteToolset
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import LlmResponse
from tests.e2e.apps._common import responses


def _answer(request: LlmRequest) -> LlmResponse | str:
    seen = responses(request)
    if "lookup" not in seen:
        return call("lookup", {"city": "Porto"})
    if "researcher" not in seen:
        return call("researcher", {"request": "the weather in Porto"})
    return "21 °C and sunny in Porto"


def build() -> LlmAgent:
    return LlmAgent(
        name="coordinator",
        description="Looks up and delegates.",
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
    )
