"""Tool progress pushed where it is easy to get wrong: data the wire cannot carry, fractions
outside [0, 1], and concurrent calls (one of them stopped by its timeout) whose progress
crosses a ToolServer hop and an AgentService stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh import AgentServer, RemoteToolset, ToolServer
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, LlmResponse, Part
from tests.integration.mesh.test_tool_progress import run_over_grpc


class NotJson:
    pass


async def odd_progress(tool_context: ToolContext) -> dict[str, Any]:
    """Reports progress whose data and fractions are not what they should be."""
    await tool_context.report_progress("object", {"thing": NotJson()}, 0.5)
    await tool_context.report_progress("nan data", {"value": float("nan")}, 0.75)
    await tool_context.report_progress("nan", {"ok": 1}, float("nan"))
    await tool_context.report_progress("over", None, 7.0)
    await tool_context.report_progress("under", None, -1.0)
    return {"ok": True}


async def step(n: int, tool_context: ToolContext) -> dict[str, Any]:
    """Reports three steps; call 2 then waits past its timeout."""
    for i in range(3):
        await tool_context.report_progress(f"{n}-{i}", {"n": n, "i": i}, i / 3)
        await asyncio.sleep(0)
    if n == 2:
        await asyncio.Event().wait()
    return {"n": n}


@pytest.fixture
async def tool_target() -> AsyncIterator[str]:
    timed = FunctionTool(step)
    timed.timeout = 0.5
    server = ToolServer([FunctionTool(odd_progress), timed], name="odd")
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def serve_and_run(agent: LlmAgent) -> list[Event]:
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        return await run_over_grpc(f"127.0.0.1:{port}", batches=True, text="go")
    finally:
        await server.stop(None)


def odd_agent(tools: list[Any]) -> LlmAgent:
    return LlmAgent(
        name="desk",
        model=ScriptedModel([call("odd_progress", {}, id="c1"), "Done."]),
        tools=tools,
    )


def assert_odd_progress_arrived(events: list[Event]) -> None:
    progress = [event.tool_progress for event in events if event.tool_progress is not None]
    assert [(p.message, p.fraction, p.data) for p in progress] == [
        ("object", 0.5, None),  # the data the wire cannot carry is left out, not the update
        ("nan data", 0.75, None),
        ("nan", None, {"ok": 1}),  # not a number: no fraction
        ("over", 1.0, None),  # clamped into [0, 1]
        ("under", 0.0, None),
    ]
    assert {(p.tool_name, p.function_call_id) for p in progress} == {("odd_progress", "c1")}
    assert [event.text for event in events if event.is_final_response()] == ["Done."]


async def test_a_local_tool_s_unfit_progress_data_does_not_break_the_agent_stream() -> None:
    """The AgentService stream used to fail with INVALID_ARGUMENT (the abridged fallback kept
    the progress data): the turn is now served whole, the unfit data left out."""
    events = await serve_and_run(odd_agent([odd_progress]))
    assert_odd_progress_arrived(events)


async def test_a_remote_tool_s_unfit_progress_reads_as_a_local_one_s(tool_target: str) -> None:
    toolset = RemoteToolset(tool_target)
    try:
        events = await serve_and_run(odd_agent([toolset]))
    finally:
        await toolset.close()
    assert_odd_progress_arrived(events)


async def test_concurrent_remote_calls_keep_their_own_progress_and_none_comes_late(
    tool_target: str,
) -> None:
    """Two calls run together through a ToolServer, one stopped by its timeout: each update
    arrives once, with its own call id, in its call's order, all before the responses."""
    both = LlmResponse(
        content=Content(
            role="model",
            parts=[
                Part.from_function_call("step", {"n": 1}, id="c1"),
                Part.from_function_call("step", {"n": 2}, id="c2"),
            ],
        )
    )
    toolset = RemoteToolset(tool_target)
    try:
        agent = LlmAgent(name="desk", model=ScriptedModel([both, "Done."]), tools=[toolset])
        events = await serve_and_run(agent)
    finally:
        await toolset.close()
    progress = [event.tool_progress for event in events if event.tool_progress is not None]
    for call_id, n in (("c1", 1), ("c2", 2)):
        mine = [p for p in progress if p.function_call_id == call_id]
        assert [(p.message, p.data) for p in mine] == [
            (f"{n}-{i}", {"n": n, "i": i}) for i in range(3)
        ]
    assert len(progress) == 6
    responses = next(i for i, event in enumerate(events) if event.function_responses())
    assert not [event for event in events[responses:] if event.tool_progress is not None]
    answers = {r.id: r.response for r in events[responses].function_responses()}
    assert answers["c1"] == {"n": 1}
    assert "error" in answers["c2"]
    assert [event.text for event in events if event.is_final_response()] == ["Done."]
