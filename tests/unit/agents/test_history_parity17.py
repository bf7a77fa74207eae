"""The history an agent's model is sent, item by item against google-adk's contents building
(``flows/llm_flows/contents.py``, ``_get_contents`` and ``_get_current_turn_contents``).

google-adk filters events for empty content, other branches, and its own auth and
confirmation requests; it leaves ``actions.skip_summarization`` alone: that flag ends the
turn of the agent whose tool set it (its model is not called again to summarize the result),
it does not hide the result from the agents that run after it.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import pytest

from adk_mesh import LlmAgent, Runner
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.history import RequestHistory, current_turn, request_contents
from adk_mesh.agents.workflow import SequentialAgent
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import Content, Event, EventActions, LlmResponse, Part

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


def texts(contents: list[Content]) -> list[list[str | None]]:
    return [[part.text for part in content.parts] for content in contents]


# --- another agent's events that skip summarization -----------------------------------------


def _researched() -> list[Event]:
    """The researcher called its helper through an AgentTool that skips summarization: the
    helper's answer, in the tool's response, is the researcher's final word."""
    return [
        event("user", "user", Part(text="plan a trip")),
        event(
            "researcher",
            "model",
            Part.from_function_call("helper", {"request": "Lisbon"}, id="c1"),
        ),
        event(
            "researcher",
            "user",
            Part.from_function_response("helper", {"result": "Lisbon, 3 days."}, id="c1"),
            actions=EventActions(skip_summarization=True),
        ),
    ]


def test_another_agents_result_that_skips_summarization_is_told_as_context() -> None:
    # google-adk keeps it: the next agent of a pipeline reads what the researcher found.
    contents = built_both_ways(_researched(), "writer")
    assert texts(contents) == [
        ["plan a trip"],
        ["For context:", '[researcher] called tool `helper` with parameters: {"request":"Lisbon"}'],
        [
            "For context:",
            '[researcher] `helper` tool returned result: {"result":"Lisbon, 3 days."}',
        ],
    ]


def test_another_agents_result_that_skips_summarization_starts_the_current_turn() -> None:
    # include_contents="none": google-adk's turn starts at the latest user message or other
    # agent's reply, whatever its actions — here the researcher's final result.
    events = _researched()
    turn = current_turn(events, agent_name="writer")
    assert list(turn) == events[-1:]
    assert texts(request_contents(turn, agent_name="writer")) == [
        ["For context:", '[researcher] `helper` tool returned result: {"result":"Lisbon, 3 days."}']
    ]


def test_the_agents_own_result_that_skips_summarization_stays_its_own() -> None:
    # Unchanged: the agent's own call and response, paired, as they were.
    contents = built_both_ways(_researched(), "researcher")
    assert [content.role for content in contents] == ["user", "model", "user"]
    assert contents[2].function_responses[0].response == {"result": "Lisbon, 3 days."}


async def _served(agent: LlmAgent, stack: AsyncExitStack) -> RemoteAgent:
    """``agent`` behind a RemoteAgent, on a real AgentServer on 127.0.0.1."""
    server = AgentServer(agent, app_name="app")
    port = await server.start("127.0.0.1:0")
    stack.push_async_callback(server.stop, None)
    remote = RemoteAgent(agent.name, f"127.0.0.1:{port}")
    stack.push_async_callback(remote.close)
    return remote


@pytest.mark.parametrize("remote", [None, "writer", "researcher"])
async def test_a_pipelines_next_agent_reads_an_agent_tool_result_that_skips_summarization(
    remote: str | None,
) -> None:
    # Through the Runner, all in this process, or with the writer (which reads the result)
    # or the researcher (whose AgentTool sets the flag) behind a RemoteAgent on a real
    # AgentServer: the writer's model reads the researcher's AgentTool result every way.
    helper = LlmAgent(name="helper", model=ScriptedModel(["Lisbon, 3 days."]))
    researcher = LlmAgent(
        name="researcher",
        model=ScriptedModel([call("helper", {"request": "Lisbon"}, id="c1")]),
        tools=[AgentTool(helper, skip_summarization=True)],
    )
    writer_model = ScriptedModel(["Day 1: Alfama."])
    writer = LlmAgent(name="writer", model=writer_model)
    async with AsyncExitStack() as stack:
        steps: list[BaseAgent] = [
            await _served(agent, stack) if agent.name == remote else agent
            for agent in (researcher, writer)
        ]
        pipeline = SequentialAgent(name="pipeline", sub_agents=steps)
        sessions = InMemorySessionService()
        session = await sessions.create_session(app_name="app", user_id="u")
        runner = Runner(agent=pipeline, app_name="app", session_service=sessions)
        events = [
            event
            async for event in runner.run(
                user_id="u",
                session_id=session.id,
                new_message=Content.from_text("user", "plan a trip"),
            )
        ]
    skipped = [event for event in events if event.actions.skip_summarization]
    assert [event.author for event in skipped] == ["researcher"]
    assert events[-1].content is not None and events[-1].content.parts[0].text == "Day 1: Alfama."
    writer_model.assert_consumed()
    told = texts(writer_model.requests[0].contents)
    assert told[-1][0] == "For context:"
    assert told[-1][1] is not None
    assert told[-1][1].startswith("[researcher] `helper` tool returned result:")
    assert "Lisbon, 3 days." in told[-1][1]
