"""Two hops, client <- A <- B: A's RemoteAgent hands B's partial events to A's response stream
as they came (mesh._relay), in order with the events A's runtime yields, and only where they
would have reached the stream unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import RunConfig, StreamingMode
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh import _relay as relay_module
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.agent_server import INLINE_EVENTS
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import Content, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc

TOKENS = 300


class TokenModel(Llm):
    def __init__(self, count: int) -> None:
        super().__init__("tokens")
        self.count = count

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncIterator[LlmResponse]:
        for i in range(self.count if stream else 0):
            yield LlmResponse(
                content=Content(role="model", parts=[Part(text=f"{i} ")]), partial=True
            )
        yield LlmResponse(content=Content.from_text("model", f"{self.count} tokens"))


@pytest.fixture
async def two_hops(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[str, Any, list[int]]]:
    forwarded: list[int] = []
    forward = relay_module.PartialRelay.forward

    async def counted(self: relay_module.PartialRelay, message: Any) -> None:
        forwarded.append(1)
        await forward(self, message)

    monkeypatch.setattr(relay_module.PartialRelay, "forward", counted)
    b = AgentServer(LlmAgent(name="talker", description="Talks.", model=TokenModel(TOKENS)))
    b_port = await b.start("127.0.0.1:0")
    a_sessions = InMemorySessionService()
    front = LlmAgent(
        name="front",
        model=FunctionModel(lambda _: call("transfer_to_agent", {"agent_name": "talker"})),
        sub_agents=[RemoteAgent("talker", f"127.0.0.1:{b_port}", description="Talks.")],
    )
    a = AgentServer(front, app_name="app", session_service=a_sessions)
    a_port = await a.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{a_port}", a_sessions, forwarded
    finally:
        await a.stop(None)
        await b.stop(None)


async def run(target: str, *, batches: bool) -> tuple[str, list[agent_pb2.RunResponse]]:
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u", new_message=codec.content_to_proto(Content.from_text("user", "talk"))
        ),
        run_config=codec.run_config_to_proto(RunConfig(streaming_mode=StreamingMode.SSE)),
        accept_event_batches=batches,
    )
    async with open_channel(target, tls=None) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        responses = [response async for response in stub.Run(request, timeout=60)]
    return responses[0].session_id, responses


@pytest.mark.parametrize("batches", [True, False])
async def test_partial_events_reach_the_client_whole_and_in_order(
    two_hops: tuple[str, Any, list[int]], batches: bool
) -> None:
    target, sessions, forwarded = two_hops
    session_id, responses = await run(target, batches=batches)
    events = [event for response in responses for event in codec.run_response_events(response)]
    authors = [(event.author, event.partial) for event in events]
    # The coordinator's transfer (call and response), every partial of B in order, its answer.
    assert authors[:2] == [("front", False), ("front", False)]
    partials = [event.text for event in events if event.partial]
    assert partials == [f"{i} " for i in range(TOKENS)]
    assert authors[-1] == ("talker", False) and events[-1].text == f"{TOKENS} tokens"
    assert len({event.id for event in events}) == len(events)
    if batches:
        # Past the first events (streamed one per response), A relayed B's partials as they
        # came, without decoding them.
        assert TOKENS - INLINE_EVENTS <= len(forwarded) <= TOKENS
    else:
        assert not forwarded
    # A stored the final events, never a partial one.
    session = await sessions.get_session(app_name="app", user_id="u", session_id=session_id)
    assert session is not None
    assert [event.partial for event in session.events] == [False] * len(session.events)
    assert [event.author for event in session.events][-1] == "talker"


async def test_a_runner_in_an_application_decodes_every_event(
    two_hops: tuple[str, Any, list[int]],
) -> None:
    target, _, forwarded = two_hops
    # A RemoteAgent to A, in a Runner of this process: A's run is a delegated one now.
    remote = RemoteAgent("front", target)
    runner = Runner(agent=remote, app_name="app", session_service=InMemorySessionService())
    try:
        session = await runner.session_service.create_session(app_name="app", user_id="u")
        events = [
            event
            async for event in runner.run(
                user_id="u",
                session_id=session.id,
                new_message=Content.from_text("user", "talk"),
                run_config=RunConfig(streaming_mode=StreamingMode.SSE),
            )
        ]
    finally:
        await remote.close()
    # Every partial reached the application as an Event with its content (A relayed its own
    # hop's partials; this process has no AgentServer stream to relay to).
    assert [event.text for event in events if event.partial] == [f"{i} " for i in range(TOKENS)]
    assert TOKENS - INLINE_EVENTS <= len(forwarded) <= TOKENS
