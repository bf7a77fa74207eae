"""MCP servers for the tests, made with the ``mcp`` SDK itself: a streamable-HTTP server on
127.0.0.1 port 0, served by uvicorn in the test's event loop, and the reference time server
(PyPI ``mcp-server-time``) over stdio."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError as McpToolError

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import InvocationContext, ReadonlyContext, ToolContext
from adk_mesh.sessions.base import Session
from adk_mesh.testing import ScriptedModel
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.types import ToolProgress

HERE = Path(__file__).resolve().parent
#: The reference MCP server: its tools, convert_time and get_current_time, over stdio.
TIME_SERVER = (sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC")
#: A stdio server of these tests (echo, pid, die: see stdio_server.py).
STDIO_SERVER = (sys.executable, str(HERE / "stdio_server.py"))


def build_http_server() -> MCPServer:
    """``scan`` reports progress, ``fail`` fails (an isError result), ``grow`` adds the tool
    ``extra`` while the server runs and says so (list changed)."""
    server = MCPServer("test-http")

    @server.tool()
    async def scan(steps: int, ctx: Context) -> str:
        """Scan in steps, reporting progress."""
        for step in range(steps):
            await ctx.report_progress(step, steps, f"step {step + 1} of {steps}")
        return f"scanned in {steps} steps"

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails, saying why."""
        raise McpToolError(f"cannot do it: {reason}")

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool extra."""

        def extra(value: int) -> int:
            """Double a number."""
            return value * 2

        server.add_tool(extra, name="extra")
        await ctx.notify_tools_changed()  # 2026-07-28: to subscriptions/listen streams
        if ctx.protocol_version == "2025-11-25":
            await ctx.session.send_tool_list_changed()  # the handshake era's notification
        return "extra added"

    return server


@dataclass
class HttpMcpServer:
    url: str
    server: MCPServer
    stop: Callable[[], Awaitable[None]]


async def serve_http(server: MCPServer) -> HttpMcpServer:
    """``server`` over streamable HTTP on 127.0.0.1, port 0, in this event loop."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        server.streamable_http_app(),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    served = uvicorn.Server(config)
    served.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.create_task(served.serve(sockets=[listener]))
    async with asyncio.timeout(10):
        while not served.started:  # noqa: ASYNC110 - uvicorn sets a flag, no event
            await asyncio.sleep(0.01)

    async def stop() -> None:
        served.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return HttpMcpServer(f"http://127.0.0.1:{port}/mcp", server, stop)


@pytest.fixture
async def http_server() -> AsyncIterator[HttpMcpServer]:
    served = await serve_http(build_http_server())
    try:
        yield served
    finally:
        await served.stop()


def readonly() -> ReadonlyContext:
    return ReadonlyContext(invocation())


def invocation() -> InvocationContext:
    agent = LlmAgent(name="caller", model=ScriptedModel([]))
    session = Session(id="s1", app_name="app", user_id="u1")
    return InvocationContext(invocation_id="e-1", agent=agent, session=session)


def tool_context(progress: list[ToolProgress] | None = None) -> ToolContext:
    """A tool context whose progress goes to ``progress``."""

    async def report(message: str, data: dict[str, Any] | None, fraction: float | None) -> None:
        if progress is not None:
            progress.append(
                ToolProgress(tool_name="?", message=message, fraction=fraction, data=data)
            )

    return ToolContext(invocation(), progress=report)


async def tools_by_name(toolset: Toolset) -> dict[str, BaseTool]:
    return {tool.name: tool for tool in await toolset.tools(readonly())}


async def wait_for_tool(toolset: Toolset, name: str, seconds: float = 10.0) -> BaseTool:
    """The tool ``name`` once the toolset lists it (the server's change notification comes on
    a stream of its own, so it may arrive just after the call that caused it)."""
    async with asyncio.timeout(seconds):
        while True:
            found = await tools_by_name(toolset)
            if name in found:
                return found[name]
            await asyncio.sleep(0.01)
