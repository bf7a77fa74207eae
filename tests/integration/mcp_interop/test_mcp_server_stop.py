"""McpServer.stop: a connection open before the stop serves no new request (uvicorn's shutdown
misses one accepted in the turn it closes the listener; the server's gate refuses it)."""

from __future__ import annotations

import asyncio

import httpx

from adk_mesh.mesh.mcp_server import McpServer
from adk_mesh.mesh.tool_server import _StaticToolset
from adk_mesh.tools import FunctionTool


def echo(text: str) -> str:
    """Say it back."""
    return text


async def test_a_connection_open_before_the_stop_serves_no_new_request() -> None:
    server = McpServer(_StaticToolset("tools", [FunctionTool(echo)]), name="tools")
    port = await server.start("127.0.0.1", 0)
    url = f"http://127.0.0.1:{port}/mcp"
    async with httpx.AsyncClient() as http:
        reached = await http.get(url)  # a keep-alive connection, answered by the MCP app
        assert reached.status_code != 503
        stopping = asyncio.ensure_future(server.stop(grace=5))
        await asyncio.sleep(0)
        try:
            answer = await http.get(url)
        except httpx.TransportError:
            pass  # uvicorn closed it first
        else:
            assert (answer.status_code, answer.headers["connection"]) == (503, "close")
        await asyncio.wait_for(stopping, 10)
