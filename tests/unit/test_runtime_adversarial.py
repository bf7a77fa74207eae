"""The in-process runtime under adversarial turns: tools answering with something other than
an object, a turn that fails after a confirmation request, nested loops, temp state across
turns on SQLite, and max_llm_calls reached by parallel branches.

Real Runner, real session stores (in memory, SQLite in tmp_path), scripted models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adk_mesh import Content, FunctionTool, LlmAgent, Part, Runner, ToolContext
from adk_mesh._confirmation import REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.workflow import LoopAgent, ParallelAgent, SequentialAgent
from adk_mesh.contexts import RunConfig
from adk_mesh.errors import LlmCallLimitError, ModelError
from adk_mesh.runner import INTERRUPTED_CALL_ERROR
from adk_mesh.sessions.base import Session, SessionService
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.base import BaseTool
from adk_mesh.tools.builtin import ExitLoopTool
from adk_mesh.types import Event, LlmResponse

APP, USER = "app", "u"


async def play(
    root: BaseAgent,
    message: Content | str = "hi",
    *,
    service: SessionService | None = None,
    session_id: str | None = None,
    run_config: RunConfig | None = None,
) -> tuple[list[Event], str, SessionService]:
    service = service or InMemorySessionService()
    if session_id is None:
        session_id = (await service.create_session(app_name=APP, user_id=USER)).id
    if isinstance(message, str):
        message = Content.from_text("user", message)
    runner = Runner(agent=root, app_name=APP, session_service=service)
    events = [
        event
        async for event in runner.run(
            user_id=USER, session_id=session_id, new_message=message, run_config=run_config
        )
    ]
    return events, session_id, service


async def stored(service: SessionService, session_id: str) -> Session:
    session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    return session


def unanswered_calls(session: Session) -> set[str | None]:
    calls = {c.id for e in session.events for c in e.function_calls()}
    answered = {r.id for e in session.events for r in e.function_responses()}
    long_running = {i for e in session.events for i in e.long_running_tool_ids}
    return calls - answered - long_running


# --- a tool that answers with something other than an object --------------------------------


class _Returns(BaseTool):
    """A tool of a user's own whose execute returns ``value`` as it is."""

    sends_events = False

    def __init__(self, name: str, value: Any) -> None:
        super().__init__(name, "Returns a value.")
        self.value = value

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> Any:
        return self.value


@pytest.mark.parametrize("value", ["plain text", [1, 2], 42, True])
async def test_a_tool_answering_with_a_non_object_answers_result_as_google_adk(
    value: Any,
) -> None:
    # google-adk wraps a tool's non-dict result as {"result": value}; a FunctionResponse
    # holds an object, so without it the turn crashed on a validation error (and the call
    # was marked interrupted).
    model = ScriptedModel([call("odd", id="c1"), "done"])
    agent = LlmAgent(name="a", model=model, tools=[_Returns("odd", value)])

    events, session_id, service = await play(agent)

    model.assert_consumed()
    response = events[1].function_responses()[0]
    assert (response.id, response.response) == ("c1", {"result": value})
    assert events[-1].text == "done"
    assert model.requests[1].contents[-1].function_responses[0].response == {"result": value}
    session = await stored(service, session_id)
    assert not any(e.llm_response.interrupted for e in session.events)


# --- a confirmation request, then the turn fails --------------------------------------------


async def test_a_call_waiting_for_confirmation_outlives_a_later_failure_of_the_turn() -> None:
    # The call waits for a person, as a long-running call waits for the client: a failure
    # later in the turn (here the next step of the sequence) must not answer it as
    # interrupted, or the person's approval would be accepted and then silently dropped.
    ran: list[int] = []

    def pay(amount: int) -> dict[str, int]:
        """Pay."""
        ran.append(amount)
        return {"paid": amount}

    payer_model = ScriptedModel([call("pay", {"amount": 5}, id="c1"), "paid"])
    payer = LlmAgent(
        name="payer", model=payer_model, tools=[FunctionTool(pay, require_confirmation=True)]
    )
    broken = LlmAgent(name="broken", model=ScriptedModel([]))  # its model call fails
    root = SequentialAgent(name="root", sub_agents=[payer, broken])
    service = InMemorySessionService()
    session_id = (await service.create_session(app_name=APP, user_id=USER)).id

    with pytest.raises(ModelError):
        await play(root, service=service, session_id=session_id)

    session = await stored(service, session_id)
    assert not any(r.id == "c1" for e in session.events for r in e.function_responses())
    request = next(
        c
        for e in session.events
        for c in e.function_calls()
        if c.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
    )
    approval = Content(
        role="user",
        parts=[
            Part.from_function_response(
                REQUEST_CONFIRMATION_FUNCTION_CALL_NAME, {"confirmed": True}, id=request.id
            )
        ],
    )
    events, _, _ = await play(root, approval, service=service, session_id=session_id)

    assert ran == [5]
    assert [r.response for e in events for r in e.function_responses()] == [{"paid": 5}]
    assert events[-1].text == "paid"
    payer_model.assert_consumed()


# --- escalation and nested loops ------------------------------------------------------------


