"""Anthropic's server-tool blocks kept as parts and sent back, and ``pause_turn`` continued
within the model call, against the fake Messages API (which refuses a result block without
its ``server_tool_use`` and a request that does not continue a paused turn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import RunConfig, StreamingMode
from adk_mesh.errors import ModelError
from adk_mesh.models import BuiltinTool, LlmRequest
from adk_mesh.models.anthropic import MAX_PAUSE_CONTINUATIONS
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import SessionService
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    ScriptedCodeRun,
    ScriptedPausedTurn,
    ScriptedSource,
    ScriptedTurn,
    ScriptedWebSearch,
)
from adk_mesh.tools import CodeExecutionTool, WebSearchTool
from adk_mesh.types import Content, Event, FinishReason, LlmResponse, Part, UsageMetadata

APP, USER = "claude-tools", "ada"
SEARCH = ScriptedWebSearch(
    "population of Oslo", [ScriptedSource("https://ssb.example/oslo", "SSB")]
)
CODE = ScriptedCodeRun("echo $((717710 / 1000))", "717\n")
MODES = pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])


def search_blocks(use_id: str) -> list[dict[str, Any]]:
    """What the fake sends for SEARCH (and the API must get back verbatim)."""
    return [
        {
            "type": "server_tool_use",
            "id": use_id,
            "name": "web_search",
            "input": {"query": "population of Oslo"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": use_id,
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://ssb.example/oslo",
                    "title": "SSB",
                    "encrypted_content": "RW5jcnlwdGVkIHBhZ2U=",
                    "page_age": None,
                }
            ],
        },
    ]


def code_blocks(use_id: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "server_tool_use",
            "id": use_id,
            "name": "bash_code_execution",
            "input": {"command": "echo $((717710 / 1000))"},
        },
        {
            "type": "bash_code_execution_tool_result",
            "tool_use_id": use_id,
            "content": {
                "type": "bash_code_execution_result",
                "stdout": "717\n",
                "stderr": "",
                "return_code": 0,
                "content": [],
            },
        },
    ]


async def run_turn(
    agent: LlmAgent, sessions: SessionService, session_id: str, text: str, *, stream: bool
) -> list[Event]:
    runner = Runner(agent=agent, app_name=APP, session_service=sessions)
    mode = StreamingMode.SSE if stream else StreamingMode.NONE
    return [
        event
        async for event in runner.run(
            user_id=USER,
            session_id=session_id,
            new_message=Content.from_text("user", text),
            run_config=RunConfig(streaming_mode=mode),
        )
    ]


def researcher(model: Any) -> LlmAgent:
    return LlmAgent(name="researcher", model=model, tools=[WebSearchTool(), CodeExecutionTool()])


async def generate(server: FakeAnthropic, *, stream: bool) -> list[LlmResponse]:
    request = LlmRequest(
        contents=[Content.from_text("user", "How many people live in Oslo?")],
        builtin_tools=[BuiltinTool.WEB_SEARCH, BuiltinTool.CODE_EXECUTION],
    )
    async with server.make_model() as model:
        return [r async for r in model.generate_content(request, stream=stream)]


# --- the blocks kept and sent back ----------------------------------------------------------


@MODES
async def test_server_tool_blocks_round_trip_through_a_runner_over_two_turns(
    stream: bool,
) -> None:
    turns = [
        ScriptedTurn(text="Oslo has 717,710 people.", native=[SEARCH, CODE]),
        ScriptedTurn(text="Bergen has fewer."),
    ]
    async with FakeAnthropic(*turns) as server, server.make_model() as model:
        sessions = InMemorySessionService()
        session = await sessions.create_session(app_name=APP, user_id=USER)
        first = await run_turn(researcher(model), sessions, session.id, "Oslo?", stream=stream)
        await run_turn(researcher(model), sessions, session.id, "And Bergen?", stream=stream)

    assert server.refused == []
    final = first[-1]
    assert final.content is not None
    assert [part.kind for part in final.content.parts] == [
        "server_tool_call",
        "server_tool_response",
        "server_tool_call",
        "server_tool_response",
        "text",
    ]
    call, answer = final.content.parts[0], final.content.parts[1]
    assert call.server_tool_call is not None and answer.server_tool_response is not None
    assert call.server_tool_call.tool_type == "web_search"
    assert call.server_tool_call.args == {"query": "population of Oslo"}
    assert answer.server_tool_response.tool_type == "web_search_tool_result"
    assert answer.server_tool_response.id == call.server_tool_call.id == "srvtoolu_0100"
    assert set(answer.server_tool_response.response) == {"content"}
    # The grounding stays as it was.
    assert final.grounding_metadata is not None
    assert final.grounding_metadata.queries == ["population of Oslo"]
    assert [c.code for c in final.grounding_metadata.code_executions] == [CODE.code]
    # The second request carries the blocks back, unchanged and in place.
    messages = server.requests[1].json()["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": [
            *search_blocks("srvtoolu_0100"),
            *code_blocks("srvtoolu_0101"),
            {"type": "text", "text": "Oslo has 717,710 people."},
        ],
    }
    assert messages[2] == {"role": "user", "content": [{"type": "text", "text": "And Bergen?"}]}


async def test_a_reloaded_sqlite_session_still_sends_the_blocks_back(tmp_path: Path) -> None:
    turns = [ScriptedTurn(text="Oslo: 717,710.", native=[SEARCH]), ScriptedTurn(text="Bergen: ?")]
    database = str(tmp_path / "sessions.db")
    async with FakeAnthropic(*turns) as server, server.make_model() as model:
        sessions = SqliteSessionService(database)
        try:
            session = await sessions.create_session(app_name=APP, user_id=USER)
            await run_turn(researcher(model), sessions, session.id, "Oslo?", stream=True)
        finally:
            await sessions.close()
        reopened = SqliteSessionService(database)
        try:
            await run_turn(researcher(model), reopened, session.id, "And Bergen?", stream=False)
        finally:
            await reopened.close()

    assert server.refused == []
    assert server.requests[1].json()["messages"][1]["content"] == [
        *search_blocks("srvtoolu_0100"),
        {"type": "text", "text": "Oslo: 717,710."},
    ]


def mixed_history() -> list[Content]:
    """One conversation holding Gemini's server-tool parts and Claude's (and a Claude-style
    pair of a tool the adapter does not know)."""
    return [
        Content.from_text("user", "Oslo?"),
        Content(
            role="model",
            parts=[
                Part.from_server_tool_call("GOOGLE_SEARCH_WEB", {"queries": ["oslo"]}, id="g-1"),
                Part.from_server_tool_response("GOOGLE_SEARCH_WEB", {"results": []}, id="g-1"),
                Part.from_server_tool_call("web_search", {"query": "oslo"}, id="srvtoolu_1"),
                Part.from_server_tool_response(
                    "web_search_tool_result",
                    {"content": [{"type": "web_search_result", "encrypted_content": "X=="}]},
                    id="srvtoolu_1",
                ),
                Part.from_server_tool_call("tool_search_tool_regex", {}, id="srvtoolu_2"),
                Part.from_server_tool_response("tool_search_tool_result", {}, id="srvtoolu_2"),
                Part.from_text("717,710."),
            ],
        ),
        Content.from_text("user", "And Bergen?"),
    ]


async def test_each_provider_sends_back_only_its_own_server_tool_parts() -> None:
    request = LlmRequest(contents=mixed_history())
    async with FakeAnthropic(ScriptedTurn(text="?")) as claude, claude.make_model() as model:
        [_ async for _ in model.generate_content(request)]
    async with FakeGemini(ScriptedTurn(text="?")) as gemini, gemini.make_model() as model:
        [_ async for _ in model.generate_content(request)]

    assert claude.refused == [] and gemini.refused == []
    assert claude.requests[0].json()["messages"][1]["content"] == [
        {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {"query": "oslo"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [{"type": "web_search_result", "encrypted_content": "X=="}],
        },
        {"type": "text", "text": "717,710."},
    ]
    assert gemini.requests[0].json()["contents"][1]["parts"] == [
        {"toolCall": {"args": {"queries": ["oslo"]}, "toolType": "GOOGLE_SEARCH_WEB", "id": "g-1"}},
        {
            "toolResponse": {
                "response": {"results": []},
                "toolType": "GOOGLE_SEARCH_WEB",
                "id": "g-1",
            }
        },
        {"text": "717,710."},
    ]


async def test_the_fake_refuses_a_server_tool_result_without_its_use() -> None:
    history = [
        Content.from_text("user", "Oslo?"),
        Content(
            role="model",
            parts=[
                Part.from_server_tool_response(
                    "web_search_tool_result", {"content": []}, id="srvtoolu_9"
                ),
                Part.from_text("717,710."),
            ],
        ),
        Content.from_text("user", "And Bergen?"),
    ]
    async with FakeAnthropic(ScriptedTurn(text="?")) as server, server.make_model() as model:
        with pytest.raises(ModelError, match="no corresponding `server_tool_use`") as raised:
            [_ async for _ in model.generate_content(LlmRequest(contents=history))]

    assert raised.value.status_code == 400
    assert len(server.refused) == 1


# --- pause_turn -----------------------------------------------------------------------------


@MODES
async def test_a_paused_turn_is_continued_within_the_call(stream: bool) -> None:
    turns = [
        ScriptedPausedTurn(text="Searching. ", native=[SEARCH], input_tokens=100, output_tokens=20),
        ScriptedTurn(text="Oslo has 717,710.", native=[CODE], input_tokens=150, output_tokens=30),
    ]
    async with FakeAnthropic(*turns) as server:
        responses = await generate(server, stream=stream)

    assert server.refused == []
    first, second = (request.json() for request in server.requests)
    paused = [*search_blocks("srvtoolu_0100"), {"type": "text", "text": "Searching. "}]
    assert second["messages"] == [*first["messages"], {"role": "assistant", "content": paused}]
    assert second["tools"] == first["tools"]
    final = responses[-1]
    assert not final.partial and final.content is not None
    assert [part.kind for part in final.content.parts] == [
        "server_tool_call",
        "server_tool_response",
        "text",
        "server_tool_call",
        "server_tool_response",
        "text",
    ]
    assert final.content.text == "Searching. Oslo has 717,710."
    assert final.finish_reason is FinishReason.STOP
    assert final.usage_metadata == UsageMetadata(
        prompt_token_count=250, candidates_token_count=50, total_token_count=300
    )
    assert final.grounding_metadata is not None
    assert final.grounding_metadata.queries == ["population of Oslo"]
    assert [c.code for c in final.grounding_metadata.code_executions] == [CODE.code]
    if stream:
        partials = [r.content.text for r in responses[:-1] if r.content is not None]
        assert all(r.partial for r in responses[:-1])
        assert "".join(partials) == final.content.text
    else:
        assert len(responses) == 1


@MODES
async def test_a_turn_paused_past_the_bound_is_a_model_error(stream: bool) -> None:
    pauses = [ScriptedPausedTurn(text=f"step {n}. ") for n in range(MAX_PAUSE_CONTINUATIONS + 2)]
    async with FakeAnthropic(*pauses) as server:
        with pytest.raises(ModelError, match=f"after {MAX_PAUSE_CONTINUATIONS} continuations"):
            await generate(server, stream=stream)

    assert server.refused == []
    assert len(server.requests) == MAX_PAUSE_CONTINUATIONS + 1
    # Each continuation carries all the paused content so far.
    last = server.requests[-1].json()["messages"][-1]
    assert last["role"] == "assistant"
    assert [block["text"] for block in last["content"]] == [
        f"step {n}. " for n in range(MAX_PAUSE_CONTINUATIONS)
    ]


async def test_the_fake_refuses_a_request_that_does_not_continue_a_paused_turn() -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "Oslo?"}],
    }
    async with FakeAnthropic(ScriptedPausedTurn(text="Searching."), ScriptedTurn(text="?")) as (
        server
    ):
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            paused = await client.post("/v1/messages", json=body)
            fresh = await client.post("/v1/messages", json=body)

    assert paused.json()["stop_reason"] == "pause_turn"
    assert fresh.status_code == 400
    assert "pause_turn" in fresh.json()["error"]["message"]
