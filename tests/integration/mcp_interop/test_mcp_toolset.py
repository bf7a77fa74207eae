"""McpToolset against real MCP servers: the reference time server (PyPI ``mcp-server-time``)
over stdio, a streamable-HTTP server the test starts with the ``mcp`` SDK, and a stdio server
that dies in the middle of a call — in process (an LlmAgent's toolset) and behind a real
ToolServer reached by a RemoteToolset."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp.types import Tool

from adk_mesh import LlmAgent, McpToolset, Runner, ToolError
from adk_mesh.errors import AdkIOError, ConfigError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.mcp import McpTool, mcp_toolsets_from_env
from adk_mesh.types import Content, ToolProgress
from tests.integration.mcp_interop.conftest import (
    STDIO_SERVER,
    TIME_SERVER,
    HttpMcpServer,
    build_http_server,
    readonly,
    serve_http,
    tool_context,
    tools_by_name,
    wait_for_tool,
)

LISBON_TO_TOKYO = {
    "source_timezone": "Europe/Lisbon",
    "time": "09:00",
    "target_timezone": "Asia/Tokyo",
}


@pytest.fixture
async def time_tools() -> AsyncIterator[McpToolset]:
    toolset = McpToolset(command=TIME_SERVER[0], args=TIME_SERVER[1:], name="time")
    try:
        yield toolset
    finally:
        await toolset.close()


# --- the reference server, over stdio ---------------------------------------------------------


async def test_the_reference_time_server_s_tools_are_listed_with_their_schemas(
    time_tools: McpToolset,
) -> None:
    tools = await tools_by_name(time_tools)
    assert set(tools) == {"get_current_time", "convert_time"}
    declaration = tools["convert_time"].declaration()
    assert declaration.description == "Convert time between timezones"
    schema = declaration.parameters_schema
    assert schema is not None
    assert schema["required"] == ["source_timezone", "time", "target_timezone"]
    assert schema["properties"]["time"]["type"] == "string"
    # Model-friendly: pydantic's titles dropped, the output schema's $refs inlined.
    assert "title" not in schema and "title" not in schema["properties"]["time"]
    assert declaration.response_schema is not None
    assert "$defs" not in declaration.response_schema
    assert declaration.response_schema["properties"]["target"]["type"] == "object"
    # The same objects while the server announces no change: one tools/list per session.
    again = await time_tools.tools(readonly())
    assert [tool.name for tool in again] == list(tools)
    assert all(a is b for a, b in zip(again, tools.values(), strict=True))


async def test_a_call_returns_the_structured_result_and_an_error_the_model_can_read(
    time_tools: McpToolset,
) -> None:
    tools = await tools_by_name(time_tools)
    result = await tools["convert_time"].execute(tool_context(), dict(LISBON_TO_TOKYO))
    assert result is not None
    assert result["source"]["timezone"] == "Europe/Lisbon"
    assert result["target"]["timezone"] == "Asia/Tokyo"
    assert result["time_difference"] in ("+8.0h", "+9.0h")  # Lisbon's summer time, or not
    # An isError result: its text, for the model.
    with pytest.raises(ToolError, match="Invalid timezone"):
        await tools["convert_time"].execute(
            tool_context(), {**LISBON_TO_TOKYO, "target_timezone": "Mars/Olympus"}
        )
    # A protocol error (the server rejects an unknown tool with -32602): the server's message.
    ghost = McpTool(time_tools, Tool(name="no_such_tool", input_schema={"type": "object"}))
    with pytest.raises(ToolError, match=r"refused the call to 'no_such_tool'.*Unknown tool"):
        await ghost.execute(tool_context(), {})


async def test_an_llm_agent_uses_the_reference_server_in_process(time_tools: McpToolset) -> None:
    agent = LlmAgent(
        name="clock",
        model=ScriptedModel([call("convert_time", dict(LISBON_TO_TOKYO)), "Done."]),
        tools=[time_tools],
    )
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="app", user_id="u1")
    runner = Runner(agent=agent, app_name="app", session_service=sessions)
    events = [
        event
        async for event in runner.run(
            user_id="u1", session_id=session.id, new_message=Content.from_text("user", "clock?")
        )
    ]
    responses = [r for event in events for r in event.function_responses()]
    assert [r.name for r in responses] == ["convert_time"]
    assert responses[0].response["target"]["timezone"] == "Asia/Tokyo"
    assert events[-1].text == "Done."


async def test_the_filter_offers_only_the_named_tools() -> None:
    toolset = McpToolset(command=TIME_SERVER[0], args=TIME_SERVER[1:], tool_filter=["convert_time"])
    try:
        assert list(await tools_by_name(toolset)) == ["convert_time"]
    finally:
        await toolset.close()


# --- a streamable-HTTP server the test starts ----------------------------------------------


async def test_progress_errors_and_a_tool_added_at_runtime_over_http(
    http_server: HttpMcpServer,
) -> None:
    toolset = McpToolset(url=http_server.url, name="test-http")
    try:
        tools = await tools_by_name(toolset)
        assert set(tools) == {"scan", "fail", "grow"}

        progress: list[ToolProgress] = []
        result = await tools["scan"].execute(tool_context(progress), {"steps": 4})
        assert result == {"result": "scanned in 4 steps"}
        assert [(p.message, p.fraction) for p in progress] == [
            ("step 1 of 4", 0.0),
            ("step 2 of 4", 0.25),
            ("step 3 of 4", 0.5),
            ("step 4 of 4", 0.75),
        ]
        assert progress[1].data == {"progress": 1.0, "total": 4.0}

        with pytest.raises(ToolError, match="cannot do it: no reason"):
            await tools["fail"].execute(tool_context(), {"reason": "no reason"})

        # grow adds a tool and says so: the toolset lists again, without being asked to.
        assert await tools["grow"].execute(tool_context(), {}) == {"result": "extra added"}
        extra = await wait_for_tool(toolset, "extra")
        assert await extra.execute(tool_context(), {"value": 21}) == {"result": 42}
    finally:
        await toolset.close()


async def test_the_handshake_era_s_list_changed_notification_refreshes_the_listing(
    http_server: HttpMcpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2025-11-25 server (the initialize handshake) says so with
    notifications/tools/list_changed on its own stream, not subscriptions/listen."""
    from mcp.client import client as mcp_client

    async def handshake_only(session: Any) -> None:
        await session.initialize()  # what the SDK falls back to with a server of that era

    monkeypatch.setattr(mcp_client, "negotiate_auto", handshake_only)
    toolset = McpToolset(url=http_server.url)
    try:
        tools = await tools_by_name(toolset)
        session = toolset._session
        assert session is not None and session.client.protocol_version == "2025-11-25"
        await tools["grow"].execute(tool_context(), {})
        await wait_for_tool(toolset, "extra")
    finally:
        await toolset.close()