async def test_an_escalation_ends_its_loop_after_the_step_and_every_enclosing_loop() -> None:
    # As google-adk's LoopAgent: the escalating step finishes (the sequence it is in runs its
    # later agents), the loop's later steps do not run, and an enclosing loop, which sees the
    # escalating event go by, ends too.
    worker_model = ScriptedModel([call("exit_loop")])
    worker = LlmAgent(name="worker", model=worker_model, tools=[ExitLoopTool()])
    same_step = LlmAgent(name="same_step", model=ScriptedModel(["same step"]))
    later_step = LlmAgent(name="later_step", model=ScriptedModel([]))  # never runs
    inner = LoopAgent(
        name="inner",
        sub_agents=[SequentialAgent(name="step", sub_agents=[worker, same_step]), later_step],
        max_iterations=3,
    )
    after_inner = LlmAgent(name="after_inner", model=ScriptedModel([]))  # never runs
    outer = LoopAgent(name="outer", sub_agents=[inner, after_inner], max_iterations=2)

    events, _, _ = await play(outer)

    worker_model.assert_consumed()
    assert [(e.author, bool(e.actions.escalate)) for e in events] == [
        ("worker", False),
        ("worker", True),
        ("same_step", False),
    ]


async def test_exit_loop_in_a_parallel_branch_lets_the_sibling_finish_then_ends_the_loop() -> None:
    exiting = LlmAgent(
        name="exiting", model=ScriptedModel([call("exit_loop")]), tools=[ExitLoopTool()]
    )
    sibling_model = ScriptedModel(["sibling done"])
    sibling = LlmAgent(name="sibling", model=sibling_model)
    loop = LoopAgent(
        name="loop",
        sub_agents=[ParallelAgent(name="fan", sub_agents=[exiting, sibling])],
        max_iterations=5,
    )

    events, _, _ = await play(loop)

    sibling_model.assert_consumed()  # one round only: a second would have failed
    assert {e.branch for e in events} == {"fan.exiting", "fan.sibling"}
    assert sum(bool(e.actions.escalate) for e in events) == 1


# --- state scopes across turns, on SQLite ---------------------------------------------------


async def test_temp_state_is_seen_within_its_turn_only_and_scoped_keys_persist(
    tmp_path: Path,
) -> None:
    seen: list[dict[str, Any]] = []

    def write(tool_context: ToolContext) -> dict[str, Any]:
        """Write a key of every scope."""
        seen.append(dict(tool_context.state.to_dict()))
        state = tool_context.state
        state["temp:scratch"] = state.get("temp:scratch", 0) + 1
        state["user:count"] = state.get("user:count", 0) + 1
        state["app:count"] = state.get("app:count", 0) + 1
        state["count"] = state.get("count", 0) + 1
        return {}

    def read(tool_context: ToolContext) -> dict[str, Any]:
        """Read the state."""
        seen.append(dict(tool_context.state.to_dict()))
        return {}

    writer = LlmAgent(name="writer", model=ScriptedModel([call("write"), "w"] * 2), tools=[write])
    reader = LlmAgent(name="reader", model=ScriptedModel([call("read"), "r"] * 2), tools=[read])
    root = SequentialAgent(name="root", sub_agents=[writer, reader])
    service = SqliteSessionService(tmp_path / "sessions.db")
    session_id = (await service.create_session(app_name=APP, user_id=USER)).id

    await play(root, service=service, session_id=session_id)
    await play(root, service=service, session_id=session_id)

    scoped = {"user:count": 1, "app:count": 1, "count": 1}
    assert seen == [
        {},
        {"temp:scratch": 1, **scoped},  # the next step of the turn sees temp: too
        scoped,  # the next turn does not
        {"temp:scratch": 1, "user:count": 2, "app:count": 2, "count": 2},
    ]
    other = (await service.create_session(app_name=APP, user_id=USER)).id
    assert (await stored(service, other)).state == {"user:count": 2, "app:count": 2}
    session = await stored(service, session_id)
    assert session.state == {"user:count": 2, "app:count": 2, "count": 2}
    assert not any(k.startswith("temp:") for e in session.events for k in e.actions.state_delta)


# --- max_llm_calls reached by parallel branches ---------------------------------------------


async def test_max_llm_calls_reached_by_parallel_branches_leaves_no_call_open() -> None:
    models: list[FunctionModel] = []

    def looping(name: str) -> LlmAgent:
        def respond(request: Any) -> LlmResponse:
            return call("ping")

        model = FunctionModel(respond)
        models.append(model)
        return LlmAgent(name=name, model=model, tools=[FunctionTool(lambda: "pong", name="ping")])

    root = ParallelAgent(name="fan", sub_agents=[looping("a"), looping("b")])
    service = InMemorySessionService()
    session_id = (await service.create_session(app_name=APP, user_id=USER)).id

    with pytest.raises(LlmCallLimitError, match="max_llm_calls=3"):
        await play(
            root, service=service, session_id=session_id, run_config=RunConfig(max_llm_calls=3)
        )

    assert sum(len(model.requests) for model in models) == 3
    session = await stored(service, session_id)
    assert unanswered_calls(session) == set()
    for event in session.events:
        for response in event.function_responses():
            if response.response == {"error": INTERRUPTED_CALL_ERROR}:
                assert event.llm_response.interrupted
                assert event.llm_response.error_code
