"""A key in an MCP server's URL (``?api_key=...``, ``user:password@``) is used to connect and
shown nowhere: not in the toolset's name, its logs, its errors, the spans of a run, or what a
ToolServer fronting it tells the mesh."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import uvicorn
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from adk_mesh import LlmAgent, McpToolset, Runner
from adk_mesh.errors import AdkIOError, ConfigError, ToolError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content
from adk_mesh.v1 import tool_pb2, tool_pb2_grpc
from tests.integration.mcp_interop.conftest import build_http_server, readonly, tool_context
from tests.telemetry_fixtures import _fresh_telemetry_configuration, spans

__all__ = ["_fresh_telemetry_configuration", "spans"]  # fixtures

PASSWORD = "pa55w0rd-XYZ"
API_KEY = "SEKRET-KEY-123"
TOKEN = "tok/en+456=="  # percent-encoded in the URL
SECRETS = (PASSWORD, API_KEY, TOKEN, "tok%2Fen%2B456%3D%3D")


def secret_url(base: str) -> str:
    """``base`` (``http://host:port/mcp``) with a password and secret query parameters."""
    scheme, rest = base.split("://", 1)
    return (
        f"{scheme}://bob:{PASSWORD}@{rest}"
        f"?api_key={API_KEY}&region=eu&accessToken=tok%2Fen%2B456%3D%3D"
    )


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """adk-mesh's log records, at every level."""
    with caplog.at_level(logging.DEBUG, logger="adk_mesh"):
        yield caplog


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        record.getMessage() for record in caplog.records if record.name.startswith("adk_mesh")
    )


class Served:
    """An ASGI app on 127.0.0.1 port 0 in this loop, recording the query strings it got."""

    def __init__(self, app: Any) -> None:
        self.queries: list[str] = []
        self.app = app
        self.url = ""
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.queries.append(scope["query_string"].decode())
        await self.app(scope, receive, send)

    async def start(self) -> str:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        config = uvicorn.Config(
            self, log_level="warning", lifespan="on", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
        self._task = asyncio.create_task(self._server.serve(sockets=[listener]))
        async with asyncio.timeout(10):
            while not self._server.started:  # noqa: ASYNC110 - uvicorn sets a flag, no event
                await asyncio.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self.url

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@pytest.fixture
async def mcp_server() -> AsyncIterator[Served]:
    served = Served(build_http_server().streamable_http_app())
    await served.start()
    try:
        yield served
    finally:
        await served.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# --- what the toolset shows -----------------------------------------------------------------


def test_the_default_name_shows_the_url_without_its_secrets() -> None:
    url = secret_url("https://tools.example.com/mcp")
    toolset = McpToolset(url=url)

    assert toolset.name == (
        "mcp:https://bob:[redacted]@tools.example.com/mcp"
        "?api_key=[redacted]&region=eu&accessToken=[redacted]"
    )
    assert_hidden(repr(toolset))
    assert toolset.url == url  # what it connects to


def test_a_url_without_secrets_is_shown_as_it_is() -> None:
    url = "https://bob@tools.example.com:8443/mcp?region=eu&keywords=a+b&max_tokens=3#top"
    assert McpToolset(url=url).name == f"mcp:{url}"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # Only a password is hidden in the user info; a value as the query writes it.
        (
            "http://bob:@h/mcp?key=a+very+long+key&KEY=&token",
            "http://bob:@h/mcp?key=[redacted]&KEY=&token",
        ),
        ("http://bob@h/mcp#access_token=0123456789", "http://bob@h/mcp#access_token=[redacted]"),
        (
            "http://h/mcp?client_secret=x&X-Api-Key=y",
            "http://h/mcp?client_secret=[redacted]&X-Api-Key=[redacted]",
        ),
        # A URL the parser refuses: its scheme only.
        ("http://[::1/mcp?api_key=0123456789", "http://[redacted]"),
    ],
)
def test_what_a_url_shows(url: str, shown: str) -> None:
    assert McpToolset(url=url).name == f"mcp:{shown}"


async def test_secrets_written_otherwise_in_an_error_are_taken_out_too(
    mcp_server: Served,
) -> None:
    toolset = McpToolset(url=f"{mcp_server.url}?api_key=a%2Fb+c%3D0123456789", name="keyed")
    try:
        tools = {tool.name: tool for tool in await toolset.tools(readonly())}
        with pytest.raises(ToolError) as failed:
            await tools["fail"].execute(tool_context(), {"reason": "a/b c=0123456789"})
    finally:
        await toolset.close()

    assert str(failed.value).endswith("cannot do it: [redacted]")


def test_a_url_that_is_not_http_is_refused_without_its_secrets() -> None:
    with pytest.raises(ConfigError, match="starts with http") as refused:
        McpToolset(url=secret_url("ftp://tools.example.com/mcp"))
    assert_hidden(str(refused.value))


