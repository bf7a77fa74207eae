"""McpToolset against MCP servers that do what the protocol allows but the happy path does not:
a stdio server that prints a banner on stdout, input schemas with ``$ref`` pointers other than
``#/$defs/X`` or without ``properties``, results of every content kind, a call cancelled (or
timed out) while the server runs it, and two toolsets of servers with the same tool names."""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx2
import pytest
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ListToolsResult,
    ResourceLink,
    TextContent,
    TextResourceContents,
    Tool,
)

from adk_mesh import McpToolset, ToolError
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh.auth import ApiKeyAuthenticator, new_api_key
from adk_mesh.mesh.mcp_server import McpServer
from adk_mesh.mesh.security import ServerSecurity
from adk_mesh.mesh.tool_server import _StaticToolset
from adk_mesh.tools import FunctionTool
from adk_mesh.tools.base import execute_tool
from tests.integration.mcp_interop.conftest import (
    HttpMcpServer,
    build_http_server,
    invocation,
    serve_http,
    tool_context,
    tools_by_name,
    wait_for_tool,
)

# A stdio server that greets on stdout before it speaks MCP there (a print at start-up, a
# library's banner): that line is not a JSON-RPC message.
BANNER_SERVER = """
import os, sys
from mcp.server.mcpserver import MCPServer
server = MCPServer("banner")

@server.tool()
def pid() -> int:
    \"\"\"The id of the server's process.\"\"\"
    return os.getpid()

sys.stdout.write("banner server 1.0 starting\\n")
sys.stdout.flush()
server.run("stdio")
"""


async def test_a_stdio_server_that_prints_a_banner_on_stdout_is_still_served() -> None:
    toolset = McpToolset(command=sys.executable, args=["-c", BANNER_SERVER], name="banner")
    try:
        tools = await tools_by_name(toolset)
        assert set(tools) == {"pid"}
        first = await tools["pid"].execute(tool_context(), {})
        second = await tools["pid"].execute(tool_context(), {})
        # One session, one server process: the stray line did not end the session.
        assert first is not None and first == second
    finally:
        await toolset.close()


# --- a server of raw declarations and results (the SDK's low-level server) ------------------

REFS_SCHEMA: dict[str, Any] = {
    # draft-07 definitions, and a pointer into the schema itself (zod-to-json-schema's way
    # with a schema used twice), and a $defs name with a "/" in it.
    "type": "object",
    "properties": {
        "origin": {"$ref": "#/definitions/Place"},
        "destination": {"$ref": "#/properties/origin"},
        "mode": {"$ref": "#/$defs/travel~1mode"},
    },
    "required": ["origin", "destination"],
    "definitions": {
        "Place": {
            "type": "object",
            "title": "Place",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        }
    },
    "$defs": {"travel/mode": {"type": "string", "enum": ["rail", "road"]}},
}
PLACE = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TAGS_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}

PNG = base64.b64encode(b"\x89PNG" + bytes(96)).decode()  # 100 bytes
WAV = base64.b64encode(bytes(10)).decode()  # 10 bytes: "AAAAAAAAAAAAAA==", padded


def _results() -> dict[str, CallToolResult]:
    return {
        "texts": CallToolResult(
            content=[TextContent(text="first part"), TextContent(text="second part")]
        ),
        "media": CallToolResult(
            content=[
                TextContent(text="a chart:"),
                ImageContent(data=PNG, mime_type="image/png"),
                AudioContent(data=WAV, mime_type="audio/wav"),
                ResourceLink(name="report", uri="file:///tmp/report.pdf"),
                EmbeddedResource(
                    resource=TextResourceContents(uri="file:///notes.txt", text="the notes")
                ),
                EmbeddedResource(
                    resource=BlobResourceContents(
                        uri="file:///data.bin", blob=WAV, mime_type="application/octet-stream"
                    )
                ),
            ]
        ),
        "structured": CallToolResult(
            content=[TextContent(text="12 degrees")], structured_content={"celsius": 12}
        ),
        "not_json": CallToolResult(content=[TextContent(text="{not: json")]),
        "empty": CallToolResult(content=[]),
        "refused": CallToolResult(
            content=[TextContent(text="quota exceeded"), TextContent(text="retry tomorrow")],
            structured_content={"ignored": True},
            is_error=True,
        ),
        "refused_silently": CallToolResult(content=[], is_error=True),
    }


