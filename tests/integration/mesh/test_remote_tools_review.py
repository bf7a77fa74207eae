"""A tool behind a ToolServer behaves for the calling agent as the same tool in process: each
case plays one turn with the tool in process and with it served (real ToolServer on 127.0.0.1,
port 0, reached through a RemoteToolset) and compares what the model read and what the
session kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import CallbackContext, ReadonlyContext, ToolContext
from adk_mesh.errors import ArtifactError, ConfigError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, open_channel
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, call, text
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, LlmResponse, Part
from adk_mesh.v1 import tool_pb2, tool_pb2_grpc

WHERE = ["in_process", "served"]


@dataclass
class Outcome:
    """What one turn left: the function responses the model read (by tool name) and the
    session's state once the turn was stored."""

    responses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)


def calling(name: str, args: dict[str, Any] | None = None) -> Callable[[LlmRequest], LlmResponse]:
    """A model that calls ``name`` once, then answers."""

    def script(request: LlmRequest) -> LlmResponse:
        if request.contents[-1].role == "user":
            return call(name, args or {})
        return text("done")

    return script


async def play(
    where: str,
    tools: list[BaseTool],
    script: Callable[[LlmRequest], LlmResponse],
    *,
    state: dict[str, Any] | None = None,
    before_agent: Callable[[CallbackContext], Any] | None = None,
) -> Outcome:
    """One turn of an agent whose ``tools`` run ``where``."""
    server: ToolServer | None = None
    toolset: RemoteToolset | None = None
    agent_tools: list[Any] = list(tools)
    if where == "served":
        server = ToolServer(tools)
        toolset = RemoteToolset(f"127.0.0.1:{await server.start('127.0.0.1:0')}")
        agent_tools = [toolset]
    model = FunctionModel(script)
    agent = LlmAgent(
        name="agent", model=model, tools=agent_tools, before_agent_callback=before_agent
    )
    sessions = InMemorySessionService()
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=sessions,
        artifact_service=InMemoryArtifactService(),
    )
    session = await sessions.create_session(app_name="app", user_id="u", state=state)
    outcome = Outcome()
    try:
        async for event in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", "go")
        ):
            outcome.responses.extend(
                (response.name, dict(response.response)) for response in event.function_responses()
            )
    finally:
        if toolset is not None:
            await toolset.close()
        if server is not None:
            await server.stop(None)
    stored = await sessions.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None
    outcome.state = dict(stored.state)
    return outcome


async def in_process_and_served(
    tools: list[BaseTool], script: Callable[[LlmRequest], LlmResponse], **kwargs: Any
) -> tuple[Outcome, Outcome]:
    return (
        await play("in_process", tools, script, **kwargs),
        await play("served", tools, script, **kwargs),
    )


# --- the caller's state ---------------------------------------------------------------------


def read_count(tool_context: ToolContext) -> dict[str, Any]:
    """Reads the count and counts one more."""
    tool_context.state["count"] = tool_context.state["count"] + 1
    return {"count": tool_context.state["count"]}


async def keep_a_clock(callback_context: CallbackContext) -> None:
    # What temp: keys are for: a value of this invocation only, never stored, any object.
    callback_context.state["temp:clock"] = object()


async def test_a_state_value_the_wire_cannot_carry_does_not_fail_every_remote_tool() -> None:
    """A 64-bit id in the user's state (valid state: the stores keep it) and an object in a
    temp: key failed every call of every served tool (the whole state goes with a call, and
    the wire carries neither), where the tool in process reads the state it needs."""
    tools: list[BaseTool] = [FunctionTool(read_count)]
    local, served = await in_process_and_served(
        tools,
        calling("read_count"),
        state={"count": 1, "user:account_id": 2**60},
        before_agent=keep_a_clock,
    )
    assert local.responses == [("read_count", {"count": 2})]
    assert served == local


# --- what cannot cross: clear errors instead of INTERNAL -------------------------------------


def summarize(tool_context: ToolContext) -> dict[str, Any]:
    """Summarizes the document."""
    return {"chars": len(tool_context.state["document"])}