# --- connecting with it -----------------------------------------------------------------------


async def test_the_real_url_connects_and_neither_logs_nor_results_show_its_secrets(
    mcp_server: Served, logs: pytest.LogCaptureFixture
) -> None:
    toolset = McpToolset(url=secret_url(mcp_server.url))
    try:
        tools = {tool.name: tool for tool in await toolset.tools(readonly())}
        result = await tools["scan"].execute(tool_context(), {"steps": 1})
        with pytest.raises(ToolError, match="cannot do it") as failed:
            # A server's error that echoes the URL it was asked at.
            await tools["fail"].execute(tool_context(), {"reason": secret_url(mcp_server.url)})
    finally:
        await toolset.close()

    assert result == {"result": "scanned in 1 steps"}
    # The server got the key: the URL shown is not the one used.
    assert f"api_key={API_KEY}" in mcp_server.queries[0]
    assert "api_key=[redacted]" in str(failed.value)
    assert_hidden(str(failed.value))
    assert_hidden(logged(logs))


async def test_a_server_that_cannot_be_reached_is_named_without_the_secrets(
    logs: pytest.LogCaptureFixture,
) -> None:
    toolset = McpToolset(url=secret_url(f"http://127.0.0.1:{free_port()}/mcp"))
    try:
        with pytest.raises(AdkIOError, match="cannot open the MCP session") as refused:
            await toolset.tools(readonly())
    finally:
        await toolset.close()

    assert "[redacted]" in str(refused.value)
    assert_hidden(str(refused.value))
    assert logged(logs)
    assert_hidden(logged(logs))


async def test_a_server_refusing_the_client_is_named_without_the_secrets(
    logs: pytest.LogCaptureFixture,
) -> None:
    async def refuse(request: Request) -> PlainTextResponse:
        # As some servers do: the error names the URL it was asked for.
        return PlainTextResponse(f"no key for {request.url}", status_code=401)

    from starlette.applications import Starlette
    from starlette.routing import Route

    served = Served(Starlette(routes=[Route("/mcp", refuse, methods=["GET", "POST", "DELETE"])]))
    toolset = McpToolset(url=secret_url(await served.start()))
    try:
        with pytest.raises(AdkIOError) as refused:
            await toolset.tools(readonly())
    finally:
        await toolset.close()
        await served.stop()

    assert_hidden(str(refused.value))
    assert_hidden(logged(logs))


async def test_a_server_lost_during_a_run_shows_no_secret_in_events_logs_or_spans(
    mcp_server: Served, logs: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    toolset = McpToolset(url=secret_url(mcp_server.url))
    await toolset.tools(readonly())
    await mcp_server.stop()  # the session is open, the server gone
    agent = LlmAgent(
        name="helper",
        model=ScriptedModel([call("scan", {"steps": 1}), "It failed."]),
        tools=[toolset],
    )
    sessions = InMemorySessionService()
    runner = Runner(agent=agent, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="alice")
    try:
        events = [
            event
            async for event in runner.run(
                user_id="alice", session_id=session.id, new_message=Content.from_text("user", "go")
            )
        ]
    finally:
        await toolset.close()

    (response,) = [r.response for event in events for r in event.function_responses()]
    assert "[redacted]" in str(response)
    assert_hidden(str(response))
    assert_hidden(logged(logs))
    recorded = spans.get_finished_spans()
    assert any(span.name == "execute_tool scan" for span in recorded)
    for span in recorded:
        assert_hidden(span.to_json())


# --- across the mesh ------------------------------------------------------------------------


async def test_a_tool_server_fronting_it_tells_the_mesh_no_secret(
    mcp_server: Served, logs: pytest.LogCaptureFixture
) -> None:
    fronted = McpToolset(url=secret_url(mcp_server.url))
    server = ToolServer(fronted)
    port = await server.start("127.0.0.1:0")
    target = f"127.0.0.1:{port}"
    remote = RemoteToolset(target, tls=None, listing_max_age=0)
    try:
        async with grpc.aio.insecure_channel(target) as channel:
            listing = await tool_pb2_grpc.ToolServiceStub(channel).ListTools(
                tool_pb2.ListToolsRequest()
            )
        tools = {tool.name: tool for tool in await remote.tools(readonly())}
        await mcp_server.stop()  # the session is open, the server gone
        with pytest.raises(ToolError) as lost:
            await tools["scan"].execute(tool_context(), {"steps": 1})
    finally:
        await remote.close()
        await server.stop(None)

    assert listing.toolset_name.startswith("mcp:http://bob:[redacted]@127.0.0.1:")
    assert_hidden(listing.toolset_name)
    assert_hidden(server.name)
    assert_hidden(str(lost.value))
    assert_hidden(logged(logs))
