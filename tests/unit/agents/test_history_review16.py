"""The history an agent's model is sent, reviewed against google-adk's contents building
(``flows/llm_flows/contents.py``): what another agent's message says as context, and the
results of long-running calls a late answer's join must not lose."""

from __future__ import annotations

from typing import Any

from adk_mesh import FunctionTool, LlmAgent, Runner
from adk_mesh.agents.history import RequestHistory, request_contents
from adk_mesh.models._pairing import PENDING_CALL_RESPONSE
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Event, LlmResponse, Part

SESSION = ("app", "u", "s")


def event(author: str, role: str, *parts: Part, **fields: Any) -> Event:
    return Event(
        author=author,
        llm_response=LlmResponse(content=Content(role=role, parts=list(parts))),
        **fields,
    )


def built_both_ways(events: list[Event], agent_name: str) -> list[Content]:
    """The request contents, checked to be the same built whole and incrementally."""
    whole = request_contents(events, agent_name=agent_name)
    history = RequestHistory()
    for end in range(1, len(events) + 1):
        history.contents(SESSION, events[:end], agent_name=agent_name)
    assert history.contents(SESSION, events, agent_name=agent_name) == whole
    return whole


# --- another agent's message that says nothing --------------------------------------------


def test_another_agents_event_with_nothing_to_say_is_not_a_bare_for_context() -> None:
    # Reasoning alone, blank text, a signature alone: nothing of it is told to this agent
    # (google-adk leaves such an event out: "Return None when only 'For context:' remains"),
    # rather than a user message reading "For context:" and nothing else.
    events = [
        event("user", "user", Part(text="plan a trip")),
        event("planner", "model", Part(text="weighing options", thought=True)),
        event("planner", "model", Part(text=" \n")),
        event("planner", "model", Part(text="", thought_signature=b"sig")),
        event("planner", "model", Part(text="Lisbon, 3 days.")),
    ]
    contents = built_both_ways(events, "writer")
    assert [[part.text for part in content.parts] for content in contents] == [
        ["plan a trip"],
        ["For context:", "[planner] said: Lisbon, 3 days."],
    ]


# --- a long-running call's result dropped by a later call's join ----------------------------


def test_a_result_between_a_late_call_and_its_answer_is_not_read_as_pending() -> None:
    # Job one is started, then job two; job one's result arrives, then job two's. The join
    # that puts job two's call right before its answer drops what came between: job one's
    # result must not go with it (the model would read job one as still waiting).
    events = [
        event("user", "user", Part(text="start job one")),
        event(
            "me",
            "model",
            Part.from_function_call("job", {"n": 1}, id="L1"),
            long_running_tool_ids=["L1"],
        ),
        event("user", "user", Part(text="and job two")),
        event(
            "me",
            "model",
            Part.from_function_call("job", {"n": 2}, id="L2"),
            long_running_tool_ids=["L2"],
        ),
        event("user", "user", Part.from_function_response("job", {"done": 1}, id="L1")),
        event("me", "model", Part(text="Job one is done.")),
        event("user", "user", Part.from_function_response("job", {"done": 2}, id="L2")),
    ]
    contents = built_both_ways(events, "me")
    responses = {
        response.id: response.response
        for content in contents
        for response in content.function_responses
    }
    assert responses == {"L1": {"done": 1}, "L2": {"done": 2}}
    # Each call is still answered right after it, job two's last.
    assert [c.function_calls[0].id for c in contents if c.function_calls] == ["L1", "L2"]
    assert [r.id for r in contents[-1].function_responses] == ["L2"]


async def test_two_long_running_jobs_answered_in_turns_through_the_runner() -> None:
    def job(n: int) -> None:
        """Starts job n; its result comes later."""
        return None

    model = ScriptedModel(
        [
            call("job", {"n": 1}, id="L1"),
            call("job", {"n": 2}, id="L2"),
            "Job one is done.",
            "Both are done.",
        ]
    )
    agent = LlmAgent(name="me", model=model, tools=[FunctionTool(job, is_long_running=True)])
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    messages = [
        Content.from_text("user", "start job one"),
        Content.from_text("user", "and job two"),
        Content(role="user", parts=[Part.from_function_response("job", {"done": 1}, id="L1")]),
        Content(role="user", parts=[Part.from_function_response("job", {"done": 2}, id="L2")]),
    ]
    for message in messages:
        async for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
            pass
    model.assert_consumed()
    last = model.requests[-1].contents
    responses = {r.id: r.response for content in last for r in content.function_responses}
    assert responses["L1"] == {"done": 1}
    assert responses["L1"] != PENDING_CALL_RESPONSE
    assert responses["L2"] == {"done": 2}
