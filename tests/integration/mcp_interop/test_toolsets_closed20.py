"""Who closes the toolsets an agent tree holds: ``Runner.close`` (as google-adk's does) and
``AgentServer.stop``. Closing an ``McpToolset`` stops its stdio MCP server; without it, an
embedding process that stops a server (or drops a Runner) keeps those servers until it exits.

Real parts: the marker stdio MCP server of ``test_mcp_warm_up20`` (it records its process id),
a real AgentServer on 127.0.0.1 port 0.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from adk_mesh import InMemorySessionService, LlmAgent, Runner
from adk_mesh.contexts import ReadonlyContext
from adk_mesh.mesh import AgentServer
from adk_mesh.testing import ScriptedModel
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.base import BaseTool, Toolset, close_toolsets, held_toolsets
from tests.integration.mcp_interop.test_mcp_warm_up20 import marker_toolset, running, starts


class Counted(Toolset):
    """A toolset that counts its closes (and may fail to close)."""

    def __init__(self, name: str, *, fails: bool = False) -> None:
        super().__init__(name)
        self.closed = 0
        self._fails = fails

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        return []

    async def close(self) -> None:
        self.closed += 1
        if self._fails:
            raise RuntimeError("the server went away")


def _tree(shared: Toolset, inner: Toolset, sub: Toolset) -> LlmAgent:
    helper = LlmAgent(name="helper", model=ScriptedModel([]), tools=[inner, shared])
    specialist = LlmAgent(name="specialist", model=ScriptedModel([]), tools=[sub])
    return LlmAgent(
        name="root",
        model=ScriptedModel([]),
        tools=[shared, AgentTool(helper)],
        sub_agents=[specialist],
    )


def test_the_held_toolsets_are_those_of_the_tree_each_once() -> None:
    shared, inner, sub = Counted("shared"), Counted("inner"), Counted("sub")
    held = held_toolsets(_tree(shared, inner, sub))
    assert sorted(toolset.name for toolset in held) == ["inner", "shared", "sub"]


async def test_runner_close_closes_every_toolset_of_the_tree_once(tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    mcp = marker_toolset(marker)
    shared, inner = Counted("shared"), Counted("inner")
    runner = Runner(
        agent=_tree(shared, inner, mcp), app_name="app", session_service=InMemorySessionService()
    )
    await mcp.warm_up()
    (pid,) = starts(marker)
    await runner.close()
    assert (shared.closed, inner.closed) == (1, 1)
    for _ in range(200):  # the stdio server exits once its session is closed
        if not running(pid):
            break
        await asyncio.sleep(0.01)
    assert not running(pid)


async def test_a_toolset_that_fails_to_close_is_a_warning_and_the_others_still_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken, fine = Counted("broken", fails=True), Counted("fine")
    with caplog.at_level(logging.WARNING, logger="adk_mesh"):
        await close_toolsets([broken, fine], "runner of 'app'")
    assert (broken.closed, fine.closed) == (1, 1)
    assert any(
        "runner of 'app': closing toolset 'broken' failed" in record.getMessage()
        for record in caplog.records
    )


async def test_an_agent_server_closes_its_agents_toolsets_when_it_stops(tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    mcp = marker_toolset(marker)
    other = Counted("other")
    server = AgentServer(
        LlmAgent(name="root", model=ScriptedModel([]), tools=[mcp, other]), app_name="app"
    )
    await server.warm_up()
    (pid,) = starts(marker)
    await server.start("127.0.0.1:0")
    await server.stop(None)
    assert other.closed == 1
    for _ in range(200):
        if not running(pid):
            break
        await asyncio.sleep(0.01)
    assert not running(pid)
