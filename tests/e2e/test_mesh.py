"""The mesh across separate OS processes: a coordinator service that calls a tool service,
delegates to a second agent service through AgentTool and transfers to a third."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import codec
from adk_mesh.mesh._channel import open_channel
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.types import Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.e2e.conftest import REPO_ROOT, ServiceFactory, wait_for_file

pytestmark = pytest.mark.e2e

APP = "coordinator"


@dataclass
class Mesh:
    coordinator: str
    tools: str
    researcher: str
    specialist: str
    store: Path
    directory: Path


@pytest.fixture(scope="module")
def mesh(start_module_service: ServiceFactory, e2e_dir: Path) -> Mesh:
    tools = start_module_service("tools", "tools", "tests.e2e.apps.tools:tools")
    researcher = start_module_service("researcher", "agent", "tests.e2e.apps.researcher:root_agent")
    specialist = start_module_service("specialist", "agent", "tests.e2e.apps.specialist:root_agent")
    targets = {
        "tools": tools.wait_ready(),
        "researcher": researcher.wait_ready(),
        "specialist": specialist.wait_ready(),
    }
    store = e2e_dir / "sessions.db"
    coordinator = start_module_service(
        "coordinator",
        "agent",
        "tests.e2e.apps.coordinator:build",
        "--store",
        f"sqlite:///{store}",
        **targets,
    )
    return Mesh(coordinator=coordinator.wait_ready(), store=store, directory=e2e_dir, **targets)


@pytest.fixture
async def stub(mesh: Mesh) -> AsyncIterator[Any]:
    async with open_channel(mesh.coordinator) as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)


def root_run(text: str, *, session_id: str = "", user_id: str = "u1") -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id=user_id,
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )


async def stored_events(store: Path, session_id: str) -> tuple[list[Event], dict[str, Any]]:
    service = SqliteSessionService(str(store))
    try:
        session = await service.get_session(app_name=APP, user_id="u1", session_id=session_id)
    finally:
        close = getattr(service, "close", None)
        if close is not None:
            await close()
    assert session is not None
    return session.events, dict(session.state)


async def test_one_invocation_streams_in_order_and_persists_once_in_the_root(
    stub: Any, mesh: Mesh
) -> None:
    session_id = f"plan-{uuid.uuid4().hex[:8]}"
    responses = [response async for response in stub.Run(root_run("plan", session_id=session_id))]

    assert responses[0].session_id == session_id
    events = [codec.event_from_proto(response.event) for response in responses]
    assert not any(event.partial for event in events)
    calls = [call.name for event in events for call in event.function_calls()]
    assert calls == ["lookup", "researcher", "transfer_to_agent", "remember"]
    assert [event.author for event in events][-1] == "specialist"
    assert events[-1].text == "Porto it is"
    assert len({event.invocation_id for event in events}) == 1

    stored, state = await stored_events(mesh.store, session_id)
    assert stored[0].author == "user"
    assert [event.id for event in stored[1:]] == [event.id for event in events]
    assert len({event.id for event in stored}) == len(stored)
    assert {event.invocation_id for event in stored} == {events[0].invocation_id}
    # State written in every service: the tool service, the AgentTool delegate (output_key),
    # and the transfer target (a local tool and output_key).
    assert state["looked_up"] == "Porto"
    assert state["research"] == "sunny in Porto"
    assert state["city"] == "Porto"
    assert state["specialist_answer"] == "Porto it is"


@dataclass
class KilledToolRun:
    events: list[Event]
    error: grpc.aio.AioRpcError | None
    stored: list[Event]


async def run_with_tool_service_killed_mid_call(
    start_service: ServiceFactory, mesh: Mesh, directory: Path
) -> KilledToolRun:
    """Run ``block`` on a fresh coordinator and tool service; kill the tool service while its
    tool runs; return what the client saw and what the root session holds."""
    tools = start_service("tools2", "tools", "tests.e2e.apps.tools:tools")
    tools_target = tools.wait_ready()
    store = directory / "kill.db"
    coordinator = start_service(
        "coordinator2",
        "agent",
        "tests.e2e.apps.coordinator:build",
        "--store",
        f"sqlite:///{store}",
        tools=tools_target,
        researcher=mesh.researcher,
        specialist=mesh.specialist,
    )
    token = uuid.uuid4().hex[:8]
    received: list[agent_pb2.RunResponse] = []
    failure: grpc.aio.AioRpcError | None = None
    async with open_channel(coordinator.wait_ready()) as channel:
        run = agent_pb2_grpc.AgentServiceStub(channel).Run(
            root_run(f"block {token}", session_id="kill")
        )

        async def consume() -> None:
            async for response in run:
                received.append(response)

        consumer = asyncio.ensure_future(consume())
        await wait_for_file(directory / f"{token}.started")
        tools.process.kill()
        tools.process.wait(timeout=10)
        try:
            async with asyncio.timeout(20):  # an answer, not a hang
                await consumer
        except grpc.aio.AioRpcError as error:
            failure = error
    stored, _ = await stored_events(store, "kill")
    events = [codec.event_from_proto(response.event) for response in received]
    return KilledToolRun(events=events, error=failure, stored=stored)


def tool_errors(events: list[Event]) -> list[dict[str, Any]]:
    return [
        reply.response
        for event in events
        for reply in event.function_responses()
        if reply.name == "wait_forever"
    ]


async def test_a_tool_service_killed_mid_call_gives_an_error_response_not_a_hang(
    start_service: ServiceFactory, mesh: Mesh, tmp_path: Path
) -> None:
    result = await run_with_tool_service_killed_mid_call(start_service, mesh, tmp_path)

    [error] = tool_errors(result.events)
    # It names the tool; the tool service's address stays in the agent service's log.
    assert "tool service for 'wait_forever'" in error["error"]
    assert "127.0.0.1" not in error["error"]
    # The session holds exactly what was streamed: the call and its error response.
    assert [event.id for event in result.stored[1:]] == [event.id for event in result.events]
    assert tool_errors(result.stored) == [error]


async def test_a_tool_service_killed_mid_call_is_an_error_the_model_sees(
    start_service: ServiceFactory, mesh: Mesh, tmp_path: Path
) -> None:
    result = await run_with_tool_service_killed_mid_call(start_service, mesh, tmp_path)

    assert result.error is None
    assert result.events[-1].text.startswith("the tool failed: ")


async def test_a_client_cancel_stops_the_remote_agents(stub: Any, mesh: Mesh) -> None:
    token = uuid.uuid4().hex[:8]
    session_id = f"cancel-{token}"
    run = stub.Run(root_run(f"slow {token}", session_id=session_id))
    seen: list[Event] = []

    async def consume() -> None:
        async for response in run:
            seen.append(codec.event_from_proto(response.event))

    consumer = asyncio.ensure_future(consume())
    await wait_for_file(mesh.directory / f"{token}.started")
    run.cancel()
    await wait_for_file(mesh.directory / f"{token}.cancelled", seconds=5)
    with pytest.raises(asyncio.CancelledError):
        await consumer

    stored, _ = await stored_events(mesh.store, session_id)
    assert not any(event.author == "specialist" for event in stored)


async def rpc_error(stub: Any, request: agent_pb2.RunRequest) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for _ in stub.Run(request):
            pass
    return raised.value


async def test_bad_requests_get_clear_statuses(stub: Any, mesh: Mesh) -> None:
    unknown = root_run("hi")
    unknown.agent_name = "nobody"
    error = await rpc_error(stub, unknown)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "'nobody' is not served here" in error.details()

    empty = root_run("hi")
    del empty.root.new_message.parts[:]
    error = await rpc_error(stub, empty)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no parts" in error.details()

    no_data = root_run("hi")
    no_data.root.new_message.parts.append(content_pb2.Part())
    error = await rpc_error(stub, no_data)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sets none" in error.details()

    no_user = root_run("hi", user_id="")
    error = await rpc_error(stub, no_user)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "user_id is empty" in error.details()

    # A plain channel: its send limit does not stop the message before the server sees it.
    async with grpc.aio.insecure_channel(mesh.coordinator) as channel:
        error = await rpc_error(
            agent_pb2_grpc.AgentServiceStub(channel), root_run("x" * (33 * 1024 * 1024))
        )
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in error.details()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adk_mesh", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_cli_run_and_describe_against_the_mesh(mesh: Mesh) -> None:
    described = cli("describe", mesh.coordinator)
    assert described.returncode == 0, described.stderr
    assert described.stdout.startswith("coordinator (LlmAgent)\n")
    assert "    - specialist: Knows cities.\n" in described.stdout
    assert "    - researcher: Researches the weather.\n" in described.stdout

    ran = cli("run", mesh.coordinator, "hi there", "--session", "cli-1")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("session cli-1 · invocation ")
    assert "[coordinator] hello\n" in ran.stdout

    as_json = cli("run", mesh.coordinator, "hi again", "--session", "cli-1", "--json")
    assert as_json.returncode == 0, as_json.stderr
    lines = as_json.stdout.splitlines()
    assert json.loads(lines[0])["sessionId"] == "cli-1"
    assert all(json.loads(line)["event"]["author"] == "coordinator" for line in lines)

    failed = cli("run", mesh.coordinator, "hi", "--agent", "nobody")
    assert failed.returncode == 1
    assert failed.stderr.startswith("error: AgentNotFoundError: agent 'nobody' is not served")
