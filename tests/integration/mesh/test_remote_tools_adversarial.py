"""RemoteToolset's kept listings under adversity: what the model is offered is compared with a
toolset that lists before every model request (``listing_max_age=0``, the behaviour before
listings were kept) — removed tools, callers the server tells apart, listings racing results,
a server restarted with other tools, and many users."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import InvocationContext, ReadonlyContext, ToolContext
from adk_mesh.errors import AdkError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.mesh import remote_toolset as remote_toolset_module
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, call, text
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, LlmResponse


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


def get_time(city: str) -> dict[str, Any]:
    """Local time in a city."""
    return {"city": city, "time": "12:00"}


class ServedTools(Toolset):
    """What the server serves: ``served``, plus ``extra`` for the agents named in it.

    With ``hold`` set, the next listing takes its snapshot of the tools at once and answers
    only when ``hold`` is set (a slow listing, e.g. of an MCP server, still in flight).
    """

    def __init__(self, *tools: BaseTool) -> None:
        super().__init__("served")
        self.served: list[BaseTool] = list(tools)
        self.extra: dict[str, list[BaseTool]] = {}
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        snapshot = [*self.served, *self.extra.get(ctx.agent_name, [])]
        hold, self.hold = self.hold, None
        if hold is not None:
            self.held.set()
            await hold.wait()
        return snapshot


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, ServedTools]]:
    tools = ServedTools(FunctionTool(get_weather), FunctionTool(get_time))
    server = ToolServer(tools)
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}", tools
    await server.stop(None)


def calling(tool: str) -> Callable[[LlmRequest], LlmResponse]:
    """A model that calls ``tool`` once per turn, then answers."""

    def script(request: LlmRequest) -> LlmResponse:
        if request.contents[-1].role == "user":
            return call(tool, {"city": "Paris"})
        return text("done")

    return script


def runner_of(
    model: FunctionModel,
    toolset: RemoteToolset,
    *,
    name: str = "agent",
    sessions: InMemorySessionService | None = None,
) -> Runner:
    """A Runner of the agent ``name``, whose ``model`` is offered the tools of ``toolset``."""
    return Runner(
        agent=LlmAgent(name=name, model=model, tools=[toolset]),
        app_name="app",
        session_service=InMemorySessionService() if sessions is None else sessions,
    )


async def turn(runner: Runner, user_id: str = "u") -> None:
    session = await runner.session_service.create_session(app_name="app", user_id=user_id)
    message = Content.from_text("user", "Paris?")
    async for _ in runner.run(user_id=user_id, session_id=session.id, new_message=message):
        pass


def offered(model: FunctionModel) -> list[list[str]]:
    return [sorted(tool.name for tool in request.tools) for request in model.requests]


def tool_responses(model: FunctionModel) -> list[dict[str, Any]]:
    found = []
    for request in model.requests:
        for content in request.contents:
            for part in content.parts:
                if part.function_response is not None:
                    found.append(dict(part.function_response.response))
    return found


@pytest.mark.parametrize("max_age", [0.0, 60.0])
async def test_a_tool_removed_and_then_called_is_no_longer_offered_in_that_turn(
    served: tuple[str, ServedTools], max_age: float
) -> None:
    """The model calls a tool the server no longer has (the kept listing still offered it):
    it reads a ToolError, and the next request of the turn no longer offers the tool, as when
    the listing is asked before every request."""
    target, server_tools = served
    toolset = RemoteToolset(target, tls=None, listing_max_age=max_age)
    model = FunctionModel(calling("get_time"))
    runner = runner_of(model, toolset)
    try:
        await turn(runner)
        server_tools.served = [FunctionTool(get_weather)]
        model.requests.clear()
        await turn(runner)
        responses = tool_responses(model)
        assert len(responses) == 1 and "error" in str(responses[0]).lower()
        assert "get_time" in str(responses[0])
        if max_age == 0:
            assert offered(model) == [["get_weather"], ["get_weather"]]
        else:
            # The first request had the kept listing; the call's failure sends it back.
            assert offered(model) == [["get_time", "get_weather"], ["get_weather"]]
    finally:
        await toolset.close()


@pytest.mark.parametrize("max_age", [0.0, 60.0])
async def test_one_toolset_shared_by_agents_the_server_tells_apart(
    served: tuple[str, ServedTools], max_age: float
) -> None:
    """The server lists per agent (the CallerContext names it); one RemoteToolset serves two
    agents of one user: each is offered its own listing, never the other's."""
    target, server_tools = served
    server_tools.served = [FunctionTool(get_weather)]
    server_tools.extra["planner"] = [FunctionTool(get_time)]
    toolset = RemoteToolset(target, tls=None, listing_max_age=max_age)
    sessions = InMemorySessionService()
    models = {name: FunctionModel(calling("get_weather")) for name in ("helper", "planner")}
    runners = {
        name: runner_of(model, toolset, name=name, sessions=sessions)
        for name, model in models.items()
    }
    try:
        for name in ("helper", "planner", "helper", "planner"):
            await turn(runners[name])
        assert offered(models["helper"]) == [["get_weather"]] * 4
        assert offered(models["planner"]) == [["get_time", "get_weather"]] * 4
    finally:
        await toolset.close()


