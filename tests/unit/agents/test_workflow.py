"""Workflow agents (Sequential, Parallel, Loop) run through a real Runner and session store.

Interleavings are forced with asyncio.Events set by the models, the tools or the test's own
consumer of the event stream; nothing waits on a clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import pytest

from adk_mesh.agents import follow_transfers
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import LoopAgent, ParallelAgent, SequentialAgent
from adk_mesh.contexts import CallbackContext, InvocationContext
from adk_mesh.errors import ConfigError, ModelError
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.builtin import ExitLoopTool
from adk_mesh.types import Content, Event, LlmResponse

APP = "app"
USER = "u"


@dataclass
class Turn:
    events: list[Event]
    session: Session


async def run_turn(
    root: BaseAgent,
    message: str = "hi",
    *,
    on_event: Callable[[Event], None] | None = None,
    service: InMemorySessionService | None = None,
    session_id: str | None = None,
) -> Turn:
    service = service or InMemorySessionService()
    if session_id is None:
        session_id = (await service.create_session(app_name=APP, user_id=USER)).id
    runner = Runner(agent=root, app_name=APP, session_service=service)
    events: list[Event] = []
    async for event in runner.run(
        user_id=USER, session_id=session_id, new_message=Content.from_text("user", message)
    ):
        events.append(event)
        if on_event is not None:
            on_event(event)
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None
    return Turn(events, stored)


def request_texts(request: LlmRequest) -> list[str]:
    return [part.text for content in request.contents for part in content.parts if part.text]


def describe(event: Event) -> tuple[str, str, str]:
    if event.function_calls():
        kind = "call"
    elif event.function_responses():
        kind = "response"
    else:
        kind = event.text
    return (event.author, event.branch, kind)


# --- SequentialAgent ---------------------------------------------------------------------------


async def test_sequential_runs_in_order_and_later_agents_see_earlier_work() -> None:
    writer_model = ScriptedModel(["first draft"])
    writer = LlmAgent(name="writer", model=writer_model, output_key="draft")
    reviewer_model = ScriptedModel(["looks good"])
    reviewer = LlmAgent(
        name="reviewer",
        model=reviewer_model,
        instruction="Review this draft: {draft}",
        output_key="review",
    )
    publisher_model = ScriptedModel(["published"])
    publisher = LlmAgent(name="publisher", model=publisher_model)
    pipeline = SequentialAgent(name="pipeline", sub_agents=[writer, reviewer, publisher])

    turn = await run_turn(pipeline, "write about otters")
    for model in (writer_model, reviewer_model, publisher_model):
        model.assert_consumed()

    assert [(e.author, e.text) for e in turn.events] == [
        ("writer", "first draft"),
        ("reviewer", "looks good"),
        ("publisher", "published"),
    ]
    # The reviewer saw the writer's output_key in state (through its instruction) ...
    assert reviewer_model.requests[0].system_instruction == "Review this draft: first draft"
    # ... and the writer's answer in its history, as another agent's message.
    assert request_texts(reviewer_model.requests[0]) == [
        "write about otters",
        "For context:",
        "[writer] said: first draft",
    ]
    # The third agent sees both earlier agents, in order.
    assert request_texts(publisher_model.requests[0]) == [
        "write about otters",
        "For context:",
        "[writer] said: first draft",
        "For context:",
        "[reviewer] said: looks good",
    ]
    assert turn.session.state == {"draft": "first draft", "review": "looks good"}
    assert [e.id for e in turn.session.events[1:]] == [e.id for e in turn.events]


async def test_before_agent_callback_returning_content_skips_the_agent() -> None:
    def skip(callback_context: CallbackContext) -> Content:
        callback_context.state["skipped"] = True
        return Content.from_text("model", "skipped by callback")

    skipped_model = ScriptedModel([])  # any call would raise ModelError
    skipped = LlmAgent(name="skipped", model=skipped_model, before_agent_callback=skip)
    after_model = ScriptedModel(["ran"])
    after = LlmAgent(name="after", model=after_model)
    pipeline = SequentialAgent(name="pipeline", sub_agents=[skipped, after])

    turn = await run_turn(pipeline)

    assert skipped_model.requests == []
    after_model.assert_consumed()
    assert [(e.author, e.text) for e in turn.events] == [
        ("skipped", "skipped by callback"),
        ("after", "ran"),
    ]
    assert turn.events[0].actions.state_delta == {"skipped": True}
    assert turn.session.state == {"skipped": True}


async def test_before_agent_callback_on_a_workflow_agent_skips_its_children() -> None:
    child_model = ScriptedModel([])
    child = LlmAgent(name="child", model=child_model)
    pipeline = SequentialAgent(
        name="pipeline",
        sub_agents=[child],
        before_agent_callback=lambda ctx: Content.from_text("model", "not today"),
    )
    turn = await run_turn(pipeline)
    assert child_model.requests == []
    assert [(e.author, e.text) for e in turn.events] == [("pipeline", "not today")]


# --- ParallelAgent -----------------------------------------------------------------------------


async def test_parallel_children_run_on_their_own_branches_and_are_persisted() -> None:
    a_model = ScriptedModel(["from a"])
    b_model = ScriptedModel(["from b"])
    par = ParallelAgent(
        name="par",
        sub_agents=[LlmAgent(name="a", model=a_model), LlmAgent(name="b", model=b_model)],
    )

    turn = await run_turn(par)

    assert sorted(describe(e) for e in turn.events) == [
        ("a", "par.a", "from a"),
        ("b", "par.b", "from b"),
    ]
    assert [e.id for e in turn.session.events[1:]] == [e.id for e in turn.events]
    assert request_texts(a_model.requests[0]) == ["hi"]
    assert request_texts(b_model.requests[0]) == ["hi"]


async def test_parallel_interleaves_events_and_children_do_not_see_each_other() -> None:
    # Forced order: a calls a tool; the consumer sees it and lets b answer; the consumer sees
    # b's answer and lets a's tool return; a answers. The stream must show exactly that.
    a_call_seen = asyncio.Event()
    b_answer_seen = asyncio.Event()

    def a_respond(request: LlmRequest) -> LlmResponse | str:
        return call("step_a") if len(a_model.requests) == 1 else "a done"

    async def b_respond(request: LlmRequest) -> str:
        await a_call_seen.wait()
        return "b answer"

    async def step_a() -> dict[str, Any]:
        """A step that waits for the sibling."""
        await b_answer_seen.wait()
        return {"ok": True}

    a_model = FunctionModel(a_respond)
    b_model = FunctionModel(b_respond)
    par = ParallelAgent(
        name="par",
        sub_agents=[
            LlmAgent(name="a", model=a_model, tools=[step_a]),
            LlmAgent(name="b", model=b_model),
        ],
    )

    def on_event(event: Event) -> None:
        if event.author == "a" and event.function_calls():
            a_call_seen.set()
        if event.author == "b":
            b_answer_seen.set()

    turn = await run_turn(par, on_event=on_event)

    assert [describe(e) for e in turn.events] == [
        ("a", "par.a", "call"),
        ("b", "par.b", "b answer"),
        ("a", "par.a", "response"),
        ("a", "par.a", "a done"),
    ]
    # Both children's events were persisted, in stream order.
    assert [e.id for e in turn.session.events[1:]] == [e.id for e in turn.events]
    # b was asked after a's call was stored, a after b's answer was stored: neither saw the
    # other's events.
    assert len(b_model.requests) == 1
    b_request = b_model.requests[0]
    assert request_texts(b_request) == ["hi"]
    assert not any(c.function_calls for c in b_request.contents)
    a_second = a_model.requests[1]
    assert "b answer" not in " ".join(request_texts(a_second))
    assert [c.role for c in a_second.contents] == ["user", "model", "tool"]


async def test_parallel_child_failure_surfaces_and_cancels_the_sibling() -> None:
    b_waiting = asyncio.Event()
    never = asyncio.Event()
    b_cancelled: list[str] = []

    async def a_respond(request: LlmRequest) -> str:
        await b_waiting.wait()
        raise ModelError("provider down", status_code=503)

    async def b_respond(request: LlmRequest) -> str:
        b_waiting.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            b_cancelled.append("cancelled")
            raise
        return "unreachable"

    par = ParallelAgent(
        name="par",
        sub_agents=[
            LlmAgent(name="a", model=FunctionModel(a_respond)),
            LlmAgent(name="b", model=FunctionModel(b_respond)),
        ],
    )
    service = InMemorySessionService()
    session = await service.create_session(app_name=APP, user_id=USER)

    with pytest.raises(ModelError, match="provider down") as raised:
        await run_turn(par, service=service, session_id=session.id)

    assert raised.value.status_code == 503
    # The sibling's pending model call was cancelled (and awaited) before the error surfaced.
    assert b_cancelled == ["cancelled"]
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    assert [e.author for e in stored.events] == ["user"]


async def test_parallel_without_children_yields_nothing() -> None:
    turn = await run_turn(ParallelAgent(name="par"))
    assert turn.events == []


# --- LoopAgent ---------------------------------------------------------------------------------


async def test_loop_ends_when_exit_loop_is_called() -> None:
    refiner_model = ScriptedModel(["draft 1", call("exit_loop")])
    refiner = LlmAgent(name="refiner", model=refiner_model, tools=[ExitLoopTool()])
    critic_model = ScriptedModel(["needs work"])
    critic = LlmAgent(name="critic", model=critic_model)
    loop = LoopAgent(name="loop", sub_agents=[refiner, critic], max_iterations=5)

    turn = await run_turn(loop)
    refiner_model.assert_consumed()
    critic_model.assert_consumed()

    # Exactly two iterations: the critic ran after the first; the second ended at exit_loop.
    assert len(refiner_model.requests) == 2
    assert [describe(e)[::2] for e in turn.events] == [
        ("refiner", "draft 1"),
        ("critic", "needs work"),
        ("refiner", "call"),
        ("refiner", "response"),
    ]
    exit_event = turn.events[-1]
    assert exit_event.actions.escalate and exit_event.actions.skip_summarization
    assert exit_event.function_responses()[0].name == "exit_loop"
    # The escalation is persisted with the event.
    stored_exit = turn.session.events[-1]
    assert stored_exit.id == exit_event.id
    assert stored_exit.actions.escalate


async def test_loop_stops_at_max_iterations() -> None:
    model = ScriptedModel(["v1", "v2", "v3"])
    loop = LoopAgent(
        name="loop",
        sub_agents=[LlmAgent(name="refiner", model=model, tools=[ExitLoopTool()])],
        max_iterations=3,
    )

    turn = await run_turn(loop)

    model.assert_consumed()  # and a fourth call would have raised ModelError
    assert [e.text for e in turn.events] == ["v1", "v2", "v3"]
    assert not any(e.actions.escalate for e in turn.events)


async def test_loop_iterations_see_the_previous_iterations() -> None:
    model = ScriptedModel(["v1", "v2"])
    loop = LoopAgent(
        name="loop",
        sub_agents=[LlmAgent(name="refiner", model=model, output_key="latest")],
        max_iterations=2,
    )
    turn = await run_turn(loop, "improve it")
    assert request_texts(model.requests[1]) == ["improve it", "v1"]
    assert turn.session.state == {"latest": "v2"}


@pytest.mark.parametrize("max_iterations", [0, -1])
def test_loop_max_iterations_below_one_is_a_config_error(max_iterations: int) -> None:
    with pytest.raises(ConfigError, match="max_iterations must be at least 1"):
        LoopAgent(name="loop", max_iterations=max_iterations)


async def test_loop_without_sub_agents_returns_instead_of_spinning() -> None:
    # With no sub-agent nothing can escalate; an unbounded loop over nothing would spin
    # forever without ever yielding to the event loop.
    turn = await run_turn(LoopAgent(name="loop"))
    assert turn.events == []


async def test_a_transfer_inside_a_sequential_step_does_not_abandon_the_later_steps() -> None:
    specialist_model = ScriptedModel(["special answer"])
    specialist = LlmAgent(name="specialist", description="Knows.", model=specialist_model)
    triage = LlmAgent(
        name="triage",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
        sub_agents=[specialist],
    )
    summarizer_model = ScriptedModel(["summary"])
    summarizer = LlmAgent(name="summarizer", model=summarizer_model)
    pipeline = SequentialAgent(name="pipeline", sub_agents=[triage, summarizer])

    turn = await run_turn(pipeline)

    specialist_model.assert_consumed()
    assert [e.author for e in turn.events][-2:] == ["specialist", "summarizer"]
    summarizer_model.assert_consumed()


class MyPipeline(BaseAgent):
    """A user's own workflow agent, written as SequentialAgent is: it declares that it owns its
    children's transfers and follows each child's with the public helper."""

    owns_child_transfers = True

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        for sub_agent in self.sub_agents:
            async with aclosing(follow_transfers(ctx, sub_agent, root=self.root_agent)) as events:
                async for event in events:
                    yield event


def users_copy(built_in: type[BaseAgent]) -> type[BaseAgent]:
    """A class of the user's own, not derived from ``built_in``, that behaves as it does: it
    declares the same capabilities and runs the same steps."""

    class Mine(BaseAgent):
        owns_child_transfers = built_in.owns_child_transfers
        max_iterations = 1
        _run_impl = built_in._run_impl

    return Mine


def triage_then_summary(workflow: type[BaseAgent]) -> tuple[BaseAgent, LlmAgent]:
    specialist = LlmAgent(name="specialist", model=ScriptedModel(["special answer"]))
    triage = LlmAgent(
        name="triage",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
        sub_agents=[specialist],
    )
    summarizer = LlmAgent(name="summarizer", model=ScriptedModel(["summary"]))
    return workflow(name="pipeline", sub_agents=[triage, summarizer]), triage


@pytest.mark.parametrize(
    "workflow",
    [
        SequentialAgent,
        MyPipeline,
        users_copy(SequentialAgent),
        users_copy(LoopAgent),
    ],
)
async def test_a_users_workflow_agent_owns_transfers_as_the_built_in_one_does(
    workflow: type[BaseAgent],
) -> None:
    pipeline, triage = triage_then_summary(workflow)
    if isinstance(pipeline, LoopAgent):
        pipeline.max_iterations = 1

    turn = await run_turn(pipeline)

    assert [e.author for e in turn.events] == ["triage", "triage", "specialist", "summarizer"]
    # And, as for the built-in one, the triage agent may not hand back to a workflow parent.
    assert [agent.name for agent in triage.transfer_targets()] == ["specialist"]


@pytest.mark.parametrize("workflow", [ParallelAgent, users_copy(ParallelAgent)])
async def test_a_users_parallel_agent_runs_a_branchs_transfer_in_that_branch(
    workflow: type[BaseAgent],
) -> None:
    pipeline, _ = triage_then_summary(workflow)

    turn = await run_turn(pipeline)

    by_author = {event.author: event.branch for event in turn.events}
    assert by_author["specialist"] == by_author["triage"] == "pipeline.triage"
    assert by_author["summarizer"] == "pipeline.summarizer"
