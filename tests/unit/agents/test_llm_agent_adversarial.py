"""LlmAgent options at their edges, against google-adk's behaviour: instruction templates
(doubled braces, spaces, text that only looks like a placeholder), output_key with streamed
and reasoning parts, output_schema with a callback's answer, include_contents="none" with
this turn's tool calls, and a transfer the agent may not make."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from adk_mesh import AgentError, Content, LlmAgent, Runner
from adk_mesh.contexts import CallbackContext, RunConfig, StreamingMode
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Event, LlmResponse, Part


async def run_turn(
    agent: LlmAgent,
    message: str = "hi",
    *,
    state: dict[str, Any] | None = None,
    streaming: bool = False,
    service: InMemorySessionService | None = None,
    session_id: str | None = None,
) -> tuple[list[Event], Session]:
    service = service or InMemorySessionService()
    if session_id is None:
        created = await service.create_session(app_name="app", user_id="u", state=state)
        session_id = created.id
    runner = Runner(agent=agent, app_name="app", session_service=service)
    run_config = RunConfig(streaming_mode=StreamingMode.SSE if streaming else StreamingMode.NONE)
    events = [
        event
        async for event in runner.run(
            user_id="u",
            session_id=session_id,
            new_message=Content.from_text("user", message),
            run_config=run_config,
        )
    ]
    session = await service.get_session(app_name="app", user_id="u", session_id=session_id)
    assert session is not None
    return events, session


async def rendered(instruction: str, state: dict[str, Any]) -> str | None:
    model = ScriptedModel(["ok"])
    await run_turn(LlmAgent(name="a", model=model, instruction=instruction), state=state)
    return model.requests[0].system_instruction


@pytest.mark.parametrize(
    ("instruction", "expected"),
    [
        ("Hello {{name}}.", "Hello Ana."),
        ("Hello { name }.", "Hello Ana."),
        ("Hello {{ name? }}.", "Hello Ana."),
        ("Hello {{nickname?}}.", "Hello ."),
    ],
)
async def test_doubled_braces_and_spaces_hold_a_placeholder_as_in_google_adk(
    instruction: str, expected: str
) -> None:
    # google-adk matches ``{+[^{}]*}+`` and strips the braces and spaces from the name.
    assert await rendered(instruction, {"name": "Ana"}) == expected


async def test_a_missing_key_between_doubled_braces_is_still_an_error() -> None:
    agent = LlmAgent(name="a", model=ScriptedModel([]), instruction="Hi {{ nickname }}")
    with pytest.raises(AgentError, match="nickname"):
        await run_turn(agent)


async def test_text_that_only_looks_like_a_placeholder_stays_and_values_are_their_str() -> None:
    instruction = (
        'Reply as {"a": 1}. Keep {1abc}, {bad:k}, {x-y}, {name ?} and {{ as written. '
        "Values: {d} {n} {f} {user:tier}."
    )
    state = {"d": {"x": 1}, "n": 0, "f": False, "user:tier": "gold", "name": "Ana"}
    assert await rendered(instruction, state) == (
        'Reply as {"a": 1}. Keep {1abc}, {bad:k}, {x-y}, {name ?} and {{ as written. '
        "Values: {'x': 1} 0 False gold."
    )


async def test_output_key_saves_only_the_final_answer_without_its_reasoning() -> None:
    answer = LlmResponse(
        content=Content(
            role="model", parts=[Part(text="Let me think.", thought=True), Part(text="Lisbon")]
        ),
        turn_complete=True,
    )
    for streaming in (False, True):
        model = ScriptedModel([answer])
        events, session = await run_turn(
            LlmAgent(name="a", model=model, output_key="city"), streaming=streaming
        )
        assert session.state["city"] == "Lisbon"
        assert all(not e.actions.state_delta for e in events if e.partial)


class Forecast(BaseModel):
    city: str
    temp_c: int


async def test_a_before_model_answer_is_checked_and_saved_like_the_models() -> None:
    def before(context: CallbackContext, request: LlmRequest) -> LlmResponse:
        return LlmResponse(content=Content(role="model", parts=[Part(text='{"city": "Oslo"}')]))

    model = ScriptedModel([])
    agent = LlmAgent(
        name="a",
        model=model,
        output_schema=Forecast,
        output_key="forecast",
        before_model_callback=before,
    )
    events, session = await run_turn(agent, streaming=True)
    assert [e.partial for e in events] == [False]
    assert events[0].llm_response.error_code == "OUTPUT_SCHEMA_MISMATCH"
    assert "temp_c" in (events[0].llm_response.error_message or "")
    assert "forecast" not in session.state
    assert not model.requests


async def test_output_schema_with_a_tool_checks_only_the_final_answer() -> None:
    def lookup(city: str) -> dict[str, Any]:
        """Looks a city's temperature up."""
        return {"temp_c": 12}

    model = ScriptedModel([call("lookup", {"city": "Oslo"}), '{"city": "Oslo", "temp_c": "12"}'])
    agent = LlmAgent(
        name="a", model=model, tools=[lookup], output_schema=Forecast, output_key="forecast"
    )
    events, session = await run_turn(agent)
    assert [e.llm_response.error_code for e in events] == [None, None, None]
    assert session.state["forecast"] == {"city": "Oslo", "temp_c": 12}
    assert model.requests[0].tools  # the tool is declared beside the schema


async def test_include_contents_none_keeps_this_turns_message_and_tool_exchange() -> None:
    def lookup(city: str) -> dict[str, Any]:
        """Looks a city up."""
        return {"country": "Norway"}

    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    model = ScriptedModel(["first", call("lookup", {"city": "Oslo"}), "Norway."])
    agent = LlmAgent(name="a", model=model, tools=[lookup], include_contents="none")
    await run_turn(agent, "one", service=service, session_id=session.id)
    await run_turn(agent, "two", service=service, session_id=session.id)
    last = model.requests[2].contents
    assert [c.role for c in last] == ["user", "model", "tool"]
    assert last[0].text == "two"
    assert [f.name for f in last[1].function_calls] == ["lookup"]
    assert [f.name for f in last[2].function_responses] == ["lookup"]


async def test_a_transfer_to_a_disallowed_parent_is_refused_and_the_agent_goes_on() -> None:
    child_model = ScriptedModel([call("transfer_to_agent", {"agent_name": "root"}), "I stay."])
    child = LlmAgent(
        name="child",
        model=child_model,
        disallow_transfer_to_parent=True,
        disallow_transfer_to_peers=True,
    )
    root_model = ScriptedModel([call("transfer_to_agent", {"agent_name": "child"})])
    root = LlmAgent(name="root", model=root_model, sub_agents=[child])
    events, _ = await run_turn(root)
    assert not child_model.requests[0].tools  # nothing to transfer to: no transfer tool
    refused = events[-2].function_responses()
    assert refused and "error" in (refused[0].response or {})
    assert not events[-2].actions.transfer_to_agent
    assert (events[-1].author, events[-1].text) == ("child", "I stay.")
