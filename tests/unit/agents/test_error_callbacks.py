"""on_model_error_callback and on_tool_error_callback: a replacement answers in the error's
place; None lets the error go on as without the callback; sync and async alike."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh import CallbackContext, Content, LlmAgent, Runner, ToolContext
from adk_mesh.errors import ModelError, ToolError
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call, text
from adk_mesh.tools.base import BaseTool
from adk_mesh.types import Event, LlmResponse


async def run_turn(agent: LlmAgent) -> list[Event]:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    return [
        event
        async for event in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", "hi")
        )
    ]


def failing_model() -> FunctionModel:
    def fail(request: LlmRequest) -> LlmResponse:
        raise ModelError("the provider is down", status_code=503)

    return FunctionModel(fail)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_model_error_callback_answers_in_place_of_the_failed_call(
    asynchronous: bool,
) -> None:
    seen: list[tuple[str, str, str]] = []

    def fallback(
        callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse:
        seen.append((callback_context.agent_name, type(error).__name__, str(llm_request.model)))
        callback_context.state["fell_back"] = True
        return text("Sorry, try again later.")

    async def async_fallback(
        callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse:
        return fallback(callback_context, llm_request, error)

    agent = LlmAgent(
        name="a",
        model=failing_model(),
        on_model_error_callback=async_fallback if asynchronous else fallback,
    )

    (event,) = await run_turn(agent)

    assert event.text == "Sorry, try again later."
    assert event.actions.state_delta == {"fell_back": True}
    assert seen == [("a", "ModelError", "function")]


async def test_a_model_error_callback_returning_none_lets_the_error_go_on() -> None:
    calls: list[Exception] = []

    def observe(_: CallbackContext, __: LlmRequest, error: Exception) -> None:
        calls.append(error)

    agent = LlmAgent(name="a", model=failing_model(), on_model_error_callback=[observe, observe])

    with pytest.raises(ModelError, match="the provider is down"):
        await run_turn(agent)
    assert len(calls) == 2  # each callback in order, as none answered


def exploding(city: str) -> dict[str, Any]:
    """Look a city up."""
    raise RuntimeError(f"no route to {city}")


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_tool_error_callback_answers_in_place_of_the_failed_call(
    asynchronous: bool,
) -> None:
    seen: list[tuple[str, dict[str, Any], str | None, str]] = []

    def recover(
        tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any]:
        seen.append((tool.name, args, tool_context.function_call_id, str(error)))
        return {"cached": True, "city": args["city"]}

    async def async_recover(
        tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any]:
        return recover(tool, args, tool_context, error)

    model = ScriptedModel([call("exploding", {"city": "Oslo"}, id="c1"), "done"])
    agent = LlmAgent(
        name="a",
        model=model,
        tools=[exploding],
        on_tool_error_callback=async_recover if asynchronous else recover,
    )

    events = await run_turn(agent)

    (response,) = events[1].function_responses()
    assert response.response == {"cached": True, "city": "Oslo"}
    ((name, args, call_id, message),) = seen
    assert (name, args, call_id) == ("exploding", {"city": "Oslo"}, "c1")
    assert "RuntimeError: no route to Oslo" in message


async def test_a_tool_error_callback_returning_none_leaves_the_error_response() -> None:
    errors: list[Exception] = []

    def observe(_: BaseTool, __: dict[str, Any], ___: ToolContext, error: Exception) -> None:
        errors.append(error)

    model = ScriptedModel([call("exploding", {"city": "Oslo"}), "done"])
    agent = LlmAgent(name="a", model=model, tools=[exploding], on_tool_error_callback=observe)

    events = await run_turn(agent)

    (response,) = events[1].function_responses()
    assert "RuntimeError: no route to Oslo" in response.response["error"]
    assert isinstance(errors[0], ToolError)


async def test_a_tool_error_callback_is_not_called_when_the_tool_succeeds() -> None:
    def fine(city: str) -> dict[str, Any]:
        """Look a city up."""
        return {"ok": city}

    def never(*_: Any) -> dict[str, Any]:
        raise AssertionError("called")

    model = ScriptedModel([call("fine", {"city": "Oslo"}), "done"])
    events = await run_turn(
        LlmAgent(name="a", model=model, tools=[fine], on_tool_error_callback=never)
    )

    assert events[1].function_responses()[0].response == {"ok": "Oslo"}


async def test_a_call_of_a_tool_the_agent_lacks_reaches_the_tool_error_callback() -> None:
    # As google-adk: the tool-error hooks see a stand-in tool of the name the model used and a
    # ToolError naming the tools there are; what they return answers the call.
    seen: list[tuple[str, str, str]] = []

    def on_tool_error(
        tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any]:
        seen.append((tool.name, type(error).__name__, str(error)))
        return {"hint": "use lookup"}

    def lookup(city: str) -> dict[str, Any]:
        """Look a city up."""
        return {"city": city}

    agent = LlmAgent(
        name="a",
        model=ScriptedModel([call("look_up", {"city": "Oslo"}), "done"]),
        tools=[lookup],
        on_tool_error_callback=on_tool_error,
    )
    events = await run_turn(agent)
    (response,) = [r for e in events for r in e.function_responses()]
    assert response.response == {"hint": "use lookup"}
    assert seen == [
        (
            "look_up",
            "ToolError",
            "Tool 'look_up' is not available to this agent. Available tools: lookup.",
        )
    ]


async def test_a_before_tool_callback_may_answer_a_call_of_a_tool_the_agent_lacks() -> None:
    def answer(
        tool: BaseTool, args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        return {"answered_by": "callback"} if tool.name == "ghost" else None

    agent = LlmAgent(
        name="a",
        model=ScriptedModel([call("ghost", {}), call("other", {}), "done"]),
        before_tool_callback=answer,
    )
    events = await run_turn(agent)
    first, second = [r.response for e in events for r in e.function_responses()]
    assert first == {"answered_by": "callback"}
    # Unanswered, the model reads the error as before.
    assert second == {
        "error": "Tool 'other' is not available to this agent. Available tools: none."
    }
