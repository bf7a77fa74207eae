"""Tool confirmation (human in the loop) in process: the request event in google-adk's shape,
the invocation that ends there, an approval that runs the call with the answer's payload, a
rejection the model reads, and answers the Runner refuses before it stores anything."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh import Content, Event, FunctionTool, InvalidArgumentError, LlmAgent, Runner
from adk_mesh._confirmation import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
from adk_mesh.contexts import ToolContext
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.function_tool import REJECTED_CALL_ERROR
from adk_mesh.types import LlmResponse, Part

APP, USER = "app", "u"


def transfer_money(amount: int, to: str, tool_context: ToolContext) -> dict[str, Any]:
    """Send money."""
    confirmation = tool_context.tool_confirmation
    note = confirmation.payload if confirmation is not None else None
    return {"sent": amount, "to": to, "note": note}


async def play(runner: Runner, session_id: str, message: Content) -> list[Event]:
    return [
        event
        async for event in runner.run(user_id=USER, session_id=session_id, new_message=message)
    ]


def answer(request_id: str, response: dict[str, Any]) -> Content:
    return Content(
        role="user",
        parts=[
            Part.from_function_response(
                REQUEST_CONFIRMATION_FUNCTION_CALL_NAME, response, id=request_id
            )
        ],
    )


async def setup(
    require: Any = True, model: Any = None
) -> tuple[Runner, InMemorySessionService, str, ScriptedModel | Any]:
    model = model or ScriptedModel(
        [call("transfer_money", {"amount": 500, "to": "bob"}, id="c1"), "sent it"]
    )
    agent = LlmAgent(
        name="bank",
        model=model,
        tools=[FunctionTool(transfer_money, require_confirmation=require)],
    )
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER)
    return Runner(agent=agent, app_name=APP, session_service=sessions), sessions, session.id, model


async def test_a_call_that_requires_confirmation_pauses_with_google_adks_request() -> None:
    runner, sessions, session_id, model = await setup()
    events = await play(runner, session_id, Content.from_text("user", "send bob 500"))
    assert [e.author for e in events] == ["bank", "bank"]
    request = events[-1]
    (asked,) = request.function_calls()
    assert asked.name == "adk_request_confirmation"
    assert asked.args == {
        "originalFunctionCall": {
            "id": "c1",
            "name": "transfer_money",
            "args": {"amount": 500, "to": "bob"},
        },
        "toolConfirmation": {
            "hint": "Approve or reject the call to transfer_money.",
            "confirmed": False,
        },
    }
    assert request.long_running_tool_ids == [asked.id]
    assert list(request.actions.requested_tool_confirmations) == ["c1"]
    # The original call has no response yet, and the model was called once.
    assert not any(e.function_responses() for e in events)
    assert len(model.requests) == 1
    stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None and [e.id for e in stored.events[1:]] == [e.id for e in events]


async def test_an_approval_runs_the_call_with_its_payload_and_the_model_never_sees_the_ask() -> (
    None
):
    runner, _, session_id, model = await setup()
    first = await play(runner, session_id, Content.from_text("user", "send bob 500"))
    request_id = first[-1].function_calls()[0].id
    assert request_id is not None
    events = await play(
        runner, session_id, answer(request_id, {"confirmed": True, "payload": "rent"})
    )
    (response,) = events[0].function_responses()
    assert (response.id, response.response) == ("c1", {"sent": 500, "to": "bob", "note": "rent"})
    assert events[-1].text == "sent it"
    # The model's second request: its call, answered, and nothing of the confirmation.
    contents = model.requests[1].contents
    names = [
        (part.function_call or part.function_response).name  # type: ignore[union-attr]
        for content in contents
        for part in content.parts
        if part.function_call or part.function_response
    ]
    assert names == ["transfer_money", "transfer_money"]


async def test_google_adks_wrapped_answer_is_read_too() -> None:
    runner, _, session_id, _ = await setup()
    first = await play(runner, session_id, Content.from_text("user", "send bob 500"))
    request_id = first[-1].function_calls()[0].id
    assert request_id is not None
    events = await play(runner, session_id, answer(request_id, {"response": '{"confirmed": true}'}))
    assert events[0].function_responses()[0].response["sent"] == 500


async def test_a_rejection_gives_the_model_an_error_it_reads() -> None:
    runner, _, session_id, model = await setup()
    first = await play(runner, session_id, Content.from_text("user", "send bob 500"))
    request_id = first[-1].function_calls()[0].id
    assert request_id is not None
    events = await play(runner, session_id, answer(request_id, {"confirmed": False}))
    assert events[0].function_responses()[0].response == {"error": REJECTED_CALL_ERROR}
    assert model.requests[1].contents[-1].parts[0].function_response is not None


async def test_a_predicate_asks_only_for_the_calls_it_names() -> None:
    model = ScriptedModel(
        [
            call("transfer_money", {"amount": 5, "to": "bob"}, id="small"),
            "small sent",
            call("transfer_money", {"amount": 5000, "to": "bob"}, id="big"),
            "never",
        ]
    )
    runner, _, session_id, _ = await setup(require=lambda amount: amount > 100, model=model)
    small = await play(runner, session_id, Content.from_text("user", "send 5"))
    assert small[-1].text == "small sent"
    big = await play(runner, session_id, Content.from_text("user", "send 5000"))
    assert big[-1].function_calls()[0].name == "adk_request_confirmation"


async def test_a_tool_may_ask_itself_and_reads_the_answer() -> None:
    def delete_files(pattern: str, tool_context: ToolContext) -> dict[str, Any]:
        """Delete files."""
        answer = tool_context.tool_confirmation
        if answer is None:
            tool_context.request_confirmation(
                hint=f"Delete {pattern}?", payload={"keep_backup": True}
            )
            return {"status": "asked"}
        return {"deleted": pattern, "backup": answer.payload["keep_backup"]}

    agent = LlmAgent(
        name="ops",
        model=ScriptedModel([call("delete_files", {"pattern": "*.tmp"}), "deleted"]),
        tools=[delete_files],
    )
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=sessions)
    first = await play(runner, session.id, Content.from_text("user", "clean up"))
    asked = first[-1].function_calls()[0]
    assert asked.args["toolConfirmation"] == {
        "hint": "Delete *.tmp?",
        "confirmed": False,
        "payload": {"keep_backup": True},
    }
    assert asked.id is not None
    events = await play(
        runner, session.id, answer(asked.id, {"confirmed": True, "payload": {"keep_backup": False}})
    )
    assert events[0].function_responses()[0].response == {"deleted": "*.tmp", "backup": False}


async def test_a_text_message_instead_of_an_answer_leaves_the_call_pending() -> None:
    seen: list[LlmRequest] = []

    def answer_model(request: LlmRequest) -> LlmResponse | str:
        seen.append(request)
        if len(seen) == 1:
            return call("transfer_money", {"amount": 500, "to": "bob"}, id="c1")
        return "ok, waiting"

    runner, _, session_id, _ = await setup(model=FunctionModel(answer_model))
    await play(runner, session_id, Content.from_text("user", "send bob 500"))
    events = await play(runner, session_id, Content.from_text("user", "what now?"))
    assert events[-1].text == "ok, waiting"
    pending = [
        part.function_response.response
        for content in seen[1].contents
        for part in content.parts
        if part.function_response is not None
    ]
    assert pending and pending[0]["status"] == "pending"


@pytest.mark.parametrize(
    ("response", "problem"),
    [
        ({"confirmed": "yes"}, "true or false"),
        ({"confirmed": True, "extra": 1}, "not extra"),
        ({"response": "not json"}, "not JSON"),
    ],
)
async def test_a_malformed_answer_is_refused_before_anything_is_stored(
    response: dict[str, Any], problem: str
) -> None:
    runner, sessions, session_id, _ = await setup()
    first = await play(runner, session_id, Content.from_text("user", "send bob 500"))
    request_id = first[-1].function_calls()[0].id
    assert request_id is not None
    before = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert before is not None
    with pytest.raises(InvalidArgumentError, match=problem):
        await play(runner, session_id, answer(request_id, response))
    after = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert after is not None and len(after.events) == len(before.events)


async def test_an_answer_to_no_request_and_a_second_answer_are_refused() -> None:
    runner, _, session_id, _ = await setup()
    with pytest.raises(InvalidArgumentError, match="no confirmation request"):
        await play(runner, session_id, answer("adk-nothing", {"confirmed": True}))
    first = await play(runner, session_id, Content.from_text("user", "send bob 500"))
    request_id = first[-1].function_calls()[0].id
    assert request_id is not None
    await play(runner, session_id, answer(request_id, {"confirmed": True}))
    with pytest.raises(InvalidArgumentError, match="answered already"):
        await play(runner, session_id, answer(request_id, {"confirmed": True}))
