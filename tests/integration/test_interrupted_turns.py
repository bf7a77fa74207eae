"""A turn that ends in the middle of a tool call — cancelled, closed, failed, out of time —
leaves no call unanswered: the Runner records an error response for it and marks the turn
interrupted, and the next turn against the fake OpenAI and Anthropic servers (which refuse an
unanswered call as the real APIs do) goes through."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import ToolError
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.runner import INTERRUPTED_CALL_ERROR, Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

FAKES = pytest.mark.parametrize("fake", [FakeOpenAI, FakeAnthropic], ids=["openai", "anthropic"])


class WatchedSessions(InMemorySessionService):
    """An in-memory store that tells when an interrupted turn was recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = asyncio.Event()

    async def append_event(self, session: Session, event: Event) -> Event:
        stored = await super().append_event(session, event)
        if event.llm_response.interrupted:
            self.interrupted.set()
        return stored


@dataclass
class SlowTool:
    """``lookup_fares`` waits until the turn is cancelled, or fails on demand."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    fail_with: ToolError | None = None

    async def lookup_fares(self, city: str) -> dict[str, Any]:
        """Look up the fares to a city."""
        self.started.set()
        if self.fail_with is not None:
            raise self.fail_with
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def scripted(call_id: str) -> list[ScriptedTurn]:
    """The model: turn 1 calls the tool; turn 2 answers."""
    return [
        ScriptedTurn(tool_calls=[ScriptedToolCall("lookup_fares", {"city": "Lisbon"}, id=call_id)]),
        ScriptedTurn(text="Sorry, the fare lookup was cut short; shall I try again?"),
    ]


def call_id_for(fake: type[FakeProviderServer]) -> str:
    return "toolu_01" if fake is FakeAnthropic else "call_01"


def user(text: str) -> Content:
    return Content.from_text("user", text)


async def first_turn(runner: Runner, session_id: str) -> AsyncIterator[Event]:
    async with aclosing(
        runner.run(user_id="u1", session_id=session_id, new_message=user("fares to Lisbon?"))
    ) as events:
        async for event in events:
            yield event


def assert_interrupted(session: Session, call_id: str, code: str) -> Event:
    """The session's last event answers the open call with an error and marks the turn."""
    last = session.events[-1]
    assert last.llm_response.interrupted
    assert last.llm_response.error_code == code
    assert last.author == "desk"
    assert [(r.name, r.id, r.response) for r in last.function_responses()] == [
        ("lookup_fares", call_id, {"error": INTERRUPTED_CALL_ERROR})
    ]
    assert session.events[-2].function_calls()[0].id == call_id
    return last


async def assert_next_turn_answers(
    runner: Runner, service: InMemorySessionService, session_id: str, server: FakeProviderServer
) -> None:
    events = [
        event
        async for event in runner.run(
            user_id="u1", session_id=session_id, new_message=user("so, any fares?")
        )
    ]
    assert events[-1].text.startswith("Sorry, the fare lookup was cut short")
    assert server.refused == []
    sent = json.dumps(server.requests[-1].json())
    assert INTERRUPTED_CALL_ERROR in sent


@FAKES
async def test_a_cancelled_turn_records_its_open_call_and_the_next_turn_works(
    fake: type[FakeProviderServer],
) -> None:
    call_id = call_id_for(fake)
    tool = SlowTool()
    service = WatchedSessions()
    async with fake(*scripted(call_id)) as server, server.make_model() as model:
        agent = LlmAgent(name="desk", model=model, tools=[tool.lookup_fares])
        runner = Runner(agent=agent, app_name="app", session_service=service)
        session = await service.create_session(app_name="app", user_id="u1")

        async def consume() -> None:
            async for _ in first_turn(runner, session.id):
                pass

        turn = asyncio.ensure_future(consume())
        await tool.started.wait()
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn  # the recording does not swallow the cancellation
        stored = await service.get_session(app_name="app", user_id="u1", session_id=session.id)
        assert stored is not None
        assert_interrupted(stored, call_id, "CANCELLED")
        await assert_next_turn_answers(runner, service, session.id, server)


