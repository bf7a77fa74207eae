"""What a calling LlmAgent's model reads of an A2aAgent's turn: the remote agent's tool calls
and results are events authored by the A2aAgent, so the caller's history presents them as
context text (``For context: [weather] called tool ...``), as it does any other agent's — a
RemoteAgent's included — never as function calls its own model did not make. A provider that
refuses a foreign or unpaired tool call (the fake OpenAI checks the history as the real API
does) takes the request."""

from __future__ import annotations

import json

from adk_mesh import A2aAgent, InMemorySessionService, LlmAgent, Runner
from adk_mesh.mesh.a2a_server import A2aAgentServer
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.testing.fake_providers import FakeOpenAI, ScriptedToolCall, ScriptedTurn
from adk_mesh.types import Content, Event


def lookup(city: str) -> dict[str, str]:
    """The weather of a city."""
    return {"city": city, "sky": "sunny"}


async def _turn(runner: Runner, session_id: str, text: str) -> list[Event]:
    return [
        event
        async for event in runner.run(
            user_id="u1", session_id=session_id, new_message=Content.from_text("user", text)
        )
    ]


async def test_the_remote_agents_tool_calls_reach_the_callers_model_as_context_text() -> None:
    # The remote agent calls a tool with the id the caller's own transfer call will have.
    remote_model = ScriptedModel([call("lookup", {"city": "Porto"}, id="call_1"), "Sunny in Porto"])
    server = A2aAgentServer(LlmAgent(name="forecaster", model=remote_model, tools=[lookup]))
    await server.start("127.0.0.1:0")
    transfer = ScriptedToolCall("transfer_to_agent", {"agent_name": "weather"}, id="call_1")
    async with FakeOpenAI(
        ScriptedTurn(tool_calls=[transfer]), ScriptedTurn(text="Glad to help")
    ) as provider:
        weather = A2aAgent(
            "weather", f"http://127.0.0.1:{server.a2a_port}", keeps_conversation=False
        )
        async with provider.make_model() as model:
            desk = LlmAgent(name="desk", model=model, sub_agents=[weather])
            sessions = InMemorySessionService()
            runner = Runner(agent=desk, app_name="app", session_service=sessions)
            session = await sessions.create_session(app_name="app", user_id="u1")
            try:
                first = await _turn(runner, session.id, "Weather in Porto?")
                # The remote's call and result are stored as the A2aAgent's events.
                remote_calls = [
                    c for e in first if e.author == "weather" for c in e.function_calls()
                ]
                remote_results = [
                    r for e in first if e.author == "weather" for r in e.function_responses()
                ]
                assert [(c.name, c.id) for c in remote_calls] == [("lookup", "call_1")]
                assert [(r.name, r.id) for r in remote_results] == [("lookup", "call_1")]
                assert [
                    e.text for e in first if e.author == "weather" and e.text and not e.partial
                ] == ["Sunny in Porto"]
                # The next turn is the desk's again: its model reads the remote turn.
                second = await _turn(runner, session.id, "Thanks!")
                assert second[-1].author == "desk" and second[-1].text == "Glad to help"
            finally:
                await weather.close()
                await server.stop(1)
    assert not provider.refused
    messages = provider.requests[1].json()["messages"]
    calls = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]
    assert calls == ["transfer_to_agent"]  # only the call the desk's model made
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert answered == ["call_1"]  # and its answer; none for the remote's call_1
    context = "\n".join(
        part if isinstance(part, str) else part.get("text", "")
        for m in messages
        if m["role"] == "user"
        for part in (m["content"] if isinstance(m["content"], list) else [m["content"]])
    )
    assert '[weather] called tool `lookup` with parameters: {"city":"Porto"}' in context
    # The result crossed A2A as a protobuf Struct, whose keys have no order.
    returned = "[weather] `lookup` tool returned result: "
    assert returned in context
    result = context.split(returned, 1)[1].split("\n", 1)[0]
    assert json.loads(result) == {"city": "Porto", "sky": "sunny"}
    assert "[weather] said: Sunny in Porto" in context
