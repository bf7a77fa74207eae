"""A desk whose remote A2A agents come from mesh.toml (``ADK_MESH_A2A_AGENTS``, set by
``adk-mesh up`` from ``[services.<name>.a2a_agents.<agent>]``): its model hands every turn to
the first of them."""

from __future__ import annotations

from adk_mesh import LlmAgent
from adk_mesh.agents.a2a import a2a_agents_from_env
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel
from adk_mesh.types import Content, LlmResponse, Part

remote_agents = a2a_agents_from_env()


def _route(request: LlmRequest) -> LlmResponse:
    target = remote_agents[0].name if remote_agents else "nobody"
    call = Part.from_function_call("transfer_to_agent", {"agent_name": target})
    return LlmResponse(content=Content(role="model", parts=[call]))


root_agent = LlmAgent(
    name="desk",
    description="Hands each turn to a remote A2A agent.",
    model=FunctionModel(_route, name="desk-model"),
    sub_agents=remote_agents,
)
