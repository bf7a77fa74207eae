"""The HTTP client libraries adk-mesh drives log what they send: httpx and httpx2 each request's
URL at INFO (``HTTP Request: GET <url> "HTTP/1.1 200 OK"``), httpcore and httpcore2 each
response's headers at DEBUG. Those records show a URL's secrets and a secret header's value as
``[redacted]``, by the rule adk-mesh shows an endpoint by everywhere else, whatever the
application's logging configuration; and a token in a URL's path (a Telegram bot's, a Slack or
Discord webhook's) is recognised as a secret."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator

import pytest
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from google.protobuf import json_format

from adk_mesh import A2aAgent, McpToolset, Runner
from adk_mesh.contexts import InvocationContext, ReadonlyContext
from adk_mesh.credentials import KnownSecrets
from adk_mesh.credentials._redaction import shown_url
from adk_mesh.errors import AdkError, AdkIOError, ModelError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.models import GeminiModel, LlmRequest
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.sessions.base import Session
from adk_mesh.testing.fake_providers import FakeGemini, RawReply
from adk_mesh.types import Content
from tests.http_servers import QuietHandler, serve_http

PASSWORD = "pa55w0rd-XYZ"
API_KEY = "SEKRET-KEY-123"
COOKIE = "cookie-SESSION-789"
BOT_TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
BOT_SECRET = BOT_TOKEN.partition(":")[2]
SECRETS = (PASSWORD, API_KEY, COOKIE, BOT_SECRET)

#: The loggers of the HTTP client libraries.
HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2")


def keyed(base: str) -> str:
    """``base`` (``http://host:port/path``) with a password and a secret query value."""
    scheme, rest = base.split("://", 1)
    return f"{scheme}://bob:{PASSWORD}@{rest}?api_key={API_KEY}&region=eu"


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


class Refusing(QuietHandler):
    """Answers every request 401, setting a session cookie (which httpcore logs at DEBUG)."""

    def refuse(self) -> None:
        body = json.dumps({"error": {"code": 401, "message": "no"}}).encode()
        self.send_response(401)
        self.send_header("Set-Cookie", f"session={COOKIE}; Path=/")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = refuse


@pytest.fixture
def refusing() -> Iterator[str]:
    with serve_http(Refusing) as url:
        yield url


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log record, at every level (an application that logs everything)."""
    with caplog.at_level(logging.DEBUG):
        yield caplog


def http_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name.startswith(HTTP_LOGGERS)]


def request_lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == logger and record.getMessage().startswith("HTTP Request:")
    ]


async def generate(model: GeminiModel) -> None:
    """One request of ``model`` (whatever the fake answers: only what was logged matters)."""
    request = LlmRequest(contents=[Content.from_text("user", "hi")])
    with contextlib.suppress(ModelError):
        [r async for r in model.generate_content(request, stream=False)]


def readonly() -> ReadonlyContext:
    agent = A2aAgent("unused", "http://127.0.0.1:9/a2a")
    session = Session(id="s1", app_name="app", user_id="u1")
    return ReadonlyContext(InvocationContext(invocation_id="e-1", agent=agent, session=session))


# --- through adk-mesh's HTTP clients -----------------------------------------------------------


async def test_an_a2a_agents_card_request_is_logged_without_the_urls_secrets(
    refusing: str, logs: pytest.LogCaptureFixture
) -> None:
    url = keyed(f"{refusing}/a2a")
    remote = A2aAgent("weather", url)
    sessions = InMemorySessionService()
    runner = Runner(agent=remote, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u1")
    try:
        events = [
            event
            async for event in runner.run(
                user_id="u1", session_id=session.id, new_message=Content.from_text("user", "hi")
            )
        ]
    finally:
        await remote.close()

    assert events[-1].llm_response.error_code == "A2A_UNAVAILABLE"
    host = refusing.removeprefix("http://")
    # The line keeps its format and everything but the secrets (the password goes as basic
    # auth, not in the URL).
    assert request_lines(logs, "httpx") == [
        f"HTTP Request: GET http://{host}/a2a/.well-known/agent-card.json"
        '?api_key=[redacted]&region=eu "HTTP/1.0 401 Unauthorized"'
    ]
    (record,) = [r for r in logs.records if r.name == "httpx"]
    assert record.msg == 'HTTP Request: %s %s "%s %d %s"'
    # httpcore's response headers: a secret one's value hidden, the others as they were.
    headers = [r.getMessage() for r in http_records(logs) if "b'Set-Cookie'" in r.getMessage()]
    assert headers
    assert "(b'Set-Cookie', b'[redacted]')" in headers[0]
    assert "(b'Content-Type', b'application/json')" in headers[0]
    for record in logs.records:
        assert_hidden(record.getMessage())


async def test_an_mcp_servers_requests_are_logged_without_the_urls_secrets(
    refusing: str, logs: pytest.LogCaptureFixture
) -> None:
    toolset = McpToolset(url=keyed(f"{refusing}/mcp"))
    try:
        with pytest.raises(AdkIOError):
            await toolset.tools(readonly())
    finally:
        await toolset.close()

    host = refusing.removeprefix("http://")
    lines = request_lines(logs, "httpx2")
    assert lines
    assert lines[0] == (
        f"HTTP Request: POST http://bob:[redacted]@{host}/mcp?api_key=[redacted]&region=eu"
        ' "HTTP/1.0 401 Unauthorized"'
    )
    assert any("httpcore2" in record.name for record in http_records(logs))
    # The MCP SDK's own line naming the endpoint, too.
    assert f"Connecting to StreamableHTTP endpoint: http://bob:[redacted]@{host}/mcp" in logs.text
    for record in logs.records:
        assert_hidden(record.getMessage())


async def test_a_models_requests_are_logged_without_the_base_urls_secrets(
    logs: pytest.LogCaptureFixture,
) -> None:
    # A gateway in front of the provider, reached with a password in the base URL.
    reply = RawReply(status=200, headers={"Set-Cookie": f"sid={COOKIE}"}, body=b"{}")
    async with FakeGemini(reply) as server:
        scheme, rest = server.url.split("://", 1)
        model = GeminiModel(api_key="test-key", base_url=f"{scheme}://bob:{PASSWORD}@{rest}")
        try:
            await generate(model)
        finally:
            await model.aclose()

    # An ordinary path stays as it is: a model's name is no secret.
    assert request_lines(logs, "httpx") == [
        f"HTTP Request: POST http://bob:[redacted]@{rest}/v1beta/models/gemini-2.5-flash"
        ':generateContent "HTTP/1.1 200 OK"'
    ]
    for record in http_records(logs):
        assert_hidden(record.getMessage())


async def test_a_url_without_secrets_is_logged_as_it_is(
    logs: pytest.LogCaptureFixture,
) -> None:
    async with FakeGemini(RawReply(status=200, body=b"{}")) as server:
        model = server.make_model()
        try:
            await generate(model)
        finally:
            await model.aclose()

    (record,) = [r for r in logs.records if r.name == "httpx"]
    # Left untouched, argument and all.
    assert str(record.args[1]) == (  # type: ignore[index]
        f"{server.url}/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert type(record.args[1]).__name__ == "URL"  # type: ignore[index]


async def test_an_application_handler_on_the_httpx_logger_sees_the_redacted_line(
    refusing: str,
) -> None:
    # The application's own handler on httpx's logger, which does not propagate: the records
    # are redacted before any handler sees them.
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    httpx_logger = logging.getLogger("httpx2")
    handler = Collect(logging.INFO)
    httpx_logger.addHandler(handler)
    level, propagate = httpx_logger.level, httpx_logger.propagate
    httpx_logger.setLevel(logging.INFO)
    httpx_logger.propagate = False
    toolset = McpToolset(url=f"{refusing}/bot{BOT_TOKEN}/mcp?token={API_KEY}")
    try:
        with pytest.raises(AdkIOError):
            await toolset.tools(readonly())
    finally:
        await toolset.close()
        httpx_logger.removeHandler(handler)
        httpx_logger.setLevel(level)
        httpx_logger.propagate = propagate

    assert seen
    assert f"{refusing}/bot[redacted]/mcp?token=[redacted]" in seen[0]
    assert_hidden("\n".join(seen))
    assert toolset.name == f"mcp:{refusing}/bot[redacted]/mcp?token=[redacted]"


async def test_an_a2a_agent_reached_with_a_token_in_its_path_logs_no_token(
    logs: pytest.LogCaptureFixture,
) -> None:
    # A card is served (the A2A SDK logs the URL it fetched it from); the message is refused.
    class CardServing(Refusing):
        def do_GET(self) -> None:
            if not self.path.endswith("/.well-known/agent-card.json"):
                self.refuse()
                return
            host = self.headers["Host"]
            card = a2a_pb2.AgentCard(
                name="bot",
                description="A bot.",
                version="1.0",
                supported_interfaces=[
                    a2a_pb2.AgentInterface(
                        url=f"http://{host}/bot{BOT_TOKEN}/",
                        protocol_binding=TransportProtocol.JSONRPC,
                        protocol_version="1.0",
                    )
                ],
            )
            self.reply(json.dumps(json_format.MessageToDict(card)).encode(), "application/json")

    with serve_http(CardServing) as base:
        remote = A2aAgent("bot", f"{base}/bot{BOT_TOKEN}")
        sessions = InMemorySessionService()
        runner = Runner(agent=remote, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u1")
        try:
            events = [
                event
                async for event in runner.run(
                    user_id="u1",
                    session_id=session.id,
                    new_message=Content.from_text("user", "hi"),
                )
            ]
        finally:
            await remote.close()

    assert events[-1].llm_response.error_code
    assert remote.url == f"{base}/bot{BOT_TOKEN}"  # what it connects to
    assert f"Successfully fetched agent card data from {base}/bot[redacted]/" in logs.text
    assert f"HTTP Request: POST {base}/bot[redacted]/ " in logs.text
    for record in logs.records:
        assert_hidden(record.getMessage())


async def test_across_the_mesh_a_tool_server_fronting_it_tells_no_path_token(
    refusing: str, logs: pytest.LogCaptureFixture
) -> None:
    fronted = McpToolset(url=f"{refusing}/bot{BOT_TOKEN}/mcp")
    server = ToolServer(fronted)
    port = await server.start("127.0.0.1:0")
    remote = RemoteToolset(f"127.0.0.1:{port}", tls=None, listing_max_age=0)
    try:
        with pytest.raises(AdkError) as refused:
            await remote.tools(readonly())
    finally:
        await remote.close()
        await server.stop(None)
        await fronted.close()

    assert "bot[redacted]" in server.name
    assert_hidden(server.name)
    assert_hidden(str(refused.value))
    for record in logs.records:
        assert_hidden(record.getMessage())


# --- a token in a URL's path ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown", "secret"),
    [
        (
            f"https://api.telegram.org/bot{BOT_TOKEN}/sendMessage",
            "https://api.telegram.org/bot[redacted]/sendMessage",
            BOT_SECRET,
        ),
        (
            f"https://api.telegram.org/file/bot{BOT_TOKEN}/photos/file_1.jpg",
            "https://api.telegram.org/file/bot[redacted]/photos/file_1.jpg",
            BOT_SECRET,
        ),
        (
            "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
            "https://hooks.slack.com/services/T00000000/B00000000/[redacted]",
            "XXXXXXXXXXXXXXXXXXXXXXXX",
        ),
        (
            "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX/",
            "https://hooks.slack.com/services/T00000000/B00000000/[redacted]/",
            "XXXXXXXXXXXXXXXXXXXXXXXX",
        ),
        (
            "https://hooks.slack.com/triggers/T0000/1234567890/0123456789abcdef0123456789abcdef",
            "https://hooks.slack.com/triggers/T0000/1234567890/[redacted]",
            "0123456789abcdef0123456789abcdef",
        ),
        (
            "https://discord.com/api/webhooks/123456789012345678/Abc-DEF_ghi123456789/slack",
            "https://discord.com/api/webhooks/123456789012345678/[redacted]/slack",
            "Abc-DEF_ghi123456789",
        ),
        (
            "https://discordapp.com/api/v10/webhooks/123456789012345678/Abc-DEF_ghi123456789",
            "https://discordapp.com/api/v10/webhooks/123456789012345678/[redacted]",
            "Abc-DEF_ghi123456789",
        ),
    ],
)
def test_a_token_in_the_path_is_shown_redacted_and_known(url: str, shown: str, secret: str) -> None:
    secrets = KnownSecrets()
    assert shown_url(url, secrets) == shown
    error = secrets.redact_text(f"cannot reach {url}: {secret}")
    assert error == f"cannot reach {shown}: [redacted]"


@pytest.mark.parametrize(
    "url",
    [
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent",
        "https://api.example.com/v1/sessions/550e8400-e29b-41d4-a716-446655440000/events",
        "https://api.example.com/bots/bot42/status",
        "https://api.example.com/bot123:getMe",
        "https://example.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "https://example.com/api/webhooks/123456789012345678/Abc-DEF_ghi123456789",
        "https://hooks.slack.com/services/",
        "https://hooks.slack.com/services/T00000000/B00000000/",
        "https://discord.com/api/webhooks/123456789012345678",
    ],
)
def test_an_ordinary_path_is_shown_as_it_is(url: str) -> None:
    secrets = KnownSecrets()
    assert shown_url(url, secrets) == url
    assert not secrets


def test_an_encoded_telegram_token_is_recognised_too() -> None:
    encoded = BOT_TOKEN.replace(":", "%3A")
    secrets = KnownSecrets()
    shown = shown_url(f"https://api.telegram.org/bot{encoded}/getMe", secrets)
    assert shown == "https://api.telegram.org/bot[redacted]/getMe"
    assert secrets.redact_text(f"bot{BOT_TOKEN} bot{encoded}") == "bot[redacted] bot[redacted]"