async def test_a_server_that_stopped_is_a_clear_error_and_its_last_listing_stays() -> None:
    served = await serve_http(build_http_server())
    toolset = McpToolset(url=served.url, name="flaky", connect_timeout=5)
    try:
        tools = await tools_by_name(toolset)
        await served.stop()
        with pytest.raises(ToolError, match="'flaky'") as raised:
            await tools["scan"].execute(tool_context(), {"steps": 1})
        assert "connects again" in str(raised.value) or "cannot be reached" in str(raised.value)
        # The next call tries to connect again, and says the server cannot be reached.
        with pytest.raises(ToolError, match="cannot be reached, so 'scan' did not run"):
            await tools["scan"].execute(tool_context(), {"steps": 1})
        # The model still sees the last listing meanwhile.
        assert set(await tools_by_name(toolset)) == {"scan", "fail", "grow"}
    finally:
        await toolset.close()


async def test_a_server_never_reached_fails_the_listing_with_an_io_error() -> None:
    toolset = McpToolset(url="http://127.0.0.1:9/mcp", connect_timeout=5)
    with pytest.raises(AdkIOError, match="cannot open the MCP session"):
        await toolset.tools(readonly())


# --- a stdio server that dies mid-call ---------------------------------------------------------


async def test_a_server_that_dies_mid_call_is_a_tool_error_and_the_next_call_restarts_it() -> None:
    toolset = McpToolset(command=STDIO_SERVER[0], args=STDIO_SERVER[1:], name="fragile")
    try:
        tools = await tools_by_name(toolset)
        first = await tools["pid"].execute(tool_context(), {})
        assert first is not None
        with pytest.raises(ToolError, match="stopped answering during the call to 'die'"):
            await tools["die"].execute(tool_context(), {})
        second = await tools["pid"].execute(tool_context(), {})
        assert second is not None and second["result"] != first["result"]
        assert await tools["echo"].execute(tool_context(), {"text": "back"}) == {"result": "back"}
        server_process = second["result"]
    finally:
        await toolset.close()
    # close() stopped the server's process.
    with pytest.raises(ProcessLookupError):
        os.kill(server_process, 0)


# --- behind a ToolServer, reached by a RemoteToolset ---------------------------------------


@pytest.fixture
async def fronting(http_server: HttpMcpServer) -> AsyncIterator[tuple[RemoteToolset, McpToolset]]:
    """A ToolServer that fronts the HTTP server and the reference time server, and a
    RemoteToolset of it."""
    fronted = McpToolset(url=http_server.url, name="test-http")
    time_tools = McpToolset(command=TIME_SERVER[0], args=TIME_SERVER[1:], name="time")
    server = ToolServer([fronted, time_tools], name="fronted")
    port = await server.start("127.0.0.1:0")
    remote = RemoteToolset(f"127.0.0.1:{port}", tls=None, listing_max_age=0)
    try:
        yield remote, fronted
    finally:
        await remote.close()
        await server.stop(None)


