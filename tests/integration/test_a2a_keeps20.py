"""Whether an agent served over A2A keeps the conversation, carried by an A2A extension.

In one process, after an agent answered, the Runner gives the user's next turn to that agent
only if it and every agent above it keep the conversation (a workflow agent does not: the next
turn starts again from the root). A2A's AgentCard has no field for that, so an adk-mesh A2A
server declares it in ``capabilities.extensions`` and an ``A2aAgent`` follows what the card
says; a card without the extension (any other A2A server) leaves it keeping the conversation.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import pytest
from a2a.types import a2a_pb2

from adk_mesh import (
    A2aAgent,
    InMemorySessionService,
    LlmAgent,
    LoopAgent,
    ParallelAgent,
    Runner,
    SequentialAgent,
)
from adk_mesh.agents.base import BaseAgent
from adk_mesh.mesh.a2a_server import A2aAgentServer
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Event
from tests.a2a_clients import agent_card
from tests.integration.a2a_interop.plain_a2a import plain_server

# Pinned here, not imported: the URI is what other implementations read, so it must not drift.
EXTENSION_URI = "urn:adk-mesh:a2a:keeps-conversation:v1"


def _extension(card: a2a_pb2.AgentCard) -> a2a_pb2.AgentExtension | None:
    found = [e for e in card.capabilities.extensions if e.uri == EXTENSION_URI]
    assert len(found) <= 1
    return found[0] if found else None


async def _turn(runner: Runner, session_id: str, text: str) -> list[Event]:
    return [
        event
        async for event in runner.run(
            user_id="u1", session_id=session_id, new_message=Content.from_text("user", text)
        )
    ]


def _answers(events: list[Event]) -> list[tuple[str, str]]:
    """Who said what in a turn (stored events with text), errors included."""
    return [
        (event.author, event.text or f"error {event.llm_response.error_code}")
        for event in events
        if not event.partial and (event.text or event.llm_response.error_code)
    ]


def _pipeline() -> tuple[SequentialAgent, list[ScriptedModel]]:
    """A two-step workflow whose steps can answer one turn only (a second run fails)."""
    models = [ScriptedModel(["Drafted"]), ScriptedModel(["Reviewed"])]
    steps: list[BaseAgent] = [
        LlmAgent(name="draft", model=models[0]),
        LlmAgent(name="review", model=models[1]),
    ]
    return SequentialAgent(name="pipeline", sub_agents=steps), models


def _desk(pipeline: BaseAgent) -> tuple[LlmAgent, ScriptedModel]:
    model = ScriptedModel([call("transfer_to_agent", {"agent_name": "pipeline"}), "Desk again"])
    return LlmAgent(name="desk", model=model, sub_agents=[pipeline]), model


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("make_agent", "keeps"),
    [
        (lambda: _pipeline()[0], False),
        (lambda: ParallelAgent(name="fan", sub_agents=[_pipeline()[0]]), False),
        (lambda: LoopAgent(name="loop", sub_agents=[_pipeline()[0]]), False),
        (lambda: LlmAgent(name="helper", model=ScriptedModel([])), True),
        (
            lambda: LlmAgent(
                name="helper", model=ScriptedModel([]), disallow_transfer_to_parent=True
            ),
            False,
        ),
    ],
    ids=["sequential", "parallel", "loop", "llm", "llm-disallow-transfer-to-parent"],
)
async def test_the_served_card_declares_whether_the_agent_keeps_the_conversation(
    make_agent: Callable[[], BaseAgent], keeps: bool
) -> None:
    server = A2aAgentServer(make_agent())
    await server.start("127.0.0.1:0")
    try:
        assert server.a2a_port is not None
        card = await agent_card(server.a2a_port)
    finally:
        await server.stop(1)
    extension = _extension(card)
    assert extension is not None
    assert extension.required is False
    assert extension.description
    assert dict(extension.params.fields.items()).keys() == {"keeps_conversation"}
    assert extension.params.fields["keeps_conversation"].WhichOneof("kind") == "bool_value"
    assert extension.params.fields["keeps_conversation"].bool_value is keeps


async def test_after_a_served_workflow_answered_the_next_turn_goes_to_the_callers_root() -> None:
    # In one process: the workflow answers, then the next turn is the desk's again.
    local_pipeline, local_steps = _pipeline()
    local_desk, local_desk_model = _desk(local_pipeline)
    sessions = InMemorySessionService()
    runner = Runner(agent=local_desk, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u1")
    local_first = _answers(await _turn(runner, session.id, "Write it"))
    local_second = _answers(await _turn(runner, session.id, "Thanks"))
    for model in (*local_steps, local_desk_model):
        model.assert_consumed()

    # Across A2A: the same workflow served, under the same root through an A2aAgent.
    served, remote_steps = _pipeline()
    server = A2aAgentServer(served)
    await server.start("127.0.0.1:0")
    pipeline = A2aAgent("pipeline", f"http://127.0.0.1:{server.a2a_port}")
    desk, desk_model = _desk(pipeline)
    sessions = InMemorySessionService()
    runner = Runner(agent=desk, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u1")
    try:
        remote_first = _answers(await _turn(runner, session.id, "Write it"))
        remote_second = _answers(await _turn(runner, session.id, "Thanks"))
    finally:
        await pipeline.close()
        await server.stop(1)
    assert local_second == remote_second == [("desk", "Desk again")]
    # The A2aAgent stands for the whole workflow: its steps' answers are its events.
    assert local_first == [("draft", "Drafted"), ("review", "Reviewed")]
    assert [text for _, text in remote_first] == ["Drafted", "Reviewed"]
    assert {author for author, _ in remote_first} == {"pipeline"}
    assert pipeline.declared_keeps_conversation() is False  # learned from the card
    for model in (*remote_steps, desk_model):
        model.assert_consumed()


async def test_a_fresh_a2a_agent_asks_the_card_before_the_next_turn() -> None:
    """A caller that did not run the remote turn itself (a restarted process, another replica)
    reads the card when the Runner asks, before it picks who answers."""
    served, _ = _pipeline()
    server = A2aAgentServer(served)
    await server.start("127.0.0.1:0")
    url = f"http://127.0.0.1:{server.a2a_port}"
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="app", user_id="u1")
    first = A2aAgent("pipeline", url)
    second = A2aAgent("pipeline", url)
    try:
        desk, _ = _desk(first)
        await _turn(Runner(agent=desk, app_name="app", session_service=sessions), session.id, "Go")
        assert second.declared_keeps_conversation() is None
        assert second.keeps_conversation is True  # unknown yet: as an LLM agent
        desk = LlmAgent(name="desk", model=ScriptedModel(["Desk again"]), sub_agents=[second])
        runner = Runner(agent=desk, app_name="app", session_service=sessions)
        assert _answers(await _turn(runner, session.id, "Thanks")) == [("desk", "Desk again")]
        assert second.declared_keeps_conversation() is False
    finally:
        await first.close()
        await second.close()
        await server.stop(1)


async def test_an_explicit_keeps_conversation_wins_over_the_card() -> None:
    served, _ = _pipeline()
    workflow_server = A2aAgentServer(served)
    llm_server = A2aAgentServer(LlmAgent(name="helper", model=ScriptedModel([])))
    await workflow_server.start("127.0.0.1:0")
    await llm_server.start("127.0.0.1:0")
    keeping = A2aAgent(
        "pipeline", f"http://127.0.0.1:{workflow_server.a2a_port}", keeps_conversation=True
    )
    leaving = A2aAgent(
        "helper", f"http://127.0.0.1:{llm_server.a2a_port}", keeps_conversation=False
    )
    try:
        assert await keeping.load_keeps_conversation() is True
        assert await leaving.load_keeps_conversation() is False
        # Told, they do not even need the card; read it, they still say what they were told.
        assert await keeping._connect() is not None
        assert await leaving._connect() is not None
        assert keeping.keeps_conversation is True
        assert keeping.declared_keeps_conversation() is True
        assert leaving.keeps_conversation is False
        assert leaving.declared_keeps_conversation() is False
    finally:
        await keeping.close()
        await leaving.close()
        await workflow_server.stop(1)
        await llm_server.stop(1)


async def test_an_explicit_keeps_conversation_gives_the_served_workflow_the_next_turn() -> None:
    served, _ = _pipeline()
    server = A2aAgentServer(served)
    await server.start("127.0.0.1:0")
    pipeline = A2aAgent("pipeline", f"http://127.0.0.1:{server.a2a_port}", keeps_conversation=True)
    desk, _ = _desk(pipeline)
    sessions = InMemorySessionService()
    runner = Runner(agent=desk, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u1")
    try:
        await _turn(runner, session.id, "Write it")
        second = _answers(await _turn(runner, session.id, "Again"))
    finally:
        await pipeline.close()
        await server.stop(1)
    # The workflow runs again (its scripted steps have nothing left: the remote run fails).
    assert second and {author for author, _ in second} == {"pipeline"}


async def test_a_card_without_the_extension_keeps_the_conversation() -> None:
    async with plain_server() as plain:
        agent = A2aAgent("plain", plain.url)
        model = ScriptedModel([call("transfer_to_agent", {"agent_name": "plain"})])
        desk = LlmAgent(name="desk", model=model, sub_agents=[agent])
        sessions = InMemorySessionService()
        runner = Runner(agent=desk, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u1")
        try:
            first = _answers(await _turn(runner, session.id, "echo hello"))
            assert agent.declared_keeps_conversation() is None
            assert await agent.load_keeps_conversation() is True
            second = _answers(await _turn(runner, session.id, "echo again"))
        finally:
            await agent.close()
    model.assert_consumed()
    assert first[-1] == ("plain", "hello")
    assert second == [("plain", "again")]


async def test_a_card_that_cannot_be_read_leaves_the_default_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = A2aAgent("gone", f"http://127.0.0.1:{_closed_port()}")
    try:
        with caplog.at_level(logging.WARNING, logger="adk_mesh.agents.a2a"):
            assert await agent.load_keeps_conversation() is True
        assert agent.declared_keeps_conversation() is None
        assert any("keeps the conversation" in r.getMessage() for r in caplog.records)
    finally:
        await agent.close()


async def test_a_grpc_card_of_a_served_a2a_agent_says_what_the_a2a_card_says() -> None:
    # An AgentServer whose root is an A2aAgent standing for a served workflow: its own card
    # (what a caller's RemoteAgent reads) must pass on what the A2A card says before any run,
    # not the default an A2aAgent has while it knows nothing.
    from adk_mesh.mesh import AgentServer
    from tests.integration.mesh.test_remote_card18 import _describe

    pipeline, _ = _pipeline()
    a2a = A2aAgentServer(pipeline)
    await a2a.start("127.0.0.1:0")
    front = AgentServer(A2aAgent("pipeline", f"http://127.0.0.1:{a2a.a2a_port}"), app_name="app")
    port = await front.start("127.0.0.1:0")
    try:
        card = await _describe(port)
        assert card.HasField("keeps_conversation")
        assert card.keeps_conversation is False
    finally:
        await front.stop(None)
        await a2a.stop(1)
