"""McpToolset and the MCP port of a tool service, reviewed against the MCP specification: an
HTTP session the server no longer knows (it restarted, or reaped it idle), a stdio server that
never answers the opening exchange, and tool names a model provider refuses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

from adk_mesh import McpToolset, ToolError
from adk_mesh.contexts import ToolContext
from adk_mesh.errors import AdkIOError
from adk_mesh.mesh.mcp_server import McpServer
from adk_mesh.mesh.tool_server import _StaticToolset
from adk_mesh.tools import FunctionTool
from tests.integration.mcp_interop.conftest import (
    build_http_server,
    readonly,
    serve_http,
    tool_context,
    tools_by_name,
)


async def serve_on(port: int) -> tuple[int, Callable[[], Awaitable[None]]]:
    """A fresh test server (no sessions) on 127.0.0.1:``port`` (0: any), and its stop."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    config = uvicorn.Config(
        build_http_server().streamable_http_app(),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=1,
    )
    served = uvicorn.Server(config)
    served.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(served.serve(sockets=[listener]))
    async with asyncio.timeout(10):
        while not served.started:  # noqa: ASYNC110 - uvicorn sets a flag, no event
            await asyncio.sleep(0.01)

    async def stop() -> None:
        served.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return int(listener.getsockname()[1]), stop


# --- an HTTP session the server no longer knows ---------------------------------------------


async def test_a_session_the_restarted_server_does_not_know_is_opened_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MCP (streamable HTTP): a 404 to a request carrying an ``Mcp-Session-Id`` means the
    session is gone, and the client must open a new one. The toolset kept sending the dead
    id, so every later call failed with "Session not found" until the process restarted."""
    from mcp.client import client as mcp_client

    async def handshake_only(session: Any) -> None:
        await session.initialize()  # a 2025-11-25 server: sessions with an id

    monkeypatch.setattr(mcp_client, "negotiate_auto", handshake_only)
    port, stop = await serve_on(0)
    toolset = McpToolset(url=f"http://127.0.0.1:{port}/mcp", name="restarting")
    try:
        tools = await tools_by_name(toolset)
        assert await tools["scan"].execute(tool_context(), {"steps": 1}) == {
            "result": "scanned in 1 steps"
        }
        await stop()
        port, stop = await serve_on(port)  # the same address, none of the old sessions
        try:
            await tools["scan"].execute(tool_context(), {"steps": 1})
        except ToolError as error:  # the call that found the session gone
            assert "'restarting'" in error.message and "connects again" in error.message
        # The next call opens a new session (and the listing is asked again).
        assert await tools["scan"].execute(tool_context(), {"steps": 2}) == {
            "result": "scanned in 2 steps"
        }
        assert set(await tools_by_name(toolset)) == {"scan", "fail", "grow"}
    finally:
        await toolset.close()
        await stop()


# --- a stdio server that never answers ------------------------------------------------------

SILENT_SERVER = """
import os, sys, time
with open(sys.argv[1], "w") as out:
    out.write(str(os.getpid()))