async def test_a_call_larger_than_a_message_reads_as_a_tool_error_that_says_why() -> None:
    """The state goes whole with every call: one larger than the mesh's message limit failed
    as "AgentError: ... failed (INTERNAL)" (gRPC refusing to send it), which tells the model
    and the operator nothing."""
    tools: list[BaseTool] = [FunctionTool(summarize)]
    document = "x" * (MAX_MESSAGE_BYTES + 1024)
    local, served = await in_process_and_served(
        tools, calling("summarize"), state={"document": document}
    )
    assert local.responses == [("summarize", {"chars": len(document)})]
    [(name, response)] = served.responses
    assert name == "summarize"
    error = response["error"]
    assert "INTERNAL" not in error
    assert not error.startswith("AgentError")
    assert "message limit" in error
    assert "state" in error
    assert "127.0.0.1" not in error


async def load_report(tool_context: ToolContext) -> dict[str, Any]:
    """Loads the report, if it can."""
    try:
        part = await tool_context.load_artifact("report.bin")
    except ArtifactError as error:
        return {"loaded": False, "why": error.message}
    assert part is not None and part.inline_data is not None
    return {"loaded": True, "bytes": len(part.inline_data.data)}


async def save_a_large_report(callback_context: CallbackContext) -> None:
    large = Part.from_inline_data("application/octet-stream", b"r" * (MAX_MESSAGE_BYTES + 1024))
    await callback_context.save_artifact("report.bin", large)


async def test_an_artifact_larger_than_a_message_loads_as_in_process() -> None:
    """The caller answered a load with an artifact larger than a message: gRPC refused the
    answer and the whole call failed as INTERNAL; then the tool read an ArtifactError. Now the
    artifact crosses in chunks, and the remote tool loads it as it does in process
    (test_context_artifacts19 covers the protocol and its refusals)."""
    tools: list[BaseTool] = [FunctionTool(load_report)]
    local, served = await in_process_and_served(
        tools, calling("load_report"), before_agent=save_a_large_report
    )
    assert local.responses == [("load_report", {"loaded": True, "bytes": MAX_MESSAGE_BYTES + 1024})]
    assert served.responses == local.responses


# --- progress as the contract says -----------------------------------------------------------

FRACTIONS = [0.5, 7.0, -1.0, float("nan"), float("inf")]


async def report_fractions(tool_context: ToolContext) -> dict[str, Any]:
    """Reports what it has done, however it counts."""
    for fraction in FRACTIONS:
        await tool_context.report_progress("working", None, fraction)
    return {"done": True}


async def test_a_progress_fraction_reaches_a_grpc_client_within_0_and_1_as_in_process() -> None:
    """``ToolProgress.fraction`` is "completed fraction in [0, 1], when known": the ToolServer
    sent a tool's 7.0, -1 and NaN as they were to a CallTool client (a Node.js progress bar
    at 700 % or NaN), where the same tool in process reports 1.0, 0.0 and no fraction."""
    tool = FunctionTool(report_fractions)
    in_process: list[float | None] = []
    sessions = InMemorySessionService()
    runner = Runner(
        agent=LlmAgent(
            name="agent", model=FunctionModel(calling("report_fractions")), tools=[tool]
        ),
        app_name="app",
        session_service=sessions,
    )
    session = await sessions.create_session(app_name="app", user_id="u")
    async for event in runner.run(
        user_id="u", session_id=session.id, new_message=Content.from_text("user", "go")
    ):
        if event.tool_progress is not None:
            in_process.append(event.tool_progress.fraction)
    assert in_process == [0.5, 1.0, 0.0, None, 1.0]

    server = ToolServer([tool])
    port = await server.start("127.0.0.1:0")
    served: list[float | None] = []
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            stub = tool_pb2_grpc.ToolServiceStub(channel)
            request = tool_pb2.CallToolRequest(tool_name="report_fractions")
            async for response in stub.CallTool(request):
                if response.HasField("progress"):
                    progress = response.progress
                    served.append(progress.fraction if progress.HasField("fraction") else None)
    finally:
        await server.stop(None)
    assert served == in_process


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["call_timeout", "list_timeout"])
@pytest.mark.parametrize("value", [0.0, -5.0, float("nan"), float("inf")])
def test_a_timeout_that_is_not_positive_seconds_is_a_config_error_naming_it(
    setting: str, value: float
) -> None:
    """``call_timeout=math.inf`` (meant as "no bound") failed every call at run time as
    "deadline exceeded", a negative or NaN one too, and 0 meant no bound at all: a mistake
    in the wiring is a ConfigError naming the setting, when the toolset is made."""
    with pytest.raises(ConfigError, match=setting):
        RemoteToolset("127.0.0.1:1", **{setting: value})


