"""Large MCP tool results: McpToolset's ``max_result_bytes``, against real servers on 127.0.0.1.

The SDK's streamable-HTTP client refuses a server-sent event over its ``max_sse_event_size``
(1 MiB by default). Before ``max_result_bytes`` a 2025-11-25 (handshake era) server's result
over it, streamed as one event, reached the model as "the MCP server ... stopped answering
during the call", and the session was dropped; adk-mesh's own McpServer sends a result twice
(``structuredContent`` and text), so 0.6 MiB was already too much. Now the limit is the
toolset's (32 MiB by default, the mesh's gRPC message cap), and a result over it is a
ToolError saying so, whichever era and whether the answer is streamed or plain JSON.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from mcp.client import client as mcp_client
from mcp.server.mcpserver import Context, MCPServer

from adk_mesh import ConfigError, McpToolset, ToolError
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.mesh.mcp_server import McpServer
from adk_mesh.mesh.tool_server import _StaticToolset
from adk_mesh.tools import FunctionTool
from adk_mesh.tools.mcp import DEFAULT_MAX_RESULT_BYTES
from tests.integration.mcp_interop.conftest import serve_http, tool_context, tools_by_name

MIB = 1024 * 1024
SMALL = int(0.6 * MIB)
LARGE = 3 * MIB


def blob(size: int) -> dict[str, Any]:
    """A result of ``size`` characters."""
    return {"data": "x" * size}


def _ours() -> Callable[[], Awaitable[tuple[str, Callable[[], Awaitable[None]]]]]:
    async def start() -> tuple[str, Callable[[], Awaitable[None]]]:
        server = McpServer(_StaticToolset("tools", [FunctionTool(blob)]), name="tools")
        port = await server.start("127.0.0.1", 0)
        return f"http://127.0.0.1:{port}/mcp", server.stop

    return start


def _sdk(*, progress: bool) -> Callable[[], Awaitable[tuple[str, Callable[[], Awaitable[None]]]]]:
    async def start() -> tuple[str, Callable[[], Awaitable[None]]]:
        server = MCPServer("sdk")

        @server.tool(name="blob", structured_output=False)
        async def sdk_blob(size: int, ctx: Context) -> str:
            """A result of ``size`` characters (as text only: no structuredContent)."""
            if progress:  # a progress notification first: the answer is a stream of events
                await ctx.report_progress(0, 1, "making it")
            return "x" * size

        served = await serve_http(server)
        return served.url, served.stop

    return start


SERVERS = {
    "ours": _ours(),  # structuredContent and the same JSON as text
    "sdk": _sdk(progress=False),  # text only
    "sdk-progress": _sdk(progress=True),
}


@pytest.fixture(params=["2026-07-28", "2025-11-25"])
def era(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "2025-11-25":

        async def handshake_only(session: Any) -> None:
            await session.initialize()  # what the SDK falls back to with a server of that era

        monkeypatch.setattr(mcp_client, "negotiate_auto", handshake_only)
    return str(request.param)


@asynccontextmanager
async def toolset_of(server: str, **options: Any) -> AsyncIterator[McpToolset]:
    url, stop = await SERVERS[server]()
    toolset = McpToolset(url=url, name="big", **options)
    try:
        yield toolset
    finally:
        await toolset.close()
        await stop()


def _size(result: dict[str, Any] | None) -> int:
    assert result is not None
    value = result.get("data", result.get("result"))
    assert isinstance(value, str) and set(value) == {"x"}
    return len(value)


@pytest.mark.parametrize("server", list(SERVERS))
async def test_results_of_megabytes_arrive_under_the_default_limit(era: str, server: str) -> None:
    async with toolset_of(server) as toolset:
        tool = (await tools_by_name(toolset))["blob"]
        assert toolset._session is not None
        assert toolset._session.client.protocol_version == era
        for size in (SMALL, LARGE):
            assert _size(await tool.execute(tool_context(), {"size": size})) == size


@pytest.mark.parametrize("server", list(SERVERS))
async def test_a_result_over_max_result_bytes_is_a_tool_error_and_the_session_stays(
    era: str, server: str
) -> None:
    async with toolset_of(server, max_result_bytes=MIB) as toolset:
        tool = (await tools_by_name(toolset))["blob"]
        session = toolset._session
        # adk-mesh's server sends 0.6 MiB twice: over 1 MiB as sent; the SDK's, once.
        sizes = [SMALL, LARGE] if server == "ours" else [LARGE]
        for size in sizes:
            with pytest.raises(ToolError) as raised:
                await tool.execute(tool_context(), {"size": size})
            assert raised.value.message.startswith(
                "the MCP tool's result is larger than 1048576 bytes (the max_result_bytes of "
                "toolset 'big'), so the result of 'blob' was dropped"
            )
        # The server answered; nothing was lost: the same session serves the next call.
        assert _size(await tool.execute(tool_context(), {"size": 10})) == 10
        assert toolset._session is session
        if server != "ours":
            assert _size(await tool.execute(tool_context(), {"size": SMALL})) == SMALL


def test_the_default_limit_is_the_mesh_message_cap() -> None:
    assert DEFAULT_MAX_RESULT_BYTES == MAX_MESSAGE_BYTES
    assert McpToolset(url="http://127.0.0.1:1/mcp").max_result_bytes == MAX_MESSAGE_BYTES


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_max_result_bytes_must_be_a_positive_number_of_bytes(value: Any) -> None:
    with pytest.raises(ConfigError, match="max_result_bytes"):
        McpToolset(url="http://127.0.0.1:1/mcp", max_result_bytes=value)
