"""What a long-running tool's own return value means, pinned against google-adk 2.13.

google-adk (``flows/llm_flows/tools/_caller.py``) skips the function response of a
long-running tool whose result is falsy (``not function_response``: ``None``, ``{}``, ``""``,
``0``, ``[]``, ``False``): the call stays open for the client to answer in a later turn, and
the model is not called again in that turn. A truthy result answers the call at once (a dict
as it is, any other value as ``{"result": value}``) and the model reads it.

One deliberate difference: the state a tool wrote while leaving its call open is kept (in an
event with no content); google-adk drops it with the response it does not build.

Each case is played through the Runner with the agent in process and behind a RemoteAgent on
a real AgentServer, which must give the same events.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import pytest

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.base import BaseTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, Part

APP = "app"
USER = "u"
CALL_ID = "job-1"
FINAL = {"status": "finished"}

NO_ANSWER_YET: list[Any] = [None, {}, "", 0, [], False]
ANSWERS: list[tuple[Any, dict[str, Any]]] = [
    ({"ticket": "T-1"}, {"ticket": "T-1"}),
    ("T-1", {"result": "T-1"}),
    (7, {"result": 7}),
]

IN_PROCESS = "in_process"
REMOTE = "remote"


def _function_tool(value: Any) -> BaseTool:
    def start_job(tool_context: ToolContext) -> Any:
        """Start a job; its result comes later, from the client."""
        tool_context.state["started"] = True
        return value

    return FunctionTool(start_job, is_long_running=True)


class _StartJob(BaseTool):
    """A long-running tool that is not a FunctionTool, returning ``value`` as it is."""

    sends_events = False

    def __init__(self, value: dict[str, Any] | None) -> None:
        super().__init__("start_job", "Start a job.", is_long_running=True)
        self.value = value

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
        ctx.state["started"] = True
        return self.value


def _content(content: Content | None) -> list[Any] | None:
    """A content as (role, kind, ...) tuples, one a part."""
    if content is None:
        return None
    shown: list[Any] = []
    for part in content.parts:
        if part.function_call is not None:
            found = part.function_call
            shown.append((content.role, "call", found.id, found.name, found.args))
        elif part.function_response is not None:
            answer = part.function_response
            shown.append((content.role, "response", answer.id, answer.name, answer.response))
        else:
            shown.append((content.role, "text", part.text))
    return shown


def _event(event: Event) -> dict[str, Any]:
    """An event without what differs from run to run (ids, timestamps)."""
    return {
        "author": event.author,
        "content": _content(event.content),
        "long_running_tool_ids": sorted(event.long_running_tool_ids or []),
        "state_delta": dict(event.actions.state_delta),
    }


async def _play(tool: BaseTool, where: str) -> dict[str, Any]:
    """Turn 1 (the model calls the tool), then turn 2 (the client answers the call)."""
    model = ScriptedModel([call("start_job", id=CALL_ID), "read it", "done"])
    agent = LlmAgent(name="worker", model=model, tools=[tool])
    async with AsyncExitStack() as stack:
        root: BaseAgent = agent
        if where == REMOTE:
            server = AgentServer(agent, app_name=APP)
            port = await server.start("127.0.0.1:0")
            stack.push_async_callback(server.stop, None)
            remote = RemoteAgent("worker", f"127.0.0.1:{port}")
            stack.push_async_callback(remote.close)
            root = remote
        sessions = InMemorySessionService()
        session = await sessions.create_session(app_name=APP, user_id=USER)
        runner = Runner(agent=root, app_name=APP, session_service=sessions)
        answer = Content(
            role="user", parts=[Part.from_function_response("start_job", FINAL, id=CALL_ID)]
        )
        turns: list[list[Event]] = []
        for message in (Content.from_text("user", "start"), answer):
            turns.append(
                [
                    event
                    async for event in runner.run(
                        user_id=USER, session_id=session.id, new_message=message
                    )
                ]
            )
        stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert stored is not None
        return {
            "turn_1": [_event(event) for event in turns[0]],
            "turn_2": [_event(event) for event in turns[1]],
            "stored": [_event(event) for event in stored.events],
            "state": dict(stored.state),
            "last_request": [_content(content) for content in model.requests[-1].contents[-2:]],
            "model_calls": len(model.requests),
        }


CALL = ("model", "call", CALL_ID, "start_job", {})
ANSWER = ("user", "response", CALL_ID, "start_job", FINAL)


def _worker(content: list[Any] | None, state_delta: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "author": "worker",
        "content": content,
        "long_running_tool_ids": [CALL_ID] if content == [CALL] else [],
        "state_delta": state_delta or {},
    }


def _user(part: tuple[Any, ...]) -> dict[str, Any]:
    return {"author": "user", "content": [part], "long_running_tool_ids": [], "state_delta": {}}


def _expected_no_answer() -> dict[str, Any]:
    """The call stays open: no response in turn 1 (the model is not called again), the
    tool's state write kept in an event with no content; turn 2's answer reaches the model."""
    turn_1 = [_worker([CALL]), _worker(None, {"started": True})]
    turn_2 = [_worker([("model", "text", "read it")])]
    return {
        "turn_1": turn_1,
        "turn_2": turn_2,
        "stored": [_user(("user", "text", "start")), *turn_1, _user(ANSWER), *turn_2],
        "state": {"started": True},
        "last_request": [[CALL], [ANSWER]],
        "model_calls": 2,
    }


def _expected_answer(response: dict[str, Any]) -> dict[str, Any]:
    """The call is answered at once: the model reads the answer in turn 1; in turn 2 the
    client's final answer takes its place in the request."""
    interim = ("tool", "response", CALL_ID, "start_job", response)
    turn_1 = [
        _worker([CALL]),
        _worker([interim], {"started": True}),
        _worker([("model", "text", "read it")]),
    ]
    turn_2 = [_worker([("model", "text", "done")])]
    return {
        "turn_1": turn_1,
        "turn_2": turn_2,
        "stored": [_user(("user", "text", "start")), *turn_1, _user(ANSWER), *turn_2],
        "state": {"started": True},
        "last_request": [[CALL], [ANSWER]],
        "model_calls": 3,
    }