def _context(user_id: str = "u", agent: str = "agent") -> ToolContext:
    agent_obj = LlmAgent(name=agent, model=FunctionModel(calling("get_weather")))
    invocation = InvocationContext(
        invocation_id="e-1",
        agent=agent_obj,
        session=Session(id="s-1", app_name="app", user_id=user_id, state={}),
    )
    return ToolContext(invocation, function_call_id="c-1")


async def test_a_listing_asked_before_a_change_does_not_hide_a_newer_one(
    served: tuple[str, ServedTools],
) -> None:
    """Turn A's listing is in flight with the old tools while turn B lists the new ones and
    calls one (its result confirms the new version); A's answer, arriving last, must not put
    the old tools back for B's next model request."""
    target, server_tools = served
    server_tools.served = [FunctionTool(get_weather)]
    toolset = RemoteToolset(target, tls=None)
    ctx = _context()
    try:
        release = server_tools.hold = asyncio.Event()
        slow = asyncio.create_task(toolset.tools(ctx))
        await server_tools.held.wait()  # A's listing took its snapshot: get_weather only
        server_tools.served = [FunctionTool(get_weather), FunctionTool(get_time)]
        b_tools = await toolset.tools(ctx)
        assert sorted(tool.name for tool in b_tools) == ["get_time", "get_weather"]
        weather = next(tool for tool in b_tools if tool.name == "get_weather")
        assert await weather.execute(ctx, {"city": "Paris"}) == {"city": "Paris", "temp_c": 22}
        release.set()
        await slow
        after = await toolset.tools(ctx)
        assert sorted(tool.name for tool in after) == ["get_time", "get_weather"]
    finally:
        await toolset.close()


async def test_a_result_naming_a_new_version_while_a_listing_is_in_flight(
    served: tuple[str, ServedTools],
) -> None:
    """The kept listing is refreshed (expired); while that listing is in flight with the old
    tools, a call's result names the new version: the old answer is not kept as fresh."""
    target, server_tools = served
    server_tools.served = [FunctionTool(get_weather)]
    toolset = RemoteToolset(target, tls=None)
    ctx = _context()
    try:
        (weather,) = await toolset.tools(ctx)
        toolset.listing_max_age = 0  # the kept listing has expired: the next request lists
        release = server_tools.hold = asyncio.Event()
        slow = asyncio.create_task(toolset.tools(ctx))
        await server_tools.held.wait()  # the refresh took its snapshot: get_weather only
        toolset.listing_max_age = 60
        server_tools.served = [FunctionTool(get_weather), FunctionTool(get_time)]
        await weather.execute(ctx, {"city": "Paris"})  # its result names the new version
        release.set()
        await slow
        after = await toolset.tools(ctx)
        assert sorted(tool.name for tool in after) == ["get_time", "get_weather"]
    finally:
        await toolset.close()


