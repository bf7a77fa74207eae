"""Ollama tool-call ids: Ollama sends none, and the runtime keys calls by id.

An id derived from the call (position, name, arguments) is the same for the same call made in
a later turn, so a long-running call's answer, which names its call by id, cannot tell the two
apart: it went to the first call and left the second one unanswered. Each call gets a fresh
id instead; these tests drive a Runner against the fake Ollama server over a real socket.
"""

from __future__ import annotations

import json
import re

import pytest

from adk_mesh import Content, Event, FunctionTool, LlmAgent, Part, RunConfig, Runner, StreamingMode
from adk_mesh.models import LlmRequest
from adk_mesh.models._pairing import PENDING_CALL_RESPONSE
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.testing.fake_providers import (
    FakeOllama,
    RawReply,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.types import FinishReason, LlmResponse

CALL_ID = re.compile(r"call_[0-9a-f]{32}")
APPROVAL = ScriptedToolCall("ask_approval", {"item": "laptop"})


def ask_approval(item: str) -> None:
    """Ask a manager to approve a purchase; the answer comes later."""
    del item


async def _turn(
    runner: Runner, session_id: str, message: Content, mode: StreamingMode
) -> list[Event]:
    return [
        event
        async for event in runner.run(
            user_id="u",
            session_id=session_id,
            new_message=message,
            run_config=RunConfig(streaming_mode=mode),
        )
        if not event.partial
    ]


def _long_running_ids(events: list[Event]) -> list[str]:
    return [call_id for event in events for call_id in event.long_running_tool_ids]


@pytest.mark.parametrize("mode", [StreamingMode.NONE, StreamingMode.SSE], ids=["plain", "sse"])
async def test_a_long_running_answer_reaches_the_call_of_the_turn_it_answers(
    mode: StreamingMode,
) -> None:
    """The same long-running call made in two turns; the client answers the second turn's
    call by the id its event gave: the model must read that answer right after that call."""
    turns = [
        ScriptedTurn(tool_calls=[APPROVAL]),  # the turn then waits for the answer
        ScriptedTurn(tool_calls=[APPROVAL]),
        ScriptedTurn(text="The laptop is approved."),
    ]
    async with FakeOllama(*turns) as server, server.make_model() as model:
        agent = LlmAgent(
            name="buyer",
            model=model,
            instruction="Ask for approval with the tool.",
            tools=[FunctionTool(ask_approval, is_long_running=True)],
        )
        sessions = InMemorySessionService()
        runner = Runner(agent=agent, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u")

        first = await _turn(runner, session.id, Content.from_text("user", "Need a laptop."), mode)
        second = await _turn(runner, session.id, Content.from_text("user", "Ask again."), mode)
        (first_id,) = _long_running_ids(first)
        (second_id,) = _long_running_ids(second)
        answer = Content(
            role="user",
            parts=[Part.from_function_response("ask_approval", {"approved": True}, id=second_id)],
        )
        third = await _turn(runner, session.id, answer, mode)

    assert third[-1].text == "The laptop is approved."
    messages = server.requests[-1].json()["messages"]
    # Ollama pairs a tool message with the assistant's call just before it (no ids on the
    # wire): the answer must follow the second call, the first call stays pending.
    asks = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(asks) == 2
    first_ask, second_ask = asks
    # (With ids derived from the call, the answer went after the first call, and the
    # request ended with the second call unanswered.)
    after_second = messages[second_ask + 1 :]
    assert [(m["role"], json.loads(m["content"])) for m in after_second] == [
        ("tool", {"approved": True})
    ]
    after_first = messages[first_ask + 1]
    assert (after_first["role"], json.loads(after_first["content"])) == (
        "tool",
        PENDING_CALL_RESPONSE,
    )
    assert first_id != second_id
    assert CALL_ID.fullmatch(first_id) and CALL_ID.fullmatch(second_id)


async def _generate(server: FakeOllama, *, stream: bool) -> LlmResponse:
    request = LlmRequest(contents=[Content.from_text("user", "buy")])
    async with server.make_model() as model:
        responses = [r async for r in model.generate_content(request, stream=stream)]
    assert all(not r.content or not r.content.function_calls for r in responses[:-1])
    return responses[-1]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_each_call_gets_its_own_id_and_the_turn_ends_with_tool_calls(stream: bool) -> None:
    twice = ScriptedTurn(tool_calls=[APPROVAL, APPROVAL])
    async with FakeOllama(twice, twice) as server:
        responses = [await _generate(server, stream=stream) for _ in range(2)]

    ids = [c.id for r in responses if r.content for c in r.content.function_calls]
    assert len(ids) == 4 and len(set(ids)) == 4
    assert all(CALL_ID.fullmatch(call_id or "") for call_id in ids)
    # Ollama says done_reason "stop" after tool calls; like the other adapters, we say why.
    assert [r.finish_reason for r in responses] == [FinishReason.TOOL_CALLS] * 2


async def test_a_turn_cut_by_length_stays_max_tokens_with_calls() -> None:
    async with FakeOllama(ScriptedTurn(tool_calls=[APPROVAL], finish="length")) as server:
        response = await _generate(server, stream=True)

    assert response.finish_reason is FinishReason.MAX_TOKENS


async def test_an_id_ollama_sends_is_kept() -> None:
    body = {
        "model": "m",
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "given-1", "function": {"name": "f", "arguments": {}}}],
        },
        "done": True,
        "done_reason": "stop",
    }
    async with FakeOllama(RawReply(body=json.dumps(body).encode())) as server:
        response = await _generate(server, stream=False)

    assert response.content is not None
    assert [c.id for c in response.content.function_calls] == ["given-1"]