@pytest.mark.parametrize("value", NO_ANSWER_YET, ids=repr)
async def test_a_falsy_result_leaves_the_call_open_for_the_client(value: Any) -> None:
    local = await _play(_function_tool(value), IN_PROCESS)
    assert local == _expected_no_answer()
    assert await _play(_function_tool(value), REMOTE) == local


@pytest.mark.parametrize(("value", "response"), ANSWERS, ids=[repr(v) for v, _ in ANSWERS])
async def test_a_truthy_result_answers_the_call_at_once(
    value: Any, response: dict[str, Any]
) -> None:
    local = await _play(_function_tool(value), IN_PROCESS)
    assert local == _expected_answer(response)
    assert await _play(_function_tool(value), REMOTE) == local


@pytest.mark.parametrize("value", [None, {}], ids=repr)
async def test_a_long_running_tool_of_its_own_answering_nothing_leaves_the_call_open(
    value: dict[str, Any] | None,
) -> None:
    local = await _play(_StartJob(value), IN_PROCESS)
    assert local == _expected_no_answer()
    assert await _play(_StartJob(value), REMOTE) == local


async def test_a_long_running_tool_of_its_own_answering_a_dict_answers_at_once() -> None:
    local = await _play(_StartJob({"ticket": "T-1"}), IN_PROCESS)
    assert local == _expected_answer({"ticket": "T-1"})
    assert await _play(_StartJob({"ticket": "T-1"}), REMOTE) == local


@pytest.mark.parametrize("value", NO_ANSWER_YET, ids=repr)
async def test_a_tool_that_is_not_long_running_answers_every_result(value: Any) -> None:
    def lookup() -> Any:
        """Look something up."""
        return value

    model = ScriptedModel([call("lookup", id="c"), "ok"])
    agent = LlmAgent(name="worker", model=model, tools=[FunctionTool(lookup)])
    runner = Runner(agent=agent, app_name=APP, session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    events = [
        event
        async for event in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "go")
        )
    ]
    expected = {} if value is None or value == {} else {"result": value}
    assert [response.response for response in events[1].function_responses()] == [expected]
    assert events[-1].text == "ok"