async def test_a_server_restarted_with_other_tools_on_the_same_port() -> None:
    """Versions are digests of the declarations, not counters: a restarted server (or another
    replica) with other tools names another version, the same tools the same one."""
    first = ToolServer([FunctionTool(get_weather), FunctionTool(get_time)])
    port = await first.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}", tls=None)
    ctx = _context()
    try:
        tools = await toolset.tools(ctx)
        await first.stop(None)
        # Down: the kept listing is still offered; a call fails as an error the model reads.
        assert [tool.name for tool in await toolset.tools(ctx)] == ["get_weather", "get_time"]
        with pytest.raises(Exception) as failed:
            await tools[0].execute(ctx, {"city": "Paris"})
        assert "127.0.0.1" not in str(failed.value)
        # Back with the same tools: the kept listing stays good, calls reuse it.
        second = ToolServer([FunctionTool(get_weather), FunctionTool(get_time)])
        assert await second.start(f"127.0.0.1:{port}") == port
        assert toolset._channel is not None
        await toolset._channel.channel_ready()  # past gRPC's reconnect backoff
        assert await tools[0].execute(ctx, {"city": "Paris"}) == {"city": "Paris", "temp_c": 22}
        kept = await toolset.tools(ctx)  # (a copy of the kept listing: the caller's to change)
        assert len(kept) == len(tools) and all(a is b for a, b in zip(kept, tools, strict=True))
        await second.stop(None)
        # Back with get_time redeclared (another schema, same name): seen after a call.

        def zoned_time(city: str, zone: str) -> dict[str, Any]:
            """Local time in a city, in a time zone."""
            return {"city": city, "zone": zone, "time": "12:00"}

        zoned = FunctionTool(zoned_time, name="get_time")
        third = ToolServer([FunctionTool(get_weather), zoned])
        assert await third.start(f"127.0.0.1:{port}") == port
        await toolset._channel.channel_ready()
        try:
            await tools[0].execute(ctx, {"city": "Paris"})
            renewed = {tool.name: tool for tool in await toolset.tools(ctx)}
            schema = renewed["get_time"].parameters_schema
            assert schema is not None and "zone" in schema["properties"]
        finally:
            await third.stop(None)
    finally:
        await toolset.close()


async def test_a_call_to_a_tool_the_server_no_longer_has_fails_and_is_listed_again(
    served: tuple[str, ServedTools],
) -> None:
    target, server_tools = served
    toolset = RemoteToolset(target, tls=None)
    ctx = _context()
    try:
        tools = {tool.name: tool for tool in await toolset.tools(ctx)}
        server_tools.served = [FunctionTool(get_weather)]
        with pytest.raises(AdkError, match="get_time"):
            await tools["get_time"].execute(ctx, {"city": "Paris"})
        assert [tool.name for tool in await toolset.tools(ctx)] == ["get_weather"]
    finally:
        await toolset.close()


async def test_kept_listings_are_bounded(
    served: tuple[str, ServedTools], monkeypatch: pytest.MonkeyPatch
) -> None:
    target, _ = served
    monkeypatch.setattr(remote_toolset_module, "MAX_KEPT_LISTINGS", 3)
    toolset = RemoteToolset(target, tls=None)
    try:
        for user in range(10):
            await toolset.tools(_context(f"user-{user}"))
        assert len(toolset._listings) == 3
    finally:
        await toolset.close()


@pytest.mark.parametrize("max_age", [0.0, 60.0])
async def test_a_tool_that_changes_the_listing_is_followed_in_its_turn(
    served: tuple[str, ServedTools], max_age: float
) -> None:
    """A tool whose call adds tools (a login that unlocks more, an MCP server announcing
    list changes): the next request of the same turn offers them, as when the listing is
    asked before every request — the result names the listing after the call."""
    target, server_tools = served

    def unlock(city: str) -> dict[str, Any]:
        """Unlocks the time tool for a city."""
        server_tools.served.append(FunctionTool(get_time))
        return {"unlocked": city}

    server_tools.served = [FunctionTool(get_weather), FunctionTool(unlock)]
    toolset = RemoteToolset(target, tls=None, listing_max_age=max_age)
    model = FunctionModel(calling("unlock"))
    runner = runner_of(model, toolset)
    try:
        await turn(runner)
        assert offered(model) == [
            ["get_weather", "unlock"],
            ["get_time", "get_weather", "unlock"],
        ]
    finally:
        await toolset.close()
