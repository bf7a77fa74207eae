"""Opt-in event batching on the Run stream: order, completeness, errors, early close."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from adk_mesh import Content, LlmAgent, RunConfig, StreamingMode
from adk_mesh.codec import run_response_events
from adk_mesh.errors import ToolError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh.agent_server import INLINE_EVENTS, _responses
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.types import Event, LlmResponse, Part


def numbered(count: int) -> list[Event]:
    return [Event.new(author="a", content=Content.from_text("model", str(i))) for i in range(count)]


async def test_events_ready_together_travel_in_one_response() -> None:
    queued = asyncio.Event()
    source_events = numbered(100)

    async def source() -> AsyncGenerator[Event, None]:
        for event in source_events:
            yield event
        queued.set()

    responses = _responses(source(), session_id="s1", batches=True)
    # The first events go one per response, read as the client reads (no task for a short run).
    inline = [await anext(responses) for _ in range(INLINE_EVENTS)]
    assert [len(run_response_events(r)) for r in inline] == [1] * INLINE_EVENTS
    assert not queued.is_set()
    first = await anext(responses)
    await queued.wait()
    rest = [response async for response in responses]
    # Then the run goes on ahead of the client, and whatever was ready when a response was due
    # went into it: here, at most two responses.
    assert len(rest) <= 1
    assert inline[0].session_id == "s1"
    assert all(not r.session_id for r in (*inline[1:], first, *rest))
    assert all(len(r.events) != 1 for r in (*inline, first, *rest))  # one event: in `event`
    received = [e for r in (*inline, first, *rest) for e in run_response_events(r)]
    assert [e.id for e in received] == [e.id for e in source_events]


async def test_without_batches_every_event_has_its_own_response() -> None:
    async def source() -> AsyncGenerator[Event, None]:
        for event in numbered(5):
            yield event

    responses = [r async for r in _responses(source(), session_id="s", batches=False)]
    assert [len(run_response_events(r)) for r in responses] == [1] * 5
    assert [r.session_id for r in responses] == ["s", "", "", "", ""]
    assert all(not r.events for r in responses)


async def test_a_failing_run_delivers_its_events_then_its_error() -> None:
    async def source() -> AsyncGenerator[Event, None]:
        for event in numbered(3):
            yield event
        raise ToolError("broke after three")

    received: list[Event] = []
    with pytest.raises(ToolError, match="broke after three"):
        async for response in _responses(source(), session_id="", batches=True):
            received.extend(run_response_events(response))
    assert len(received) == 3


async def test_closing_the_stream_early_closes_the_run() -> None:
    closed = asyncio.Event()

    async def source() -> AsyncGenerator[Event, None]:
        try:
            for event in numbered(10_000):
                yield event
        finally:
            closed.set()

    responses = _responses(source(), session_id="", batches=True)
    await anext(responses)
    await responses.aclose()
    assert closed.is_set()


class TokenModel(Llm):
    """Streams ``count`` one-token partials, then the whole text."""

    def __init__(self, count: int) -> None:
        super().__init__("tokens")
        self.count = count

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncIterator[LlmResponse]:
        for i in range(self.count):
            yield LlmResponse(
                content=Content(role="model", parts=[Part(text=f"{i} ")]), partial=True
            )
        text = "".join(f"{i} " for i in range(self.count))
        yield LlmResponse(content=Content.from_text("model", text), turn_complete=True)


async def test_streamed_partials_arrive_complete_and_in_order_through_a_remote_hop() -> None:
    server = AgentServer(LlmAgent(name="talker", model=TokenModel(500)))
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent("talker", f"127.0.0.1:{port}")
    try:
        root = LlmAgent(
            name="front",
            model=TokenModel(0),
            sub_agents=[remote],
            before_model_callback=lambda ctx, request: LlmResponse(
                content=Content(
                    role="model",
                    parts=[Part.from_function_call("transfer_to_agent", {"agent_name": "talker"})],
                )
            ),
        )
        service = InMemorySessionService()
        session = await service.create_session(app_name="app", user_id="u")
        runner = Runner(agent=root, app_name="app", session_service=service)
        events = [
            event
            async for event in runner.run(
                user_id="u",
                session_id=session.id,
                new_message=Content.from_text("user", "talk"),
                run_config=RunConfig(streaming_mode=StreamingMode.SSE),
            )
        ]
        partials = [e.text for e in events if e.partial and e.author == "talker"]
        assert partials == [f"{i} " for i in range(500)]
        assert events[-1].author == "talker" and events[-1].text == "".join(partials)
    finally:
        await remote.close()
        await server.stop(None)
