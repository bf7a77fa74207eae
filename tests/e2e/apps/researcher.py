"""The AgentTool target: ``adk-mesh serve agent tests.e2e.apps.researcher:root_agent``."""

from __future__ import annotations

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel


def _answer(request: LlmRequest) -> str:
    return "sunny in Porto"


root_agent = LlmAgent(
    name="researcher",
    description="Researches the weather.",
    model=FunctionModel(_answer, name="researcher-model"),
    output_key="research",
)
