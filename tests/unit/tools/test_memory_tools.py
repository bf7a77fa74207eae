"""load_memory and preload_memory, with a Runner that feeds memory from finished turns."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import (
    Content,
    Event,
    LlmAgent,
    LoadMemoryTool,
    PreloadMemoryTool,
    Runner,
    load_memory,
    preload_memory,
)
from adk_mesh.errors import AdkIOError, ConfigError
from adk_mesh.memory import InMemoryMemoryService, MemoryEntry, MemoryService, SqliteMemoryService
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import InMemorySessionService, Session
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.base import BaseTool


class DownMemory(InMemoryMemoryService):
    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> list[MemoryEntry]:
        raise AdkIOError("the memory store is down")


async def turn(runner: Runner, text_: str, session_id: str | None = None) -> list[Event]:
    sessions = runner.session_service
    if session_id is None:
        session_id = (await sessions.create_session(app_name="app", user_id="alice")).id
    return [
        event
        async for event in runner.run(
            user_id="alice", session_id=session_id, new_message=Content.from_text("user", text_)
        )
    ]


def runner_for(
    tools: list[BaseTool], model: Any, memory: MemoryService | None = None
) -> tuple[Runner, MemoryService]:
    memory = memory if memory is not None else InMemoryMemoryService()
    agent = LlmAgent(name="helper", model=model, tools=tools)
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=InMemorySessionService(),
        memory_service=memory,
    )
    return runner, memory


def responses_of(events: list[Event]) -> list[dict[str, Any]]:
    return [response.response for event in events for response in event.function_responses()]


# --- load_memory ----------------------------------------------------------------------------


async def test_load_memory_finds_what_an_earlier_session_said(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            "Noted.",
            call("load_memory", {"query": "locker number"}),
            "Your locker is 318.",
        ]
    )
    runner, memory = runner_for([load_memory], model, SqliteMemoryService(tmp_path / "m.db"))
    try:
        await turn(runner, "my locker number is 318")
        events = await turn(runner, "which locker was mine?")
    finally:
        await memory.close()

    (response,) = responses_of(events)
    memories = response["memories"]
    assert memories[0]["content"] == {
        "role": "user",
        "parts": [{"text": "my locker number is 318"}],
    }
    assert memories[0]["author"] == "user"
    assert {"timestamp", "session_id"} <= set(memories[0])
    assert events[-1].text == "Your locker is 318."
    request = model.requests[1]
    assert [tool.name for tool in request.tools] == ["load_memory"]
    assert request.tools[0].parameters_schema == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to look for in past conversations."}
        },
        "required": ["query"],
    }
    assert request.system_instruction is not None
    assert "load_memory" in request.system_instruction


async def test_load_memory_without_a_memory_service_finds_nothing() -> None:
    model = ScriptedModel([call("load_memory", {"query": "anything"}), "nothing there"])
    agent = LlmAgent(name="helper", model=model, tools=[LoadMemoryTool()])
    runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())

    events = await turn(runner, "do you remember?")

    assert responses_of(events) == [{"memories": []}]


async def test_load_memory_tells_the_model_a_query_is_needed() -> None:
    model = ScriptedModel([call("load_memory", {"query": "  "}), "sorry"])
    runner, _ = runner_for([load_memory], model)

    events = await turn(runner, "do you remember?")

    (response,) = responses_of(events)
    assert "needs a query" in response["error"]


async def test_load_memory_returns_at_most_max_memories_best_first() -> None:
    memory = InMemoryMemoryService()
    past = Session(
        id="past",
        app_name="app",
        user_id="alice",
        events=[
            Event.new(author="user", content=Content.from_text("user", text_))
            for text_ in ("plum", "plum pie with plum jam", "apple pie")
        ],
    )
    await memory.add_session_to_memory(past)
    model = ScriptedModel([call("load_memory", {"query": "plum pie"}), "done"])
    runner, _ = runner_for([LoadMemoryTool(max_memories=1)], model, memory)

    events = await turn(runner, "what pie?")

    (response,) = responses_of(events)
    assert [m["content"]["parts"][0]["text"] for m in response["memories"]] == [
        "plum pie with plum jam"
    ]


def test_max_memories_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        LoadMemoryTool(max_memories=0)
    with pytest.raises(ConfigError):
        PreloadMemoryTool(max_memories=-1)


# --- preload_memory -------------------------------------------------------------------------


async def test_preload_memory_puts_the_past_conversation_into_the_request() -> None:
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> str:
        seen.append(request)
        return "Noted." if len(seen) == 1 else "You like jasmine tea."

    runner, _ = runner_for([preload_memory], FunctionModel(answer))
    await turn(runner, "my favourite tea is jasmine")
    await turn(runner, "which tea do I like?")

    first, second = seen
    assert first.system_instruction is None  # nothing in memory yet
    assert second.tools == []  # nothing to call
    instruction = second.system_instruction or ""
    assert "<PAST_CONVERSATIONS>" in instruction and "</PAST_CONVERSATIONS>" in instruction
    assert "user: my favourite tea is jasmine" in instruction
    assert "Time: " in instruction


async def test_preload_memory_adds_nothing_when_nothing_matches() -> None:
    model = ScriptedModel(["Noted.", "Hello."])
    runner, _ = runner_for([preload_memory], model)
    await turn(runner, "my favourite tea is jasmine")

    await turn(runner, "hello")

    assert model.requests[1].system_instruction is None


async def test_preload_memory_searches_before_every_model_call_of_the_turn() -> None:
    def echo(tool_context: Any) -> dict[str, str]:
        """Does nothing."""
        return {}

    model = ScriptedModel(["Noted.", call("echo"), "done"])
    runner, _ = runner_for([preload_memory, echo], model)  # type: ignore[list-item]
    await turn(runner, "the parrot is called Kiwi")

    await turn(runner, "what is the parrot called?")

    for request in model.requests[1:]:
        assert "the parrot is called Kiwi" in (request.system_instruction or "")


async def test_a_failing_memory_search_leaves_the_request_without_memories(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = ScriptedModel(["Hello."])
    runner, _ = runner_for([preload_memory], model, DownMemory())

    with caplog.at_level(logging.WARNING, logger="adk_mesh.tools"):
        events = await turn(runner, "hello")

    assert events[-1].text == "Hello."
    assert model.requests[0].system_instruction is None
    (record,) = [r for r in caplog.records if "preload_memory" in r.getMessage()]
    assert events[-1].invocation_id in record.getMessage()
    assert "the memory store is down" in record.getMessage()


async def test_a_model_that_calls_preload_memory_reads_an_error() -> None:
    model = ScriptedModel([call("preload_memory"), "oops"])
    runner, _ = runner_for([preload_memory], model)

    events = await turn(runner, "hello")

    (response,) = responses_of(events)
    assert "not a function to call" in response["error"]


async def test_both_tools_together() -> None:
    model = ScriptedModel(["Noted.", call("load_memory", {"query": "harbour"}), "At six."])
    runner, _ = runner_for([preload_memory, load_memory], model)
    await turn(runner, "the harbour opens at six")

    events = await turn(runner, "when does the harbour open?")

    request = model.requests[1]
    assert [tool.name for tool in request.tools] == ["load_memory"]
    assert "user: the harbour opens at six" in (request.system_instruction or "")
    (response,) = responses_of(events)
    assert [m["content"]["parts"][0]["text"] for m in response["memories"]] == [
        "the harbour opens at six"
    ]
