"""Tools get credentials through their ToolContext; what they hand back is redacted before it
is stored, shown to the model or saved (in one process, with real SQLite and artifact files)."""

from __future__ import annotations

import base64
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts import FileArtifactService
from adk_mesh.contexts import ToolContext
from adk_mesh.credentials import (
    REDACTED,
    ChainCredentialService,
    Credential,
    CredentialService,
    StaticCredentialService,
)
from adk_mesh.errors import ConfigError, InvalidArgumentError, ToolError
from adk_mesh.runner import Runner
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Blob, Content, Event, LlmResponse, Part

SECRET = "sk-live-9d3e7a1f44c2"
OTHER = "tok-user-0c8b62e5f1"


@dataclass
class Seen:
    """What the tools saw (test-only: whether they got the right values)."""

    values: dict[str, str | None] = field(default_factory=dict)


async def use_secret(tool_context: ToolContext) -> dict[str, Any]:
    """Calls an API with the weather key, and (carelessly) hands it back everywhere."""
    credential = await tool_context.get_credential("weather_api")
    assert credential is not None
    SEEN.values["weather_api"] = credential.reveal()
    value = credential.reveal()
    tool_context.state["careless"] = f"Bearer {value}"
    tool_context.state["object"] = credential
    await tool_context.report_progress(f"calling with {value}", {"key": value})
    await tool_context.save_artifact("report.txt", Part(text=f"report made with {value}"))
    await tool_context.save_artifact(
        "raw.bin", Part(inline_data=Blob(data=b"key=" + value.encode(), mime_type="application/x"))
    )
    return {"echo": value, "header": f"Bearer {value}", "object": credential, "list": [value]}


async def fail_with_secret(tool_context: ToolContext) -> dict[str, Any]:
    """Fails with the key in its message."""
    credential = await tool_context.get_credential("weather_api")
    assert credential is not None
    raise RuntimeError(f"upstream refused key {credential.reveal()}")


SEEN = Seen()


@pytest.fixture(autouse=True)
def _forget() -> None:
    SEEN.values.clear()


@dataclass
class Stores:
    db: Path
    artifacts: Path
    sessions: SqliteSessionService
    artifact_service: FileArtifactService


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    sessions = SqliteSessionService(tmp_path / "sessions.db")
    artifacts = tmp_path / "artifacts"
    try:
        yield Stores(tmp_path / "sessions.db", artifacts, sessions, FileArtifactService(artifacts))
    finally:
        await sessions.close()


