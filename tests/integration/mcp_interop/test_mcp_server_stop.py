"""McpServer.stop: a connection open before the stop serves no new request (uvicorn's shutdown
misses one accepted in the turn it closes the listener; the server's gate refuses it)."""

from __future__ import annotations

from adk_mesh.mesh.mcp_server import McpServer
from adk_mesh.mesh.tool_server import _StaticToolset
from adk_mesh.tools import FunctionTool
from tests.http_stops import check_an_open_connection_is_refused


def echo(text: str) -> str:
    """Say it back."""
    return text


async def test_a_connection_open_before_the_stop_serves_no_new_request() -> None:
    server = McpServer(_StaticToolset("tools", [FunctionTool(echo)]), name="tools")
    port = await server.start("127.0.0.1", 0)
    await check_an_open_connection_is_refused(
        f"http://127.0.0.1:{port}/mcp", lambda: server.stop(grace=5)
    )
