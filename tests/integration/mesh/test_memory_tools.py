"""load_memory and preload_memory in an agent behind an AgentServer, reached through a
RemoteAgent: the remote agent searches the root's memory over the delegated call (its own
service has none), and the root's Runner adds the finished turn to that memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adk_mesh import Content, LlmAgent, Runner, load_memory, preload_memory
from adk_mesh.errors import AdkIOError
from adk_mesh.memory import SqliteMemoryService
from adk_mesh.mesh import RemoteAgent
from adk_mesh.sessions import InMemorySessionService, Session
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Event
from adk_mesh.v1 import agent_pb2
from tests.integration.mesh.test_agent_service import collect, serving, stub_for, user_message


async def test_a_remote_agent_recalls_the_roots_memory(tmp_path: Path) -> None:
    memory = SqliteMemoryService(tmp_path / "memory.db")
    past = Session(
        id="last-week",
        app_name="app",
        user_id="alice",
        events=[Event.new(author="user", content=Content.from_text("user", "our boat is Heron"))],
    )
    await memory.add_session_to_memory(past)
    librarian_model = ScriptedModel(
        [call("load_memory", {"query": "boat"}), "The boat is called Heron."]
    )
    librarian = LlmAgent(
        name="librarian",
        description="Recalls past conversations.",
        model=librarian_model,
        tools=[preload_memory, load_memory],
    )
    sessions = InMemorySessionService()
    async with serving(librarian) as (server, target):
        assert server.memory_service is None
        remote = RemoteAgent("librarian", target, description="Recalls past conversations.")
        front = LlmAgent(
            name="front",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "librarian"})]),
            sub_agents=[remote],
        )
        runner = Runner(
            agent=front, app_name="app", session_service=sessions, memory_service=memory
        )
        session = await sessions.create_session(app_name="app", user_id="alice")
        try:
            events = [
                event
                async for event in runner.run(
                    user_id="alice",
                    session_id=session.id,
                    new_message=Content.from_text("user", "what is the name of our boat?"),
                )
            ]
            remembered = await memory.search_memory(app_name="app", user_id="alice", query="name")
        finally:
            await remote.close()
            await memory.close()

    first_request = librarian_model.requests[0]
    assert [tool.name for tool in first_request.tools] == ["load_memory", "transfer_to_agent"]
    instruction = first_request.system_instruction or ""
    assert "<PAST_CONVERSATIONS>" in instruction
    assert "user: our boat is Heron" in instruction
    (loaded,) = [
        response.response
        for event in events
        for response in event.function_responses()
        if response.name == "load_memory"
    ]
    assert [m["content"]["parts"][0]["text"] for m in loaded["memories"]] == ["our boat is Heron"]
    assert loaded["memories"][0]["session_id"] == "last-week"
    assert events[-1].author == "librarian"
    assert events[-1].text == "The boat is called Heron."
    # The turn, the remote agent's events included, is now in the root's memory.
    assert {entry.session_id for entry in remembered} == {session.id}
    assert "what is the name of our boat?" in [entry.content.text for entry in remembered]


async def test_an_agent_server_feeds_the_memory_it_opened_and_closes_it_on_stop(
    tmp_path: Path,
) -> None:
    agent = LlmAgent(name="helper", model=ScriptedModel(["Noted."]))
    async with serving(agent, memory_service=f"sqlite:///{tmp_path / 'memory.db'}") as (
        server,
        target,
    ):
        memory = server.memory_service
        assert isinstance(memory, SqliteMemoryService)
        async with stub_for(target) as stub:
            request = agent_pb2.RunRequest(
                root=agent_pb2.RootRun(user_id="u1", new_message=user_message("the kiln is hot"))
            )
            await collect(stub, request)
        found = await memory.search_memory(app_name="helper", user_id="u1", query="kiln")
        assert [entry.content.text for entry in found] == ["the kiln is hot"]

    with pytest.raises(AdkIOError, match="closed"):
        await memory.search_memory(app_name="helper", user_id="u1", query="kiln")


async def test_an_agent_server_closes_every_store_it_opened_from_a_url(tmp_path: Path) -> None:
    agent = LlmAgent(name="helper", model=ScriptedModel(["Noted."]))
    stores = {
        "session_service": f"sqlite:///{tmp_path / 'sessions.db'}",
        "artifact_service": "memory://",
        "memory_service": f"sqlite:///{tmp_path / 'memory.db'}",
    }
    closed: list[str] = []
    async with serving(agent, **stores) as (server, target):
        for name in stores:
            store = getattr(server, name)
            close = store.close

            async def recorded(close: Any = close, name: str = name) -> None:
                closed.append(name)
                await close()

            store.close = recorded
        async with stub_for(target) as stub:
            request = agent_pb2.RunRequest(
                root=agent_pb2.RootRun(user_id="u1", new_message=user_message("hello"))
            )
            await collect(stub, request)
        assert closed == []
    assert closed == list(stores)
    with pytest.raises(AdkIOError, match="closed"):
        await server.memory_service.search_memory(app_name="helper", user_id="u1", query="x")


async def test_stores_given_as_objects_stay_open(tmp_path: Path) -> None:
    agent = LlmAgent(name="helper", model=ScriptedModel([]))
    memory = SqliteMemoryService(tmp_path / "memory.db")
    try:
        async with serving(agent, memory_service=memory):
            pass
        assert await memory.search_memory(app_name="helper", user_id="u1", query="x") == []
    finally:
        await memory.close()
