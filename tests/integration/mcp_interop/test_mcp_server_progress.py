"""McpServer against the ``mcp`` SDK's own client: progress notifications that always
increase (falling fractions, fractions mixed with updates that give none), and a toolset
whose listing fails answered with a proper JSON-RPC error, in both protocol eras."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import INTERNAL_ERROR

from adk_mesh.contexts import ReadonlyContext, ToolContext
from adk_mesh.errors import PermissionDeniedError
from adk_mesh.mesh.mcp_server import McpServer
from adk_mesh.mesh.tool_server import _StaticToolset
from adk_mesh.plugins import Plugin
from adk_mesh.plugins._manager import PluginManager
from adk_mesh.tools import FunctionTool
from adk_mesh.tools.base import BaseTool, Toolset

MODES = ["auto", "legacy"]  # 2026-07-28 (sessionless) and the 2025-11-25 handshake

#: What ``report`` reports, in order: (message, fraction or None).
Steps = list[tuple[str, float | None]]
Update = tuple[float, float | None, str | None]


async def report(steps: Steps, tool_context: ToolContext) -> dict[str, Any]:
    """Report each step's message and fraction, in order."""
    for message, fraction in steps:
        await tool_context.report_progress(message, None, fraction)
    return {"reported": len(steps)}


@asynccontextmanager
async def serving(toolset: Toolset, mode: str) -> AsyncIterator[Client]:
    """``toolset`` served by an McpServer on 127.0.0.1, and the SDK's client of it."""
    async with connected(McpServer(toolset, name="tools"), mode) as client:
        yield client


@asynccontextmanager
async def connected(server: McpServer, mode: str) -> AsyncIterator[Client]:
    """``server`` started on 127.0.0.1, and the SDK's client of it."""
    port = await server.start("127.0.0.1", 0)
    try:
        async with httpx2.AsyncClient(timeout=30) as http:
            transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)
            async with Client(transport, mode=mode) as client:
                yield client
    finally:
        await server.stop()


async def reported(steps: Steps, mode: str) -> list[Update]:
    """The progress notifications the client receives while ``report`` runs ``steps``."""
    updates: list[Update] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    async with serving(_StaticToolset("tools", [FunctionTool(report)]), mode) as client:
        result = await client.call_tool("report", {"steps": steps}, progress_callback=on_progress)
    assert not result.is_error, result.content
    return updates


def assert_increasing(updates: Sequence[Update]) -> None:
    """The MCP specification: ``progress`` increases with each notification."""
    values = [progress for progress, _, _ in updates]
    assert all(later > earlier for earlier, later in itertools.pairwise(values)), values


@pytest.mark.parametrize("mode", MODES)
async def test_a_falling_fraction_never_sends_progress_backwards(mode: str) -> None:
    steps: Steps = [("half", 0.5), ("rechecking", 0.25), ("again", 0.5), ("most", 0.75)]
    updates = await reported(steps, mode)
    assert_increasing(updates)
    assert [message for _, _, message in updates] == ["half", "rechecking", "again", "most"]
    assert {total for _, total, _ in updates} == {1.0}
    # A fraction below the last stays at the last (an imperceptible step above it).
    assert [round(progress, 9) for progress, _, _ in updates] == [0.5, 0.5, 0.5, 0.75]


@pytest.mark.parametrize("mode", MODES)
async def test_updates_without_a_fraction_after_fractions_stay_on_their_scale(mode: str) -> None:
    steps: Steps = [("a", 0.25), ("note", None), ("b", 0.5), ("done", 1.0), ("cleaning", None)]
    updates = await reported(steps, mode)
    assert_increasing(updates)
    assert [message for _, _, message in updates] == ["a", "note", "b", "done", "cleaning"]
    assert [round(progress, 9) for progress, _, _ in updates] == [0.25, 0.25, 0.5, 1.0, 1.0]
    assert {total for _, total, _ in updates} == {1.0}


@pytest.mark.parametrize("mode", MODES)
async def test_fractions_after_counted_updates_keep_counting(mode: str) -> None:
    """Counted updates first (``progress`` = updates so far, no total), then fractions: the
    count goes on and the total makes ``progress / total`` the fraction."""
    steps: Steps = [("start", None), ("connected", None), ("half", 0.5), ("less", 0.25)]
    updates = await reported(steps, mode)
    assert_increasing(updates)
    assert [message for _, _, message in updates] == ["start", "connected", "half", "less"]
    assert updates[:2] == [(1.0, None, "start"), (2.0, None, "connected")]
    assert [progress for progress, _, _ in updates[2:]] == [3.0, 4.0]
    assert [progress / (total or math.nan) for progress, total, _ in updates[2:]] == [0.5, 0.25]


@pytest.mark.parametrize("mode", MODES)
async def test_counted_updates_alone_are_counted(mode: str) -> None:
    updates = await reported([("one", None), ("two", None), ("three", None)], mode)
    assert updates == [(1.0, None, "one"), (2.0, None, "two"), (3.0, None, "three")]


# --- a listing that fails ---------------------------------------------------------------------


class _BrokenToolset(Toolset):
    """A toolset whose listing fails, with internals in the message."""

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        raise RuntimeError("connect to postgres://admin:hunter2@10.0.0.7/tools failed")


@pytest.mark.parametrize("mode", MODES)
async def test_a_listing_that_fails_is_an_internal_error_that_leaks_nothing(mode: str) -> None:
    async with serving(_BrokenToolset("broken"), mode) as client:
        for attempt in (client.list_tools, lambda: client.call_tool("anything", {})):
            with pytest.raises(MCPError) as raised:
                await attempt()
            assert raised.value.code == INTERNAL_ERROR
            assert "could not list its tools" in raised.value.message
            assert "hunter2" not in raised.value.message
            assert "postgres" not in str(raised.value.error.data)


# --- a plugin's hook that refuses or fails -------------------------------------------------------


class _Refusing(Plugin):
    """A policy: ``report`` may not run."""

    async def before_tool(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        raise PermissionDeniedError(f"the policy refuses {tool.name!r}")


class _Broken(Plugin):
    """A hook with a bug."""

    async def after_tool(self, **hook: Any) -> dict[str, Any] | None:
        raise KeyError("oops")


@pytest.mark.parametrize("mode", MODES)
async def test_a_plugin_that_refuses_or_fails_is_an_error_result_the_model_reads(
    mode: str,
) -> None:
    toolset = _StaticToolset("tools", [FunctionTool(report)])
    for plugin, expected in ((_Refusing(), "the policy refuses 'report'"), (_Broken(), "oops")):
        server = McpServer(toolset, name="tools", plugins=PluginManager([plugin]))
        async with connected(server, mode) as client:
            result = await client.call_tool("report", {"steps": []})
        assert result.is_error
        assert len(result.content) == 1 and expected in result.content[0].text


# --- a call the client cancels ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_the_client_cancels_stops_the_running_tool(mode: str) -> None:
    started, stopped = asyncio.Event(), asyncio.Event()

    async def wait() -> str:
        """Wait until cancelled."""
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()
        return "never"

    async with serving(_StaticToolset("tools", [FunctionTool(wait)]), mode) as client:
        call = asyncio.ensure_future(client.call_tool("wait", {}))
        await started.wait()
        call.cancel()
        await stopped.wait()  # the tool's task was cancelled: the test's timeout guards it
        with pytest.raises(asyncio.CancelledError):
            await call
        # The session goes on.
        assert "wait" in [tool.name for tool in (await client.list_tools()).tools]
