"""A running tool's progress is its own message (Event.tool_progress), never model text: served
locally, through a ToolServer, and from an agent in another service, it reaches an
AgentService client with the tool's name, the call id, the message, the fraction and the data."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, ToolProgress
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

REPO = Path(__file__).resolve().parents[3]


async def check_fares(origin: str, tool_context: ToolContext) -> dict[str, Any]:
    """Scan the fares from a city."""
    await tool_context.report_progress("checking SkyLark", {"airline": "SkyLark"}, 0.0)
    await tool_context.report_progress("checking Atlantic Air", None, 0.25)
    await tool_context.report_progress("almost done")  # no fraction: none is sent
    return {"origin": origin, "cheapest": "SkyLark"}


EXPECTED = [
    ToolProgress(
        tool_name="check_fares",
        function_call_id="call-1",
        message="checking SkyLark",
        fraction=0.0,
        data={"airline": "SkyLark"},
    ),
    ToolProgress(
        tool_name="check_fares",
        function_call_id="call-1",
        message="checking Atlantic Air",
        fraction=0.25,
    ),
    ToolProgress(tool_name="check_fares", function_call_id="call-1", message="almost done"),
]


def fares_agent(tools: list[Any], *, name: str = "desk") -> LlmAgent:
    return LlmAgent(
        name=name,
        model=ScriptedModel([call("check_fares", {"origin": "London"}, id="call-1"), "Done."]),
        tools=tools,
    )


def assert_progress_only_as_progress(events: list[Event], author: str = "desk") -> None:
    """The tool's progress arrives as progress events, in order, and as nothing else."""
    progress = [event for event in events if event.tool_progress is not None]
    assert [event.tool_progress for event in progress] == EXPECTED
    assert all(event.partial and event.content is None for event in progress)
    assert {event.author for event in progress} == {author}
    # No partial model text comes from it (no streaming was asked, so none at all).
    assert not [event for event in events if event.partial and event.tool_progress is None]
    assert not any("checking" in event.text for event in events)
    # Progress comes while the tool runs: after the call, before the response.
    kinds = [
        "call" if event.function_calls() else "response" if event.function_responses() else ""
        for event in events
    ]
    first_progress = events.index(progress[0])
    assert kinds.index("call") < first_progress < kinds.index("response")


async def run_locally(agent: LlmAgent) -> tuple[list[Event], list[Event]]:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u1")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    events = [
        event
        async for event in runner.run(
            user_id="u1", session_id=session.id, new_message=Content.from_text("user", "fares")
        )
    ]
    stored = await service.get_session(app_name="app", user_id="u1", session_id=session.id)
    assert stored is not None
    return events, stored.events


@pytest.fixture
async def tool_target() -> AsyncIterator[str]:
    server = ToolServer([FunctionTool(check_fares)], name="fares")
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_a_local_tool_s_progress_is_progress_and_is_never_stored() -> None:
    events, stored = await run_locally(fares_agent([check_fares]))
    assert_progress_only_as_progress(events)
    assert not any(event.tool_progress is not None for event in stored)
    assert [event.text for event in events if event.is_final_response()] == ["Done."]


async def test_a_remote_tool_s_progress_is_the_same_as_a_local_one(tool_target: str) -> None:
    toolset = RemoteToolset(tool_target)
    try:
        events, stored = await run_locally(fares_agent([toolset]))
    finally:
        await toolset.close()
    assert_progress_only_as_progress(events)
    assert not any(event.tool_progress is not None for event in stored)


async def run_over_grpc(target: str, *, batches: bool, text: str = "fares") -> list[Event]:
    """The events other than the user's that an AgentService client reads of one turn of
    user u1 saying ``text`` at ``target``."""
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        ),
        accept_event_batches=batches,
    )
    events: list[Event] = []
    async with open_channel(target) as channel:
        async for response in agent_pb2_grpc.AgentServiceStub(channel).Run(request, timeout=30):
            events.extend(codec.run_response_events(response))
    return [event for event in events if event.author != "user"]


@pytest.mark.parametrize("batches", [False, True], ids=["one-event-per-response", "batches"])
async def test_an_agent_service_client_receives_a_tool_server_s_progress(
    tool_target: str, batches: bool
) -> None:
    toolset = RemoteToolset(tool_target)
    server = AgentServer(fares_agent([toolset]))
    port = await server.start("127.0.0.1:0")
    try:
        events = await run_over_grpc(f"127.0.0.1:{port}", batches=batches)
    finally:
        await server.stop(None)
        await toolset.close()
    assert_progress_only_as_progress(events)


async def test_a_remote_child_s_progress_reaches_the_root_s_client(tool_target: str) -> None:
    """root service -> (transfer) agent service of the child -> tool service: the progress
    crosses both hops and reaches the client of the root."""
    toolset = RemoteToolset(tool_target)
    child_server = AgentServer(fares_agent([toolset], name="fares_desk"))
    child_port = await child_server.start("127.0.0.1:0")
    child = RemoteAgent("fares_desk", f"127.0.0.1:{child_port}", description="Finds fares.")
    root = LlmAgent(
        name="concierge",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "fares_desk"})]),
        sub_agents=[child],
    )
    root_server = AgentServer(root)
    root_port = await root_server.start("127.0.0.1:0")
    try:
        events = await run_over_grpc(f"127.0.0.1:{root_port}", batches=True)
    finally:
        await root_server.stop(None)
        await child.close()
        await child_server.stop(None)
        await toolset.close()
    child_events = [event for event in events if event.author == "fares_desk"]
    assert_progress_only_as_progress(child_events, author="fares_desk")


async def test_adk_mesh_run_shows_progress_on_lines_of_its_own(tool_target: str) -> None:
    toolset = RemoteToolset(tool_target)
    server = AgentServer(fares_agent([toolset]))
    port = await server.start("127.0.0.1:0")
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "adk_mesh",
            "run",
            f"127.0.0.1:{port}",
            "fares",
            cwd=REPO,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=50)
    finally:
        await server.stop(None)
        await toolset.close()
    assert process.returncode == 0, stderr.decode()
    lines = stdout.decode().splitlines()
    progress = [line for line in lines if " … " in line]
    assert progress == [
        "[desk] check_fares … checking SkyLark (0%)",
        "[desk] check_fares … checking Atlantic Air (25%)",
        "[desk] check_fares … almost done",
    ]
    call_line = lines.index('[desk] → check_fares({"origin": "London"})')
    result_line = next(i for i, line in enumerate(lines) if line.startswith("[desk] ← check_fares"))
    assert call_line < lines.index(progress[0]) < lines.index(progress[-1]) < result_line
    assert lines[-1] == "[desk] Done."