async def test_a_tool_server_fronts_mcp_servers_for_the_mesh(
    fronting: tuple[RemoteToolset, McpToolset],
) -> None:
    remote, fronted = fronting
    tools = await tools_by_name(remote)
    assert set(tools) == {"scan", "fail", "grow", "convert_time", "get_current_time"}
    # The declaration crosses the wire as the MCP server gave it (made model-friendly).
    local = (await tools_by_name(fronted))["scan"].declaration()
    assert tools["scan"].declaration().parameters_schema == local.parameters_schema

    converted = await tools["convert_time"].execute(tool_context(), dict(LISBON_TO_TOKYO))
    assert converted is not None and converted["target"]["timezone"] == "Asia/Tokyo"

    progress: list[ToolProgress] = []
    scanned = await tools["scan"].execute(tool_context(progress), {"steps": 2})
    assert scanned == {"result": "scanned in 2 steps"}
    assert [(p.message, p.fraction) for p in progress] == [
        ("step 1 of 2", 0.0),
        ("step 2 of 2", 0.5),
    ]

    with pytest.raises(ToolError, match="cannot do it: remote"):
        await tools["fail"].execute(tool_context(), {"reason": "remote"})

    await tools["grow"].execute(tool_context(), {})
    extra = await wait_for_tool(remote, "extra")
    assert await extra.execute(tool_context(), {"value": 5}) == {"result": 10}


async def test_stopping_the_tool_server_closes_the_mcp_sessions(http_server: HttpMcpServer) -> None:
    fronted = McpToolset(command=STDIO_SERVER[0], args=STDIO_SERVER[1:])
    server = ToolServer([fronted])
    port = await server.start("127.0.0.1:0")
    remote = RemoteToolset(f"127.0.0.1:{port}", tls=None)
    try:
        tools = await tools_by_name(remote)
        served: Any = await tools["pid"].execute(tool_context(), {})
    finally:
        await remote.close()
        await server.stop(None)
    assert fronted._session is None
    with pytest.raises(ProcessLookupError):
        os.kill(served["result"], 0)


# --- configuration -------------------------------------------------------------------------


def test_a_toolset_needs_one_transport_and_its_own_options() -> None:
    with pytest.raises(ConfigError, match="either command"):
        McpToolset()
    with pytest.raises(ConfigError, match="either command"):
        McpToolset(command="x", url="http://127.0.0.1/mcp")
    with pytest.raises(ConfigError, match="headers and ca_file are for an HTTP server"):
        McpToolset(command="x", headers={"a": "b"})
    with pytest.raises(ConfigError, match="args, env and cwd are for a stdio server"):
        McpToolset(url="http://127.0.0.1/mcp", args=["-v"])
    with pytest.raises(ConfigError, match="starts with http"):
        McpToolset(url="127.0.0.1/mcp")
    with pytest.raises(ConfigError, match="not one string"):
        McpToolset(command="x", tool_filter="convert_time")


def test_toolsets_from_the_environment() -> None:
    import sys

    env = {
        "ADK_MESH_MCP_TOOLSETS": (
            '{"time": {"command": "{python}", "args": ["-m", "mcp_server_time"],'
            ' "tools": ["convert_time"]}, "web": {"url": "https://x.example/mcp",'
            ' "headers": {"Authorization": "Bearer t"}}}'
        )
    }
    time_tools, web = mcp_toolsets_from_env(env)
    assert (time_tools.name, time_tools.command, time_tools.args) == (
        "time",
        sys.executable,
        ("-m", "mcp_server_time"),
    )
    assert time_tools.tool_filter == frozenset({"convert_time"})
    assert (web.name, web.url, web.headers) == (
        "web",
        "https://x.example/mcp",
        {"Authorization": "Bearer t"},
    )
    assert mcp_toolsets_from_env({}) == []
    with pytest.raises(ConfigError, match="not JSON"):
        mcp_toolsets_from_env({"ADK_MESH_MCP_TOOLSETS": "{"})
    with pytest.raises(ConfigError, match="unknown key tool; known keys"):
        mcp_toolsets_from_env({"ADK_MESH_MCP_TOOLSETS": '{"t": {"command": "x", "tool": []}}'})
    with pytest.raises(ConfigError, match="args must be an array of strings"):
        mcp_toolsets_from_env({"ADK_MESH_MCP_TOOLSETS": '{"t": {"command": "x", "args": "-v"}}'})
