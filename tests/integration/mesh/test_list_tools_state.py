"""A served Toolset lists with the caller's readonly state, as in process (google-adk's
``BaseToolset.get_tools(readonly_context)`` and its ``tool_filter`` predicate read
``readonly_context.state``); a listing that read it is asked again before each model request,
one that did not is kept (one RPC per remote tool call in steady state)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ReadonlyContext, ToolContext
from adk_mesh.errors import ToolError
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, open_channel
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


def get_tide(city: str) -> dict[str, Any]:
    """Tide in a city."""
    return {"city": city, "tide": "high"}


def unlock(tool_context: ToolContext) -> dict[str, Any]:
    """Unlock the tide tool."""
    tool_context.state["unlocked"] = True
    return {"unlocked": True}


def unlock_here(tool_context: ToolContext) -> dict[str, Any]:
    """Unlock the tide tool (a tool of the calling agent, not of the tool service)."""
    tool_context.state["unlocked"] = True
    return {"unlocked": True}


class StateFilteredToolset(Toolset):
    """get_weather and unlock for everyone, get_tide once the state says so: a tool_filter
    predicate on ``readonly_context.state``, as google-adk's toolsets take."""

    def __init__(self) -> None:
        super().__init__("state_filtered")
        self.weather = FunctionTool(get_weather)
        self.unlock = FunctionTool(unlock)
        self.tide = FunctionTool(get_tide)

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        candidates = [self.weather, self.unlock, self.tide]
        return [tool for tool in candidates if self._selected(tool, ctx)]

    def _selected(self, tool: BaseTool, ctx: ReadonlyContext) -> bool:
        if tool is self.tide:
            return bool(ctx.state.get("unlocked")) or ctx.state.get("user:tier") == "pro"
        return True


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
async def served() -> AsyncIterator[str]:
    server = ToolServer(StateFilteredToolset())
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await server.stop(None)


@pytest.fixture
async def served_plain() -> AsyncIterator[str]:
    server = ToolServer([FunctionTool(get_weather)])
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await server.stop(None)


def script(*calls: str) -> FunctionModel:
    """A model that calls ``calls`` one per request, in order, then answers."""

    def respond(request: LlmRequest) -> LlmResponse:
        made = sum(
            1
            for content in request.contents
            for part in content.parts
            if part.function_call is not None
        )
        if made < len(calls):
            name = calls[made]
            return call(name, {"city": "Brest"} if name.startswith("get_") else {})
        return text("done")

    return FunctionModel(respond)


async def run_turn(
    tools: list[BaseTool | Toolset], model: FunctionModel, state: dict[str, Any] | None = None
) -> list[list[str]]:
    """One turn of an agent with ``tools``; the tools offered at each model request."""
    agent = LlmAgent(name="sailor", model=model, tools=tools)
    runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u", state=state)
    message = Content.from_text("user", "Tide in Brest?")
    async for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
        pass
    return [sorted(tool.name for tool in request.tools) for request in model.requests]


async def test_a_served_toolset_sees_the_callers_state_when_listing(served: str) -> None:
    in_process = await run_turn([StateFilteredToolset()], script(), {"user:tier": "pro"})
    remote = RemoteToolset(served, tls=None)
    try:
        across = await run_turn([remote], script(), {"user:tier": "pro"})
    finally:
        await remote.close()
    assert in_process == across == [["get_tide", "get_weather", "unlock"]]


async def test_a_state_change_by_a_served_tool_is_listed_at_the_next_request(
    served: str,
) -> None:
    in_process = await run_turn([StateFilteredToolset()], script("unlock", "get_tide"))
    remote = CountingToolset(served, tls=None)
    try:
        across = await run_turn([remote], script("unlock", "get_tide"))
    finally:
        await remote.close()
    before, after = ["get_weather", "unlock"], ["get_tide", "get_weather", "unlock"]
    assert in_process == across == [before, after, after]
    # The listing read the state: asked with it before each model request.
    assert remote.counts == {"ListTools": 3, "CallToolInteractive": 2}


