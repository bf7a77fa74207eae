"""ToolServer and RemoteToolset over real gRPC servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext, ReadonlyContext, ToolContext
from adk_mesh.errors import AdkIOError, ConfigError, ToolError, ToolNotFoundError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, Part, ToolProgress
from adk_mesh.v1 import tool_pb2, tool_pb2_grpc


async def book_trip(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """Book a trip to a city."""
    await tool_context.report_progress("searching", {"city": city}, 0.5)
    traveller = tool_context.state.get("user:name", "nobody")
    tool_context.state["trip"] = city
    tool_context.state["user:last_city"] = city
    tool_context.actions.skip_summarization = True
    return {"booked": city, "for": traveller}


async def broken(city: str) -> dict[str, Any]:
    """Always fails."""
    raise ToolError(f"no flights to {city}")


def hand_off(reason: str, tool_context: ToolContext) -> dict[str, Any]:
    """Hand the conversation over."""
    tool_context.actions.transfer_to_agent = "desk"
    tool_context.actions.escalate = True
    tool_context.actions.artifact_delta["note.txt"] = 2
    return {"reason": reason}


class PermissionToolset(Toolset):
    """``admin_reset`` only for the user ``admin``."""

    def __init__(self) -> None:
        super().__init__("permissions")
        self.public = FunctionTool(book_trip)
        self.admin = FunctionTool(broken, name="admin_reset")

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        return [self.public, self.admin] if ctx.user_id == "admin" else [self.public]


@pytest.fixture
async def target() -> AsyncIterator[str]:
    server = ToolServer(
        [FunctionTool(book_trip), FunctionTool(broken), FunctionTool(hand_off)], name="travel"
    )
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await server.stop(None)


@pytest.fixture
async def permission_target() -> AsyncIterator[str]:
    server = ToolServer(PermissionToolset())
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await server.stop(None)


async def run_turn(
    agent: LlmAgent, text: str, state: dict[str, Any] | None = None
) -> tuple[list[Event], Session]:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u1", state=state)
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


def readonly_for(user_id: str) -> ReadonlyContext:
    agent = LlmAgent(name="caller", model=ScriptedModel([]))
    session = Session(id="s1", app_name="app", user_id=user_id)
    return ReadonlyContext(InvocationContext(invocation_id="e-1", agent=agent, session=session))


async def test_tool_call_streams_progress_and_lands_actions_on_the_session(target: str) -> None:
    toolset = RemoteToolset(target)
    model = ScriptedModel([call("book_trip", {"city": "Lisbon"})])
    agent = LlmAgent(name="caller", model=model, tools=[toolset])
    try:
        events, session = await run_turn(agent, "book", state={"user:name": "Ana"})
    finally:
        await toolset.close()

    progress = [e for e in events if e.partial]
    assert [e.tool_progress for e in progress] == [
        ToolProgress(
            tool_name="book_trip",
            function_call_id=events[0].function_calls()[0].id,
            message="searching",
            fraction=0.5,
            data={"city": "Lisbon"},
        )
    ]
    assert [e.text for e in progress] == [""]
    final = [e for e in events if not e.partial]
    response = final[-1].function_responses()[0]
    assert response.response == {"booked": "Lisbon", "for": "Ana"}
    assert final[-1].actions.state_delta == {"trip": "Lisbon", "user:last_city": "Lisbon"}
    assert final[-1].actions.skip_summarization
    assert session.state["trip"] == "Lisbon"
    assert session.state["user:last_city"] == "Lisbon"
    model.assert_consumed()


async def test_list_tools_gives_the_server_declarations(target: str) -> None:
    toolset = RemoteToolset(target)
    try:
        tools = await toolset.tools(readonly_for("u1"))
    finally:
        await toolset.close()
    assert {tool.name for tool in tools} == {"book_trip", "broken", "hand_off"}
    local = FunctionTool(book_trip).declaration()
    remote = next(tool for tool in tools if tool.name == "book_trip").declaration()
    assert remote == local


async def test_permission_toolset_answers_per_user(permission_target: str) -> None:
    toolset = RemoteToolset(permission_target)
    try:
        admin_tools = await toolset.tools(readonly_for("admin"))
        user_tools = await toolset.tools(readonly_for("bob"))
    finally:
        await toolset.close()
    assert sorted(t.name for t in admin_tools) == ["admin_reset", "book_trip"]
    assert [t.name for t in user_tools] == ["book_trip"]


async def test_calling_a_tool_the_user_may_not_see_is_not_found(permission_target: str) -> None:
    async with open_channel(permission_target) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        request = tool_pb2.CallToolRequest(
            context=tool_pb2.CallerContext(app_name="app", user_id="bob"),
            tool_name="admin_reset",
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in stub.CallTool(request):
                pass
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    error = error_from_rpc_error(raised.value)
    assert isinstance(error, ToolNotFoundError)
    assert "'admin_reset'" in error.message and "book_trip" in error.message


async def test_empty_tool_name_is_invalid_argument(target: str) -> None:
    async with open_channel(target) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for _ in stub.CallTool(tool_pb2.CallToolRequest()):
                pass
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tool_name" in (raised.value.details() or "")


async def test_remote_tool_error_reaches_the_model_as_an_error_response(target: str) -> None:
    toolset = RemoteToolset(target)
    model = ScriptedModel([call("broken", {"city": "Atlantis"}), "sorry"])
    agent = LlmAgent(name="caller", model=model, tools=[toolset])
    try:
        events, _ = await run_turn(agent, "book")
    finally:
        await toolset.close()
    response = events[-2].function_responses()[0]
    assert response.response == {"error": "no flights to Atlantis"}
    assert events[-1].text == "sorry"
    model.assert_consumed()


async def test_remote_tool_raises_the_same_error_class(target: str) -> None:
    toolset = RemoteToolset(target)
    try:
        tools = {tool.name: tool for tool in await toolset.tools(readonly_for("u1"))}
        ctx = ToolContext(readonly_for("u1").invocation_context)
        with pytest.raises(ToolError, match="no flights to Atlantis"):
            await tools["broken"].execute(ctx, {"city": "Atlantis"})
    finally:
        await toolset.close()


async def test_a_dead_tool_service_fails_fast_with_io_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = ToolServer([FunctionTool(book_trip)])
    port = await server.start("127.0.0.1:0")
    await server.stop(None)
    toolset = RemoteToolset(f"127.0.0.1:{port}", list_timeout=5)
    try:
        with pytest.raises(AdkIOError, match=r"^tool service: unavailable$"):
            await toolset.tools(readonly_for("u1"))
    finally:
        await toolset.close()
    # The address is for this service's operators, in its log; not in the error.
    assert any(f"127.0.0.1:{port}" in record.getMessage() for record in caplog.records)


async def test_remote_control_actions_land_on_the_callers_context(target: str) -> None:
    toolset = RemoteToolset(target)
    try:
        tools = {tool.name: tool for tool in await toolset.tools(readonly_for("u1"))}
        ctx = ToolContext(readonly_for("u1").invocation_context, function_call_id="c-1")
        response = await tools["hand_off"].execute(ctx, {"reason": "busy"})
    finally:
        await toolset.close()
    assert response == {"reason": "busy"}
    assert ctx.actions.transfer_to_agent == "desk"
    assert ctx.actions.escalate
    assert ctx.actions.artifact_delta == {"note.txt": 2}


async def test_a_tool_call_to_a_dead_service_fails_fast_with_io_error() -> None:
    server = ToolServer([FunctionTool(book_trip)])
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}", call_timeout=5)
    try:
        tools = await toolset.tools(readonly_for("u1"))
        await server.stop(None)
        ctx = ToolContext(readonly_for("u1").invocation_context)
        with pytest.raises(AdkIOError, match="tool service"):
            await tools[0].execute(ctx, {"city": "Rome"})
    finally:
        await toolset.close()


async def test_the_drain_gate_counts_an_interactive_call_and_refuses_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CallToolInteractive in flight is waited for on shutdown like any call; once the server
    drains, a new one is refused as UNAVAILABLE, once its first message came (a grpc.aio client
    whose first write is under way when the status arrives reports INTERNAL instead)."""
    monkeypatch.setattr("adk_mesh.mesh._status.FIRST_MESSAGE_WAIT", 10.0)
    started = asyncio.Event()
    release = asyncio.Event()

    async def wait_for_it(tool_context: ToolContext) -> dict[str, Any]:
        """Wait until released, then save an artifact of the caller."""
        started.set()
        await release.wait()
        return {"version": await tool_context.save_artifact("out.txt", Part.from_text("x"))}

    server = ToolServer([FunctionTool(wait_for_it)])
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    artifacts = InMemoryArtifactService()
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="app", user_id="u")
    agent = LlmAgent(
        name="agent", model=ScriptedModel([call("wait_for_it"), "done"]), tools=[toolset]
    )
    runner = Runner(
        agent=agent, app_name="app", session_service=sessions, artifact_service=artifacts
    )

    async def turn() -> list[Event]:
        message = Content.from_text("user", "go")
        return [
            e async for e in runner.run(user_id="u", session_id=session.id, new_message=message)
        ]

    try:
        running = asyncio.ensure_future(turn())
        await started.wait()
        assert server._gate.in_flight == 1
        server._gate.close()
        async with open_channel(f"127.0.0.1:{port}") as channel:
            call_ = tool_pb2_grpc.ToolServiceStub(channel).CallToolInteractive(timeout=10)
            await asyncio.sleep(0.3)
            assert not call_.done()  # the refusal waits for the first message
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call_.write(
                    tool_pb2.CallToolInteractiveRequest(
                        call=tool_pb2.CallToolRequest(tool_name="wait_for_it")
                    )
                )
                [_ async for _ in call_]
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        release.set()
        events = await running
        assert await server._gate.wait_idle(5)
    finally:
        await toolset.close()
        await server.stop(None)
    responses = [r.response for e in events for r in e.function_responses()]
    assert responses == [{"version": 1}]
    assert await artifacts.list_artifact_keys(
        app_name="app", user_id="u", session_id=session.id
    ) == ["out.txt"]


