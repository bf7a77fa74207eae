"""RemoteToolset keeps the server's tools listing: one RPC per remote tool call in steady state,
and a listing that changed on the server is seen at the next model request after a call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ReadonlyContext
from adk_mesh.errors import ConfigError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, call, text
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, LlmResponse
from adk_mesh.v1 import tool_pb2, tool_pb2_grpc


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


def get_time(city: str) -> dict[str, Any]:
    """Local time in a city."""
    return {"city": city, "time": "12:00"}


def get_tide(city: str) -> dict[str, Any]:
    """Tide in a city."""
    return {"city": city, "tide": "high"}


class ChangingToolset(Toolset):
    """The tools a test adds and removes while the server runs; ``admin`` also gets get_tide."""

    def __init__(self) -> None:
        super().__init__("changing")
        self.served: list[BaseTool] = [FunctionTool(get_weather)]
        self.tide = FunctionTool(get_tide)

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        return [*self.served, self.tide] if ctx.user_id == "admin" else list(self.served)


class CountingToolset(RemoteToolset):
    """Counts the RPCs its tools and listings make, by method."""

    counts: dict[str, int]

    def _stub(self) -> Any:
        stub = super()._stub()
        counts = self.counts = getattr(self, "counts", {})

        class Counted:
            def __getattr__(self, method: str) -> Any:
                inner = getattr(stub, method)

                def counted(*args: Any, **kwargs: Any) -> Any:
                    counts[method] = counts.get(method, 0) + 1
                    return inner(*args, **kwargs)

                return counted

        return Counted()


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, ChangingToolset]]:
    toolset = ChangingToolset()
    server = ToolServer(toolset)
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}", toolset
    await server.stop(None)


def weather_script(request: LlmRequest) -> LlmResponse:
    """Calls get_weather once per turn, then answers."""
    if request.contents[-1].role == "user":
        return call("get_weather", {"city": "Paris"})
    return text("22 °C")


async def turn(runner: Runner, user_id: str = "u") -> None:
    session = await runner.session_service.create_session(app_name="app", user_id=user_id)
    message = Content.from_text("user", "Weather in Paris?")
    async for _ in runner.run(user_id=user_id, session_id=session.id, new_message=message):
        pass


def runner_with(toolset: RemoteToolset, model: FunctionModel) -> Runner:
    agent = LlmAgent(name="weather", model=model, tools=[toolset])
    return Runner(agent=agent, app_name="app", session_service=InMemorySessionService())


async def test_a_one_tool_turn_is_one_rpc_once_the_listing_is_kept(
    served: tuple[str, ChangingToolset],
) -> None:
    target, _ = served
    toolset = CountingToolset(target, tls=None)
    runner = runner_with(toolset, FunctionModel(weather_script))
    try:
        await turn(runner)
        assert toolset.counts == {"ListTools": 1, "CallToolInteractive": 1}
        for _ in range(3):
            await turn(runner)
        assert toolset.counts == {"ListTools": 1, "CallToolInteractive": 4}
    finally:
        await toolset.close()


async def test_a_tool_added_on_the_server_is_seen_in_the_turn_that_calls_a_tool(
    served: tuple[str, ChangingToolset],
) -> None:
    target, server_tools = served
    model = FunctionModel(weather_script)
    toolset = CountingToolset(target, tls=None)
    runner = runner_with(toolset, model)
    try:
        await turn(runner)
        server_tools.served.append(FunctionTool(get_time))
        model.requests.clear()
        await turn(runner)
        offered = [[tool.name for tool in request.tools] for request in model.requests]
        # The first request still has the kept listing; the call's result names another
        # version, so the request after it is asked with the new listing.
        assert offered == [["get_weather"], ["get_weather", "get_time"]]
        assert toolset.counts["ListTools"] == 2
        # Removed again: seen the same way, and a turn later the listing is kept again.
        server_tools.served.pop()
        model.requests.clear()
        await turn(runner)
        await turn(runner)
        offered = [[tool.name for tool in request.tools] for request in model.requests]
        assert offered[1:] == [["get_weather"]] * 3
        assert toolset.counts["ListTools"] == 3
    finally:
        await toolset.close()


async def test_each_user_has_a_listing_of_their_own(served: tuple[str, ChangingToolset]) -> None:
    target, _ = served
    model = FunctionModel(weather_script)
    toolset = CountingToolset(target, tls=None)
    runner = runner_with(toolset, model)
    try:
        await turn(runner, "admin")
        await turn(runner, "bob")
        await turn(runner, "admin")
        offered = [sorted(tool.name for tool in request.tools) for request in model.requests]
        assert offered[0] == offered[4] == ["get_tide", "get_weather"]
        assert offered[2] == ["get_weather"]
        assert toolset.counts["ListTools"] == 2
    finally:
        await toolset.close()


async def test_listing_max_age_zero_lists_before_every_model_request(
    served: tuple[str, ChangingToolset],
) -> None:
    target, _ = served
    toolset = CountingToolset(target, tls=None, listing_max_age=0)
    runner = runner_with(toolset, FunctionModel(weather_script))
    try:
        await turn(runner)
        await turn(runner)
        assert toolset.counts == {"ListTools": 4, "CallToolInteractive": 2}
    finally:
        await toolset.close()
    with pytest.raises(ConfigError, match="listing_max_age"):
        RemoteToolset(target, listing_max_age=-1)


async def test_listing_versions_follow_the_declarations(
    served: tuple[str, ChangingToolset],
) -> None:
    target, server_tools = served
    context = tool_pb2.CallerContext(app_name="app", user_id="u")
    async with open_channel(target, tls=None) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)

        async def version() -> str:
            listed = await stub.ListTools(tool_pb2.ListToolsRequest(context=context))
            return str(listed.listing_version)

        first = await version()
        assert first and first == await version()
        server_tools.served.append(FunctionTool(get_time))
        second = await version()
        assert second != first
        # The same declarations from new tool objects: the same version.
        server_tools.served = [FunctionTool(get_weather), FunctionTool(get_time)]
        assert await version() == second
        # Every result carries the version of the caller's listing.
        request = tool_pb2.CallToolRequest(context=context, tool_name="get_time")
        request.args.update({"city": "Paris"})
        responses = [response async for response in stub.CallTool(request)]
        assert responses[-1].result.listing_version == second
