"""The transfer target: ``adk-mesh serve agent tests.e2e.apps.specialist:root_agent``.

``plan``: calls its local ``remember`` tool, then answers. ``slow <token>``: blocks until
cancelled, writing ``<token>.started`` and ``<token>.cancelled`` markers.
"""

from __future__ import annotations

from typing import Any

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import LlmResponse
from tests.e2e.apps._common import block_until_cancelled, first_user_text, responses


def remember(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """Remember the user's city."""
    tool_context.state["city"] = city
    return {"ok": True}


async def _answer(request: LlmRequest) -> LlmResponse | str:
    scenario = first_user_text(request)
    if scenario.startswith("slow "):
        await block_until_cancelled(scenario.removeprefix("slow "))
    if "remember" not in responses(request):
        return call("remember", {"city": "Porto"})
    return "Porto it is"


root_agent = LlmAgent(
    name="specialist",
    description="Knows cities.",
    model=FunctionModel(_answer, name="specialist-model"),
    tools=[remember],
    output_key="specialist_answer",
)
