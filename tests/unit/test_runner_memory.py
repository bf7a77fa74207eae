"""The Runner feeds memory: each finished turn is added; a failing store never fails a turn."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from adk_mesh import Content, Event, LlmAgent, Runner
from adk_mesh.errors import AdkIOError, ModelError
from adk_mesh.memory import InMemoryMemoryService, MemoryEntry, SqliteMemoryService
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import InMemorySessionService, Session
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from tests.telemetry_fixtures import _fresh_telemetry_configuration, spans

__all__ = ["_fresh_telemetry_configuration", "spans"]


class FailingMemory(InMemoryMemoryService):
    """Answers searches, fails every ingestion."""

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    async def add_session_to_memory(self, session: Session) -> None:
        self.attempts += 1
        raise AdkIOError("the memory store is down")


async def turn(runner: Runner, session_id: str, text: str) -> list[Event]:
    return [
        event
        async for event in runner.run(
            user_id="alice", session_id=session_id, new_message=Content.from_text("user", text)
        )
    ]


def texts(entries: list[MemoryEntry]) -> list[str]:
    return [entry.content.text for entry in entries]


async def test_each_finished_turn_lands_in_memory(tmp_path: Path) -> None:
    sessions = InMemorySessionService()
    memory = SqliteMemoryService(tmp_path / "memory.db")
    agent = LlmAgent(
        name="helper", model=ScriptedModel(["Noted: the gate code.", "Noted: the parking."])
    )
    runner = Runner(agent=agent, app_name="app", session_service=sessions, memory_service=memory)
    try:
        session = await sessions.create_session(app_name="app", user_id="alice")
        await turn(runner, session.id, "the gate code is 4411")
        after_first = await memory.search_memory(app_name="app", user_id="alice", query="gate")
        await turn(runner, session.id, "parking is on level 3")
        after_second = await memory.search_memory(
            app_name="app", user_id="alice", query="gate parking"
        )
    finally:
        await memory.close()

    assert sorted(texts(after_first)) == ["Noted: the gate code.", "the gate code is 4411"]
    assert {entry.session_id for entry in after_first} == {session.id}
    assert sorted(texts(after_second)) == [
        "Noted: the gate code.",
        "Noted: the parking.",
        "parking is on level 3",
        "the gate code is 4411",
    ]


async def test_a_failing_memory_store_does_not_fail_the_turn(
    caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    sessions = InMemorySessionService()
    memory = FailingMemory()
    agent = LlmAgent(name="helper", model=ScriptedModel(["fine"]))
    runner = Runner(agent=agent, app_name="app", session_service=sessions, memory_service=memory)
    session = await sessions.create_session(app_name="app", user_id="alice")

    with caplog.at_level(logging.WARNING, logger="adk_mesh.runner"):
        events = await turn(runner, session.id, "hello")

    assert [event.text for event in events] == ["fine"]
    assert memory.attempts == 1
    invocation_id = events[0].invocation_id
    (record,) = [r for r in caplog.records if "to memory" in r.getMessage()]
    assert invocation_id in record.getMessage()
    assert "the memory store is down" in record.getMessage()
    (span,) = [s for s in spans.get_finished_spans() if s.name == "add_session_to_memory app"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["adk_mesh.invocation_id"] == invocation_id
    assert span.attributes["error.type"] == "AdkIOError"
    assert span.attributes["adk_mesh.memory.service"] == "FailingMemory"


async def test_a_turn_added_to_memory_is_traced_after_the_turn(
    spans: InMemorySpanExporter,
) -> None:
    sessions = InMemorySessionService()
    agent = LlmAgent(name="helper", model=ScriptedModel(["fine"]))
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=sessions,
        memory_service=InMemoryMemoryService(),
    )
    session = await sessions.create_session(app_name="app", user_id="alice")

    await turn(runner, session.id, "hello")

    names = [s.name for s in spans.get_finished_spans()]
    assert names[-2:] == ["invoke_workflow app", "add_session_to_memory app"]
    memory_span = spans.get_finished_spans()[-1]
    assert memory_span.status.status_code is StatusCode.UNSET


async def test_add_turns_to_memory_false_keeps_memory_for_searches_only() -> None:
    sessions = InMemorySessionService()
    memory = InMemoryMemoryService()
    agent = LlmAgent(name="helper", model=ScriptedModel(["fine"]))
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=sessions,
        memory_service=memory,
        add_turns_to_memory=False,
    )
    session = await sessions.create_session(app_name="app", user_id="alice")

    await turn(runner, session.id, "hello there")

    assert await memory.search_memory(app_name="app", user_id="alice", query="hello") == []


async def test_a_failed_turn_is_not_added_and_the_next_one_adds_it_all() -> None:
    sessions = InMemorySessionService()
    memory = InMemoryMemoryService()

    def answer(request: LlmRequest) -> str:
        if "penguin" in request.contents[-1].text:
            raise ModelError("the provider is down")
        return "an answer"

    agent = LlmAgent(name="helper", model=FunctionModel(answer))
    runner = Runner(agent=agent, app_name="app", session_service=sessions, memory_service=memory)
    session = await sessions.create_session(app_name="app", user_id="alice")

    await turn(runner, session.id, "walrus question")
    with pytest.raises(ModelError):
        await turn(runner, session.id, "penguin question")
    assert texts(await memory.search_memory(app_name="app", user_id="alice", query="penguin")) == []

    await turn(runner, session.id, "narwhal question")

    found = await memory.search_memory(app_name="app", user_id="alice", query="question")
    assert sorted(texts(found)) == ["narwhal question", "penguin question", "walrus question"]


async def test_a_cancelled_turn_is_not_added_and_breaks_nothing() -> None:
    sessions = InMemorySessionService()
    memory = InMemoryMemoryService()
    started = asyncio.Event()

    async def wait_forever() -> dict[str, str]:
        """Waits."""
        started.set()
        await asyncio.Event().wait()
        return {}

    agent = LlmAgent(
        name="helper",
        model=ScriptedModel([call("wait_forever"), "after the wait"]),
        tools=[wait_forever],
    )
    runner = Runner(agent=agent, app_name="app", session_service=sessions, memory_service=memory)
    session = await sessions.create_session(app_name="app", user_id="alice")

    running = asyncio.ensure_future(turn(runner, session.id, "cancel this pelican turn"))
    await started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert await memory.search_memory(app_name="app", user_id="alice", query="pelican") == []

    await turn(runner, session.id, "a new pelican turn")

    found = await memory.search_memory(app_name="app", user_id="alice", query="pelican")
    assert sorted(texts(found)) == ["a new pelican turn", "cancel this pelican turn"]