class RawServer:
    """Declares the schemas above and answers each tool with its result; ``hang`` runs until
    cancelled, and says when it starts and when it was cancelled."""

    def __init__(self) -> None:
        self.results = _results()
        self.hang_started = asyncio.Event()
        self.hang_cancelled = asyncio.Event()
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def tools(self) -> list[Tool]:
        plain: dict[str, Any] = {"type": "object"}
        declared = [Tool(name=name, input_schema=plain) for name in self.results]
        return [
            *declared,
            Tool(name="route", input_schema=REFS_SCHEMA),
            Tool(name="tag", input_schema=TAGS_SCHEMA),
            Tool(name="hang", input_schema=plain),
        ]

    def server(self) -> Server[Any]:
        async def list_tools(ctx: Any, params: Any) -> ListToolsResult:
            return ListToolsResult(tools=self.tools())

        async def call_tool(ctx: Any, params: Any) -> CallToolResult:
            self.calls.append((params.name, dict(params.arguments or {})))
            if params.name == "hang":
                self.hang_started.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    self.hang_cancelled.set()
                    raise
            if params.name in ("route", "tag"):
                return CallToolResult(content=[TextContent(text="ok")])
            return self.results[params.name]

        return Server("raw", on_list_tools=list_tools, on_call_tool=call_tool)


@pytest.fixture
async def raw() -> AsyncIterator[tuple[RawServer, McpToolset]]:
    raw_server = RawServer()
    served = await serve_http(cast("MCPServer", raw_server.server()))
    toolset = McpToolset(url=served.url, name="raw")
    try:
        yield raw_server, toolset
    finally:
        await toolset.close()
        await served.stop()


async def test_ref_pointers_of_every_kind_are_inlined_not_dropped(
    raw: tuple[RawServer, McpToolset],
) -> None:
    _, toolset = raw
    tools = await tools_by_name(toolset)
    schema = tools["route"].declaration().parameters_schema
    assert schema == {
        "type": "object",
        "properties": {
            "origin": PLACE,
            "destination": PLACE,
            "mode": {"type": "string", "enum": ["rail", "road"]},
        },
        "required": ["origin", "destination"],
    }


async def test_a_schema_of_free_form_arguments_still_takes_arguments(
    raw: tuple[RawServer, McpToolset],
) -> None:
    raw_server, toolset = raw
    tools = await tools_by_name(toolset)
    assert tools["tag"].declaration().parameters_schema == TAGS_SCHEMA
    # A bare object schema declares no parameters (as a function without any).
    assert tools["texts"].declaration().parameters_schema is None
    await tools["tag"].execute(tool_context(), {"colour": "red"})
    assert raw_server.calls[-1] == ("tag", {"colour": "red"})


async def test_results_of_every_content_kind_reach_the_model_as_text(
    raw: tuple[RawServer, McpToolset],
) -> None:
    _, toolset = raw
    tools = await tools_by_name(toolset)

    async def run(name: str) -> dict[str, Any] | None:
        return await tools[name].execute(tool_context(), {})

    assert await run("texts") == {"result": "first part\nsecond part"}
    assert await run("media") == {
        "result": "\n".join(
            [
                "a chart:",
                "[image image/png, 100 bytes]",
                "[audio audio/wav, 10 bytes]",
                "[resource report: file:///tmp/report.pdf]",
                "the notes",
                "[resource file:///data.bin, application/octet-stream]",
            ]
        )
    }
    # structuredContent wins over its text; a text that is not JSON stays text.
    assert await run("structured") == {"celsius": 12}
    assert await run("not_json") == {"result": "{not: json"}
    assert await run("empty") == {"result": ""}
    # isError: every text block, for the model; never the structured content.
    with pytest.raises(ToolError) as refused:
        await run("refused")
    assert refused.value.message == "quota exceeded\nretry tomorrow"
    with pytest.raises(ToolError, match="'refused_silently' failed without saying why"):
        await run("refused_silently")


async def test_a_cancelled_call_cancels_the_mcp_request_and_the_session_goes_on(
    raw: tuple[RawServer, McpToolset],
) -> None:
    raw_server, toolset = raw
    tools = await tools_by_name(toolset)
    call = asyncio.create_task(tools["hang"].execute(tool_context(), {}))
    async with asyncio.timeout(10):
        await raw_server.hang_started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    async with asyncio.timeout(10):  # notifications/cancelled reached the server
        await raw_server.hang_cancelled.wait()
    session = toolset._session
    assert await tools["texts"].execute(tool_context(), {}) == {"result": "first part\nsecond part"}
    assert toolset._session is session


async def test_a_call_that_outlives_the_tool_timeout_is_a_tool_error_and_is_cancelled(
    raw: tuple[RawServer, McpToolset],
) -> None:
    raw_server, toolset = raw
    tools = await tools_by_name(toolset)
    context = invocation()
    context.tool_timeout = 0.5
    response, error = await execute_tool(tools["hang"], ToolContext(context), {})
    assert response is None and isinstance(error, ToolError)
    assert "hang" in error.message
    async with asyncio.timeout(10):
        await raw_server.hang_cancelled.wait()


