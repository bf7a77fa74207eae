"""What a review of credentials and their redaction found: values that reach a caller, the
model or the session store in a form other than the one handed out (percent-encoded in a URL,
escaped by an error message), or inside objects the redaction did not look into."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.credentials import (
    REDACTED,
    Credential,
    CredentialService,
    FileCredentialService,
    KnownSecrets,
    StaticCredentialService,
)
from adk_mesh.runner import Runner
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, Part
from tests.http_servers import QuietHandler, serve_http

# A token with the characters a URL's query string encodes (base64 padding, '+', '/').
TOKEN = "dGhpcy+pc/Etc2VjcmV0LXRva2Vu=="


class Refusing(QuietHandler):
    """An API that refuses every request: 403."""

    def do_GET(self) -> None:
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[SqliteSessionService]:
    service = SqliteSessionService(tmp_path / "sessions.db")
    try:
        yield service
    finally:
        await service.close()


async def run_tool(
    sessions: SqliteSessionService,
    tool: Callable[..., Any],
    credentials: CredentialService,
) -> list[Event]:
    agent = LlmAgent(
        name="agent",
        model=ScriptedModel([call(tool.__name__), "done"]),
        tools=[FunctionTool(tool)],
    )
    runner = Runner(
        agent=agent, app_name="app", session_service=sessions, credential_service=credentials
    )
    session = await sessions.create_session(app_name="app", user_id="ada")
    message = Content(role="user", parts=[Part(text="go")])
    return [
        event
        async for event in runner.run(user_id="ada", session_id=session.id, new_message=message)
    ]


def leaked(events: list[Event], directory: Path, *forms: str) -> list[str]:
    """The ``forms`` found in an event or in a file under ``directory``."""
    texts = [event.model_dump_json() for event in events]
    texts += [p.read_bytes().decode("latin-1") for p in directory.rglob("*") if p.is_file()]
    return [form for form in forms if any(form in text for text in texts)]


def fragments(value: str) -> list[str]:
    """What would still give the value away: its halves, and what a URL makes of it."""
    half = len(value) // 2
    return [
        value,
        value[:half],
        value[half:],
        urllib.parse.quote_plus(value, safe=""),
        urllib.parse.quote(value, safe=""),
    ]


async def test_a_token_percent_encoded_in_an_http_error_url_is_redacted(
    sessions: SqliteSessionService, tmp_path: Path
) -> None:
    # httpx's raise_for_status names the URL, whose query string holds the token as
    # httpx encoded it ('=' as %3D, '+' as %2B): the value as handed out is not in it.
    with serve_http(Refusing) as url:

        async def call_api(tool_context: ToolContext) -> dict[str, Any]:
            """Calls an API with the token in its query string."""
            token = await tool_context.get_credential("api")
            assert token is not None
            async with httpx.AsyncClient() as client:
                response = await client.get(f"{url}/v1/items", params={"key": token.reveal()})
                response.raise_for_status()
            return {"ok": True}

        events = await run_tool(sessions, call_api, StaticCredentialService({"api": TOKEN}))
    (response,) = [r.response for e in events for r in e.function_responses()]
    assert "403" in response["error"]
    assert f"key={REDACTED}" in response["error"]
    assert leaked(events, tmp_path, *fragments(TOKEN)) == []


async def test_a_key_with_a_stray_newline_is_redacted_from_the_http_library_error(
    sessions: SqliteSessionService, tmp_path: Path
) -> None:
    # A value with a stray newline (the file and environment stores drop one; a store of
    # one's own, a vault's, may not): the HTTP library refuses the header and names it as
    # repr() writes it, newline escaped.
    key = "sk-live-5c1e0a9b7d33"
    environment = StaticCredentialService({"api": key + "\n"})
    with serve_http(Refusing) as url:

        async def call_api(tool_context: ToolContext) -> dict[str, Any]:
            """Calls an API with the key as a bearer token."""
            credential = await tool_context.get_credential("api")
            assert credential is not None
            async with httpx.AsyncClient() as client:
                headers = {"authorization": f"Bearer {credential.reveal()}"}
                await client.get(f"{url}/v1/items", headers=headers)
            return {"ok": True}

        events = await run_tool(sessions, call_api, environment)
    (response,) = [r.response for e in events for r in e.function_responses()]
    assert "header" in response["error"]
    assert leaked(events, tmp_path, key) == []


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        # What an error message (repr), a JSON body and a URL make of a value.
        ("pa'ss\\word-7f3e", lambda v: repr(v)),
        ("pa'ss\\word-7f3e", lambda v: repr(v.encode())),
        ('pa"ss\\wörd-7f3e', lambda v: json.dumps(v)),
        ('pa"ss\\wörd-7f3e', lambda v: json.dumps(v, ensure_ascii=False)),
        ("-----BEGIN KEY-----\nMIIEvQIBADANBgkq\n-----END KEY-----", lambda v: json.dumps(v)),
        (TOKEN, lambda v: urllib.parse.quote(v, safe="")),
        (TOKEN, lambda v: f"/v1/keys/{urllib.parse.quote(v)}/items"),
        ("a key with spaces/1", lambda v: urllib.parse.quote_plus(v, safe="")),
        ("  sk-live-0c8b62e5f1  ", lambda v: f"sent {v.strip()}!"),
    ],
)
def test_a_value_as_text_writes_it_is_redacted(value: str, shown: Callable[[str], str]) -> None:
    secrets = KnownSecrets()
    secrets.add(Credential("api", value))
    text = f"refused: {shown(value)} (403)"
    assert REDACTED in secrets.redact_text(text)
    assert secrets.redact_bytes(text.encode()) == secrets.redact_text(text).encode()


def test_redaction_leaves_ordinary_text_alone() -> None:
    secrets = KnownSecrets()
    secrets.add(Credential("api", "sk-live-0c8b62e5f1"))
    secrets.add(Credential("short", "abc"))
    text = "Porto: clear skies, 21 °C; a 'quoted' word and a back\\slash."
    assert secrets.redact_text(text) is text
    assert secrets.redact({"text": text, "n": 1}) == {"text": text, "n": 1}


@dataclasses.dataclass
class Fetched:
    status: int
    body: bytes


class Step(BaseModel):
    sent: str


async def test_bytes_inside_a_returned_dataclass_are_redacted(
    sessions: SqliteSessionService, tmp_path: Path
) -> None:
    # The dataclass's bytes become base64 text when the response is made JSON: the value
    # must be replaced before, as in bytes returned directly.
    key = "sk-live-1f0e9d8c7b6a"

    async def echo(tool_context: ToolContext) -> Fetched:
        """Returns what an echoing API answered: the request it got."""
        credential = await tool_context.get_credential("api")
        assert credential is not None
        return Fetched(200, b"authorization: Bearer " + credential.reveal().encode())

    events = await run_tool(sessions, echo, StaticCredentialService({"api": key}))
    (response,) = [r.response for e in events for r in e.function_responses()]
    assert base64.b64decode(response["body"]) == b"authorization: Bearer " + REDACTED.encode()
    # From the 24th byte on, every base64 character encodes the key's bytes alone.
    encoded = base64.b64encode(b"authorization: Bearer " + key.encode()).decode()[32:]
    assert leaked(events, tmp_path, key, encoded) == []


async def test_a_model_in_progress_data_is_redacted(
    sessions: SqliteSessionService, tmp_path: Path
) -> None:
    key = "sk-live-2a3b4c5d6e7f"

    async def working(tool_context: ToolContext) -> dict[str, Any]:
        """Reports what it sent."""
        credential = await tool_context.get_credential("api")
        assert credential is not None
        sent = Step(sent=f"Bearer {credential.reveal()}")
        await tool_context.report_progress("calling", {"step": sent, "steps": {sent.sent}})
        return {"ok": True}

    events = await run_tool(sessions, working, StaticCredentialService({"api": key}))
    (progress,) = [e.tool_progress for e in events if e.tool_progress is not None]
    assert progress.data is not None
    assert leaked(events, tmp_path, key) == []


async def test_a_confirmation_request_carries_no_key(
    sessions: SqliteSessionService, tmp_path: Path
) -> None:
    # The request a person is asked to approve, as the tool would send it: it becomes the
    # adk_request_confirmation call, an event stored and sent to the client.
    key = "sk-live-7e6d5c4b3a29"

    async def transfer(tool_context: ToolContext) -> dict[str, Any]:
        """Asks before moving money."""
        credential = await tool_context.get_credential("bank")
        assert credential is not None
        request = {"url": "/transfers", "headers": {"x-bank-key": credential.reveal()}}
        tool_context.request_confirmation(
            hint=f"Send with key {credential.reveal()}?", payload={"request": request}
        )
        return {"status": "waiting"}

    events = await run_tool(sessions, transfer, StaticCredentialService({"bank": key}))
    asked = [
        part.function_call
        for event in events
        if event.content is not None
        for part in event.content.parts
        if part.function_call is not None and part.function_call.name == "adk_request_confirmation"
    ]
    assert len(asked) == 1
    assert leaked(events, tmp_path, key) == []


async def test_a_rotated_kubernetes_secret_is_read_at_the_next_call(tmp_path: Path) -> None:
    # Kubernetes rotates a Secret volume by pointing ..data at a new directory, atomically.
    mount = tmp_path / "mount"
    mount.mkdir()

    def publish(version: str, value: str) -> None:
        directory = mount / f"..{version}"
        directory.mkdir()
        (directory / "api").write_text(value)
        (directory / "api").chmod(0o400)
        (mount / "..data_tmp").symlink_to(directory.name)
        os.replace(mount / "..data_tmp", mount / "..data")

    publish("2026_01", "sk-live-first-0001")
    (mount / "api").symlink_to("..data/api")
    service = FileCredentialService(mount)
    first = await service.get("api", app_name="app", user_id="ada")
    publish("2026_02", "sk-live-second-0002")
    second = await service.get("api", app_name="app", user_id="ada")
    assert first is not None and first.reveal() == "sk-live-first-0001"
    assert second is not None and second.reveal() == "sk-live-second-0002"
