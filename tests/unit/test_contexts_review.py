"""Contexts under review: what a callback's artifact save leaves in the event log, RunConfig
values refused with a ConfigError naming the setting, and contexts kept past their tool call
or their turn, whose writes would reach no event (refused, never silently dropped)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh import CallbackContext, Content, Event, LlmAgent, Part, RunConfig, Runner
from adk_mesh.artifacts import InMemoryArtifactService
from adk_mesh.codec import run_config_to_proto
from adk_mesh.contexts import StreamingMode, ToolContext
from adk_mesh.errors import ConfigError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool

APP, USER = "app", "u"


async def _turn(
    agent: LlmAgent, artifacts: InMemoryArtifactService | None = None
) -> tuple[list[Event], InMemorySessionService, str]:
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=sessions, artifact_service=artifacts)
    events = [
        event
        async for event in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "hi")
        )
    ]
    return events, sessions, session.id


# --- artifacts saved by agent callbacks ----------------------------------------------------


@pytest.mark.parametrize("hook", ["before_agent_callback", "after_agent_callback"])
async def test_an_agent_callback_that_only_saves_an_artifact_records_it_in_an_event(
    hook: str,
) -> None:
    # The save is a change like a state write: without an event its artifact_delta never
    # reaches the session's log (a client never learns of the artifact).
    async def save(callback_context: CallbackContext) -> None:
        await callback_context.save_artifact("report.txt", Part.from_text("ok"))

    artifacts = InMemoryArtifactService()
    hooks: dict[str, Any] = {hook: save}
    agent = LlmAgent(name="a", model=ScriptedModel(["done"]), **hooks)
    events, sessions, session_id = await _turn(agent, artifacts)

    assert [e.actions.artifact_delta for e in events if e.actions.artifact_delta] == [
        {"report.txt": 1}
    ]
    stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None
    assert any(e.actions.artifact_delta == {"report.txt": 1} for e in stored.events)
    # The model still answered: an artifact save is no reply that skips the agent.
    assert any(e.content is not None and e.content.text == "done" for e in events)


async def test_an_agent_callback_that_changes_nothing_still_makes_no_event() -> None:
    seen: list[str] = []

    def look(callback_context: CallbackContext) -> None:
        seen.append(callback_context.agent_name)

    agent = LlmAgent(
        name="a",
        model=ScriptedModel(["done"]),
        before_agent_callback=look,
        after_agent_callback=look,
    )
    events, _, _ = await _turn(agent)
    assert seen == ["a", "a"]
    assert [e.content.text for e in events if e.content is not None] == ["done"]


# --- RunConfig ------------------------------------------------------------------------------


@pytest.mark.parametrize("calls", [2**31, 2**63, -(2**31) - 1])
def test_run_config_refuses_a_max_llm_calls_the_mesh_cannot_carry(calls: int) -> None:
    # Accepted, it failed later with a bare ValueError when a RemoteAgent sent it.
    with pytest.raises(ConfigError, match="max_llm_calls"):
        RunConfig(max_llm_calls=calls)


@pytest.mark.parametrize("calls", [2**31 - 1, 1, 0, -1, -(2**31)])
def test_run_config_keeps_every_max_llm_calls_the_mesh_carries(calls: int) -> None:
    config = RunConfig(max_llm_calls=calls)
    assert config.max_llm_calls == calls
    assert run_config_to_proto(config).max_llm_calls == calls


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"streaming_mode": "bidi"}, "streaming_mode"),
        ({"max_llm_calls": "many"}, "max_llm_calls"),
        ({"max_llm_calls": 2.5}, "max_llm_calls"),
        ({"max_calls": 5}, "max_calls"),
    ],
)
def test_run_config_bad_values_are_config_errors_naming_the_setting(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        RunConfig(**settings)


def test_run_config_still_takes_its_settings_by_value() -> None:
    config = RunConfig(max_llm_calls=3, streaming_mode="sse")
    assert config.streaming_mode is StreamingMode.SSE
    assert config.max_llm_calls == 3


# --- contexts used after their call or their turn is over -----------------------------------


def _keeper_agent(kept: dict[str, ToolContext], model: ScriptedModel) -> LlmAgent:
    def remember(tool_context: ToolContext) -> dict[str, Any]:
        """Keep the context (as a background task would)."""
        kept["ctx"] = tool_context
        tool_context.state["inside"] = 1  # during the call: recorded
        return {"ok": True}

    def write_late(tool_context: ToolContext) -> dict[str, Any]:
        """Write through the context of a call already answered."""
        try:
            kept["ctx"].state["late"] = 1
        except ConfigError as error:
            return {"refused": error.message}
        return {"refused": None}

    return LlmAgent(name="a", model=model, tools=[remember, write_late])


async def test_a_tool_context_kept_past_its_call_refuses_state_writes() -> None:
    kept: dict[str, ToolContext] = {}
    model = ScriptedModel([call("remember"), call("write_late"), "done"])
    events, sessions, session_id = await _turn(_keeper_agent(kept, model))

    answers = [r.response for e in events for r in e.function_responses() if r.name == "write_late"]
    assert len(answers) == 1 and answers[0]["refused"], answers
    assert "answered" in answers[0]["refused"]
    # Not half-applied either: the turn's later steps never saw it, and it is not stored.
    assert "late" not in kept["ctx"].invocation_context.session.state
    stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None
    assert stored.state == {"inside": 1}


async def test_contexts_kept_past_the_turn_refuse_writes_and_saves() -> None:
    kept_tool: dict[str, ToolContext] = {}
    kept_callback: list[CallbackContext] = []

    def keep(callback_context: CallbackContext) -> None:
        kept_callback.append(callback_context)

    agent = _keeper_agent(kept_tool, ScriptedModel([call("remember"), "done"]))
    agent.before_agent_callbacks.append(keep)
    artifacts = InMemoryArtifactService()
    _, sessions, session_id = await _turn(agent, artifacts)

    for ctx in (kept_tool["ctx"], kept_callback[0]):
        with pytest.raises(ConfigError, match="over"):
            ctx.state["late"] = 1
        with pytest.raises(ConfigError, match="over"):
            ctx.state.update({"late": 1})
        with pytest.raises(ConfigError, match="over"):
            await ctx.save_artifact("late.txt", Part.from_text("x"))
        assert ctx.state["inside"] == 1  # reading stays possible
    with pytest.raises(ConfigError):
        kept_tool["ctx"].request_confirmation(hint="too late")
    saved = await artifacts.list_artifact_keys(app_name=APP, user_id=USER, session_id=session_id)
    assert saved == []
    stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None and "late" not in stored.state


@pytest.fixture
async def keeper_server() -> AsyncIterator[tuple[str, dict[str, ToolContext]]]:
    kept: dict[str, ToolContext] = {}

    def remember(tool_context: ToolContext) -> dict[str, Any]:
        """Keep the context."""
        kept["ctx"] = tool_context
        tool_context.state["inside"] = 1
        return {"ok": True}

    server = ToolServer([FunctionTool(remember)], name="keeper")
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}", kept
    await server.stop(None)


async def test_a_served_tool_context_kept_past_its_call_refuses_state_writes(
    keeper_server: tuple[str, dict[str, ToolContext]],
) -> None:
    address, kept = keeper_server
    toolset = RemoteToolset(address)
    try:
        agent = LlmAgent(name="a", model=ScriptedModel([call("remember"), "done"]), tools=[toolset])
        _, sessions, session_id = await _turn(agent)
    finally:
        await toolset.close()
    stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None and stored.state == {"inside": 1}
    with pytest.raises(ConfigError, match="answered"):
        kept["ctx"].state["late"] = 1