def files_hold(root: Path, secret: str) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``secret``."""
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


SESSION_IDS: list[str] = []


async def run_turn(runner: Runner, text: str = "go", **kwargs: Any) -> list[Event]:
    session = await runner.session_service.create_session(app_name="app", user_id="ada")
    SESSION_IDS.append(session.id)
    return [
        event
        async for event in runner.run(
            user_id="ada",
            session_id=session.id,
            new_message=Content(role="user", parts=[Part(text=text)]),
            **kwargs,
        )
    ]


async def test_a_tool_gets_its_credential_and_nothing_it_hands_back_keeps_it(
    stores: Stores, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    model = ScriptedModel(
        [
            LlmResponse(
                content=Content(
                    role="model",
                    parts=[
                        Part.from_function_call("use_secret", {}, id="c1"),
                        Part.from_function_call("fail_with_secret", {}, id="c2"),
                    ],
                )
            ),
            "done",
        ]
    )
    agent = LlmAgent(
        name="agent",
        model=model,
        tools=[FunctionTool(use_secret), FunctionTool(fail_with_secret)],
    )
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=stores.sessions,
        artifact_service=stores.artifact_service,
        credential_service=StaticCredentialService({"weather_api": SECRET}),
    )
    events = await run_turn(runner)
    assert SEEN.values["weather_api"] == SECRET
    responses = {
        r.id: r.response for e in events for r in e.function_responses() if r.id is not None
    }
    assert responses["c1"] == {
        "echo": REDACTED,
        "header": f"Bearer {REDACTED}",
        "object": REDACTED,
        "list": [REDACTED],
    }
    assert responses["c2"] == {
        "error": f"Tool 'fail_with_secret' failed: RuntimeError: upstream refused key {REDACTED}"
    }
    progress = [e.tool_progress for e in events if e.tool_progress is not None]
    assert progress and progress[0].message == f"calling with {REDACTED}"
    assert progress[0].data == {"key": REDACTED}
    # What the model was shown, what was stored, saved and logged.
    assert SECRET not in model.requests[1].model_dump_json()
    session = await stores.sessions.get_session(
        app_name="app",
        user_id="ada",
        session_id=SESSION_IDS[-1],
    )
    assert session is not None
    assert session.state["careless"] == f"Bearer {REDACTED}"
    assert session.state["object"] == REDACTED
    await stores.sessions.close()
    assert stores.db.read_bytes()  # written
    assert files_hold(tmp_path, SECRET) == []
    report = stores.artifacts.rglob("*")
    assert any(p.is_file() for p in report)
    assert SECRET not in caplog.text
    assert "upstream refused key [redacted]" in caplog.text  # the traceback, redacted


async def test_a_short_value_is_not_searched_for_but_its_object_is_replaced(
    stores: Stores,
) -> None:
    async def short(tool_context: ToolContext) -> dict[str, Any]:
        """Returns a short credential."""
        credential = await tool_context.get_credential("pin")
        assert credential is not None
        return {"pin": credential.reveal(), "object": credential}

    agent = LlmAgent(
        name="agent", model=ScriptedModel([call("short"), "ok"]), tools=[FunctionTool(short)]
    )
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=stores.sessions,
        credential_service=StaticCredentialService({"pin": "1234"}),
    )
    events = await run_turn(runner)
    [response] = [r.response for e in events for r in e.function_responses()]
    assert response == {"pin": "1234", "object": REDACTED}


async def test_without_a_service_a_tool_gets_none_and_a_bad_name_is_its_error(
    stores: Stores,
) -> None:
    async def ask(name: str, tool_context: ToolContext) -> dict[str, Any]:
        """Asks for a credential."""
        return {"found": await tool_context.get_credential(name) is not None}

    agent = LlmAgent(
        name="agent",
        model=ScriptedModel(
            [call("ask", {"name": "weather_api"}), call("ask", {"name": "../x"}), "ok"]
        ),
        tools=[FunctionTool(ask)],
    )
    runner = Runner(agent=agent, app_name="app", session_service=stores.sessions)
    events = await run_turn(runner)
    responses = [r.response for e in events for r in e.function_responses()]
    assert responses[0] == {"found": False}
    assert "is not a credential name" in responses[1]["error"]


async def test_request_metadata_reaches_tools_read_only_and_is_never_stored(
    stores: Stores, tmp_path: Path
) -> None:
    async def tenant(tool_context: ToolContext) -> dict[str, Any]:
        """Reads the tenant."""
        with pytest.raises(TypeError):
            tool_context.request_metadata["x-tenant"] = "other"  # type: ignore[index]
        return {"tenant_ok": tool_context.request_metadata.get("x-tenant") == "acme-4711"}

    agent = LlmAgent(
        name="agent", model=ScriptedModel([call("tenant"), "ok"]), tools=[FunctionTool(tenant)]
    )
    runner = Runner(agent=agent, app_name="app", session_service=stores.sessions)
    events = await run_turn(runner, request_metadata={"x-tenant": "acme-4711"})
    assert [r.response for e in events for r in e.function_responses()] == [{"tenant_ok": True}]
    with pytest.raises(InvalidArgumentError, match="is not a request metadata key"):
        await run_turn(runner, request_metadata={"X-Tenant": "acme"})
    await stores.sessions.close()
    assert files_hold(tmp_path, "acme-4711") == []


class Recording(CredentialService):
    """The process's own store, which records who asked."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.asked: list[tuple[str, str, str]] = []

    async def get(self, name: str, *, app_name: str, user_id: str) -> Credential | None:
        self.asked.append((name, app_name, user_id))
        value = self.values.get(name)
        return Credential(name, value) if value is not None else None


async def test_a_local_agent_tool_child_reaches_the_process_store_and_forwarded_ones_by_policy(
    stores: Stores,
) -> None:
    """In process the child reaches the process's own store; credentials a caller forwarded
    to this run reach it only when the policy names them; its answer is redacted too."""

    async def peek(tool_context: ToolContext) -> dict[str, Any]:
        """Reports which credentials it can get."""
        own = await tool_context.get_credential("weather_api")
        forwarded = await tool_context.get_credential("user_token")
        unnamed = await tool_context.get_credential("other_forwarded")
        return {
            "own": own is not None and own.reveal() == SECRET,
            "forwarded": forwarded is not None and forwarded.reveal() == OTHER,
            "unnamed": unnamed is not None,
            "leak": own.reveal() if own else None,
        }

    child = LlmAgent(
        name="child", model=ScriptedModel([call("peek"), "child done"]), tools=[FunctionTool(peek)]
    )
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([call("child", {"request": "peek"}), "parent done"]),
        tools=[AgentTool(child, forward_credentials=["user_token"])],
    )
    own = Recording({"weather_api": SECRET})
    session = await stores.sessions.create_session(app_name="app", user_id="ada")
    # A run with forwarded credentials (what a served delegated run builds).
    from adk_mesh.contexts import InvocationContext

    ctx = InvocationContext(
        invocation_id="e-1",
        agent=parent,
        session=session,
        session_service=stores.sessions,
        credential_service=own,
        forwarded_credentials={
            "user_token": Credential("user_token", OTHER),
            "other_forwarded": Credential("other_forwarded", "never-named-9f8e7d"),
        },
    )
    events = [e async for e in parent.run(ctx)]
    [child_response] = [
        r.response for e in events for r in e.function_responses() if r.name == "child"
    ]
    assert child_response == {"result": "child done"}
    peeked = [
        r.response
        for e in child.model.requests[1].contents  # type: ignore[attr-defined]
        for r in e.parts
        if r.function_response is not None
        for r in [r.function_response]
    ]
    assert peeked == [{"own": True, "forwarded": True, "unnamed": False, "leak": REDACTED}]
    assert ("weather_api", "app", "ada") in own.asked