def look_up(city: str) -> dict[str, Any]:
    """Looks a city up."""
    return {"city": city}


def look_up_again(city: str) -> dict[str, Any]:
    """Looks a city up, another way."""
    return {"city": city, "again": True}


def test_a_tool_server_with_two_tools_of_one_name_is_a_config_error_as_an_agent_is() -> None:
    """In process the agent refuses two tools of one name when it is made; served, the tool
    service started, and every caller's turn then failed with a ConfigError blaming the
    calling agent ("agent 'x' has two tools named ..."), far from the mistake."""
    tools: list[BaseTool] = [FunctionTool(look_up), FunctionTool(look_up_again, name="look_up")]
    with pytest.raises(ConfigError, match="look_up"):
        LlmAgent(name="agent", model=FunctionModel(calling("look_up")), tools=tools)
    with pytest.raises(ConfigError, match="two tools named 'look_up'"):
        ToolServer(tools)


# --- a tool that answers nothing ---------------------------------------------------------------


def start_job(tool_context: ToolContext) -> None:
    """Starts the export job; its result comes later."""
    tool_context.state["job"] = "j1"


def answer_pending(
    tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: Any
) -> dict[str, Any] | None:
    # google-adk's pattern: a long-running tool that answered nothing is reported as pending.
    if tool_response is None:
        return {"status": "pending", "job": tool_context.state["job"]}
    return None


@pytest.mark.parametrize("long_running", [True, False])
async def test_a_tool_that_answers_nothing_reaches_the_after_tool_hooks_as_in_process(
    long_running: bool,
) -> None:
    """A served tool's ``None`` came back as ``{}``: the caller's after-tool callback read an
    empty answer where in process it reads none (and the plugins' after_tool ran, which in
    process it does not), so a callback that reports a long-running job as pending did not."""
    tools: list[BaseTool] = [FunctionTool(start_job, is_long_running=long_running)]
    outcomes = []
    for where in WHERE:
        server: ToolServer | None = None
        agent_tools: list[Any] = list(tools)
        if where == "served":
            server = ToolServer(tools)
            agent_tools = [RemoteToolset(f"127.0.0.1:{await server.start('127.0.0.1:0')}")]
        sessions = InMemorySessionService()
        runner = Runner(
            agent=LlmAgent(
                name="agent",
                model=FunctionModel(calling("start_job")),
                tools=agent_tools,
                after_tool_callback=answer_pending,
            ),
            app_name="app",
            session_service=sessions,
        )
        session = await sessions.create_session(app_name="app", user_id="u")
        responses = []
        try:
            async for event in runner.run(
                user_id="u", session_id=session.id, new_message=Content.from_text("user", "go")
            ):
                responses.extend(dict(r.response) for r in event.function_responses())
        finally:
            for tool in agent_tools:
                if isinstance(tool, RemoteToolset):
                    await tool.close()
            if server is not None:
                await server.stop(None)
        outcomes.append(responses)
    local, served = outcomes
    # (A FunctionTool answers an ordinary call's None as {}; a long-running one's stays None.)
    assert local == [{"status": "pending", "job": "j1"} if long_running else {}]
    assert served == local


# --- the kept listing is the toolset's -------------------------------------------------------


def read_count_here(tool_context: ToolContext) -> dict[str, Any]:
    """Reads the count here."""
    return {"count": tool_context.state.get("count")}


class WithALocalTool(Toolset):
    """Another toolset's tools and one of its own, as a user writes it: onto the list it got."""

    def __init__(self, inner: Toolset) -> None:
        super().__init__("with_a_local_tool")
        self.inner = inner
        self.local = FunctionTool(read_count_here)

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        tools = await self.inner.tools(ctx)
        tools.append(self.local)
        return tools