time.sleep(600)
"""


async def test_a_stdio_server_that_never_answers_fails_at_the_connect_timeout(
    tmp_path: Path,
) -> None:
    """connect_timeout bounds the opening: the toolset waited for the silent server to exit
    by itself (here 10 minutes) before it said the session did not open, and left the
    process running meanwhile."""
    pid_file = tmp_path / "pid"
    toolset = McpToolset(
        command=sys.executable,
        args=["-c", SILENT_SERVER, str(pid_file)],
        name="silent",
        connect_timeout=1,
    )
    try:
        listing = asyncio.create_task(toolset.tools(readonly()))
        done, _ = await asyncio.wait({listing}, timeout=30)  # a hang guard, far above 1 s
        if not done:
            listing.cancel()
        assert done, "the listing outlived its connect_timeout"
        with pytest.raises(AdkIOError, match="silent: the MCP server did not open"):
            listing.result()
    finally:
        await toolset.close()
    # The process was stopped and reaped (no zombie).
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


# --- tool names a model provider refuses ----------------------------------------------------

#: A function name every provider takes: OpenAI and Anthropic allow letters, digits, "_" and
#: "-", at most 64; Gemini wants a letter or "_" first.
PROVIDER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
#: Names the MCP specification allows (up to 128 of A-Z a-z 0-9 _ - .) or servers use anyway.
SERVER_NAMES = [
    "files.read",
    "files_read",  # already fit: keeps its name, even listed after "files.read"
    "github/search issues",
    "2fa-code",
    "x" * 100,
    "y" * 64 + ".z",
    "echo",
]


async def test_tool_names_providers_refuse_are_offered_under_names_they_take() -> None:
    """A server's tool named ``files.read`` (or 100 characters long) went to the model as it
    is, and OpenAI and Anthropic refuse the whole request for it: every turn of the agent
    failed. The model now calls it by a name every provider takes; the server is called by
    its own name."""
    called: list[str] = []

    async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
        plain: dict[str, Any] = {"type": "object"}
        return ListToolsResult(tools=[Tool(name=name, input_schema=plain) for name in SERVER_NAMES])

    async def call_tool(ctx: Any, params: Any) -> CallToolResult:
        called.append(params.name)
        return CallToolResult(content=[TextContent(text=params.name)])

    raw = Server("names", on_list_tools=list_tools, on_call_tool=call_tool)
    served = await serve_http(cast("MCPServer", raw))
    toolset = McpToolset(url=served.url, name="names")
    try:
        tools = await toolset.tools(readonly())
        names = [tool.name for tool in tools]
        assert all(PROVIDER_NAME.fullmatch(name) for name in names), names
        assert len(set(names)) == len(SERVER_NAMES)
        assert names[1] == "files_read" and names[-1] == "echo"
        assert all(tool.declaration().name == tool.name for tool in tools)
        for tool, server_name in zip(tools, SERVER_NAMES, strict=True):
            assert await tool.execute(tool_context(), {}) == {"result": server_name}
        assert called == SERVER_NAMES
        # The filter names the server's tools, as the server names them.
        only = McpToolset(url=served.url, name="only", tool_filter=["files.read"])
        try:
            (tool,) = await only.tools(readonly())
            assert tool.name == "files_read"  # nothing of the server's takes that name here
            assert await tool.execute(tool_context(), {}) == {"result": "files.read"}
        finally:
            await only.close()
    finally:
        await toolset.close()
        await served.stop()


# --- the MCP port: the session a call runs in -----------------------------------------------


def whoami(tool_context: ToolContext) -> dict[str, str]:
    """Who calls, in which session."""
    session = tool_context.invocation_context.session
    return {"user": session.user_id, "session": session.id}


@pytest.mark.parametrize("era", ["2026-07-28", "2025-11-25"])
async def test_a_session_id_the_client_merely_asserts_is_not_the_call_s_session(
    era: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessionless (2026-07-28), the server took any ``Mcp-Session-Id`` header the client
    sent as the session of the call: a client could run a tool in another's session. Only a
    session the SDK opened and checks (the handshake era's) is the call's."""
    if era == "2025-11-25":
        from mcp.client import client as mcp_client

        async def handshake_only(session: Any) -> None:
            await session.initialize()

        monkeypatch.setattr(mcp_client, "negotiate_auto", handshake_only)
    server = McpServer(_StaticToolset("tools", [FunctionTool(whoami)]), name="tools")
    port = await server.start("127.0.0.1", 0)
    url = f"http://127.0.0.1:{port}/mcp"
    forged = {"mcp-session-id": "someone-else-s-session"} if era == "2026-07-28" else {}
    try:
        async with (
            httpx2.AsyncClient(timeout=30, headers=forged) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            assert client.protocol_version == era
            result = await client.call_tool("whoami", {})
            again = await client.call_tool("whoami", {})
    finally:
        await server.stop()
    assert result.structured_content is not None and again.structured_content is not None
    session, next_session = (
        result.structured_content["session"],
        again.structured_content["session"],
    )
    if era == "2026-07-28":  # a new id for each call
        assert session.startswith("mcp-") and next_session.startswith("mcp-")
        assert session != next_session
    else:  # the session the server opened, for every call in it
        assert session == next_session and not session.startswith("mcp-")
