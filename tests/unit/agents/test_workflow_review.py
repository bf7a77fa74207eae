"""Adversarial review of workflow agents, agent trees, transfers and AgentTool: each test pins a
defect found in review (it failed before its fix), run through a real Runner and session store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import LoopAgent, ParallelAgent, SequentialAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.errors import ConfigError
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import INTERRUPTED_CALL_ERROR, Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.builtin import ExitLoopTool
from adk_mesh.types import Content, Event, LlmResponse

APP = "app"
USER = "u"


async def run_turn(
    root: BaseAgent,
    message: str = "hi",
    *,
    service: InMemorySessionService | None = None,
    session_id: str | None = None,
) -> list[Event]:
    service = service or InMemorySessionService()
    if session_id is None:
        session_id = (await service.create_session(app_name=APP, user_id=USER)).id
    runner = Runner(agent=root, app_name=APP, session_service=service)
    return [
        event
        async for event in runner.run(
            user_id=USER, session_id=session_id, new_message=Content.from_text("user", message)
        )
    ]


def leaf(name: str) -> LlmAgent:
    return LlmAgent(name=name, model=ScriptedModel([]))


# --- agent names and trees -------------------------------------------------------------------


@pytest.mark.parametrize("name", [None, 3, b"agent"])
def test_a_name_that_is_not_text_is_a_config_error(name: Any) -> None:
    with pytest.raises(ConfigError, match="agent name"):
        LlmAgent(name=name, model=ScriptedModel([]))


def test_a_refused_tree_leaves_its_sub_agents_free_for_another_parent() -> None:
    first = leaf("first")
    twin = leaf("first")
    with pytest.raises(ConfigError, match="appears twice"):
        SequentialAgent(name="pipeline", sub_agents=[first, twin])
    # The refused parent does not exist: its would-be children are nobody's.
    assert first.parent_agent is None and twin.parent_agent is None
    pipeline = SequentialAgent(name="pipeline", sub_agents=[first, leaf("second")])
    assert first.parent_agent is pipeline


def test_the_same_agent_twice_in_sub_agents_says_so_and_binds_nothing() -> None:
    step = leaf("step")
    with pytest.raises(ConfigError, match=r"'step' is given twice in the sub_agents of 'loop'"):
        LoopAgent(name="loop", sub_agents=[step, step])
    assert step.parent_agent is None


@pytest.mark.parametrize("not_an_agent", [lambda: None, "helper", None])
def test_a_sub_agent_that_is_not_an_agent_is_a_config_error(not_an_agent: Any) -> None:
    step = leaf("step")
    with pytest.raises(ConfigError, match=r"sub_agents of 'pipeline'.*not an agent"):
        SequentialAgent(name="pipeline", sub_agents=[step, not_an_agent])
    assert step.parent_agent is None


# --- LoopAgent -------------------------------------------------------------------------------


class Silent(BaseAgent):
    """An agent that does nothing and says nothing, and never awaits (a workflow whose steps
    were all skipped, a custom agent with nothing to do yet)."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name)
        self.runs = 0

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        self.runs += 1
        return
        yield  # an async generator


async def test_a_loop_whose_rounds_say_nothing_runs_them_all() -> None:
    # As google-adk: a silent round is a round (a custom step may be waiting for something).
    silent = Silent("silent")
    loop = LoopAgent(
        name="loop", sub_agents=[SequentialAgent(name="empty"), silent], max_iterations=1_000
    )
    assert await run_turn(loop) == []
    assert silent.runs == 1_000


async def test_an_endless_loop_of_silent_rounds_leaves_the_event_loop_free() -> None:
    # Without an await between rounds it would block the process for ever: no other request,
    # no deadline, no cancel could run. Here another task runs, and cancels it.
    silent = Silent("silent")
    loop = LoopAgent(name="loop", sub_agents=[silent])
    turn = asyncio.ensure_future(run_turn(loop))
    for _ in range(100):
        await asyncio.sleep(0)
    assert silent.runs > 1
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn


@pytest.mark.parametrize("max_iterations", ["3", 2.5, True])
def test_loop_max_iterations_of_the_wrong_type_is_a_config_error(max_iterations: Any) -> None:
    with pytest.raises(ConfigError, match="max_iterations"):
        LoopAgent(name="loop", max_iterations=max_iterations)


# --- ParallelAgent ---------------------------------------------------------------------------


async def test_a_branch_cancelled_by_a_siblings_escalation_leaves_no_call_open() -> None:
    # b's tool is running when a exits the loop: b is cancelled. Its call, stored already,
    # must not stay open in the session (a client would wait for its answer for ever); it is
    # answered as the Runner answers the calls of an interrupted turn.
    b_calling = asyncio.Event()
    never = asyncio.Event()

    async def slow() -> dict[str, Any]:
        """Takes its time."""
        b_calling.set()
        await never.wait()
        return {}

    async def a_respond(request: LlmRequest) -> LlmResponse:
        await b_calling.wait()
        return call("exit_loop")

    a = LlmAgent(name="a", model=FunctionModel(a_respond), tools=[ExitLoopTool()])
    b = LlmAgent(name="b", model=ScriptedModel([call("slow")]), tools=[slow])
    loop = LoopAgent(name="loop", sub_agents=[ParallelAgent(name="par", sub_agents=[a, b])])
    service = InMemorySessionService()
    session = await service.create_session(app_name=APP, user_id=USER)

    events = await run_turn(loop, service=service, session_id=session.id)

    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    assert [e.id for e in stored.events[1:]] == [e.id for e in events]
    calls = {c.id for e in stored.events for c in e.function_calls()}
    answered = {r.id for e in stored.events for r in e.function_responses()}
    assert calls == answered
    (interrupted,) = [e for e in stored.events if e.llm_response.interrupted]
    assert (interrupted.author, interrupted.branch) == ("b", "par.b")
    assert interrupted.llm_response.error_code == "CANCELLED"
    assert interrupted.function_responses()[0].response == {"error": INTERRUPTED_CALL_ERROR}


# --- AgentTool -------------------------------------------------------------------------------


@pytest.mark.parametrize("not_an_agent", [lambda: None, "helper", None])
def test_an_agent_tool_of_something_that_is_not_an_agent_is_a_config_error(
    not_an_agent: Any,
) -> None:
    with pytest.raises(ConfigError, match="AgentTool wraps an agent"):
        AgentTool(not_an_agent)