# --- two servers, the same tool names -------------------------------------------------------


@pytest.fixture
async def twins() -> AsyncIterator[tuple[HttpMcpServer, HttpMcpServer]]:
    one = await serve_http(build_http_server())
    other = await serve_http(build_http_server())
    try:
        yield one, other
    finally:
        await one.stop()
        await other.stop()


async def test_a_list_change_is_seen_by_the_toolset_of_its_server_only(
    twins: tuple[HttpMcpServer, HttpMcpServer],
) -> None:
    one, other = twins
    first = McpToolset(url=one.url, name="one")
    second = McpToolset(url=other.url, name="other")
    try:
        first_tools = await tools_by_name(first)
        second_tools = await tools_by_name(second)
        assert set(first_tools) == set(second_tools) == {"scan", "fail", "grow"}
        await first_tools["grow"].execute(tool_context(), {})
        extra = await wait_for_tool(first, "extra")
        assert await extra.execute(tool_context(), {"value": 4}) == {"result": 8}
        # The other toolset keeps its listing (the same objects: not listed again), and each
        # toolset's "scan" goes to its own server.
        again = await tools_by_name(second)
        assert all(again[name] is second_tools[name] for name in second_tools)
        assert "extra" not in again
        assert await again["scan"].execute(tool_context(), {"steps": 1}) == {
            "result": "scanned in 1 steps"
        }
    finally:
        await first.close()
        await second.close()


# --- the MCP port of a tool service: an MCP session belongs to whoever opened it -----------


def whoami(tool_context: ToolContext) -> dict[str, str]:
    """Who calls, in which session."""
    session = tool_context.invocation_context.session
    return {"user": session.user_id, "session": session.id}


# A raw MCP client's requests: the headers each one carries, and the first one.
MCP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


async def test_an_mcp_session_is_refused_to_another_authenticated_user(tmp_path: Path) -> None:
    """The SDK answers a session id used with another credential than the one that opened it
    as an unknown session (404): another user holding the id neither calls in it nor ends it."""
    keys: dict[str, str] = {}
    lines: list[str] = []
    for user in ("ada", "bob"):
        keys[user], line = new_api_key(user)
        lines.append(line)
    (tmp_path / "keys").write_text("\n".join(lines) + "\n")
    security = ServerSecurity(authenticators=(ApiKeyAuthenticator(tmp_path / "keys"),))
    server = McpServer(
        _StaticToolset("tools", [FunctionTool(whoami)]), name="tools", security=security
    )
    port = await server.start("127.0.0.1", 0)
    url = f"http://127.0.0.1:{port}/mcp"

    async def post(
        http: httpx2.AsyncClient, user: str, body: dict[str, Any], sid: str | None = None
    ) -> httpx2.Response:
        headers = {**MCP_HEADERS, "x-api-key": keys[user]}
        if sid is not None:
            headers["mcp-session-id"] = sid
        return await http.post(url, json=body, headers=headers)

    try:
        async with httpx2.AsyncClient(timeout=30) as http:
            opened = await post(http, "ada", INITIALIZE)
            sid = opened.headers["mcp-session-id"]
            await post(http, "ada", {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami"}}
            hijack = await post(http, "bob", call, sid)
            assert hijack.status_code == 404, hijack.text
            ended = await http.delete(
                url, headers={**MCP_HEADERS, "x-api-key": keys["bob"], "mcp-session-id": sid}
            )
            assert ended.status_code == 404
            # Ada's session is hers, and still open.
            own = await post(http, "ada", call, sid)
            assert own.status_code == 200 and '"user":"ada"' in own.text.replace(" ", "")
    finally:
        await server.stop()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
async def test_on_any_loopback_address_a_request_must_name_a_loopback_host(host: str) -> None:
    """The SDK's DNS-rebinding protection guards every loopback address it is served on (it
    turned itself on for three spellings of loopback only: not 127.0.0.2)."""
    server = McpServer(_StaticToolset("tools", [FunctionTool(whoami)]), name="tools")
    port = await server.start(host, 0)
    url = f"http://{host}:{port}/mcp"
    try:
        async with httpx2.AsyncClient(timeout=30) as http:
            rebound = await http.post(
                url, json=INITIALIZE, headers={**MCP_HEADERS, "host": f"attacker.example:{port}"}
            )
            assert rebound.status_code in (400, 403, 421), rebound.text
            assert "mcp-session-id" not in rebound.headers
            own = await http.post(url, json=INITIALIZE, headers=MCP_HEADERS)
            assert own.status_code == 200, own.text
    finally:
        await server.stop()