async def test_the_service_own_credential_wins_over_a_forwarded_one(stores: Stores) -> None:
    from adk_mesh.contexts import InvocationContext

    session = await stores.sessions.create_session(app_name="app", user_id="ada")
    agent = LlmAgent(name="agent", model=ScriptedModel([]))
    ctx = InvocationContext(
        invocation_id="e-1",
        agent=agent,
        session=session,
        credential_service=ChainCredentialService([StaticCredentialService({"k": SECRET})]),
        forwarded_credentials={
            "k": Credential("k", OTHER),
            "only_forwarded": Credential("only_forwarded", OTHER),
        },
    )
    tool_context = ToolContext(ctx)
    assert (await tool_context.get_credential("k")).reveal() == SECRET  # type: ignore[union-attr]
    assert (await tool_context.get_credential("only_forwarded")).reveal() == OTHER  # type: ignore[union-attr]
    assert await tool_context.get_credential("none") is None


def test_an_agent_tool_refuses_bad_forwarding_names() -> None:
    child = LlmAgent(name="child", model=ScriptedModel([]))
    with pytest.raises(ConfigError, match="is not a credential name"):
        AgentTool(child, forward_credentials=["../etc"])
    with pytest.raises(ConfigError, match="is not a request metadata key"):
        AgentTool(child, forward_request_metadata=["Authorization Header"])
    with pytest.raises(ConfigError, match="lists of names"):
        AgentTool(child, forward_credentials="weather_api")  # type: ignore[arg-type]
    policy = AgentTool(
        child, forward_credentials=["k"], forward_request_metadata=["x-tenant"]
    ).policy
    assert policy.forward_credentials == ("k",)
    assert policy.forward_request_metadata == ("x-tenant",)
    assert policy.forwards_secrets
    assert not AgentTool(child).policy.forwards_secrets


async def test_bytes_state_keys_and_error_metadata_are_redacted_too(stores: Stores) -> None:
    # What the two-process leak test found: a value returned as bytes (which would become
    # base64 text), a state key naming the value, and a ToolError's metadata.
    secret = "sk-live-987654321"

    async def as_bytes(tool_context: ToolContext) -> dict[str, Any]:
        """Returns the key as bytes and names a state key after it."""
        credential = await tool_context.get_credential("weather_api")
        assert credential is not None
        tool_context.state[f"seen:{credential.reveal()}"] = True
        return {"raw": credential.reveal().encode(), "nested": [b"x" + secret.encode()]}

    async def with_metadata(tool_context: ToolContext) -> dict[str, Any]:
        """Fails with the key in its metadata."""
        credential = await tool_context.get_credential("weather_api")
        assert credential is not None
        raise ToolError("refused", metadata={"key": credential.reveal()})

    seen_metadata: list[dict[str, str]] = []

    def on_tool_error(tool: Any, args: Any, tool_context: Any, error: Exception) -> None:
        # What goes on with the error (over the wire, the ErrorInfo of a ToolServer's call).
        seen_metadata.append(dict(getattr(error, "metadata", {})))

    agent = LlmAgent(
        name="agent",
        model=ScriptedModel([call("as_bytes"), call("with_metadata"), "ok"]),
        tools=[FunctionTool(as_bytes), FunctionTool(with_metadata)],
        on_tool_error_callback=on_tool_error,
    )
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=stores.sessions,
        credential_service=StaticCredentialService({"weather_api": secret}),
    )
    events = await run_turn(runner)
    first, second = [r.response for e in events for r in e.function_responses()]
    assert base64.b64decode(first["raw"]) == REDACTED.encode()
    assert base64.b64decode(first["nested"][0]) == b"x" + REDACTED.encode()
    assert second == {"error": "refused"}
    assert seen_metadata == [{"key": REDACTED}]
    session = await stores.sessions.get_session(
        app_name="app", user_id="ada", session_id=SESSION_IDS[-1]
    )
    assert session is not None
    assert session.state == {f"seen:{REDACTED}": True}
    assert files_hold(stores.db.parent, secret) == []
    assert all(secret not in event.model_dump_json() for event in events)