async def test_a_state_change_made_elsewhere_is_listed_at_the_next_request(
    served: str,
) -> None:
    """No result of this server names a new version: the state alone changed the listing."""
    local = FunctionTool(unlock_here)
    in_process = await run_turn([StateFilteredToolset(), local], script("unlock_here"))
    remote = RemoteToolset(served, tls=None)
    try:
        across = await run_turn([remote, local], script("unlock_here"))
    finally:
        await remote.close()
    assert in_process == across
    assert across[-1] == ["get_tide", "get_weather", "unlock", "unlock_here"]


async def test_a_listing_that_reads_no_state_is_kept(served_plain: str) -> None:
    remote = CountingToolset(served_plain, tls=None)
    try:
        for _ in range(3):
            await run_turn([remote], script("get_weather"), {"user:tier": "pro"})
        assert remote.counts == {"ListTools": 1, "CallToolInteractive": 3}
    finally:
        await remote.close()


async def test_the_listing_response_says_whether_it_read_the_state(
    served: str, served_plain: str
) -> None:
    caller = tool_pb2.CallerContext(app_name="app", user_id="u")
    request = tool_pb2.ListToolsRequest(context=caller)
    request.state["user:tier"].string_value = "pro"
    for target, reads_state, names in (
        (served, True, ["get_weather", "unlock", "get_tide"]),
        (served_plain, False, ["get_weather"]),
    ):
        async with open_channel(target, tls=None) as channel:
            listed = await tool_pb2_grpc.ToolServiceStub(channel).ListTools(request)
        assert listed.depends_on_state is reads_state
        assert [tool.name for tool in listed.tools] == names


async def test_state_the_wire_cannot_carry_is_left_out_of_a_listing(served: str) -> None:
    """As with a call: an integer beyond +-2**53 (valid state) is left out, the rest goes,
    deep values as JSON text."""
    deep: Any = "bottom"
    for _ in range(120):
        deep = [deep]
    state = {"temp:huge": 2**60, "user:tier": "pro", "deep": deep}
    remote = RemoteToolset(served, tls=None)
    try:
        across = await run_turn([remote], script(), state)
    finally:
        await remote.close()
    assert across == [["get_tide", "get_weather", "unlock"]]


async def test_a_state_too_large_for_a_listing(served: str, served_plain: str) -> None:
    """A state over the message limit goes to no listing: a toolset that does not read it
    lists as before; one that does cannot list right, a ToolError says why."""
    state = {"blob": "x" * (MAX_MESSAGE_BYTES + 1024)}
    plain = RemoteToolset(served_plain, tls=None)
    try:
        assert await run_turn([plain], script(), state) == [["get_weather"]]
    finally:
        await plain.close()
    filtered = RemoteToolset(served, tls=None)
    try:
        with pytest.raises(ToolError, match="state") as raised:
            await run_turn([filtered], script(), state)
        assert "message limit" in raised.value.message
    finally:
        await filtered.close()


async def test_a_remote_toolset_served_again_reads_the_state_only_when_its_server_does(
    served: str, served_plain: str
) -> None:
    """A ToolServer fronting a RemoteToolset passes the state on and says its listing depends
    on it exactly when the server behind says so."""
    caller = tool_pb2.CallerContext(app_name="app", user_id="u", agent_name="sailor")
    request = tool_pb2.ListToolsRequest(context=caller)
    request.state["user:tier"].string_value = "pro"
    for target, reads_state, names in (
        (served, True, ["get_weather", "unlock", "get_tide"]),
        (served_plain, False, ["get_weather"]),
    ):
        front = ToolServer(RemoteToolset(target, tls=None))
        port = await front.start("127.0.0.1:0")
        try:
            async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
                listed = await tool_pb2_grpc.ToolServiceStub(channel).ListTools(request)
        finally:
            await front.stop(None)
        assert listed.depends_on_state is reads_state
        assert [tool.name for tool in listed.tools] == names
