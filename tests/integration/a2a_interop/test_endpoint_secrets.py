"""The secrets of a remote endpoint are used to reach it and shown nowhere: a remote A2A
agent's URL (``user:password@``, a secret query value) and its headers, and an MCP stdio
server's command line (``--api-key X``, ``--token=X``), in no name, log line, span, error or
event, in process or across the mesh."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from a2a.server.agent_execution import RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from adk_mesh import A2aAgent, McpToolset, Runner
from adk_mesh.agents.a2a import A2A_AGENTS_ENV, a2a_agents_from_env
from adk_mesh.errors import ConfigError, ToolError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.types import Content, Event
from tests.integration.a2a_interop.plain_a2a import PlainExecutor, plain_server, submitted_task
from tests.integration.mcp_interop.conftest import build_http_server, readonly, tool_context
from tests.integration.mcp_interop.test_mcp_url_secrets import Served

PASSWORD = "pa55w0rd-XYZ"
API_KEY = "SEKRET-KEY-123"
SIGNATURE = "0123abcdef-signature"
BEARER = "bearer-token-456789"
HEADER_KEY = "header-key-ABCDEFG"
SECRETS = (PASSWORD, API_KEY, SIGNATURE, BEARER, HEADER_KEY)
HEADERS = {"Authorization": f"Bearer {BEARER}", "x-api-key": HEADER_KEY}

STDIO_SERVER = Path(__file__).parents[1] / "mcp_interop" / "stdio_server.py"


def keyed(base: str) -> str:
    """``base`` (``http://host:port``) with a password and secret query parameters."""
    scheme, rest = base.split("://", 1)
    return (
        f"{scheme}://bob:{PASSWORD}@{rest}?api_key={API_KEY}&region=eu&X-Amz-Signature={SIGNATURE}"
    )


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


#: The loggers of this side: adk-mesh's and the A2A client's, which logs the card's URL (httpx
#: logs each request's URL as it is sent, which no caller can change; the servers are the
#: other side).
OUR_LOGGERS = ("adk_mesh", "a2a.client")


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record, at every level."""
    with caplog.at_level(logging.DEBUG):
        yield caplog


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(
        record.getMessage() for record in caplog.records if record.name.startswith(OUR_LOGGERS)
    )


async def turn(agent: Any, text: str) -> list[Event]:
    sessions = InMemorySessionService()
    runner = Runner(agent=agent, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u1")
    return [
        event
        async for event in runner.run(
            user_id="u1", session_id=session.id, new_message=Content.from_text("user", text)
        )
    ]


class _Refusing(PlainExecutor):
    """``whoami``: fails the task with a message that echoes the key header it was sent."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        if context.get_user_input() != "whoami":
            await super().execute(context, event_queue)
            return
        headers = dict(context.call_context.state.get("headers", {}))
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await event_queue.enqueue_event(submitted_task(context))
        await updater.failed(
            updater.new_agent_message(
                [a2a_pb2.Part(text=f"no access for {headers.get('x-api-key')}")]
            )
        )


@contextlib.asynccontextmanager
async def card_refused() -> AsyncIterator[tuple[str, list[Request]]]:
    """An HTTP server on 127.0.0.1 whose agent card answers 401 naming the URL asked for; it
    records the requests it got."""
    seen: list[Request] = []

    async def refuse(request: Request) -> PlainTextResponse:
        seen.append(request)
        return PlainTextResponse(f"no key for {request.url}", status_code=401)

    app = Starlette(routes=[Route("/{path:path}", refuse)])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn offers nothing to await
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/a2a", seen
    finally:
        server.should_exit = True
        server.config.timeout_graceful_shutdown = 1
        await task


# --- a remote A2A agent ---------------------------------------------------------------------


def test_an_a2a_url_that_is_not_http_is_refused_without_its_secrets() -> None:
    with pytest.raises(ConfigError, match="http") as refused:
        A2aAgent("weather", keyed("ftp://weather.example"), headers=HEADERS)
    assert_hidden(str(refused.value))


async def test_a_keyed_url_reaches_the_agent_and_its_span_shows_no_secret(
    spans: InMemorySpanExporter, logs: pytest.LogCaptureFixture
) -> None:
    async with plain_server() as plain:
        remote = A2aAgent("plain", keyed(plain.url), headers=HEADERS)
        try:
            events = await turn(remote, "echo hello")
        finally:
            await remote.close()

    # The card was fetched with the key in the query: the answer came.
    assert [e.text for e in events if not e.partial and e.text] == ["hello"]
    (client,) = [
        s
        for s in spans.get_finished_spans()
        if s.name == "lf.a2a.v1.A2AService/SendStreamingMessage" and s.kind == SpanKind.CLIENT
    ]
    assert client.attributes is not None
    assert client.attributes["url.full"] == (
        f"{keyed(plain.url).replace(PASSWORD, '[redacted]')}".replace(
            API_KEY, "[redacted]"
        ).replace(SIGNATURE, "[redacted]")
    )
    for span in spans.get_finished_spans():
        assert_hidden(span.to_json())
    assert_hidden(logged(logs))


async def test_a_refused_card_names_no_secret_in_the_event_the_log_or_a_span(
    spans: InMemorySpanExporter, logs: pytest.LogCaptureFixture
) -> None:
    async with card_refused() as (url, seen):
        remote = A2aAgent("weather", keyed(url), headers=HEADERS)
        try:
            events = await turn(remote, "rain?")
        finally:
            await remote.close()

    # What was given is what was sent: the password (as basic auth, which takes the place of
    # the Authorization header, as httpx does with a URL's user info), the query, the headers.
    (request,) = seen
    assert request.url.path == "/a2a/.well-known/agent-card.json"
    assert request.query_params["api_key"] == API_KEY
    assert request.query_params["X-Amz-Signature"] == SIGNATURE
    assert (
        request.headers["authorization"]
        == f"Basic {base64.b64encode(f'bob:{PASSWORD}'.encode()).decode()}"
    )
    assert request.headers["x-api-key"] == HEADER_KEY
    message = events[-1].llm_response.error_message or ""
    assert events[-1].llm_response.error_code == "A2A_UNAVAILABLE"
    assert "'weather'" in message and "401" in message
    assert_hidden(message)
    assert_hidden(logged(logs))
    for span in spans.get_finished_spans():
        assert_hidden(span.to_json())


async def test_a_remote_error_that_echoes_a_header_shows_it_redacted(
    logs: pytest.LogCaptureFixture,
) -> None:
    async with plain_server(_Refusing()) as plain:
        remote = A2aAgent("plain", plain.url, headers=HEADERS)
        try:
            events = await turn(remote, "whoami")
        finally:
            await remote.close()

    message = events[-1].llm_response.error_message or ""
    assert events[-1].llm_response.error_code == "A2A_FAILED"
    assert message.endswith("no access for [redacted]")
    assert_hidden(logged(logs))


async def test_across_the_mesh_an_agent_of_the_env_config_tells_the_caller_no_secret(
    logs: pytest.LogCaptureFixture,
) -> None:
    async with card_refused() as (url, _seen):
        settings = {"weather": {"url": keyed(url), "headers": HEADERS}}
        (agent,) = a2a_agents_from_env({A2A_AGENTS_ENV: json.dumps(settings)})
        server = AgentServer(agent)
        port = await server.start("127.0.0.1:0")
        remote = RemoteAgent("weather", f"127.0.0.1:{port}")
        try:
            events = await turn(remote, "rain?")
        finally:
            await remote.close()
            await server.stop(None)
            await agent.close()

    assert events[-1].llm_response.error_code == "A2A_UNAVAILABLE"
    for event in events:
        assert_hidden(event.model_dump_json())
    assert_hidden(logged(logs))


# --- what counts as a secret in a URL -------------------------------------------------------


@pytest.mark.parametrize(
    "parameter",
    [
        "sig",
        "signature",
        "Signature",
        "X-Amz-Signature",
        "X-Goog-Signature",
        "X-Amz-Credential",
        "X-Amz-Security-Token",
        "oauth_signature",
        "AWSAccessKeyId",
        "token",
        "access_token",
        "code",
    ],
)
def test_query_values_that_are_credentials_are_redacted(parameter: str) -> None:
    url = f"https://h.example/mcp?{parameter}=0123456789abc&region=eu"
    assert McpToolset(url=url).name == f"mcp:https://h.example/mcp?{parameter}=[redacted]&region=eu"


@pytest.mark.parametrize(
    "parameter", ["SignatureVersion", "SignatureMethod", "X-Amz-Date", "max_tokens", "zip_code"]
)
def test_query_values_that_name_no_credential_are_shown(parameter: str) -> None:
    url = f"https://h.example/mcp?{parameter}=2&region=eu"
    assert McpToolset(url=url).name == f"mcp:{url}"


# --- an MCP stdio server's command line -----------------------------------------------------


async def test_a_stdio_servers_secret_arguments_show_in_no_name_log_or_error(
    logs: pytest.LogCaptureFixture,
) -> None:
    toolset = McpToolset(
        command=sys.executable,
        args=[
            str(STDIO_SERVER),
            "--api-key",
            API_KEY,
            f"--token={BEARER}",
            "--header",
            f"Authorization: Bearer {SIGNATURE}",
            "--region",
            "eu",
        ],
        env={"SERVICE_PASSWORD": PASSWORD, "PATH": "/usr/bin:/bin"},
    )
    try:
        tools = {tool.name: tool for tool in await toolset.tools(readonly())}
        with pytest.raises(ToolError) as lost:
            await tools["die"].execute(tool_context(), {})  # logs the server's command line
    finally:
        await toolset.close()

    assert_hidden(toolset.name)
    assert_hidden(repr(toolset))
    assert_hidden(str(lost.value))
    text = logged(logs)
    assert "was lost during a call" in text
    # Which server it was still shows: the flags, and the values that are no secret.
    assert (
        f"{sys.executable} {STDIO_SERVER} --api-key [redacted] --token=[redacted] "
        "--header Authorization: [redacted] --region eu"
    ) in text
    assert_hidden(text)


async def test_an_mcp_servers_error_that_echoes_a_header_shows_it_redacted() -> None:
    served = Served(build_http_server().streamable_http_app())
    toolset = McpToolset(url=await served.start(), headers=HEADERS)
    try:
        tools = {tool.name: tool for tool in await toolset.tools(readonly())}
        with pytest.raises(ToolError) as failed:
            # A server that says which key it refused.
            await tools["fail"].execute(tool_context(), {"reason": f"refused {HEADER_KEY}"})
    finally:
        await toolset.close()
        await served.stop()

    assert str(failed.value).endswith("cannot do it: refused [redacted]")
