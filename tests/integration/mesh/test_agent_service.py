"""AgentServer and RemoteAgent over real gRPC servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.errors import AgentNotFoundError, DelegationError, InvalidArgumentError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2


def remember(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """Remember a city."""
    tool_context.state["city"] = city
    return {"ok": True}


@asynccontextmanager
async def serving(agent: BaseAgent, **options: Any) -> AsyncIterator[tuple[AgentServer, str]]:
    server = AgentServer(agent, **options)
    port = await server.start("127.0.0.1:0")
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@asynccontextmanager
async def stub_for(target: str) -> AsyncIterator[Any]:
    async with open_channel(target) as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)


async def run_turn(agent: BaseAgent, text: str) -> tuple[list[Event], Session]:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u1")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    events = [
        event
        async for event in runner.run(
            user_id="u1", session_id=session.id, new_message=Content.from_text("user", text)
        )
    ]
    stored = await service.get_session(app_name="app", user_id="u1", session_id=session.id)
    assert stored is not None
    return events, stored


def user_message(text: str) -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)])


async def collect(stub: Any, request: agent_pb2.RunRequest) -> list[agent_pb2.RunResponse]:
    return [response async for response in stub.Run(request)]


async def rpc_error(stub: Any, request: agent_pb2.RunRequest) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await collect(stub, request)
    return raised.value


# --- transfers and delegation --------------------------------------------------------------


async def test_transfer_to_a_remote_agent_persists_every_event_once_in_the_caller() -> None:
    specialist_model = ScriptedModel([call("remember", {"city": "Porto"}), "Porto it is"])
    specialist = LlmAgent(
        name="specialist",
        model=specialist_model,
        tools=[remember],
        output_key="answer",
        description="Knows cities.",
    )
    async with serving(specialist) as (_, target):
        remote = RemoteAgent("specialist", target, description="Knows cities.")
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
            sub_agents=[remote],
        )
        try:
            events, session = await run_turn(coordinator, "which city?")
        finally:
            await remote.close()

    assert [e.id for e in session.events[1:]] == [e.id for e in events if not e.partial]
    assert len({e.id for e in session.events}) == len(session.events) == 6
    assert [e.author for e in session.events] == [
        "user",
        "coordinator",
        "coordinator",
        "specialist",
        "specialist",
        "specialist",
    ]
    assert len({e.invocation_id for e in session.events}) == 1
    assert session.state["city"] == "Porto"
    assert session.state["answer"] == "Porto it is"
    # The remote model saw the caller's history, the user's question included.
    seen = specialist_model.requests[0].contents
    assert any(part.text == "which city?" for content in seen for part in content.parts)
    specialist_model.assert_consumed()


async def test_a_transfer_inside_the_remote_tree_is_carried_out_there() -> None:
    clerk = LlmAgent(name="clerk", model=ScriptedModel(["stamped"]))
    desk = LlmAgent(
        name="desk",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "clerk"})]),
        sub_agents=[clerk],
    )
    async with serving(desk) as (_, target):
        remote = RemoteAgent("desk", target)
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "desk"})]),
            sub_agents=[remote],
        )
        try:
            events, session = await run_turn(coordinator, "stamp this")
        finally:
            await remote.close()
    assert [e.author for e in session.events] == [
        "user",
        "coordinator",
        "coordinator",
        "desk",
        "desk",
        "clerk",
    ]
    assert session.events[-1].text == "stamped"
    # The caller's tree does not hold "clerk": the remote transfer arrives as done.
    assert session.events[4].actions.transfer_to_agent is None
    assert events[-1].text == "stamped"


def make_researcher() -> LlmAgent:
    return LlmAgent(
        name="researcher",
        model=ScriptedModel([call("remember", {"city": "Oslo"}), "Oslo is cold"]),
        tools=[remember],
        output_key="summary",
        description="Researches cities.",
    )


async def delegate_through_agent_tool(child: BaseAgent) -> tuple[dict[str, Any], dict[str, Any]]:
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([call("researcher", {"request": "tell me about Oslo"}), "done"]),
        tools=[AgentTool(child, output_state_keys=["city"])],
    )
    events, session = await run_turn(parent, "go")
    responses = [r for e in events for r in e.function_responses()]
    assert len(responses) == 1
    return responses[0].response, dict(session.state)


@pytest.mark.parametrize("where", ["local", "remote"])
async def test_agent_tool_delegation_is_the_same_local_or_remote(where: str) -> None:
    if where == "local":
        outcome = await delegate_through_agent_tool(make_researcher())
    else:
        async with serving(make_researcher()) as (_, target):
            remote = RemoteAgent("researcher", target, description="Researches cities.")
            try:
                outcome = await delegate_through_agent_tool(remote)
            finally:
                await remote.close()
    assert outcome == ({"result": "Oslo is cold"}, {"city": "Oslo"})


async def test_call_path_cycle_is_refused_with_a_clear_error() -> None:
    to_beta = RemoteAgent("beta", "unset")
    alpha = LlmAgent(
        name="alpha",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "beta"})]),
        sub_agents=[to_beta],
    )
    to_alpha = RemoteAgent("alpha", "unset")
    beta = LlmAgent(
        name="beta",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "alpha"})]),
        sub_agents=[to_alpha],
    )
    async with serving(alpha) as (_, alpha_target), serving(beta) as (_, beta_target):
        to_beta.target, to_alpha.target = beta_target, alpha_target
        try:
            async with stub_for(alpha_target) as stub:
                request = agent_pb2.RunRequest(
                    root=agent_pb2.RootRun(user_id="u1", new_message=user_message("loop"))
                )
                error = await rpc_error(stub, request)
        finally:
            await to_beta.close()
            await to_alpha.close()
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    mapped = error_from_rpc_error(error)
    assert isinstance(mapped, DelegationError)
    assert "call-path cycle: alpha -> beta -> alpha" in mapped.message


async def test_delegation_deeper_than_the_callers_limit_is_refused() -> None:
    async with serving(make_researcher()) as (_, target), stub_for(target) as stub:
        request = agent_pb2.RunRequest(
            delegated=agent_pb2.DelegatedRun(
                delegation_depth=3, max_delegation_depth=2, user_content=user_message("hi")
            )
        )
        error = await rpc_error(stub, request)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "exceeds the caller's limit of 2" in (error.details() or "")


# --- root runs -----------------------------------------------------------------------------


async def test_root_run_creates_the_session_and_persists_it() -> None:
    sessions = InMemorySessionService()
    greeter = LlmAgent(name="greeter", model=ScriptedModel(["hello", "hello again"]))
    async with serving(greeter, session_service=sessions) as (_, target), stub_for(target) as stub:
        first = await collect(
            stub,
            agent_pb2.RunRequest(
                root=agent_pb2.RootRun(user_id="u1", new_message=user_message("hi"))
            ),
        )
        session_id = first[0].session_id
        assert session_id
        assert [codec.event_from_proto(r.event).text for r in first] == ["hello"]
        second = await collect(
            stub,
            agent_pb2.RunRequest(
                root=agent_pb2.RootRun(
                    user_id="u1", session_id=session_id, new_message=user_message("again")
                )
            ),
        )
        assert second[0].session_id == session_id
    session = await sessions.get_session(app_name="greeter", user_id="u1", session_id=session_id)
    assert session is not None
    assert [e.text for e in session.events] == ["hi", "hello", "again", "hello again"]
    assert [e.id for e in session.events][1::2] == [
        codec.event_from_proto(r.event).id for r in (*first, *second)
    ]


async def test_root_run_with_an_unknown_session_id_creates_that_session() -> None:
    sessions = InMemorySessionService()
    greeter = LlmAgent(name="greeter", model=ScriptedModel(["hello"]))
    async with serving(greeter, session_service=sessions, app_name="hub") as (_, target):
        async with stub_for(target) as stub:
            responses = await collect(
                stub,
                agent_pb2.RunRequest(
                    root=agent_pb2.RootRun(
                        user_id="u1", session_id="chosen", new_message=user_message("hi")
                    )
                ),
            )
    assert responses[0].session_id == "chosen"
    session = await sessions.get_session(app_name="hub", user_id="u1", session_id="chosen")
    assert session is not None and len(session.events) == 2


# --- bad requests, describe, health, reflection -------------------------------------------


@pytest.mark.parametrize(
    ("request_message", "code", "error_class", "phrase"),
    [
        (agent_pb2.RunRequest(), grpc.StatusCode.INVALID_ARGUMENT, InvalidArgumentError, "no mode"),
        (
            agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="u1")),
            grpc.StatusCode.INVALID_ARGUMENT,
            InvalidArgumentError,
            "no parts",
        ),
        (
            agent_pb2.RunRequest(
                root=agent_pb2.RootRun(user_id="u1", new_message=content_pb2.Content(role="user"))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            InvalidArgumentError,
            "no parts",
        ),
        (
            agent_pb2.RunRequest(
                root=agent_pb2.RootRun(new_message=user_message("hi")),
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            InvalidArgumentError,
            "user_id",
        ),
        (
            agent_pb2.RunRequest(
                agent_name="ghost",
                delegated=agent_pb2.DelegatedRun(user_content=user_message("hi")),
            ),
            grpc.StatusCode.NOT_FOUND,
            AgentNotFoundError,
            "'ghost' is not served here",
        ),
    ],
    ids=["no-mode", "no-message", "empty-message", "no-user", "unknown-agent"],
)
async def test_bad_requests_are_refused_with_clear_messages(
    request_message: agent_pb2.RunRequest,
    code: grpc.StatusCode,
    error_class: type[Exception],
    phrase: str,
) -> None:
    async with serving(make_researcher()) as (_, target), stub_for(target) as stub:
        error = await rpc_error(stub, request_message)
    assert error.code() == code
    mapped = error_from_rpc_error(error)
    assert isinstance(mapped, error_class)
    assert phrase in mapped.message


async def test_describe_returns_the_agent_card() -> None:
    helper = LlmAgent(name="helper", model=ScriptedModel([]), description="Helps.")
    root = LlmAgent(
        name="front",
        model=ScriptedModel([]),
        description="The front desk.",
        tools=[FunctionTool(remember)],
        sub_agents=[helper],
    )
    async with serving(root, app_name="desk") as (_, target), stub_for(target) as stub:
        card = (await stub.Describe(agent_pb2.DescribeRequest())).card
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Describe(agent_pb2.DescribeRequest(agent_name="ghost"))
    assert card.name == "front"
    assert card.description == "The front desk."
    assert card.agent_type == "LlmAgent"
    assert card.app_name == "desk"
    assert card.supports_streaming
    assert [(s.name, s.description) for s in card.sub_agents] == [("helper", "Helps.")]
    assert [t.name for t in card.tools] == ["remember"]
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def test_describe_leaves_out_a_toolset_that_cannot_be_listed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as holder:  # a port that was free a moment ago: nothing listens
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
    down = RemoteToolset(f"127.0.0.1:{port}", list_timeout=2)
    root = LlmAgent(name="front", model=ScriptedModel([]), tools=[FunctionTool(remember), down])
    try:
        async with serving(root) as (_, target), stub_for(target) as stub:
            card = (await stub.Describe(agent_pb2.DescribeRequest())).card
    finally:
        await down.close()
    assert [t.name for t in card.tools] == ["remember"]
    assert "RemoteToolset left out" in caplog.text


async def test_health_is_serving_and_reflection_lists_the_services() -> None:
    server = AgentServer(make_researcher())
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for service in ("", "adk_mesh.v1.AgentService"):
                reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
            call = reflection.ServerReflectionInfo()
            await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
            answer = await call.read()
            await call.done_writing()
            names = {s.name for s in answer.list_services_response.service}
    finally:
        await server.stop(None)
    assert {"adk_mesh.v1.AgentService", "grpc.health.v1.Health"} <= names
    statuses = server._health._server_status
    assert set(statuses.values()) == {health_pb2.HealthCheckResponse.NOT_SERVING}


# --- cancellation --------------------------------------------------------------------------


async def test_cancelling_the_call_cancels_the_remote_agent() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def wait_forever(request: LlmRequest) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    sleeper = LlmAgent(name="sleeper", model=FunctionModel(wait_forever))
    async with serving(sleeper) as (_, target):
        async with stub_for(target) as stub:
            call = stub.Run(
                agent_pb2.RunRequest(
                    root=agent_pb2.RootRun(user_id="u1", new_message=user_message("wait"))
                )
            )
            reader = asyncio.ensure_future(call.read())
            await asyncio.wait_for(started.wait(), 10)
            call.cancel()
            await asyncio.wait_for(cancelled.wait(), 10)
            with pytest.raises(asyncio.CancelledError):
                await reader


async def test_stopping_a_remote_agent_early_cancels_the_remote_run() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def wait_forever(request: LlmRequest) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")

    async with serving(LlmAgent(name="sleeper", model=FunctionModel(wait_forever))) as (
        _,
        target,
    ):
        remote = RemoteAgent("sleeper", target)
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "sleeper"})]),
            sub_agents=[remote],
        )
        task = asyncio.ensure_future(run_turn(coordinator, "go"))
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        await asyncio.wait_for(cancelled.wait(), 10)
        with pytest.raises(asyncio.CancelledError):
            await task
        await remote.close()