@FAKES
async def test_a_turn_whose_stream_is_closed_at_the_call_records_it(
    fake: type[FakeProviderServer],
) -> None:
    call_id = call_id_for(fake)
    tool = SlowTool()
    service = WatchedSessions()
    async with fake(*scripted(call_id)) as server, server.make_model() as model:
        agent = LlmAgent(name="desk", model=model, tools=[tool.lookup_fares])
        runner = Runner(agent=agent, app_name="app", session_service=service)
        session = await service.create_session(app_name="app", user_id="u1")
        async with aclosing(
            runner.run(user_id="u1", session_id=session.id, new_message=user("fares to Lisbon?"))
        ) as events:
            async for event in events:
                if event.function_calls():
                    break  # the client goes away as soon as it sees the call
        assert not tool.started.is_set()
        stored = await service.get_session(app_name="app", user_id="u1", session_id=session.id)
        assert stored is not None
        assert_interrupted(stored, call_id, "CANCELLED")
        await assert_next_turn_answers(runner, service, session.id, server)


@FAKES
async def test_a_turn_that_fails_in_a_tool_records_the_call_with_the_error_s_reason(
    fake: type[FakeProviderServer],
) -> None:
    call_id = call_id_for(fake)
    failure = ToolError("the fares service is down")
    failure.propagate = True  # end the invocation instead of telling the model
    tool = SlowTool(fail_with=failure)
    service = WatchedSessions()
    async with fake(*scripted(call_id)) as server, server.make_model() as model:
        agent = LlmAgent(name="desk", model=model, tools=[tool.lookup_fares])
        runner = Runner(agent=agent, app_name="app", session_service=service)
        session = await service.create_session(app_name="app", user_id="u1")
        seen: list[Event] = []
        with pytest.raises(ToolError, match="the fares service is down"):
            async for event in first_turn(runner, session.id):
                seen.append(event)
        stored = await service.get_session(app_name="app", user_id="u1", session_id=session.id)
        assert stored is not None
        last = assert_interrupted(stored, call_id, "TOOL_ERROR")
        assert last.llm_response.error_message == "the turn failed: the fares service is down"
        # The caller, still reading, saw the turn marked before the error.
        assert seen[-1] == last
        await assert_next_turn_answers(runner, service, session.id, server)


# --- over gRPC: the client cancels, or the deadline passes ----------------------------------


def root_run(text: str, session_id: str) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )


@FAKES
@pytest.mark.parametrize("ending", ["cancel", "deadline"])
async def test_a_served_turn_cut_mid_call_is_recorded_and_the_next_turn_works(
    fake: type[FakeProviderServer], ending: str
) -> None:
    call_id = call_id_for(fake)
    tool = SlowTool()
    service = WatchedSessions()
    async with fake(*scripted(call_id)) as server, server.make_model() as model:
        agent = LlmAgent(name="desk", model=model, tools=[tool.lookup_fares])
        agent_server = AgentServer(agent, session_service=service)
        port = await agent_server.start("127.0.0.1:0")
        try:
            async with open_channel(f"127.0.0.1:{port}") as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                # The deadline leaves time for one fake model call and the tool to start.
                timeout = 2.0 if ending == "deadline" else 30.0
                call = stub.Run(root_run("fares to Lisbon?", "s1"), timeout=timeout)
                if ending == "cancel":
                    async for response in call:
                        if any(e.function_calls() for e in codec.run_response_events(response)):
                            await tool.started.wait()
                            call.cancel()
                            break
                    assert await call.code() == grpc.StatusCode.CANCELLED
                    expected = "CANCELLED"
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as ended:
                        async for _ in call:
                            pass
                    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                    assert tool.started.is_set()
                    expected = "DEADLINE_EXCEEDED"
                await service.interrupted.wait()
                stored = await service.get_session(app_name="desk", user_id="u1", session_id="s1")
                assert stored is not None
                assert_interrupted(stored, call_id, expected)

                answers = [
                    event
                    for response in [
                        r async for r in stub.Run(root_run("so, any fares?", "s1"), timeout=30)
                    ]
                    for event in codec.run_response_events(response)
                ]
        finally:
            await agent_server.stop(None)
    assert answers[-1].text.startswith("Sorry, the fare lookup was cut short")
    assert server.refused == []
    assert INTERRUPTED_CALL_ERROR in json.dumps(server.requests[-1].json())
