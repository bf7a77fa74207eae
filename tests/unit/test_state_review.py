"""Review of scoped state and tool confirmation: what a tool, a callback or a store is given
that is not JSON is refused where it is written, with an error naming it, and nothing is
half-written."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import Content, Event, FunctionTool, LlmAgent, Runner
from adk_mesh._confirmation import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
from adk_mesh.agents.history import request_contents
from adk_mesh.contexts import ToolContext
from adk_mesh.errors import AdkJSONError, AgentError, InvalidArgumentError
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import SessionService
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.state import State
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.function_tool import REJECTED_CALL_ERROR
from adk_mesh.types import EventActions, LlmResponse, Part

APP, USER = "app", "u"


def confirmation_answer(request_id: str, response: dict[str, Any]) -> Content:
    return Content(
        role="user",
        parts=[
            Part.from_function_response(
                REQUEST_CONFIRMATION_FUNCTION_CALL_NAME, response, id=request_id
            )
        ],
    )


def deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


# --- State: what a tool or callback writes must be JSON, unless it is temp: ----------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({1, 2}, "set"),
        (object(), "object"),
        (math.nan, "Out of range float"),
        ({"nested": math.inf}, "Out of range float"),
        (deep(5_000), "too deep"),
        ("half an emoji \ud83d", "lone surrogate"),
        (["half an emoji \ud83d"], "lone surrogate"),
    ],
)
def test_a_state_write_that_is_not_json_is_refused_naming_the_key(value: Any, problem: str) -> None:
    stored: dict[str, Any] = {"kept": 1}
    delta: dict[str, Any] = {}
    state = State(stored, delta)

    with pytest.raises(AdkJSONError, match=rf"'user:when'.*{problem}"):
        state["user:when"] = value

    assert stored == {"kept": 1}
    assert delta == {}


def test_a_state_key_that_is_not_a_string_is_refused() -> None:
    stored: dict[str, Any] = {}
    delta: dict[str, Any] = {}
    state = State(stored, delta)

    with pytest.raises(AdkJSONError, match="state keys are strings, not int"):
        state[7] = "x"  # type: ignore[index]

    assert stored == {} and delta == {}


def test_temp_keys_may_hold_any_value_and_json_values_are_kept_as_written() -> None:
    stored: dict[str, Any] = {}
    delta: dict[str, Any] = {}
    state = State(stored, delta)
    handle = object()

    state["temp:handle"] = handle
    state["pair"] = (1, 2)  # JSON (a list once stored), as the stores accept it

    assert state["temp:handle"] is handle
    assert delta == {"temp:handle": handle, "pair": (1, 2)}


def keeps_a_set(tool_context: ToolContext) -> dict[str, Any]:
    """Remember things."""
    tool_context.state["seen"] = "yes"
    tool_context.state["tags"] = {"a", "b"}
    return {"ok": True}


async def test_a_tool_writing_a_non_json_state_value_gets_an_error_its_model_reads(
    session_store: SessionService,
) -> None:
    """In process as behind a ToolServer: the model reads the error, the turn goes on and
    the session stays readable (the turn used to fail with an error that named no key)."""
    agent = LlmAgent(
        name="a",
        model=ScriptedModel([call("keeps_a_set", {}, id="c1"), "done"]),
        tools=[FunctionTool(keeps_a_set)],
    )
    session = await session_store.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=session_store)

    events = [
        event
        async for event in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "hi")
        )
    ]

    responses = [response for event in events for response in event.function_responses()]
    assert len(responses) == 1
    assert "'tags'" in responses[0].response["error"]
    assert events[-1].text == "done"
    loaded = await session_store.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert loaded is not None and loaded.state == {"seen": "yes"}


# --- stores: state too deep for JSON is a JSON error, never a RecursionError ----------------


async def test_a_store_refuses_state_too_deep_for_json_and_writes_nothing(
    session_store: SessionService,
) -> None:
    with pytest.raises(AdkJSONError, match="too deep"):
        await session_store.create_session(
            app_name=APP, user_id=USER, session_id="s1", state={"k": deep(5_000)}
        )
    assert await session_store.get_session(app_name=APP, user_id=USER, session_id="s1") is None

    session = await session_store.create_session(app_name=APP, user_id=USER, state={"k": 1})
    with pytest.raises(AdkJSONError, match="too deep"):
        await session_store.append_event(
            session,
            Event(author="a", actions=EventActions(state_delta={"user:k": deep(5_000)})),
        )
    loaded = await session_store.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert loaded is not None and loaded.state == {"k": 1} and loaded.events == []


# --- confirmation: answers given in different turns ------------------------------------------


def pay(to: str, tool_context: ToolContext) -> dict[str, Any]:
    """Pay someone."""
    return {"paid": to}


async def test_a_call_confirmed_in_an_earlier_turn_keeps_its_result_when_its_sibling_is_answered(
    session_store: SessionService,
) -> None:
    """Two calls of one model step wait for confirmation; the first is approved (and runs) in
    one turn, the second rejected in the next: the model then reads the first call's result,
    as google-adk shows it, not "pending" (it would pay again)."""
    requests: list[LlmRequest] = []

    def model(request: LlmRequest) -> LlmResponse | str:
        requests.append(request)
        if len(requests) == 1:
            return LlmResponse(
                content=Content(
                    role="model",
                    parts=[
                        Part.from_function_call("pay", {"to": "ada"}, id="c1"),
                        Part.from_function_call("pay", {"to": "bob"}, id="c2"),
                    ],
                )
            )
        return f"answer {len(requests)}"

    agent = LlmAgent(
        name="teller",
        model=FunctionModel(model),
        tools=[FunctionTool(pay, require_confirmation=True)],
    )
    session = await session_store.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=session_store)

    async def turn(message: Content) -> list[Event]:
        return [
            event
            async for event in runner.run(user_id=USER, session_id=session.id, new_message=message)
        ]

    asked = (await turn(Content.from_text("user", "pay ada and bob")))[-1].function_calls()
    first, second = (call.id for call in asked)
    assert first is not None and second is not None
    await turn(confirmation_answer(first, {"confirmed": True}))
    await turn(confirmation_answer(second, {"confirmed": False}))

    responses = {
        part.function_response.id: part.function_response.response
        for content in requests[-1].contents
        for part in content.parts
        if part.function_response is not None
    }
    assert responses["c1"] == {"paid": "ada"}
    assert responses["c2"] == {"error": REJECTED_CALL_ERROR}
    # The request built from the events appended since the last is the whole rebuild's.
    loaded = await session_store.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert loaded is not None
    rebuilt = request_contents(loaded.events[:-1], agent_name="teller")
    assert [content.model_dump() for content in rebuilt] == [
        content.model_dump() for content in requests[-1].contents
    ]


# --- instruction templates ---------------------------------------------------------------------


async def run_with_instruction(instruction: str, state: dict[str, Any]) -> ScriptedModel:
    model = ScriptedModel(["ok"])
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER, state=state)
    runner = Runner(
        agent=LlmAgent(name="a", model=model, instruction=instruction),
        app_name=APP,
        session_service=sessions,
    )
    async for _ in runner.run(
        user_id=USER, session_id=session.id, new_message=Content.from_text("user", "hi")
    ):
        pass
    return model


async def test_braces_around_a_dotted_name_that_is_no_state_key_stay_as_written() -> None:
    """google-adk reads only identifiers (with a scope prefix) as state keys and leaves other
    braces as they are: an instruction quoting ``{user.name}`` works there; it used to fail
    every turn here, asking for a state key "user.name"."""
    model = await run_with_instruction(
        "Fill {user.name} and {order.id?} in the template for {user:name}; {a2a.last} is set.",
        {"user:name": "Bo", "a2a.last": "done"},
    )

    assert model.requests[0].system_instruction == (
        "Fill {user.name} and {order.id?} in the template for Bo; done is set."
    )


async def test_a_missing_identifier_key_is_still_an_error_naming_it() -> None:
    with pytest.raises(AgentError, match=r"state key \{topic\}, which is not set"):
        await run_with_instruction("About {topic}.", {})


# --- confirmation and scoped state across a restart (SQLite file) ------------------------------


def send(to: str, tool_context: ToolContext) -> dict[str, Any]:
    """Send money."""
    answer = tool_context.tool_confirmation
    tool_context.state["user:last_payee"] = to
    tool_context.state["temp:scratch"] = {"seen": to}
    return {"sent": to, "memo": answer.payload if answer is not None else None}


async def test_a_confirmation_asked_before_a_restart_is_answered_after_it(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"

    def runner_on(sessions: SqliteSessionService) -> Runner:
        agent = LlmAgent(
            name="teller",
            model=ScriptedModel([call("send", {"to": "ada"}, id="c1"), "sent"]),
            tools=[FunctionTool(send, require_confirmation=True)],
        )
        return Runner(agent=agent, app_name=APP, session_service=sessions)

    before = SqliteSessionService(path)
    await before.create_session(app_name=APP, user_id=USER, session_id="s1")
    asked = [
        event
        async for event in runner_on(before).run(
            user_id=USER, session_id="s1", new_message=Content.from_text("user", "pay ada")
        )
    ]
    request_id = asked[-1].function_calls()[0].id
    assert request_id is not None
    await before.close()

    after = SqliteSessionService(path)
    try:
        # The approved call runs first (events[0]); what the restarted model's script does
        # after it does not matter here.
        events = [
            event
            async for event in runner_on(after).run(
                user_id=USER,
                session_id="s1",
                new_message=confirmation_answer(request_id, {"confirmed": True, "payload": "r"}),
            )
        ]
        (response,) = events[0].function_responses()
        assert response.id == "c1" and response.response == {"sent": "ada", "memo": "r"}
        assert "temp:scratch" not in events[0].actions.state_delta
        other = await after.create_session(app_name=APP, user_id=USER)
        assert other.state == {"user:last_payee": "ada"}
        with pytest.raises(InvalidArgumentError, match="answered already"):
            async for _ in runner_on(after).run(
                user_id=USER,
                session_id="s1",
                new_message=confirmation_answer(request_id, {"confirmed": True}),
            ):
                pass
    finally:
        await after.close()
