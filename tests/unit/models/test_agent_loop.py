"""A whole LlmAgent tool loop per provider, against its fake server over real sockets.

The model asks for a tool, the agent runs it, the result goes back in the provider's own
format, and the model answers: the same turn, with and without streaming.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from adk_mesh import Content, Event, LlmAgent, RunConfig, Runner, StreamingMode
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses

SERVERS: list[type[FakeProviderServer]] = [
    FakeGemini,
    FakeOpenAI,
    FakeOpenAIResponses,
    FakeAnthropic,
    FakeOllama,
]


def get_weather(city: str) -> dict[str, Any]:
    """The current weather in a city."""
    return {"city": city, "temp_c": 21, "sky": "clear"}


def tool_results(server: FakeProviderServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The function responses a request body carries, in the provider's own format."""
    if isinstance(server, FakeGemini):
        return [
            part["functionResponse"]
            for content in body["contents"]
            for part in content["parts"]
            if "functionResponse" in part
        ]
    if isinstance(server, FakeOpenAIResponses):
        return [
            {"id": item["call_id"], "response": json.loads(item["output"])}
            for item in body["input"]
            if item.get("type") == "function_call_output"
        ]
    if isinstance(server, FakeAnthropic):
        return [
            {"id": block["tool_use_id"], "response": json.loads(block["content"])}
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block["type"] == "tool_result"
        ]
    return [
        {"id": message.get("tool_call_id"), "response": json.loads(message["content"])}
        for message in body["messages"]
        if message["role"] == "tool"
    ]


@pytest.mark.parametrize("mode", [StreamingMode.NONE, StreamingMode.SSE], ids=["plain", "sse"])
@pytest.mark.parametrize("server_class", SERVERS, ids=[s.provider for s in SERVERS])
async def test_llm_agent_tool_loop(
    server_class: type[FakeProviderServer], mode: StreamingMode
) -> None:
    turns = [
        ScriptedTurn(
            text=["Let me ", "check."],
            tool_calls=[ScriptedToolCall("get_weather", {"city": "Lisbon"}, id="call_lis")],
            write_size=5,
        ),
        ScriptedTurn(text=["It is 21 °C ", "and clear in Lisbon."], write_size=3),
    ]
    async with server_class(*turns) as server, server.make_model() as model:
        agent = LlmAgent(
            name="weather",
            model=model,
            instruction="Answer weather questions with the tool.",
            tools=[get_weather],
        )
        sessions = InMemorySessionService()
        runner = Runner(agent=agent, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u")

        events: list[Event] = [
            event
            async for event in runner.run(
                user_id="u",
                session_id=session.id,
                new_message=Content.from_text("user", "Weather in Lisbon?"),
                run_config=RunConfig(streaming_mode=mode),
            )
        ]

    final_events = [e for e in events if not e.partial]
    call_event, response_event, answer = final_events
    (call,) = call_event.function_calls()
    assert (call.name, call.args) == ("get_weather", {"city": "Lisbon"})
    (response,) = response_event.function_responses()
    assert response.response == {"city": "Lisbon", "temp_c": 21, "sky": "clear"}
    assert response.id == call.id
    assert answer.is_final_response()
    assert answer.text == "It is 21 °C and clear in Lisbon."
    if mode is StreamingMode.SSE:
        assert (
            "".join(e.text for e in events if e.partial)
            == "Let me check.It is 21 °C and clear in Lisbon."
        )
    else:
        assert not any(e.partial for e in events)

    first, second = (request.json() for request in server.requests)
    assert "get_weather" in json.dumps(first)
    (sent,) = tool_results(server, second)
    assert sent["response"] == {"city": "Lisbon", "temp_c": 21, "sky": "clear"}
    if not isinstance(server, FakeOllama):  # Ollama has no call ids on the wire
        assert sent["id"] == "call_lis"


class Forecast(BaseModel):
    city: str
    temp_c: int


@pytest.mark.parametrize("server_class", SERVERS, ids=[s.provider for s in SERVERS])
async def test_llm_agent_output_schema_after_a_tool_call(
    server_class: type[FakeProviderServer],
) -> None:
    """The tool loop under an output_schema: every request asks for the schema, the tool runs,
    and the structured answer lands in output_key as an object (Anthropic answers by calling
    the schema's tool)."""
    answer = {"city": "Lisbon", "temp_c": 21}
    final = (
        ScriptedTurn(tool_calls=[ScriptedToolCall("Forecast", answer, id="toolu_answer")])
        if server_class is FakeAnthropic
        else ScriptedTurn(text=json.dumps(answer))
    )
    turns = [
        ScriptedTurn(tool_calls=[ScriptedToolCall("get_weather", {"city": "Lisbon"}, id="c1")]),
        final,
    ]
    async with server_class(*turns) as server, server.make_model() as model:
        agent = LlmAgent(
            name="weather",
            model=model,
            tools=[get_weather],
            output_schema=Forecast,
            output_key="forecast",
        )
        sessions = InMemorySessionService()
        runner = Runner(agent=agent, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u")
        events = [
            event
            async for event in runner.run(
                user_id="u",
                session_id=session.id,
                new_message=Content.from_text("user", "Weather in Lisbon?"),
            )
        ]
        stored = await sessions.get_session(app_name="app", user_id="u", session_id=session.id)

    assert stored is not None and stored.state["forecast"] == answer
    assert json.loads(events[-1].text) == answer
    assert events[-1].llm_response.error_code is None
    for request in server.requests:  # the schema went with every request
        assert '"temp_c": {"type": "integer"}' in json.dumps(request.json())