class Listed(Toolset):
    """The same tools in process, as a toolset."""

    def __init__(self, tools: list[BaseTool]) -> None:
        super().__init__("listed")
        self._tools = tools

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        return list(self._tools)


async def test_a_list_of_tools_changed_by_its_reader_leaves_the_kept_listing_alone() -> None:
    """``RemoteToolset.tools`` returned its kept listing itself: a toolset that added a tool
    to the list it got added it to the cache, so the next model request offered that tool
    twice and the agent failed ("has two tools named ..."), where over tools in process the
    same toolset works turn after turn."""
    served: list[BaseTool] = [FunctionTool(read_count)]
    server = ToolServer(served)
    toolset = RemoteToolset(f"127.0.0.1:{await server.start('127.0.0.1:0')}")
    outcomes = []
    try:
        for inner in (Listed(served), toolset):
            sessions = InMemorySessionService()
            runner = Runner(
                agent=LlmAgent(
                    name="agent",
                    model=FunctionModel(calling("read_count_here")),
                    tools=[WithALocalTool(inner)],
                ),
                app_name="app",
                session_service=sessions,
            )
            responses = []
            for _ in range(2):
                session = await sessions.create_session(
                    app_name="app", user_id="u", state={"count": 3}
                )
                async for event in runner.run(
                    user_id="u",
                    session_id=session.id,
                    new_message=Content.from_text("user", "go"),
                ):
                    responses.extend(dict(r.response) for r in event.function_responses())
            outcomes.append(responses)
    finally:
        await toolset.close()
        await server.stop(None)
    local, remote = outcomes
    assert local == [{"count": 3}, {"count": 3}]
    assert remote == local


# --- history, from a tool of a delegated run --------------------------------------------------


async def test_a_served_tool_of_a_served_agent_pages_back_past_its_window_as_a_local_one() -> None:
    """A delegated run holds a window of its caller's history and pages back through the
    caller for the rest: its local tools' ``load_events`` read the whole history, but a
    served tool of the same agent read only the window (the newest 2 events here), its
    pages answered from the window alone."""
    read: list[list[str]] = []

    async def read_history(tool_context: ToolContext) -> dict[str, Any]:
        """Reads the conversation back, three events at a time."""
        texts: list[str] = []
        before: str | None = None
        while events := await tool_context.load_events(before_event_id=before, max_events=3):
            texts[:0] = [event.text for event in events]
            before = events[0].id
        read.append(texts)
        return {"events": len(texts)}

    for where in WHERE:
        tool_server: ToolServer | None = None
        child_tools: list[Any] = [read_history]
        if where == "served":
            tool_server = ToolServer([FunctionTool(read_history)])
            child_tools = [RemoteToolset(f"127.0.0.1:{await tool_server.start('127.0.0.1:0')}")]
        child = LlmAgent(
            name="child",
            model=FunctionModel(calling("read_history")),
            tools=child_tools,
        )
        agent_server = AgentServer(child, app_name="app")
        remote_child = RemoteAgent(
            "child", f"127.0.0.1:{await agent_server.start('127.0.0.1:0')}", history_max_events=2
        )
        parent = LlmAgent(
            name="parent",
            model=FunctionModel(calling("child", {"request": "recount"})),
            tools=[AgentTool(remote_child, include_parent_history=True)],
        )
        sessions = InMemorySessionService()
        session = await sessions.create_session(app_name="app", user_id="u")
        for index in range(4):
            role, author = ("user", "user") if index % 2 == 0 else ("model", "parent")
            event = Event.new(author=author, content=Content.from_text(role, f"message {index}"))
            await sessions.append_event(session, event)
        runner = Runner(agent=parent, app_name="app", session_service=sessions)
        try:
            async for _ in runner.run(
                user_id="u", session_id=session.id, new_message=Content.from_text("user", "go")
            ):
                pass
        finally:
            await remote_child.close()
            await agent_server.stop(None)
            for tool in child_tools:
                if isinstance(tool, RemoteToolset):
                    await tool.close()
            if tool_server is not None:
                await tool_server.stop(None)
    local, served = read
    assert local[:5] == ["message 0", "message 1", "message 2", "message 3", "go"]
    assert served == local