def _double(value: int) -> dict[str, int]:
    """Twice the value."""
    return {"doubled": value * 2}


async def test_a_plain_function_is_served_as_a_function_tool() -> None:
    """As an LlmAgent's tools and `adk-mesh serve tools` take them: ToolServer([fn]) was
    accepted, then every ListTools failed with INTERNAL ('function' object has no attribute
    'is_builtin')."""
    server = ToolServer([_double])
    port = await server.start("127.0.0.1:0")
    try:
        toolset = RemoteToolset(f"127.0.0.1:{port}")
        agent = LlmAgent(
            name="doubler",
            model=ScriptedModel([call("_double", {"value": 21}), "done"]),
            tools=[toolset],
        )
        service = InMemorySessionService()
        runner = Runner(agent=agent, app_name="app", session_service=service)
        session = await service.create_session(app_name="app", user_id="u")
        events = [
            event
            async for event in runner.run(
                user_id="u", session_id=session.id, new_message=Content.from_text("user", "go")
            )
        ]
        await toolset.close()
    finally:
        await server.stop(None)
    (response,) = [r for event in events for r in event.function_responses()]
    assert response.response == {"doubled": 42}


def test_a_tool_service_refuses_what_is_no_tool_when_made() -> None:
    with pytest.raises(ConfigError, match="item 1 of tool service"):
        ToolServer([_double, 42])  # type: ignore[list-item]
