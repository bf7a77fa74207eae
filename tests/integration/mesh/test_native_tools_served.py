"""A provider-native tool is part of the model request: a ToolServer refuses to serve one,
and leaves out of its listing one a served toolset returns, so a RemoteToolset never carries
it."""

from __future__ import annotations

import logging

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import InvocationContext, ReadonlyContext
from adk_mesh.errors import ConfigError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel
from adk_mesh.tools import CodeExecutionTool, FunctionTool, GoogleSearchTool, WebSearchTool
from adk_mesh.tools.base import BaseTool, Toolset


def lookup(term: str) -> dict[str, str]:
    """Look a term up in the glossary."""
    return {"term": term}


@pytest.mark.parametrize("tool", [WebSearchTool, GoogleSearchTool, CodeExecutionTool])
def test_a_tool_server_refuses_a_native_tool_at_construction(tool: type[BaseTool]) -> None:
    with pytest.raises(ConfigError, match="provider-native tool: the model provider runs it"):
        ToolServer([FunctionTool(lookup), tool()])


class _Mixed(Toolset):
    def __init__(self) -> None:
        super().__init__("mixed")

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        return [FunctionTool(lookup), WebSearchTool()]


async def test_a_native_tool_a_served_toolset_returns_is_left_out_of_the_listing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = ToolServer([_Mixed()])
    port = await server.start("127.0.0.1:0")
    remote = RemoteToolset(f"127.0.0.1:{port}", tls=None)
    try:
        service = InMemorySessionService()
        session = await service.create_session(app_name="app", user_id="u")
        agent = LlmAgent(name="a", model=ScriptedModel([]))
        ctx = InvocationContext(
            invocation_id="e-1", agent=agent, session=session, session_service=service
        )
        with caplog.at_level(logging.WARNING, logger="adk_mesh.mesh"):
            listed = await remote.tools(ReadonlyContext(ctx))
    finally:
        await remote.close()
        await server.stop(None)
    assert [tool.name for tool in listed] == ["lookup"]
    assert "'web_search' is a provider-native tool" in caplog.text
