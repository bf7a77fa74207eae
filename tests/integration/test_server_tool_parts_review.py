"""Review of the server-tool parts (``server_tool_call`` / ``server_tool_response``) across the
paths that read parts: against the fake providers over real sockets and a real AgentServer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.memory import InMemoryMemoryService
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedSource,
    ScriptedToolCall,
    ScriptedTurn,
    ScriptedWebSearch,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.tools import LoadMemoryTool, WebSearchTool
from adk_mesh.types import Content, Event, Part

APP, USER = "server-tools-review", "ada"

#: A search result larger than an abridged view carries per part (ABRIDGED_PART_BYTES).
LARGE_TITLE = "Statistics Norway, population tables " * 600


@pytest.fixture(autouse=True)
def empty_caches() -> None:
    for cache in (codec.ENCODED_EVENTS, codec.VIEW_MEMOS, codec.DECODED_EVENTS):
        cache.clear()


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    turns = [
        ScriptedTurn(
            text="Oslo has 717,710 people.",
            native=[
                ScriptedWebSearch(
                    "population of Oslo", [ScriptedSource("https://ssb.example/oslo", LARGE_TITLE)]
                )
            ],
        ),
        ScriptedTurn(text="Bergen has fewer."),
    ]
    async with FakeAnthropic(*turns) as server:
        yield server


async def run_turn(runner: Runner, session_id: str, text: str) -> list[Event]:
    return [
        event
        async for event in runner.run(
            user_id=USER, session_id=session_id, new_message=Content.from_text("user", text)
        )
    ]


async def test_a_large_claude_search_result_abridged_in_a_delegated_view_is_left_out(
    claude: FakeAnthropic,
) -> None:
    # The view of the second turn is too small for the first answer whole: it goes abridged.
    # Its web_search_tool_result became {"omitted": ...} without its content, which the
    # Messages API refuses (400) on every later turn of the remote agent.
    async with claude.make_model() as model:
        server = AgentServer(LlmAgent(name="researcher", model=model, tools=[WebSearchTool()]))
        port = await server.start("127.0.0.1:0")
        agent = RemoteAgent("researcher", f"127.0.0.1:{port}", history_max_bytes=12_000)
        try:
            sessions = InMemorySessionService()
            runner = Runner(agent=agent, app_name=APP, session_service=sessions)
            session = await sessions.create_session(app_name=APP, user_id=USER)
            first = await run_turn(runner, session.id, "Oslo?")
            second = await run_turn(runner, session.id, "And Bergen?")
        finally:
            await agent.close()
            await server.stop(0)

    assert claude.refused == []
    answer = first[-1]
    assert answer.content is not None
    assert [part.kind for part in answer.content.parts] == [
        "server_tool_call",
        "server_tool_response",
        "text",
    ]
    assert second[-1].text == "Bergen has fewer."
    messages = claude.requests[1].json()["messages"]
    # The pair is left out; the answer it grounded stays.
    assert messages[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Oslo has 717,710 people."}],
    }


def test_abridging_leaves_out_both_parts_of_a_large_server_tool_pair_only() -> None:
    large = {"content": [{"type": "web_search_result", "title": LARGE_TITLE}]}
    content = Content(
        role="model",
        parts=[
            Part.from_server_tool_call("web_search", {"query": "oslo"}, id="srvtoolu_1"),
            Part.from_server_tool_response("web_search_tool_result", large, id="srvtoolu_1"),
            Part.from_server_tool_call("web_search", {"query": "bergen"}, id="srvtoolu_2"),
            Part.from_server_tool_response("web_search_tool_result", {"content": []}, "srvtoolu_2"),
            Part(text="Oslo is larger."),
        ],
    )
    event = Event.new(author="researcher", content=content)
    abridged = codec.abridged_event(event)

    assert abridged.content is not None
    kept: list[Any] = [
        (part.kind, (part.server_tool_call or part.server_tool_response or part).id)
        if part.is_server_tool
        else (part.kind, part.text)
        for part in abridged.content.parts
    ]
    assert kept == [
        ("server_tool_call", "srvtoolu_2"),
        ("server_tool_response", "srvtoolu_2"),
        ("text", "Oslo is larger."),
    ]
    assert abridged.llm_response == event.llm_response.model_copy(
        update={"content": abridged.content}
    )


def mixed_user_turn() -> Content:
    """A user turn holding both providers' server-tool parts (a session's initial events, as
    a gateway client may create them, keep what they are given)."""
    return Content(
        role="user",
        parts=[
            Part(text="Earlier:"),
            Part.from_server_tool_call("GOOGLE_SEARCH_WEB", {"queries": ["oslo"]}, id="g-1"),
            Part.from_server_tool_response("GOOGLE_SEARCH_WEB", {"results": []}, id="g-1"),
            Part.from_server_tool_call("web_search", {"query": "oslo"}, id="srvtoolu_9"),
            Part.from_server_tool_response("web_search_tool_result", {"content": []}, "srvtoolu_9"),
        ],
    )


@pytest.mark.parametrize("provider", [FakeOpenAI, FakeOpenAIResponses, FakeOllama])
async def test_a_user_turn_holding_server_tool_parts_reaches_every_provider(
    provider: type[FakeProviderServer],
) -> None:
    # Anthropic left them out of a user turn, Gemini sent them; Chat Completions, Responses
    # and Ollama failed the run ("cannot carry ... server_tool_call").
    async with provider(ScriptedTurn(text="Oslo.")) as server, server.make_model() as model:
        sessions = InMemorySessionService()
        session = await sessions.create_session(app_name=APP, user_id=USER)
        await sessions.append_event(session, Event.new(author="user", content=mixed_user_turn()))
        runner = Runner(
            agent=LlmAgent(name="helper", model=model), app_name=APP, session_service=sessions
        )
        events = await run_turn(runner, session.id, "Which city?")

    assert server.refused == []
    assert events[-1].text == "Oslo."
    sent = json.dumps(server.requests[0].json())
    assert "Earlier:" in sent and "Which city?" in sent
    assert "GOOGLE_SEARCH_WEB" not in sent and "srvtoolu_9" not in sent


async def test_load_memory_answers_a_grounded_answer_without_the_providers_search_blocks() -> None:
    # The remembered turn held Claude's server_tool_use / web_search_tool_result parts: they
    # went to the model as a memory (encrypted page content and all), where "For context"
    # and preload_memory give only the answer.
    turns = [
        ScriptedTurn(
            text="Oslo has 717,710 people.",
            native=[
                ScriptedWebSearch(
                    "population of Oslo", [ScriptedSource("https://ssb.example/oslo", "SSB")]
                )
            ],
        ),
        ScriptedTurn(tool_calls=[ScriptedToolCall("load_memory", {"query": "Oslo"})]),
        ScriptedTurn(text="You asked about Oslo: 717,710 people."),
    ]
    memory = InMemoryMemoryService()
    async with FakeAnthropic(*turns) as server, server.make_model() as model:
        sessions = InMemorySessionService()
        agent = LlmAgent(name="researcher", model=model, tools=[WebSearchTool(), LoadMemoryTool()])
        runner = Runner(agent=agent, app_name=APP, session_service=sessions, memory_service=memory)
        first = await sessions.create_session(app_name=APP, user_id=USER)
        await run_turn(runner, first.id, "How many people live in Oslo?")
        later = await sessions.create_session(app_name=APP, user_id=USER)
        events = await run_turn(runner, later.id, "What did I ask about Oslo?")

    assert server.refused == []
    assert events[-1].text == "You asked about Oslo: 717,710 people."
    (loaded,) = [
        response.response
        for event in events
        for response in event.function_responses()
        if response.name == "load_memory"
    ]
    answers = [m for m in loaded["memories"] if m.get("author") == "researcher"]
    assert [m["content"]["parts"] for m in answers] == [[{"text": "Oslo has 717,710 people."}]]
    sent = json.dumps(server.requests[2].json()["messages"][-1])
    assert "encrypted_content" not in sent and "srvtoolu" not in sent
