"""Plugins across services (real AgentServer and ToolServer on 127.0.0.1, port 0): each
service applies its own plugins to the work it does; the caller's plugins see a remote agent
as one agent and a remote tool as one tool call; nothing travels."""

from __future__ import annotations

from typing import Any

from adk_mesh import Content, LlmAgent, Runner, ToolError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.plugins import REFLECT_AND_RETRY_RESPONSE_TYPE, Plugin, ReflectAndRetryToolPlugin
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool


class Recorder(Plugin):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen: list[str] = []

    async def before_run(self, **kw: Any) -> None:
        self.seen.append("before_run")

    async def before_agent(self, *, agent: Any, callback_context: Any) -> None:
        self.seen.append(f"before_agent:{agent.name}")

    async def before_model(self, *, callback_context: Any, llm_request: Any) -> None:
        self.seen.append(f"before_model:{callback_context.agent_name}")

    async def before_tool(self, *, tool: Any, **kw: Any) -> None:
        self.seen.append(f"before_tool:{tool.name}")


async def turn(runner: Runner, text: str) -> list[Any]:
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    return [
        event
        async for event in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", text)
        )
    ]


async def test_a_served_agent_runs_under_its_servers_plugins_not_the_callers() -> None:
    def look(q: str) -> dict[str, str]:
        """Look something up."""
        return {"found": q}

    specialist = LlmAgent(
        name="specialist",
        model=ScriptedModel([call("look", {"q": "x"}), "found x"]),
        tools=[look],
    )
    served = Recorder("served")
    server = AgentServer(specialist, app_name="app", plugins=[served])
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent("specialist", f"127.0.0.1:{port}")
    try:
        desk = LlmAgent(
            name="desk",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
            sub_agents=[remote],
        )
        caller = Recorder("caller")
        runner = Runner(
            agent=desk, app_name="app", session_service=InMemorySessionService(), plugins=[caller]
        )
        events = await turn(runner, "find x")
        assert events[-1].text == "found x"
    finally:
        await remote.close()
        await server.stop(None)
    # The caller's: its own run, its agent and model; the remote agent as one agent.
    assert caller.seen == [
        "before_run",
        "before_agent:desk",
        "before_model:desk",
        "before_tool:transfer_to_agent",
        "before_agent:specialist",
    ]
    # The server's: the delegated run's agent, model and tool (a delegated run is part of the
    # caller's turn: the run hooks are the caller Runner's).
    assert served.seen == [
        "before_agent:specialist",
        "before_model:specialist",
        "before_tool:look",
        "before_model:specialist",
    ]


async def test_reflect_and_retry_on_a_tool_server_answers_for_its_tools_errors() -> None:
    attempts: list[str] = []

    def lookup(city: str) -> dict[str, str]:
        """Look up a city."""
        attempts.append(city)
        if city != "Paris":
            raise ToolError(f"unknown city {city!r}")
        return {"city": city}

    plugin = ReflectAndRetryToolPlugin(max_retries=1)
    server = ToolServer([FunctionTool(lookup)], plugins=[plugin])
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    try:
        agent = LlmAgent(
            name="agent",
            model=ScriptedModel(
                [
                    call("lookup", {"city": "Pari"}),
                    call("lookup", {"city": "Pariss"}),
                    call("lookup", {"city": "Paris"}),
                    "Paris it is",
                ]
            ),
            tools=[toolset],
        )
        runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())
        events = await turn(runner, "where?")
    finally:
        await toolset.close()
        await server.stop(None)
    responses = [e.function_responses()[0].response for e in events if e.function_responses()]
    assert responses[0]["response_type"] == REFLECT_AND_RETRY_RESPONSE_TYPE
    assert responses[0]["retry_count"] == 1
    assert responses[1] == {"error": "unknown city 'Pariss'"}  # past the bound: the error
    assert responses[2] == {"city": "Paris"}
    assert attempts == ["Pari", "Pariss", "Paris"]
